# SPDX-License-Identifier: MIT
"""What :class:`~ubench.metrics.report.ReportBuilder` hands to the intervals: it collects each split's per-sample
statistics as the builder scores the split, and at the end adds the report's ``intervals`` (and, on request,
``samples``: the per-sample columns that paired comparisons and rank intervals resample later).

The settings come from the protocol: ``intervals`` (on/off), ``confidence`` (the level), ``bootstrap`` (B),
``seed``, ``sample_stats`` (also return ``samples``). ``units`` maps split names to the sha256 of their sample ids
(set by ``scoring/score.py``), which decides the resampling units (:func:`~ubench.metrics.intervals.resampling_unit`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .decision import _check_cost, cost_matrix_preset
from .ensemble import _smooth
from .intervals import (
    SAMPLE_ENCODING,
    LabelledStatistics,
    OODStatistics,
    encode_samples,
    report_intervals,
    resample,
    resampling_unit,
)
from .protocol_bootstrap import cv_influence

__all__ = ["IntervalCollector", "SAMPLE_COLUMNS"]

#: Columns of the primary split in ``samples`` (besides the detection scores ``score_<name>``): each a per-sample
#: value whose weighted mean is the metric (``cll`` and ``calibrated_brier`` with the first-order refit).
SAMPLE_COLUMNS = ("accuracy", "nll", "brier", "cll", "calibrated_brier")


class IntervalCollector:
    """Per-split statistics gathered while a report is built; :meth:`finish` adds ``intervals`` / ``samples``."""

    def __init__(self, protocol: Any, *, scores, cost_preset, cost_matrix):
        p = protocol
        self.p = p
        self.enabled = bool(getattr(p, "intervals", False))
        self.export = bool(getattr(p, "sample_stats", False))
        self.scores = tuple(scores)
        self.cost = None
        if cost_preset is not None or cost_matrix is not None:
            cost = cost_matrix_preset(cost_preset) if cost_preset is not None else np.asarray(cost_matrix, np.float64)
            self.cost = cost
        self.units: dict[str, str | None] = {}
        self.stats: dict[str, Any] = {}
        self.roles: dict[str, str] = {}
        self.arrays: dict[str, Any] = {}

    @property
    def active(self) -> bool:
        return self.enabled or self.export

    def _unit(self, role: str, name: str) -> str:
        return resampling_unit(role, name, self.units.get(name))

    def add_labelled(self, role: str, name: str, arrays: Any, labels: NDArray, section: Mapping[str, Any]) -> None:
        """An in-domain or shift split that was scored (``section`` its report section)."""
        if not self.active:
            return
        p = self.p
        influence = None
        cal = section.get("calibrated")
        if role == "in_domain" and cal:
            if p.placement == "per_member":
                members = _smooth(arrays.member_probs, p.smoothing) if p.smoothing else arrays.member_probs
            else:  # the mean as it is (cv_influence reads its rows in blocks: it may be a split read in passes)
                members = (_smooth(arrays.mean_probs, p.smoothing) if p.smoothing else arrays.mean_probs,)
            influence = cv_influence(members, labels, placement=p.placement, n_repeats=p.repeats, seed=p.seed,
                                     eps=p.eps, n_bins=p.bins)
        cost = None
        if role == "in_domain" and "decision_cost" in section and self.cost is not None:
            cost = _check_cost(self.cost, arrays.mean_probs.shape[1])
        self.stats[name] = LabelledStatistics(
            arrays, labels, unit=self._unit(role, name), bins=p.bins, eps=p.eps, smoothing=p.smoothing, tpr=p.tpr,
            full=role == "in_domain", scores=self.scores if role == "in_domain" else (), cost=cost,
            cost_reduction=section.get("cost_reduction", "mean"), protocol=influence)
        self.roles[name] = role
        self.arrays[name] = (arrays.scores_only(), labels)  # its (N,) scores: no split's (N, C) mean is kept

    def add_ood(self, name: str, in_arrays: Any, ood_arrays: Any, primary: str) -> None:
        if not self.active:
            return
        self.stats[name] = OODStatistics(in_arrays, ood_arrays, unit=self._unit("ood", name),
                                         against=self.stats[primary].unit, tpr=self.p.tpr, scores=self.scores)
        self.roles[name] = "ood"
        self.arrays[name] = (ood_arrays, None)

    def finish(self, report: dict[str, Any]) -> None:
        """Add ``intervals`` (when on) and ``samples`` (when asked) to ``report``."""
        if not self.stats:
            return
        p = self.p
        if self.enabled:
            units = {s.unit: s.n for s in self.stats.values()}
            reps = resample(self.stats, units, n_replicates=p.bootstrap, seed=p.seed)
            report["intervals"] = report_intervals(report, reps, level=p.confidence, n_replicates=p.bootstrap,
                                                   seed=p.seed)
        if self.export:
            report["samples"] = self._samples(report)

    def _samples(self, report: Mapping[str, Any]) -> dict[str, Any] | None:
        primary = report.get("primary_split")
        if primary not in self.stats:
            return None
        splits = {}
        for name, stat in self.stats.items():
            role = self.roles[name]
            arrays, _ = self.arrays[name]
            cols: dict[str, NDArray] = {}
            if role == "in_domain" and name != primary:
                continue
            if role in ("in_domain", "shift"):
                wanted = SAMPLE_COLUMNS if name == primary else ("accuracy",)
                cols.update({k: stat.cols.column(k) for k in wanted if k in stat.cols})
            if role in ("in_domain", "ood"):
                cols.update({f"score_{s}": arrays.score(s) for s in self.scores})
            splits[name] = {"role": role, "unit": stat.unit, "n": stat.n, "columns": encode_samples(cols)}
        return {"encoding": SAMPLE_ENCODING, "seed": int(self.p.seed), "primary": primary,
                "scores": list(self.scores), "splits": splits}
