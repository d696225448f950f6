# SPDX-License-Identifier: MIT
"""The one archive writer: members appended one at a time, each durable before ``add_member`` returns.

While a run is in progress its state lives in a sidecar directory ``<out>.partial/``:

``header.h5``
    root attributes, splits, labels, sample ids and class names (written once, atomically), plus the run's
    ``fingerprint`` (a hash of everything that defines the run).
``members/000000.h5``, ``000001.h5``, …
    one file per finished member, each written under a temporary name, fsync'd and renamed into place.
``scalability.json``, ``scratch/``
    optional scalability metadata, and room for the producer's own checkpoints.

A process killed at any moment therefore leaves every finished member intact. Constructing a writer for the same
output and the same configuration resumes after the last finished member; ``finalize`` assembles ``<out>``
(temporary name in the same directory, then rename) and removes the sidecar. ``finalize_partial`` does the same for
a partial run whose producer will not come back (``ubench finalize``).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .. import __version__
from .archive import SplitSpec
from .durable import atomic_path, fsync_dir
from .errors import ArchiveError
from .fingerprint import SHA256_HEX
from .safe_h5py import h5py
from .logit_scores import logits_problem, scores_problem
from .spec import (CURRENT, DIAGNOSTICS_VERSION, LOGIT_DTYPES, MEMBER_KINDS, RESERVED_SCORE_NAMES, SCORE_DIRECTIONS,
                   SPLIT_NAME, V1_0, duplicate_shift_message, is_score_name, is_split_name)
from .validator import probs_problem

__all__ = ["ArchiveWriter", "finalize_partial", "partial_dir_for", "chunk_shape", "DEFAULT_CHUNK_BYTES"]

#: Target uncompressed chunk size of ``probs``, capped so that the M chunks of one block of samples fit HDF5's
#: default 8 MiB chunk cache; see SPEC.md §7 for the measurements behind both numbers.
DEFAULT_CHUNK_BYTES = 256 * 2**10
CHUNK_CACHE_BYTES = 8 * 2**20
#: deflate level of ``probs`` (with the shuffle filter) when compression is asked for; see SPEC.md §7.
DEFAULT_DEFLATE = 1
#: Bytes of one member checked, or copied into the assembled archive, at a time (whole chunks; at least one row),
#: so writing holds a block in memory, not a member (an import streams members larger than memory).
BLOCK_BYTES = 8 * 2**20


def partial_dir_for(path: str | Path) -> Path:
    """The sidecar directory that holds an unfinished run of ``path``."""
    path = Path(path)
    return path.with_name(path.name + ".partial")


def chunk_shape(n_samples: int, n_classes: int, itemsize: int, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> tuple:
    """Chunks of one member by a run of whole samples: ``(1, rows, C)`` with ``rows * C * itemsize ~ chunk_bytes``.

    A producer's member is one chunk row; the scorer's block of samples across all members reads M chunks.
    """
    rows = max(1, min(n_samples, chunk_bytes // max(1, n_classes * itemsize)))
    return (1, rows, n_classes)


def _json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _sha(arr: np.ndarray | None) -> str | None:
    return None if arr is None else hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()


class ArchiveWriter:
    """Write a prediction archive member by member (resuming an unfinished run of the same configuration).

    Parameters
    ----------
    path : output archive path; must not exist unless ``overwrite``.
    method, model, dataset : what produced the predictions (``dataset`` is the benchmark id).
    n_classes : number of classes C.
    splits : mapping of split name to ``SplitSpec``; every member gives predictions for every split.
    class_names : optional C names.
    config : JSON-serialisable hyperparameters of the run, stored verbatim.
    framework, framework_version, description : provenance strings.
    dtype : float32 (default) or float64 storage of the probabilities.
    compression : ``None`` (default: softmax floats compress only ~1.2x and deflate makes scoring ~10x slower to
        read; SPEC.md §7) or ``"deflate"`` (shuffle + deflate level 1) where file size matters more.
    overwrite : replace an existing finished archive at ``path``.

    Examples
    --------
    >>> w = ArchiveWriter("run.h5", method="sgd", model="mlp", dataset="digits", n_classes=10,
    ...                   splits={"test": SplitSpec(role="in_domain", dataset="digits", labels=y)})  # doctest: +SKIP
    >>> for k in range(w.n_members, 5):                                                              # doctest: +SKIP
    ...     w.add_member({"test": predict(k)}, seed=k)
    >>> w.finalize()                                                                                 # doctest: +SKIP
    """

    def __init__(
        self,
        path: str | Path,
        *,
        method: str,
        model: str,
        dataset: str,
        n_classes: int,
        splits: Mapping[str, SplitSpec],
        class_names: list[str] | tuple[str, ...] | None = None,
        config: Mapping[str, Any] | None = None,
        framework: str = "",
        framework_version: str = "",
        description: str = "",
        dtype: type | np.dtype = np.float32,
        compression: str | None = None,
        overwrite: bool = False,
    ):
        self.path = Path(path)
        self.partial_dir = partial_dir_for(self.path)
        dtype = np.dtype(dtype)
        if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise ValueError(f"dtype must be float32 or float64; found {dtype} (float16 destroys small probabilities)")
        if compression not in ("deflate", None):
            raise ValueError(f"compression must be 'deflate' or None; found {compression!r}")
        if int(n_classes) < 2:
            raise ValueError(f"n_classes must be at least 2; found {n_classes}")
        if not splits:
            raise ValueError("splits must name at least one split")
        if class_names is not None and len(class_names) != n_classes:
            raise ValueError(f"class_names has {len(class_names)} names but n_classes is {n_classes}")
        self.n_classes = int(n_classes)
        self.dtype = dtype
        self.compression = compression
        self._splits: dict[str, tuple[SplitSpec, int, np.ndarray | None, np.ndarray | None]] = {}
        for name, spec in splits.items():
            if not is_split_name(name):  # also refuses "." (HDF5 reads it as the group itself) and "test\n"
                raise ValueError(f"split name {name!r} must match {SPLIT_NAME.pattern} and not be '.'")
            spec.check(name)
            n = spec.resolved_n_samples(name)
            labels = None if spec.labels is None else _checked_labels(spec.labels, self.n_classes, name)
            ids = None if spec.sample_ids is None else np.asarray(spec.sample_ids)
            if ids is not None:
                if ids.dtype.kind not in "iu" or ids.ndim != 1:
                    raise ValueError(f"sample_ids of split {name!r} must be a 1-d integer array")
                ids = ids.astype(np.int64)
                if len(np.unique(ids)) != len(ids):
                    raise ValueError(f"sample_ids of split {name!r} must be unique")
            if spec.inputs_sha256 is not None and not SHA256_HEX.match(str(spec.inputs_sha256)):
                raise ValueError(f"inputs_sha256 of split {name!r} must be 64 lower-case hex digits "
                                 "(archive_schema.fingerprint.inputs_sha256)")
            self._splits[name] = (spec, n, labels, ids)
        dup = duplicate_shift_message((name, spec.shift_kind, spec.shift_intensity)
                                      for name, (spec, *_rest) in self._splits.items() if spec.role == "shift")
        if dup is not None:
            raise ValueError(dup[1])
        self._attrs = {
            "ubench_format": CURRENT.format,
            "ubench_format_version": CURRENT.version,
            "method": str(method),
            "model": str(model),
            "dataset": str(dataset),
            "n_classes": self.n_classes,
            "writer": f"ubench {__version__}",
            "framework": str(framework),
            "framework_version": str(framework_version),
            "config": _json(dict(config or {})),
            "description": str(description),
        }
        self.class_names = None if class_names is None else [str(c) for c in class_names]
        self.fingerprint = self._fingerprint()
        self._finalized = False
        if self.path.exists() and not overwrite and not self.partial_dir.exists():
            raise ArchiveError(f"{self.path} already exists; choose another output or replace it with --overwrite")
        if self.partial_dir.exists():
            self._resume()
        else:
            self._start()

    # -- set-up -------------------------------------------------------------------------------------------------
    def _fingerprint(self) -> str:
        body = {k: v for k, v in self._attrs.items() if k not in ("writer", "framework_version")}
        body["dtype"] = self.dtype.str
        body["class_names"] = self.class_names
        body["splits"] = {
            name: {
                "role": spec.role,
                "dataset": spec.dataset,
                "n_samples": n,
                "shift_kind": spec.shift_kind,
                "shift_intensity": None if spec.shift_intensity is None else float(spec.shift_intensity),
                "labels": _sha(labels),
                "sample_ids": _sha(ids),
                **({"inputs_sha256": spec.inputs_sha256} if spec.inputs_sha256 is not None else {}),
            }
            for name, (spec, n, labels, ids) in self._splits.items()
        }
        return hashlib.sha256(_json(body).encode()).hexdigest()

    def _start(self) -> None:
        self.partial_dir.mkdir(parents=True)
        (self.partial_dir / "members").mkdir()
        (self.partial_dir / "scratch").mkdir()
        try:
            with atomic_path(self.partial_dir / "header.h5") as tmp, h5py.File(tmp, "w") as f:
                f.attrs["fingerprint"] = self.fingerprint
                f.attrs["created"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
                self._write_header(f)
        except BaseException:
            # e.g. a string HDF5 cannot store: without a header the directory would only block the next run
            shutil.rmtree(self.partial_dir, ignore_errors=True)
            raise
        fsync_dir(self.partial_dir.parent)
        self.n_members = 0

    def _resume(self) -> None:
        header = self.partial_dir / "header.h5"
        try:
            with h5py.File(header, "r") as f:
                found = f.attrs.get("fingerprint")
        except (OSError, KeyError) as exc:
            raise ArchiveError(f"{header} is unreadable ({exc}); remove {self.partial_dir} to start over") from exc
        if found != self.fingerprint:
            raise ArchiveError(
                f"{self.partial_dir} holds an unfinished run with a different configuration "
                "(method, model, data, splits, labels or hyperparameters differ); remove it to start over, "
                "or choose another output"
            )
        self.n_members = len(_finished_members(self.partial_dir))
        (self.partial_dir / "scratch").mkdir(exist_ok=True)

    def _write_header(self, f: h5py.File) -> None:
        for key, value in self._attrs.items():
            f.attrs[key] = value
        if self.class_names is not None:
            f.create_dataset("classes", data=np.array(self.class_names, dtype=h5py.string_dtype()))
        splits = f.create_group("splits")
        splits.attrs["ubench_kind"] = "splits"
        for name, (spec, n, labels, ids) in self._splits.items():
            g = splits.create_group(name)
            g.attrs["ubench_kind"] = "split"
            g.attrs["role"] = spec.role
            g.attrs["dataset"] = str(spec.dataset)
            g.attrs["n_samples"] = np.int64(n)
            if spec.role == "shift":
                g.attrs["shift_kind"] = str(spec.shift_kind)
                g.attrs["shift_intensity"] = np.float64(spec.shift_intensity)
            if spec.inputs_sha256 is not None:
                g.attrs["inputs_sha256"] = str(spec.inputs_sha256)
            if labels is not None:
                g.create_dataset("labels", data=labels)
            if ids is not None:
                g.create_dataset("sample_ids", data=ids)

    # -- the member loop ----------------------------------------------------------------------------------------
    @property
    def scratch_dir(self) -> Path:
        """A directory for the producer's own checkpoints; removed by ``finalize``."""
        return self.partial_dir / "scratch"

    def add_member(
        self,
        probs: Mapping[str, ArrayLike],
        *,
        seed: int,
        epoch: int = -1,
        step: int = -1,
        kind: str = "independent",
        info: Mapping[str, Any] | None = None,
        logits: Mapping[str, ArrayLike] | None = None,
    ) -> int:
        """Append one member (an (N, C) probability array for every split); returns its index once durable.

        ``logits`` (format 1.1, SPEC.md §4.3): optionally the member's (N, C) logits for every split (float16, 32 or
        64), whose softmax must be ``probs``; every member of an archive has logits or none has.
        """
        if self._finalized:
            raise ArchiveError("the archive is finalized; no more members can be added")
        if kind not in MEMBER_KINDS:
            raise ValueError(f"kind must be one of {MEMBER_KINDS}; found {kind!r}")
        if set(probs) != set(self._splits):
            raise ValueError(
                f"probs must have exactly the splits {sorted(self._splits)}; found {sorted(probs)}"
            )
        index = self.n_members
        checked = {name: _checked_probs(probs[name], name, (n, self.n_classes), index).astype(self.dtype, copy=False)
                   for name, (_, n, _, _) in self._splits.items()}
        checked_logits = self._checked_logits(logits, checked, index)
        target = self.partial_dir / "members" / f"{index:06d}.h5"
        with atomic_path(target) as tmp, h5py.File(tmp, "w") as f:
            f.attrs.update({"seed": np.int64(seed), "epoch": np.int64(epoch), "step": np.int64(step), "kind": kind})
            f.attrs["info"] = _json(dict(info or {}))
            for name, arr in checked.items():
                f.create_dataset(f"probs/{name}", data=arr)
            for name, arr in (checked_logits or {}).items():
                f.create_dataset(f"logits/{name}", data=arr)
        self.n_members = index + 1
        return index

    def _checked_logits(self, logits: Mapping[str, ArrayLike] | None, probs: Mapping[str, np.ndarray], index: int
                        ) -> dict[str, np.ndarray] | None:
        """One member's logits checked against SPEC.md §4.3 and against the members already written (all or none
        have logits, with one dtype)."""
        first = _finished_members(self.partial_dir)[:1]
        if first:
            with h5py.File(first[0], "r") as m:
                before = None if "logits" not in m else next(iter(m["logits"].values())).dtype
            if (before is None) != (logits is None):
                raise ValueError(f"member {index}: {'no ' if before is None else ''}earlier member has logits; every "
                                 "member of an archive has logits or none has")
        if logits is None:
            return None
        if set(logits) != set(self._splits):
            raise ValueError(f"logits must have exactly the splits {sorted(self._splits)}; found {sorted(logits)}")
        out = {}
        for name, arr in logits.items():
            arr = np.asarray(arr)
            what = f"logits[{name!r}]"
            if arr.dtype not in LOGIT_DTYPES:
                raise TypeError(f"{what} must be float16, float32 or float64; found dtype {arr.dtype}")
            if arr.shape != probs[name].shape:
                raise ValueError(f"{what} must have shape {probs[name].shape}; found {arr.shape}")
            if first and arr.dtype != before:
                raise TypeError(f"{what} has dtype {arr.dtype} but the earlier members' logits are {before}")
            problem = logits_problem(arr[None], probs[name][None], member_offset=index)
            if problem is not None:
                raise ValueError(f"{what}: {problem[1]}")
            out[name] = arr
        return out

    def set_scores(self, name: str, values: Mapping[str, ArrayLike], *, direction: str) -> None:
        """Record a method score (format 1.1, SPEC.md §4.4): one value per sample of every split, ``direction``
        ``"uncertainty"`` (higher = more uncertain / more likely OOD) or ``"confidence"`` (higher = more certain).
        Durable once it returns; calling it again with the same name replaces the score."""
        if not is_score_name(name):
            raise ValueError(f"score name {name!r} must match {SPLIT_NAME.pattern} and not be one of "
                             f"{RESERVED_SCORE_NAMES}")
        if direction not in SCORE_DIRECTIONS:
            raise ValueError(f"direction must be one of {SCORE_DIRECTIONS}; found {direction!r}")
        if set(values) != set(self._splits):
            raise ValueError(f"score {name!r} must have exactly the splits {sorted(self._splits)}; found "
                             f"{sorted(values)}")
        checked = {}
        for split, (_, n, _, _) in self._splits.items():
            arr = np.asarray(values[split])
            what = f"score {name!r} of split {split!r}"
            if arr.dtype.kind not in "fiu" or arr.shape != (n,):
                raise ValueError(f"{what} must be a float array of shape ({n},); found {arr.dtype} {arr.shape}")
            arr = arr.astype(arr.dtype if arr.dtype in (np.float32, np.float64) else np.float64)
            problem = scores_problem(arr)
            if problem is not None:
                raise ValueError(f"{what}: {problem[1]}")
            checked[split] = arr
        folder = self.partial_dir / "scores"
        folder.mkdir(exist_ok=True)
        with atomic_path(folder / f"{name}.h5") as tmp, h5py.File(tmp, "w") as f:
            f.attrs["direction"] = direction
            for split, arr in checked.items():
                f.create_dataset(split, data=arr)

    def set_scalability(
        self,
        *,
        n_parameters: int | None = None,
        train_seconds: float | None = None,
        predict_seconds: float | None = None,
        device: str | None = None,
        **extra: float | int | str,
    ) -> None:
        """Record scalability metadata (parameter count, training and prediction time, device)."""
        values = {"n_parameters": n_parameters, "train_seconds": train_seconds,
                  "predict_seconds": predict_seconds, "device": device, **extra}
        values = {k: v for k, v in values.items() if v is not None}
        with atomic_path(self.partial_dir / "scalability.json") as tmp:
            tmp.write_text(_json(values))

    def set_diagnostics(self, summary: Mapping[str, Any]) -> None:
        """Record the optional ``/diagnostics`` summary (SPEC.md §5.1: MCMC R-hat/ESS over chains), a JSON object."""
        with atomic_path(self.partial_dir / "diagnostics.json") as tmp:
            tmp.write_text(_json(dict(summary)))

    def finished_members(self, split: str, rows: int) -> tuple[list[dict], np.ndarray]:
        """The info of every finished member and its probabilities on the first ``rows`` samples of ``split``
        (M, rows, C), read back from the partial directory (members written by an earlier, killed process too)."""
        infos, probs = [], []
        for path in _finished_members(self.partial_dir):
            with h5py.File(path, "r") as m:
                infos.append(json.loads(m.attrs["info"]))
                probs.append(m[f"probs/{split}"][:rows])
        return infos, np.stack(probs) if probs else np.empty((0, rows, 0))

    def finalize(self) -> Path:
        """Assemble the archive atomically at ``path`` and remove the partial directory."""
        if self._finalized:
            return self.path
        out = finalize_partial(self.partial_dir, compression=self.compression, overwrite=True)
        self._finalized = True
        return out

    def __enter__(self) -> ArchiveWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        # Only a clean exit finalizes; after an error the finished members stay in the partial directory.
        if exc_type is None:
            self.finalize()


def _checked_labels(labels: ArrayLike, n_classes: int, split: str) -> np.ndarray:
    """SPEC.md §4: labels are a non-empty 1-d integer array with values in [0, C); returned as int64."""
    arr = np.asarray(labels)
    what = f"labels of split {split!r}"
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{what} must have an integer dtype; found dtype {arr.dtype}")
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{what} must have shape (n_samples,) with n_samples > 0; found shape {arr.shape}")
    bad = (arr < 0) | (arr >= n_classes)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{what} must be in [0, {n_classes}); found {arr[i]} at index {i}")
    return arr.astype(np.int64)


def _checked_probs(probs: ArrayLike, split: str, shape: tuple[int, int], member: int) -> np.ndarray:
    """One member's (N, C) probabilities for ``split``, checked against SPEC.md §4 exactly as the validator will
    check the finished archive (so the writer never writes an archive the reader refuses)."""
    arr = np.asarray(probs)
    what = f"probs[{split!r}]"
    if arr.dtype not in (np.float32, np.float64):
        raise TypeError(f"{what} must be float32 or float64; found dtype {arr.dtype}")
    if arr.shape != shape:
        raise ValueError(f"{what} must have shape {shape}; found {arr.shape}")
    rows = max(1, BLOCK_BYTES // max(1, shape[1] * arr.itemsize))
    for start in range(0, shape[0], rows):  # in blocks: the check's temporaries stay small for any member
        problem = probs_problem(arr[None, start:start + rows], start=start, member_offset=member)
        if problem is not None:
            raise ValueError(f"{what}: {problem[1]}")
    return arr


def _finished_members(partial_dir: Path) -> list[Path]:
    """Member files 000000.h5, 000001.h5, … up to the first gap."""
    found = []
    while (p := partial_dir / "members" / f"{len(found):06d}.h5").exists():
        found.append(p)
    return found


def finalize_partial(partial_dir: str | Path, *, compression: str | None = None, overwrite: bool = False) -> Path:
    """Assemble the archive from a partial run directory (``<out>.partial``) and remove the directory.

    Returns the archive's path. Raises ``ArchiveError`` when there is no finished member, or when the target
    exists and ``overwrite`` is false.
    """
    partial_dir = Path(partial_dir)
    if partial_dir.suffix != ".partial" or not (partial_dir / "header.h5").is_file():
        raise ArchiveError(f"{partial_dir} is not a partial ubench run (no header.h5 in a *.partial directory)")
    out = partial_dir.with_name(partial_dir.name[: -len(".partial")])
    if out.exists() and not overwrite:
        raise ArchiveError(f"{out} already exists; remove it or replace it with --overwrite")
    members = _finished_members(partial_dir)
    if not members:
        raise ArchiveError(f"{partial_dir} holds no finished member yet; nothing to finalize")
    scal_path = partial_dir / "scalability.json"
    scalability = json.loads(scal_path.read_text()) if scal_path.exists() else None
    diag_path = partial_dir / "diagnostics.json"
    diagnostics = diag_path.read_text() if diag_path.exists() else None
    with atomic_path(out) as tmp, h5py.File(partial_dir / "header.h5", "r") as head, h5py.File(tmp, "w") as f:
        for key, value in head.attrs.items():
            if key != "fingerprint":
                f.attrs[key] = value
        f.attrs["ubench_kind"] = "archive"
        if "classes" in head:
            head.copy("classes", f)
        head.copy("splits", f)
        n_classes = int(head.attrs["n_classes"])
        _write_members_table(f, members)
        with h5py.File(members[0], "r") as m:
            stacks = ("probs", "logits") if "logits" in m else ("probs",)
        for name in f["splits"]:
            for key in stacks:
                _write_probs(f["splits"][name], name, members, n_classes, compression, key=key)
        scores = sorted((partial_dir / "scores").glob("*.h5")) if (partial_dir / "scores").is_dir() else []
        _write_scores(f["splits"], scores)
        # The lowest version that holds what the file holds: 1.0 readers then read it without a note.
        f.attrs["ubench_format_version"] = CURRENT.version if len(stacks) > 1 or scores else V1_0.version
        if scalability:
            g = f.create_group("scalability")
            g.attrs["ubench_kind"] = "scalability"
            for key, value in scalability.items():
                g.attrs[key] = value
        if diagnostics:
            g = f.create_group("diagnostics")
            g.attrs["ubench_kind"] = "diagnostics"
            g.attrs["diagnostics_version"] = DIAGNOSTICS_VERSION
            g.attrs["summary"] = diagnostics
    shutil.rmtree(partial_dir)
    fsync_dir(out.parent)
    return out


def _write_members_table(f: h5py.File, members: list[Path]) -> None:
    rows = []
    for p in members:
        with h5py.File(p, "r") as m:
            rows.append({k: m.attrs[k] for k in ("seed", "epoch", "step", "kind", "info")})
    g = f.create_group("members")
    g.attrs["ubench_kind"] = "members"
    for key in ("seed", "epoch", "step"):
        g.create_dataset(key, data=np.array([int(r[key]) for r in rows], dtype=np.int64))
    for key in ("kind", "info"):
        g.create_dataset(key, data=np.array([str(r[key]) for r in rows], dtype=h5py.string_dtype()))


def _write_scores(splits: h5py.Group, files: list[Path]) -> None:
    """SPEC.md §4.4: ``/splits/<split>/scores/<name>`` from the partial run's ``scores/<name>.h5`` files."""
    for path in files:
        with h5py.File(path, "r") as s:
            for split in splits:
                g = splits[split].require_group("scores")
                g.attrs["ubench_kind"] = "scores"
                ds = g.create_dataset(path.stem, data=s[split][()])
                ds.attrs["direction"] = str(s.attrs["direction"])


def _write_probs(split: h5py.Group, name: str, members: list[Path], n_classes: int, compression: str | None,
                 key: str = "probs") -> None:
    """The (M, N, C) stack ``key`` (``probs`` or ``logits``) of one split, chunked as SPEC.md §7 recommends."""
    n = int(split.attrs["n_samples"])
    with h5py.File(members[0], "r") as m:
        dtype = m[f"{key}/{name}"].dtype
    target = max(n_classes * dtype.itemsize, min(DEFAULT_CHUNK_BYTES, CHUNK_CACHE_BYTES // len(members)))
    kwargs: dict[str, Any] = {"chunks": chunk_shape(n, n_classes, dtype.itemsize, target)}
    if compression == "deflate":
        kwargs.update(shuffle=True, compression="gzip", compression_opts=DEFAULT_DEFLATE)
    ds = split.create_dataset(key, shape=(len(members), n, n_classes), dtype=dtype, **kwargs)
    chunk_rows = kwargs["chunks"][1]
    rows = max(1, BLOCK_BYTES // (chunk_rows * n_classes * dtype.itemsize)) * chunk_rows
    for k, p in enumerate(members):
        with h5py.File(p, "r") as m:
            src = m[f"{key}/{name}"]
            for start in range(0, n, rows):  # whole chunks at a time: memory holds a block, not a member
                ds[k, start:start + rows] = src[start:start + rows]
