# SPDX-License-Identifier: MIT
"""What a ubench report holds: arrays and settings in, a JSON-able dict out. Pure (no files, no terminal).

This is the one module that calls metrics of several families. ``scoring/score.py`` reads archives and feeds
blocks and arrays here; ``cli.py`` and ``scoring/html.py`` format the dicts this module returns.

Per-sample work happens once per split in :class:`SplitAccumulator`, fed blocks ``(M, rows, C)`` of a split's
member predictions: the ensemble mean and the per-sample uncertainties (total = entropy of the mean, data =
mean member entropy, knowledge = mutual information, confidence = max of the mean) are computed block by block,
so a split's member stack never has to be held at once. Every section below then works on those (N, C) and (N,)
arrays; only the calibrated protocol with ``placement="per_member"`` and the member curves need the members.

Keys are the snake_case names listed in ``scoring/REPORT_KEYS.md``. A metric that is undefined on the data
(misclassification AUROC when every prediction is right) is ``None`` with a note, never NaN.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._validation import UndefinedMetricError
from .calibration import (
    _binned_sums,
    _ece,
    _equal_width_bin_index,
    _reliability_bins,
    _tace,
    _uce,
)
from .classification import _accuracy, _brier_per_sample, _nll, _predictions
from .decision import _check_cost, _decision_cost, cost_matrix_preset
from .ensemble import _ensemble_mean, _smooth
from .ranking import _detection_scores
from .rejection import _rejection_curve
from .protocol import cross_validated_calibration as _cross_validated_calibration
from .protocol import member_curves as _member_curves
from .shift import shift_summary as _shift_summary
from .uncertainty import _confidence, _entropy_rows, _normalized_entropy, _uncertainty_decomposition

__all__ = [
    "SplitArrays",
    "SplitAccumulator",
    "UNCERTAINTY_SCORES",
    "COMPARABLE_KEYS",
    "NOT_COMPARABLE_KEYS",
    "core_metrics",
    "misclassification_section",
    "reliability_section",
    "rejection_section",
    "decision_section",
    "ood_section",
    "ood_histograms",
    "summarize_ood",
]

#: Detection scores, higher = more uncertain: report name -> SplitArrays field.
UNCERTAINTY_SCORES = {"total": "total", "knowledge": "knowledge", "confidence": "neg_confidence"}

#: Keys of the calibrated section copied into the headline summary.
CALIBRATED_HEADLINE = ("cll", "temperature", "calibrated_accuracy", "calibrated_nll", "calibrated_brier",
                       "calibrated_ece")

#: Headline keys that may be compared across models (Ashukha et al. 2020, Sec. 2-3): calibrated metrics and
#: DEE, plus accuracy and the OOD/shift scores, whose task does not depend on the model.
COMPARABLE_KEYS = (
    "accuracy", "cll", "calibrated_brier", "dee", "ood_auroc_total", "ood_auroc_knowledge", "ood_auroc_confidence",
    "ood_aupr_total", "ood_fpr95_total", "shift_accuracy_median",
)
#: Headline keys that are not comparable across models: uncalibrated NLL/ECE/TACE depend on the temperature a
#: model happens to have, and misclassification AUROC is a different detection task for every model.
NOT_COMPARABLE_KEYS = (
    "nll", "brier", "ece", "tace", "uce", "misclassification_auroc_total", "misclassification_auroc_confidence",
    "misclassification_auroc_knowledge",
)


@dataclass(frozen=True)
class SplitArrays:
    """The per-split arrays every section works on.

    ``mean_probs`` (N, C) float64 is the unsmoothed ensemble mean; the uncertainties (N,) are computed on members
    after the protocol's central smoothing; ``neg_confidence`` is ``-max_c`` of the (smoothed) mean, so all three
    scores read higher = more uncertain. ``member_probs`` (M, N, C) is kept only when asked for.
    """

    mean_probs: NDArray[np.float64]
    total: NDArray[np.float64]
    data: NDArray[np.float64]
    knowledge: NDArray[np.float64]
    neg_confidence: NDArray[np.float64]
    member_probs: NDArray[np.floating] | None = None

    @property
    def n_samples(self) -> int:
        return int(self.mean_probs.shape[0])

    def score(self, name: str) -> NDArray[np.float64]:
        return getattr(self, UNCERTAINTY_SCORES[name])


class SplitAccumulator:
    """Stream a split's member predictions block by block: ``add(start, block)`` then ``result()``.

    Parameters
    ----------
    n_members, n_samples, n_classes : the split's shape (M, N, C).
    smoothing : central smoothing weight of every member before the uncertainties (0 = none).
    keep_members : also keep the member stack (M, N, C) in ``dtype`` (for per-member placement, member curves).
    dtype : storage dtype of the kept members.

    Blocks are assumed validated (the archive reader's value checks run on the same blocks).
    """

    def __init__(self, n_members: int, n_samples: int, n_classes: int, *, smoothing: float = 0.0,
                 keep_members: bool = False, dtype: type | np.dtype = np.float32):
        self.gamma = float(smoothing)
        self.shape = (int(n_members), int(n_samples), int(n_classes))
        self.dtype = np.dtype(dtype)
        self._mean = np.empty((n_samples, n_classes), dtype=np.float64)
        self._u = {k: np.empty(n_samples, dtype=np.float64) for k in ("total", "data", "knowledge", "neg_confidence")}
        self._members = np.empty(self.shape, dtype=dtype) if keep_members else None
        self._seen = 0
        self._partial: dict[str, NDArray] | None = None

    def add(self, start: int, block: NDArray[np.floating]) -> None:
        """Add samples ``start:start+rows`` of every member: ``block`` is (M, rows, C)."""
        stop = start + block.shape[1]
        if self.gamma:  # uncertainties of the smoothed members; the report's mean stays unsmoothed
            self._mean[start:stop] = _ensemble_mean(block)
            dec = _uncertainty_decomposition(_smooth(block, self.gamma))
        else:  # one pass gives the uncertainties and the mean
            dec = _uncertainty_decomposition(block, mean_out=self._mean[start:stop])
        self._finish_rows(start, stop, dec.total, dec.data, dec.knowledge)
        if self._members is not None:
            self._members[:, start:stop] = block
        self._seen += block.shape[1]

    def add_member_rows(self, start: int, member: int, rows: NDArray[np.floating]) -> None:
        """Add samples ``start:start+r`` of one member (``rows`` is (r, C)); members of a row range come in order
        0..M-1. Memory then depends on N x C only, whatever M; the sums run in the same order as :meth:`add`, so
        the results are the same to the last bit."""
        m_total, n, c = self.shape
        if self._partial is None:
            self._partial = {"sum": np.zeros((n, c), dtype=np.float64), "data": np.zeros(n, dtype=np.float64)}
            if self.gamma:
                self._partial["sum_s"] = np.zeros((n, c), dtype=np.float64)
        stop = start + rows.shape[0]
        self._partial["sum"][start:stop] += rows
        smoothed = _smooth(rows, self.gamma) if self.gamma else rows
        if self.gamma:
            self._partial["sum_s"][start:stop] += smoothed
        self._partial["data"][start:stop] += _entropy_rows(smoothed)
        if self._members is not None:
            self._members[member, start:stop] = rows
        if member == m_total - 1:
            mean = self._partial["sum"][start:stop] / m_total
            self._mean[start:stop] = mean
            mean_s = self._partial["sum_s"][start:stop] / m_total if self.gamma else mean
            total = _entropy_rows(mean_s, smoothed.dtype)
            data = self._partial["data"][start:stop] / m_total
            self._finish_rows(start, stop, total, data, np.maximum(total - data, 0.0))
            self._seen += stop - start

    def _finish_rows(self, start: int, stop: int, total: NDArray, data: NDArray, knowledge: NDArray) -> None:
        self._u["total"][start:stop] = total
        self._u["data"][start:stop] = data
        self._u["knowledge"][start:stop] = knowledge
        mean_s = self._mean[start:stop] if not self.gamma else _smooth(self._mean[start:stop], self.gamma)
        self._u["neg_confidence"][start:stop] = -_confidence(mean_s)

    def result(self) -> SplitArrays:
        if self._seen != self.shape[1]:
            raise ValueError(f"accumulator saw {self._seen} of {self.shape[1]} samples")
        return SplitArrays(mean_probs=self._mean, member_probs=self._members, **self._u)


def split_arrays(member_probs: NDArray[np.floating], *, smoothing: float = 0.0, keep_members: bool = False
                 ) -> SplitArrays:
    """One-shot :class:`SplitAccumulator` over a whole (validated) member stack."""
    acc = SplitAccumulator(*member_probs.shape, smoothing=smoothing, keep_members=keep_members,
                           dtype=member_probs.dtype)
    acc.add(0, member_probs)
    return acc.result()


def _float_list(a: NDArray) -> list[float]:
    return [float(x) for x in np.asarray(a, dtype=np.float64)]


def core_metrics(probs: NDArray, labels: NDArray, *, bins: int, eps: float, smoothing: float) -> dict[str, float]:
    """accuracy, nll, brier, ece, tace, uce of one predictive distribution (validated (N, C) and labels)."""
    p = _smooth(probs, smoothing) if smoothing else probs
    return {
        "accuracy": _accuracy(probs, labels),
        "nll": _nll(probs, labels, eps, smoothing),
        "brier": float(_brier_per_sample(p, labels).mean()),
        "ece": _ece(p, labels, bins),
        "tace": _tace(p, labels, bins),
        "uce": _uce(p, labels, bins),
    }


def misclassification_section(arrays: SplitArrays, labels: NDArray, *, tpr: float) -> tuple[dict[str, Any], list[str]]:
    """Misclassification detection (positive = top-1 error of the mean) for every uncertainty score.

    Returns ``misclassification_{auroc,aupr,fpr95}_{total,knowledge,confidence}`` (``None`` when undefined) and
    notes. Not comparable across models (Ashukha et al. 2020, Sec. 2.3).
    """
    errors = (_predictions(arrays.mean_probs) != labels).astype(np.int8)
    out: dict[str, Any] = {}
    notes: list[str] = []
    for name in UNCERTAINTY_SCORES:
        try:
            d = _detection_scores(arrays.score(name), errors, tpr)
            vals = (d.auroc, d.average_precision, d.fpr_at_tpr)
        except UndefinedMetricError as exc:
            vals = (None, None, None)
            if not notes:
                notes.append(f"misclassification detection undefined: {exc}")
        for key, v in zip(("auroc", "aupr", "fpr95"), vals):
            out[f"misclassification_{key}_{name}"] = v
    return out, notes


def reliability_section(probs: NDArray, labels: NDArray, *, bins: int, smoothing: float) -> dict[str, Any]:
    """Data of the two reliability diagrams: top-1 confidence vs accuracy (ECE) and normalized entropy vs error
    (UCE, Laves et al. 2019). Bins are equal-width ``(lo, hi]``; empty bins hold 0."""
    p = _smooth(probs, smoothing) if smoothing else probs
    rb = _reliability_bins(p, labels, bins)
    u = _normalized_entropy(p)
    err = (_predictions(p) != labels).astype(np.float64)
    counts, su, se = _binned_sums(_equal_width_bin_index(u, bins), u, err, bins)
    safe = np.maximum(counts, 1)
    return {
        "edges": _float_list(rb.edges),
        "confidence": {"counts": [int(c) for c in rb.counts], "mean_confidence": _float_list(rb.mean_confidence),
                       "accuracy": _float_list(rb.accuracy)},
        "uncertainty": {"counts": [int(c) for c in counts], "mean_uncertainty": _float_list(su / safe),
                        "error": _float_list(se / safe)},
    }


def rejection_section(arrays: SplitArrays, labels: NDArray, *, points: int = 101) -> dict[str, Any]:
    """Accuracy-rejection curves (reject the most uncertain first) for every uncertainty score.

    ``aurc_<score>`` is the area under the risk-coverage curve (lower is better); ``curves`` holds the curve at
    ``points`` evenly spaced rejected fractions in ``[0, 1)`` for the plots.
    """
    n = arrays.n_samples
    idx = np.unique(np.minimum(n - 1, np.round(np.linspace(0.0, 1.0, points, endpoint=False) * n).astype(int)))
    out: dict[str, Any] = {"curves": {}}
    for name in UNCERTAINTY_SCORES:
        curve = _rejection_curve(arrays.mean_probs, labels, arrays.score(name))
        out[f"aurc_{name}"] = float(1.0 - curve.accuracy.mean())
        out["curves"][name] = {"rejected_fraction": _float_list(curve.rejected_fraction[idx]),
                               "accuracy": _float_list(curve.accuracy[idx])}
    return out


def decision_section(probs: NDArray, labels: NDArray, *, cost_preset: str | None,
                     cost_matrix: Sequence[Sequence[float]] | None, smoothing: float, reduction: str
                     ) -> dict[str, Any] | None:
    """URSABench decision cost of the Bayes decisions under the named or given cost matrix (``None`` if neither).

    ``decision_cost`` is the sum over samples when ``reduction == "sum"`` (URSABench) and the mean otherwise;
    both are recorded as ``decision_cost_sum`` and ``decision_cost_mean``.
    """
    if cost_preset is None and cost_matrix is None:
        return None
    cost = cost_matrix_preset(cost_preset) if cost_preset is not None else np.asarray(cost_matrix, np.float64)
    cost = _check_cost(cost, probs.shape[1])
    d = _decision_cost(probs, labels, cost, smoothing)
    return {"decision_cost": d.total if reduction == "sum" else d.mean, "decision_cost_sum": d.total,
            "decision_cost_mean": d.mean, "cost_reduction": reduction}


def ood_section(in_arrays: SplitArrays, ood_arrays: SplitArrays, *, tpr: float) -> dict[str, Any]:
    """OOD detection (positive = OOD) of one OOD split against the in-domain split, for every uncertainty score:
    ``ood_{auroc,aupr,fpr95}_{total,knowledge,confidence}``."""
    y = np.concatenate([np.zeros(in_arrays.n_samples, np.int8), np.ones(ood_arrays.n_samples, np.int8)])
    out: dict[str, Any] = {}
    for name in UNCERTAINTY_SCORES:
        d = _detection_scores(np.concatenate([in_arrays.score(name), ood_arrays.score(name)]), y, tpr)
        out[f"ood_auroc_{name}"] = d.auroc
        out[f"ood_aupr_{name}"] = d.average_precision
        out[f"ood_fpr95_{name}"] = d.fpr_at_tpr
    return out


def ood_histograms(in_arrays: SplitArrays, ood_arrays: SplitArrays, *, n_bins: int = 30) -> dict[str, Any]:
    """Histograms (shared edges per score) of the in-domain and OOD uncertainty scores, for the report's plots."""
    out = {}
    for name in UNCERTAINTY_SCORES:
        a, b = in_arrays.score(name), ood_arrays.score(name)
        lo = float(min(a.min(), b.min()))
        hi = float(max(a.max(), b.max()))
        if hi <= lo:
            hi = lo + 1e-12
        edges = np.linspace(lo, hi, n_bins + 1)
        out[name] = {"edges": _float_list(edges), "in_domain": [int(c) for c in np.histogram(a, edges)[0]],
                     "ood": [int(c) for c in np.histogram(b, edges)[0]]}
    return out


def summarize_ood(sections: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """Mean over OOD splits of every ``ood_*`` key (the headline numbers)."""
    if not sections:
        return {}
    keys = [k for k in next(iter(sections.values())) if k.startswith("ood_")]
    return {k: float(np.mean([s[k] for s in sections.values()])) for k in keys}


def in_domain_section(arrays: SplitArrays, labels: NDArray, *, bins: int, eps: float, smoothing: float, tpr: float,
                      cost_preset: str | None = None, cost_matrix: Sequence[Sequence[float]] | None = None,
                      cost_reduction: str = "mean") -> dict[str, Any]:
    """Everything measured on one labelled in-domain split without fitting anything: core metrics of the
    ensemble mean, misclassification detection, accuracy-rejection curves, reliability-diagram data, the
    decision cost (when a cost matrix is named) and the mean uncertainties."""
    out: dict[str, Any] = {"n_samples": arrays.n_samples}
    out.update(core_metrics(arrays.mean_probs, labels, bins=bins, eps=eps, smoothing=smoothing))
    mis, notes = misclassification_section(arrays, labels, tpr=tpr)
    out.update(mis)
    out["mean_total_uncertainty"] = float(arrays.total.mean())
    out["mean_knowledge_uncertainty"] = float(arrays.knowledge.mean())
    out["mean_data_uncertainty"] = float(arrays.data.mean())
    rej = rejection_section(arrays, labels)
    out.update({k: v for k, v in rej.items() if k != "curves"})
    out["rejection_curves"] = rej["curves"]
    out["reliability"] = reliability_section(arrays.mean_probs, labels, bins=bins, smoothing=smoothing)
    dec = decision_section(arrays.mean_probs, labels, cost_preset=cost_preset, cost_matrix=cost_matrix,
                           smoothing=smoothing, reduction=cost_reduction)
    if dec is not None:
        out.update(dec)
    out["notes"] = notes
    return out


def shift_split_section(arrays: SplitArrays, labels: NDArray, *, bins: int, eps: float, smoothing: float
                        ) -> dict[str, Any]:
    """Core metrics of one labelled shifted split (the shift paper's accuracy, Brier, NLL, ECE; TACE and UCE too)."""
    out: dict[str, Any] = {"n_samples": arrays.n_samples}
    out.update(core_metrics(arrays.mean_probs, labels, bins=bins, eps=eps, smoothing=smoothing))
    out["mean_total_uncertainty"] = float(arrays.total.mean())
    return out


def calibrated_section(arrays: SplitArrays, labels: NDArray, *, placement: str, repeats: int, seed: int, bins: int,
                       eps: float, smoothing: float) -> dict[str, Any] | None:
    """The calibrated protocol on one in-domain split: test-time cross-validated temperature scaling.

    ``post`` fits the temperature on the log of the (smoothed) ensemble mean, ``per_member`` on every member's
    log-probabilities before averaging (needs ``arrays.member_probs``; ``None`` is returned without them). Keys:
    ``cll`` (mean held-out log-likelihood after scaling), ``temperature`` (mean over folds), ``temperature_std``,
    ``temperatures``, ``n_hit_bound``, ``calibrated_{accuracy,nll,brier,ece}`` and the same metrics before
    scaling averaged over the held-out halves (``cv_{nll,brier,ece}_before``).
    """
    if placement == "per_member":
        if arrays.member_probs is None:
            return None
        members = _smooth(arrays.member_probs, smoothing) if smoothing else arrays.member_probs
    else:
        members = (_smooth(arrays.mean_probs, smoothing) if smoothing else arrays.mean_probs)[None]
    cv = _cross_validated_calibration(members, labels, placement=placement, n_repeats=repeats, seed=seed, eps=eps,
                                      n_bins=bins)
    return {
        "cll": cv.cll,
        "temperature": cv.temperature_mean,
        "temperature_std": cv.temperature_std,
        "temperatures": list(cv.temperatures),
        "n_hit_bound": cv.n_hit_bound,
        "calibrated_accuracy": cv.accuracy_after,
        "calibrated_nll": cv.nll_after,
        "calibrated_brier": cv.brier_after,
        "calibrated_ece": cv.ece_after,
        "cv_nll_before": cv.nll_before,
        "cv_brier_before": cv.brier_before,
        "cv_ece_before": cv.ece_before,
        "placement": placement,
        "folds": cv.n_folds,
        "repeats": cv.n_repeats,
        "seed": cv.seed,
    }


def member_curves_section(member_probs: NDArray, labels: NDArray, *, placement: str, orders: int, repeats: int,
                          seed: int, eps: float, smoothing: float) -> dict[str, Any]:
    """CLL, accuracy and Brier of the ensemble of the first k members, k = 1..M, over ``orders`` member orders:
    ``n_members`` and, per metric, ``mean`` and ``std`` over orders (also the DEE reference of a deep ensemble)."""
    members = _smooth(member_probs, smoothing) if smoothing else member_probs
    mc = _member_curves(members, labels, n_orders=orders, seed=seed,
                        placement="post" if placement == "none" else placement, n_repeats=repeats, eps=eps)
    return {
        "n_members": mc.n_members.tolist(),
        "metrics": {name: {"mean": _float_list(getattr(mc, f"{name}_mean")),
                           "std": _float_list(getattr(mc, f"{name}_std"))} for name in ("cll", "accuracy", "brier")},
        "orders": mc.orders.tolist(),
        "placement": mc.placement,
    }


def shift_summary(sections: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Shift splits by kind, and quartiles over kinds per intensity among kinds measured on the same scale.

    ``by_kind[kind]`` lists ``{intensity, split, accuracy, nll, brier, ece, tace, uce}`` sorted by intensity.
    Intensities are only comparable between kinds that share an intensity grid (noise and blur at levels 1-5 are;
    rotation in degrees and translation in pixels are not), so ``groups`` holds one entry per distinct grid:
    ``kinds``, ``intensities`` and ``by_intensity[str(intensity)]`` = ``{intensity, n_splits, <metric>: {min, q1,
    median, q3, max}}`` over its kinds (:func:`ubench.metrics.shift.shift_summary`; Ovadia et al. 2019's box plots).
    """
    metrics = ("accuracy", "nll", "brier", "ece", "tace", "uce")
    by_kind: dict[str, list] = {}
    for name, sec in sections.items():
        row = {"split": name, "intensity": sec["shift_intensity"], **{m: sec[m] for m in metrics}}
        by_kind.setdefault(sec["shift_kind"], []).append(row)
    by_kind = {k: sorted(v, key=lambda r: (r["intensity"], r["split"])) for k, v in sorted(by_kind.items())}
    grids: dict[tuple[float, ...], list[str]] = {}
    for kind, rows in by_kind.items():
        grids.setdefault(tuple(r["intensity"] for r in rows), []).append(kind)
    groups = []
    for grid, kinds in sorted(grids.items(), key=lambda g: (len(g[0]), g[0])):
        summary = _shift_summary([{"kind": k, "intensity": r["intensity"], **{m: r[m] for m in metrics}}
                                  for k in kinds for r in by_kind[k]])
        by_int = {}
        for i, stats in summary.quartiles.items():
            by_int[f"{i:g}"] = {"intensity": i, "n_splits": stats[metrics[0]]["n_kinds"],
                                **{m: {"min": s["min"], "q1": s["q25"], "median": s["median"], "q3": s["q75"],
                                       "max": s["max"]} for m, s in stats.items()}}
        groups.append({"kinds": kinds, "intensities": list(grid), "by_intensity": by_int})
    return {"by_kind": by_kind, "groups": groups}


def headline(report: Mapping[str, Any], primary: str | None) -> dict[str, Any]:
    """The flat headline numbers: the primary in-domain split's metrics (and calibrated ones), the mean over OOD
    splits of every ``ood_*`` key, and the median over shift splits of accuracy, NLL, Brier and ECE."""
    out: dict[str, Any] = {}
    if primary is not None and primary in report["in_domain"]:
        sec = report["in_domain"][primary]
        out.update({k: v for k, v in sec.items()
                    if k != "calibrated" and (isinstance(v, (int, float)) or v is None)})
        cal = sec.get("calibrated")
        if cal:
            out.update({k: cal[k] for k in CALIBRATED_HEADLINE})
    out.update(summarize_ood(report["ood"]))
    if report["shift"]:
        for key in ("accuracy", "nll", "brier", "ece"):
            out[f"shift_{key}_median"] = float(np.median([s[key] for s in report["shift"].values()]))
    return out
