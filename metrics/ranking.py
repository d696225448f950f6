# SPDX-License-Identifier: MIT
"""Threshold-free ranking metrics for binary detection (AUROC, average precision, FPR at a TPR) and the two
detection tasks built on them: misclassification detection (positive = error) and OOD detection (positive = OOD).

Scores follow the scikit-learn convention: higher = more positive. The kernels sort the positive and negative
scores separately (``np.sort``, no argsort) and count with ``np.searchsorted``, which handles ties exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._validation import (
    UndefinedMetricError,
    check_binary_labels,
    check_labels,
    check_member_probs,
    check_n_samples,
    check_scores,
)
from .classification import _check_smoothing, _predictions
from .ensemble import _ensemble_mean, _smooth
from .uncertainty import _confidence, _uncertainty_decomposition

__all__ = [
    "auroc_score",
    "average_precision_score",
    "fpr_at_tpr",
    "DetectionScores",
    "detection_scores",
    "misclassification_scores",
    "ood_detection_scores",
]


def _check_scores_labels(scores: ArrayLike, labels: ArrayLike) -> tuple[NDArray, NDArray]:
    scores = check_scores(scores)
    labels = check_binary_labels(labels)
    check_n_samples(scores, "scores", labels, "labels")
    return scores, labels


def _split_sorted(scores: NDArray, labels: NDArray) -> tuple[NDArray, NDArray]:
    """Ascending-sorted scores of positives and of negatives."""
    is_pos = labels.astype(bool)
    pos = scores[is_pos]  # boolean indexing copies, so sorting in place leaves the input alone
    pos.sort()
    np.logical_not(is_pos, out=is_pos)
    neg = scores[is_pos]
    neg.sort()
    return pos, neg


def _require_both(pos: NDArray, neg: NDArray, metric: str) -> None:
    if pos.size == 0 or neg.size == 0:
        missing = "positive (1)" if pos.size == 0 else "negative (0)"
        raise UndefinedMetricError(f"{metric} is undefined: labels contain no {missing} samples")


# Positives per chunk in the counting kernels: bounds their scratch memory to a few MiB whatever N is.
_CHUNK = 1 << 16


def _auroc_sorted(pos: NDArray, neg: NDArray) -> float:
    """Mann-Whitney U / (n_pos n_neg) from sorted scores, ties counting one half."""
    u2 = 0  # 2U, exact in Python integers
    for start in range(0, pos.size, _CHUNK):
        chunk = pos[start : start + _CHUNK]
        u2 += int(np.searchsorted(neg, chunk, side="left").sum(dtype=np.int64))
        u2 += int(np.searchsorted(neg, chunk, side="right").sum(dtype=np.int64))
    return u2 / (2.0 * pos.size * neg.size)


def _auroc(scores: NDArray, labels: NDArray) -> float:
    """AUROC; assumes validated input."""
    pos, neg = _split_sorted(scores, labels)
    _require_both(pos, neg, "AUROC")
    return _auroc_sorted(pos, neg)


def _average_precision_sorted(pos: NDArray, neg: NDArray) -> float:
    """Step-wise AP from sorted scores: the mean over positives i of precision at threshold s_i.

    Every positive tied at a threshold t adds 1/n_pos to recall there, so sum_t dR_t P_t equals
    (1/n_pos) sum_i P(s_i), with P(t) = #pos>=t / (#pos>=t + #neg>=t); no de-duplication needed.
    """
    n_pos, n_neg = pos.size, neg.size
    total = 0.0
    for start in range(0, n_pos, _CHUNK):
        chunk = pos[start : start + _CHUNK]
        tp = np.searchsorted(pos, chunk, side="left")
        np.subtract(n_pos, tp, out=tp)  # positives with score >= s_i
        fp = np.searchsorted(neg, chunk, side="left")
        np.subtract(n_neg, fp, out=fp)  # negatives with score >= s_i
        fp += tp
        total += float(np.divide(tp, fp).sum())
    return total / n_pos


def _average_precision(scores: NDArray, labels: NDArray) -> float:
    """Average precision; assumes validated input."""
    pos, neg = _split_sorted(scores, labels)
    if pos.size == 0:
        raise UndefinedMetricError("average precision is undefined: labels contain no positive (1) samples")
    return _average_precision_sorted(pos, neg)


def _fpr_at_tpr_sorted(pos: NDArray, neg: NDArray, tpr: float) -> float:
    """FPR at the highest threshold whose TPR reaches ``tpr`` (thresholds at the positive scores)."""
    n_pos = pos.size
    k = int(np.ceil(tpr * n_pos))  # fewest positives above the threshold; fix float rounding of tpr * n_pos
    while k > 1 and (k - 1) / n_pos >= tpr:
        k -= 1
    while k < n_pos and k / n_pos < tpr:
        k += 1
    k = max(k, 1)
    threshold = pos[n_pos - k]
    return float((neg.size - np.searchsorted(neg, threshold, side="left")) / neg.size)


def _fpr_at_tpr(scores: NDArray, labels: NDArray, tpr: float = 0.95) -> float:
    """FPR at TPR; assumes validated input."""
    pos, neg = _split_sorted(scores, labels)
    _require_both(pos, neg, "FPR at TPR")
    return _fpr_at_tpr_sorted(pos, neg, tpr)


def _check_tpr(tpr: float) -> float:
    value = float(tpr)
    if not (0.0 < value <= 1.0):
        raise ValueError(f"tpr must be in (0, 1]; found {tpr!r}")
    return value


def auroc_score(scores: ArrayLike, labels: ArrayLike) -> float:
    r"""Area under the ROC curve, exact, with ties counting one half; higher is better.

    Parameters
    ----------
    scores : ndarray of shape (n_samples,), float32 or float64, finite; higher = more likely positive
    labels : ndarray of shape (n_samples,), 0/1 integers or booleans; 1 is the positive class

    Returns
    -------
    float in ``[0, 1]``; 0.5 for uninformative scores

    Raises
    ------
    UndefinedMetricError
        If only one class is present in ``labels``.
    TypeError, ValueError
        If the input fails validation.

    Notes
    -----
    .. math:: \mathrm{AUROC} = \frac{1}{n_+ n_-} \sum_{i: y_i=1} \sum_{j: y_j=0}
        \Big(\mathbb{1}[s_i > s_j] + \tfrac12 \mathbb{1}[s_i = s_j]\Big)

    the Mann-Whitney U statistic over :math:`n_+ n_-`; it equals the trapezoidal area under the ROC curve.

    Convention: identical to ``sklearn.metrics.roc_auc_score``; ``AUROC(s, y) + AUROC(s, 1 - y) = 1``.

    References
    ----------
    .. [1] Hanley & McNeil (1982), Radiology 143(1); Fawcett (2006), Pattern Recognition Letters 27(8).

    Examples
    --------
    >>> import numpy as np
    >>> auroc_score(np.array([0.1, 0.4, 0.4, 0.8]), np.array([0, 0, 1, 1]))
    0.875
    """
    scores, labels = _check_scores_labels(scores, labels)
    return _auroc(scores, labels)


def average_precision_score(scores: ArrayLike, labels: ArrayLike) -> float:
    r"""Average precision (area under the precision-recall curve, step-wise); higher is better.

    Parameters
    ----------
    scores : ndarray of shape (n_samples,), float32 or float64, finite; higher = more likely positive
    labels : ndarray of shape (n_samples,), 0/1 integers or booleans; 1 is the positive class

    Returns
    -------
    float in ``(0, 1]``; the positive rate for uninformative (all-tied) scores

    Raises
    ------
    UndefinedMetricError
        If ``labels`` has no positive sample.

    Notes
    -----
    .. math:: \mathrm{AP} = \sum_t (R_t - R_{t-1})\, P_t

    over thresholds :math:`t` descending, :math:`P_t, R_t` the precision and recall of :math:`s \ge t`; tied
    scores form one threshold.

    Convention: identical to ``sklearn.metrics.average_precision_score``: no interpolation and no trapezoid
    (which would be optimistic); all-negative labels are an error, all-positive labels give 1.

    References
    ----------
    .. [1] Manning, Raghavan & Schuetze (2008), Introduction to Information Retrieval, Sec. 8.4.

    Examples
    --------
    >>> import numpy as np
    >>> round(average_precision_score(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1])), 6)
    0.833333
    """
    scores, labels = _check_scores_labels(scores, labels)
    return _average_precision(scores, labels)


def fpr_at_tpr(scores: ArrayLike, labels: ArrayLike, *, tpr: float = 0.95) -> float:
    r"""False-positive rate at the first threshold whose true-positive rate reaches ``tpr``; lower is better.

    Parameters
    ----------
    scores : ndarray of shape (n_samples,), float32 or float64, finite; higher = more likely positive
    labels : ndarray of shape (n_samples,), 0/1 integers or booleans; 1 is the positive class
    tpr : float in ``(0, 1]``, default=0.95

    Returns
    -------
    float in ``[0, 1]``

    Raises
    ------
    UndefinedMetricError
        If only one class is present in ``labels``.

    Notes
    -----
    .. math:: \mathrm{FPR@TPR} = \frac{|\{j : y_j = 0, s_j \ge t^*\}|}{n_-}, \qquad
        t^* = \max\{t : |\{i : y_i = 1, s_i \ge t\}| \ge \mathrm{tpr}\cdot n_+\}

    Convention: the ROC point at the largest threshold reaching the TPR, no interpolation between points; a tie
    at the threshold counts fully as predicted positive (as ``sklearn.metrics.roc_curve``).

    References
    ----------
    .. [1] Hendrycks & Gimpel (2017), A Baseline for Detecting Misclassified and Out-of-Distribution Examples.

    Examples
    --------
    >>> import numpy as np
    >>> fpr_at_tpr(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1]), tpr=0.5)
    0.0
    """
    scores, labels = _check_scores_labels(scores, labels)
    return _fpr_at_tpr(scores, labels, _check_tpr(tpr))


@dataclass(frozen=True)
class DetectionScores:
    """Ranking metrics of one detection task (see :func:`detection_scores`)."""

    auroc: float
    average_precision: float
    #: FPR at the TPR ``tpr``.
    fpr_at_tpr: float
    tpr: float
    n_positive: int
    n_negative: int


def _detection_scores(scores: NDArray, labels: NDArray, tpr: float = 0.95) -> DetectionScores:
    """AUROC, AP and FPR@TPR from one sort; assumes validated input."""
    pos, neg = _split_sorted(scores, labels)
    _require_both(pos, neg, "detection AUROC")
    return DetectionScores(
        auroc=_auroc_sorted(pos, neg),
        average_precision=_average_precision_sorted(pos, neg),
        fpr_at_tpr=_fpr_at_tpr_sorted(pos, neg, tpr),
        tpr=tpr,
        n_positive=int(pos.size),
        n_negative=int(neg.size),
    )


def detection_scores(scores: ArrayLike, labels: ArrayLike, *, tpr: float = 0.95) -> DetectionScores:
    r"""AUROC, average precision and FPR at ``tpr`` of one binary detection task, sharing one sort.

    Parameters
    ----------
    scores : ndarray of shape (n_samples,), float32 or float64; higher = more likely positive
    labels : ndarray of shape (n_samples,), 0/1 integers or booleans; 1 is the positive class
    tpr : float in ``(0, 1]``, default=0.95

    Returns
    -------
    DetectionScores

    Raises
    ------
    UndefinedMetricError
        If only one class is present.

    Notes
    -----
    Each field equals the corresponding function: :func:`auroc_score`, :func:`average_precision_score`,
    :func:`fpr_at_tpr`.

    Examples
    --------
    >>> import numpy as np
    >>> detection_scores(np.array([0.1, 0.9]), np.array([0, 1])).auroc
    1.0
    """
    scores, labels = _check_scores_labels(scores, labels)
    return _detection_scores(scores, labels, _check_tpr(tpr))


def _member_uncertainties(member_probs: NDArray, gamma: float) -> dict[str, NDArray[np.float64]]:
    """Per-sample scores, higher = more uncertain: entropy, -confidence, mutual information."""
    if gamma:
        member_probs = _smooth(member_probs, gamma)
    dec = _uncertainty_decomposition(member_probs)
    return {
        "entropy": dec.total,
        "confidence": -_confidence(_ensemble_mean(member_probs)),
        "mutual_information": dec.knowledge,
    }


def misclassification_scores(
    member_probs: ArrayLike, labels: ArrayLike, *, smoothing: float = 0.0, tpr: float = 0.95
) -> dict[str, DetectionScores]:
    r"""Misclassification detection (positive = top-1 error) from entropy, confidence and mutual information.

    Parameters
    ----------
    member_probs : ndarray of shape (n_members, n_samples, n_classes), rows summing to 1
        Member or posterior-sample predictions; pass ``probs[None]`` for a single model (its mutual
        information is 0 everywhere, so its MI scores are uninformative: AUROC 0.5).
    labels : ndarray of shape (n_samples,), integers in ``[0, n_classes)``
    smoothing : float in ``[0, 1)``, default=0.0
        Central smoothing of every member before scoring (URSABench uses 1e-4).
    tpr : float in ``(0, 1]``, default=0.95

    Returns
    -------
    dict
        ``{"entropy", "confidence", "mutual_information"}`` to :class:`DetectionScores`; scores are entropy of
        the mean, ``-max_c`` of the mean, and mutual information, higher = more likely an error.

    Raises
    ------
    UndefinedMetricError
        If every prediction is correct, or every prediction is wrong.

    Notes
    -----
    Positives are :math:`\hat y_i \ne y_i` with :math:`\hat y_i = \arg\max_c \bar p_{ic}`.

    Convention: positive = error, as in the Pitfalls code (``get_misclass_auroc`` in bayesgroup/pytorch-ensembles
    ``metrics.py`` labels ``1 - correct``) and URSABench's ``tasks/prediction.py``. These numbers
    are **not comparable across models**: every model induces its own set of errors, hence its own detection
    problem (Ashukha et al. 2020, Sec. 2.3). Compare them only for scores of one model.

    References
    ----------
    .. [1] Hendrycks & Gimpel (2017), ICLR; Ashukha et al. (2020), Sec. 2.3; Vadera et al. (2020), URSABench.

    Examples
    --------
    >>> import numpy as np
    >>> p = np.array([[[0.9, 0.1], [0.6, 0.4], [0.2, 0.8]]])
    >>> misclassification_scores(p, np.array([0, 1, 1]))["entropy"].auroc
    1.0
    """
    member_probs = check_member_probs(member_probs)
    labels = check_labels(labels, member_probs.shape[2])
    check_n_samples(member_probs, "member_probs", labels, "labels", a_axis=1)
    gamma = _check_smoothing(smoothing)
    tpr = _check_tpr(tpr)
    errors = (_predictions(_ensemble_mean(member_probs)) != labels).astype(np.int8)
    return {k: _detection_scores(v, errors, tpr) for k, v in _member_uncertainties(member_probs, gamma).items()}


def ood_detection_scores(
    in_member_probs: ArrayLike, ood_member_probs: ArrayLike, *, smoothing: float = 0.0, tpr: float = 0.95
) -> dict[str, DetectionScores]:
    r"""OOD detection (positive = out-of-distribution) from entropy, confidence and mutual information.

    Parameters
    ----------
    in_member_probs : ndarray of shape (n_members, n_in, n_classes), rows summing to 1
        Predictions on the in-domain test set (``probs[None]`` for a single model).
    ood_member_probs : ndarray of shape (n_members, n_ood, n_classes), rows summing to 1
        Predictions of the same members on the OOD set.
    smoothing : float in ``[0, 1)``, default=0.0
        Central smoothing of every member before scoring (URSABench uses 1e-4).
    tpr : float in ``(0, 1]``, default=0.95

    Returns
    -------
    dict
        ``{"entropy", "confidence", "mutual_information"}`` to :class:`DetectionScores`: total uncertainty,
        ``-max_c`` of the mean, knowledge uncertainty; higher = more likely OOD.

    Raises
    ------
    ValueError
        If the two stacks differ in members or classes.

    Notes
    -----
    The scores of the two sets are concatenated with labels 0 (in-domain) and 1 (OOD).

    Convention: positive = OOD; URSABench scores OOD with knowledge (MI) and total uncertainty.

    References
    ----------
    .. [1] Vadera et al. (2020), URSABench, Appendix B; Ovadia et al. (2019), Sec. 4.

    Examples
    --------
    >>> import numpy as np
    >>> ind = np.array([[[0.99, 0.01], [0.95, 0.05]]])
    >>> ood = np.array([[[0.5, 0.5], [0.6, 0.4]]])
    >>> ood_detection_scores(ind, ood)["entropy"].auroc
    1.0
    """
    ind = check_member_probs(in_member_probs, "in_member_probs")
    ood = check_member_probs(ood_member_probs, "ood_member_probs")
    if ind.shape[0] != ood.shape[0] or ind.shape[2] != ood.shape[2]:
        raise ValueError(
            "in_member_probs and ood_member_probs must have the same members and classes; found shapes "
            f"{ind.shape} and {ood.shape}"
        )
    gamma = _check_smoothing(smoothing)
    tpr = _check_tpr(tpr)
    s_in = _member_uncertainties(ind, gamma)
    s_ood = _member_uncertainties(ood, gamma)
    labels = np.concatenate([np.zeros(ind.shape[1], np.int8), np.ones(ood.shape[1], np.int8)])
    return {k: _detection_scores(np.concatenate([s_in[k], s_ood[k]]), labels, tpr) for k in s_in}
