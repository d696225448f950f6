# SPDX-License-Identifier: MIT
"""Bayesian decisions under a cost matrix and the cost actually paid: the URSABench decision-making task.

Cost matrices are indexed ``cost[true, decided]``. The presets penalise false negatives of a few critical classes
(a sample of a critical class decided as anything else) far more than every other error.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._validation import check_probs
from .classification import _block_rows, _check_probs_labels, _check_smoothing

__all__ = [
    "COST_PRESETS",
    "cost_matrix",
    "cost_matrix_preset",
    "cost_preset_for_dataset",
    "bayes_decisions",
    "DecisionCost",
    "decision_cost",
]

#: name -> (n_classes, critical classes, false-negative cost, cost of every other error), from URSABench.
COST_PRESETS: dict[str, tuple[int, tuple[int, ...], float, float]] = {
    "mnist": (10, (3, 7), 100.0, 0.1),
    "cifar10": (10, (0, 1, 8, 9), 1.0, 0.1),
    "cifar100": (100, (58, 69, 85), 1.0, 0.1),
    "imagenet": (1000, (403, 479, 565, 705, 751, 817, 847, 864, 895), 100.0, 0.1),
}


def cost_matrix(
    n_classes: int, critical_classes: ArrayLike, *, false_negative_cost: float, other_error_cost: float
) -> NDArray[np.float64]:
    r"""Cost matrix that penalises missing a critical class more than any other error.

    Parameters
    ----------
    n_classes : int >= 2
    critical_classes : sequence of int in ``[0, n_classes)``
    false_negative_cost : float >= 0
        Cost of deciding anything else when the true class is critical.
    other_error_cost : float >= 0
        Cost of every other wrong decision (including deciding a critical class for a non-critical sample).

    Returns
    -------
    ndarray of shape (n_classes, n_classes), float64, indexed ``[true, decided]``, zero on the diagonal

    Notes
    -----
    .. math:: C[y, h] = \begin{cases} 0 & h = y \\ c_\mathrm{FN} & h \ne y,\ y \in K \\
        c_\mathrm{other} & h \ne y,\ y \notin K \end{cases}

    Convention: a "false negative" of critical class :math:`k` is a sample whose true class is :math:`k`
    decided as any other class, another critical class included; a "false positive" (deciding :math:`k` for a
    sample of another class) costs the same as every other error. Correct decisions cost 0 (URSABench, App. A).

    References
    ----------
    .. [1] Vadera et al. (2020), URSABench, Appendix A; Cobb (2020), Ch. 4.

    Examples
    --------
    >>> cost_matrix(3, [2], false_negative_cost=10.0, other_error_cost=1.0)
    array([[ 0.,  1.,  1.],
           [ 1.,  0.,  1.],
           [10., 10.,  0.]])
    """
    n = int(n_classes)
    if n < 2:
        raise ValueError(f"n_classes must be >= 2; found {n_classes!r}")
    crit = np.asarray(critical_classes)
    if crit.ndim != 1 or (crit.size and crit.dtype.kind not in "iu"):
        raise ValueError(f"critical_classes must be a 1-d sequence of integers; found {critical_classes!r}")
    if crit.size and (crit.min() < 0 or crit.max() >= n):
        raise ValueError(f"critical_classes must be in [0, {n}); found {crit.tolist()}")
    fn, other = float(false_negative_cost), float(other_error_cost)
    for name, v in (("false_negative_cost", fn), ("other_error_cost", other)):
        if not (np.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be finite and >= 0; found {v!r}")
    out = np.full((n, n), other, dtype=np.float64)
    out[crit.astype(np.intp)] = fn
    np.fill_diagonal(out, 0.0)
    return out


def cost_matrix_preset(name: str) -> NDArray[np.float64]:
    r"""The URSABench cost matrix for ``"mnist"``, ``"cifar10"``, ``"cifar100"`` or ``"imagenet"``.

    Parameters
    ----------
    name : str
        One of ``COST_PRESETS``.

    Returns
    -------
    ndarray of shape (C, C), float64, indexed ``[true, decided]``

    Notes
    -----
    ========  ===  ==========================================================  =====  =====
    preset    C    critical classes                                            FN     other
    ========  ===  ==========================================================  =====  =====
    mnist     10   3, 7                                                        100    0.1
    cifar10   10   0, 1, 8, 9 (airplane, automobile, ship, truck)              1.0    0.1
    cifar100  100  58, 69, 85 (pickup truck, rocket, tank)                     1.0    0.1
    imagenet  1000 403, 479, 565, 705, 751, 817, 847, 864, 895                 100    0.1
    ========  ===  ==========================================================  =====  =====

    Built by :func:`cost_matrix`; see it for what counts as a false negative.

    References
    ----------
    .. [1] Vadera et al. (2020), URSABench (workshop and full versions), Appendix A.

    Examples
    --------
    >>> c = cost_matrix_preset("mnist")
    >>> float(c[3, 5]), float(c[5, 3]), float(c[3, 3])
    (100.0, 0.1, 0.0)
    """
    if name not in COST_PRESETS:
        raise ValueError(f"name must be one of {sorted(COST_PRESETS)}; found {name!r}")
    n, crit, fn, other = COST_PRESETS[name]
    return cost_matrix(n, crit, false_negative_cost=fn, other_error_cost=other)


#: Spellings of dataset names (lower case, without ``-``, ``_``, spaces and dots) -> URSABench cost preset.
DATASET_COST_PRESETS: dict[str, str] = {
    "mnist": "mnist",
    "cifar10": "cifar10",
    "cifar100": "cifar100",
    "imagenet": "imagenet",
    "imagenet1k": "imagenet",
    "ilsvrc2012": "imagenet",
}


def cost_preset_for_dataset(dataset: str) -> str | None:
    r"""The URSABench cost preset of a dataset name, or ``None`` when URSABench defines none for it.

    Parameters
    ----------
    dataset : str
        A dataset name as archives spell it: case, ``-``, ``_``, spaces and dots are ignored, so ``CIFAR-10``,
        ``cifar_10`` and ``cifar10`` all give ``"cifar10"``; ``ImageNet``, ``imagenet-1k`` and ``ILSVRC2012``
        give ``"imagenet"``.

    Returns
    -------
    str or None
        One of ``COST_PRESETS``.

    Notes
    -----
    Convention: follows URSABench's code, which picks the matrix by the exact torchvision dataset class
    (``tasks/decision_making.py``: ``MNIST``, ``CIFAR10``, ``CIFAR100``, compared with ``is``, so
    ``FashionMNIST``, a subclass of ``MNIST``, gets none and raises there); ImageNet's matrix comes from the full
    paper's Appendix A, which the released task code does not implement. Fashion-MNIST, KMNIST, SVHN, digits and
    every other name give ``None``.

    References
    ----------
    .. [1] Vadera et al. (2020), URSABench, Appendix A; reml-lab/URSABench ``URSABench/tasks/decision_making.py``.

    Examples
    --------
    >>> cost_preset_for_dataset("CIFAR-10"), cost_preset_for_dataset("fashion-mnist")
    ('cifar10', None)
    """
    return DATASET_COST_PRESETS.get(dataset_key(dataset))


def dataset_key(dataset: str) -> str:
    """A dataset name with case, ``-``, ``_``, spaces and dots dropped: the key every dataset-name table is
    looked up by (``"CIFAR-10"`` -> ``"cifar10"``)."""
    return "".join(ch for ch in str(dataset).lower() if ch not in "-_ .")


def _check_cost(cost: ArrayLike, n_classes: int) -> NDArray[np.float64]:
    arr = np.asarray(cost)
    if arr.dtype.kind not in "fiu":
        raise TypeError(f"cost_matrix must be numeric; found dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=False)
    if arr.shape != (n_classes, n_classes):
        raise ValueError(
            f"cost_matrix must have shape ({n_classes}, {n_classes}) to match probs; found shape {arr.shape}"
        )
    if not np.all(np.isfinite(arr)):
        raise ValueError("cost_matrix must be finite")
    return arr


def _bayes_decisions(probs: NDArray, cost: NDArray[np.float64], gamma: float = 0.0) -> NDArray[np.intp]:
    """argmin_h sum_y p(y) C[y, h] per row, float64 risk in row blocks; ties to the lowest h."""
    n, c = probs.shape
    out = np.empty(n, dtype=np.intp)
    # Smoothing is linear: risk(p_gamma) = (1 - gamma) risk(p) + gamma / C * sum_y C[y, h].
    offset = gamma / c * cost.sum(axis=0)
    # Risks within the rounding of a length-C float64 dot product count as tied, so exact ties in probs (uniform
    # rows) go to the lowest index instead of to whichever risk happened to round low.
    tol = c * np.finfo(np.float64).eps * max(float(np.abs(cost).max()), np.finfo(np.float64).tiny)
    step = _block_rows(c)
    for start in range(0, n, step):
        risk = probs[start : start + step].astype(np.float64) @ cost
        if gamma:
            risk *= 1.0 - gamma
            risk += offset
        near_min = risk <= risk.min(axis=1, keepdims=True) + tol
        out[start : start + risk.shape[0]] = np.argmax(near_min, axis=1)
    return out


def bayes_decisions(
    probs: ArrayLike, cost_matrix: ArrayLike, *, smoothing: float = 0.0
) -> NDArray[np.intp]:
    r"""Bayes-optimal decision per sample: the class with the least expected cost.

    Parameters
    ----------
    probs : ndarray of shape (n_samples, n_classes), float32 or float64, rows summing to 1
        The predictive distribution (for posterior samples, their mean: the risk is linear in p).
    cost_matrix : ndarray of shape (n_classes, n_classes), finite, indexed ``[true, decided]``
    smoothing : float in ``[0, 1)``, default=0.0
        Central smoothing of ``probs`` first (URSABench uses 1e-4).

    Returns
    -------
    ndarray of shape (n_samples,), integer decisions in ``[0, n_classes)``

    Notes
    -----
    .. math:: h^*_i = \arg\min_h \sum_y p(y \mid x_i)\, C[y, h]

    Convention: ties go to the lowest class index, where risks within ``C * eps64 * max|cost|`` of the minimum
    count as tied (rounding of the risk sum); with ``C = 1 - I`` this is the arg max of ``probs``.

    References
    ----------
    .. [1] Vadera et al. (2020), URSABench, Appendix A.

    Examples
    --------
    >>> import numpy as np
    >>> c = np.array([[0.0, 1.0], [10.0, 0.0]])
    >>> bayes_decisions(np.array([[0.8, 0.2], [0.95, 0.05]]), c).tolist()
    [1, 0]
    """
    probs = check_probs(probs)
    cost = _check_cost(cost_matrix, probs.shape[1])
    return _bayes_decisions(probs, cost, _check_smoothing(smoothing))


@dataclass(frozen=True)
class DecisionCost:
    """Cost paid by the Bayes decisions (see :func:`decision_cost`)."""

    #: Sum over samples of ``cost[true, decided]``.
    total: float
    #: ``total / n_samples``: the URSABench "decision cost".
    mean: float
    n_samples: int


def _decision_cost(probs: NDArray, labels: NDArray, cost: NDArray[np.float64], gamma: float = 0.0) -> DecisionCost:
    """Cost of the Bayes decisions against the true labels; assumes validated input."""
    decided = _bayes_decisions(probs, cost, gamma)
    total = float(cost[labels, decided].sum())
    return DecisionCost(total=total, mean=total / labels.shape[0], n_samples=int(labels.shape[0]))


def decision_cost(
    probs: ArrayLike, labels: ArrayLike, cost_matrix: ArrayLike, *, smoothing: float = 0.0
) -> DecisionCost:
    r"""Total and mean cost paid by the Bayes-optimal decisions; lower is better.

    Parameters
    ----------
    probs : ndarray of shape (n_samples, n_classes), float32 or float64, rows summing to 1
    labels : ndarray of shape (n_samples,), integers in ``[0, n_classes)``
    cost_matrix : ndarray of shape (n_classes, n_classes), indexed ``[true, decided]``
        For example ``cost_matrix_preset("cifar10")``.
    smoothing : float in ``[0, 1)``, default=0.0
        Central smoothing of ``probs`` before deciding (URSABench uses 1e-4).

    Returns
    -------
    DecisionCost
        ``total`` and ``mean`` (>= 0 for non-negative costs) and ``n_samples``.

    Notes
    -----
    .. math:: \mathrm{cost} = \frac{1}{N} \sum_i C[y_i, h^*_i], \qquad
        h^*_i = \arg\min_h \sum_y p(y \mid x_i)\, C[y, h]

    Convention: the matrix is indexed ``[true, decided]``; URSABench writes :math:`C(h, y)` in the risk and
    swaps the arguments when charging, which is the same matrix.

    References
    ----------
    .. [1] Vadera et al. (2020), URSABench, Appendix A; Cobb (2020), Ch. 4.

    Examples
    --------
    >>> import numpy as np
    >>> c = np.array([[0.0, 1.0], [10.0, 0.0]])
    >>> decision_cost(np.array([[0.8, 0.2], [0.95, 0.05]]), np.array([0, 1]), c).mean
    5.5
    """
    probs, labels = _check_probs_labels(probs, labels)  # also checks that they have as many samples
    cost = _check_cost(cost_matrix, probs.shape[1])
    return _decision_cost(probs, labels, cost, _check_smoothing(smoothing))
