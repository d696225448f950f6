# SPDX-License-Identifier: MIT
"""Archive (+ trusted reference) in, report dict out: what ``ubench score`` computes.

``score_archive`` is importable without a terminal and writes nothing: it opens the archive through the safe
reader, checks it against the reference, streams each split once in blocks of samples ``(M, rows, C)`` (the
reader's value checks run on the same blocks, so every byte of predictions is decompressed once), and hands the
per-split arrays to ``metrics/report.py``, which decides what the report holds. Peak memory is a few (N, C)
float64 arrays per split plus one block; the member stack (M, N, C) of the in-domain split is held only when a
section needs members and it fits ``MEMBER_CACHE_BLOCKS * limits.block_bytes``, and is otherwise re-read one member at a time
along the archive's ``(1, rows, C)`` chunks.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from ..archive_schema.spec import ReadLimits
from .protocols import Protocol

__all__ = ["MEMBER_CACHE_BLOCKS", "score_archive", "run_score", "ProgressFn", "REPORT_SCHEMA_VERSION"]

#: Version of the report layout (``scoring/REPORT_KEYS.md``); bumped when a key changes meaning or moves.
REPORT_SCHEMA_VERSION = "1.0"

#: ``progress(task, done, total)``: called while streaming; ``task`` names the split or sweep.
ProgressFn = Callable[[str, int, int], None]


#: The in-domain member stack (M, N, C) is held in memory (as float64) only when it fits this many
#: ``ReadLimits.block_bytes``; otherwise members are re-read one at a time, so memory depends on N x C only.
MEMBER_CACHE_BLOCKS = 8


def _limits_dict(limits: ReadLimits) -> dict[str, Any]:
    return {"block_bytes": limits.block_bytes, "member_cache_bytes": MEMBER_CACHE_BLOCKS * limits.block_bytes,
            "max_total_bytes": limits.max_total_bytes}


def score_archive(path: str | Path, *, reference: str | Path | None = None,
                  protocol: Protocol = Protocol.preset("pitfalls"), limits: ReadLimits = ReadLimits()) -> dict:
    """Score an archive under ``protocol``; returns the report dict (``scoring/REPORT_KEYS.md``).

    Parameters
    ----------
    path : the prediction archive (untrusted).
    reference : a reference label file (``scoring/reference.py``); when given, labels come only from it and the
        archive's splits, sizes, sample ids and class count must match it.
    protocol : the settings (``Protocol.preset(name)``, adjusted with ``.replace``).
    limits : the safe reader's limits; ``limits.block_bytes`` sets the streamed block size and, times
        ``MEMBER_CACHE_BLOCKS``, the largest member stack held in memory.

    Raises
    ------
    InvalidArchiveError, UnreadableArchiveError, UnsupportedArchiveError
        The archive fails the reader's checks (``.findings`` lists them).
    ReferenceError, ReferenceMismatchError
        The reference is unusable, or the archive differs from it (``.differences``).
    """
    return run_score(path, reference=reference, protocol=protocol, limits=limits)


def _aligned_rows(chunk_rows: int | None, rows: int) -> int:
    """Round a block's rows down to whole chunks along samples (at least one chunk), so that no chunk straddles
    two blocks: a straddling chunk is decompressed twice (h5py's chunk cache holds less than one 1 MiB chunk),
    which more than doubled the read time in bench/bench_score.py."""
    if chunk_rows is None:
        return rows
    return max(chunk_rows, rows // chunk_rows * chunk_rows)


def _file_info(path: str | Path, header, sha256: str) -> dict[str, Any]:
    return {"path": str(path), "sha256": sha256, "format_version": header.format_version,
            "method": header.method, "model": header.model, "dataset": header.dataset,
            "n_classes": header.n_classes, "n_members": header.n_members}


def _labels_for(reader, header, ref, notes: list[str]) -> dict[str, np.ndarray | None]:
    """Labels of every split: the reference's when given (noting where the upload's own differ), else the
    archive's."""
    labels = {}
    for name in header.splits:
        own = reader.labels(name)
        if ref is None:
            labels[name] = own
            continue
        trusted = ref.splits[name].labels
        labels[name] = trusted
        if own is not None and trusted is not None and not np.array_equal(own, trusted):
            bad = np.flatnonzero(own != trusted)
            notes.append(f"split {name!r}: the archive's own labels differ from the reference at {bad.size} "
                         f"sample(s) (first at index {int(bad[0])}); they were ignored")
    return labels


def run_score(path: str | Path, *, reference: str | Path | None = None,
              protocol: Protocol = Protocol.preset("pitfalls"), limits: ReadLimits = ReadLimits(),
              progress: ProgressFn | None = None) -> dict:
    """:func:`score_archive` with an optional ``progress`` callback (the CLI draws progress bars with it)."""
    from ..archive_schema import open_archive
    from ..archive_schema.validator import block_rows
    from ..metrics import report as R
    from .reference import ReferenceMismatchError, compare_to_reference, primary_split, read_reference

    from concurrent.futures import ThreadPoolExecutor

    from ..archive_schema.scan import file_sha256

    ref = read_reference(reference) if reference is not None else None
    notes: list[str] = []
    # hashlib releases the GIL: the file's sha256 is computed beside the scoring instead of before it.
    with ThreadPoolExecutor(max_workers=1) as pool, open_archive(path, limits, check_values=False) as reader:
        digest = pool.submit(reader.sha256)  # host-integrity: the bytes HDF5 reads, not a second open of path
        h = reader.header
        reader.check_labels_and_ids()
        ids = {name: reader.sample_ids(name) for name in h.splits}
        if ref is not None:
            diffs = compare_to_reference(h, ids, ref)
            if diffs:
                raise ReferenceMismatchError(str(path), ref.path, diffs)
        labels = _labels_for(reader, h, ref, notes)
        if ref is None:
            notes.append("labels were taken from the archive itself (no --reference): fine for your own runs, "
                         "not for untrusted uploads")

        p = protocol
        metric_kw = dict(bins=p.bins, eps=p.eps, smoothing=p.smoothing)
        in_domain = h.splits_with_role("in_domain")
        primary = primary_split(h, labels, ref)  # host-integrity: the reference decides, not the upload's order
        order = in_domain + h.splits_with_role("ood") + h.splits_with_role("shift")
        report: dict[str, Any] = {"in_domain": {}, "ood": {}, "shift": {}}
        primary_arrays = None
        ood_arrays: dict[str, Any] = {}
        for name in order:
            info = h.splits[name]
            ds_shape = (h.n_members, info.n_samples, h.n_classes)
            rows = block_rows(h.n_members, h.n_classes, limits.block_bytes)
            chunk = reader.chunk_rows(name)
            needs_members = name == primary and (p.placement == "per_member"
                                                 or (p.member_curves and h.n_members > 1))
            keep = needs_members and np.prod(ds_shape) * 8 <= MEMBER_CACHE_BLOCKS * limits.block_bytes
            if needs_members and not keep:
                notes.append(f"split {name!r}: its member stack ({np.prod(ds_shape) * 8 / 2**20:.0f} MiB as float64) "
                             f"exceeds the member budget ({MEMBER_CACHE_BLOCKS * limits.block_bytes / 2**20:.0f} MiB); "
                             "per-member temperature scaling and member curves were not computed")
            acc = R.SplitAccumulator(*ds_shape, smoothing=p.smoothing, keep_members=keep,
                                     dtype=reader.probs_dtype(name))
            if chunk is not None and chunk > rows:
                # A whole chunk row across all members would exceed the block budget: read member by member,
                # one chunk each, so memory depends on N x C only (each chunk is still decompressed once).
                for start, m, member_rows in reader.iter_checked_member_rows(name, chunk):
                    acc.add_member_rows(start, m, member_rows)
                    if progress is not None and m == h.n_members - 1:
                        progress(name, min(info.n_samples, start + member_rows.shape[0]), info.n_samples)
            else:
                for start, block in reader.iter_checked_probs(name, _aligned_rows(chunk, rows)):
                    acc.add(start, block)
                    if progress is not None:
                        progress(name, min(info.n_samples, start + block.shape[1]), info.n_samples)
            arrays = acc.result()
            y = labels[name]
            if info.role == "in_domain":
                if y is None:
                    notes.append(f"in-domain split {name!r} has no labels; only its uncertainties are used")
                    continue
                sec = R.in_domain_section(arrays, y, tpr=p.tpr, cost_preset=p.cost_preset,
                                          cost_matrix=p.cost_matrix, cost_reduction=p.cost_reduction, **metric_kw)
                if p.temperature_scaling and info.n_samples >= 2:
                    sec["calibrated"] = R.calibrated_section(
                        arrays, y, placement=p.placement, repeats=p.repeats, seed=p.seed, bins=p.bins, eps=p.eps,
                        smoothing=p.smoothing)
                if arrays.member_probs is not None and p.member_curves and h.n_members > 1:
                    if progress is not None:
                        progress(f"{name}: member curves", 0, 1)
                    sec["member_curves"] = R.member_curves_section(
                        arrays.member_probs, y, placement=p.placement, orders=p.orders, repeats=p.repeats,
                        seed=p.seed, eps=p.eps, smoothing=p.smoothing)
                    if progress is not None:
                        progress(f"{name}: member curves", 1, 1)
                report["in_domain"][name] = sec
                if name == primary:
                    primary_arrays = arrays
            elif info.role == "ood":
                ood_arrays[name] = arrays
            else:
                if y is None:
                    notes.append(f"shift split {name!r} has no labels; it was skipped")
                    continue
                sec = R.shift_split_section(arrays, y, **metric_kw)
                sec.update(shift_kind=info.shift_kind, shift_intensity=float(info.shift_intensity))
                report["shift"][name] = sec

        if ood_arrays and primary_arrays is None:
            notes.append("OOD splits need a labelled in-domain split to score against; none was found")
        elif ood_arrays:
            for name, arrays in ood_arrays.items():
                sec = R.ood_section(primary_arrays, arrays, tpr=p.tpr)
                sec.update(against=primary, n_samples=arrays.n_samples,
                           histograms=R.ood_histograms(primary_arrays, arrays))
                report["ood"][name] = sec
        report["shift_summary"] = R.shift_summary(report["shift"]) if report["shift"] else None
        report["summary"] = R.headline(report, primary)
        report["comparability"] = {"comparable": list(R.COMPARABLE_KEYS),
                                   "not_comparable": list(R.NOT_COMPARABLE_KEYS)}
        archive = _file_info(path, h, digest.result())
        archive["splits"] = {n: {"role": s.role, "dataset": s.dataset, "n_samples": s.n_samples,
                                 "shift_kind": s.shift_kind, "shift_intensity": s.shift_intensity}
                             for n, s in h.splits.items()}
    return {
        "ubench_version": __version__,
        "report_schema": REPORT_SCHEMA_VERSION,
        "archive": archive,
        "labels": {"source": "reference" if ref is not None else "archive",
                   "reference": None if ref is None else {"path": ref.path, "sha256": file_sha256(ref.path)}},
        "protocol": p.to_dict(),
        "limits": _limits_dict(limits),
        "primary_split": primary,
        **report,
        "notes": notes,
    }
