# SPDX-License-Identifier: MIT
"""Selective prediction: accuracy against the fraction of samples rejected, and the area under the risk-coverage
curve.

Samples are rejected by *amount* (the k most uncertain), never by a confidence threshold, so the curves do not
move under temperature scaling (Ashukha et al. 2020, Sec. 2.3). Tied uncertainties are rejected uniformly at
random in expectation: within a run of ties the expected accuracy is interpolated linearly, so the result never
depends on the order of samples.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._validation import check_n_samples, check_scores
from .classification import _check_probs_labels, _predictions
from .uncertainty import _confidence

__all__ = ["RejectionCurve", "rejection_curve", "risk_coverage_auc"]


@dataclass(frozen=True)
class RejectionCurve:
    """Accuracy of the retained samples against the fraction rejected (see :func:`rejection_curve`)."""

    #: Fraction of samples rejected, ``0, 1/N, ..., (N-1)/N`` (ascending), shape (n_samples,).
    rejected_fraction: NDArray[np.float64]
    #: Expected top-1 accuracy on the retained samples, shape (n_samples,).
    accuracy: NDArray[np.float64]


def _accuracy_by_kept(uncertainty: NDArray, correct: NDArray) -> NDArray[np.float64]:
    """Expected accuracy of the k least uncertain samples for k = N, N-1, ..., 1 (ties interpolated)."""
    n = uncertainty.shape[0]
    # Any order within a run of ties gives the same result (only the cumulative sums at run ends are used),
    # so the faster unstable sort is enough.
    order = np.argsort(uncertainty)
    u = uncertainty[order]
    cum = np.empty(n + 1, dtype=np.float64)
    cum[0] = 0.0
    np.cumsum(correct[order], dtype=np.float64, out=cum[1:])
    kept = np.arange(n, 0, -1)
    expected_correct = cum[:0:-1].copy()  # exact wherever k ends a run of tied scores
    # ends[g]: number of samples up to and including tie run g. Only k strictly inside a run of r > 1 ties needs
    # the expectation cum[s] + (k - s) / r * (cum[e] - cum[s]): the few such k are fixed in one gather.
    ends = np.append(np.flatnonzero(u[1:] != u[:-1]) + 1, n)
    starts = np.concatenate(([0], ends[:-1]))
    tied = ends - starts > 1
    if tied.any():
        s, e = starts[tied], ends[tied]
        inner = e - s - 1  # k = s+1 .. e-1 in each tied run
        s_rep, e_rep = np.repeat(s, inner), np.repeat(e, inner)
        k = s_rep + 1 + (np.arange(inner.sum()) - np.repeat(np.cumsum(inner) - inner, inner))
        expected_correct[n - k] = cum[s_rep] + (k - s_rep) / (e_rep - s_rep) * (cum[e_rep] - cum[s_rep])
    return expected_correct / kept


def _uncertainty_or_default(probs: NDArray, uncertainty: ArrayLike | None) -> NDArray:
    if uncertainty is None:
        return -_confidence(probs)
    u = check_scores(uncertainty, "uncertainty")
    check_n_samples(probs, "probs", u, "uncertainty")
    return u


def _rejection_curve(probs: NDArray, labels: NDArray, uncertainty: NDArray) -> RejectionCurve:
    """Rejection curve; assumes validated input."""
    correct = (_predictions(probs) == labels).astype(np.float64)
    n = labels.shape[0]
    return RejectionCurve(
        rejected_fraction=np.arange(n, dtype=np.float64) / n, accuracy=_accuracy_by_kept(uncertainty, correct)
    )


def rejection_curve(
    probs: ArrayLike, labels: ArrayLike, *, uncertainty: ArrayLike | None = None
) -> RejectionCurve:
    r"""Accuracy on the retained samples as the most uncertain ones are rejected, one sample at a time.

    Parameters
    ----------
    probs : ndarray of shape (n_samples, n_classes), float32 or float64, rows summing to 1
    labels : ndarray of shape (n_samples,), integers in ``[0, n_classes)``
    uncertainty : ndarray of shape (n_samples,), optional
        Per-sample uncertainty, higher = rejected first (e.g. :func:`predictive_entropy` or
        :func:`mutual_information`). Default: ``-max_c p_ic`` (reject the least confident first).

    Returns
    -------
    RejectionCurve
        ``rejected_fraction`` ``[0, 1/N, ..., (N-1)/N]`` and ``accuracy`` in ``[0, 1]``; the first point is the
        plain accuracy.

    Notes
    -----
    With samples sorted by increasing uncertainty and :math:`k = N - r` retained after rejecting :math:`r`,

    .. math:: \mathrm{acc}(r / N) = \frac{1}{k} \sum_{j \le k} \mathbb{1}[\hat y_{(j)} = y_{(j)}]

    Convention: thresholded by the amount rejected, not by a confidence level (Ashukha et al. 2020); tied
    uncertainties give the expected accuracy of a uniformly random choice among the ties.

    References
    ----------
    .. [1] Ashukha et al. (2020), Pitfalls of In-Domain Uncertainty Estimation and Ensembling, Sec. 2.3.
    .. [2] Laves et al. (2019), rejection by uncertainty threshold; Lakshminarayanan et al. (2017).

    Examples
    --------
    >>> import numpy as np
    >>> c = rejection_curve(np.array([[0.9, 0.1], [0.6, 0.4]]), np.array([0, 1]))
    >>> c.rejected_fraction.tolist(), c.accuracy.tolist()
    ([0.0, 0.5], [0.5, 1.0])
    """
    probs, labels = _check_probs_labels(probs, labels)
    return _rejection_curve(probs, labels, _uncertainty_or_default(probs, uncertainty))


def risk_coverage_auc(probs: ArrayLike, labels: ArrayLike, *, uncertainty: ArrayLike | None = None,
                      integration: str = "riemann") -> float:
    r"""Area under the risk-coverage curve (AURC); lower is better.

    Parameters
    ----------
    probs : ndarray of shape (n_samples, n_classes), float32 or float64, rows summing to 1
    labels : ndarray of shape (n_samples,), integers in ``[0, n_classes)``
    uncertainty : ndarray of shape (n_samples,), optional
        As in :func:`rejection_curve`; default ``-max_c p_ic``.
    integration : {"riemann", "trapezoid"}
        ``"riemann"`` (default) as below; ``"trapezoid"`` is torch-uncertainty 0.13's ``AURC``: the trapezoid rule
        over the coverages k/N, k = 1..N, divided by 1 - 1/N. The two differ by O(1/N) relative (1.5e-4 at
        N = 10,000 on CIFAR-size predictions: issue #17 item 6); with no tied scores the trapezoid value equals
        torch-uncertainty's to float32 precision.

    Returns
    -------
    float in ``[0, 1]``

    Notes
    -----
    With :math:`\mathrm{risk}(k)` the error rate of the :math:`k` least uncertain samples (coverage
    :math:`k / N`),

    .. math:: \mathrm{AURC} = \frac{1}{N} \sum_{k=1}^{N} \mathrm{risk}(k)

    Convention: the right Riemann sum over the N coverage levels (Geifman et al. 2019), i.e. ``1 - mean`` of
    :func:`rejection_curve`'s accuracy; ties as in :func:`rejection_curve`. The Pitfalls code's ``acc_aac``
    instead integrates accuracy on a 1000-step grid with the trapezoid rule.

    References
    ----------
    .. [1] Geifman, Uziel & El-Yaniv (2019), Bias-Reduced Uncertainty Estimation for Deep Neural Classifiers,
       ICLR.
    .. [2] Ashukha et al. (2020), Sec. 2.3.

    Examples
    --------
    >>> import numpy as np
    >>> risk_coverage_auc(np.array([[0.9, 0.1], [0.6, 0.4]]), np.array([0, 1]))
    0.25
    """
    from .selective import _checked_risks, _integrate

    return _integrate(_checked_risks(probs, labels, uncertainty), integration)
