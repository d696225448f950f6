# SPDX-License-Identifier: MIT
r"""How close a method's predictive distribution is to a reference posterior's (HMC): agreement and total variation,
as defined by Izmailov, Vikram, Hoffman & Wilson (2021), "What are Bayesian neural network posteriors really like?"
(Sec. 5, "Evaluation metrics").

For predictive distributions :math:`\hat p(\cdot \mid x_i)` (the method's ensemble mean) and
:math:`p(\cdot \mid x_i)` (the reference's) over :math:`N` test inputs:

.. math::
    \mathrm{agreement} = \frac1N \sum_i \mathbb 1\big[\arg\max_c \hat p(c \mid x_i) = \arg\max_c p(c \mid x_i)\big],
    \qquad
    \mathrm{TV} = \frac1N \sum_i \tfrac12 \sum_c \lvert \hat p(c \mid x_i) - p(c \mid x_i) \rvert .

Agreement is in [0, 1], higher is closer; total variation in [0, 1], lower is closer. Ties in the argmax go to the
lowest class index on both sides (NumPy's convention).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._validation import check_n_samples, check_probs

__all__ = ["predictive_agreement", "total_variation"]


def _pair(probs: ArrayLike, reference_probs: ArrayLike) -> tuple[NDArray, NDArray]:
    p = check_probs(probs, "probs")
    q = check_probs(reference_probs, "reference_probs")
    check_n_samples(p, "probs", q, "reference_probs")
    if p.shape[1] != q.shape[1]:
        raise ValueError(f"probs has {p.shape[1]} classes but reference_probs has {q.shape[1]}")
    return p, q


def predictive_agreement(probs: ArrayLike, reference_probs: ArrayLike) -> float:
    """Fraction of inputs whose top class under ``probs`` equals the top class under ``reference_probs``.

    Parameters
    ----------
    probs, reference_probs : ndarray of shape (n_samples, n_classes), rows on the simplex

    Examples
    --------
    >>> predictive_agreement([[0.9, 0.1], [0.4, 0.6]], [[0.6, 0.4], [0.7, 0.3]])
    0.5
    """
    p, q = _pair(probs, reference_probs)
    return float(np.mean(np.argmax(p, axis=1) == np.argmax(q, axis=1)))


def total_variation(probs: ArrayLike, reference_probs: ArrayLike) -> float:
    """Mean over inputs of the total-variation distance between the two predictive distributions.

    Parameters
    ----------
    probs, reference_probs : ndarray of shape (n_samples, n_classes), rows on the simplex

    Examples
    --------
    >>> round(total_variation([[0.9, 0.1], [0.4, 0.6]], [[0.6, 0.4], [0.4, 0.6]]), 6)
    0.15
    """
    p, q = _pair(probs, reference_probs)
    return float(np.mean(0.5 * np.sum(np.abs(p.astype(np.float64) - q.astype(np.float64)), axis=1)))
