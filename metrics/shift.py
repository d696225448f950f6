# SPDX-License-Identifier: MIT
"""Dataset-shift summaries: every metric per (kind, intensity) and its quartiles over kinds per intensity, as in the
tables and box plots of Ovadia et al. (2019). Pure: per-split metric dicts in, a table-like result out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Real

import numpy as np

__all__ = ["ShiftSummary", "shift_summary", "QUANTILES"]

QUANTILES = (0.0, 0.25, 0.5, 0.75, 1.0)
_STAT_NAMES = ("min", "q25", "median", "q75", "max")


@dataclass(frozen=True)
class ShiftSummary:
    """Per-split metrics and their spread over shift kinds at each intensity.

    ``rows``: one dict per (kind, intensity), sorted by (intensity, kind), holding ``kind``, ``intensity`` and
    every metric. ``quartiles``: ``{intensity: {metric: {"min", "q25", "median", "q75", "max", "mean",
    "n_kinds"}}}`` over the kinds present at that intensity (``None`` values skipped and not counted; a metric
    with no value at an intensity gets ``None`` statistics and ``n_kinds`` 0). ``metrics`` lists the metric
    names in input order; ``intensities`` and ``kinds`` are sorted.
    """

    rows: tuple[dict, ...]
    quartiles: dict
    metrics: tuple[str, ...]
    intensities: tuple
    kinds: tuple[str, ...]

    def to_dict(self) -> dict:
        return {
            "rows": [dict(r) for r in self.rows],
            "quartiles": [{"intensity": i, **{m: dict(s) for m, s in q.items()}} for i, q in self.quartiles.items()],
            "metrics": list(self.metrics),
            "intensities": list(self.intensities),
            "kinds": list(self.kinds),
            "quantile_method": "linear",
        }


def _check_split(i: int, split) -> tuple[str, Real, dict]:
    if not isinstance(split, Mapping):
        raise TypeError(f"split_metrics[{i}] must be a mapping; found {type(split).__name__}")
    for key in ("kind", "intensity"):
        if key not in split:
            raise ValueError(f"split_metrics[{i}] must have a {key!r} key; found keys {sorted(split)}")
    kind, intensity = split["kind"], split["intensity"]
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"split_metrics[{i}]['kind'] must be a non-empty string; found {kind!r}")
    if isinstance(intensity, bool) or not isinstance(intensity, Real) or not np.isfinite(intensity):
        raise ValueError(f"split_metrics[{i}]['intensity'] must be a finite number; found {intensity!r}")
    values = {}
    for name, v in split.items():
        if name in ("kind", "intensity"):
            continue
        if v is not None and (isinstance(v, bool) or not isinstance(v, Real) or not np.isfinite(v)):
            raise ValueError(f"split_metrics[{i}][{name!r}] must be a finite number or None; found {v!r}")
        values[name] = None if v is None else float(v)
    return kind, intensity, values


def _stats(columns: Mapping[str, list[float]]) -> dict[str, dict]:
    """Quartiles, mean and count of each metric's values, ``{metric: stats}``: one ``np.quantile`` and one mean
    over the stacked metrics with the same number of values (a report summarises dozens of metrics over a few
    kinds each, where the per-call overhead of ``np.quantile`` is the cost); along an axis the numbers are the 1-D
    ones row by row."""
    out = {m: {**dict.fromkeys(_STAT_NAMES), "mean": None, "n_kinds": 0} for m, v in columns.items() if not v}
    by_size: dict[int, list[str]] = {}
    for m, v in columns.items():
        if v:
            by_size.setdefault(len(v), []).append(m)
    for size, names in by_size.items():
        arr = np.asarray([columns[m] for m in names], dtype=np.float64)
        q = np.quantile(arr, QUANTILES, axis=1, method="linear").T.tolist()
        means = arr.mean(axis=1).tolist()
        for m, qs, mean in zip(names, q, means):
            out[m] = {**dict(zip(_STAT_NAMES, qs)), "mean": mean, "n_kinds": size}
    return {m: out[m] for m in columns}


def shift_summary(split_metrics: Sequence[Mapping]) -> ShiftSummary:
    r"""Summarise metrics over shifted splits: quartiles over shift kinds at each intensity.

    Parameters
    ----------
    split_metrics : sequence of mappings
        One per shifted split: ``{"kind": str, "intensity": number, metric_name: float or None, ...}``, e.g.
        ``{"kind": "gaussian_blur", "intensity": 3, "accuracy": 0.71, "brier": 0.42}``. Every split must carry the
        same metric names; ``None`` marks a metric undefined on that split. Each (kind, intensity) appears once.

    Returns
    -------
    ShiftSummary

    Raises
    ------
    TypeError, ValueError
        Empty input, a missing or bad ``kind``/``intensity``, non-finite values, differing metric names, or a
        repeated (kind, intensity); messages name the index of the split.

    Notes
    -----
    For intensity :math:`s` and metric :math:`f`, the statistics are taken over
    :math:`\{f(\text{kind}, s)\}_{\text{kind}}`: min, 25th, 50th, 75th percentile, max (numpy ``"linear"``
    quantiles, i.e. Hyndman-Fan type 7) and the mean.

    Convention: Ovadia et al. box-plot quartiles over corruption kinds per intensity, with whiskers at min/max
    (not 1.5 IQR); their appendix tables pool all (kind, intensity) variants, which is ``np.quantile`` over
    ``rows`` and not computed here.

    References
    ----------
    .. [1] Y. Ovadia et al. (2019), Can You Trust Your Model's Uncertainty? Evaluating Predictive Uncertainty
       Under Dataset Shift, NeurIPS, Fig. 3 and Appendix E.

    Examples
    --------
    >>> rows = [{"kind": k, "intensity": 1, "ece": v} for k, v in [("blur", 0.1), ("noise", 0.3), ("fog", 0.2)]]
    >>> s = shift_summary(rows)
    >>> s.quartiles[1]["ece"]["median"], s.quartiles[1]["ece"]["n_kinds"]
    (0.2, 3)
    """
    if isinstance(split_metrics, Mapping) or not isinstance(split_metrics, Sequence):
        raise TypeError(f"split_metrics must be a sequence of mappings; found {type(split_metrics).__name__}")
    if len(split_metrics) == 0:
        raise ValueError("split_metrics is empty: it has 0 splits")
    parsed = [_check_split(i, s) for i, s in enumerate(split_metrics)]
    metrics = tuple(parsed[0][2])
    seen = {}
    for i, (kind, intensity, values) in enumerate(parsed):
        if set(values) != set(metrics):
            raise ValueError(
                f"split_metrics[{i}] must have the metrics {sorted(metrics)} of split_metrics[0]; "
                f"found {sorted(values)}"
            )
        key = (kind, intensity)
        if key in seen:
            raise ValueError(f"split_metrics[{i}] repeats (kind, intensity) {key!r} of split_metrics[{seen[key]}]")
        seen[key] = i
    order = sorted(range(len(parsed)), key=lambda i: (parsed[i][1], parsed[i][0]))
    rows = tuple({"kind": parsed[i][0], "intensity": parsed[i][1], **parsed[i][2]} for i in order)
    intensities = tuple(sorted({p[1] for p in parsed}))
    quartiles = {}
    for s in intensities:
        at = sorted((p for p in parsed if p[1] == s), key=lambda p: p[0])  # input order cannot change the mean
        quartiles[s] = _stats({m: [p[2][m] for p in at if p[2][m] is not None] for m in metrics})
    return ShiftSummary(rows=rows, quartiles=quartiles, metrics=metrics, intensities=intensities,
                        kinds=tuple(sorted({p[0] for p in parsed})))
