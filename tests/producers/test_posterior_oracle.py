# SPDX-License-Identifier: MIT
"""Issue #30 item 2: an oracle no one here wrote. On a Bayesian softmax regression of digits features (300
training images, prior N(0, 1), 650 weights), the chains ubench runs -- torch HMC with the producer's default
warm-up (:func:`ubench.producers.hmc_chain.run_chain`), torch NUTS, and the JAX producer's BlackJAX chain
(:class:`ubench.producers.jax.hmc.HMCChain`) -- agree with NumPyro's NUTS within Monte-Carlo error: the posterior
means and standard deviations of every weight and the predictive probabilities on 200 test images (those in
[0.05, 0.95] within Monte-Carlo error, all within 0.1).

NumPyro's numbers were computed once (``tests/data/numpyro_oracle``: 4 chains x 5000 draws, its README says how);
NumPyro is not a test dependency. Our Monte-Carlo errors are ArviZ's (from the ESS) over one chain of 600 draws
after 200 warm-up iterations."""

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ubench.producers.hmc import HMC  # noqa: E402
from ubench.producers.hmc_chain import ChainSettings, run_chain  # noqa: E402

pytestmark = pytest.mark.torch
torch.set_num_threads(1)  # tiny tensors: a second thread only waits (and on a loaded machine, spins)

ORACLE = Path(__file__).resolve().parents[1] / "data" / "numpyro_oracle"
WARMUP, DRAWS = 200, 600
#: Predictive probabilities outside [RARE, 1 - RARE] are carried by rare draws (a median of 1e-7 and a 99.9% quantile
#: of 0.9 were seen for a mean of 0.005): 600 draws cannot estimate their Monte-Carlo error, so those entries get an
#: absolute bound only.
RARE = 0.05


def _generator():
    spec = importlib.util.spec_from_file_location("numpyro_oracle_generate", ORACLE / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def problem():
    gen = _generator()
    xtr, ytr, xte, yte, train, test = gen.data()
    oracle = dict(np.load(ORACLE / "oracle.npz"))
    np.testing.assert_array_equal(oracle["train_index"], train)  # the same split as when it was computed
    np.testing.assert_array_equal(oracle["test_index"], test)
    return gen, xtr, ytr, xte, oracle


def _mcse(draws: np.ndarray, method: str = "mean") -> np.ndarray:
    """ArviZ's Monte-Carlo standard error of each column of one chain's draws (from its ESS; batch means of short
    chains underestimate it where the autocorrelation is long)."""
    arviz = pytest.importorskip("arviz")
    one = arviz.convert_to_dataset({"v": draws[None]})
    return np.asarray(arviz.mcse(one, method=method)["v"].values, dtype=np.float64)


def _predictive(theta: np.ndarray, xte: np.ndarray) -> np.ndarray:
    w = theta.reshape(len(theta), xte.shape[1] + 1, 10)
    logits = np.einsum("nk,skj->snj", xte, w[:, :-1]) + w[:, None, -1]
    p = np.exp(logits - logits.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)).reshape(len(theta), -1)


def _z_scores(theta: np.ndarray, xte: np.ndarray, oracle: dict) -> dict[str, np.ndarray]:
    """|ours - NumPyro| over the combined Monte-Carlo error, for the means, the sds and the predictive."""
    mean, sd = theta.mean(0), theta.std(0, ddof=1)
    pred = _predictive(theta, xte)
    ref = oracle["pred_mean"].reshape(-1)
    kept = (ref >= RARE) & (ref <= 1 - RARE)
    assert np.abs(pred.mean(0) - ref).max() < 0.1  # every predictive probability, the rare ones included
    return {
        "mean": np.abs(mean - oracle["theta_mean"]) / np.hypot(_mcse(theta), oracle["theta_mean_se"]),
        "sd": np.abs(sd - oracle["theta_sd"]) / np.hypot(_mcse(theta, "sd"), oracle["theta_sd_se"]),
        "predictive": np.abs(pred.mean(0) - ref)[kept]
        / np.hypot(_mcse(pred[:, kept]), oracle["pred_mean_se"].reshape(-1)[kept]),
    }


def _check(z: dict[str, np.ndarray], who: str) -> None:
    """Over 650 means, 650 sds and about 300 predictive probabilities: 99% of the z-scores below 3.3 and all below
    5.5 (independent standard normals give 2.6 and about 3.5; seeds 3 and 4 of the torch chains gave at most 2.99
    and 4.39)."""
    for what, values in z.items():
        q99, worst = float(np.quantile(values, 0.99)), float(values.max())
        assert q99 < 3.3 and worst < 5.5, f"{who}: {what} disagrees with NumPyro: 99% of z < {q99:.2f}, max {worst:.2f}"


def _torch_target(xtr, ytr, tau):
    """U(theta) = sum of cross-entropies + tau |theta|^2 / 2 and its gradient in closed form,
    X^T (softmax(X W) - onehot(y)) + tau W with X = [x, 1] (autograd would cost ten times more per step)."""
    x = torch.cat([torch.from_numpy(xtr), torch.ones(len(xtr), 1, dtype=torch.float64)], dim=1)
    onehot = torch.nn.functional.one_hot(torch.from_numpy(ytr), 10).double()

    def potential_and_grad(theta):
        w = theta.view(x.shape[1], 10)
        logits = x @ w
        log_p = torch.log_softmax(logits, dim=1)
        u = -(log_p * onehot).sum() + 0.5 * tau * torch.dot(theta, theta)
        return u, (x.t() @ (log_p.exp() - onehot) + tau * w).reshape(-1)

    return potential_and_grad


@pytest.mark.parametrize("sampler", ["hmc", "nuts"])
def test_torch_chain_agrees_with_numpyro_nuts(problem, sampler):
    gen, xtr, ytr, xte, oracle = problem
    settings = ChainSettings.from_hyperparameters({**HMC.defaults, "sampler": sampler, "burn_in": WARMUP},
                                                  mass=gen.TAU)
    draws, steps = run_chain(_torch_target(xtr, ytr, gen.TAU), torch.zeros(650, dtype=torch.float64), settings,
                             n_draws=DRAWS, seed=3)
    assert sum(s.divergent for s in steps[WARMUP:]) == 0
    assert 0.6 < np.mean([s.accept_prob for s in steps[WARMUP:]]) < 0.97
    _check(_z_scores(draws.numpy(), xte, oracle), f"torch {sampler}")


def test_jax_producer_chain_agrees_with_numpyro_nuts(problem, tmp_path):
    jax = pytest.importorskip("jax")
    pytest.importorskip("blackjax")
    import jax.numpy as jnp
    from jax.flatten_util import ravel_pytree

    from ubench.producers.jax.hmc import HMC_DEFAULTS, HMCChain

    gen, xtr, ytr, xte, oracle = problem
    x, y = jnp.asarray(xtr, dtype=jnp.float32), jnp.asarray(ytr)
    theta0, unravel = ravel_pytree(jnp.zeros((xtr.shape[1] + 1, 10)))

    def logdensity(theta):
        w = unravel(theta)
        logits = x @ w[:-1] + w[-1]
        return jnp.sum(jax.nn.log_softmax(logits)[jnp.arange(len(y)), y]) - 0.5 * gen.TAU * jnp.sum(theta ** 2)

    # thin 2: 300 members over the same 600 iterations (each member is a Python-level call into the jitted chain)
    chain = HMCChain({**HMC_DEFAULTS, "burn_in": WARMUP, "thin": 2}, logdensity=logdensity, theta0=theta0,
                     unravel=lambda t: t, seed=3, scratch=tmp_path)
    draws, infos = [], []
    for k in range(DRAWS // 2):
        theta, info = chain.sample(k)
        draws.append(np.asarray(theta, dtype=np.float64))
        infos.append(info)
    assert infos[-1]["divergences_total"] == 0
    _check(_z_scores(np.stack(draws), xte, oracle), f"JAX producer ({HMC_DEFAULTS['sampler']})")
