# SPDX-License-Identifier: MIT
"""Smooth ECE (Błasiok & Nakkiran 2023): the calibration error of a kernel-smoothed reliability diagram, with the
bandwidth chosen by the paper's fixed point. A consistent calibration measure without bins.

Computed as the authors' ``relplot`` package (1.0.3, ``relplot.smECE``) computes it, to its discretisation: the
residuals ``f - y`` and unit weights are split linearly onto a uniform grid of ``max(2000, round(20/σ)) // 2 + 1``
points on [0, 1], convolved with a Gaussian of width σ reflected at 0 and 1, interpolated onto
``max(200, round(10/σ))`` evaluation points, and ``smECE_σ = Σ_t |r̂(t)| δ̂(t) / Σ_t δ̂(t)`` with the smoothed
density ``δ̂`` offset by 1e-4. σ* solves ``smECE_σ = σ`` by ten bisection steps on (0, 1] (σ = 1 when
``smECE_1 ≥ 1``). torch-uncertainty 0.13's ``SmoothCalibrationError`` re-implements this and differs from relplot by
about 1 % (and rejects float64 input); ubench follows relplot, the authors' code.
"""

from __future__ import annotations

import functools

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .calibration import checked_top1

__all__ = ["smooth_ece", "smooth_ece_at"]

#: relplot's defaults: evaluation mesh (``config.smECE_mesh_pts``), density offset, bisection steps.
_MESH_POINTS = 200
_DENSITY_EPS = 1e-4
_BISECTION_STEPS = 10


def _fft_size(a_len: int, k_len: int) -> int:
    """The power of two a linear (not circular) convolution of lengths ``a_len`` and ``k_len`` fits in."""
    return 1 << (a_len + k_len - 2).bit_length()


def _convolve_valid(a_spectra: NDArray[np.complex128], a_len: int, k: NDArray[np.float64], n: int
                    ) -> NDArray[np.float64]:
    """``scipy.signal.fftconvolve(a, k, mode="valid")`` for each row ``a`` of a stack of 1-D real signals (of
    length ``a_len`` >= len(k)) given their spectra ``np.fft.rfft(a, n)`` (shape (..., n // 2 + 1)): numpy's real
    FFT, the same pocketfft algorithm (importing scipy.signal cost ubench 0.6 s of start-up, issue #29). The
    signals' spectra are computed once for every bandwidth tried, the kernel's once per bandwidth for the whole
    stack, and the inverse transforms run as one call (row by row, the numbers of separate calls)."""
    out = np.fft.irfft(a_spectra * np.fft.rfft(k, n), n)
    return out[..., k.shape[0] - 1 : a_len]


def _to_grid(f: NDArray[np.float64], w: NDArray[np.float64], points: int) -> NDArray[np.float64]:
    """Weights ``w`` at positions ``f`` in [0, 1] split linearly between the two nearest of ``points`` grid nodes."""
    pos = f * (points - 1)
    lo = np.clip(pos.astype(np.intp), 0, points - 2)
    frac = pos - lo
    return (np.bincount(lo, (1.0 - frac) * w, minlength=points)
            + np.bincount(lo + 1, frac * w, minlength=points))


@functools.lru_cache(maxsize=8)
def _mesh(mesh_points: int, points: int) -> tuple[NDArray[np.float64], NDArray[np.intp], NDArray[np.float64]]:
    """What :meth:`_Smoother._ece_at` needs of its grids but σ: the kernel's squared distances ``(t - 1/2)^2`` over
    the ``points`` grid nodes ``t``, and, for each of the ``mesh_points`` evaluation points, the node below it and
    its fraction of the way to the next (relplot's ``interpolate``). Every σ >= 0.05 shares one mesh (the
    bandwidth search's ~11 steps per split computed them anew each time); read-only, as they are shared."""
    at = np.linspace(0.0, 1.0, mesh_points)
    t = np.linspace(0.0, 1.0, points)
    idx = np.clip((at * (points - 1)).astype(np.intp), 0, points - 2)
    step = 1.0 / (points - 1)
    resid = (at - idx * step) / step
    centred = (t - 0.5) ** 2
    for a in (centred, idx, resid):
        a.flags.writeable = False
    return centred, idx, resid


class _Smoother:
    """Gaussian smoothing (width σ, reflected at 0 and 1) of the residuals ``f - y`` and of unit weights at ``f``.

    The data are put on relplot's grid once per grid size (``max(2000, round(20/σ)) // 2 + 1`` nodes: the same
    1001 nodes for every σ ≥ 0.01), so the bandwidth search convolves small grids instead of re-reading N points
    at every step; the numbers are those of re-gridding each time.
    """

    def __init__(self, f: NDArray[np.float64], y: NDArray[np.float64]):
        self.f, self.r = f, f - y
        self._spectra: dict[int, tuple[int, int, NDArray]] = {}
        self._ece: dict[float, float] = {}  # by σ: the search ends on a σ it has evaluated already

    def _grid_spectra(self, points: int) -> tuple[int, int, NDArray]:
        """(FFT size, length, spectra) of the residual and unit-weight grids, reflected at both ends."""
        if points not in self._spectra:
            grids = (_to_grid(self.f, self.r, points), _to_grid(self.f, np.ones_like(self.f), points))
            extended = [np.concatenate([g[::-1][:-1], g, g[::-1][1:]]) for g in grids]
            n = _fft_size(extended[0].shape[0], points)
            self._spectra[points] = (n, extended[0].shape[0], np.fft.rfft(np.stack(extended), n))
        return self._spectra[points]

    def ece_at(self, sigma: float) -> float:
        if sigma not in self._ece:
            self._ece[sigma] = self._ece_at(sigma)
        return self._ece[sigma]

    def _ece_at(self, sigma: float) -> float:
        points = max(2000, round(20 / sigma)) // 2 + 1
        centred, idx, resid = _mesh(max(round(10 / sigma), _MESH_POINTS), points)
        kernel = np.exp(-centred / (2.0 * sigma**2)) / (np.sqrt(2.0 * np.pi) * sigma)
        half = points // 2
        n, length, spectra = self._grid_spectra(points)
        smoothed = _convolve_valid(spectra, length, kernel, n)[:, half : half + points]
        # Linear interpolation of node i/(points-1) -> smoothed[:, i] at ``at`` (relplot's ``interpolate``).
        residual, density = smoothed[:, idx] * (1.0 - resid) + smoothed[:, idx + 1] * resid
        density = density + _DENSITY_EPS
        return float(np.sum(np.abs(residual / density) * density) / np.sum(density))


def _smooth_ece_at(f: NDArray[np.float64], y: NDArray[np.float64], sigma: float) -> float:
    return _Smoother(f, y).ece_at(sigma)


def _smooth_ece(f: NDArray[np.float64], y: NDArray[np.float64], eps: float = 1e-3) -> tuple[float, float]:
    """(smECE, σ*) of confidences ``f`` and outcomes ``y`` (relplot's bandwidth search)."""
    sm = _Smoother(f, y)

    def small_enough(sigma: float) -> bool:
        return sigma < eps or sigma < sm.ece_at(sigma)

    sigma = 1.0
    if not small_enough(sigma):
        hi, lo = 1.0, 0.0
        for _ in range(_BISECTION_STEPS):
            mid = 0.5 * (hi + lo)
            if small_enough(mid):
                lo = mid
            else:
                hi = mid
        sigma = hi
    return sm.ece_at(sigma), sigma


def _top1_pairs(probs: ArrayLike, labels: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    f, y = checked_top1(probs, labels)
    return np.clip(f, 0.0, 1.0), y


def smooth_ece(probs: ArrayLike, labels: ArrayLike) -> float:
    r"""Smooth ECE of the top-1 confidence (Błasiok & Nakkiran 2023) with the self-consistent bandwidth.

    Parameters
    ----------
    probs : ndarray of shape (n_samples, n_classes), rows summing to 1
    labels : ndarray of shape (n_samples,), integers in ``[0, n_classes)``

    Returns
    -------
    float in ``[0, 1]``; lower is better.

    Notes
    -----
    With confidences :math:`f_i = \max_c p_{ic}`, outcomes :math:`y_i = [\hat y_i = y_i]` and a Gaussian kernel
    :math:`K_\sigma` reflected at the ends of [0, 1],

    .. math:: \hat r_\sigma(t) = \frac{\sum_i K_\sigma(t, f_i)(f_i - y_i)}{\sum_i K_\sigma(t, f_i)}, \qquad
              \mathrm{smECE}_\sigma = \int |\hat r_\sigma(t)|\,\hat\delta_\sigma(t)\,dt,

    and smECE is :math:`\mathrm{smECE}_{\sigma^*}` at the fixed point :math:`\mathrm{smECE}_{\sigma^*} = \sigma^*`.
    The discretisation is relplot's (module docstring), so the value equals ``relplot.smECE(f, y)``.

    References
    ----------
    .. [1] Błasiok & Nakkiran (2023), Smooth ECE: Principled Reliability Diagrams via Kernel Smoothing, ICLR 2024.

    Examples
    --------
    >>> import numpy as np
    >>> p = np.array([[0.5, 0.5]] * 4)  # predicts 0.5 and is right half of the time: calibrated
    >>> smooth_ece(p, np.array([0, 1, 0, 1])) < 1e-3
    True
    """
    return _smooth_ece(*_top1_pairs(probs, labels))[0]


def smooth_ece_at(probs: ArrayLike, labels: ArrayLike, *, sigma: float) -> float:
    """Smooth ECE at a fixed bandwidth ``sigma`` in (0, 1] (relplot's ``smECE_sigma``)."""
    s = float(sigma)
    if not 0.0 < s <= 1.0:
        raise ValueError(f"sigma must lie in (0, 1], got {sigma!r}")
    return _smooth_ece_at(*_top1_pairs(probs, labels), s)
