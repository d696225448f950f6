# SPDX-License-Identifier: MIT
"""The top of every row's ranking without sorting whole rows: the kernels behind APS/RAPS and top-k.

A row of probabilities is ranked by decreasing probability (``np.argsort(-p, kind="stable")``, ties by class
index; tied entries are equal, so no running sum depends on their order). Many metrics need only the first few
entries of that ranking: the APS score of the true label sums the classes ranked at or above it, a conformal set
stops where the running sum passes its threshold, top-k needs k entries. :func:`ranked_prefix` ranks only the
entries a mask keeps, where the mask is closed upwards (an entry ranked above a kept one is kept too), so the
kept entries are exactly the first ``counts[i]`` entries of row i's full ranking, in the same order: their
running sums are those of the full sort bit for bit (``np.cumsum`` adds sequentially either way).

Rows are padded to the longest kept prefix of their group and sorted together; groups of rows with prefixes of
similar length (up to 4, 16, 64, 128, 256, 512 entries, then whole rows) keep the padding small.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = ["row_blocks", "RankedPrefix", "ranked_prefix", "BLOCK_ENTRIES"]

#: Entries per row block of the streaming kernels: a few float64 temporaries of this size stay in L2.
BLOCK_ENTRIES = 1 << 16

_GROUP_LIMITS = (4, 16, 64, 128, 256, 512)


def row_blocks(n_rows: int, n_cols: int, entries: int = BLOCK_ENTRIES) -> Iterator[tuple[int, int]]:
    """(start, stop) of consecutive row blocks of about ``entries`` entries each (at least one row)."""
    step = max(1, entries // max(1, n_cols))
    for start in range(0, n_rows, step):
        yield start, min(start + step, n_rows)


@dataclass(frozen=True)
class RankedPrefix:
    """The kept entries of some rows in rank order, padded: ``rows`` (k,) row indices into the block,
    ``values`` (k, K) float64 (decreasing along a row; padding is 0), ``cum`` (k, K) their running sums
    (``np.cumsum``; padding repeats the last sum) and ``counts`` (k,) the number of kept entries of each row."""

    rows: NDArray[np.intp]
    values: NDArray[np.float64]
    cum: NDArray[np.float64]
    counts: NDArray[np.intp]

    @property
    def valid(self) -> NDArray[np.bool_]:
        """(k, K): which entries are kept entries (not padding)."""
        return np.arange(self.values.shape[1])[None, :] < self.counts[:, None]

    @property
    def last(self) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
        """Index of every row's last kept entry (for fancy indexing ``values[g.last]``)."""
        return np.arange(self.rows.shape[0]), self.counts - 1


def _ranges(starts: NDArray[np.intp], lengths: NDArray[np.intp]) -> NDArray[np.intp]:
    """The concatenation of ``arange(s, s + l)`` over ``zip(starts, lengths)``, without a Python loop."""
    offsets = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.repeat(starts, lengths) + offsets


def _padded(p: NDArray, flat: NDArray[np.intp], counts: NDArray[np.intp], rows: NDArray[np.intp]) -> RankedPrefix:
    """One group: ``rows`` with their kept entries ``flat`` (flat indices into ``p``, row-major, ``counts[i]``
    of them for ``rows[i]``), ranked (see :func:`ranked_prefix`)."""
    width = int(counts.max())
    r = np.repeat(np.arange(rows.shape[0]), counts)
    pos = _ranges(np.zeros_like(counts), counts)
    neg = np.full((rows.shape[0], width), np.inf)  # padding sorts last
    neg[r, pos] = -p.ravel()[flat]
    # Only the values matter: tied entries are equal, so their order changes no running sum, and np.sort
    # (unstable, vectorised) is an order of magnitude faster than a stable argsort.
    neg.sort(axis=1)
    values = np.negative(neg, out=neg)
    values[np.arange(width)[None, :] >= counts[:, None]] = 0.0
    return RankedPrefix(rows=rows, values=values, cum=np.cumsum(values, axis=1), counts=counts)


def ranked_prefix(p: NDArray[np.float64], keep: NDArray[np.bool_]) -> tuple[list[RankedPrefix], NDArray[np.intp]]:
    """The kept entries of every row of ``p`` (k, C) in rank order, in groups of rows of similar prefix length,
    and every row's number of kept entries (k,).

    ``keep`` (k, C) must be closed upwards in each row's ranking (decreasing probability): then row i's kept
    entries are the first ``keep[i].sum()`` of its full ranking (ties at the end of the prefix are equal values,
    so which of them is kept changes nothing), and ``cum`` equals the running sum of the whole sorted row there,
    bit for bit. Rows that keep nothing are left out of the groups.
    """
    k, c = p.shape
    flat = np.flatnonzero(keep)  # row-major; much faster than the 2-D np.nonzero, and counts come with it
    counts = np.bincount(flat // c, minlength=k)
    ends = np.cumsum(counts)
    out = []
    lo = 0
    for hi in (*_GROUP_LIMITS, c):
        rows = np.flatnonzero((counts > lo) & (counts <= hi))
        if rows.size:
            take = _ranges(ends[rows] - counts[rows], counts[rows])
            out.append(_padded(p, flat[take], counts[rows], rows))
        lo = hi
        if hi >= c:
            break
    return out, counts
