# SPDX-License-Identifier: MIT
"""The shift paper's confidence outputs (Ovadia et al. 2019; their released ``uq_benchmark_2019/metrics_lib.py``):
accuracy and count of the samples at or above a confidence threshold, top-k accuracy, top-k ECE, and ECE with
bin edges at quantiles of held-out confidences.

Convention on bin edges: ubench's bins are ``(lo, hi]`` for both the counts and the accuracies. The released
``bin_predictions_and_accuracies`` counts with ``np.histogram`` (``[lo, hi)``, last bin closed) but averages
with ``np.digitize(..., right=True)`` (``(lo, hi]``), so a confidence exactly on an inner edge is counted in one
bin and averaged into the other; ubench's choice is the consistent one of the two.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._validation import check_probs
from .calibration import checked_top1
from .classification import _check_probs_labels
from .protocol import cv_splits
from .row_ranking import ranked_prefix, row_blocks

__all__ = ["CONFIDENCE_THRESHOLDS", "confidence_curves", "top_k_accuracy", "top_k_calibration_error",
           "quantile_bin_edges", "binned_calibration_error", "cross_validated_quantile_ece"]

#: Column groups of :func:`_top_k`'s cut-off (their maxima bound the k-th largest entry of a row).
_TOP_K_GROUPS = 32

#: The paper's confidence-figure grid: τ = 0, 0.05, ..., 0.95.
CONFIDENCE_THRESHOLDS = np.round(np.arange(20) * 0.05, 2)


def confidence_curves(probs: ArrayLike, labels: ArrayLike | None = None, *,
                      thresholds: ArrayLike = CONFIDENCE_THRESHOLDS) -> dict[str, list]:
    r"""Accuracy and number of samples with top-1 confidence :math:`\max_c p_{ic} \ge \tau`, for each τ.

    Returns ``{"thresholds", "count", "accuracy"}``; ``accuracy`` is ``None`` where no sample reaches τ, and every
    entry is ``None`` without labels (OOD splits: only the counts). As the released
    ``compute_accuracies_at_confidences`` (``>=``, the top-1 class of the mean).

    Examples
    --------
    >>> import numpy as np
    >>> c = confidence_curves(np.array([[0.9, 0.1], [0.6, 0.4]]), np.array([0, 1]), thresholds=[0.5, 0.7, 0.95])
    >>> c["count"], c["accuracy"]
    ([2, 1, 0], [0.5, 1.0, None])
    """
    if labels is None:
        p = check_probs(probs)
        conf = p.max(axis=1).astype(np.float64)
        hit = None
    else:
        conf, hit = checked_top1(probs, labels)
    return _confidence_curves(conf, hit, thresholds)


def _confidence_curves(conf: NDArray, hit: NDArray | None, thresholds: ArrayLike = CONFIDENCE_THRESHOLDS
                       ) -> dict[str, list]:
    """:func:`confidence_curves` from the top-1 confidences (N,) and hits (N,) (None without labels)."""
    t = np.asarray(thresholds, dtype=np.float64)
    order = np.sort(conf)
    count = conf.shape[0] - np.searchsorted(order, t, side="left")
    out = {"thresholds": [float(x) for x in t], "count": [int(c) for c in count]}
    if hit is None:
        out["accuracy"] = [None] * t.shape[0]
        return out
    hits_sorted = np.sort(conf[hit.astype(bool)])
    n_hits = hits_sorted.shape[0] - np.searchsorted(hits_sorted, t, side="left")
    out["accuracy"] = [float(h / c) if c else None for h, c in zip(n_hits, count)]
    return out


def _top_k(probs: NDArray, labels: NDArray, k: int) -> tuple[NDArray, NDArray]:
    """(N, k) probabilities of the k most probable classes (decreasing) and whether each is the label.

    Row blocks only (``probs[a:b]``), no (N, C) temporary: in each row the k-th largest of the maxima of 32
    column groups bounds the k-th largest entry from below, so only the entries at or above it are ranked
    (:func:`~ubench.metrics.row_ranking.ranked_prefix`). The label is among the k when fewer than k classes rank
    above it (larger, or tied with a smaller class index).
    """
    n, c = probs.shape
    if not 1 <= k <= c:
        raise ValueError(f"k must lie in [1, n_classes = {c}], got {k}")
    values = np.empty((n, k))
    hits = np.zeros((n, k), dtype=bool)
    starts = np.arange(0, c, max(1, -(-c // _TOP_K_GROUPS)))
    cols = np.arange(c)
    for a, b in row_blocks(n, c, 1 << 18):
        p = np.asarray(probs[a:b], dtype=np.float64)
        y = labels[a:b]
        gm = np.maximum.reduceat(p, starts, axis=1)
        # at least k groups reach the k-th largest group maximum, so at least k entries do
        cut = np.partition(gm, gm.shape[1] - k, axis=1)[:, gm.shape[1] - k] if gm.shape[1] > k else p.min(axis=1)
        for g in ranked_prefix(p, p >= cut[:, None])[0]:
            values[a + g.rows] = g.values[:, :k]
        py = p[np.arange(b - a), y]
        above = (p > py[:, None]).sum(axis=1)
        ties = np.flatnonzero(above + 1 < (p >= py[:, None]).sum(axis=1))
        if ties.size:  # a tied class with a smaller index ranks above the label
            above[ties] += ((p[ties] == py[ties, None]) & (cols[None, :] < y[ties, None])).sum(axis=1)
        inside = np.flatnonzero(above < k)
        hits[a + inside, above[inside]] = True
    return values, hits


def _top_k_scores(probs: NDArray, labels: NDArray, k: int, n_bins: int) -> tuple[float, float]:
    """(top-k accuracy, top-k ECE) from one :func:`_top_k` pass; assumes validated input."""
    v, h = _top_k(probs, labels, k)
    return float(h.any(axis=1).mean()), binned_calibration_error(v, h, np.linspace(0.0, 1.0, n_bins + 1))


def top_k_accuracy(probs: ArrayLike, labels: ArrayLike, *, k: int = 5) -> float:
    """Share of samples whose label is among the k most probable classes.

    Convention: ties at the k-th place go to the smaller class index (a stable descending sort); the released
    code takes ``np.argsort``'s order and ubench before issue #29 took ``np.argpartition``'s: they differ only
    when the label ties with the k-th class.

    Examples
    --------
    >>> import numpy as np
    >>> top_k_accuracy(np.array([[0.5, 0.3, 0.2], [0.5, 0.3, 0.2]]), np.array([1, 2]), k=2)
    0.5
    """
    probs, labels = _check_probs_labels(probs, labels)
    return float(_top_k(probs, labels, k)[1].any(axis=1).mean())


def binned_calibration_error(values: ArrayLike, hits: ArrayLike, edges: ArrayLike) -> float:
    r""":math:`\sum_b \frac{|B_b|}{n} |\bar h_b - \bar v_b|` over the bins ``(edges[b], edges[b+1]]`` (the first
    bin also takes ``edges[0]``) of binary events ``hits`` predicted with probabilities ``values``."""
    v = np.asarray(values, dtype=np.float64).ravel()
    h = np.asarray(hits, dtype=np.float64).ravel()
    e = np.asarray(edges, dtype=np.float64)
    idx = np.clip(np.searchsorted(e, v, side="left") - 1, 0, e.shape[0] - 2)
    gaps = np.bincount(idx, weights=h - v, minlength=e.shape[0] - 1)
    return float(np.abs(gaps).sum() / v.shape[0])


def top_k_calibration_error(probs: ArrayLike, labels: ArrayLike, *, k: int = 5, n_bins: int = 15) -> float:
    r"""ECE over the N·k (probability, is-the-label) pairs of every sample's k most probable classes, equal-width
    ``(lo, hi]`` bins (the released ``expected_calibration_error_multiclass(top_k=k)``; k = 1 is the top-1 ECE).

    Examples
    --------
    >>> import numpy as np
    >>> round(top_k_calibration_error(np.array([[0.6, 0.3, 0.1]]), np.array([1]), k=2, n_bins=10), 6)
    0.65
    """
    probs, labels = _check_probs_labels(probs, labels)
    v, h = _top_k(probs, labels, k)
    return binned_calibration_error(v, h, np.linspace(0.0, 1.0, n_bins + 1))


def quantile_bin_edges(probs: ArrayLike, *, n_bins: int = 15) -> NDArray[np.float64]:
    """Bin edges at the ``np.percentile`` of the top-1 confidences at 0, 100/n_bins, ..., 100, the outer two set
    to 0 and 1 (the released ``get_quantile_bins``)."""
    conf = check_probs(probs).max(axis=1).astype(np.float64)
    edges = np.percentile(conf, np.linspace(0.0, 100.0, n_bins + 1))
    edges[0], edges[-1] = 0.0, 1.0
    return edges


def cross_validated_quantile_ece(probs: ArrayLike, labels: ArrayLike, *, n_bins: int = 15, n_repeats: int = 5,
                                 seed: int = 0) -> float:
    """Top-1 ECE with quantile bin edges taken from held-out data: over the test-time CV folds
    (:func:`~ubench.metrics.cv_splits`), edges from one half's confidences (:func:`quantile_bin_edges`), the ECE of
    the other half in those bins; the mean over folds."""
    conf, hit = checked_top1(probs, labels)
    return _quantile_ece(conf, hit, n_bins=n_bins, n_repeats=n_repeats, seed=seed)


def _quantile_ece(conf: NDArray, hit: NDArray, *, n_bins: int, n_repeats: int, seed: int) -> float:
    """:func:`cross_validated_quantile_ece` from the top-1 confidences and hits (N,)."""
    folds = cv_splits(conf.shape[0], n_repeats=n_repeats, seed=seed)
    # The edges of the folds whose fit halves have the same size in one np.percentile call (the A halves, then
    # the B halves): along an axis it computes each row as a call on that row would.
    edges: list = [None] * len(folds)
    for start in (0, 1):
        rows = np.stack([conf[fit] for fit, _ in folds[start::2]])
        cuts = np.percentile(rows, np.linspace(0.0, 100.0, n_bins + 1), axis=1).T
        cuts[:, 0], cuts[:, -1] = 0.0, 1.0
        edges[start::2] = list(cuts)
    out = [binned_calibration_error(conf[held], hit[held], e) for (_, held), e in zip(folds, edges)]
    return float(np.mean(out))
