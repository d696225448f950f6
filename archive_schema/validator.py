# SPDX-License-Identifier: MIT
"""Validate an untrusted archive: every problem becomes a ``Finding``; nothing raises for a bad file.

Pipeline: container checks (regular file, HDF5 signature, no user block) → read-only open → link and storage walk
(no link is followed, no data read) → the version's structural reader → value checks in bounded blocks.
A stage runs only if the stages before it found no error, so no value is read from a dataset that was refused.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..float_bits import in_unit_interval
from . import read_v1  # noqa: F401  (registers the v1.0 reader)
from . import read_v1_1  # noqa: F401  (registers the v1.1 reader)
from .archive import ArchiveHeader
# chunk-bounded, native byte order (issue #16 items 4, 8)
from .blocks import (STREAM_BLOCK_BYTES, aligned_rows, chunk_bounded_rows, drop_chunk_cache, iter_blocks, native,
                     read_all)
from .errors import Finding, UnsupportedArchiveError
from .logit_scores import logits_problem, scores_problem
from .read_v1 import Parsed
from .registry import reader_for
from .safe_h5py import h5py
from .scan import Scan, check_container, open_readonly, read_attr, walk
from .spec import ArchiveSpec, ReadLimits, duplicate_shift_message, is_iso8601_with_zone, row_sum_tolerance

__all__ = ["validate_archive", "inspect_file", "iter_blocks", "block_rows", "is_partial_run", "check_probs_block",
           "check_split_values", "check_header", "probs_problem", "check_logits_block", "iter_logit_blocks"]


def is_partial_run(path: str | Path) -> bool:
    """True for the sidecar directory of an unfinished producer run (``<out>.partial``)."""
    p = Path(path)
    return p.is_dir() and p.suffix == ".partial" and (p / "header.h5").is_file()


def _partial_findings(path: str) -> list[Finding]:
    members = sorted((Path(path) / "members").glob("[0-9]*.h5"))
    return [Finding("<file>", "partial-run", "error",
                    f"{path} is an unfinished producer run with {len(members)} finished member(s); re-run the "
                    "producer's command to resume it, or `ubench finalize` it to write the archive")]


def block_rows(n_members: int, n_classes: int, block_bytes: int) -> int:
    """Samples per block so that one (M, rows, C) float64 block stays near ``block_bytes``."""
    return max(1, block_bytes // (8 * max(1, n_members) * n_classes))


def probs_problem(block: np.ndarray, *, start: int = 0, member_offset: int = 0) -> tuple[str, str] | None:
    """The first way an (m, rows, C) block of ``probs`` breaks SPEC.md §4, as ``(check, message)``, or None.

    Checks in order: finite, in [0, 1], every row sums to 1 within :func:`spec.row_sum_tolerance` (summed in
    float64). The message names member, sample (offset by ``member_offset`` and ``start``) and class.
    """
    if in_unit_interval(block):  # finite and in [0, 1] (one pass over the bits): only the row sums are left
        return _row_sum_problem(block, start, member_offset)
    with np.errstate(all="ignore"):
        finite = np.isfinite(block.sum(dtype=np.float64))
    if not finite:
        m, i, c = np.unravel_index(int(np.argmax(~np.isfinite(block))), block.shape)
        return "finite", (f"non-finite value {block[m, i, c]} at member {member_offset + m}, sample {start + i}, "
                          f"class {c}")
    if block.min() < 0 or block.max() > 1:
        m, i, c = np.unravel_index(int(np.argmax((block < 0) | (block > 1))), block.shape)
        return "range", (f"probability {block[m, i, c]} outside [0, 1] at member {member_offset + m}, "
                         f"sample {start + i}, class {c}")
    return _row_sum_problem(block, start, member_offset)


def _row_sum_problem(block: np.ndarray, start: int, member_offset: int) -> tuple[str, str] | None:
    tol = row_sum_tolerance(block.shape[2])
    sums = block.sum(axis=2, dtype=np.float64)
    bad = np.abs(sums - 1.0) > tol
    if bad.any():
        m, i = np.unravel_index(int(np.argmax(bad)), bad.shape)
        return "row-sum", (f"row of member {member_offset + m}, sample {start + i} sums to {sums[m, i]:.6g} "
                           f"(rows must sum to 1 within {tol:.1e})")
    return None


def check_probs_block(scan: Scan, path: str, start: int, block: np.ndarray, member_offset: int = 0) -> bool:
    """Value checks of one (m, rows, C) block whose first member is ``member_offset`` and first sample ``start``;
    the first problem becomes a finding naming member, sample and class."""
    problem = probs_problem(block, start=start, member_offset=member_offset)
    if problem is not None:
        scan.add(path, *problem)
        return False
    return True


def check_logits_block(scan: Scan, path: str, start: int, logits: np.ndarray, probs: np.ndarray,
                       member_offset: int = 0) -> bool:
    """SPEC.md §4.3 value checks of one (m, rows, C) block of logits against the same block of probs; the first
    problem becomes a finding naming member, sample and class."""
    problem = logits_problem(logits, probs, start=start, member_offset=member_offset)
    if problem is not None:
        scan.add(path, *problem)
        return False
    return True


def iter_logit_blocks(logits: h5py.Dataset, probs: h5py.Dataset, limits: ReadLimits):
    """``(start, logits block, probs block)`` along samples, both (M, rows, C) in native byte order; ``rows`` keeps
    the two blocks together within ``limits.block_bytes`` and each within half of ``max_chunks_per_read``
    (:func:`~ubench.archive_schema.blocks.chunk_bounded_rows`, which holds for a block starting anywhere)."""
    half = max(1, limits.max_chunks_per_read // 2)
    rows = block_rows(logits.shape[0], logits.shape[2], limits.block_bytes // 2)
    rows = chunk_bounded_rows(probs, chunk_bounded_rows(logits, rows, half), half)
    n = logits.shape[1]
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        yield start, native(logits[:, start:stop, :]), native(probs[:, start:stop, :])


def _format_string(value):
    """The value of ``ubench_format`` / ``ubench_format_version`` as ``str``, or None.

    h5py returns fixed-length strings (the HDF5 C API's and MATLAB's default, ASCII or UTF-8, NUL- or space-padded:
    HDF5 strips the padding) as ``numpy.bytes_``; SPEC.md §1 allows them, so they are decoded here (strict UTF-8:
    bytes that are not UTF-8 leave the archive unrecognised).
    """
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return value


def check_header(scan: Scan, header: ArchiveHeader) -> None:
    """Rules of SPEC.md that span attributes the structural reader reads one by one.

    ``created`` is ISO 8601 with a zone (§2), and no two shift splits share a (shift_kind, shift_intensity)
    (§4: the scorer keys its shift curves by that pair).
    """
    created = header.provenance.get("created", "")  # required, so a parsed header lacks it only when it is empty
    if not is_iso8601_with_zone(created):
        scan.add("/", "created", "attribute 'created' must be an ISO 8601 date and time with a zone, e.g. "
                 f"'2026-11-22T03:21:31+00:00'; found {created!r}")
    dup = duplicate_shift_message((n, s.shift_kind, s.shift_intensity) for n, s in header.splits.items()
                                  if s.role == "shift")
    if dup is not None:
        scan.add(f"/splits/{dup[0]}", "shift-duplicate", dup[1])


def _probs_blocks(ds: h5py.Dataset, limits: ReadLimits):
    """``(start, first member, (m, rows, C) block)`` covering a probs dataset in blocks of the scorer's size
    (:data:`~ubench.archive_schema.blocks.STREAM_BLOCK_BYTES`, whole chunk rows): all members at once, or, when
    one chunk row of all members exceeds that, one member's chunk row at a time. Memory then depends on rows x C,
    not on M (issue #29 item 2), and each chunk is read once."""
    m, n, c = ds.shape
    rows = block_rows(m, c, min(limits.block_bytes, STREAM_BLOCK_BYTES))
    chunk = None if ds.chunks is None else ds.chunks[1]
    if chunk is None or chunk <= rows:
        for start, block in iter_blocks(ds, aligned_rows(chunk, rows), limits.max_chunks_per_read):
            yield start, 0, block
            del block  # before the next read (the caller drops its reference too)
        return
    for start in range(0, n, chunk):
        for j in range(m):
            yield start, j, native(ds[j : j + 1, start : min(n, start + chunk), :])


def check_split_values(scan: Scan, parsed: Parsed) -> None:
    C = parsed.header.n_classes
    for (split, key), ds in parsed.nodes.items():
        path = f"/splits/{split}/{key}"
        try:
            if key == "probs":
                for start, member, block in _probs_blocks(ds, scan.limits):
                    ok = check_probs_block(scan, path, start, block, member_offset=member)
                    del block  # before the next block is read: two blocks were alive at once
                    if not ok:
                        break
            elif key == "logits":
                for start, logits, probs in iter_logit_blocks(ds, parsed.nodes[(split, "probs")], scan.limits):
                    if not check_logits_block(scan, path, start, logits, probs):
                        break
            elif key.startswith("scores/"):
                problem = scores_problem(read_all(ds, scan.limits))
                if problem is not None:
                    scan.add(path, *problem)
            else:
                values = read_all(ds, scan.limits)
                if key == "labels":
                    bad = (values < 0) | (values >= C)
                    if bad.any():
                        i = int(np.argmax(bad))
                        scan.add(path, "label-range", f"labels must be in [0, {C}); found {values[i]} at index {i}")
                else:
                    order = np.argsort(values, kind="stable")
                    dup = np.flatnonzero(values[order][1:] == values[order][:-1])
                    if dup.size:
                        first = int(np.min(order[dup + 1]))
                        scan.add(path, "unique", f"sample ids must be unique; {values[first]} repeats at index {first}")
        except (OSError, RuntimeError, ValueError) as exc:
            # e.g. a fletcher32 checksum mismatch or a corrupt deflate stream
            scan.add(path, "hdf5-read", f"reading the data failed: {exc}")
        finally:  # memory independent of the number of splits (blocks.drop_chunk_cache)
            drop_chunk_cache(ds)
            if key == "logits":
                drop_chunk_cache(parsed.nodes[(split, "probs")])


def inspect_file(path: str | Path, limits: ReadLimits = ReadLimits(), *, check_values: bool = True
                 ) -> tuple[Parsed | None, h5py.File | None, list[Finding]]:
    """Run the whole pipeline; returns the parsed archive (None if any error), the open file, and all findings.

    The caller owns the returned file and must close it. ``UnsupportedArchiveError`` is raised for a version
    this ubench does not read.
    """
    path = str(path)
    if is_partial_run(path):
        return None, None, _partial_findings(path)
    scan = Scan(path, limits)
    if not check_container(scan):
        return None, None, scan.findings
    f = open_readonly(scan)
    if f is None:
        return None, None, scan.findings
    parsed = None
    try:
        fmt = _format_string(read_attr(scan, f, "ubench_format", "/"))
        version = _format_string(read_attr(scan, f, "ubench_format_version", "/"))
        if not isinstance(fmt, str) or not isinstance(version, str):
            scan.add("/", "format", "root attributes 'ubench_format' and 'ubench_format_version' must be (UTF-8) "
                     "strings; this is not a ubench prediction archive")
            f.close()
            return None, None, scan.findings
        reader, note = reader_for(ArchiveSpec(fmt, version), path)
        if note:
            scan.add("/", "version", note, severity="note")
        safe = walk(scan, f)
        # The structural reader follows group links by name, so it must not run after the walk refused a link
        # (an external link at /members would open the other file).
        if scan.ok:
            parsed = reader(scan, f, safe, version)
        if parsed is not None:
            check_header(scan, parsed.header)
        if parsed is not None and check_values and scan.ok:
            check_split_values(scan, parsed)
    except UnsupportedArchiveError:
        f.close()
        raise
    except (OSError, RuntimeError, KeyError, ValueError, TypeError) as exc:
        # libhdf5 reports structural corruption through these; it is a property of the file, not a ubench bug.
        scan.add("<file>", "hdf5-read", f"HDF5 failed while reading the file's structure: {exc}")
    if not scan.ok:
        f.close()
        return None, None, scan.findings
    return parsed, f, scan.findings


def validate_archive(path: str | Path, limits: ReadLimits = ReadLimits()) -> list[Finding]:
    """All findings for ``path`` (empty or notes/warnings only when the archive is valid)."""
    try:
        _, f, findings = inspect_file(path, limits)
    except UnsupportedArchiveError as exc:
        return [Finding("/", "version", "error", str(exc))]
    if f is not None:
        f.close()
    return findings
