# SPDX-License-Identifier: MIT
"""Bounded reads of validated datasets: blocks sized by bytes *and* by the chunks they touch, native byte order.

libhdf5 keeps a few KiB of bookkeeping per chunk of a read's selection, whatever the chunk's size: reading a
48 MB archive of one-element chunks in 64 MiB blocks took 3.2 GiB (issue #16 item 4; measured here: 6.4 GiB for
1M chunks read at once). So a block along the sample axis is cut to at most ``max_chunks`` chunks as well as to
its byte budget. Arrays come back in native byte order: SPEC.md allows ``>f4``/``>f8``, and downstream code
(torch, in-place ufuncs into native buffers) must not see big-endian data (issue #16 item 8).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from .safe_h5py import h5py
from .spec import ReadLimits

__all__ = ["native", "native_dtype", "chunk_bounded_rows", "iter_blocks", "read_all", "drop_chunk_cache",
           "STREAM_BLOCK_BYTES", "aligned_rows"]

_MAX_CHUNKS = ReadLimits().max_chunks_per_read

#: Bytes of one streamed block (M, rows, C) of probabilities counted as float64 (the float32 block read is half of
#: it), for the scorer and the validator alike: small enough that peak memory hardly depends on M (a larger block
#: only adds Python-free NumPy work per call).
STREAM_BLOCK_BYTES = 16 * 2**20


def native_dtype(dtype: np.dtype) -> np.dtype:
    """``dtype`` in this machine's byte order (unchanged when it has none, e.g. strings)."""
    return dtype.newbyteorder("=") if dtype.byteorder in "<>" else dtype


def native(a: np.ndarray) -> np.ndarray:
    """``a`` itself when already native, else a native-order copy with the same values."""
    dt = native_dtype(a.dtype)
    return a if dt == a.dtype else a.astype(dt)


def _sample_axis(ndim: int) -> int:
    return 1 if ndim == 3 else 0  # probs (M, N, C) stream along N; labels and ids (N,) along N


def drop_chunk_cache(ds: h5py.Dataset) -> None:
    """Free the decompressed chunks and the metadata HDF5 keeps for the open dataset ``ds`` (``H5Drefresh`` evicts
    them; the dataset stays open and unchanged).

    Every open dataset keeps up to ``rdcc_nbytes`` of chunks (8 MiB per dataset in HDF5 2.0's defaults) until it
    is closed, and an open archive holds every split's datasets open: an ImageNet-C-shaped archive kept 8 MiB per
    split it had streamed (issue #29 item 2). ``scan.open_readonly`` now opens files without a chunk cache, so
    this matters for files opened otherwise, and for the metadata. A file that HDF5 cannot re-read here keeps its
    cache (the next read of it reports the error).

    Nothing is evicted while another handle in this process has the same dataset open (a second reader of the
    archive, or a handle the walk opened and a sampled frame still holds: Dask's profiler keeps them): libhdf5
    shares the open object between the handles, and refreshing it under the other one corrupted the library's
    state (reads failing with "can't insert duplicate key", then a segmentation fault).
    """
    if _open_elsewhere(ds):
        return
    try:
        ds.id.refresh()
    except (OSError, RuntimeError, ValueError):
        pass


def _open_elsewhere(ds: h5py.Dataset) -> bool:
    """Whether another identifier in this process has ``ds``'s dataset open, through any handle of its file (h5py's
    identifiers compare equal when they name the same object of the same file)."""
    ids = h5py.h5f.get_obj_ids(h5py.h5i.get_file_id(ds.id), h5py.h5f.OBJ_DATASET)
    return sum(i == ds.id for i in ids) > 1


def aligned_rows(chunk_rows: int | None, rows: int) -> int:
    """Round a block's rows down to whole chunks along samples (at least one chunk), so that no chunk straddles
    two blocks: a straddling chunk is read and decompressed twice (the files are opened without a chunk cache:
    ``scan.open_readonly``), which more than doubled the read time in bench/bench_score.py."""
    if chunk_rows is None:
        return rows
    return max(chunk_rows, rows // chunk_rows * chunk_rows)


def chunk_bounded_rows(ds: h5py.Dataset, rows: int, max_chunks: int = _MAX_CHUNKS) -> int:
    """``rows`` cut so that a block of that many samples touches at most ``max_chunks`` chunks.

    A block spans ``span = prod(ceil(shape[i] / chunk[i]))`` chunks across the other axes per chunk row; a block
    of ``k`` whole chunk rows starting on a chunk boundary touches ``k * span`` chunks and one starting elsewhere
    one row more, hence ``k = max_chunks // span - 1`` (at least 1). The scan refuses datasets where a single
    chunk row already exceeds ``max_chunks``.
    """
    chunks = ds.chunks
    if chunks is None or ds.ndim == 0:
        return max(1, rows)
    axis = _sample_axis(ds.ndim)
    span = math.prod(-(-s // c) for i, (s, c) in enumerate(zip(ds.shape, chunks)) if i != axis)
    k = max(1, max_chunks // max(1, span) - 1)
    return max(1, min(rows, k * chunks[axis]))


def iter_blocks(ds: h5py.Dataset, rows: int, max_chunks: int = _MAX_CHUNKS) -> Iterator[tuple[int, np.ndarray]]:
    """Yield ``(start, ds[:, start:start+rows, :])`` over the sample axis (native byte order); ``rows`` is first
    cut by :func:`chunk_bounded_rows`."""
    n = ds.shape[1]
    rows = chunk_bounded_rows(ds, rows, max_chunks)
    for start in range(0, n, rows):
        yield start, native(ds[:, start : min(n, start + rows), :])


def read_all(ds: h5py.Dataset, limits: ReadLimits = ReadLimits()) -> np.ndarray:
    """A whole 1-D or 3-D dataset in native byte order, read in blocks bounded by bytes and chunks."""
    out = np.empty(ds.shape, dtype=native_dtype(ds.dtype))
    if ds.ndim == 0 or out.size == 0:
        return native(ds[()]) if ds.ndim == 0 else out
    axis = _sample_axis(ds.ndim)
    row_bytes = max(1, out.nbytes // max(1, ds.shape[axis]))
    rows = chunk_bounded_rows(ds, max(1, limits.block_bytes // row_bytes), limits.max_chunks_per_read)
    n = ds.shape[axis]
    for start in range(0, n, rows):
        sel = (slice(None),) * axis + (slice(start, min(n, start + rows)),)
        out[sel] = ds[sel]
    return out
