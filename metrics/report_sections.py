# SPDX-License-Identifier: MIT
"""The sections of a ubench report, one split at a time: arrays and settings in, JSON-able dicts out. Pure.

``metrics/report.py`` decides which of these a report holds (:class:`~ubench.metrics.report.ReportBuilder`);
this module computes them. Per-sample work happens once per split in :class:`SplitAccumulator`, fed blocks
``(M, rows, C)`` of a split's member predictions: rows are renormalised (see :data:`RENORMALISE_ABOVE`), then the
ensemble mean and the per-sample uncertainties (total = entropy of the mean, data = mean member entropy,
knowledge = mutual information, confidence = max of the mean) are computed block by block, so a split's member
stack never has to be held at once. Every section then works on those (N, C) and (N,) arrays; only the calibrated
protocol with ``placement="per_member"`` and the member curves need the members.

Central smoothing (``smoothing`` > 0) goes where the ``ursabench`` preset's description in
``scoring/protocols.py`` says (the one place it is written down, with the URSABench code it follows).

Keys are the snake_case names listed in ``scoring/REPORT_KEYS.md``. A metric that is undefined on the data
(misclassification AUROC when every prediction is right) is ``None`` with a note, never NaN.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._validation import UndefinedMetricError
from .calibration import (
    ReliabilityBins,
    _bin_edges,
    _binned_sums,
    _top1,
    _ece,
    _equal_width_bin_index,
    _reliability_bins,
    _tace,
    _uce,
)
from .calibration_debiased import _debiased_error
from .classification import _accuracy, _brier_per_sample, _nll, _predictions
from .decision import _check_cost, _decision_cost, cost_matrix_preset
from .ensemble import _ensemble_mean, _smooth
from .ranking import _detection_scores
from .rejection import _rejection_curve
from .protocol import _calibrated_cv
from .protocol import cross_validated_calibration as _cross_validated_calibration
from .protocol import member_curves as _member_curves
from .temperature import apply_ensemble_temperature
from .row_stats import scaled_top1_entropy
from .uncertainty import _confidence, _entropy_rows, _normalized_entropy, _uncertainty_decomposition
from .calibrators import cross_validated_calibrators as _cross_validated_calibrators
from .shift_paper import _confidence_curves, _quantile_ece
from .shift_paper import _top_k_scores
from .conformal import _cross_validated_conformal
from .diversity import disagreement_per_sample, top1_votes, variation_ratio_per_sample, vote_agreement
from .selective import _integrate, _risk_by_kept
from .smooth_calibration import _smooth_ece

__all__ = [
    "SplitArrays",
    "SplitAccumulator",
    "RowSums",
    "RENORMALISE_ABOVE",
    "UNCERTAINTY_SCORES",
    "scores_for",
    "split_arrays",
    "core_metrics",
    "misclassification_section",
    "reliability_section",
    "rejection_section",
    "decision_section",
    "ood_section",
    "ood_histograms",
    "ood_roc_curves",
    "calibrated_reliability",
    "in_domain_section",
    "shift_split_section",
    "calibrated_section",
    "member_curves_section",
    "dee_cll",
    "peer_section",
    "diversity_section",
    "calibrators_section",
    "shift_paper_section",
]

#: Detection scores, higher = more uncertain: report name -> SplitArrays field.
UNCERTAINTY_SCORES = {"total": "total", "knowledge": "knowledge", "confidence": "neg_confidence"}

#: A row whose float64 sum differs from 1 by more than this is divided by its sum before anything is computed.
#: The archive spec accepts ``|sum - 1| <= 1e-4 + C * 2**-23`` (float32 softmax rounding), which would let an
#: upload add up to 1.2 % probability mass for free at C = 100,000 (issue #16 item 12). Rows within 2**-20 (16
#: float32 ulps of 1) are left bit-identical, so an honest archive scores exactly as its arrays do in any other
#: tool; the mass an upload can still add is at most 2**-20 per row (NLL and Brier move by < 1e-6).
RENORMALISE_ABOVE = 2.0**-20


def scores_for(n_members: int) -> tuple[str, ...]:
    """The detection scores defined for ``n_members`` members: with one member the mutual information is 0 for
    every sample, so the knowledge score detects nothing and is left out (its keys are ``None``)."""
    return tuple(UNCERTAINTY_SCORES) if n_members > 1 else ("total", "confidence")


@dataclass(frozen=True)
class RowSums:
    """The largest ``|sum_c p - 1|`` over a split's rows (every member), where it was, and how many rows were
    renormalised (those above :data:`RENORMALISE_ABOVE`)."""

    max_deviation: float = 0.0
    member: int | None = None
    sample: int | None = None
    n_renormalised: int = 0

    def merged(self, other: RowSums) -> RowSums:
        best = other if other.max_deviation > self.max_deviation else self
        return RowSums(best.max_deviation, best.member, best.sample, self.n_renormalised + other.n_renormalised)


def _renormalised(probs: NDArray, first_sample: int, member0: int = 0) -> tuple[NDArray, RowSums]:
    """``probs`` (M, rows, C) or (rows, C) with every row further than RENORMALISE_ABOVE from 1 divided by its
    float64 sum (rounded back to the input dtype), and the row-sum record. Returns the input itself when no row
    needs it."""
    sums = probs.sum(axis=-1, dtype=np.float64)
    dev = np.abs(sums - 1.0)
    flat = int(np.argmax(dev))
    where = np.unravel_index(flat, dev.shape)
    member, sample = (member0, int(where[0])) if dev.ndim == 1 else (member0 + int(where[0]), int(where[1]))
    bad = dev > RENORMALISE_ABOVE
    n_bad = int(np.count_nonzero(bad))
    record = RowSums(float(dev.flat[flat]), member, first_sample + sample, n_bad)
    if not n_bad:
        return probs, record
    fixed = probs.copy()
    fixed[bad] = (probs[bad].astype(np.float64) / sums[bad][:, None]).astype(probs.dtype)
    return fixed, record


@dataclass(frozen=True)
class SplitArrays:
    """The per-split arrays every section works on.

    ``mean_probs`` (N, C) float64 is the unsmoothed ensemble mean of the renormalised members (``None`` in a
    :meth:`scores_only` copy); the uncertainties
    (N,) are computed on members after the protocol's central smoothing; ``neg_confidence`` is ``-max_c`` of the
    (smoothed) mean, so all three scores read higher = more uncertain. ``member_probs`` (M, N, C) (renormalised)
    is kept only when asked for. ``row_sums`` records the renormalisation. ``disagreement`` and
    ``variation_ratio`` (N,) are the members' top-1 vote diversity (``None`` for one member).
    """

    mean_probs: NDArray[np.float64] | None
    total: NDArray[np.float64]
    data: NDArray[np.float64]
    knowledge: NDArray[np.float64]
    neg_confidence: NDArray[np.float64]
    member_probs: NDArray[np.floating] | None = None
    row_sums: RowSums = RowSums()
    disagreement: NDArray[np.float64] | None = None
    variation_ratio: NDArray[np.float64] | None = None

    @property
    def n_samples(self) -> int:
        return int(self.total.shape[0])

    def score(self, name: str) -> NDArray[np.float64]:
        return getattr(self, UNCERTAINTY_SCORES[name])

    def scores_only(self) -> SplitArrays:
        """The (N,) per-sample arrays without the (N, C) mean and the members (``mean_probs`` None): what OOD
        detection against this split needs, kept after its sections so that a report holds one split's (N, C)
        arrays at a time (issue #29)."""
        return dataclasses.replace(self, mean_probs=None, member_probs=None)


class SplitAccumulator:
    """Stream a split's member predictions block by block: ``add(start, block)`` then ``result()``.

    Parameters
    ----------
    n_members, n_samples, n_classes : the split's shape (M, N, C).
    smoothing : central smoothing weight of every member before the uncertainties (0 = none).
    keep_members : also keep the member stack (M, N, C) in ``dtype`` (for per-member placement, member curves).
    dtype : storage dtype of the kept members.
    keep_mean : hold the mean (N, C) float64 for ``result().mean_probs`` (else None: a split too large for it).

    Blocks are assumed validated (the archive reader's value checks run on the same blocks). Each block's rows
    are renormalised first (:data:`RENORMALISE_ABOVE`), so everything below sees rows that sum to 1.
    """

    def __init__(self, n_members: int, n_samples: int, n_classes: int, *, smoothing: float = 0.0,
                 keep_members: bool = False, dtype: type | np.dtype = np.float32, keep_mean: bool = True):
        self.gamma = float(smoothing)
        self.shape = (int(n_members), int(n_samples), int(n_classes))
        # Without keep_mean (a split whose mean does not fit memory) each block's mean lives in a scratch buffer
        # and the result's mean_probs is None: the caller reads the mean again when a section needs it.
        self._mean = np.empty((n_samples, n_classes), dtype=np.float64) if keep_mean else None
        self._scratch: NDArray[np.float64] | None = None
        self._u = {k: np.empty(n_samples, dtype=np.float64) for k in ("total", "data", "knowledge", "neg_confidence")}
        self._votes = ({k: np.empty(n_samples, dtype=np.float64) for k in ("disagreement", "variation_ratio")}
                       if n_members > 1 else {})
        self._members = np.empty(self.shape, dtype=dtype) if keep_members else None
        self._seen = 0
        self._partial: dict[str, NDArray] | None = None
        self._rows = RowSums()

    def add(self, start: int, block: NDArray[np.floating]) -> None:
        """Add samples ``start:start+rows`` of every member: ``block`` is (M, rows, C)."""
        block, rows = _renormalised(block, start)
        self._rows = self._rows.merged(rows)
        stop = start + block.shape[1]
        mean = self._mean_rows(start, stop)
        if self.gamma:  # uncertainties of the smoothed members; the report's mean stays unsmoothed
            mean[...] = _ensemble_mean(block)
            dec = _uncertainty_decomposition(_smooth(block, self.gamma))
        else:  # one pass gives the uncertainties and the mean
            dec = _uncertainty_decomposition(block, mean_out=mean)
        self._finish_rows(start, stop, dec.total, dec.data, dec.knowledge, mean)
        if self._votes:
            self._finish_votes(start, stop, top1_votes(block))
        if self._members is not None:
            self._members[:, start:stop] = block
        self._seen += block.shape[1]

    def _finish_votes(self, start: int, stop: int, votes: NDArray) -> None:
        m = self.shape[0]
        pairs, modal = vote_agreement(votes)
        self._votes["disagreement"][start:stop] = disagreement_per_sample(pairs, m)
        self._votes["variation_ratio"][start:stop] = variation_ratio_per_sample(modal, m)

    def add_member_rows(self, start: int, member: int, rows: NDArray[np.floating]) -> None:
        """Add samples ``start:start+r`` of one member (``rows`` is (r, C)); the members of a row range come in
        order 0..M-1, one range after another. Memory then depends on N x C only, whatever M: the running sums
        of the range live in the mean's own rows and the votes in an (M, r) array; the mean is summed in the
        same order as :meth:`add`, so it is the same to the last bit."""
        m_total, n, c = self.shape
        rows, record = _renormalised(rows, start, member)
        self._rows = self._rows.merged(record)
        stop = start + rows.shape[0]
        if member == 0:
            self._range_mean = self._mean_rows(start, stop)
        total_sum = self._range_mean  # the range's running sum until its last member, then its mean
        if member == 0:
            total_sum[...] = rows
            self._partial = {"data": np.zeros(stop - start, dtype=np.float64)}
            if self._votes:
                self._partial["votes"] = np.empty((m_total, stop - start), dtype=np.intp)
            if self.gamma:
                self._partial["sum_s"] = np.zeros((stop - start, c), dtype=np.float64)
        else:
            total_sum += rows
        smoothed = _smooth(rows, self.gamma) if self.gamma else rows
        if self.gamma:
            self._partial["sum_s"] += smoothed
        self._partial["data"] += _entropy_rows(smoothed)
        if self._votes:
            self._partial["votes"][member] = np.argmax(rows, axis=-1)
        if self._members is not None:
            self._members[member, start:stop] = rows
        if member == m_total - 1:
            total_sum /= m_total
            mean_s = self._partial["sum_s"] / m_total if self.gamma else total_sum
            total = _entropy_rows(mean_s, smoothed.dtype)
            data = self._partial["data"] / m_total
            self._finish_rows(start, stop, total, data, np.maximum(total - data, 0.0), total_sum)
            if self._votes:
                self._finish_votes(start, stop, self._partial["votes"])
            self._partial = None
            self._seen += stop - start

    def _mean_rows(self, start: int, stop: int) -> NDArray[np.float64]:
        """Where the mean of rows ``start:stop`` goes: the held mean's rows, or a scratch block."""
        if self._mean is not None:
            return self._mean[start:stop]
        if self._scratch is None or self._scratch.shape[0] < stop - start:
            self._scratch = np.empty((stop - start, self.shape[2]))
        return self._scratch[: stop - start]

    def _finish_rows(self, start: int, stop: int, total: NDArray, data: NDArray, knowledge: NDArray,
                     mean: NDArray) -> None:
        self._u["total"][start:stop] = total
        self._u["data"][start:stop] = data
        self._u["knowledge"][start:stop] = knowledge
        mean_s = mean if not self.gamma else _smooth(mean, self.gamma)
        self._u["neg_confidence"][start:stop] = -_confidence(mean_s)

    def result(self) -> SplitArrays:
        if self._seen != self.shape[1]:
            raise ValueError(f"accumulator saw {self._seen} of {self.shape[1]} samples")
        return SplitArrays(mean_probs=self._mean, member_probs=self._members, row_sums=self._rows, **self._u,
                           **self._votes)


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
    """accuracy, nll, brier, ece, tace, uce and the debiased L2 calibration error ``l2_ce_debiased`` (Kumar et al.
    2019) of one predictive distribution (validated (N, C) and labels); only NLL sees ``smoothing`` (the
    ``ursabench`` preset in ``scoring/protocols.py`` says why)."""
    conf = probs[np.arange(probs.shape[0]), _predictions(probs)].astype(np.float64)
    return {
        "accuracy": _accuracy(probs, labels),
        "nll": _nll(probs, labels, eps, smoothing),
        "brier": float(_brier_per_sample(probs, labels).mean()),
        "ece": _ece(probs, labels, bins),
        "tace": _tace(probs, labels, bins),
        "uce": _uce(probs, labels, bins),
        "l2_ce_debiased": _debiased_error(conf, (_predictions(probs) == labels).astype(np.float64), bins),
    }


def misclassification_section(arrays: SplitArrays, labels: NDArray, *, tpr: float,
                              scores: Sequence[str] = tuple(UNCERTAINTY_SCORES)) -> tuple[dict[str, Any], list[str]]:
    """Misclassification detection (positive = top-1 error of the mean) for every uncertainty score.

    Returns ``misclassification_{auroc,aupr,fpr95}_{total,knowledge,confidence}`` (``None`` when undefined, or
    for a score not in ``scores``) and notes. Not comparable across models (Ashukha et al. 2020, Sec. 2.3).
    """
    errors = (_predictions(arrays.mean_probs) != labels).astype(np.int8)
    out: dict[str, Any] = {}
    notes: list[str] = []
    for name in UNCERTAINTY_SCORES:
        vals = (None, None, None)
        if name in scores:
            try:
                d = _detection_scores(arrays.score(name), errors, tpr)
                vals = (d.auroc, d.average_precision, d.fpr_at_tpr)
            except UndefinedMetricError as exc:
                if not notes:
                    notes.append(f"misclassification detection undefined: {exc}")
        for key, v in zip(("auroc", "aupr", "fpr95"), vals):
            out[f"misclassification_{key}_{name}"] = v
    return out, notes


def reliability_section(probs: NDArray, labels: NDArray, *, bins: int) -> dict[str, Any]:
    """Data of the two reliability diagrams of the unsmoothed ``probs``: top-1 confidence vs accuracy (ECE) and
    normalized entropy vs error (UCE, Laves et al. 2019). Bins are equal-width ``(lo, hi]``; empty bins hold 0."""
    return _reliability_from_rows(_reliability_bins(probs, labels, bins), _normalized_entropy(probs),
                                  _predictions(probs), labels, bins=bins)


def _reliability_from_rows(rb, u: NDArray, pred: NDArray, labels: NDArray, *, bins: int) -> dict[str, Any]:
    """:func:`reliability_section` from its per-sample parts: the confidence bins ``rb``, normalized entropy
    ``u`` and top-1 class ``pred`` (N,)."""
    err = (pred != labels).astype(np.float64)
    counts, su, se = _binned_sums(_equal_width_bin_index(u, bins), u, err, bins)
    safe = np.maximum(counts, 1)
    return {
        "edges": _float_list(rb.edges),
        "confidence": {"counts": [int(c) for c in rb.counts], "mean_confidence": _float_list(rb.mean_confidence),
                       "accuracy": _float_list(rb.accuracy)},
        "uncertainty": {"counts": [int(c) for c in counts], "mean_uncertainty": _float_list(su / safe),
                        "error": _float_list(se / safe)},
    }


def rejection_section(arrays: SplitArrays, labels: NDArray, *, points: int = 101,
                      scores: Sequence[str] = tuple(UNCERTAINTY_SCORES)) -> dict[str, Any]:
    """Accuracy-rejection curves (reject the most uncertain first) for every uncertainty score in ``scores``.

    ``aurc_<score>`` is the area under the risk-coverage curve (lower is better; ``None`` for a score not in
    ``scores``); ``curves`` holds the curve at ``points`` evenly spaced rejected fractions in ``[0, 1)``.
    """
    n = arrays.n_samples
    idx = np.unique(np.minimum(n - 1, np.round(np.linspace(0.0, 1.0, points, endpoint=False) * n).astype(int)))
    out: dict[str, Any] = {"curves": {}}
    for name in UNCERTAINTY_SCORES:
        if name not in scores:
            out[f"aurc_{name}"] = None
            continue
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
    both are recorded as ``decision_cost_sum`` and ``decision_cost_mean``; ``cost_preset`` names the matrix
    (``None`` for a given one). Decisions see the smoothed mean (URSABench smooths every member before the risk).
    """
    if cost_preset is None and cost_matrix is None:
        return None
    cost = cost_matrix_preset(cost_preset) if cost_preset is not None else np.asarray(cost_matrix, np.float64)
    cost = _check_cost(cost, probs.shape[1])
    d = _decision_cost(probs, labels, cost, smoothing)
    return {"decision_cost": d.total if reduction == "sum" else d.mean, "decision_cost_sum": d.total,
            "decision_cost_mean": d.mean, "cost_reduction": reduction, "cost_preset": cost_preset}


def shift_paper_section(arrays: SplitArrays, labels: NDArray, *, bins: int, repeats: int, seed: int
                        ) -> dict[str, Any]:
    """The shift paper's extra outputs on a labelled split (:mod:`ubench.metrics.confidence`): ``top5_accuracy``
    and ``top5_ece`` (``None`` with 5 classes or fewer), ``ece_quantile`` (bin edges at quantiles of the other
    CV half; ``None`` below 2 samples) and ``confidence_curves``."""
    p, c = arrays.mean_probs, arrays.mean_probs.shape[1]
    top5 = _top_k_scores(p, labels, 5, bins) if c > 5 else (None, None)  # one pass for both
    conf, hit = _top1(p, labels)  # validated when read: the private kernels, no second check
    return {
        "top5_accuracy": top5[0],
        "top5_ece": top5[1],
        "ece_quantile": (_quantile_ece(conf, hit, n_bins=bins, n_repeats=repeats, seed=seed)
                         if arrays.n_samples >= 2 else None),
        "confidence_curves": _confidence_curves(conf, hit),
    }


def entropy_histogram(arrays: SplitArrays, n_classes: int, n_bins: int = 30) -> dict[str, Any]:
    """Counts of the total uncertainty (entropy of the mean, nats) in ``n_bins`` equal bins of [0, log C]."""
    edges = np.linspace(0.0, float(np.log(n_classes)), n_bins + 1)
    counts = np.histogram(np.clip(arrays.total, 0.0, edges[-1]), edges)[0]
    return {"edges": _float_list(edges), "counts": [int(x) for x in counts]}


def diversity_section(arrays: SplitArrays) -> dict[str, Any]:
    """Mean top-1 vote diversity of the members: ``disagreement`` (share of member pairs that disagree) and
    ``variation_ratio`` (share of members off the modal class); ``None`` for one member
    (:mod:`ubench.metrics.diversity`)."""
    if arrays.disagreement is None:
        return {"disagreement": None, "variation_ratio": None}
    return {"disagreement": float(arrays.disagreement.mean()), "variation_ratio": float(arrays.variation_ratio.mean())}


def peer_section(arrays: SplitArrays, labels: NDArray, *, conformal_method: str, conformal_alpha: float,
                 repeats: int, seed: int) -> dict[str, Any]:
    """What the newest peers report on a labelled split (issue #17 item 5): ``augrc``, ``cov_at_5_risk`` (``None``
    when no coverage reaches 5 % risk), ``risk_at_80_cov`` (selective classification by the mean's confidence,
    :mod:`ubench.metrics.selective`), ``smooth_ece`` (relplot's, of the unsmoothed mean), the vote diversity, and
    split-conformal ``conformal_coverage`` / ``conformal_set_size`` at ``1 - conformal_alpha`` fitted and
    evaluated over the test-time CV halves (:func:`ubench.metrics.cross_validated_conformal`; ``None`` below 2
    samples)."""
    risk = _risk_by_kept(arrays.mean_probs, labels, arrays.neg_confidence)
    n = risk.shape[0]
    coverage = np.arange(1, n + 1, dtype=np.float64) / n
    ok = np.flatnonzero(risk <= 0.05)
    f = np.clip(_confidence(arrays.mean_probs).astype(np.float64), 0.0, 1.0)
    out: dict[str, Any] = {
        "augrc": _integrate(coverage * risk, "riemann"),
        "cov_at_5_risk": None if ok.size == 0 else float((ok[-1] + 1) / n),
        "risk_at_80_cov": float(risk[max(1, math.ceil(n * 0.8)) - 1]),
        "smooth_ece": _smooth_ece(f, (_predictions(arrays.mean_probs) == labels).astype(np.float64))[0],
    }
    out.update(diversity_section(arrays))
    if n >= 2:
        # validated input: no second check
        cp = _cross_validated_conformal(arrays.mean_probs, labels, method=conformal_method,
                                        alpha=float(conformal_alpha), n_repeats=repeats, seed=seed)
        out.update(conformal_coverage=cp.coverage, conformal_set_size=cp.set_size)
    else:
        out.update(conformal_coverage=None, conformal_set_size=None)
    return out


def ood_section(in_arrays: SplitArrays, ood_arrays: SplitArrays, *, tpr: float,
                scores: Sequence[str] = tuple(UNCERTAINTY_SCORES)) -> dict[str, Any]:
    """OOD detection (positive = OOD) of one OOD split against the in-domain split, for every uncertainty score:
    ``ood_{auroc,aupr,fpr95}_{total,knowledge,confidence}`` (``None`` for a score not in ``scores``)."""
    y = np.concatenate([np.zeros(in_arrays.n_samples, np.int8), np.ones(ood_arrays.n_samples, np.int8)])
    out: dict[str, Any] = {}
    for name in UNCERTAINTY_SCORES:
        vals = (None, None, None)
        if name in scores:
            d = _detection_scores(np.concatenate([in_arrays.score(name), ood_arrays.score(name)]), y, tpr)
            vals = (d.auroc, d.average_precision, d.fpr_at_tpr)
        for key, v in zip(("auroc", "aupr", "fpr95"), vals):
            out[f"ood_{key}_{name}"] = v
    return out


def ood_histograms(in_arrays: SplitArrays, ood_arrays: SplitArrays, *, n_bins: int = 30,
                   scores: Sequence[str] = tuple(UNCERTAINTY_SCORES)) -> dict[str, Any]:
    """Histograms (shared edges per score) of the in-domain and OOD uncertainty scores, for the report's plots."""
    out = {}
    for name in scores:
        a, b = in_arrays.score(name), ood_arrays.score(name)
        lo = float(min(a.min(), b.min()))
        hi = float(max(a.max(), b.max()))
        if hi <= lo:
            hi = lo + 1e-12
        edges = np.linspace(lo, hi, n_bins + 1)
        out[name] = {"edges": _float_list(edges), "in_domain": [int(c) for c in np.histogram(a, edges)[0]],
                     "ood": [int(c) for c in np.histogram(b, edges)[0]]}
    return out


def ood_roc_curves(in_arrays: SplitArrays, ood_arrays: SplitArrays, *, points: int = 101,
                   scores: Sequence[str] = tuple(UNCERTAINTY_SCORES)) -> dict[str, Any]:
    r"""ROC curves of OOD detection (positive = OOD) for the report's plots: per score, ``fpr`` at ``points``
    evenly spaced values in [0, 1] and ``tpr`` there.

    The exact ROC (every distinct threshold, ties collapsed, from (0, 0) to (1, 1)) is interpolated linearly at
    the grid, so the trapezoid area of the exact curve is the AUROC of ``ood_section``:

    .. math:: \mathrm{TPR}(t) = \frac{|\{i \in \mathrm{OOD}: s_i \ge t\}|}{N_\mathrm{OOD}}, \quad
              \mathrm{FPR}(t) = \frac{|\{i \in \mathrm{ID}: s_i \ge t\}|}{N_\mathrm{ID}}

    Convention: the points of scikit-learn's ``roc_curve`` (``drop_intermediate=False``), read at the grid: at
    a grid FPR where the curve rises vertically the highest TPR, between breakpoints the line joining them.
    """
    grid = np.linspace(0.0, 1.0, points)
    out = {}
    for name in scores:
        s = np.concatenate([in_arrays.score(name), ood_arrays.score(name)])
        y = np.concatenate([np.zeros(in_arrays.n_samples), np.ones(ood_arrays.n_samples)])
        order = np.argsort(-s, kind="stable")
        s, y = s[order], y[order]
        last = np.r_[np.flatnonzero(np.diff(s)), s.size - 1]  # last index of each distinct score
        tps = np.cumsum(y)[last]
        fpr = np.r_[0.0, ((last + 1) - tps) / in_arrays.n_samples]
        tpr = np.r_[0.0, tps / ood_arrays.n_samples]
        # each distinct FPR: the TPR the curve arrives with (first) and leaves with (last)
        starts = np.r_[0, np.flatnonzero(np.diff(fpr)) + 1]
        f, t_in, t_out = fpr[starts], tpr[starts], tpr[np.r_[starts[1:] - 1, fpr.size - 1]]
        j = np.searchsorted(f, grid, side="right") - 1
        nxt = np.minimum(j + 1, f.size - 1)
        span = np.where(nxt > j, f[nxt] - f[j], 1.0)
        w = np.where(nxt > j, (grid - f[j]) / span, 0.0)
        out[name] = {"fpr": _float_list(grid), "tpr": _float_list(t_out[j] + w * (t_in[nxt] - t_out[j]))}
    return out


def calibrated_reliability(arrays: SplitArrays, labels: NDArray, *, temperature: float, placement: str, bins: int,
                           eps: float, smoothing: float) -> dict[str, Any]:
    """Reliability-diagram data (:func:`reliability_section`) of the split after temperature scaling with
    ``temperature`` (the calibrated protocol's mean fitted T), for the "after" diagram of the report.

    The prediction is scaled as the calibrated protocol scales it (``post``: ``softmax(log(p̄ + eps) / T)`` of the
    smoothed mean; ``per_member``: the mean of every smoothed member's ``softmax(log(p_m + eps) / T)``). T was
    fitted on halves of this same split, so this diagram is in-sample; the cross-validated ``calibrated_ece`` is
    the held-out number.
    """
    if placement == "per_member" and arrays.member_probs is not None:
        members = _smooth(arrays.member_probs, smoothing) if smoothing else arrays.member_probs
        probs = apply_ensemble_temperature(members, temperature, placement="per_member", eps=eps)
        return reliability_section(probs, labels, bins=bins)
    mean = _smooth(arrays.mean_probs, smoothing) if smoothing else arrays.mean_probs
    # block by block (the scaled (N, C) prediction is never held whole): the same rows as
    # apply_ensemble_temperature(mean[None], temperature, placement="post", eps=eps)
    conf, pred, u = scaled_top1_entropy(mean, temperature, eps=eps)
    correct = (pred == labels).astype(np.float64)
    counts, sv, sh = _binned_sums(_equal_width_bin_index(conf, bins), conf, correct, bins)
    safe = np.maximum(counts, 1)
    rb = ReliabilityBins(edges=_bin_edges(bins), counts=counts, mean_confidence=sv / safe, accuracy=sh / safe)
    return _reliability_from_rows(rb, u, pred, labels, bins=bins)


def in_domain_section(arrays: SplitArrays, labels: NDArray, *, bins: int, eps: float, smoothing: float, tpr: float,
                      cost_preset: str | None = None, cost_matrix: Sequence[Sequence[float]] | None = None,
                      cost_reduction: str = "mean", scores: Sequence[str] = tuple(UNCERTAINTY_SCORES),
                      conformal_method: str = "aps", conformal_alpha: float = 0.1, repeats: int = 5, seed: int = 0
                      ) -> dict[str, Any]:
    """Everything measured on one labelled in-domain split without fitting a calibrator: core metrics of the
    ensemble mean, misclassification detection, accuracy-rejection curves, reliability-diagram data, the
    decision cost (when a cost matrix is named), the mean uncertainties and :func:`peer_section`."""
    out: dict[str, Any] = {"n_samples": arrays.n_samples}
    out.update(core_metrics(arrays.mean_probs, labels, bins=bins, eps=eps, smoothing=smoothing))
    mis, notes = misclassification_section(arrays, labels, tpr=tpr, scores=scores)
    out.update(mis)
    out["mean_total_uncertainty"] = float(arrays.total.mean())
    out["mean_knowledge_uncertainty"] = float(arrays.knowledge.mean())
    out["mean_data_uncertainty"] = float(arrays.data.mean())
    rej = rejection_section(arrays, labels, scores=scores)
    out.update({k: v for k, v in rej.items() if k != "curves"})
    out["rejection_curves"] = rej["curves"]
    out["reliability"] = reliability_section(arrays.mean_probs, labels, bins=bins)
    dec = decision_section(arrays.mean_probs, labels, cost_preset=cost_preset, cost_matrix=cost_matrix,
                           smoothing=smoothing, reduction=cost_reduction)
    if dec is not None:
        out.update(dec)
    out.update(peer_section(arrays, labels, conformal_method=conformal_method, conformal_alpha=conformal_alpha,
                            repeats=repeats, seed=seed))
    out.update(shift_paper_section(arrays, labels, bins=bins, repeats=repeats, seed=seed))
    out["notes"] = notes
    return out


def shift_split_section(arrays: SplitArrays, labels: NDArray, *, bins: int, eps: float, smoothing: float,
                        conformal_method: str = "aps", conformal_alpha: float = 0.1, repeats: int = 5, seed: int = 0
                        ) -> dict[str, Any]:
    """Core metrics of one labelled shifted split (the shift paper's accuracy, Brier, NLL, ECE; TACE and UCE too)
    and :func:`peer_section`."""
    out: dict[str, Any] = {"n_samples": arrays.n_samples}
    out.update(core_metrics(arrays.mean_probs, labels, bins=bins, eps=eps, smoothing=smoothing))
    out["mean_total_uncertainty"] = float(arrays.total.mean())
    out.update(peer_section(arrays, labels, conformal_method=conformal_method, conformal_alpha=conformal_alpha,
                            repeats=repeats, seed=seed))
    out.update(shift_paper_section(arrays, labels, bins=bins, repeats=repeats, seed=seed))
    out["reliability"] = reliability_section(arrays.mean_probs, labels, bins=bins)
    out["entropy_histogram"] = entropy_histogram(arrays, arrays.mean_probs.shape[1])
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
        cv = _cross_validated_calibration(members, labels, placement=placement, n_repeats=repeats, seed=seed,
                                          eps=eps, n_bins=bins)
    else:
        # the split's mean as it is (validated when it was read): no copy, no second check
        mean = _smooth(arrays.mean_probs, smoothing) if smoothing else arrays.mean_probs
        cv = _calibrated_cv(None, mean, labels, placement="post", n_repeats=repeats, seed=seed, eps=eps, n_bins=bins)
    d = cv.to_dict()  # the metrics carry the report's names
    return {
        **{k: d[k] for k in ("cll", "temperature", "temperature_std", "temperatures", "n_hit_bound",
                             "calibrated_accuracy", "calibrated_nll", "calibrated_brier", "calibrated_ece",
                             "cv_nll_before", "cv_brier_before", "cv_ece_before")},
        "placement": placement,
        "folds": cv.n_folds,
        "repeats": cv.n_repeats,
        "seed": cv.seed,
    }


def dee_cll(arrays: SplitArrays, labels: NDArray, *, placement: str, orders: int, repeats: int, seed: int,
            eps: float, smoothing: float) -> float | None:
    """The CLL that DEE reads off the deep-ensemble curve: the full ensemble's point of :func:`member_curves_section`.

    Every order's prefix of all M members is the same ensemble; only its CV halvings differ (order r uses halvings
    ``r * repeats`` to ``(r + 1) * repeats - 1`` of one ``default_rng(seed)`` stream, ``metrics.protocol``). Their
    mean is therefore the test-time CV CLL over ``orders * repeats`` halvings of that stream, computed here without
    the prefixes. Read off the curve at the same point, a deep ensemble gets DEE = K exactly (Ashukha et al. 2020,
    Sec. 3.1, where each try redraws its halvings). ``None`` where :func:`calibrated_section` is.
    """
    cv = calibrated_section(arrays, labels, placement=placement, repeats=orders * repeats, seed=seed, bins=1,
                            eps=eps, smoothing=smoothing)
    return None if cv is None else cv["cll"]


def calibrators_section(arrays: SplitArrays, labels: NDArray, *, names: Sequence[str], repeats: int, seed: int,
                        bins: int, eps: float, smoothing: float, odir: str = "fixed") -> dict[str, Any] | None:
    """``{name: {nll, brier, ece, unconverged_folds}}``: each post-hoc calibrator
    (:mod:`ubench.metrics.calibrators`) fitted on one half of the (smoothed) ensemble mean and scored on the other,
    means over the same 2 x ``repeats`` folds as ``calibrated`` (``None`` below 2 samples). With ``odir="cv"``
    ``dirichlet`` chooses its ODIR λ and μ by inner cross-validation in each fold and also reports ``selected``:
    ``[{lambda, mu, inner_nll}]``, one per fold."""
    if arrays.n_samples < 2:
        return None
    probs = _smooth(arrays.mean_probs, smoothing) if smoothing else arrays.mean_probs
    options = {"odir_lambda": "cv"} if odir == "cv" else {}
    scores = _cross_validated_calibrators(probs, labels, names, n_repeats=repeats, seed=seed, eps=eps, n_bins=bins,
                                          **options)
    out = {name: {"nll": s.nll, "brier": s.brier, "ece": s.ece, "unconverged_folds": s.unconverged_folds}
           for name, s in scores.items()}
    for name, s in scores.items():
        if s.selected:
            out[name]["selected"] = [dict(d) for d in s.selected]
    return out


def member_curves_section(member_probs: NDArray, labels: NDArray, *, placement: str, orders: int, repeats: int,
                          seed: int, eps: float, smoothing: float, progress=None) -> dict[str, Any]:
    """CLL, accuracy and Brier of the ensemble of the first k members, k = 1..M, over ``orders`` member orders:
    ``n_members`` and, per metric, ``mean`` and ``std`` over orders (also the DEE reference of a deep ensemble).
    ``progress(done, total)`` is called after every prefix."""
    members = _smooth(member_probs, smoothing) if smoothing else member_probs
    mc = _member_curves(members, labels, n_orders=orders, seed=seed,
                        placement="post" if placement == "none" else placement, n_repeats=repeats, eps=eps,
                        progress=progress)
    return {
        "n_members": mc.n_members.tolist(),
        "metrics": {name: {"mean": _float_list(getattr(mc, f"{name}_mean")),
                           "std": _float_list(getattr(mc, f"{name}_std"))} for name in ("cll", "accuracy", "brier")},
        "orders": mc.orders.tolist(),
        "placement": mc.placement,
    }
