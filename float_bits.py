# SPDX-License-Identifier: MIT
"""Range checks on the bits of IEEE floats, shared by the metrics' input checks and the archive validator (NumPy
only: both layers import it; neither imports the other)."""

from __future__ import annotations

import numpy as np

__all__ = ["in_unit_interval", "unit_interval_bits"]

#: The unsigned integer type of each float type's bits.
_BITS = {np.dtype(np.float32): np.uint32, np.dtype(np.float64): np.uint64}


def unit_interval_bits(arr: np.ndarray) -> tuple[np.ndarray | None, int]:
    """(bits, one): ``arr`` viewed as unsigned integers and the bits of 1.0, for a caller that tests many blocks
    of one array as :func:`in_unit_interval` does (``int(bits[block].max()) <= one``); (None, 0) where that
    function would answer False for every block (another dtype, non-native byte order)."""
    kind = _BITS.get(arr.dtype)
    if kind is None or not arr.dtype.isnative:
        return None, 0
    return arr.view(kind), int(arr.dtype.type(1.0).view(kind))


def in_unit_interval(block: np.ndarray) -> bool:
    """True only if every entry of ``block`` is finite and in [+0, 1], from one unsigned max over its bits.

    As unsigned integers, the IEEE bits of such floats are at most those of 1.0, and a set sign bit, NaN or inf
    is above: one integer reduction instead of a min, a max and a finiteness test. False also for -0.0, other
    dtypes and non-native byte order; callers then run their full checks, which accept -0.0.
    """
    kind = _BITS.get(block.dtype)
    if kind is None or not block.dtype.isnative or block.size == 0:
        return False
    return int(block.view(kind).max()) <= int(block.dtype.type(1.0).view(kind))
