# SPDX-License-Identifier: MIT
"""The safe reader: ``open_archive`` (streaming) and ``read_archive`` (everything in memory).

Both validate the whole file first (see ``validator``) and raise ``InvalidArchiveError`` with every finding, or
``UnreadableArchiveError`` when the file is not an HDF5 archive at all. The file is only ever opened read-only.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from .archive import ArchiveHeader, PredictionArchive
from .blocks import drop_chunk_cache, iter_blocks, native, native_dtype, read_all
from .errors import Finding, InvalidArchiveError, UnreadableArchiveError
from .read_v1 import Parsed
from .safe_h5py import h5py
from .scan import UNREADABLE_CHECKS
from .spec import ReadLimits
from .scan import Scan
from .logit_scores import scores_problem
from .validator import (block_rows, check_logits_block, check_probs_block, check_split_values, inspect_file,
                        iter_logit_blocks)

__all__ = ["ArchiveReader", "open_archive", "read_archive"]


def _raise_for(path: str, findings: list[Finding]) -> None:
    errors = [f for f in findings if f.severity == "error"]
    if any(f.check in UNREADABLE_CHECKS for f in errors):
        raise UnreadableArchiveError(f"{path}: {errors[0].message}", findings)
    raise InvalidArchiveError(path, findings)


class ArchiveReader:
    """An open, validated archive. Use as a context manager; arrays are read on demand."""

    def __init__(self, parsed: Parsed, f: h5py.File, findings: list[Finding], limits: ReadLimits):
        self._parsed, self._file, self.findings, self.limits = parsed, f, findings, limits

    @property
    def header(self) -> ArchiveHeader:
        return self._parsed.header

    def dataset(self, split: str, key: str = "probs") -> h5py.Dataset | None:
        """The validated h5py dataset ``key`` (``probs``, ``labels``, ``sample_ids``, ``logits``,
        ``scores/<name>``) of a split, or None."""
        if split not in self.header.splits:
            raise KeyError(f"no split {split!r} in {self.header.path}; splits: {sorted(self.header.splits)}")
        return self._parsed.nodes.get((split, key))

    def probs(self, split: str) -> np.ndarray:
        """All of a split's predictions, (M, N, C), in the stored precision and native byte order."""
        return read_all(self.dataset(split, "probs"), self.limits)

    def iter_probs(self, split: str, rows: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """Blocks ``(start, (M, rows, C))`` along samples, native byte order; ``rows`` defaults to
        ~``limits.block_bytes`` and is cut to touch at most ``limits.max_chunks_per_read`` chunks."""
        ds = self.dataset(split, "probs")
        if rows is None:
            rows = block_rows(ds.shape[0], ds.shape[2], self.limits.block_bytes)
        return iter_blocks(ds, rows, self.limits.max_chunks_per_read)

    def release(self, split: str) -> None:
        """Free what HDF5 caches for the datasets of ``split`` once it has been read: the file keeps every split's
        datasets open, so what they cache would grow the memory of scoring with the number of splits
        (:func:`~ubench.archive_schema.blocks.drop_chunk_cache`; ``scan.open_readonly`` opens files without a chunk
        cache and with a small metadata cache, this evicts the datasets' metadata too)."""
        if split not in self.header.splits:
            raise KeyError(f"no split {split!r} in {self.header.path}; splits: {sorted(self.header.splits)}")
        for (name, _), ds in self._parsed.nodes.items():
            if name == split:
                drop_chunk_cache(ds)

    def probs_dtype(self, split: str) -> np.dtype:
        """The dtype of :meth:`iter_probs` blocks: the stored precision in native byte order."""
        return native_dtype(self.dataset(split, "probs").dtype)

    def chunk_rows(self, split: str) -> int | None:
        """Samples per stored chunk of a split's probs (None when not chunked)."""
        chunks = self.dataset(split, "probs").chunks
        return None if chunks is None else chunks[1]

    def iter_checked_probs(self, split: str, rows: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """``iter_probs`` for an archive opened with ``check_values=False``: each block passes the validator's
        value checks before it is yielded (so every byte is decompressed once), else ``InvalidArchiveError``
        (also when HDF5 fails to read a block: a corrupt deflate stream or a fletcher32 mismatch)."""
        scan = Scan(self.header.path, self.limits)
        path = f"/splits/{split}/probs"
        blocks = self.iter_probs(split, rows)
        while True:
            try:
                start, block = next(blocks)
            except StopIteration:
                return
            except (OSError, RuntimeError, ValueError) as exc:
                self._read_failed(scan, path, exc)
            if not check_probs_block(scan, path, start, block):
                raise InvalidArchiveError(self.header.path, self.findings + scan.findings)
            yield start, block
            del block  # before the next block is read: two blocks were alive at once (the caller drops its own)

    def iter_checked_member_rows(self, split: str, rows: int) -> Iterator[tuple[int, int, np.ndarray]]:
        """``(start, member, probs[member, start:start+rows])`` for every run of ``rows`` samples, members in order
        within each run; value-checked like :meth:`iter_checked_probs`. With ``rows`` a multiple of the chunk rows
        every chunk is still decompressed once, and memory holds one member's rows only."""
        scan = Scan(self.header.path, self.limits)
        path = f"/splits/{split}/probs"
        ds = self.dataset(split, "probs")
        m_total, n, _ = ds.shape
        if ds.chunks is not None:  # one member's block spans ceil(C / chunk C) chunks per chunk row
            span = -(-ds.shape[2] // ds.chunks[2])
            rows = max(1, min(rows, max(1, self.limits.max_chunks_per_read // span - 1) * ds.chunks[1]))
        for start in range(0, n, rows):
            for m in range(m_total):
                try:
                    block = native(ds[m : m + 1, start : min(n, start + rows), :])
                except (OSError, RuntimeError, ValueError) as exc:
                    self._read_failed(scan, path, exc)
                if not check_probs_block(scan, path, start, block, member_offset=m):
                    raise InvalidArchiveError(self.header.path, self.findings + scan.findings)
                yield start, m, block[0]

    def _read_failed(self, scan: Scan, path: str, exc: Exception) -> None:
        scan.add(path, "hdf5-read", f"reading the data failed: {exc}")
        raise InvalidArchiveError(self.header.path, self.findings + scan.findings) from None

    def check_labels_and_ids(self) -> None:
        """The validator's value checks of labels and sample ids (for ``check_values=False`` opens)."""
        scan = Scan(self.header.path, self.limits)
        check_split_values(scan, Parsed(self.header, {k: v for k, v in self._parsed.nodes.items()
                                                      if k[1] in ("labels", "sample_ids")}))
        if not scan.ok:
            raise InvalidArchiveError(self.header.path, self.findings + scan.findings)

    def labels(self, split: str) -> np.ndarray | None:
        ds = self.dataset(split, "labels")
        return None if ds is None else read_all(ds, self.limits).astype(np.int64)

    def sample_ids(self, split: str) -> np.ndarray | None:
        ds = self.dataset(split, "sample_ids")
        return None if ds is None else read_all(ds, self.limits).astype(np.int64)

    # --- format 1.1 (issue #31): logits and method scores ---------------------------------------------------
    def iter_checked_logits(self, split: str) -> Iterator[tuple[int, np.ndarray]]:
        """Blocks ``(start, (M, rows, C))`` of a split's logits (native byte order), each checked against the same
        rows of ``probs`` (SPEC.md §4.3) before it is yielded, else ``InvalidArchiveError``. Nothing when the split
        has no logits."""
        ds = self.dataset(split, "logits")
        if ds is None:
            return
        scan = Scan(self.header.path, self.limits)
        path = f"/splits/{split}/logits"
        blocks = iter_logit_blocks(ds, self.dataset(split, "probs"), self.limits)
        while True:
            try:
                start, logits, probs = next(blocks)
            except StopIteration:
                return
            except (OSError, RuntimeError, ValueError) as exc:
                self._read_failed(scan, path, exc)
            if not check_logits_block(scan, path, start, logits, probs):
                raise InvalidArchiveError(self.header.path, self.findings + scan.findings)
            yield start, logits

    def logits(self, split: str) -> np.ndarray | None:
        """All of a split's logits (M, N, C) in the stored precision, or None (read whole: validated opens only)."""
        ds = self.dataset(split, "logits")
        return None if ds is None else read_all(ds, self.limits)

    def scores(self, split: str) -> dict[str, np.ndarray]:
        """A split's method scores, name -> (N,) in the stored precision, each checked finite (SPEC.md §4.4)
        whether or not the archive was opened with value checks."""
        out = {}
        for name in self.header.splits[split].scores:
            values = read_all(self._parsed.nodes[(split, f"scores/{name}")], self.limits)
            problem = scores_problem(values)
            if problem is not None:
                scan = Scan(self.header.path, self.limits)
                scan.add(f"/splits/{split}/scores/{name}", *problem)
                raise InvalidArchiveError(self.header.path, self.findings + scan.findings)
            out[name] = values
        return out

    # --- host-integrity (issue #16 item 2): hash the open file, not the path --------------------------------
    def sha256(self) -> str:
        """sha256 of the file this reader reads, hashed through HDF5's own descriptor with ``pread`` (never by
        opening the path again, which a swapped file would answer)."""
        import hashlib
        import os

        fd, h, offset = self._file.id.get_vfd_handle(), hashlib.sha256(), 0
        # one buffer for every read: a new 1 MiB bytes object per read, allocated in the scoring thread's malloc
        # arena while the scorer allocates there too, left the scorer's heap 5 MiB larger at M = 200 (issue #29)
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        while n := os.preadv(fd, [buf], offset):
            h.update(view[:n])
            offset += n
        return h.hexdigest()
    # --- end host-integrity ------------------------------------------------------------------------------------

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> ArchiveReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_archive(path: str | Path, limits: ReadLimits = ReadLimits(), *, check_values: bool = True
                 ) -> ArchiveReader:
    """Validate ``path`` and return an open reader (raises if the archive has any error finding)."""
    parsed, f, findings = inspect_file(path, limits, check_values=check_values)
    if parsed is None:
        _raise_for(str(path), findings)
    return ArchiveReader(parsed, f, findings, limits)


def read_archive(path: str | Path, limits: ReadLimits = ReadLimits()) -> PredictionArchive:
    """Validate and read a whole archive into memory."""
    with open_archive(path, limits) as r:
        names = list(r.header.splits)
        return PredictionArchive(
            header=r.header,
            probs={s: r.probs(s) for s in names},
            labels={s: r.labels(s) for s in names},
            sample_ids={s: r.sample_ids(s) for s in names},
            logits={s: r.logits(s) for s in names},
            scores={s: r.scores(s) for s in names},
        )
