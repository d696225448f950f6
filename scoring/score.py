# SPDX-License-Identifier: MIT
"""Archive (+ trusted reference) in, report dict out: what ``ubench score`` computes.

``score_archive`` is importable without a terminal and writes nothing: it opens the archive through the safe
reader, checks it against the reference, streams each split once in blocks of samples ``(M, rows, C)`` (the
reader's value checks run on the same blocks, so every byte of predictions is decompressed once), and hands the
per-split arrays to ``metrics/report.py``, which decides what the report holds. Peak memory is one split's
(N, C) float64 mean, its per-sample vectors and one block (the splits are scored one after another; every
section reads the mean in row blocks); the member stack (M, N, C) of the in-domain split is held only when a
section needs members and it fits ``MEMBER_CACHE_BLOCKS * limits.block_bytes``, and is otherwise re-read one
member at a time along the archive's ``(1, rows, C)`` chunks. A split whose mean does not fit the memory left is
read again for each pass instead, and one that cannot be scored at all is refused before any read
(``scoring/memory_plan.py``); ``scoring/score_parallel.py`` spreads the splits over a Dask cluster.
"""

from __future__ import annotations

import hashlib

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .. import __version__
from ..archive_schema.blocks import STREAM_BLOCK_BYTES, aligned_rows
from ..archive_schema.spec import LATENCY_ATTRIBUTES, ReadLimits
from .protocols import Protocol

__all__ = ["MEMBER_CACHE_BLOCKS", "score_archive", "score_arrays", "run_score", "score_split", "ProgressFn",
           "REPORT_SCHEMA_VERSION"]

#: Version of the report layout (``scoring/REPORT_KEYS.md``); bumped when a key changes meaning or moves.
REPORT_SCHEMA_VERSION = "1.2"

#: ``progress(task, done, total)``: called while streaming; ``task`` names the split or sweep.
ProgressFn = Callable[[str, int, int], None]


#: The in-domain member stack (M, N, C) is held in memory (as float64) only when it fits this many
#: ``ReadLimits.block_bytes``; otherwise members are re-read one at a time, so memory depends on N x C only.
MEMBER_CACHE_BLOCKS = 8


def _limits_dict(limits: ReadLimits) -> dict[str, Any]:
    return {"block_bytes": limits.block_bytes, "member_cache_bytes": MEMBER_CACHE_BLOCKS * limits.block_bytes,
            "max_total_bytes": limits.max_total_bytes}


def _as_protocol(protocol: Protocol | str) -> Protocol:
    """A :class:`Protocol`, or the preset of that name (``"pitfalls"``, ``"ursabench"``, ``"shift"``)."""
    if isinstance(protocol, Protocol):
        return protocol
    if isinstance(protocol, str):
        return Protocol.preset(protocol)
    raise TypeError(f"protocol must be a Protocol or a preset name; found {type(protocol).__name__}")


def score_archive(path: str | Path, *, reference: str | Path | None = None,
                  protocol: Protocol | str = "pitfalls", limits: ReadLimits = ReadLimits(),
                  intervals: bool | None = None, memory_bytes: int | None = None) -> dict:
    """Score an archive under ``protocol``; returns the report dict (``scoring/REPORT_KEYS.md``).

    Parameters
    ----------
    path : the prediction archive (untrusted).
    reference : a reference label file (``scoring/reference.py``); when given, labels come only from it and the
        archive's splits, sizes, sample ids and class count must match it.
    protocol : the settings: a preset name (``"pitfalls"``, ``"ursabench"``, ``"shift"``) or a
        :class:`Protocol` (``Protocol.preset(name).replace(bins=20)``).
    limits : the safe reader's limits; ``limits.block_bytes`` sets the streamed block size and, times
        ``MEMBER_CACHE_BLOCKS``, the largest member stack held in memory.
    intervals : add the ``intervals`` object (bootstrap confidence intervals over the test samples); ``None``
        follows ``protocol.intervals`` (on in every preset), ``True``/``False`` override it.
    memory_bytes : the memory one split may use (default: the address space left under ``RLIMIT_AS``, else the
        memory available). A split whose (N, C) mean does not fit is read again for each pass of its metrics;
        one whose per-sample arrays do not fit either stops scoring up front (:mod:`ubench.scoring.memory_plan`).

    Raises
    ------
    InvalidArchiveError, UnreadableArchiveError, UnsupportedArchiveError
        The archive fails the reader's checks (``.findings`` lists them).
    ReferenceError, ReferenceMismatchError
        The reference is unusable, or the archive differs from it (``.differences``).
    MemoryBudgetError
        A split cannot be scored within ``memory_bytes`` (a ``ValueError``; raised before any prediction is read).
    """
    return run_score(path, reference=reference, protocol=_with_intervals(_as_protocol(protocol), intervals),
                     limits=limits, memory_bytes=memory_bytes)


def _with_intervals(protocol: Protocol, intervals: bool | None) -> Protocol:
    """``protocol`` with its ``intervals`` setting replaced when ``intervals`` is not None."""
    return protocol if intervals is None else protocol.replace(intervals=bool(intervals))


def _file_info(path: str | Path, header, sha256: str) -> dict[str, Any]:
    return {"path": str(path), "sha256": sha256, "format_version": header.format_version,
            "method": header.method, "model": header.model, "dataset": header.dataset,
            "n_classes": header.n_classes, "n_members": header.n_members}


class _PerSplit(Mapping):
    """``name -> read(name)`` for every split of ``names``, read when asked and not kept: every split's labels, read
    up front, were held through the scoring of all of them (8 MiB of int64 for an ImageNet-C-shaped archive's
    21 x 50,000 samples, more with more splits; issue #29 item 2)."""

    def __init__(self, names, read: Callable[[str], Any]):
        self._names, self._read = tuple(names), read

    def __getitem__(self, name: str):
        if name not in self._names:
            raise KeyError(name)
        return self._read(name)

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _labelled(reader) -> set[str]:
    """The archive's splits with labels, without reading any (with a reference, the reference names the primary
    split)."""
    return {name for name in reader.header.splits if reader.dataset(name, "labels") is not None}


def _label_notes(reader, header, ref) -> list[str]:
    """Where the labels come from: with a reference, the splits whose own labels differ from it (compared one
    split at a time); without, that they are the archive's own."""
    if ref is None:
        return ["labels were taken from the archive itself (no --reference): fine for your own runs, "
                "not for untrusted uploads"]
    notes = []
    for name in header.splits:
        own, trusted = reader.labels(name), ref.splits[name].labels
        if own is not None and trusted is not None and not np.array_equal(own, trusted):
            bad = np.flatnonzero(own != trusted)
            notes.append(f"split {name!r}: the archive's own labels differ from the reference at {bad.size} "
                         f"sample(s) (first at index {int(bad[0])}); they were ignored")
    return notes


def _checked_labels(path, reader, ref) -> tuple[_PerSplit, list[str]]:
    """Step 1: check labels and sample ids (against the reference when given); the labels each split is scored
    with (read as it is scored), and the notes about where they came from."""
    from .reference import ReferenceMismatchError, compare_to_reference

    h = reader.header
    reader.check_labels_and_ids()
    if ref is not None:
        diffs = compare_to_reference(h, _PerSplit(h.splits, reader.sample_ids), ref)
        if diffs:
            raise ReferenceMismatchError(str(path), ref.path, diffs)
    labels = _PerSplit(h.splits, (lambda name: ref.splits[name].labels) if ref is not None else reader.labels)
    return labels, _label_notes(reader, h, ref)


def _scoring_order(header) -> list[str]:
    """In-domain splits first (OOD splits are scored against the primary one), then OOD, then shift."""
    return header.splits_with_role("in_domain") + header.splits_with_role("ood") + header.splits_with_role("shift")


def _stream_split(reader, name: str, builder, limits: ReadLimits, progress: ProgressFn | None, plan=None):
    """Step 2, per split: read its predictions once, in blocks, into the per-split arrays (keeping the member
    stack when the builder needs it and it fits the member budget). With a ``plan`` that does not hold the mean
    (:mod:`ubench.scoring.memory_plan`), the arrays' mean is an :class:`~ubench.scoring.archive_mean.ArchiveMean`
    that re-reads the split for each pass of the sections."""
    from ..archive_schema.validator import block_rows
    from ..metrics.report import SplitAccumulator

    h = reader.header
    n = h.splits[name].n_samples
    shape = (h.n_members, n, h.n_classes)
    in_memory = plan is None or plan.in_memory
    needs_members = builder.keep_members(name, n)
    budget = MEMBER_CACHE_BLOCKS * limits.block_bytes
    keep = needs_members and np.prod(shape) * 8 <= budget and in_memory
    if needs_members and not in_memory:
        builder.note(f"split {name!r} is read from its archive in passes (its mean does not fit memory): "
                     "per-member temperature scaling and member curves need its members in memory and were not "
                     "computed")
    elif needs_members and not keep:
        builder.note(f"split {name!r}: its member stack ({np.prod(shape) * 8 / 2**20:.0f} MiB as float64) "
                     f"exceeds the member budget ({budget / 2**20:.0f} MiB); per-member temperature scaling and "
                     "member curves were not computed")
    acc = SplitAccumulator(*shape, smoothing=builder.p.smoothing, keep_members=keep, dtype=reader.probs_dtype(name),
                           keep_mean=in_memory)
    rows = block_rows(h.n_members, h.n_classes, min(limits.block_bytes, STREAM_BLOCK_BYTES))
    chunk = reader.chunk_rows(name)
    if chunk is not None and chunk > rows:
        # A whole chunk row across all members would exceed the block budget: read member by member, one chunk
        # each, so memory depends on N x C only (each chunk is still decompressed once).
        for start, m, member_rows in reader.iter_checked_member_rows(name, chunk):
            acc.add_member_rows(start, m, member_rows)
            if progress is not None and m == h.n_members - 1:
                progress(name, min(n, start + member_rows.shape[0]), n)
    else:
        for start, block in reader.iter_checked_probs(name, aligned_rows(chunk, rows)):
            acc.add(start, block)
            if progress is not None:
                progress(name, min(n, start + block.shape[1]), n)
            del block  # before the next block is read
    arrays = acc.result()
    if in_memory:
        return arrays
    import dataclasses

    from .archive_mean import ArchiveMean

    return dataclasses.replace(arrays, mean_probs=ArchiveMean(reader, name, block_bytes=limits.block_bytes))


def score_split(reader, name: str, builder, labels: np.ndarray | None, limits: ReadLimits, plan,
                progress: ProgressFn | None = None) -> None:
    """Step 2, per split: stream it (:func:`_stream_split`) and hand its arrays to ``builder`` by its role; its
    (N, C) arrays are freed on return, before the next split is read, and so are HDF5's cached chunks of it
    (``ArchiveReader.release``: 8 MiB per split otherwise)."""
    info = reader.header.splits[name]
    try:
        arrays = _stream_split(reader, name, builder, limits, progress, plan)
        builder.add_method_scores(name, _method_scores(reader, name))
        if info.role == "in_domain":
            builder.add_in_domain(name, arrays, labels, progress=progress)
        elif info.role == "ood":
            builder.add_ood(name, arrays)
        else:
            builder.add_shift(name, arrays, labels, kind=info.shift_kind, intensity=info.shift_intensity)
    finally:
        reader.release(name)
    if not plan.in_memory:
        builder.note(f"split {name!r}: its (N, C) mean ({plan.mean_bytes / 2**20:,.0f} MiB) did not fit the "
                     f"{plan.budget / 2**20:,.0f} MiB of memory left beside its per-sample arrays and working "
                     f"memory, so its metrics read it again from the archive ({arrays.mean_probs.passes:.0f} more "
                     "passes over the split)")
    del arrays  # the bootstrap's replicate blocks are not to sit beside the split's mean
    builder.intervals.settle()


def _method_scores(reader, name: str) -> dict:
    """A split's declared method scores and, with logits, energy and max-logit (format 1.1; value-checked as they
    are read: ``ubench.metrics.method_scores``)."""
    from ..metrics.method_scores import LogitScoreAccumulator, MethodScore

    info = reader.header.splits[name]
    out = {s: MethodScore(v.astype(np.float64), info.scores[s]) for s, v in reader.scores(name).items()}
    if info.has_logits:
        acc = LogitScoreAccumulator(info.n_samples)
        for start, block in reader.iter_checked_logits(name):
            acc.add(start, block)
        out.update(acc.result())
    return out


def _ids_digest(ids: np.ndarray | None) -> str | None:
    """sha256 of a split's sample ids as little-endian int64 (None without ids): tells ``compare`` whether two
    archives predicted on the same samples without putting the ids in the report."""
    if ids is None:
        return None
    return hashlib.sha256(np.ascontiguousarray(ids, dtype="<i8").tobytes()).hexdigest()


def _archive_section(path: str | Path, header, sha256: str,
                     sample_ids: Mapping[str, np.ndarray | None] | None = None,
                     known_inputs: dict[str, str] | None = None) -> dict[str, Any]:
    """The report's ``archive``: what was scored."""
    out = _file_info(path, header, sha256)
    ids = sample_ids or {}
    known = known_inputs or {}
    out["splits"] = {n: {"role": s.role, "dataset": s.dataset, "n_samples": s.n_samples,
                         "shift_kind": s.shift_kind, "shift_intensity": s.shift_intensity,
                         "sample_ids_sha256": _ids_digest(ids.get(n)), "inputs_sha256": s.inputs_sha256,
                         "known_inputs": known.get(n)}
                     for n, s in header.splits.items()}
    if header.diagnostics is not None:
        out["diagnostics"] = header.diagnostics  # as the producer measured them (SPEC.md 5.1)
    latency = latency_section(header.scalability)
    if latency is not None:
        out["latency"] = latency
    return out


def latency_section(scalability: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The ``/scalability`` latency attributes (SPEC.md 5.2) of the right type (a string where a number belongs,
    a non-finite number, is left out), or None when there is no ``latency_p50_ms``."""
    out: dict[str, Any] = {}
    for key, kind in LATENCY_ATTRIBUTES.items():
        v = (scalability or {}).get(key)
        if kind == "str" and isinstance(v, str):
            out[key] = v
        elif kind != "str" and isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) \
                and np.isfinite(v) and (kind == "float" or float(v).is_integer()):
            out[key] = int(v) if kind == "int" else float(v)
    return out if "latency_p50_ms" in out else None


def run_score(path: str | Path, *, reference: str | Path | None = None,
              protocol: Protocol | str = "pitfalls", limits: ReadLimits = ReadLimits(),
              progress: ProgressFn | None = None, memory_bytes: int | None = None, scheduler: str | None = None,
              workers: int = 1) -> dict:
    """:func:`score_archive` with an optional ``progress`` callback (the CLI draws progress bars with it), and
    the splits scored on a Dask cluster: the scheduler at ``scheduler``, or a local cluster of ``workers``
    processes (:mod:`ubench.scoring.score_parallel`; the same report).

    The steps: read the reference; open the archive; check labels and ids (:func:`_checked_labels`); plan each
    split's memory (:mod:`ubench.scoring.memory_plan`); stream every split into a
    :class:`ubench.metrics.report.ReportBuilder`, which decides the report's content (:func:`score_split`);
    describe the archive (:func:`_archive_section`) and wrap it all with the settings.
    """
    from concurrent.futures import ThreadPoolExecutor

    from ..archive_schema import open_archive
    from ..archive_schema.scan import file_sha256
    from ..metrics.report import ReportBuilder, primary_split
    from .blas import one_blas_thread
    from .memory_plan import MemoryBudgetError, memory_budget, overlaps, plan_split, working_bytes
    from .reference import read_reference

    protocol = _as_protocol(protocol)
    ref = read_reference(reference) if reference is not None else None
    # hashlib releases the GIL: the file's sha256 is computed beside the scoring instead of before it.
    with ThreadPoolExecutor(max_workers=1) as pool, open_archive(path, limits, check_values=False) as reader, \
            one_blas_thread():
        digest = pool.submit(reader.sha256)  # host-integrity: the bytes HDF5 reads, not a second open of path
        h = reader.header
        labels, notes = _checked_labels(path, reader, ref)
        # With a reference, the reference decides the primary split, not the upload's link order (#16.6).
        primary = ref.primary if ref is not None else primary_split(h.splits_with_role("in_domain"), _labelled(reader))
        builder = ReportBuilder(protocol, n_members=h.n_members, n_classes=h.n_classes, dataset=h.dataset,
                                primary=primary)
        known_inputs: dict[str, str] = {}
        if ref is None:  # with a reference, its own fingerprints decide (compare_to_reference)
            from .known_splits import check_known_splits

            known_inputs, known_notes = check_known_splits(h.dataset, h.splits)
            notes = notes + known_notes
        builder.notes[:0] = notes
        builder.intervals.units = {name: _ids_digest(reader.sample_ids(name)) for name in h.splits}
        builder.intervals.block_n = max(s.n_samples for s in h.splits.values())  # the replicate blocks' size
        budget = memory_budget(memory_bytes)  # up front: a split that cannot be scored stops before any read
        sizes = {name: h.splits[name].n_samples for name in h.splits}

        def plan(overlap: bool) -> dict:
            extra = working_bytes(sizes, h.n_classes, bootstrap=protocol.bootstrap if protocol.intervals else None,
                                  overlap=overlap)
            return {name: plan_split(name, h.n_members, h.splits[name].n_samples, h.n_classes, budget=budget,
                                     block_bytes=limits.block_bytes, extra_bytes=extra) for name in _scoring_order(h)}

        # small splits: a batch is resampled beside the next split, unless that would put a split in passes
        overlap = overlaps(sizes, h.n_classes)
        if overlap:
            try:
                plans = plan(True)
                overlap = all(p.in_memory for p in plans.values())
            except MemoryBudgetError:
                overlap = False
        if not overlap:
            plans = plan(False)
        builder.intervals.overlap = overlap
        if scheduler is None and workers <= 1:
            for name in _scoring_order(h):
                score_split(reader, name, builder, labels[name], limits, plans[name], progress)
        else:
            from .score_parallel import score_splits_parallel

            score_splits_parallel(path, reader, builder, labels, limits, scheduler=scheduler, workers=workers,
                                  memory_bytes=memory_bytes, progress=progress)
        body = builder.finish()
        archive = _archive_section(path, h, digest.result(), _PerSplit(h.splits, reader.sample_ids),
                                   known_inputs)
    labels_info = {"source": "reference" if ref is not None else "archive",
                   "reference": None if ref is None else {"path": ref.path, "sha256": file_sha256(ref.path)}}
    return _report(archive, labels_info, protocol, _limits_dict(limits), body)


def _report(archive: dict, labels: dict, protocol: Protocol, limits: dict | None, body: dict) -> dict:
    """The report's envelope around the builder's body (the key order of ``scoring/REPORT_KEYS.md``)."""
    notes = body.pop("notes")
    return {"ubench_version": __version__, "report_schema": REPORT_SCHEMA_VERSION, "archive": archive,
            "labels": labels, "protocol": protocol.to_dict(), "limits": limits, **body, "notes": notes}


def _as_member_probs(x: ArrayLike, name: str, kind: str) -> np.ndarray:
    """``x`` as an (M, N, C) stack of probabilities: one model's (N, C) array is M = 1; logits (``kind``) are
    checked (float, finite; the member and row named) and turned into probabilities by a float64 softmax."""
    from scipy.special import softmax

    from ..metrics._validation import check_logits, check_member_probs

    arr = np.asarray(x)
    if arr.ndim not in (2, 3):
        raise ValueError(f"{name} must have shape (n_members, n_samples, n_classes) or, for one model, "
                         f"(n_samples, n_classes); found ndim {arr.ndim}, shape {arr.shape}")
    arr = arr[None] if arr.ndim == 2 else arr
    if kind == "logits":
        for m in range(arr.shape[0]):
            check_logits(arr[m], f"{name}[{m}] (logits)")
        arr = softmax(arr.astype(np.float64), axis=-1)
    return check_member_probs(arr, name)


def score_arrays(member_probs: ArrayLike, labels: ArrayLike, *,
                 ood: ArrayLike | Mapping[str, ArrayLike] | None = None, protocol: Protocol | str = "pitfalls",
                 split: str = "test", method: str = "arrays", model: str = "unknown",
                 dataset: str = "unknown", kind: str = "probs", intervals: bool | None = None) -> dict:
    """Score in-memory predictions as ``ubench score`` scores an archive holding them; no file is read or written.

    Parameters
    ----------
    member_probs : ndarray of shape (n_members, n_samples, n_classes), or (n_samples, n_classes) for one model
        The in-domain split's predictions, one row per member and sample: float32 or float64 softmax outputs
        (rows on the simplex), or logits with ``kind="logits"``.
    labels : ndarray of shape (n_samples,), integers in ``[0, n_classes)``
    ood : ndarray of shape (n_members, n_ood, n_classes) or (n_ood, n_classes), or a mapping of split name to such
        arrays, optional
        Out-of-distribution predictions of the same kind (one array is named ``"ood"``), scored against ``split``.
    protocol : a preset name (``"pitfalls"``, ``"ursabench"``, ``"shift"``) or a :class:`Protocol`.
    split, method, model, dataset : the names the report gives the in-domain split and the predictions
        (``dataset`` also picks the decision-cost matrix under ``cost_preset="auto"``).
    kind : ``"probs"`` (default) or ``"logits"``: logits become probabilities by a softmax in float64 (noted in
        the report); never guessed from the values.
    intervals : as :func:`score_archive` (``None``: the protocol's setting, on in every preset).

    Returns
    -------
    dict
        The report of :func:`score_archive` (``scoring/REPORT_KEYS.md``), with ``archive.path``, ``sha256`` and
        ``format_version`` ``None``, ``labels.source`` ``"arrays"`` and ``limits`` ``None``.

    Raises
    ------
    TypeError, ValueError
        An array has the wrong dtype, shape or values; the message names it (``ood['far']``) and the first bad
        index.
    """
    from ..metrics._validation import check_labels, check_n_samples
    from ..metrics.report import ReportBuilder
    from ..metrics.report_sections import split_arrays
    from .blas import one_blas_thread

    protocol = _with_intervals(_as_protocol(protocol), intervals)
    if kind not in ("probs", "logits"):
        raise ValueError(f"kind must be 'probs' or 'logits'; found {kind!r}")
    probs = _as_member_probs(member_probs, "member_probs", kind)
    m, n, c = probs.shape
    y = check_labels(labels, c, "labels")
    check_n_samples(probs, "member_probs", y, "labels", a_axis=1)
    if ood is None:
        ood = {}
    elif not isinstance(ood, Mapping):
        ood = {"ood": ood}
    if split in ood:
        raise ValueError(f"ood split name {split!r} is the in-domain split's name")
    ood_probs = {}
    for name, arr in ood.items():
        what = f"ood[{name!r}]"
        arr = _as_member_probs(arr, what, kind)
        if arr.shape[0] != m or arr.shape[2] != c:
            raise ValueError(f"{what} must have shape ({m}, n_ood, {c}) like member_probs; found {arr.shape}")
        ood_probs[str(name)] = arr
    builder = ReportBuilder(protocol, n_members=m, n_classes=c, dataset=dataset, primary=split)
    builder.intervals.block_n = max([n, *(arr.shape[1] for arr in ood_probs.values())])
    if kind == "logits":
        builder.note("predictions given as logits (kind='logits'): scored as their softmax, taken in float64")
    with one_blas_thread():  # as score_archive: the same numbers to the last bit
        builder.add_in_domain(split, split_arrays(probs, smoothing=protocol.smoothing,
                                                  keep_members=builder.keep_members(split, n)), y)
        for name, arr in ood_probs.items():
            builder.add_ood(name, split_arrays(arr, smoothing=protocol.smoothing))
        body = builder.finish()
    splits = {split: {"role": "in_domain", "dataset": dataset, "n_samples": n, "shift_kind": None,
                      "shift_intensity": None, "sample_ids_sha256": None, "inputs_sha256": None,
                      "known_inputs": None}}
    splits.update({name: {"role": "ood", "dataset": name, "n_samples": arr.shape[1], "shift_kind": None,
                          "shift_intensity": None, "sample_ids_sha256": None, "inputs_sha256": None,
                          "known_inputs": None} for name, arr in ood_probs.items()})
    archive = {"path": None, "sha256": None, "format_version": None, "method": method, "model": model,
               "dataset": dataset, "n_classes": c, "n_members": m, "splits": splits}
    return _report(archive, {"source": "arrays", "reference": None}, protocol, None, body)
