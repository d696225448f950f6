# SPDX-License-Identifier: MIT
"""Input checks shared by every public metric (and by the archive reader).

A public function validates once and then calls a private kernel that trusts its input. The checks here never
fix anything: they raise ``TypeError`` for a wrong dtype and ``ValueError`` for a wrong shape or value, and the
message names the argument, the expectation, what was found and where.

Tolerance for probability rows (the one rule ubench uses everywhere, archive reader included)::

    |sum_c p_ic - 1| <= 1e-4 + C * 2**-23

i.e. a fixed 1e-4 plus the float32 rounding a softmax over ``C`` classes can accumulate. float64 input gets the
same tolerance: archives often hold float32 softmax outputs cast to float64.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..float_bits import in_unit_interval, unit_interval_bits

__all__ = [
    "UndefinedMetricError",
    "simplex_tolerance",
    "check_probs",
    "check_member_probs",
    "check_member_probs_mean",
    "check_logits",
    "check_labels",
    "check_n_samples",
    "check_scores",
    "check_binary_labels",
    "first_bad_simplex_row",
]


class UndefinedMetricError(ValueError):
    """A metric is mathematically undefined for this input (e.g. AUROC with one class present)."""


_FLOAT32_EPS = float(np.finfo(np.float32).eps)


def simplex_tolerance(n_classes: int) -> float:
    """Absolute tolerance on ``|row sum - 1|`` for probability rows over ``n_classes`` classes."""
    return 1e-4 + n_classes * _FLOAT32_EPS


def _as_float_array(x: ArrayLike, name: str) -> NDArray[np.floating]:
    arr = np.asarray(x)
    if arr.dtype not in (np.float32, np.float64):
        raise TypeError(f"{name} must be float32 or float64; found dtype {arr.dtype}")
    return arr


def _first_index(mask: NDArray[np.bool_]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(mask)), mask.shape))


def _fmt_index(idx: tuple[int, ...]) -> str:
    return str(idx[0]) if len(idx) == 1 else str(idx)


def _finite_min_max(arr: NDArray, name: str) -> tuple[float, float]:
    """(min, max) of a non-empty float array, raising unless every element is finite."""
    # Cheap pass first: min and max propagate NaN and expose +-inf, and are SIMD reductions (several times faster
    # than a float64 sum); the element-wise scan only runs to build the message.
    lo, hi = arr.min(), arr.max()
    if np.isfinite(lo) and np.isfinite(hi):
        return float(lo), float(hi)
    bad = ~np.isfinite(arr)
    idx = _first_index(bad)
    raise ValueError(f"{name} must be finite; found {arr[idx]} at index {_fmt_index(idx)}")


def _check_finite(arr: NDArray, name: str) -> None:
    _finite_min_max(arr, name)


def first_bad_simplex_row(arr: NDArray[np.floating], tol: float) -> int | None:
    """Index (along the flattened leading axes) of the first row not summing to 1 within ``tol``, or None."""
    sums = arr.reshape(-1, arr.shape[-1]).sum(axis=-1, dtype=np.float64)
    bad = np.abs(sums - 1.0) > tol
    if not bad.any():
        return None
    return int(np.argmax(bad))


def _first_bad_simplex_row_nonneg(arr: NDArray[np.floating], tol: float) -> int | None:
    """Same answer as :func:`first_bad_simplex_row` for arrays with no negative entry, but fast.

    Screens with row sums in the input's precision (``einsum``: SIMD, no float64 cast), then recomputes in
    float64 (exactly as :func:`first_bad_simplex_row` does) only the rows the screen cannot clear. For
    non-negative terms any summation order errs by at most ``(C - 1) * u * sum`` (``u`` the unit roundoff), so a
    row cleared with that margin passes the float64 check too. (Not a BLAS product: OpenBLAS worker threads
    keep spinning after a call and slow the metric kernel that runs next on a small machine.)
    """
    rows = arr.reshape(-1, arr.shape[-1])
    c = rows.shape[1]
    approx = np.einsum("ij->i", rows)
    u = float(np.finfo(rows.dtype).eps)  # 2u: generous
    margin = c * u * np.maximum(np.abs(approx), 1.0) + c * float(np.finfo(np.float64).eps)
    unsure = np.flatnonzero(~(np.abs(approx - 1.0) <= tol - margin))
    if unsure.size == 0:
        return None
    sums = rows[unsure].sum(axis=-1, dtype=np.float64)
    bad = np.abs(sums - 1.0) > tol
    if not bad.any():
        return None
    return int(unsure[int(np.argmax(bad))])


def _check_simplex(
    arr: NDArray[np.floating], name: str, lo: float | None = None, hi: float | None = None
) -> None:
    if lo is None or hi is None:
        lo, hi = arr.min(), arr.max()
    if lo < 0 or hi > 1:
        bad = (arr < 0) | (arr > 1)
        idx = _first_index(bad)
        raise ValueError(
            f"{name} must be probabilities in [0, 1]; found {arr[idx]} at index {_fmt_index(idx)}"
            " (were logits passed as probabilities?)"
        )
    tol = simplex_tolerance(arr.shape[-1])
    row = _first_bad_simplex_row_nonneg(arr, tol)
    if row is not None:
        idx = np.unravel_index(row, arr.shape[:-1])
        total = float(arr[idx].sum(dtype=np.float64))
        raise ValueError(
            f"{name} rows must sum to 1 (tol {tol:.1e}); row {_fmt_index(tuple(int(i) for i in idx))}"
            f" sums to {total:.6g}"
        )


def _check_probs_values(arr: NDArray[np.floating], name: str) -> None:
    """The value checks of :func:`check_probs` / :func:`check_member_probs` on the whole array, in their order."""
    lo, hi = _finite_min_max(arr, name)
    _check_simplex(arr, name, lo, hi)


#: Elements per block of the cache-blocked value scan (float32: 256 KiB, inside a core's L2 cache).
_SCAN_BLOCK_ELEMS = 1 << 16
#: Elements per member block of the validated member mean: fewer, larger blocks (the float64 block of the mean
#: is then 2 MiB, in L3) measured best: CPU ms at M = 50, N = 10,000, C = 100 float32 on the 2-core EPYC
#: (L2 1 MiB): 1 << 16: 34, 1 << 17: 31, 1 << 18: 30, 1 << 19: 30, 1 << 20: 35.
_MEAN_BLOCK_ELEMS = 1 << 18


def _sums_room(dtype: np.dtype, n_classes: int, tol: float) -> float:
    """How far a row sum in ``dtype`` may stray from 1 and still surely be within ``tol`` once rounding of the
    sum itself is allowed for (the margin :func:`_first_bad_simplex_row_nonneg` proves sufficient)."""
    return tol - (2.0 * n_classes * float(np.finfo(dtype).eps) + n_classes * float(np.finfo(np.float64).eps))


def _sums_clear(block: NDArray[np.floating], room: float) -> bool:
    """True only if every row of a (k, C) block with entries in [0, 1] surely sums to 1 within the tolerance
    whose rounding-adjusted ``room`` is given (:func:`_sums_room`); row sums in the input's precision."""
    approx = np.einsum("ij->i", block)
    return bool(approx.min() - 1.0 >= -room and approx.max() - 1.0 <= room)


class _BlockedProbsCheck:
    """Value checks of a validated-shape probs array, run block by block inside a kernel's own pass.

    ``clear(block)`` checks a block cheaply; at the first block the cheap test cannot clear it runs the
    whole-array reference checks once (raising exactly what :func:`check_probs` raises, for the first offending
    element of the whole array) and, if they pass, trusts every later block. ``clear_sums(block, in_range)`` is
    the same for a kernel that has itself established that every entry of the block is finite and in [0, 1]
    (``in_range`` False: it could not).
    """

    def __init__(self, arr: NDArray[np.floating], name: str) -> None:
        self.arr, self.name = arr, name
        self.tol = simplex_tolerance(arr.shape[-1])
        self.room = _sums_room(arr.dtype, arr.shape[-1], self.tol)
        self.done = False

    def _reference(self) -> None:
        _check_probs_values(self.arr, self.name)
        self.done = True

    def clear(self, block: NDArray[np.floating], hi=None) -> None:
        """``hi`` (the block's max, when the caller has it) is not needed: one pass over the bits checks both
        ends."""
        if not self.done and not (in_unit_interval(block) and _sums_clear(block, self.room)):
            self._reference()

    def clear_sums(self, block: NDArray[np.floating], in_range: bool) -> None:
        if not self.done and not (in_range and _sums_clear(block, self.room)):
            self._reference()


def _scan_probs_values(arr: NDArray[np.floating], name: str) -> None:
    """The value checks, read from memory once in cache-sized row blocks (same errors as the reference)."""
    rows = arr.reshape(-1, arr.shape[-1])
    step = max(1, _SCAN_BLOCK_ELEMS // rows.shape[1])
    check = _BlockedProbsCheck(arr, name)
    for start in range(0, rows.shape[0], step):
        check.clear(rows[start : start + step])
        if check.done:
            return


def _check_probs_shape(probs: ArrayLike, name: str = "probs") -> NDArray[np.floating]:
    """The dtype and shape checks of :func:`check_probs`; values unchecked."""
    arr = _as_float_array(probs, name)
    if arr.ndim != 2:
        raise ValueError(f"{name} must have shape (n_samples, n_classes); found ndim {arr.ndim}, shape {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError(f"{name} is empty: it has 0 samples")
    if arr.shape[1] < 2:
        raise ValueError(f"{name} must have at least 2 classes; found {arr.shape[1]}")
    return arr


def _check_member_probs_shape(member_probs: ArrayLike, name: str = "member_probs") -> NDArray[np.floating]:
    """The dtype and shape checks of :func:`check_member_probs`; values unchecked."""
    arr = _as_float_array(member_probs, name)
    if arr.ndim != 3:
        raise ValueError(
            f"{name} must have shape (n_members, n_samples, n_classes); found ndim {arr.ndim}, shape {arr.shape}"
        )
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{name} is empty: shape {arr.shape}")
    if arr.shape[2] < 2:
        raise ValueError(f"{name} must have at least 2 classes; found {arr.shape[2]}")
    return arr


def check_probs(probs: ArrayLike, name: str = "probs") -> NDArray[np.floating]:
    """Validate ``probs`` of shape (n_samples, n_classes): float32/64, finite, rows on the simplex."""
    arr = _check_probs_shape(probs, name)
    _scan_probs_values(arr, name)
    return arr


def check_member_probs(member_probs: ArrayLike, name: str = "member_probs") -> NDArray[np.floating]:
    """Validate ``member_probs`` of shape (n_members, n_samples, n_classes)."""
    arr = _check_member_probs_shape(member_probs, name)
    _scan_probs_values(arr, name)
    return arr


def check_member_probs_mean(
    member_probs: ArrayLike, name: str = "member_probs"
) -> tuple[NDArray[np.floating], NDArray[np.float64]]:
    """:func:`check_member_probs` and the member mean (N, C) in float64, in one read of the stack.

    Row blocks of every member are checked (``_BlockedProbsCheck``: the same errors as the reference checks) and
    added into a float64 block of the mean, member after member (the order and rounding of
    ``np.add.reduce(axis=0, dtype=float64)``), then divided by M while still in cache. Single-threaded: row
    ranges in threads measured slower on the 2-core bench machine. Returns (member_probs, mean).
    """
    arr = _check_member_probs_shape(member_probs, name)
    m, n, c = arr.shape
    mean = np.empty((n, c))
    check = _BlockedProbsCheck(arr, name)
    # The cheap checks of ``check.clear`` inlined (one call per member block adds up: 4,000 blocks at M = 50,
    # N = 10,000, C = 100): the bits' unsigned max (``float_bits.in_unit_interval``) and the row sums' range.
    bits, one = unit_interval_bits(arr)
    step = max(1, _MEAN_BLOCK_ELEMS // c)
    sums = np.empty(min(step, n), dtype=arr.dtype)
    for a in range(0, n, step):
        b = min(a + step, n)
        acc, row_sums = mean[a:b], sums[: b - a]
        for j in range(m):
            block = arr[j, a:b]
            if not check.done:
                np.einsum("ij->i", block, out=row_sums)
                if not (bits is not None and int(bits[j, a:b].max()) <= one
                        and row_sums.min() - 1.0 >= -check.room and row_sums.max() - 1.0 <= check.room):
                    check.clear(block)  # the reference checks decide (raising for the first bad element)
            if j:
                np.add(acc, block, out=acc)
            else:
                acc[...] = block
        acc /= m  # while the block is in cache (the bits of dividing the whole sum)
    return arr, mean


def check_logits(logits: ArrayLike, name: str = "logits", *, finite: bool = True) -> NDArray[np.floating]:
    """Validate ``logits`` of shape (n_samples, n_classes): float32/64 and (unless ``finite=False``, for a caller
    whose own pass exposes any non-finite entry and then calls this again) finite."""
    arr = _as_float_array(logits, name)
    if arr.ndim != 2:
        raise ValueError(f"{name} must have shape (n_samples, n_classes); found ndim {arr.ndim}, shape {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError(f"{name} is empty: it has 0 samples")
    if arr.shape[1] == 0:
        raise ValueError(f"{name} is empty: it has 0 classes")
    if finite:
        _check_finite(arr, name)
    return arr


def check_labels(labels: ArrayLike, n_classes: int, name: str = "labels") -> NDArray[np.integer]:
    """Validate ``labels`` of shape (n_samples,): integer dtype, values in ``[0, n_classes)``."""
    arr = np.asarray(labels)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must have an integer dtype; found dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"{name} must have shape (n_samples,); found shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty: it has 0 samples")
    bad = (arr < 0) | (arr >= n_classes)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{name} must be in [0, {n_classes}); found {arr[i]} at index {i}")
    return arr


def check_binary_labels(labels: ArrayLike, name: str = "labels") -> NDArray[np.integer]:
    """Validate 0/1 (or boolean) ``labels`` of shape (n_samples,)."""
    arr = np.asarray(labels)
    if arr.dtype == np.bool_:
        arr = arr.astype(np.int8)
    return check_labels(arr, 2, name)


def check_scores(scores: ArrayLike, name: str = "scores") -> NDArray[np.floating]:
    """Validate ``scores`` of shape (n_samples,): float and finite."""
    arr = _as_float_array(scores, name)
    if arr.ndim != 1:
        raise ValueError(f"{name} must have shape (n_samples,); found shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty: it has 0 samples")
    _check_finite(arr, name)
    return arr


def check_n_samples(a: NDArray, a_name: str, b: NDArray, b_name: str, *, a_axis: int = 0, b_axis: int = 0) -> None:
    """Raise unless ``a`` and ``b`` have the same number of samples along the given axes."""
    if a.shape[a_axis] != b.shape[b_axis]:
        raise ValueError(f"{a_name} has {a.shape[a_axis]} samples but {b_name} has {b.shape[b_axis]}")
