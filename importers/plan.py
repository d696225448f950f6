# SPDX-License-Identifier: MIT
"""What every importer shares: kinds of stored outputs, their conversion to probabilities, and the atomic write.

An importer builds an :class:`ImportPlan`: the archive's metadata, its splits (``SplitSpec``) and an iterator of
members, each a mapping split name -> a *thunk* returning that member's raw (N, C) rows (a memory map, an h5py
dataset, rows streamed from an ``.npz``: anything with ``shape``, ``dtype`` and row slicing, read in order).
:func:`write_plan` converts each member ``CHUNK_ROWS`` rows at a time into a scratch file beside the output and
hands that to ``ArchiveWriter``, so memory holds one chunk, never a member, whatever the size of the source.

Untrusted sizes are judged before anything is read or written: every planner checks the archive its source
*declares* (members x samples x classes, from headers and shapes alone) against ``max_bytes``
(:data:`DEFAULT_MAX_BYTES`, ``ubench import --max-bytes``) before it reads labels, and :func:`write_plan` checks
the free disk, the process's file-size limit and the file system's largest file before it writes a byte.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import shutil
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..archive_schema import SplitSpec
from ..archive_schema.spec import ReadLimits, row_sum_tolerance
from ..archive_schema.writer import ArchiveWriter, partial_dir_for
from .kinds import KINDS, ImportFailure

__all__ = ["KINDS", "ImportFailure", "ImportWriteError", "ImportPlan", "Member", "to_probs", "write_plan",
           "load_labels", "check_labels", "check_declared", "label_shape_problem", "DEFAULT_MAX_BYTES"]

#: Rows converted at a time (float64 scratch of CHUNK_ROWS x C).
CHUNK_ROWS = 4096
#: The largest archive an import writes unless told otherwise: what the safe reader reads at most
#: (``ReadLimits.max_total_bytes``, 32 GiB of declared probabilities), so no import writes a file ubench refuses.
DEFAULT_MAX_BYTES = ReadLimits().max_total_bytes
#: A member's split up to this size is converted in memory; a larger one into a scratch file (memory-mapped).
IN_MEMORY_BYTES = 16 * 2**20
#: Disk kept free beyond the estimate (HDF5 metadata, labels, the header file).
_DISK_SLACK = 16 * 2**20


class ImportWriteError(ImportFailure):
    """Writing the archive failed (disk full, file too large, …). ``hdf5_stuck``: libhdf5 still holds a file it
    could not close; such a process must end without libhdf5's exit handler (h5py#914: it crashes there)."""

    def __init__(self, message: str, hdf5_stuck: bool = False):
        super().__init__(message)
        self.hdf5_stuck = hdf5_stuck


@dataclass
class Member:
    """One member: ``arrays[split]()`` returns its raw (N, C) array; ``where[split]`` names it in messages."""

    arrays: Mapping[str, Callable[[], Any]]
    where: Mapping[str, str]
    seed: int = -1
    kind: str = "independent"
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class ImportPlan:
    """Everything :func:`write_plan` needs; ``config`` records every inferred value (stored in the archive)."""

    method: str
    model: str
    dataset: str
    n_classes: int
    splits: dict[str, SplitSpec]
    members: Iterable[Member]
    stored_kind: str
    config: dict[str, Any]
    dtype: Any = np.float32
    notes: list[str] = field(default_factory=list)
    #: Method scores (format 1.1, SPEC.md §4.4): name -> ({split: (N,) values}, direction).
    scores: dict[str, tuple[dict[str, Any], str]] = field(default_factory=dict)
    #: M, known from the sources' shapes before any member is read (the size checks need it)
    n_members: int | None = None


def _size(nbytes: int) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} bytes"


def archive_bytes(n_members: int, sizes: Iterable[int], n_classes: int, itemsize: int) -> int:
    """Bytes of probabilities an archive of M members, splits of ``sizes`` samples and C classes holds (Python
    integers: a hostile shape of 2**32 x 2**32 x 2**32 must not wrap around to 0 as a product in int64 does)."""
    return int(n_members) * sum(int(n) for n in sizes) * int(n_classes) * int(itemsize)


def check_declared(where: str, n_members: int, sizes: Mapping[str, int], n_classes: int, itemsize: int,
                   max_bytes: int) -> int:
    """The archive ``where`` declares, in bytes; ``ImportFailure`` when it exceeds ``max_bytes``.

    Called by every planner as soon as the shapes are known, before labels or values are read.
    """
    total = archive_bytes(n_members, sizes.values(), n_classes, itemsize)
    if total > max_bytes:
        shape = " + ".join(f"{name} {n}" for name, n in sizes.items())
        raise ImportFailure(f"{where}: declares {n_members} member(s) x ({shape}) samples x {n_classes} classes = "
                            f"{total} bytes ({_size(total)}) of probabilities; the limit is {max_bytes} "
                            f"({_size(max_bytes)}; raise it with --max-bytes if this is what you mean)")
    return total


def _check_room(out: Path, total: int, member: int) -> None:
    """Refuse before writing when ``out``'s directory cannot hold the import: the finished members and the
    archive assembled from them (2 x ``total``) plus one member's scratch file; the process's ``RLIMIT_FSIZE``
    and the file system's largest file against the largest file written (the archive)."""
    need = 2 * total + member + _DISK_SLACK
    free = shutil.disk_usage(out.parent).free
    if need > free:
        raise ImportFailure(f"{out}: the import needs about {_size(need)} of disk (its members, then the archive "
                            f"assembled from them: 2 x {_size(total)}), but {out.parent} has {_size(free)} free")
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft != resource.RLIM_INFINITY and total > soft:
        raise ImportFailure(f"{out}: the archive holds {total} bytes of probabilities, but this process may "
                            f"write files of at most {soft} bytes (its file-size limit, `ulimit -f`)")
    with contextlib.suppress(OSError, ValueError):
        bits = os.pathconf(out.parent, "PC_FILESIZEBITS")
        if 0 < bits < 64 and total >= 2 ** (bits - 1):
            raise ImportFailure(f"{out}: the archive holds {total} bytes of probabilities; the file system of "
                                f"{out.parent} holds files of less than {2 ** (bits - 1)} bytes")


def to_probs(raw: Any, kind: str, where: str, out: np.ndarray | None = None) -> np.ndarray:
    """Probabilities of one member's (N, C) ``raw`` rows holding ``kind``, converted ``CHUNK_ROWS`` rows at a time
    (``raw`` is sliced in order, ``raw[0:k]``, ``raw[k:2k]``, …, so it may be a stream).

    ``logits``: softmax ``exp(z - max z) / sum exp(z - max z)``; ``log-probs``: ``exp(l)``, which must then sum to 1
    like probabilities (so logits claimed as log-probabilities fail); ``probs``: as stored. Computed in float64;
    every value must be finite, probabilities in [0, 1] and rows must sum to 1 within SPEC.md §4's tolerance.
    Claimed ``logits`` that lie exactly on the simplex (every value in [0, 1], every row summing to 1 within that
    tolerance) are probabilities, and refused: their softmax would be a flattened, wrong distribution.
    Raises ``ImportFailure`` naming ``where`` and the first bad sample.
    """
    if kind not in KINDS:
        raise ImportFailure(f"kind must be one of {', '.join(KINDS)}; found {kind!r}")
    shape = tuple(raw.shape)
    if len(shape) != 2:
        raise ImportFailure(f"{where}: expected one member's (N, C) array; found shape {shape}")
    if np.dtype(raw.dtype).kind != "f":
        raise ImportFailure(f"{where}: expected floating-point {kind}; found dtype {raw.dtype}")
    n, c = shape
    if c < 2:
        raise ImportFailure(f"{where}: expected at least 2 classes; found shape {shape}")
    if out is None:
        out = np.empty((n, c), dtype=np.float32 if np.dtype(raw.dtype).itemsize <= 4 else np.float64)
    tol = row_sum_tolerance(c)
    on_simplex, worst = kind == "logits" and n > 0, 0.0  # logits that are probabilities (issue #28 item 2)
    for start in range(0, n, CHUNK_ROWS):
        block = np.array(raw[start:start + CHUNK_ROWS], dtype=np.float64)  # a copy: converted in place
        if block.shape != (min(CHUNK_ROWS, n - start), c):
            raise ImportFailure(f"{where}: rows {start}.. have shape {block.shape}; expected ({n}, {c}) in all")
        bad = ~np.isfinite(block)
        if kind == "log-probs":
            bad |= block > 0  # log p <= 0 (a finite log-probability); -inf is p = 0 and allowed
            bad &= ~(block == -np.inf)
        if bad.any():
            i, j = np.unravel_index(int(np.argmax(bad)), bad.shape)
            finite = np.isfinite(block[i, j])
            what = "a log-probability above 0" if kind == "log-probs" and finite else "non-finite value"
            raise ImportFailure(f"{where}: {what} {block[i, j]} at sample {start + i}, class {j} "
                                f"(claimed --kind {kind})")
        if on_simplex:
            deviation = np.abs(block.sum(axis=1) - 1.0).max()
            on_simplex = bool(block.min() >= 0 and block.max() <= 1 and deviation <= tol)
            worst = max(worst, float(deviation))
        if kind == "logits":
            block -= block.max(axis=1, keepdims=True)
            np.exp(block, out=block)
            block /= block.sum(axis=1, keepdims=True)
        elif kind == "log-probs":
            np.exp(block, out=block)
        sums = block.sum(axis=1)
        off = np.abs(sums - 1.0) > tol
        if off.any():
            i = int(np.argmax(off))
            hint = {"probs": "logits? pass --kind logits", "log-probs": "logits? pass --kind logits"}.get(kind, "")
            raise ImportFailure(f"{where}: rows do not sum to 1: row {start + i} sums to {sums[i]:.6g} "
                                f"(claimed --kind {kind}; tolerance {tol:.1e}){'; ' + hint if hint else ''}")
        if kind == "probs":
            outside = (block < 0) | (block > 1)
            if outside.any():
                i, j = np.unravel_index(int(np.argmax(outside)), outside.shape)
                raise ImportFailure(f"{where}: value {block[i, j]} outside [0, 1] at sample {start + i}, "
                                    f"class {j}: these are not probabilities (logits? pass --kind logits)")
        out[start:start + len(block)] = block
    if on_simplex:
        raise ImportFailure(f"{where}: claimed --kind logits, but all {n} rows are probabilities: every value lies "
                            f"in [0, 1] and every row sums to 1 (largest |sum - 1| {worst:.1e}, tolerance "
                            f"{tol:.1e}); their softmax would flatten them (pass --kind probs)")
    return out


def label_shape_problem(shape: tuple, dtype: Any, n: int | None) -> str | None:
    """Why an array of this *declared* ``shape`` and ``dtype`` cannot hold the labels of ``n`` samples, or None.

    Judged from a header alone, before a byte of the array is read or decompressed."""
    dtype = np.dtype(dtype)
    if len(shape) != 1 or dtype.kind not in "iuf":
        return f"labels must be a 1-d integer array; found dtype {dtype}, shape {tuple(shape)}"
    if n is not None and shape[0] != n:
        return f"{shape[0]} labels for {n} samples"
    return None


def load_labels(path: str | Path, key: str | None = None, n: int | None = None) -> np.ndarray:
    """Integer labels from a ``.npy`` (memory-mapped), a ``.npz`` (key ``key`` or its only / ``labels`` array),
    a ``.pt`` (loaded with ``weights_only=True``) or a text file of one integer per line.

    With ``n`` (the samples the labels are for) the declared shape is checked before any value is read or
    decompressed, and a text file longer than ``n`` lines could be is refused from its size.
    """
    path = Path(path)
    try:
        if path.suffix == ".npy":
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
            _check_label_shape(str(path), arr.shape, arr.dtype, n)
        elif path.suffix == ".npz":
            from .npz import NpzStream, npz_keys

            names = npz_keys(path)
            name = key or ("labels" if "labels" in names else names[0] if len(names) == 1 else None)
            if name is None or name not in names:
                raise ImportFailure(f"{path}: which array holds the labels? it has {names}; "
                                    "name one with --labels-key")
            stream = NpzStream(path, name)
            try:
                _check_label_shape(stream.where, stream.shape, stream.dtype, n)
                arr = stream.read_all()
            finally:
                stream.close()
        elif path.suffix in (".pt", ".pth"):
            from .torch_pt import load_pt, numpy_dtype
            arr = load_pt(path)
            if isinstance(arr, dict):
                name = key or "labels"
                if name not in arr:
                    raise ImportFailure(f"{path}: no key {name!r} (keys {sorted(arr)})")
                arr = arr[name]
            _check_label_shape(str(path), tuple(arr.shape), numpy_dtype(arr), n)
            arr = arr.numpy()
        else:
            size = path.stat().st_size
            if n is not None and size > 24 * n + 4096:  # an int64 and a line break in at most 24 characters
                raise ImportFailure(f"{path}: {size} bytes are more than {n} labels of one integer per line")
            arr = np.loadtxt(path, dtype=np.int64, ndmin=1)
    except (OSError, ValueError, TypeError) as exc:
        raise ImportFailure(f"{path}: cannot read labels ({exc})") from exc
    arr = np.asarray(arr)
    if arr.dtype.kind == "f" and np.all(arr == np.round(arr)):
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu" or arr.ndim != 1:
        raise ImportFailure(f"{path}: labels must be a 1-d integer array; found dtype {arr.dtype}, shape {arr.shape}")
    return arr.astype(np.int64)


def _check_label_shape(where: str, shape: tuple, dtype: Any, n: int | None) -> None:
    problem = label_shape_problem(tuple(shape), dtype, n)
    if problem is not None:
        raise ImportFailure(f"{where}: {problem}")


def check_labels(labels: np.ndarray, n_classes: int, n: int, where: str) -> np.ndarray:
    """Labels must have N entries in [0, C); the message names the first bad index."""
    if len(labels) != n:
        raise ImportFailure(f"{where}: {len(labels)} labels for {n} samples")
    bad = (labels < 0) | (labels >= n_classes)
    if bad.any():
        i = int(np.argmax(bad))
        raise ImportFailure(f"{where}: label {labels[i]} at index {i} is outside [0, {n_classes})")
    return labels


def _hdf5_objects() -> int:
    """Files, groups and datasets libhdf5 holds open in this process."""
    from ..archive_schema.safe_h5py import h5py

    f = h5py.h5f
    return f.get_obj_count(f.OBJ_ALL, types=f.OBJ_FILE | f.OBJ_DATASET | f.OBJ_GROUP)


def _os_reason(exc: BaseException) -> str:
    """A write failure in a few words: libhdf5 buries the errno in a long text (``errno = 28, error message =
    'No space left on device'``)."""
    text = str(exc)
    m = re.search(r"errno = (\d+)", text)
    if m:
        return f"{os.strerror(int(m.group(1)))} (errno {m.group(1)})"
    if isinstance(exc, OSError) and exc.errno:
        return f"{os.strerror(exc.errno)} (errno {exc.errno})"
    return text.strip().splitlines()[0][:200] if text.strip() else type(exc).__name__


@contextlib.contextmanager
def _write_step(what: str, errors: list[BaseException], before: int):
    """Turn an OSError/RuntimeError of the writer (h5py's for a full disk or a file over the size limit) into one
    :class:`ImportWriteError` naming ``what`` was being written."""
    try:
        yield
    except (OSError, RuntimeError) as exc:
        cause = errors[0] if errors else exc
        raise ImportWriteError(f"{what} failed: {_os_reason(cause)}",
                               hdf5_stuck=_hdf5_objects() > before) from exc


def _scratch(writer: ArchiveWriter, name: str, shape: tuple[int, int], dtype: Any) -> np.ndarray:
    """A member's converted probabilities for one split: in memory up to ``IN_MEMORY_BYTES``, else in a file of the
    writer's scratch directory (so memory holds a chunk, not the member; the page cache may drop written pages).
    Its blocks are allocated up front (``posix_fallocate``): a full disk is an ``OSError`` here, not a SIGBUS when
    a page of the mapping is written."""
    nbytes = max(1, shape[0] * shape[1] * np.dtype(dtype).itemsize)
    if nbytes <= IN_MEMORY_BYTES:
        return np.empty(shape, dtype=dtype)
    path = writer.scratch_dir / f"import-{name}.bin"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.posix_fallocate(fd, 0, nbytes)
    finally:
        os.close(fd)
    return np.memmap(path, dtype=dtype, mode="r+", shape=shape)


def write_plan(plan: ImportPlan, out: str | Path, *, overwrite: bool = False,
               echo: Callable[[str], None] | None = None, max_bytes: int = DEFAULT_MAX_BYTES) -> Path:
    """Write ``plan`` to ``out`` member by member; atomic: on any failure nothing is left at ``out``.

    Before anything is written, the declared archive is checked against ``max_bytes`` and against the room there
    is (free disk, ``RLIMIT_FSIZE``, the file system's largest file). The writer keeps finished members in
    ``<out>.partial/`` and assembles ``out`` under a temporary name in its directory (fsync, rename); a failure
    removes the partial directory, so neither a half-written archive nor a stale sidecar remains. A failed write
    (disk full, file too large) raises :class:`ImportWriteError` naming the member and split.
    """
    out = Path(out)
    partial = partial_dir_for(out)
    if out.exists() and not overwrite:
        raise ImportFailure(f"{out} already exists; pass --overwrite or choose another --out")
    if partial.exists():
        raise ImportFailure(f"{partial} exists (an unfinished run?); remove it first")
    if not out.parent.is_dir():
        raise ImportFailure(f"{out.parent} is not a directory")
    itemsize = np.dtype(plan.dtype).itemsize
    sizes = {name: spec.resolved_n_samples(name) for name, spec in plan.splits.items()}
    if plan.n_members is not None:
        total = check_declared(str(out), plan.n_members, sizes, plan.n_classes, itemsize, max_bytes)
        _check_room(out, total, archive_bytes(1, sizes.values(), plan.n_classes, itemsize))
    for line in plan.notes:
        if echo:
            echo(f"note: {line}")
    if echo:
        for key, value in plan.config.items():
            echo(f"inferred {key}: {value}")
    writer = None
    before = _hdf5_objects()
    errors: list[BaseException] = []
    hook = sys.unraisablehook

    def collect(unraisable) -> None:  # h5py reports a failed close from __dealloc__: part of this failure
        if isinstance(unraisable.exc_value, (OSError, RuntimeError)):
            errors.append(unraisable.exc_value)
        else:
            hook(unraisable)

    def collect_printed(kind, value, tb) -> None:  # Cython prints the same failure through sys.excepthook first
        if isinstance(value, (OSError, RuntimeError)):
            errors.append(value)
        else:
            excepthook(kind, value, tb)

    excepthook = sys.excepthook
    sys.unraisablehook, sys.excepthook = collect, collect_printed
    try:
        with _write_step(f"writing {out}", errors, before):
            writer = ArchiveWriter(out, method=plan.method, model=plan.model, dataset=plan.dataset,
                                   n_classes=plan.n_classes, splits=plan.splits, config=plan.config,
                                   framework="ubench-import", dtype=plan.dtype, overwrite=overwrite,
                                   description="; ".join(plan.notes))
        for m, member in enumerate(plan.members):
            if plan.n_members is not None and m >= plan.n_members:
                raise ImportFailure(f"{', '.join(member.where.values())}: more members than the {plan.n_members} "
                                    "declared")
            probs = {}
            for name, thunk in member.arrays.items():
                with _write_step(f"writing member {m}, split {name} of {out}", errors, before):
                    probs[name] = _scratch(writer, name, (sizes[name], plan.n_classes), plan.dtype)
                to_probs(thunk(), plan.stored_kind, member.where[name], out=probs[name])
            with _write_step(f"writing member {m} of {out}", errors, before):
                writer.add_member(probs, seed=member.seed, kind=member.kind, info=member.info)
            del probs
            if echo:
                echo(f"member {m}: {', '.join(f'{k}={v}' for k, v in member.where.items())}")
        if writer.n_members == 0:
            raise ImportFailure("no member to import")
        for name, (values, direction) in plan.scores.items():
            writer.set_scores(name, values, direction=direction)
        with _write_step(f"assembling {out} from its {writer.n_members} member(s)", errors, before):
            writer.finalize()
    except BaseException:
        with contextlib.suppress(OSError):
            shutil.rmtree(partial)
        raise
    finally:
        sys.unraisablehook, sys.excepthook = hook, excepthook
    return out
