# SPDX-License-Identifier: MIT
"""Deep Ensemble Equivalent (DEE): the size of a deep ensemble whose calibrated log-likelihood matches a method's.

The reference is a deep ensemble's CLL-against-members curve (:func:`ubench.metrics.protocol.member_curves` or
:func:`dee_reference`): ``CLL_mean(k)`` and ``CLL_std(k)`` for k = 1..K, linearly interpolated between integers.
Every value is searched on its own, from k = 1 upwards; nothing is carried between points.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .protocol import MemberCurves, member_curves
from .temperature import DEFAULT_EPS, DEFAULT_TEMPERATURE_BOUNDS

__all__ = ["DeeScore", "DeeCurve", "dee_score", "dee_curve", "dee_reference"]


@dataclass(frozen=True)
class DeeScore:
    """DEE of one CLL value, with its lower/upper bounds.

    ``dee`` is in ``[1, K]``. ``beyond_reference`` is True when the value lies above every point of the reference
    curve (``CLL_mean(k) < l`` for all k): ``dee`` is then ``K`` and means "more than K"; likewise
    ``lower_beyond``/``upper_beyond`` for the bounds. ``below_reference`` is True when the value lies below the
    reference's first point (``l < CLL_mean(1)``: worse than one member): ``dee`` is then ``1`` and means "less
    than 1", never "as good as one member"; likewise ``lower_below``/``upper_below``. Reports show such a DEE as
    ``null`` (``scoring/dee.py``).
    """

    dee: float
    lower: float
    upper: float
    beyond_reference: bool
    lower_beyond: bool
    upper_beyond: bool
    below_reference: bool
    lower_below: bool
    upper_below: bool

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class DeeCurve:
    """DEE of every point of a method's CLL-against-members curve; arrays of shape (n_points,)."""

    n_members: NDArray[np.int64]
    dee: NDArray[np.float64]
    lower: NDArray[np.float64]
    upper: NDArray[np.float64]
    beyond_reference: NDArray[np.bool_]
    lower_beyond: NDArray[np.bool_]
    upper_beyond: NDArray[np.bool_]
    below_reference: NDArray[np.bool_]
    lower_below: NDArray[np.bool_]
    upper_below: NDArray[np.bool_]

    def to_dict(self) -> dict:
        return {k: getattr(self, k).tolist() for k in self.__dataclass_fields__}


def _first_crossing(curve: NDArray[np.float64], level: float) -> tuple[float, bool, bool]:
    """``(k, beyond, below)``: the smallest real k in [1, K] with the linear interpolation of ``curve`` (at
    k = 1..K) >= level; ``beyond`` when no point reaches the level (k = K), ``below`` when the level is under the
    first point (k = 1, read "less than 1")."""
    if curve[0] >= level:
        return 1.0, False, bool(curve[0] > level)
    above = np.flatnonzero(curve >= level)
    if above.size == 0:
        return float(curve.shape[0]), True, False
    j = int(above[0])  # curve[j - 1] < level <= curve[j]; sizes j and j + 1
    lo, hi = curve[j - 1], curve[j]
    return float(j + (level - lo) / (hi - lo)), False, False


def _check_reference(mean: ArrayLike, std: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    mean = np.asarray(mean, dtype=np.float64)
    std = np.asarray(std, dtype=np.float64)
    if mean.ndim != 1 or mean.size == 0:
        raise ValueError(f"reference_cll_mean must have shape (n_members,); found shape {mean.shape}")
    if std.shape != mean.shape:
        raise ValueError(f"reference_cll_std must have the shape of reference_cll_mean {mean.shape}; found {std.shape}")
    for arr, name in ((mean, "reference_cll_mean"), (std, "reference_cll_std")):
        if not np.all(np.isfinite(arr)):
            i = int(np.argmax(~np.isfinite(arr)))
            raise ValueError(f"{name} must be finite; found {arr[i]} at index {i}")
    if np.any(std < 0):
        i = int(np.argmax(std < 0))
        raise ValueError(f"reference_cll_std must be >= 0; found {std[i]} at index {i}")
    return mean, std


def _dee(level: float, mean: NDArray, std: NDArray) -> DeeScore:
    d, b, w = _first_crossing(mean, level)
    lo, lb, lw = _first_crossing(mean + std, level)
    up, ub, uw = _first_crossing(mean - std, level)
    return DeeScore(dee=d, lower=lo, upper=up, beyond_reference=b, lower_beyond=lb, upper_beyond=ub,
                    below_reference=w, lower_below=lw, upper_below=uw)


def dee_score(cll: float, reference_cll_mean: ArrayLike, reference_cll_std: ArrayLike) -> DeeScore:
    r"""Deep Ensemble Equivalent of one calibrated log-likelihood value.

    Parameters
    ----------
    cll : float
        The method's CLL (higher is better), e.g. ``cross_validated_calibration(...).cll``.
    reference_cll_mean, reference_cll_std : ndarray of shape (K,)
        The deep-ensemble reference: mean and std over member orders of the CLL of the first k members.

    Returns
    -------
    DeeScore
        ``dee``, ``lower``, ``upper`` in ``[1, K]`` with ``lower <= dee <= upper`` for a monotone reference;
        flags when a value lies beyond the reference (``dee = K`` then reads "more than K") or below its first
        point (``dee = 1`` then reads "less than 1": worse than one deep-ensemble member).

    Raises
    ------
    ValueError
        Non-finite ``cll`` or reference, mismatched shapes, negative std.

    Notes
    -----
    .. math:: \mathrm{DEE}(l) = \min\{k \in [1, K] : \mathrm{CLL}_{\mathrm{mean}}(k) \ge l\}, \qquad
              \mathrm{DEE}_{\mathrm{lower/upper}}(l) = \min\{k : \mathrm{CLL}_{\mathrm{mean}}(k) \pm
              \mathrm{CLL}_{\mathrm{std}}(k) \ge l\}

    with the CLL curves linearly interpolated between integer k; a value at ``CLL(1)`` gives 1, a value below it
    gives 1 with ``below_reference`` set.

    Convention: the Pitfalls paper (Eqs. 4-5) writes the bounds with ``mean -/+ std`` for upper/lower; ubench
    does the same (the optimistic curve ``mean + std`` is reached sooner, so it gives the lower bound). The
    notebook's ``dee`` floors a value below ``CLL(1)`` at 1 without saying so, which reads as "as good as one
    member"; ubench returns the same 1 but flags it (``below_reference``), as it flags values beyond the
    reference instead of capping them silently, and its reports show such a DEE as ``null`` ("< 1"). The interpolation equals
    the Pitfalls DEE notebook's ``dee`` (pinned in ``tests/metrics/test_protocol.py``). With the reference of
    :func:`dee_reference` the std is over member orders with the CV halvings redrawn per order (ddof=1), as over
    the code's 5 tries, so the band is not empty at k = K. The notebook walks the reference once along a
    method's curve (a later point never maps below an earlier one); ubench searches each point on its own, which
    is the same for a non-decreasing method curve.

    References
    ----------
    .. [1] A. Ashukha et al. (2020), Pitfalls of In-Domain Uncertainty Estimation and Ensembling in Deep
       Learning, ICLR, Sec. 3.1.

    Examples
    --------
    >>> s = dee_score(-0.75, [-1.0, -0.8, -0.7], [0.0, 0.0, 0.0])
    >>> s.dee, s.beyond_reference
    (2.5, False)
    >>> s = dee_score(-1.2, [-1.0, -0.8, -0.7], [0.0, 0.0, 0.0])
    >>> s.dee, s.below_reference
    (1.0, True)
    """
    cll = float(cll)
    if not np.isfinite(cll):
        raise ValueError(f"cll must be finite; found {cll}")
    mean, std = _check_reference(reference_cll_mean, reference_cll_std)
    return _dee(cll, mean, std)


def dee_curve(method_cll: ArrayLike, reference_cll_mean: ArrayLike, reference_cll_std: ArrayLike) -> DeeCurve:
    r"""DEE of each point of a method's CLL-against-members curve (each point searched on its own).

    Parameters
    ----------
    method_cll : ndarray of shape (n_points,)
        The method's CLL for 1..n_points members (e.g. ``member_curves(...).cll_mean``).
    reference_cll_mean, reference_cll_std : ndarray of shape (K,)

    Returns
    -------
    DeeCurve
        ``n_members`` = 1..n_points and, per point, the fields of :class:`DeeScore` as arrays.

    Notes
    -----
    Point i is :func:`dee_score` of ``method_cll[i]``; see it for the formula and conventions.

    Examples
    --------
    >>> c = dee_curve([-1.0, -0.75, -0.5], [-1.0, -0.8, -0.7], [0.0, 0.0, 0.0])
    >>> c.dee.tolist(), c.beyond_reference.tolist()
    ([1.0, 2.5, 3.0], [False, False, True])
    """
    values = np.asarray(method_cll, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"method_cll must have shape (n_points,); found shape {values.shape}")
    if not np.all(np.isfinite(values)):
        i = int(np.argmax(~np.isfinite(values)))
        raise ValueError(f"method_cll must be finite; found {values[i]} at index {i}")
    mean, std = _check_reference(reference_cll_mean, reference_cll_std)
    scores = [_dee(float(v), mean, std) for v in values]
    return DeeCurve(
        n_members=np.arange(1, values.size + 1, dtype=np.int64),
        dee=np.array([s.dee for s in scores]),
        lower=np.array([s.lower for s in scores]),
        upper=np.array([s.upper for s in scores]),
        beyond_reference=np.array([s.beyond_reference for s in scores], dtype=bool),
        lower_beyond=np.array([s.lower_beyond for s in scores], dtype=bool),
        upper_beyond=np.array([s.upper_beyond for s in scores], dtype=bool),
        below_reference=np.array([s.below_reference for s in scores], dtype=bool),
        lower_below=np.array([s.lower_below for s in scores], dtype=bool),
        upper_below=np.array([s.upper_below for s in scores], dtype=bool),
    )


def dee_reference(
    member_probs: ArrayLike, labels: ArrayLike, *, n_orders: int = 5, seed: int = 0, n_repeats: int = 5,
    eps: float = DEFAULT_EPS, bounds: tuple[float, float] = DEFAULT_TEMPERATURE_BOUNDS,
) -> MemberCurves:
    r"""The DEE reference curve of a deep ensemble: :func:`member_curves` with ``placement="post"``.

    Parameters
    ----------
    member_probs : ndarray of shape (K, n_samples, n_classes)
        Independently trained networks, rows on the simplex.
    labels : ndarray of shape (n_samples,)
    n_orders, seed, n_repeats, eps, bounds
        As :func:`ubench.metrics.protocol.member_curves`.

    Returns
    -------
    MemberCurves
        Use ``.cll_mean`` and ``.cll_std`` as the reference of :func:`dee_score` / :func:`dee_curve`.

    Notes
    -----
    Prefix k+1 is prefix k plus one member (a running float64 sum); each prefix's CLL is the test-time
    cross-validated one, which is where the time goes. As in the Pitfalls code's tries, each order draws its
    own CV halvings (seeded), so ``cll_std`` (ddof=1 over orders) includes the halving noise and is not 0 at
    k = K: the paper's bands.

    References
    ----------
    .. [1] A. Ashukha et al. (2020), Pitfalls of In-Domain Uncertainty Estimation and Ensembling in Deep
       Learning, ICLR, Sec. 3.1.

    Examples
    --------
    >>> import numpy as np
    >>> mp = np.array([[[0.9, 0.1], [0.2, 0.8]], [[0.6, 0.4], [0.4, 0.6]]])
    >>> dee_reference(mp, np.array([0, 1]), n_orders=2, n_repeats=1).cll_mean.shape
    (2,)
    """
    return member_curves(member_probs, labels, n_orders=n_orders, seed=seed, placement="post",
                         n_repeats=n_repeats, eps=eps, bounds=bounds)
