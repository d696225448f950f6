# SPDX-License-Identifier: MIT
"""Compute the Pitfalls oracle ONCE with bayesgroup/pytorch-ensembles' own code (see README.md beside this file).

    python3 generate.py /tmp/pitfalls-ensembles OUT_DIR

The first argument is a checkout of bayesgroup/pytorch-ensembles; its ``metrics.py`` is imported from there and
the ``dee`` function is executed from the cell of ``notebooks/DEE camera ready plots.ipynb`` that defines it.
Nothing of that repository is copied here. Needs torch, scikit-learn, scipy and pandas (not ubench's
dependencies: this script is not run by the tests).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from scipy.special import logsumexp, softmax

N, C, K, TRIES, SEED = 2000, 4, 5, 5, 20261123  # N >= 2000: metrics_kfold's acc_aac needs 1000 rows a half


def synthetic():
    """Seeded float16 logits (stored; probabilities are their float64 softmax): an overconfident (T* > 1) deep
    ensemble of K members and a ``method`` of K members with shared noise (its members agree more: DEE 1-4)."""
    rng = np.random.default_rng(SEED)
    y = rng.integers(0, C, N)
    base = rng.normal(size=(N, C))
    base[np.arange(N), y] += 1.5
    de = (2.5 * (base[None] + 1.0 * rng.normal(size=(K, N, C)))).astype(np.float16)
    method = (2.5 * (base[None] + 0.5 * rng.normal(size=(1, N, C)) + 0.75 * rng.normal(size=(K, N, C))))
    return de, method.astype(np.float16), y


def probs(logits):
    return softmax(logits.astype(np.float64), axis=2)


def ubench_rule_folds(n, repeats, seed):
    """The (fit, held-out) halves of ubench's documented rule: default_rng(seed).permutation, A = first n // 2."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(repeats):
        perm = rng.permutation(n)
        a, b = np.sort(perm[: n // 2]), np.sort(perm[n // 2:])
        out += [(a, b), (b, a)]
    return out


def main(repo: str, out_dir: str):
    sys.path.insert(0, repo)
    if not hasattr(np, "trapz"):  # numpy 2.x removed np.trapz, which metrics.py's acc_aac calls; same function
        np.trapz = np.trapezoid
    import metrics as pm  # bayesgroup/pytorch-ensembles/metrics.py
    import pandas as pd
    from sklearn.model_selection import KFold

    nb = json.loads((Path(repo) / "notebooks" / "DEE camera ready plots.ipynb").read_text())
    cell = next("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"
                and "".join(c["source"]).startswith("def dee("))
    ns = {"pd": pd, "np": np}
    exec(cell.split("\nquery = ")[0], ns)  # only the function definition of the cell
    dee = ns["dee"]

    de_logits, method_logits, y = synthetic()
    de, method = probs(de_logits), probs(method_logits)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    def ens_log_prob(members):  # as ens/ens-deepens.py: logsumexp of member log-probs minus log(k)
        return logsumexp(np.dstack([np.log(m) for m in members]), axis=2) - np.log(len(members))

    # 1. per-fold Nelder-Mead temperatures and held-out CLL on ubench's fold rule (seed 0, 5 repeats)
    lp = ens_log_prob(de)
    folds = ubench_rule_folds(N, 5, 0)
    temps, clls = [], []
    for a, b in folds:
        t = float(pm.ts(lp[a], y[a]))
        temps.append(t)
        clls.append(float(pm.get_ll(np.exp(pm.apply_t(lp[b], t)), y[b])))

    # 2. metrics_kfold itself (KFold(2, shuffle=True) x 5 from the global numpy state), and the folds it drew
    np.random.seed(0)
    kf = pm.metrics_kfold(lp, y, n_splits=2, n_runs=5, temp_scale=True)
    np.random.seed(0)  # ts (Nelder-Mead) draws nothing, so the same stream replays the same shuffles
    kfold_fit = [tr for _ in range(5) for tr, _te in KFold(n_splits=2, shuffle=True).split(lp)]

    # 3. the DEE procedure: 5 tries, each permutes the members, every prefix calls metrics_kfold(temp_scale=True)
    def tries_curve(members, n_tries):
        rows = []
        for t in range(1, n_tries + 1):
            order = np.random.permutation(len(members))
            for k in range(1, len(members) + 1):
                ll = pm.metrics_kfold(ens_log_prob(members[order[:k]]), y, n_splits=2, n_runs=5,
                                      temp_scale=True)["ll"]
                rows.append((k, "ll", ll, t))
        df = pd.DataFrame(rows, columns=["n_samples", "metric", "value", "try"])
        return df.groupby(["n_samples", "metric"]).value.agg(["mean", "std"]).reset_index()

    np.random.seed(1)
    ref = tries_curve(de, TRIES)
    meth = tries_curve(method, 1)
    cols = ["n_samples", "metric", "mean"]
    res = dee(ref[cols], meth[cols])
    up = ref.assign(mean=ref["mean"] - ref["std"])[cols]
    lo = ref.assign(mean=ref["mean"] + ref["std"])[cols]
    res["upper"] = dee(up, meth[cols]).dee
    res["lower"] = dee(lo, meth[cols]).dee

    np.savez_compressed(out / "members.npz", deep_ensemble_logits=de_logits, method_logits=method_logits,
                        labels=y.astype(np.int64), ubench_rule_fit=np.stack([a for a, _ in folds]),
                        kfold_fit=np.stack(kfold_fit))
    oracle = {
        "source": {"repository": "bayesgroup/pytorch-ensembles", "commit": _commit(repo)},
        "data": {"n": N, "c": C, "k": K, "seed": SEED},
        "ubench_rule_folds": {"temperatures": temps, "cll": clls, "cll_mean": float(np.mean(clls))},
        "metrics_kfold": {"ll": float(kf["ll"]), "acc": float(kf["acc"]), "brier": float(kf["brier"])},
        "dee_reference": {"n_members": ref["n_samples"].tolist(), "cll_mean": ref["mean"].tolist(),
                          "cll_std": ref["std"].tolist(), "tries": TRIES},
        "method_curve": {"cll": meth["mean"].tolist()},
        "dee": {"dee": res["dee"].tolist(), "lower": res["lower"].tolist(), "upper": res["upper"].tolist()},
    }
    (out / "oracle.json").write_text(json.dumps(oracle, indent=1) + "\n")


def _commit(repo):
    p = Path(repo) / "COMMIT"
    return p.read_text().strip() if p.exists() else "unknown"


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
