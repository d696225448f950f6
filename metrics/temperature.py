# SPDX-License-Identifier: MIT
"""Temperature scaling of stored softmax outputs (vector scaling is in ``vector_scaling.py``).

Archives store probabilities, so every calibrator here works on floored log-probabilities
``L = log(p + eps)``: the log-softmax of the logits up to a per-row constant, which a softmax ignores, so a
temperature on ``L`` is a temperature on the logits (for ``p`` far above ``eps``).

The scalar fit minimises the NLL over the inverse temperature ``beta = 1 / T``. For one softmax the NLL is convex
in ``beta`` (its second derivative is a mean of variances), so the derivative is monotone and a safeguarded
Newton iteration inside a bracket finds the optimum or proves that it lies at a bound; the solvers are in
``temperature_solver.py``. This module holds the public, validating functions.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._validation import check_labels, check_logits, check_member_probs, check_n_samples, check_probs
from .temperature_solver import (
    _WARM_START_ROWS,
    TemperatureFit,
    _fit_per_member,
    _fit_post,
    _fit_logits_fast,
    _fit_post_fused,
    _label_values,
    _prep_logits,
    _prep_probs,
    _softmax_scaled,
)

__all__ = [
    "DEFAULT_EPS",
    "DEFAULT_TEMPERATURE_BOUNDS",
    "PLACEMENTS",
    "TemperatureFit",
    "fit_temperature",
    "fit_temperature_from_logits",
    "fit_ensemble_temperature",
    "apply_temperature",
    "apply_ensemble_temperature",
]

DEFAULT_EPS = 1e-12
"""Floor added before the log: ``L = log(p + eps)`` (the Pitfalls code's 1e-12)."""

DEFAULT_TEMPERATURE_BOUNDS = (1e-2, 1e2)
"""Search interval for the temperature; an optimum outside it is reported with ``hit_bound``."""

PLACEMENTS = ("post", "per_member")

def _check_eps(eps: float) -> float:
    eps = float(eps)
    if not (np.isfinite(eps) and 0.0 < eps < 1e-2):
        raise ValueError(f"eps must be in (0, 0.01); found {eps}")
    return eps


def _check_bounds(bounds) -> tuple[float, float]:
    try:
        lo, hi = (float(b) for b in bounds)
    except (TypeError, ValueError):
        raise ValueError(f"bounds must be a pair (t_min, t_max); found {bounds!r}") from None
    if not (np.isfinite(lo) and np.isfinite(hi) and 0.0 < lo < 1.0 < hi):
        raise ValueError(f"bounds must satisfy 0 < t_min < 1 < t_max (finite); found ({lo}, {hi})")
    return lo, hi


def _check_temperature(temperature, name: str = "temperature") -> float:
    t = float(temperature)
    if not (np.isfinite(t) and t > 0):
        raise ValueError(f"{name} must be a finite positive number; found {t}")
    return t


def _check_placement(placement: str) -> str:
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {PLACEMENTS}; found {placement!r}")
    return placement


# ---------------------------------------------------------------------------------------------------------------
# public API


def fit_temperature(
    probs: ArrayLike, labels: ArrayLike, *, eps: float = DEFAULT_EPS,
    bounds: tuple[float, float] = DEFAULT_TEMPERATURE_BOUNDS,
) -> TemperatureFit:
    r"""Fit one temperature to stored probabilities by minimising the NLL.

    Parameters
    ----------
    probs : ndarray of shape (n_samples, n_classes), float32 or float64, rows on the simplex
    labels : ndarray of shape (n_samples,), integers in ``[0, n_classes)``
    eps : float, default=1e-12
        Floor inside the log: ``L = log(probs + eps)``.
    bounds : (float, float), default=(0.01, 100)
        Search interval ``(t_min, t_max)`` with ``0 < t_min < 1 < t_max``.

    Returns
    -------
    TemperatureFit
        ``temperature`` in ``bounds``; ``nll_before`` (``T = 1``) and ``nll_after`` on this data, with
        ``nll_after <= nll_before``; ``hit_bound`` when the optimum is at an end of ``bounds``; ``path``, the
        solver that ran (``"one_pass"`` from ``N >= 16384`` rows when it certifies its answer, else ``"newton"``).

    Raises
    ------
    TypeError, ValueError
        Invalid ``probs``/``labels`` (see ``_validation``), ``eps`` outside ``(0, 0.01)``, bad ``bounds``.

    Notes
    -----
    .. math:: T^* = \arg\min_T \; -\frac{1}{N}\sum_i \log \operatorname{softmax}\!\big(L_i / T\big)_{y_i},
              \qquad L_{ic} = \log(p_{ic} + \varepsilon)

    Minimised over :math:`\beta = 1/T` by safeguarded Newton with analytic derivatives (the NLL is convex in
    :math:`\beta`), to a relative step of 1e-7. ``nll_before`` is the NLL of ``softmax(L)``, which differs from
    ``-mean log p_y`` by at most ``C * eps``.

    Convention: the log floor is added (``log(p + eps)``, as the Pitfalls code), not clipped as in scikit-learn;
    the temperature divides the log-probabilities, equal to dividing the logits (Guo et al., 2017).

    References
    ----------
    .. [1] A. Ashukha, A. Lyzhov, D. Molchanov, D. Vetrov (2020), Pitfalls of In-Domain Uncertainty Estimation
       and Ensembling in Deep Learning, ICLR, Sec. 2.6.
    .. [2] C. Guo, G. Pleiss, Y. Sun, K. Q. Weinberger (2017), On Calibration of Modern Neural Networks, ICML.

    Examples
    --------
    >>> import numpy as np
    >>> p = np.array([[0.9, 0.1], [0.9, 0.1], [0.9, 0.1], [0.1, 0.9]])
    >>> fit = fit_temperature(p, np.array([0, 0, 1, 1]))
    >>> round(fit.temperature, 4), fit.hit_bound
    (2.0, False)
    """
    probs = check_probs(probs)
    labels = check_labels(labels, probs.shape[1])
    check_n_samples(probs, "probs", labels, "labels")
    eps, bounds = _check_eps(eps), _check_bounds(bounds)
    if probs.shape[0] >= 4 * _WARM_START_ROWS:
        fit = _fit_post_fused(probs, labels, eps, bounds)
        if fit is not None:
            return fit
    s, lse1 = _prep_probs(probs, eps)
    return _fit_post(s, _label_values(s, labels), lse1, bounds)


def fit_temperature_from_logits(
    logits: ArrayLike, labels: ArrayLike, *, bounds: tuple[float, float] = DEFAULT_TEMPERATURE_BOUNDS,
) -> TemperatureFit:
    r"""Fit one temperature to logits: minimise the NLL of ``softmax(logits / T)``.

    Parameters
    ----------
    logits : ndarray of shape (n_samples, n_classes), float32 or float64, finite
    labels : ndarray of shape (n_samples,), integers in ``[0, n_classes)``
    bounds : (float, float), default=(0.01, 100)
        Search interval ``(t_min, t_max)`` with ``0 < t_min < 1 < t_max``.

    Returns
    -------
    TemperatureFit
        As :func:`fit_temperature`; ``nll_before`` is the NLL of ``softmax(logits)``; ``path`` is
        ``"logit_passes"`` when the large-input path below certified its answer, else ``"newton"``.

    Notes
    -----
    .. math:: T^* = \arg\min_T \; -\frac{1}{N}\sum_i \log \operatorname{softmax}(z_i / T)_{y_i}

    Same solver as :func:`fit_temperature`; no floor is needed because there is no log. From
    ``N >= 16384`` rows: one pass over ``logits`` in their dtype (float32 exponentials and row sums, float64
    cumulants) at a start fitted on 4096 strided rows, whose per-row cumulants to order 5 give the Taylor model
    of :math:`\partial \mathrm{NLL}/\partial\beta`; its root is returned when the model's residual and last
    term each move :math:`\beta` by less than 1e-7 relative, else the model's root starts another pass (the
    float64 solver is the fallback).

    Convention: the objective of Guo et al.'s ``temperature_scaling`` (cross-entropy of ``logits / T``), solved to
    a relative step of 1e-7 in :math:`\beta` (equivalently :math:`|\partial \mathrm{NLL}/\partial\beta| \le
    10^{-7} \beta\, \partial^2 \mathrm{NLL}/\partial\beta^2`) rather than by a fixed number of L-BFGS steps.

    References
    ----------
    .. [1] C. Guo, G. Pleiss, Y. Sun, K. Q. Weinberger (2017), On Calibration of Modern Neural Networks, ICML.

    Examples
    --------
    >>> import numpy as np
    >>> z = np.array([[np.log(9.0), 0.0]] * 3 + [[0.0, np.log(9.0)]])
    >>> round(fit_temperature_from_logits(z, np.array([0, 0, 1, 1])).temperature, 4)
    2.0
    """
    logits = check_logits(logits, finite=False)  # the fast path's passes expose NaN/inf; the scan runs below
    labels = check_labels(labels, logits.shape[1])
    check_n_samples(logits, "logits", labels, "labels")
    bounds = _check_bounds(bounds)
    if logits.shape[0] >= 4 * _WARM_START_ROWS:
        fit = _fit_logits_fast(logits, labels, bounds)
        if fit is not None:
            return fit
    check_logits(logits)
    s, lse1 = _prep_logits(logits)
    return _fit_post(s, _label_values(s, labels), lse1, bounds)


def fit_ensemble_temperature(
    member_probs: ArrayLike, labels: ArrayLike, *, placement: str = "post", eps: float = DEFAULT_EPS,
    bounds: tuple[float, float] = DEFAULT_TEMPERATURE_BOUNDS,
) -> TemperatureFit:
    r"""Fit one temperature to an ensemble, after averaging (``post``) or on each member (``per_member``).

    Parameters
    ----------
    member_probs : ndarray of shape (n_members, n_samples, n_classes), float32 or float64, rows on the simplex
    labels : ndarray of shape (n_samples,), integers in ``[0, n_classes)``
    placement : {"post", "per_member"}, default="post"
        ``post``: scale the log of the averaged probabilities (the Pitfalls code). ``per_member``: scale each
        member's log-probabilities, then average (Laves et al., Eq. 25).
    eps : float, default=1e-12
        Floor inside the log: ``log(p + eps)``.
    bounds : (float, float), default=(0.01, 100)
        Search interval ``(t_min, t_max)`` with ``0 < t_min < 1 < t_max``.

    Returns
    -------
    TemperatureFit

    Notes
    -----
    .. math::
        \text{post:}\quad \hat p_i = \operatorname{softmax}\!\Big(\tfrac{1}{T}\log\big(\bar p_i + \varepsilon\big)\Big),
        \qquad \bar p_i = \tfrac{1}{M}\sum_m p_{mi}

        \text{per\_member:}\quad \hat p_i = \tfrac{1}{M}\sum_m \operatorname{softmax}\!\Big(\tfrac{1}{T}
        \log\big(p_{mi} + \varepsilon\big)\Big)

    For one member both placements are the same. ``post`` is convex in :math:`1/T`; ``per_member`` need not be
    (a mixture of softmaxes), and the solver returns the bracketed stationary point it converges to.

    Convention: ``post`` is the default, as in the Pitfalls experiments; ``per_member`` is the MC-dropout
    calibration of Laves et al.

    References
    ----------
    .. [1] A. Ashukha et al. (2020), Pitfalls of In-Domain Uncertainty Estimation and Ensembling in Deep
       Learning, ICLR.
    .. [2] M.-H. Laves, S. Ihler, K.-P. Kortmann, T. Ortmaier (2019), Calibration of Model Uncertainty for
       Dropout Variational Inference, Sec. 3.5.

    Examples
    --------
    >>> import numpy as np
    >>> mp = np.array([[[0.9, 0.1], [0.9, 0.1], [0.9, 0.1], [0.1, 0.9]]])
    >>> y = np.array([0, 0, 1, 1])
    >>> a = fit_ensemble_temperature(mp, y, placement="post").temperature
    >>> b = fit_ensemble_temperature(mp, y, placement="per_member").temperature
    >>> bool(abs(a - b) < 1e-8)
    True
    """
    member_probs = check_member_probs(member_probs)
    labels = check_labels(labels, member_probs.shape[2])
    check_n_samples(member_probs, "member_probs", labels, "labels", a_axis=1)
    placement, eps, bounds = _check_placement(placement), _check_eps(eps), _check_bounds(bounds)
    if placement == "post":
        s, lse1 = _prep_probs(member_probs.mean(axis=0, dtype=np.float64), eps)
        return _fit_post(s, _label_values(s, labels), lse1, bounds)
    s, lse1 = _prep_probs(member_probs, eps)
    return _fit_per_member(s, _label_values(s, labels), lse1, bounds)


def apply_temperature(probs: ArrayLike, temperature: float, *, eps: float = DEFAULT_EPS) -> NDArray[np.float64]:
    r"""Rescale stored probabilities by a temperature: ``softmax(log(probs + eps) / T)``.

    Parameters
    ----------
    probs : ndarray of shape (n_samples, n_classes), rows on the simplex
    temperature : float > 0
    eps : float, default=1e-12

    Returns
    -------
    ndarray of shape (n_samples, n_classes), float64, rows on the simplex; argmax unchanged

    Notes
    -----
    .. math:: \hat p_{ic} = \frac{(p_{ic} + \varepsilon)^{1/T}}{\sum_j (p_{ij} + \varepsilon)^{1/T}}

    Convention: as :func:`fit_temperature`.

    Examples
    --------
    >>> import numpy as np
    >>> apply_temperature(np.array([[0.9, 0.1]]), 2.0).round(4)
    array([[0.75, 0.25]])
    """
    probs = check_probs(probs)
    eps, t = _check_eps(eps), _check_temperature(temperature)
    return _softmax_scaled(_prep_probs(probs, eps)[0], 1.0 / t)


def apply_ensemble_temperature(
    member_probs: ArrayLike, temperature: float, *, placement: str = "post", eps: float = DEFAULT_EPS,
) -> NDArray[np.float64]:
    r"""Temperature-scaled ensemble prediction (N, C) for either placement (see :func:`fit_ensemble_temperature`).

    Parameters
    ----------
    member_probs : ndarray of shape (n_members, n_samples, n_classes), rows on the simplex
    temperature : float > 0
    placement : {"post", "per_member"}, default="post"
    eps : float, default=1e-12

    Returns
    -------
    ndarray of shape (n_samples, n_classes), float64, rows on the simplex

    Notes
    -----
    ``post``: :math:`\operatorname{softmax}(\log(\bar p + \varepsilon)/T)`; ``per_member``:
    :math:`\frac{1}{M}\sum_m \operatorname{softmax}(\log(p_m + \varepsilon)/T)`.

    Convention: as :func:`fit_ensemble_temperature`.

    Examples
    --------
    >>> import numpy as np
    >>> apply_ensemble_temperature(np.array([[[0.9, 0.1]], [[0.5, 0.5]]]), 1.0).round(4)
    array([[0.7, 0.3]])
    """
    member_probs = check_member_probs(member_probs)
    placement, eps, t = _check_placement(placement), _check_eps(eps), _check_temperature(temperature)
    if placement == "post":
        return _softmax_scaled(_prep_probs(member_probs.mean(axis=0, dtype=np.float64), eps)[0], 1.0 / t)
    return _softmax_scaled(_prep_probs(member_probs, eps)[0], 1.0 / t).mean(axis=0)
