# SPDX-License-Identifier: MIT
"""What every importer shares: kinds of stored outputs, their conversion to probabilities, and the atomic write.

An importer builds an :class:`ImportPlan`: the archive's metadata, its splits (``SplitSpec``) and an iterator of
members, each a mapping split name -> a *thunk* returning that member's raw (N, C) array (a memory map, an h5py
slice, one ``.npy`` of a list). :func:`write_plan` converts each member in row chunks of at most
``CHUNK_ROWS`` rows, checks it, and hands it to ``ArchiveWriter``, so at most one member's probabilities (plus one
chunk in float64) are in memory, whatever the size of the source.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..archive_schema import SplitSpec
from ..archive_schema.spec import row_sum_tolerance
from ..archive_schema.writer import ArchiveWriter, partial_dir_for
from .kinds import KINDS, ImportFailure

__all__ = ["KINDS", "ImportFailure", "ImportPlan", "Member", "to_probs", "write_plan", "load_labels"]

#: Rows converted at a time (float64 scratch of CHUNK_ROWS x C).
CHUNK_ROWS = 4096


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


def to_probs(raw: Any, kind: str, where: str, out: np.ndarray | None = None) -> np.ndarray:
    """Probabilities of one member's (N, C) ``raw`` array holding ``kind``, converted ``CHUNK_ROWS`` rows at a time.

    ``logits``: softmax ``exp(z - max z) / sum exp(z - max z)``; ``log-probs``: ``exp(l)``, which must then sum to 1
    like probabilities (so logits claimed as log-probabilities fail); ``probs``: as stored. Computed in float64;
    every value must be finite, probabilities in [0, 1] and rows must sum to 1 within SPEC.md §4's tolerance.
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
    for start in range(0, n, CHUNK_ROWS):
        block = np.array(raw[start:start + CHUNK_ROWS], dtype=np.float64)  # a copy: converted in place
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
    return out


def load_labels(path: str | Path, key: str | None = None) -> np.ndarray:
    """Integer labels from a ``.npy`` (memory-mapped), a ``.npz`` (key ``key`` or its only / ``labels`` array),
    a ``.pt`` (loaded with ``weights_only=True``) or a text file of one integer per line."""
    path = Path(path)
    try:
        if path.suffix == ".npy":
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        elif path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as z:
                names = list(z.files)
                name = key or ("labels" if "labels" in names else names[0] if len(names) == 1 else None)
                if name is None or name not in names:
                    raise ImportFailure(f"{path}: which array holds the labels? it has {names}; "
                                        "name one with --labels-key")
                arr = z[name]
        elif path.suffix in (".pt", ".pth"):
            from .torch_pt import load_pt
            arr = load_pt(path)
            if isinstance(arr, dict):
                name = key or "labels"
                if name not in arr:
                    raise ImportFailure(f"{path}: no key {name!r} (keys {sorted(arr)})")
                arr = arr[name]
            arr = arr.numpy()
        else:
            arr = np.loadtxt(path, dtype=np.int64, ndmin=1)
    except (OSError, ValueError) as exc:
        raise ImportFailure(f"{path}: cannot read labels ({exc})") from exc
    arr = np.asarray(arr)
    if arr.dtype.kind == "f" and np.all(arr == np.round(arr)):
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu" or arr.ndim != 1:
        raise ImportFailure(f"{path}: labels must be a 1-d integer array; found dtype {arr.dtype}, shape {arr.shape}")
    return arr.astype(np.int64)


def check_labels(labels: np.ndarray, n_classes: int, n: int, where: str) -> np.ndarray:
    """Labels must have N entries in [0, C); the message names the first bad index."""
    if len(labels) != n:
        raise ImportFailure(f"{where}: {len(labels)} labels for {n} samples")
    bad = (labels < 0) | (labels >= n_classes)
    if bad.any():
        i = int(np.argmax(bad))
        raise ImportFailure(f"{where}: label {labels[i]} at index {i} is outside [0, {n_classes})")
    return labels


def write_plan(plan: ImportPlan, out: str | Path, *, overwrite: bool = False,
               echo: Callable[[str], None] | None = None) -> Path:
    """Write ``plan`` to ``out`` member by member; atomic: on any failure nothing is left at ``out``.

    The writer keeps finished members in ``<out>.partial/`` and assembles ``out`` under a temporary name in its
    directory (fsync, rename); a failure removes the partial directory, so neither a half-written archive nor a
    stale sidecar remains.
    """
    out = Path(out)
    partial = partial_dir_for(out)
    if out.exists() and not overwrite:
        raise ImportFailure(f"{out} already exists; pass --overwrite or choose another --out")
    if partial.exists():
        raise ImportFailure(f"{partial} exists (an unfinished run?); remove it first")
    if not out.parent.is_dir():
        raise ImportFailure(f"{out.parent} is not a directory")
    for line in plan.notes:
        if echo:
            echo(f"note: {line}")
    if echo:
        for key, value in plan.config.items():
            echo(f"inferred {key}: {value}")
    writer = None
    try:
        writer = ArchiveWriter(out, method=plan.method, model=plan.model, dataset=plan.dataset,
                               n_classes=plan.n_classes, splits=plan.splits, config=plan.config,
                               framework="ubench-import", dtype=plan.dtype, overwrite=overwrite,
                               description="; ".join(plan.notes))
        for m, member in enumerate(plan.members):
            probs = {name: to_probs(thunk(), plan.stored_kind, member.where[name], out=np.empty(
                (plan.splits[name].resolved_n_samples(name), plan.n_classes), dtype=plan.dtype))
                for name, thunk in member.arrays.items()}
            writer.add_member(probs, seed=member.seed, kind=member.kind, info=member.info)
            del probs
            if echo:
                echo(f"member {m}: {', '.join(f'{k}={v}' for k, v in member.where.items())}")
        if writer.n_members == 0:
            raise ImportFailure("no member to import")
        for name, (values, direction) in plan.scores.items():
            writer.set_scores(name, values, direction=direction)
        writer.finalize()
    except BaseException:
        with contextlib.suppress(OSError):
            shutil.rmtree(partial)
        raise
    return out
