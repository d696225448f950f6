# SPDX-License-Identifier: MIT
r"""Paired comparisons of methods scored on the same test samples: differences with intervals and p-values, Holm's
multiplicity adjustment, rank intervals of a board, and runs of one method grouped (mean, sd and an interval that
holds both run-to-run and test-sample variance).

Every method is resampled with the *same* counts (one bootstrap replicate resamples the same test samples for
all of them), so a replicate's difference between two methods is the difference on the same multiset: the noise
the methods share (hard samples are hard for both) cancels, which is what makes a paired comparison sharper than
two overlapping intervals. Inputs are replicate arrays computed that way (:func:`sample_replicates` from the
``samples`` of several reports, or any (B,) arrays whose replicate b used the same counts).

The p-value of a difference is the percentile bootstrap's two-sided test of "no difference" (the smallest level
at which the percentile interval excludes 0; Efron & Tibshirani 1993, Sec. 16.4 and 15.4):

.. math:: p = \min\Big(1, \frac{2 \min(1 + \#\{\Delta^*_b \le 0\},\ 1 + \#\{\Delta^*_b \ge 0\})}{B + 1}\Big)

Identical methods give :math:`\Delta^* \equiv 0` and p = 1. For accuracy it agrees with McNemar's exact test
and for AUROC with DeLong's (``tests/metrics/test_paired.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .bootstrap import LinearColumns, bootstrap_counts, count_blocks, interval_rng, percentile_interval
from .bootstrap_ranking import _Sorted, weighted_detection
from .intervals import _unit_key, decode_samples

__all__ = ["HIGHER_IS_BETTER", "PAIRED_KEYS", "bootstrap_p_value", "holm", "paired_comparisons", "rank_intervals",
           "replicate_ranks", "sample_replicates", "group_runs"]

#: The comparable keys that paired comparisons and rank intervals resample, and whether higher is better.
HIGHER_IS_BETTER = {"accuracy": True, "cll": True, "calibrated_brier": False, "ood_auroc_total": True,
                    "ood_auroc_knowledge": True, "ood_auroc_confidence": True, "ood_aupr_total": True,
                    "ood_fpr95_total": False, "shift_accuracy_median": True}
PAIRED_KEYS = tuple(HIGHER_IS_BETTER)
_ROUNDING = 1e-12  # relative size of a replicate difference that is float rounding, not a difference


def bootstrap_p_value(differences: NDArray) -> float:
    """Two-sided p-value of "no difference" from replicate differences (module docstring)."""
    d = np.asarray(differences, dtype=np.float64)
    b = d.size
    return float(min(1.0, 2.0 * min(1 + np.sum(d <= 0), 1 + np.sum(d >= 0)) / (b + 1)))


def holm(p_values: Sequence[float]) -> list[float]:
    r"""Holm's step-down adjusted p-values (family-wise error control for m tests):
    :math:`\tilde p_{(i)} = \max_{j \le i} \min(1, (m - j + 1)\, p_{(j)})` over the p-values in ascending order.

    Examples
    --------
    >>> holm([0.01, 0.04, 0.03])
    [0.03, 0.06, 0.06]
    """
    p = np.asarray(p_values, dtype=np.float64)
    m = p.size
    order = np.argsort(p, kind="stable")
    adj = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adj = np.maximum.accumulate(adj)
    out = np.empty(m)
    out[order] = adj
    return [float(round(x, 15)) for x in out]


def paired_comparisons(values: Mapping[str, float], replicates: Mapping[str, NDArray], *, metric: str,
                       higher_is_better: bool, level: float = 0.95) -> tuple[str, list[dict[str, Any]]]:
    """The best method of ``metric`` (by its point value) and each other method's difference to it.

    Returns ``(best, rows)``, a row per other method: ``{a, b, metric, difference, interval, p, p_holm,
    distinguishable}``, ``a`` the best, ``b`` the other, ``difference`` = value(a) - value(b) and its percentile
    interval over the paired replicates, ``p`` the bootstrap p-value, ``p_holm`` Holm-adjusted over the
    ``len(values) - 1`` comparisons, ``distinguishable`` = ``p_holm < 1 - level``.
    """
    names = list(values)
    sign = 1.0 if higher_is_better else -1.0
    best = max(names, key=lambda n: (sign * values[n], -names.index(n)))
    rows = []
    for other in names:
        if other == best:
            continue
        d = np.asarray(replicates[best], dtype=np.float64) - replicates[other]
        # replicate values of the same data can differ in the last bits (a matrix product sums a column in an
        # order that depends on its place): differences at rounding level are no difference
        scale = max(1.0, abs(values[best]), abs(values[other]))
        d = np.where(np.abs(d) <= _ROUNDING * scale, 0.0, d)
        rows.append({"a": best, "b": other, "metric": metric, "difference": float(values[best] - values[other]),
                     "interval": percentile_interval(d, level), "p": bootstrap_p_value(d)})
    for row, p in zip(rows, holm([r["p"] for r in rows])):
        row["p_holm"] = p
        row["distinguishable"] = bool(p < 1.0 - level)
    return best, rows


def rank_intervals(values: Mapping[str, float], replicates: Mapping[str, NDArray], *, higher_is_better: bool,
                   level: float = 0.95) -> dict[str, dict[str, Any]]:
    """Rank of every row in each replicate (1 = best; ties share the best rank) and its interval.

    Returns ``{name: {rank, rank_interval: [best, worst], tied_with_leader}}``: ``rank`` by the point values,
    ``rank_interval`` the ``(1 -+ level) / 2`` quantiles of the replicate ranks rounded outward to integers, and
    ``tied_with_leader`` when the interval overlaps the leader's.
    """
    names = list(values)
    sign = 1.0 if higher_is_better else -1.0
    point = np.array([sign * values[n] for n in names])
    rank0 = 1 + np.sum(point[None, :] > point[:, None], axis=1)
    ranks = replicate_ranks(np.stack([sign * np.asarray(replicates[n], dtype=np.float64) for n in names]))
    lo = np.floor(np.quantile(ranks, (1.0 - level) / 2.0, axis=0)).astype(int)
    hi = np.ceil(np.quantile(ranks, (1.0 + level) / 2.0, axis=0)).astype(int)
    leader = int(np.argmin(rank0))
    out = {}
    for i, n in enumerate(names):
        out[n] = {"rank": int(rank0[i]), "rank_interval": [int(lo[i]), int(hi[i])],
                  "tied_with_leader": bool(i != leader and lo[i] <= hi[leader])}
    return out


def replicate_ranks(reps: NDArray) -> NDArray[np.int32]:
    r"""Rank of every row in every replicate, (B, rows), from replicate values ``reps`` (rows, B), larger better:

    .. math:: \mathrm{rank}_{ib} = 1 + \#\{j : r_{jb} > r_{ib} + \epsilon \max(1, |r_{ib}|)\}

    (1 = best; rows equal to within float rounding, :math:`\epsilon` = 1e-12, share the best rank). One sort of
    each replicate's values and a binary search per row: O(B rows log rows), so a board of 10,000 rows ranks in
    about a second, where comparing every pair of rows took minutes.
    """
    reps = np.asarray(reps, dtype=np.float64)
    if not np.all(np.isfinite(reps)):
        raise ValueError("replicate values must be finite to be ranked")
    n_rows, _ = reps.shape
    by_rep = np.ascontiguousarray(reps.T)  # (B, rows): one replicate per row, contiguous
    order = np.argsort(by_rep, axis=1)
    ordered = np.take_along_axis(by_rep, order, axis=1)
    ranks = np.empty(by_rep.shape, dtype=np.int32)
    for b, (o, s) in enumerate(zip(order, ordered)):  # searchsorted has no axis; sorted queries search fast
        ranks[b, o] = n_rows + 1 - np.searchsorted(s, s + _ROUNDING * np.maximum(1.0, np.abs(s)), side="right")
    return ranks


def sample_replicates(samples: Sequence[Mapping[str, Any]], *, n_replicates: int, seed: int,
                      tpr: float = 0.95, keys: Sequence[str] = PAIRED_KEYS) -> list[dict[str, NDArray]]:
    """Replicates of the comparable keys of several reports' ``samples``, all resampled with the same counts.

    Parameters
    ----------
    samples : each report's ``samples`` (``metrics/report_intervals.py``); they must share their splits' units
        and sizes (the same task), which the caller checks first.
    n_replicates, seed : B and the seed (the counts of unit u come from ``default_rng([seed, 2, crc32(u)])``,
        as in ``ubench score``, so a method's replicates here are those of its own report's intervals).

    Returns
    -------
    One ``{key: (B,)}`` per report, for the keys of ``keys`` it has.
    """
    plans = [_plan(s, tpr, keys) for s in samples]
    units: dict[str, int] = {}
    for plan in plans:
        for unit, n in plan["units"].items():
            if units.setdefault(unit, n) != n:
                raise ValueError(f"resampling unit {unit!r} has {n} samples in one report and {units[unit]} in "
                                 "another: the reports are not on the same samples")
    # every report's means of one unit in one matrix product per block (one column per report and key)
    stacked: dict[str, LinearColumns] = {}
    for i, plan in enumerate(plans):
        for unit, key, column in plan["linear"]:
            cols = stacked.setdefault(unit, LinearColumns(units[unit]))
            cols.add(f"{i}|{key}", column)
    rngs = {u: interval_rng(seed, _unit_key(u)) for u in units}
    parts: list[dict[str, list]] = [{} for _ in plans]
    for start, stop in count_blocks(n_replicates, max(units.values(), default=1)):
        w = {u: bootstrap_counts(n, stop - start, rngs[u]) for u, n in units.items()}
        means: dict[str, NDArray] = {}
        for unit, cols in stacked.items():
            means.update(cols.apply(w[unit]))
        for i, (plan, out) in enumerate(zip(plans, parts)):
            for key, v in _evaluate(plan, w, {k.split("|", 1)[1]: v for k, v in means.items()
                                              if k.split("|", 1)[0] == str(i)}).items():
                out.setdefault(key, []).append(v)
    reps = [{k: np.concatenate(v) for k, v in p.items()} for p in parts]
    return [{k: r[k] for k in keys if k in r} for r in reps]


def _plan(samples: Mapping[str, Any], tpr: float, keys: Sequence[str] = PAIRED_KEYS) -> dict[str, Any]:
    """What to compute from one report's ``samples`` for ``keys``: means of the primary split's columns and of
    every shift split's accuracy (``linear``: (unit, key, column)), detection of every OOD split against the
    primary split."""
    splits = samples["splits"]
    primary = samples["primary"]
    wanted = {primary} | {n for n, s in splits.items() if (s["role"] == "ood" and any(
        k.startswith("ood_") for k in keys)) or (s["role"] == "shift" and "shift_accuracy_median" in keys)}
    splits = {n: s for n, s in splits.items() if n in wanted}
    decoded = {name: decode_samples(s["columns"], int(s["n"]), f"samples.splits[{name!r}]")
               for name, s in splits.items()}
    p_unit = splits[primary]["unit"]
    linear = [(p_unit, key, decoded[primary][key]) for key in ("accuracy", "cll", "calibrated_brier")
              if key in decoded[primary] and key in keys]
    ood, n_shift = [], 0
    for name, s in splits.items():
        if s["role"] == "ood":
            tasks = {}
            for score in samples.get("scores", ()):
                col = f"score_{score}"
                if col in decoded[name] and col in decoded[primary]:
                    tasks[score] = _Sorted.of(decoded[name][col], decoded[primary][col])
            ood.append((s["unit"], tasks))
        elif s["role"] == "shift" and "accuracy" in decoded[name]:
            linear.append((s["unit"], f"shift:{n_shift}", decoded[name]["accuracy"]))
            n_shift += 1
    units = {s["unit"]: int(s["n"]) for s in splits.values()}
    return {"primary_unit": p_unit, "linear": linear, "ood": ood, "n_shift": n_shift, "units": units, "tpr": tpr}


def _evaluate(plan: Mapping[str, Any], w: Mapping[str, NDArray], means: Mapping[str, NDArray]
              ) -> dict[str, NDArray]:
    wp = w[plan["primary_unit"]]
    out = {k: v for k, v in means.items() if not k.startswith("shift:")}
    if plan["ood"]:
        per: dict[str, list] = {}
        for unit, tasks in plan["ood"]:
            for score, order in tasks.items():
                d = weighted_detection(order.pos, order.neg, w[unit], wp, tpr=plan["tpr"], order=order)
                for key, v in d.items():
                    per.setdefault(f"ood_{'fpr95' if key == 'fpr' else key}_{score}", []).append(v)
        out.update({k: np.mean(v, axis=0) for k, v in per.items() if len(v) == len(plan["ood"])})
    if plan["n_shift"]:
        out["shift_accuracy_median"] = np.median(np.stack([means[f"shift:{j}"] for j in range(plan["n_shift"])]),
                                                 axis=0)
    return out


def group_runs(values: Sequence[float], replicates: Sequence[NDArray], *, rng: np.random.Generator,
               level: float = 0.95) -> dict[str, Any]:
    r"""Several runs (training seeds) of one method on the same test samples: mean and sd over runs and an
    interval for the method's expected value that holds both run-to-run and test-sample variance.

    ``replicates[j]`` (B,) are run j's paired replicates (every run resampled with the same counts). Replicate b
    of the group draws k runs with replacement and averages their replicate-b values: a two-level bootstrap
    (runs, then test samples), as Bouthillier et al. (2021) recommend so that a comparison accounts for the
    variance of the training seed as well as of the finite test set. Returns ``{n_runs, mean, sd, interval,
    replicates}`` (``sd`` over runs, ddof=1; 0 for one run).

    References
    ----------
    .. [1] X. Bouthillier et al. (2021), Accounting for Variance in Machine Learning Benchmarks, MLSys, Sec. 3-4.
    """
    v = np.asarray(values, dtype=np.float64)
    r = np.stack([np.asarray(x, dtype=np.float64) for x in replicates])  # (k, B)
    k, b = r.shape
    pick = rng.integers(0, k, size=(k, b))
    combined = r[pick, np.arange(b)[None, :]].mean(axis=0)
    return {"n_runs": int(k), "mean": float(v.mean()), "sd": float(v.std(ddof=1)) if k > 1 else 0.0,
            "interval": percentile_interval(combined, level), "replicates": combined}
