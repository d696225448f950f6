# SPDX-License-Identifier: MIT
"""A split's ensemble mean recomputed from its archive block by block: for a split whose (N, C) float64 mean does
not fit the memory limit (issue #29 item 3).

:class:`ArchiveMean` stands in for ``SplitArrays.mean_probs``. Asked for rows ``[a:b]`` (or an index array of
rows), it reads those rows of every member from HDF5 (member by member, along whole chunks), checks them as the
first read did, renormalises them (``RENORMALISE_ABOVE``) and sums the members in float64 in member order, then
divides by M: the same operations as :class:`~ubench.metrics.report_sections.SplitAccumulator`, so every row is
the in-memory mean's row to the last bit and every metric is the in-memory number. The report's kernels read
``probs[a:b]`` in passes over the rows; each pass re-reads the split (``passes`` counts them). A few whole-row
reductions (``np.argmax``/``np.max`` along classes, the gather ``probs[rows, cols]``) are answered block by
block, and the (N,) answers the sections ask for again and again (top-1 class and confidence, one entry per row)
are kept; anything that would need the whole matrix at once (``np.asarray``) raises ``TypeError``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["ArchiveMean"]


class ArchiveMean:
    """The (N, C) float64 mean of split ``split`` of an open ``reader``, read on demand (see the module).

    ``block_bytes`` bounds the memory of one read: a quarter of it for the float64 running sum of the rows and
    the float32 block of one member (the scorer's other working blocks share the rest).
    """

    def __init__(self, reader, split: str, *, block_bytes: int):
        from ..archive_schema.scan import Scan

        self._reader, self._split = reader, split
        self._ds = reader.dataset(split, "probs")
        self.n_members, n, c = self._ds.shape
        self.shape, self.ndim, self.dtype = (n, c), 2, np.dtype(np.float64)
        rows = max(1, block_bytes // (4 * 12 * c))
        chunk = reader.chunk_rows(split)
        self._step = rows if chunk is None else max(chunk, rows // chunk * chunk)  # whole chunks per read
        self._cache: tuple[int, NDArray[np.float64]] | None = None
        self._scan = Scan(reader.header.path, reader.limits)
        self.blocks_read = 0
        # The (N,) answers of whole-row questions asked again and again by the sections (top-1 class and
        # confidence, the label's probability): kept for this split so that each costs one pass, not one per
        # metric. A gather is reused only for the same columns (compared element by element).
        self._top1: tuple[NDArray[np.intp], NDArray[np.float64]] | None = None
        self._gathers: list[tuple[NDArray[np.intp], NDArray[np.float64]]] = []

    @property
    def passes(self) -> float:
        """Reads of the whole split so far (blocks read / blocks per pass)."""
        return self.blocks_read / max(1, -(-self.shape[0] // self._step))

    def __len__(self) -> int:
        return self.shape[0]

    def _block(self, k: int) -> NDArray[np.float64]:
        """Rows ``[k * step, (k + 1) * step)`` of the mean (the last block read is kept)."""
        if self._cache is not None and self._cache[0] == k:
            return self._cache[1]
        from ..archive_schema.blocks import native
        from ..archive_schema.errors import InvalidArchiveError
        from ..archive_schema.validator import check_probs_block
        from ..metrics.report_sections import _renormalised

        a, b = k * self._step, min(self.shape[0], (k + 1) * self._step)
        path = f"/splits/{self._split}/probs"
        total = np.empty((b - a, self.shape[1]))
        for j in range(self.n_members):
            try:
                raw = native(self._ds[j : j + 1, a:b, :])
            except (OSError, RuntimeError, ValueError) as exc:
                self._reader._read_failed(self._scan, path, exc)
            # the file was checked when it was first read; a block that fails now changed under the scorer
            if not check_probs_block(self._scan, path, a, raw, member_offset=j):
                raise InvalidArchiveError(self._reader.header.path, self._scan.findings)
            rows, _ = _renormalised(raw[0], a, j)
            if j == 0:
                total[...] = rows
            else:
                np.add(total, rows, out=total)
        total /= self.n_members
        self.blocks_read += 1
        self._cache = (k, total)
        return total

    def _rows(self, a: int, b: int) -> NDArray[np.float64]:
        k0, k1 = a // self._step, (b - 1) // self._step if b > a else a // self._step
        if k0 == k1:
            start = k0 * self._step
            return self._block(k0)[a - start : b - start]
        return np.concatenate([self._rows(max(a, k * self._step), min(b, (k + 1) * self._step))
                               for k in range(k0, k1 + 1)])

    def take_rows(self, rows: NDArray[np.intp]) -> NDArray[np.float64]:
        """Rows at the indices ``rows`` (any order), reading each block they fall in once per call."""
        rows = np.asarray(rows, dtype=np.intp)
        out = np.empty((rows.shape[0], self.shape[1]))
        order = np.argsort(rows, kind="stable")
        blocks = rows[order] // self._step
        for k in np.unique(blocks):
            sel = order[blocks == k]
            out[sel] = self._block(int(k))[rows[sel] - k * self._step]
        return out

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, step = key.indices(self.shape[0])
            if step == 1:
                return self._rows(start, stop)
            return self.take_rows(np.arange(start, stop, step))
        if isinstance(key, tuple) and len(key) == 2 and not isinstance(key[0], slice):
            rows, cols = np.broadcast_arrays(np.asarray(key[0]), np.asarray(key[1]))
            return self._gather(rows, cols)
        if isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], slice):
            return self[key[0]][:, key[1]]
        if isinstance(key, np.ndarray) and key.dtype.kind in "iu" and key.ndim == 1:
            return self.take_rows(key)
        raise TypeError(f"ArchiveMean supports row slices, row index arrays and (rows, cols) gathers; found {key!r}")

    def _gather(self, rows: NDArray, cols: NDArray) -> NDArray[np.float64]:
        flat_r, flat_c = rows.ravel().astype(np.intp), cols.ravel().astype(np.intp)
        every_row = flat_r.shape[0] == self.shape[0] and np.array_equal(flat_r, np.arange(self.shape[0]))
        if every_row:  # one entry per row, in order: a top-1 confidence or a label's probability
            if self._top1 is not None and np.array_equal(flat_c, self._top1[0]):
                return self._top1[1].reshape(rows.shape)
            for cols_seen, values in self._gathers:
                if np.array_equal(flat_c, cols_seen):
                    return values.reshape(rows.shape)
        out = np.empty(flat_r.shape[0])
        blocks = flat_r // self._step
        for k in np.unique(blocks):
            sel = np.flatnonzero(blocks == k)
            out[sel] = self._block(int(k))[flat_r[sel] - k * self._step, flat_c[sel]]
        if every_row and len(self._gathers) < 4:
            self._gathers.append((flat_c.copy(), out))
        return out.reshape(rows.shape)

    def _top1_pass(self, axis) -> tuple[NDArray[np.intp], NDArray[np.float64]]:
        """(argmax, max) along classes, from one pass (then kept)."""
        if axis not in (1, -1):
            raise TypeError(f"ArchiveMean reduces along classes only (axis=1); found axis={axis!r}")
        if self._top1 is None:
            n = self.shape[0]
            pred, top = np.empty(n, dtype=np.intp), np.empty(n)
            for k in range(-(-n // self._step)):
                a, b = k * self._step, min(n, (k + 1) * self._step)
                blk = self._block(k)
                pred[a:b] = np.argmax(blk, axis=1)
                top[a:b] = blk[np.arange(b - a), pred[a:b]]
            self._top1 = (pred, top)
        return self._top1

    def argmax(self, axis=None) -> NDArray[np.intp]:
        return self._top1_pass(axis)[0].copy()

    def max(self, axis=None) -> NDArray[np.float64]:
        return self._top1_pass(axis)[1].copy()

    def __array__(self, dtype=None, copy=None):
        raise TypeError("the split's mean is read from its archive block by block (it does not fit the memory "
                        "limit): a kernel asked for all of it at once")

    def __array_function__(self, func, types, args, kwargs: dict[str, Any]):
        axis = kwargs.get("axis", args[1] if len(args) > 1 else None)
        if func is np.argmax:
            return self.argmax(axis)
        if func in (np.max, np.amax):
            return self.max(axis)
        return NotImplemented
