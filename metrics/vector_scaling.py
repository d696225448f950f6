# SPDX-License-Identifier: MIT
"""Vector scaling: one temperature per class (Laves et al. 2019's comparison to temperature scaling)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._validation import check_labels, check_n_samples, check_probs
from .temperature import DEFAULT_EPS, DEFAULT_TEMPERATURE_BOUNDS, _check_bounds, _check_eps
from .temperature_solver import _prep_probs, _softmax_scaled

__all__ = ["VectorScalingFit", "fit_vector_scaling", "apply_vector_scaling"]


@dataclass(frozen=True)
class VectorScalingFit:
    """Per-class temperatures ``temperatures`` (n_classes,), NLL before/after on the fit data, ``hit_bound``."""

    temperatures: NDArray[np.float64]
    nll_before: float
    nll_after: float
    hit_bound: bool

    def to_dict(self) -> dict:
        d = asdict(self)
        d["temperatures"] = [float(t) for t in self.temperatures]
        return d


# vector scaling


def _vector_nll_grad(log_beta: NDArray, s: NDArray, labels: NDArray):
    """NLL of softmax(beta * s) (beta per class = exp(log_beta)) and its gradient in log_beta."""
    beta = np.exp(log_beta)
    z = s * beta
    from scipy.special import logsumexp  # at use: scipy.special costs `ubench score` start-up otherwise

    lse = logsumexp(z, axis=1)
    n = s.shape[0]
    rows = np.arange(n)
    nll = float(np.mean(lse - z[rows, labels]))
    q = np.exp(z - lse[:, None])
    # d nll / d beta_c = mean_i (q_ic - [y_i = c]) s_ic
    q[rows, labels] -= 1.0
    grad_beta = np.einsum("ij,ij->j", q, s) / n
    return nll, grad_beta * beta


def fit_vector_scaling(
    probs: ArrayLike, labels: ArrayLike, *, eps: float = DEFAULT_EPS,
    bounds: tuple[float, float] = DEFAULT_TEMPERATURE_BOUNDS,
) -> VectorScalingFit:
    r"""Fit one temperature per class (vector scaling without bias) to stored probabilities.

    Parameters
    ----------
    probs : ndarray of shape (n_samples, n_classes), rows on the simplex
    labels : ndarray of shape (n_samples,), integers in ``[0, n_classes)``
    eps : float, default=1e-12
    bounds : (float, float), default=(0.01, 100)
        Each per-class temperature is searched in ``(t_min, t_max)``.

    Returns
    -------
    VectorScalingFit
        ``temperatures`` (n_classes,), NLL before (all ``T_c = 1``) and after, ``hit_bound`` when any
        temperature ends at a bound.

    Notes
    -----
    .. math:: \hat p_i = \operatorname{softmax}\big(L_i \oslash T\big), \quad L_{ic} = \log(p_{ic} + \varepsilon)
              - \max_j \log(p_{ij} + \varepsilon)

    Minimised by L-BFGS-B over :math:`\log(1/T_c)` with the analytic gradient, from all ones. Unlike one
    temperature, unequal ``T_c`` can change the argmax, and the result depends on the per-row constant removed
    from the log-probabilities: here the row max, so the top class keeps logit 0 (logits themselves are not in
    the archive). With all ``T_c`` equal it is temperature scaling.

    Convention: Laves et al. (Eq. 26) scale raw logits by ``diag(t)``; ubench uses ``1 / T_c`` on max-shifted
    log-probabilities and no bias (Guo et al.'s vector scaling adds one).

    References
    ----------
    .. [1] M.-H. Laves et al. (2019), Calibration of Model Uncertainty for Dropout Variational Inference, Sec. 3.6.
    .. [2] C. Guo et al. (2017), On Calibration of Modern Neural Networks, ICML.

    Examples
    --------
    >>> import numpy as np
    >>> p = np.array([[0.9, 0.1], [0.9, 0.1], [0.9, 0.1], [0.1, 0.9]])
    >>> fit = fit_vector_scaling(p, np.array([0, 0, 1, 1]))
    >>> fit.nll_after <= fit.nll_before
    True
    """
    probs = check_probs(probs)
    labels = check_labels(labels, probs.shape[1])
    check_n_samples(probs, "probs", labels, "labels")
    eps, (t_lo, t_hi) = _check_eps(eps), _check_bounds(bounds)
    s = _prep_probs(probs, eps)[0]
    c = s.shape[1]
    lb = (np.log(1.0 / t_hi), np.log(1.0 / t_lo))
    nll0, _ = _vector_nll_grad(np.zeros(c), s, labels)
    from scipy import optimize  # at use: importing scipy.optimize costs `ubench score` start-up otherwise

    res = optimize.minimize(
        _vector_nll_grad, np.zeros(c), args=(s, labels), jac=True, method="L-BFGS-B", bounds=[lb] * c,
        options={"maxiter": 500, "ftol": 1e-15, "gtol": 1e-10},
    )
    log_beta = np.asarray(res.x, dtype=np.float64)
    nll, _ = _vector_nll_grad(log_beta, s, labels)
    if not nll <= nll0:  # the start is feasible; never report a worse point than it
        log_beta, nll = np.zeros(c), nll0
    at_bound = np.isclose(log_beta, lb[0], rtol=0, atol=1e-6) | np.isclose(log_beta, lb[1], rtol=0, atol=1e-6)
    return VectorScalingFit(
        temperatures=np.exp(-log_beta), nll_before=nll0, nll_after=float(nll), hit_bound=bool(at_bound.any())
    )


def apply_vector_scaling(
    probs: ArrayLike, temperatures: ArrayLike, *, eps: float = DEFAULT_EPS,
) -> NDArray[np.float64]:
    r"""Rescale stored probabilities per class: ``softmax(L / T)``, ``L`` the max-shifted ``log(probs + eps)``.

    Parameters
    ----------
    probs : ndarray of shape (n_samples, n_classes), rows on the simplex
    temperatures : ndarray of shape (n_classes,), finite and positive
    eps : float, default=1e-12

    Returns
    -------
    ndarray of shape (n_samples, n_classes), float64, rows on the simplex

    Notes
    -----
    .. math:: \hat p_{ic} \propto \exp(L_{ic} / T_c)

    Convention: as :func:`fit_vector_scaling`.

    Examples
    --------
    >>> import numpy as np
    >>> apply_vector_scaling(np.array([[0.9, 0.1]]), np.array([2.0, 2.0])).round(4)
    array([[0.75, 0.25]])
    """
    probs = check_probs(probs)
    eps = _check_eps(eps)
    t = np.asarray(temperatures)
    if t.dtype.kind not in "fiu" or t.shape != (probs.shape[1],):
        raise ValueError(
            f"temperatures must be a real array of shape ({probs.shape[1]},); found dtype {t.dtype}, shape {t.shape}"
        )
    t = t.astype(np.float64)
    if not (np.all(np.isfinite(t)) and np.all(t > 0)):
        i = int(np.argmax(~(np.isfinite(t) & (t > 0))))
        raise ValueError(f"temperatures must be finite and positive; found {t[i]} at index {i}")
    return _softmax_scaled(_prep_probs(probs, eps)[0], 1.0 / t)
