# SPDX-License-Identifier: MIT
r"""The debiased top-label L2 calibration error of Kumar, Liang & Ma (2019), as their code computes it.

The binned ECE (:func:`~ubench.metrics.expected_calibration_error`) is biased upward: even a perfectly calibrated
model gets a positive value, about :math:`\sqrt{2 M / (\pi N)}` times the typical per-bin spread for M bins, so
with few test samples it mostly measures N. Kumar et al. estimate the *squared* L2 calibration error of the
binned confidences and subtract each bin's sampling variance of the accuracy, which makes the squared estimate
unbiased (their Theorem 4.3 and Sec. 5):

.. math:: \widehat{\mathrm{CE}}^2 = \sum_b \frac{n_b}{N} \Big[ (\bar c_b - \bar y_b)^2
          - \frac{\bar y_b (1 - \bar y_b)}{n_b - 1} \Big], \qquad
          \widehat{\mathrm{CE}} = \sqrt{\max(\widehat{\mathrm{CE}}^2, 0)}

over equal-mass bins of the top-1 confidence :math:`c` (:math:`\bar c_b`, :math:`\bar y_b` the bin's mean
confidence and accuracy; a bin of fewer than 2 samples contributes 0).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .calibration import DEFAULT_BINS, _check_n_bins, _top1
from .classification import _check_probs_labels

__all__ = ["debiased_calibration_error", "equal_mass_edges"]


def equal_mass_edges(values: ArrayLike, n_bins: int) -> NDArray[np.float64]:
    """Upper bin edges of ``min(n_bins, N)`` equal-mass bins of ``values`` in [0, 1], the last edge 1.0.

    The sorted values are cut into runs of ``ceil(N / parts)`` (the last run shorter); each edge is the midpoint
    between one run's last value and the next run's first; duplicate edges collapse (Kumar et al.'s
    ``get_equal_bins``). Bin b holds the values in ``(edges[b-1], edges[b]]`` (``np.searchsorted(edges, v)``).
    """
    v = np.sort(np.asarray(values, dtype=np.float64).ravel())
    parts = min(int(n_bins), v.shape[0])
    size = int(np.ceil(v.shape[0] / parts))
    starts = np.arange(size, v.shape[0], size)
    edges = (v[starts - 1] + v[starts]) / 2.0
    return np.unique(np.append(edges, 1.0))


def _bin_sums(conf: NDArray, hit: NDArray, edges: NDArray) -> tuple[NDArray, NDArray, NDArray]:
    """Per bin: count, sum of confidences, sum of hits."""
    idx = np.searchsorted(edges, conf, side="left")
    k = edges.shape[0]
    return (np.bincount(idx, minlength=k).astype(np.float64), np.bincount(idx, weights=conf, minlength=k),
            np.bincount(idx, weights=hit, minlength=k))


def debiased_squared_error(count: NDArray, sum_conf: NDArray, sum_hit: NDArray) -> NDArray:
    r""":math:`\widehat{\mathrm{CE}}^2` from per-bin sums; the arrays are (..., n_bins) and may hold bootstrap
    replicates along the leading axes (weighted counts are multiset counts)."""
    n = count.sum(axis=-1)
    ok = count >= 2
    safe = np.where(ok, count, 2.0)
    ybar = sum_hit / safe
    gap = sum_conf / safe - ybar
    per_bin = np.where(ok, gap * gap - ybar * (1.0 - ybar) / (safe - 1.0), 0.0)
    return np.sum(count * per_bin, axis=-1) / n


def _debiased_error(conf: NDArray, hit: NDArray, n_bins: int) -> float:
    edges = equal_mass_edges(conf, n_bins)
    sq = debiased_squared_error(*_bin_sums(conf, hit, edges))
    return float(np.sqrt(max(float(sq), 0.0)))


def debiased_calibration_error(probs: ArrayLike, labels: ArrayLike, *, n_bins: int = DEFAULT_BINS) -> float:
    r"""Debiased top-label L2 calibration error (Kumar et al. 2019); lower is better.

    Parameters
    ----------
    probs : ndarray of shape (n_samples, n_classes), float32 or float64, rows summing to 1
    labels : ndarray of shape (n_samples,), integers in ``[0, n_classes)``
    n_bins : int, default=15
        Equal-mass bins of the top-1 confidence (fewer when there are fewer samples).

    Returns
    -------
    float in ``[0, 1]``

    Notes
    -----
    .. math:: \widehat{\mathrm{CE}} = \sqrt{\max\Big(0, \sum_b \frac{n_b}{N} \Big[(\bar c_b - \bar y_b)^2
              - \frac{\bar y_b(1 - \bar y_b)}{n_b - 1}\Big]\Big)}

    The square is unbiased for the binned squared L2 calibration error; the square root clips it at 0, so a
    well-calibrated model often scores exactly 0.

    Convention: as ``calibration.get_top_calibration_error(probs, labels, p=2)`` of the authors' package
    (p-lambda/verified_calibration, ``lower_bound_scaling_ce`` with ``get_equal_bins``, 15 bins,
    ``unbiased_l2_ce``) for continuous outputs; that function first guesses from the number of distinct values
    whether the outputs came from a binning method and then uses one bin per distinct value instead, a switch
    ubench does not make. With fewer samples than bins it uses one bin per sample (the package raises).

    References
    ----------
    .. [1] A. Kumar, P. Liang, T. Ma (2019), Verified Uncertainty Calibration, NeurIPS, Sec. 5 and Theorem 4.3.

    Examples
    --------
    >>> import numpy as np
    >>> p = np.array([[0.9, 0.1], [0.9, 0.1], [0.2, 0.8], [0.2, 0.8]])
    >>> round(debiased_calibration_error(p, np.array([0, 0, 1, 1]), n_bins=1), 12)  # every top-1 is right
    0.15
    """
    probs, labels = _check_probs_labels(probs, labels)
    conf, hit = _top1(probs, labels)
    return _debiased_error(conf, hit, _check_n_bins(n_bins))
