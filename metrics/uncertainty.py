# SPDX-License-Identifier: MIT
"""Per-sample uncertainty scores: entropy of the predictive mean (total), mean member entropy (data), mutual
information (knowledge), normalized entropy and confidence.

Entropies are in nats and use 0 log 0 = 0. Logarithms are evaluated in the input's precision (float32 input:
float32 log, relative error ~1e-7 per term) and every sum is accumulated in float64; the input is read in row
blocks, so no float64 copy of a whole (N, C) array is made. Rounding that would step outside ``[0, log C]`` is
clipped back into it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._validation import check_member_probs, check_probs
from .classification import _block_rows
from .ensemble import _ensemble_mean

__all__ = [
    "predictive_entropy",
    "expected_entropy",
    "mutual_information",
    "normalized_entropy",
    "confidence",
    "uncertainty_decomposition",
    "UncertaintyDecomposition",
]


def _entropy_rows(probs: NDArray, log_dtype: type | None = None) -> NDArray[np.float64]:
    """-sum_c p log p per row (0 log 0 = 0), logs in ``log_dtype`` (default: probs' dtype), sums in float64."""
    n, c = probs.shape
    dt = np.dtype(log_dtype if log_dtype is not None else probs.dtype)
    tiny = np.finfo(dt).tiny
    out = np.empty(n, dtype=np.float64)
    step = _block_rows(c)
    buf = np.empty((min(step, n), c), dtype=dt)
    buf64 = buf if dt == np.float64 else np.empty(buf.shape, dtype=np.float64)
    for start in range(0, n, step):
        block = probs[start : start + step]
        k = block.shape[0]
        b = buf[:k]
        b[...] = block
        # p * log(max(p, tiny)) is exactly 0 at p = 0, and differs from p log p by < 1e-36 below tiny.
        lg = np.maximum(b, tiny)
        np.log(lg, out=lg)
        np.multiply(b, lg, out=b)
        b64 = buf64[:k]
        if b64 is not b:
            b64[...] = b
        # einsum sums every row with the same loop (a BLAS dot with ones would round rows differently by
        # position, breaking ties between identical samples); it is faster than add.reduce on short rows.
        np.einsum("ij->i", b64, out=out[start : start + k])
    np.subtract(0.0, out, out=out)  # not np.negative: 0 - 0.0 is +0.0, where -(0.0) would print as -0.
    # 0 <= H <= log C exactly; rounding (a float32 log is good to ~1e-7) may step an ulp outside, never more.
    np.clip(out, 0.0, np.log(c), out=out)
    return out


def _confidence(probs: NDArray) -> NDArray[np.float64]:
    """max_c p_ic as float64, via argmax + gather (faster than a max reduction along short rows)."""
    pred = np.argmax(probs, axis=1)
    return probs[np.arange(probs.shape[0]), pred].astype(np.float64)


def _expected_entropy(member_probs: NDArray) -> NDArray[np.float64]:
    """Mean over members of each member's entropy; assumes validated input."""
    out = np.zeros(member_probs.shape[1], dtype=np.float64)
    for member in member_probs:
        out += _entropy_rows(member)
    out /= member_probs.shape[0]
    return out


@dataclass(frozen=True)
class UncertaintyDecomposition:
    """Per-sample total = data + knowledge uncertainty, in nats (see :func:`uncertainty_decomposition`)."""

    #: Entropy of the predictive mean, shape (n_samples,).
    total: NDArray[np.float64]
    #: Mean member entropy (aleatoric / data uncertainty), shape (n_samples,).
    data: NDArray[np.float64]
    #: Mutual information total - data (epistemic / knowledge uncertainty), >= 0, shape (n_samples,).
    knowledge: NDArray[np.float64]


def _uncertainty_decomposition(member_probs: NDArray) -> UncertaintyDecomposition:
    """Total, data and knowledge uncertainty; assumes validated input.

    Works on blocks of samples across all members, so each member block is read from memory once and the
    float64 ensemble mean never exists for more than one block.
    """
    m, n, c = member_probs.shape
    total = np.empty(n, dtype=np.float64)
    data = np.zeros(n, dtype=np.float64)
    step = _block_rows(c)
    for start in range(0, n, step):
        block = member_probs[:, start : start + step]
        # The mean's logs are taken in the members' precision so that identical members give exactly zero MI.
        total[start : start + block.shape[1]] = _entropy_rows(_ensemble_mean(block), member_probs.dtype)
        acc = data[start : start + block.shape[1]]
        for member in block:
            acc += _entropy_rows(member)
    data /= m
    knowledge = total - data
    # MI >= 0 (Jensen); a negative value is rounding of two nearly equal entropies.
    np.maximum(knowledge, 0.0, out=knowledge)
    return UncertaintyDecomposition(total=total, data=data, knowledge=knowledge)


def predictive_entropy(probs: ArrayLike) -> NDArray[np.float64]:
    r"""Shannon entropy of each predictive distribution (total uncertainty when ``probs`` is an ensemble mean).

    Parameters
    ----------
    probs : ndarray of shape (n_samples, n_classes), float32 or float64, rows summing to 1

    Returns
    -------
    ndarray of shape (n_samples,), float64, in ``[0, log C]`` nats

    Raises
    ------
    TypeError, ValueError
        If ``probs`` fails validation (dtype, shape, non-finite, off the simplex).

    Notes
    -----
    .. math:: H(p_i) = -\sum_c p_{ic} \log p_{ic}, \qquad 0 \log 0 = 0

    Convention: natural log (nats); divide by ``log(2)`` for bits or use :func:`normalized_entropy` for [0, 1].

    References
    ----------
    .. [1] Ovadia et al. (2019), Can You Trust Your Model's Uncertainty?, NeurIPS (entropy histograms).
    .. [2] Depeweg et al. (2018), Decomposition of Uncertainty in Bayesian Deep Learning, ICML.

    Examples
    --------
    >>> import numpy as np
    >>> predictive_entropy(np.array([[0.5, 0.5], [1.0, 0.0]])).round(6)
    array([0.693147, 0.      ])
    """
    return _entropy_rows(check_probs(probs))


def normalized_entropy(probs: ArrayLike) -> NDArray[np.float64]:
    r"""Entropy divided by its maximum ``log C``: the uncertainty measure of Laves et al. (2019).

    Parameters
    ----------
    probs : ndarray of shape (n_samples, n_classes), float32 or float64, rows summing to 1

    Returns
    -------
    ndarray of shape (n_samples,), float64, in ``[0, 1]``

    Notes
    -----
    .. math:: \tilde H(p_i) = -\frac{1}{\log C} \sum_c p_{ic} \log p_{ic}

    Convention: clipped to at most 1 (a uniform row can round a hair above); same 0 log 0 = 0 as
    :func:`predictive_entropy`.

    References
    ----------
    .. [1] Laves et al. (2019), Calibration of Model Uncertainty for Dropout Variational Inference, Eq. (3).

    Examples
    --------
    >>> import numpy as np
    >>> normalized_entropy(np.array([[0.25, 0.25, 0.25, 0.25]])).round(6)
    array([1.])
    """
    probs = check_probs(probs)
    return _normalized_entropy(probs)


def _normalized_entropy(probs: NDArray) -> NDArray[np.float64]:
    """H / log C clipped to [0, 1]; assumes validated input with C >= 2."""
    out = _entropy_rows(probs)
    out /= np.log(probs.shape[1])
    np.minimum(out, 1.0, out=out)
    return out


def confidence(probs: ArrayLike) -> NDArray[np.float64]:
    r"""Top-1 confidence ``max_c p_ic`` of each prediction.

    Parameters
    ----------
    probs : ndarray of shape (n_samples, n_classes), float32 or float64, rows summing to 1

    Returns
    -------
    ndarray of shape (n_samples,), float64, in ``[1/C, 1]``

    Notes
    -----
    .. math:: \mathrm{conf}_i = \max_c p_{ic}

    Convention: a certainty, not an uncertainty; detection functions use ``-confidence`` as the score.

    Examples
    --------
    >>> import numpy as np
    >>> confidence(np.array([[0.2, 0.8]]))
    array([0.8])
    """
    return _confidence(check_probs(probs))


def expected_entropy(member_probs: ArrayLike) -> NDArray[np.float64]:
    r"""Mean entropy of the members' predictions: data (aleatoric) uncertainty.

    Parameters
    ----------
    member_probs : ndarray of shape (n_members, n_samples, n_classes), float32 or float64, rows summing to 1

    Returns
    -------
    ndarray of shape (n_samples,), float64, in ``[0, log C]`` nats

    Notes
    -----
    .. math:: \mathbb{E}_m H(p^{(m)}_i) = -\frac{1}{M} \sum_m \sum_c p^{(m)}_{ic} \log p^{(m)}_{ic}

    Convention: members weigh equally; nats; 0 log 0 = 0.

    References
    ----------
    .. [1] Depeweg et al. (2018), ICML; Vadera et al. (2020), URSABench, Appendix B.

    Examples
    --------
    >>> import numpy as np
    >>> expected_entropy(np.array([[[1.0, 0.0]], [[0.0, 1.0]]]))
    array([0.])
    """
    return _expected_entropy(check_member_probs(member_probs))


def mutual_information(member_probs: ArrayLike) -> NDArray[np.float64]:
    r"""Mutual information between the label and the model: knowledge (epistemic) uncertainty.

    Parameters
    ----------
    member_probs : ndarray of shape (n_members, n_samples, n_classes), float32 or float64, rows summing to 1

    Returns
    -------
    ndarray of shape (n_samples,), float64, in ``[0, log C]`` nats; exactly 0 for identical members

    Notes
    -----
    .. math:: I(y; \theta \mid x_i) = H\Big(\frac{1}{M}\sum_m p^{(m)}_i\Big) - \frac{1}{M}\sum_m H(p^{(m)}_i)

    Convention: rounding below zero is clipped to 0 (MI >= 0 by Jensen's inequality), so ``total = data +
    knowledge`` holds to rounding (about 1e-7 relative for float32 input).

    References
    ----------
    .. [1] Depeweg et al. (2018), ICML; Vadera et al. (2020), URSABench, Appendix B (OOD from model uncertainty).

    Examples
    --------
    >>> import numpy as np
    >>> mutual_information(np.array([[[1.0, 0.0]], [[0.0, 1.0]]])).round(6)
    array([0.693147])
    """
    return _uncertainty_decomposition(check_member_probs(member_probs)).knowledge


def uncertainty_decomposition(member_probs: ArrayLike) -> UncertaintyDecomposition:
    r"""Split total predictive uncertainty into data and knowledge uncertainty, per sample.

    Parameters
    ----------
    member_probs : ndarray of shape (n_members, n_samples, n_classes), float32 or float64, rows summing to 1

    Returns
    -------
    UncertaintyDecomposition
        ``total`` (:func:`predictive_entropy` of the ensemble mean), ``data`` (:func:`expected_entropy`) and
        ``knowledge`` (:func:`mutual_information`), each of shape (n_samples,).

    Notes
    -----
    .. math:: H(\bar p_i) = \mathbb{E}_m H(p^{(m)}_i) + I(y; \theta \mid x_i)

    Convention: one pass computes all three, so the identity holds to rounding; a one-member ensemble has
    ``knowledge == 0``.

    References
    ----------
    .. [1] Depeweg et al. (2018); Vadera et al. (2020), URSABench, Appendix B.

    Examples
    --------
    >>> import numpy as np
    >>> d = uncertainty_decomposition(np.array([[[0.9, 0.1]], [[0.1, 0.9]]]))
    >>> bool(np.allclose(d.total, d.data + d.knowledge))
    True
    """
    return _uncertainty_decomposition(check_member_probs(member_probs))
