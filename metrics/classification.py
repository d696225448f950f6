# SPDX-License-Identifier: MIT
"""Proper scoring rules and accuracy over one predictive distribution: accuracy, NLL, Brier and its decomposition.

Every public function validates its arrays once (``metrics/_validation.py``) and then calls a private kernel
(``_accuracy``, ``_nll``, ``_brier_per_sample``, ``_brier_decomposition``) that trusts its input; the report code
calls the kernels directly on arrays it has already validated. Sums run in float64 whatever the input dtype; the
(N, C) input is read in row blocks so that no float64 copy of the whole matrix is ever made.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._validation import check_labels, check_logits, check_n_samples, check_probs

__all__ = [
    "accuracy_score",
    "nll_loss",
    "nll_loss_from_logits",
    "brier_loss",
    "brier_decomposition",
    "BrierDecomposition",
]

#: Floor added inside the log of NLL, as in the Pitfalls code: ``log(1e-12 + p)``.
NLL_EPS = 1e-12

# Rows per block for row-wise float64 reductions: 1024 x C float64 stays in L2 for C up to ~200.
_BLOCK_ELEMS = 1 << 17


def _block_rows(n_classes: int) -> int:
    """Rows per block so that one block holds about ``_BLOCK_ELEMS`` elements."""
    return max(1, _BLOCK_ELEMS // max(1, n_classes))


def _check_probs_labels(probs: ArrayLike, labels: ArrayLike) -> tuple[NDArray, NDArray]:
    """Validate ``probs`` (N, C) and ``labels`` (N,) together; returns both as arrays."""
    probs = check_probs(probs)
    labels = check_labels(labels, probs.shape[1])
    check_n_samples(probs, "probs", labels, "labels")
    return probs, labels


def _check_smoothing(smoothing: float) -> float:
    """Validate the central-smoothing weight gamma in [0, 1)."""
    gamma = float(smoothing)
    if not (0.0 <= gamma < 1.0):
        raise ValueError(f"smoothing must be in [0, 1); found {smoothing!r}")
    return gamma


def _check_eps(eps: float) -> float:
    value = float(eps)
    if not (np.isfinite(value) and value >= 0.0):
        raise ValueError(f"eps must be a finite number >= 0; found {eps!r}")
    return value


def _true_class_probs(probs: NDArray, labels: NDArray) -> NDArray[np.float64]:
    """p_{i, y_i} as float64; assumes validated input."""
    return probs[np.arange(probs.shape[0]), labels].astype(np.float64)


def _predictions(probs: NDArray) -> NDArray[np.intp]:
    """Top-1 class, ties to the lowest index (``np.argmax``)."""
    return np.argmax(probs, axis=1)


def _row_sum_squares(probs: NDArray) -> NDArray[np.float64]:
    """sum_c p_ic^2 per row in float64, reading ``probs`` in row blocks (no full float64 copy)."""
    n, c = probs.shape
    out = np.empty(n, dtype=np.float64)
    step = _block_rows(c)
    # A C-contiguous float64 ndarray is summed where it lies; anything else (another layout or dtype, or a mean
    # read from the archive in passes, scoring/archive_mean.py) through a C-contiguous float64 buffer
    in_place = isinstance(probs, np.ndarray) and probs.dtype == np.float64 and probs.flags.c_contiguous
    buf = None if in_place else np.empty((min(step, n), c), dtype=np.float64)
    for start in range(0, n, step):
        block = probs[start : start + step]
        if buf is not None:
            block = buf[: block.shape[0]]
            block[...] = probs[start : start + step]
        # Same summation loop for every row (a BLAS dot rounds rows differently by position).
        np.einsum("ij,ij->i", block, block, out=out[start : start + block.shape[0]])
    return out


def _accuracy(probs: NDArray, labels: NDArray) -> float:
    """Top-1 accuracy; assumes validated input."""
    return float(np.count_nonzero(_predictions(probs) == labels) / labels.shape[0])


def _nll_per_sample(probs: NDArray, labels: NDArray, eps: float = NLL_EPS, smoothing: float = 0.0) -> NDArray:
    """-log(eps + p_y) per sample in float64, after optional central smoothing; assumes validated input."""
    p_true = _true_class_probs(probs, labels)
    if smoothing:
        p_true = (1.0 - smoothing) * p_true + smoothing / probs.shape[1]
    return -np.log(eps + p_true)


def _nll(probs: NDArray, labels: NDArray, eps: float = NLL_EPS, smoothing: float = 0.0) -> float:
    """Mean NLL; assumes validated input."""
    return float(_nll_per_sample(probs, labels, eps, smoothing).mean())


def _brier_per_sample(probs: NDArray, labels: NDArray) -> NDArray[np.float64]:
    """sum_c (p_c - 1[y=c])^2 = sum_c p_c^2 - 2 p_y + 1 per sample; assumes validated input."""
    out = _row_sum_squares(probs)
    out -= 2.0 * _true_class_probs(probs, labels)
    out += 1.0
    # The expanded form can round a hair below 0 for one-hot rows; the score itself is a sum of squares.
    np.maximum(out, 0.0, out=out)
    return out


def accuracy_score(probs: ArrayLike, labels: ArrayLike) -> float:
    r"""Top-1 accuracy of the predictive distribution; higher is better.

    Parameters
    ----------
    probs : ndarray of shape (n_samples, n_classes), float32 or float64, rows summing to 1
    labels : ndarray of shape (n_samples,), integers in ``[0, n_classes)``

    Returns
    -------
    float in ``[0, 1]``

    Raises
    ------
    TypeError
        If ``probs`` is not float32/float64 or ``labels`` not integer.
    ValueError
        If shapes disagree, values are non-finite, rows leave the simplex, or labels are out of range.

    Notes
    -----
    .. math:: \mathrm{acc} = \frac{1}{N} \sum_i \mathbb{1}[\arg\max_c p_{ic} = y_i]

    Convention: ties in the arg max go to the lowest class index (``np.argmax``), as in PyTorch and scikit-learn.

    Examples
    --------
    >>> import numpy as np
    >>> accuracy_score(np.array([[0.9, 0.1], [0.3, 0.7]]), np.array([0, 0]))
    0.5
    """
    probs, labels = _check_probs_labels(probs, labels)
    return _accuracy(probs, labels)


def nll_loss(
    probs: ArrayLike,
    labels: ArrayLike,
    *,
    eps: float = NLL_EPS,
    smoothing: float = 0.0,
    per_sample: bool = False,
) -> float | NDArray[np.float64]:
    r"""Negative log-likelihood of the true class (cross-entropy); lower is better.

    Parameters
    ----------
    probs : ndarray of shape (n_samples, n_classes), float32 or float64, rows summing to 1
    labels : ndarray of shape (n_samples,), integers in ``[0, n_classes)``
    eps : float, default=1e-12
        Floor added inside the log, so ``p_y = 0`` gives ``-log(eps)`` (27.6 for the default) instead of inf.
    smoothing : float in ``[0, 1)``, default=0.0
        Central smoothing weight :math:`\gamma`: :math:`p \to (1-\gamma) p + \gamma / C` before the log
        (URSABench uses :math:`\gamma = 10^{-4}`). Off by default.
    per_sample : bool, default=False
        Return the per-sample values instead of their mean.

    Returns
    -------
    float >= 0, or ndarray of shape (n_samples,) when ``per_sample``

    Raises
    ------
    TypeError, ValueError
        As for :func:`accuracy_score`; ``ValueError`` also for ``eps < 0`` or ``smoothing`` outside ``[0, 1)``.

    Notes
    -----
    .. math:: \mathrm{NLL} = -\frac{1}{N} \sum_i \log(\epsilon + p_{i, y_i})

    Convention: the Pitfalls code's ``log(1e-12 + p)``; scikit-learn's ``log_loss`` instead clips to
    ``[eps, 1 - eps]`` with a dtype-dependent eps, which agrees to within ``eps`` when no ``p_y`` is tiny.

    References
    ----------
    .. [1] Ashukha et al. (2020), Pitfalls of In-Domain Uncertainty Estimation and Ensembling in Deep Learning, ICLR.
    .. [2] Vadera et al. (2020), URSABench, central smoothing of the predictive distribution.

    Examples
    --------
    >>> import numpy as np
    >>> round(nll_loss(np.array([[0.5, 0.5], [0.25, 0.75]]), np.array([0, 1])), 6)
    0.490415
    """
    probs, labels = _check_probs_labels(probs, labels)
    eps = _check_eps(eps)
    gamma = _check_smoothing(smoothing)
    values = _nll_per_sample(probs, labels, eps, gamma)
    return values if per_sample else float(values.mean())


def _log_softmax_true(logits: NDArray, labels: NDArray) -> NDArray[np.float64]:
    """log softmax(z)_y per sample in float64 via a row-blocked log-sum-exp; assumes validated input."""
    n, c = logits.shape
    out = np.empty(n, dtype=np.float64)
    step = _block_rows(c)
    buf = np.empty((min(step, n), c), dtype=np.float64)
    for start in range(0, n, step):
        block = logits[start : start + step]
        b = buf[: block.shape[0]]
        b[...] = block
        zmax = b.max(axis=1)
        b -= zmax[:, None]
        z_true = b[np.arange(b.shape[0]), labels[start : start + step]]
        np.exp(b, out=b)
        out[start : start + block.shape[0]] = z_true - np.log(b.sum(axis=1))
    return out


def nll_loss_from_logits(
    logits: ArrayLike, labels: ArrayLike, *, per_sample: bool = False
) -> float | NDArray[np.float64]:
    r"""Negative log-likelihood of the true class computed from logits; lower is better.

    Parameters
    ----------
    logits : ndarray of shape (n_samples, n_classes), float32 or float64, finite
    labels : ndarray of shape (n_samples,), integers in ``[0, n_classes)``
    per_sample : bool, default=False
        Return the per-sample values instead of their mean.

    Returns
    -------
    float >= 0, or ndarray of shape (n_samples,) when ``per_sample``

    Notes
    -----
    .. math:: \mathrm{NLL} = -\frac{1}{N} \sum_i \Big(z_{i, y_i} - \log \sum_c e^{z_{ic}}\Big)

    Convention: exact log-softmax (shifted by the row maximum), so no floor is needed; this is the
    ``eps = 0`` limit of :func:`nll_loss` on ``softmax(logits)``.

    Examples
    --------
    >>> import numpy as np
    >>> round(nll_loss_from_logits(np.array([[0.0, 0.0]]), np.array([1])), 6)
    0.693147
    """
    logits = check_logits(logits)
    if logits.shape[1] < 2:
        raise ValueError(f"logits must have at least 2 classes; found {logits.shape[1]}")
    labels = check_labels(labels, logits.shape[1])
    check_n_samples(logits, "logits", labels, "labels")
    values = -_log_softmax_true(logits, labels)
    np.maximum(values, 0.0, out=values)
    return values if per_sample else float(values.mean())


def brier_loss(
    probs: ArrayLike, labels: ArrayLike, *, per_sample: bool = False
) -> float | NDArray[np.float64]:
    r"""Multiclass Brier score; lower is better.

    Parameters
    ----------
    probs : ndarray of shape (n_samples, n_classes), float32 or float64, rows summing to 1
    labels : ndarray of shape (n_samples,), integers in ``[0, n_classes)``
    per_sample : bool, default=False
        Return the per-sample scores instead of their mean.

    Returns
    -------
    float in ``[0, 2]``, or ndarray of shape (n_samples,) when ``per_sample``

    Raises
    ------
    TypeError, ValueError
        As for :func:`accuracy_score`.

    Notes
    -----
    .. math:: \mathrm{BS} = \frac{1}{N} \sum_i \sum_c (p_{ic} - \mathbb{1}[y_i = c])^2

    Computed as :math:`\sum_c p_{ic}^2 - 2 p_{i,y_i} + 1` in float64.

    Convention: summed over classes, range [0, 2] (Brier 1950; Ovadia et al. 2019); scikit-learn's
    ``brier_score_loss`` gives the same for multiclass input but halves it (range [0, 1]) for binary input. The
    shift paper's released code (``metrics_lib.brier_scores``) computes :math:`\sum_c p_c^2 - 2 p_y`, omitting the
    constant 1: its values are ubench's minus 1 (range [-1, 1]), while the paper's tables use the [0, 2] scale.

    References
    ----------
    .. [1] G. W. Brier (1950), Monthly Weather Review 78(1), 1-3.
    .. [2] Ovadia et al. (2019), Can You Trust Your Model's Uncertainty?, NeurIPS, Eq. (1).

    Examples
    --------
    >>> import numpy as np
    >>> brier_loss(np.array([[1.0, 0.0], [0.5, 0.5]]), np.array([0, 1]))
    0.25
    """
    probs, labels = _check_probs_labels(probs, labels)
    values = _brier_per_sample(probs, labels)
    return values if per_sample else float(values.mean())


@dataclass(frozen=True)
class BrierDecomposition:
    """Brier score decomposition over the partition by predicted class (see :func:`brier_decomposition`).

    ``brier == uncertainty - resolution + reliability - 2 * covariance`` holds exactly (to rounding).
    """

    #: Quadratic entropy of the label marginal, ``1 - sum_c ybar_c^2`` (independent of the predictions).
    uncertainty: float
    #: Weighted spread of the per-cell label frequencies around the marginal; >= 0, higher is better.
    resolution: float
    #: Mean squared distance of each prediction to its cell's label frequencies; >= 0, lower is better.
    reliability: float
    #: Within-cell covariance of predictions and one-hot labels; zero when predictions are constant per cell.
    covariance: float
    #: The Brier score itself, for reference.
    brier: float


def _brier_decomposition(probs: NDArray, labels: NDArray) -> BrierDecomposition:
    """Brier decomposition partitioned by top-1 class; assumes validated input."""
    n, c = probs.shape
    pred = _predictions(probs)
    # Joint counts n_{k, y} of predicted cell k and true label y.
    joint = np.bincount(pred * c + labels, minlength=c * c).reshape(c, c).astype(np.float64)
    cell_n = joint.sum(axis=1)
    label_freq = joint.sum(axis=0) / n
    with np.errstate(invalid="ignore", divide="ignore"):
        cell_freq = np.where(cell_n[:, None] > 0, joint / cell_n[:, None], 0.0)
    uncertainty = 1.0 - float(np.dot(label_freq, label_freq))
    resolution = float(np.dot(cell_n / n, ((cell_freq - label_freq) ** 2).sum(axis=1)))
    # reliability = mean_i |p_i - ybar_k(i)|^2 = mean_i (|p_i|^2 - 2 p_i . ybar_k + |ybar_k|^2)
    sq = _row_sum_squares(probs)
    cross = _dot_with_cell_rows(probs, pred, cell_freq)
    reliability = (float(sq.sum()) - 2.0 * cross + float(np.dot(cell_n, (cell_freq**2).sum(axis=1)))) / n
    brier = float(_brier_per_sample(probs, labels).mean())
    # covariance term: mean_i (p_i - pbar_k) . (e_{y_i} - ybar_k) = (sum_i p_{i,y_i} - sum_k n_k pbar_k . ybar_k)/n
    p_true_sum = float(_true_class_probs(probs, labels).sum())
    covariance = (p_true_sum - cross) / n
    return BrierDecomposition(
        uncertainty=uncertainty,
        resolution=resolution,
        reliability=max(reliability, 0.0),
        covariance=covariance,
        brier=brier,
    )


def _dot_with_cell_rows(probs: NDArray, cells: NDArray, table: NDArray[np.float64]) -> float:
    """sum_i p_i . table[cells_i] in float64, in row blocks; assumes validated input."""
    n, c = probs.shape
    step = _block_rows(c)
    total = 0.0
    for start in range(0, n, step):
        block = probs[start : start + step].astype(np.float64)
        block *= table[cells[start : start + step]]
        total += float(block.sum())
    return total


def brier_decomposition(probs: ArrayLike, labels: ArrayLike) -> BrierDecomposition:
    r"""Decompose the Brier score into uncertainty, resolution and reliability (partition by predicted class).

    Parameters
    ----------
    probs : ndarray of shape (n_samples, n_classes), float32 or float64, rows summing to 1
    labels : ndarray of shape (n_samples,), integers in ``[0, n_classes)``

    Returns
    -------
    BrierDecomposition
        ``uncertainty`` in ``[0, 1 - 1/C]``, ``resolution >= 0``, ``reliability >= 0``, ``covariance`` and
        ``brier``.

    Notes
    -----
    Predictions are partitioned into the cells :math:`M_k = \{i : \arg\max_c p_{ic} = k\}`, as in the code of
    Ovadia et al. (2019) (``tfp.stats.brier_decomposition``). With :math:`\bar y` the label frequencies,
    :math:`\bar y_k` the label frequencies in cell :math:`k`, :math:`\bar p_k` its mean prediction and
    :math:`w_k = |M_k| / N`:

    .. math::
        \mathrm{UNC} = 1 - \sum_c \bar y_c^2, \quad
        \mathrm{RES} = \sum_k w_k \lVert \bar y_k - \bar y \rVert^2, \quad
        \mathrm{REL} = \frac{1}{N} \sum_i \lVert p_i - \bar y_{k(i)} \rVert^2,

    .. math::
        \mathrm{COV} = \frac{1}{N} \sum_i (p_i - \bar p_{k(i)}) \cdot (e_{y_i} - \bar y_{k(i)}), \qquad
        \mathrm{BS} = \mathrm{UNC} - \mathrm{RES} + \mathrm{REL} - 2\,\mathrm{COV}.

    The paper's three-term form :math:`\mathrm{BS} \approx \mathrm{UNC} - \mathrm{RES} + \mathrm{REL}` is exact
    when predictions are constant within each cell; otherwise it is off by the within-cell covariance term,
    which ubench reports instead of hiding it.

    Convention: uncertainty is ``1 - sum ybar^2`` for the [0, 2] Brier range; TensorFlow Probability reports
    ``-sum ybar^2`` because its Brier score is shifted by -1.

    Resolution follows the textbook :math:`\lVert \bar y_k - \bar y \rVert^2` (each class's own share). The shift
    paper's released ``brier_decomposition`` (and TensorFlow Probability's) subtracts, by a broadcast over the
    wrong axis, the label share of the *predicted* class from every entry of cell k:
    :math:`\sum_c (\bar y_{k,c} - \bar y_k^{\text{label}})^2` with :math:`\bar y_k^{\text{label}}` the share of
    label k. The two agree when the labels are balanced (every share 1/C) and drift apart with imbalance: on the
    bundled digits example (balanced) they are 0.8351 (ubench) and 0.8368 (released code), 0.0017 apart on a
    Brier score of 0.049; with a 90/5/5 label split the gap reaches the size of the Brier score itself
    (``tests/metrics/test_shift_paper_outputs.py`` computes both).

    References
    ----------
    .. [1] Ovadia et al. (2019), Can You Trust Your Model's Uncertainty?, NeurIPS, Sec. 3 and Appendix.
    .. [2] DeGroot & Fienberg (1983); Broecker (2009), Reliability, sufficiency, and the decomposition of proper
       scores.

    Examples
    --------
    >>> import numpy as np
    >>> d = brier_decomposition(np.array([[0.8, 0.2], [0.8, 0.2], [0.3, 0.7]]), np.array([0, 1, 1]))
    >>> [round(v, 6) for v in (d.uncertainty, d.resolution, d.reliability, d.brier)]  # covariance 0 here
    [0.444444, 0.111111, 0.18, 0.513333]
    """
    probs, labels = _check_probs_labels(probs, labels)
    return _brier_decomposition(probs, labels)
