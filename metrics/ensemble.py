# SPDX-License-Identifier: MIT
"""Turning member predictions into one predictive distribution: the ensemble (posterior-sample) mean and central
smoothing. The Deep Ensemble Equivalent curve lives in ``metrics/dee.py``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._validation import check_member_probs, check_probs

__all__ = ["ensemble_mean_probs", "smooth_probs"]

#: Elements per row block of the unweighted mean (float64: 512 KiB).
_MEAN_BLOCK_ELEMS = 1 << 16


def _ensemble_mean(member_probs: NDArray, weights: NDArray[np.float64] | None = None) -> NDArray[np.float64]:
    """(Weighted) mean over axis 0 in float64; assumes validated input and weights summing to 1."""
    if weights is None:
        m, n = member_probs.shape[:2]
        out = np.empty(member_probs.shape[1:], dtype=np.float64)
        # Row blocks that stay in cache, members added one by one in order (the same float64 sums as
        # np.add.reduce over axis 0, whose buffered casting loop was ~4x slower than memory bandwidth).
        step = max(1, _MEAN_BLOCK_ELEMS // max(1, int(np.prod(member_probs.shape[2:], dtype=np.int64))))
        for start in range(0, n, step):
            ob = out[start : start + step]
            ob[...] = member_probs[0, start : start + step]
            for j in range(1, m):
                np.add(ob, member_probs[j, start : start + step], out=ob)
            ob /= m
        return out
    out = np.zeros(member_probs.shape[1:], dtype=np.float64)
    for w, member in zip(weights, member_probs):
        out += w * member.astype(np.float64)
    return out


def _smooth(probs: NDArray, gamma: float) -> NDArray[np.float64]:
    """(1 - gamma) p + gamma / C in float64; assumes validated input and gamma in [0, 1)."""
    out = probs.astype(np.float64)
    if gamma:
        out *= 1.0 - gamma
        out += gamma / probs.shape[-1]
    return out


def ensemble_mean_probs(member_probs: ArrayLike, *, weights: ArrayLike | None = None) -> NDArray[np.float64]:
    r"""Predictive distribution of an ensemble or of posterior samples: the (weighted) mean of member probabilities.

    Parameters
    ----------
    member_probs : ndarray of shape (n_members, n_samples, n_classes), float32 or float64, rows summing to 1
    weights : ndarray of shape (n_members,), optional
        Non-negative member weights summing to 1 (within 1e-9); uniform when omitted.

    Returns
    -------
    ndarray of shape (n_samples, n_classes), float64, rows summing to 1

    Raises
    ------
    TypeError, ValueError
        If ``member_probs`` fails validation, or ``weights`` has the wrong shape, negative entries or does not
        sum to 1.

    Notes
    -----
    .. math:: \bar p_{ic} = \sum_m w_m\, p^{(m)}_{ic}, \qquad w_m = 1/M \text{ by default}

    Convention: probabilities are averaged (Bayesian model averaging, Lakshminarayanan et al. 2017), never
    logits; averaging logits is a different predictor. A one-member ensemble equals its member.

    References
    ----------
    .. [1] Ashukha et al. (2020), Pitfalls of In-Domain Uncertainty Estimation and Ensembling in Deep Learning.
    .. [2] Vadera et al. (2020), URSABench: posterior predictive from Monte Carlo samples.

    Examples
    --------
    >>> import numpy as np
    >>> ensemble_mean_probs(np.array([[[1.0, 0.0]], [[0.5, 0.5]]]))
    array([[0.75, 0.25]])
    """
    member_probs = check_member_probs(member_probs)
    w = None
    if weights is not None:
        w = np.asarray(weights, dtype=np.float64)
        m = member_probs.shape[0]
        if w.shape != (m,):
            raise ValueError(f"weights must have shape ({m},) to match member_probs; found shape {w.shape}")
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError(f"weights must be finite and non-negative; found {w}")
        if abs(float(w.sum()) - 1.0) > 1e-9:
            raise ValueError(f"weights must sum to 1 (tol 1e-9); they sum to {float(w.sum()):.12g}")
    return _ensemble_mean(member_probs, w)


def smooth_probs(probs: ArrayLike, *, gamma: float) -> NDArray[np.float64]:
    r"""Central smoothing of a predictive distribution towards the uniform distribution.

    Parameters
    ----------
    probs : ndarray of shape (n_samples, n_classes) or (n_members, n_samples, n_classes), rows summing to 1
    gamma : float in ``[0, 1)``
        Smoothing weight; URSABench uses ``1e-4`` before NLL, OOD scores and decisions.

    Returns
    -------
    ndarray of the same shape, float64, rows summing to 1, every entry >= gamma / C

    Notes
    -----
    .. math:: p \to (1 - \gamma)\, p + \gamma / C

    Convention: a keyword everywhere it applies (``nll_loss(..., smoothing=)``, ``bayes_decisions(...,
    smoothing=)``, the detection scores), always off by default; ubench never smooths silently.

    References
    ----------
    .. [1] Vadera et al. (2020), URSABench.

    Examples
    --------
    >>> import numpy as np
    >>> smooth_probs(np.array([[1.0, 0.0]]), gamma=0.5)
    array([[0.75, 0.25]])
    """
    arr = np.asarray(probs)
    arr = check_member_probs(arr, "probs") if arr.ndim == 3 else check_probs(arr)
    g = float(gamma)
    if not (0.0 <= g < 1.0):
        raise ValueError(f"gamma must be in [0, 1); found {gamma!r}")
    return _smooth(arr, g)
