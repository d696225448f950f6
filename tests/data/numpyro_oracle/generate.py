# SPDX-License-Identifier: MIT
"""Compute the NumPyro NUTS oracle of tests/producers/test_posterior_oracle.py ONCE (see README.md).

    python tests/data/numpyro_oracle/generate.py tests/data/numpyro_oracle [/tmp/numpyro_draws.npy]

Bayesian softmax regression on scikit-learn's bundled digits: features standardised with the training rows' mean
and standard deviation (1 where it is 0), weights W (64 + 1, 10) with the bias as the last row, prior
N(0, 1 / TAU) on every entry, categorical likelihood of the training labels. This file does not import ubench.
"""

import json
import sys
import time
from pathlib import Path

import numpy as np

N_TRAIN, N_TEST, TAU = 300, 200, 1.0
CHAINS, WARMUP, SAMPLES = 4, 1000, 5000


def data():
    """(x_train, y_train, x_test, y_test, train indices, test indices): a seeded split of load_digits."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    idx = np.random.default_rng(0).permutation(len(y))
    train, test = idx[:N_TRAIN], idx[N_TRAIN:N_TRAIN + N_TEST]
    mean, std = x[train].mean(0), x[train].std(0)
    std[std == 0] = 1.0
    x = (x - mean) / std
    return x[train], y[train], x[test], y[test], train, test


def main(out: Path) -> None:
    import arviz
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS

    jax.config.update("jax_enable_x64", True)
    xtr, ytr, xte, yte, train, test = data()
    d = xtr.shape[1] + 1

    def model(x, y):
        w = numpyro.sample("w", dist.Normal(0.0, TAU ** -0.5).expand([d, 10]).to_event(2))
        logits = x @ w[:-1] + w[-1]
        numpyro.sample("y", dist.Categorical(logits=logits), obs=y)

    mcmc = MCMC(NUTS(model, target_accept_prob=0.8), num_warmup=WARMUP, num_samples=SAMPLES, num_chains=CHAINS,
                chain_method="sequential", progress_bar=False)
    started = time.time()
    mcmc.run(jax.random.PRNGKey(20261127), jnp.asarray(xtr), jnp.asarray(ytr))
    seconds = time.time() - started
    w = np.asarray(mcmc.get_samples(group_by_chain=True)["w"], dtype=np.float64)  # (chains, draws, d, 10)
    if len(sys.argv) > 2:  # keep the raw draws outside the repository too (they are 100 MB)
        np.save(sys.argv[2], w)
    theta = w.reshape(CHAINS, SAMPLES, d * 10)
    logits = np.einsum("nk,cskj->csnj", xte, w[:, :, :-1]) + w[:, :, None, -1]
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)  # (chains, draws, N_TEST, 10)
    pred = probs.reshape(CHAINS, SAMPLES, N_TEST * 10)

    def mcse(draws, method):
        one = arviz.convert_to_dataset({"v": draws})  # (chain, draw, k): one variable of k coordinates
        return np.asarray(arviz.mcse(one, method=method)["v"].values, dtype=np.float64)

    dataset = arviz.convert_to_dataset({"v": theta})
    rhat = float(np.nanmax(arviz.rhat(dataset, method="rank")["v"].values))
    ess = float(np.nanmin(arviz.ess(dataset, method="bulk")["v"].values))
    np.savez_compressed(
        out / "oracle.npz",
        train_index=train, test_index=test,
        theta_mean=theta.mean((0, 1)), theta_mean_se=mcse(theta, "mean"),
        theta_sd=theta.reshape(-1, d * 10).std(0, ddof=1), theta_sd_se=mcse(theta, "sd"),
        pred_mean=pred.mean((0, 1)).reshape(N_TEST, 10), pred_mean_se=mcse(pred, "mean").reshape(N_TEST, 10),
    )
    info = {"numpyro": numpyro.__version__, "jax": jax.__version__, "arviz": arviz.__version__,
            "chains": CHAINS, "warmup": WARMUP, "samples_per_chain": SAMPLES, "n_train": N_TRAIN, "n_test": N_TEST,
            "tau": TAU, "seconds": round(seconds, 1), "max_rank_rhat": rhat, "min_bulk_ess": ess,
            "divergences": int(np.asarray(mcmc.get_extra_fields()["diverging"]).sum())}
    (out / "oracle.json").write_text(json.dumps(info, indent=1) + "\n")
    print(json.dumps(info))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
