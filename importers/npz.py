# SPDX-License-Identifier: MIT
"""``ubench import npz|npy``: arrays of probabilities, logits or log-probabilities saved with NumPy.

Every array is a *key*: an array name in an ``.npz``, the file stem of a ``.npy``. The in-domain split (archive
split ``test``) is the key ``--key`` names, or the one key no rule below claims. Other keys are OOD or shifted
splits (split name = key), by flag or by name:

- ``--ood KEY[=DATASET]`` or a key ``ood_<dataset>``: an OOD split (dataset: DATASET, ``<dataset>`` or KEY);
- ``--shift KEY=KIND:INTENSITY`` or a key ``shift_<kind>_<intensity>`` (``shift_gaussian_noise_3``): a shifted
  split of that kind and intensity;
- ``labels`` holds the in-domain labels (or ``--labels FILE``), ``<key>_labels`` split KEY's labels.

Shapes per split: one (M, N, C) array (M members), or (N, C) for a single member; several ``.npz`` files are one
member each, every file holding each key as (N_k, C); several ``.npy`` files that are not claimed by a role are
the in-domain split's members, (N, C) each. ``.npy`` files are memory-mapped; ``.npz`` arrays are streamed from
their zip entries (deflated or stored alike), checked against what their headers declare, so memory holds one
chunk of rows, never a member, and a zip entry cannot inflate past its declared shape.
"""

from __future__ import annotations

import math
import re
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..archive_schema import SplitSpec
from ..archive_schema.spec import is_split_name
from .plan import (DEFAULT_MAX_BYTES, ImportFailure, ImportPlan, Member, check_declared, check_labels,
                   label_shape_problem, load_labels)

__all__ = ["plan_npz", "open_npy", "npz_keys", "NpzStream", "Role", "parse_roles", "role_of", "stream_rows",
           "read_npz_labels"]

LABEL_KEYS = ("labels",)
_LABELS_OF = re.compile(r"^(?P<key>.+)_labels$")
_OOD_NAME = re.compile(r"^ood_(?P<dataset>.+)$")
_SHIFT_NAME = re.compile(r"^shift_(?P<kind>.+?)_(?P<value>[0-9]+(?:\.[0-9]+)?)$")


def open_npy(path: Path) -> np.ndarray:
    """A read-only memory map of a ``.npy`` (no pickles)."""
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ImportFailure(f"{path}: not a readable .npy array ({exc})") from exc


class NpzStream:
    """One array of an ``.npz`` read sequentially from its zip member: ``shape``, ``dtype``, ``read(items)`` and
    ``next_rows(k)`` (the next ``k`` leading-axis entries), never more than one such slab in memory.

    The zip entry must hold exactly the bytes its ``.npy`` header declares (``shape`` x itemsize): checked from
    the zip directory before any byte is decompressed, and again at the end of the data (zipfile's CRC check).
    """

    def __init__(self, path: Path, key: str):
        self.where = f"{path}:{key}"
        try:
            self._zip = zipfile.ZipFile(path)
        except (OSError, zipfile.BadZipFile) as exc:
            raise ImportFailure(f"{path}: not a readable .npz ({exc})") from exc
        try:
            info = self._zip.getinfo(key + ".npy")
        except KeyError:
            self._zip.close()
            raise ImportFailure(f"{path}: no array {key!r} (arrays: {npz_keys(path)})") from None
        try:
            self._fh = self._zip.open(info)
            version = np.lib.format.read_magic(self._fh)
            read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
            if version not in read:
                raise ValueError(f"unsupported .npy format version {version}")
            shape, fortran, dtype = read[version](self._fh, max_header_size=2**16)
            header = self._fh.tell()
        except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
            self._zip.close()
            raise ImportFailure(f"{self.where}: not a .npy array ({exc})") from exc
        if dtype.hasobject:
            self.close()
            raise ImportFailure(f"{self.where}: object arrays (pickles) are refused")
        if fortran and len(shape) > 1:
            self.close()
            raise ImportFailure(f"{self.where}: Fortran-ordered arrays cannot be streamed; re-save with np.save")
        self.shape, self.dtype = tuple(int(s) for s in shape), dtype
        self.items = math.prod(self.shape)  # Python integers: no int64 wrap-around for a hostile shape
        declared = self.items * dtype.itemsize
        if info.file_size - header != declared:
            self.close()
            raise ImportFailure(f"{self.where}: the header declares shape {self.shape} of {dtype} ({declared} "
                                f"bytes), but the zip entry holds {info.file_size - header} bytes of data")
        self._read = 0
        self._row_items = math.prod(self.shape[1:]) if len(self.shape) > 1 else 1

    def read(self, items: int) -> np.ndarray:
        """The next ``items`` values (flat); at the end of the data, checks the entry ends there (CRC too)."""
        if self._read + items > self.items:
            raise ImportFailure(f"{self.where}: read past the {self.items} declared values")
        nbytes = items * self.dtype.itemsize
        try:
            buf = self._fh.read(nbytes)
            self._read += items
            if self._read == self.items and self._fh.read(1):
                raise ImportFailure(f"{self.where}: more data than the header declares")
        except (OSError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
            raise ImportFailure(f"{self.where}: cannot decompress the array data ({exc})") from exc
        if len(buf) != nbytes:
            raise ImportFailure(f"{self.where}: truncated array data")
        return np.frombuffer(buf, dtype=self.dtype)

    def next_rows(self, k: int) -> np.ndarray:
        return self.read(k * self._row_items).reshape((k, *self.shape[1:]))

    def read_all(self) -> np.ndarray:
        return self.read(self.items).reshape(self.shape)

    def close(self) -> None:
        if hasattr(self, "_fh"):
            self._fh.close()
        self._zip.close()


class _Rows:
    """One member's (N, C) rows of a stream, sliced in order (``to_probs`` reads ``[0:k]``, ``[k:2k]``, …);
    ``owns``: close the stream after the last row."""

    def __init__(self, stream: NpzStream, n: int, owns: bool = False):
        self.shape, self.dtype = (n, stream.shape[-1]), stream.dtype
        self._stream, self._next, self._owns = stream, 0, owns

    def __getitem__(self, rows: slice) -> np.ndarray:
        start, stop = rows.start or 0, min(rows.stop, self.shape[0])
        if start != self._next:
            raise ImportFailure(f"{self._stream.where}: rows are streamed in order; row {start} asked after "
                                f"row {self._next}")
        self._next = stop
        rows = self._stream.read((stop - start) * self.shape[1]).reshape(stop - start, self.shape[1])
        if self._owns and stop == self.shape[0]:
            self._stream.close()
        return rows


def stream_rows(path: Path, key: str) -> _Rows:
    """The (N, C) array ``key`` of an ``.npz`` as rows streamed in order (closed after the last row)."""
    stream = NpzStream(path, key)
    if len(stream.shape) != 2:
        stream.close()
        raise ImportFailure(f"{stream.where}: expected an (N, C) array; found shape {stream.shape}")
    return _Rows(stream, stream.shape[0], owns=True)


def npz_keys(path: Path) -> list[str]:
    """The array names of an ``.npz``."""
    try:
        with zipfile.ZipFile(path) as z:
            return [n[:-4] for n in z.namelist() if n.endswith(".npy")]
    except (OSError, zipfile.BadZipFile) as exc:
        raise ImportFailure(f"{path}: not a readable .npz ({exc})") from exc


# -- roles ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Role:
    """What a key that is not the in-domain split holds, and how that was decided (``--ood``, ``--shift``, name)."""

    role: str
    dataset: str
    shift_kind: str | None = None
    shift_intensity: float | None = None
    source: str = "name"

    def describe(self) -> str:
        what = f"role {self.role}, dataset {self.dataset}" if self.role == "ood" else (
            f"role shift, kind {self.shift_kind}, intensity {self.shift_intensity:g}")
        return f"{what} (from {self.source})"


def parse_roles(ood: Sequence[str] = (), shifts: Sequence[str] = ()) -> dict[str, Role]:
    """``--ood KEY[=DATASET]`` and ``--shift KEY=KIND:INTENSITY`` flags as ``{key: Role}``."""
    roles: dict[str, Role] = {}
    for text in ood:
        key, _, dataset = text.partition("=")
        if not key:
            raise ImportFailure(f"--ood {text!r}: expected KEY or KEY=DATASET (e.g. --ood svhn_probs=svhn)")
        roles[key] = Role("ood", dataset or key, source="--ood")
    for text in shifts:
        key, _, rest = text.partition("=")
        kind, _, value = rest.rpartition(":")
        try:
            intensity = float(value)
        except ValueError:
            intensity = math.nan
        if not key or not kind or not math.isfinite(intensity):
            raise ImportFailure(f"--shift {text!r}: expected KEY=KIND:INTENSITY with a finite INTENSITY "
                                "(e.g. --shift blurred=gaussian_blur:3)")
        if key in roles:
            raise ImportFailure(f"--shift {text!r}: {key!r} is already an OOD split (--ood)")
        roles[key] = Role("shift", "", kind, intensity, source="--shift")
    return roles


def role_of(key: str, flagged: dict[str, Role]) -> Role | None:
    """The role of a key: its flag, else its name (``ood_<dataset>``, ``shift_<kind>_<intensity>``), else None."""
    if key in flagged:
        return flagged[key]
    if m := _OOD_NAME.match(key):
        return Role("ood", m["dataset"])
    if m := _SHIFT_NAME.match(key):
        return Role("shift", "", m["kind"], float(m["value"]))
    return None


def _labels_key(key: str) -> str | None:
    """The split key a labels key belongs to (``None`` for the in-domain ``labels``), or ``""`` if not labels."""
    if key in LABEL_KEYS:
        return None
    m = _LABELS_OF.match(key)
    return m["key"] if m else ""


# -- sources --------------------------------------------------------------------------------------------------
@dataclass
class _Split:
    """One split's arrays: ``stacked`` (one (M, N, C) / (N, C) array) or one (N, C) array per member."""

    name: str
    key: str
    role: Role | None
    arrays: list[Any]
    wheres: list[str]
    stacked: bool

    @property
    def shapes(self) -> list[tuple]:
        return [tuple(a.shape) for a in self.arrays]

    def n_members(self) -> int:
        shape = self.shapes[0]
        return (shape[0] if len(shape) == 3 else 1) if self.stacked else len(self.arrays)

    def member(self, j: int) -> tuple[Any, str]:
        if not self.stacked:
            src, where = self.arrays[j], self.wheres[j]
            return (_Rows(src, src.shape[0]) if isinstance(src, NpzStream) else src), where
        src, where = self.arrays[0], self.wheres[0]
        if len(src.shape) == 2:
            return (_Rows(src, src.shape[0]) if isinstance(src, NpzStream) else src), where
        return (_Rows(src, src.shape[1]) if isinstance(src, NpzStream) else src[j]), f"{where}[{j}]"

    def close(self) -> None:
        for a in self.arrays:
            if isinstance(a, NpzStream):
                a.close()


def _open(path: Path, key: str) -> tuple[Any, str]:
    if path.suffix == ".npz":
        return NpzStream(path, key), f"{path}:{key}"
    return open_npy(path), str(path)


def _npz_layout(paths: list[Path], key: str | None, flagged: dict[str, Role]) -> tuple[dict, dict, dict]:
    """Pred keys -> role, label keys -> path, and what was inferred, for one or several (per-member) .npz."""
    keys = npz_keys(paths[0])
    for p in paths[1:]:
        if sorted(npz_keys(p)) != sorted(keys):
            raise ImportFailure(f"{p}: holds arrays {sorted(npz_keys(p))}, {paths[0]} {sorted(keys)}; the files of "
                                "one import are members and must hold the same arrays")
    return _assign(keys, key, flagged, str(paths[0]), {k: paths[0] for k in keys})


def _assign(keys: list[str], key: str | None, flagged: dict[str, Role], where: str, found_in: dict[str, Path]
            ) -> tuple[dict, dict, dict]:
    for k in flagged:
        if k not in keys:
            raise ImportFailure(f"{where}: no array {k!r} for {flagged[k].source} (arrays: {keys})")
    preds = [k for k in keys if _labels_key(k) == ""]
    label_keys = {_labels_key(k): found_in[k] for k in keys if _labels_key(k) != ""}
    roles = {k: role_of(k, flagged) for k in preds}
    inferred: dict[str, Any] = {}
    if key is not None:
        if key not in keys:
            raise ImportFailure(f"{where}: no array {key!r} (arrays: {keys})")
        if key in flagged:
            raise ImportFailure(f"{where}: {key!r} is the in-domain array (--key) and also {flagged[key].source}")
        roles[key] = None
        ignored = [k for k in preds if roles[k] is None and k != key]
        if ignored:
            inferred["ignored arrays"] = ", ".join(ignored)
            for k in ignored:
                del roles[k]
    else:
        plain = [k for k in preds if roles[k] is None]
        if len(plain) != 1:
            raise ImportFailure(f"{where}: holds arrays {keys}; name the in-domain prediction array with --key"
                                + ("" if plain else " (every array is claimed by --ood, --shift or its name)"))
        key = plain[0]
        inferred["key"] = key
    return {k: roles[k] for k in [key] + [k for k in preds if k != key and k in roles]}, label_keys, inferred


def _splits(sources: list[Path], key: str | None, flagged: dict[str, Role], split: str
            ) -> tuple[list[_Split], dict[str | None, tuple[Path, str]], dict[str, Any]]:
    """The splits of an import (in-domain first), where each split's labels are, and what was inferred."""
    suffixes = {p.suffix for p in sources}
    if suffixes - {".npz", ".npy"} or len(suffixes) != 1:
        bad = next((p for p in sources if p.suffix not in (".npz", ".npy")), sources[0])
        raise ImportFailure(f"{bad}: expected .npy or .npz files (not a mix of both)")
    if suffixes == {".npz"}:
        roles, label_keys, inferred = _npz_layout(sources, key, flagged)
        labels = {owner: (path, "labels" if owner is None else f"{owner}_labels")
                  for owner, path in label_keys.items()}
        stacked = len(sources) == 1
        out = []
        for k, role in roles.items():
            opened = [_open(p, k) for p in sources]
            out.append(_Split(split if role is None else k, k, role, [a for a, _ in opened], [w for _, w in opened],
                              stacked))
        return out, labels, inferred
    stems = {p.stem: p for p in sources}
    if len(stems) != len(sources):
        raise ImportFailure(f"{sources}: two .npy files share a name; their stems name the splits")
    label_files = {_labels_key(s): p for s, p in stems.items() if _labels_key(s) != ""}
    preds = [p for p in sources if _labels_key(p.stem) == ""]
    roles = {p.stem: role_of(p.stem, flagged) for p in preds}
    for k in flagged:
        if k not in stems:
            raise ImportFailure(f"no .npy file named {k}.npy for {flagged[k].source} (files: {sorted(stems)})")
    in_domain = [p for p in preds if roles[p.stem] is None]
    if not in_domain:
        raise ImportFailure("every .npy file is claimed by --ood, --shift or its name; give the in-domain "
                            "predictions too")
    opened = [_open(p, "") for p in in_domain]
    out = [_Split(split, in_domain[0].stem, None, [a for a, _ in opened], [w for _, w in opened],
                  stacked=len(in_domain) == 1)]
    for p in preds:
        if roles[p.stem] is not None:
            a, w = _open(p, "")
            out.append(_Split(p.stem, p.stem, roles[p.stem], [a], [w], stacked=True))
    labels = {s: (p, "") for s, p in label_files.items()}
    return out, labels, {}


def plan_npz(sources: list[Path], *, kind: str, dataset: str, method: str = "imported", model: str = "unknown",
             labels: Path | None = None, labels_key: str | None = None, key: str | None = None,
             member_kind: str | None = None, split: str = "test", ood: Sequence[str] = (),
             shifts: Sequence[str] = (), max_bytes: int = DEFAULT_MAX_BYTES) -> ImportPlan:
    """Plan the import of NumPy prediction arrays (see the module docstring)."""
    if not sources:
        raise ImportFailure("give at least one source file")
    sources = [Path(p) for p in sources]
    splits, label_sources, inferred = _splits(sources, key, parse_roles(ood, shifts), split)
    config: dict[str, Any] = {"import_format": "npz", "sources": [str(p) for p in sources], "stored_kind": kind,
                              **inferred}
    m, c = _check_shapes(splits)
    first = splits[0]
    config.update(layout=_layout_text(first, m), n_members=m, n_samples=_n(first), n_classes=c)
    dtype = np.float64 if all(np.dtype(a.dtype) == np.float64 for s in splits for a in s.arrays) else np.float32
    check_declared(first.wheres[0], m, {s.name: _n(s) for s in splits}, c, np.dtype(dtype).itemsize, max_bytes)
    notes: list[str] = []
    specs: dict[str, SplitSpec] = {}
    for s in splits:
        y = _split_labels(s, labels if s.role is None else None, labels_key, label_sources, c, notes, config)
        role = s.role
        if role is None:
            specs[s.name] = SplitSpec(role="in_domain", dataset=dataset, labels=y,
                                      n_samples=None if y is not None else _n(s))
            config[f"split {s.name}"] = f"role in_domain, dataset {dataset} (array {s.key})"
        else:
            if not is_split_name(s.name) or s.name in specs:
                raise ImportFailure(f"{s.wheres[0]}: {s.name!r} cannot name a split (letters, digits, '_', '.', '-'; "
                                    "unique)")
            specs[s.name] = SplitSpec(role=role.role, dataset=role.dataset or dataset, labels=y,
                                      n_samples=None if y is not None else _n(s), shift_kind=role.shift_kind,
                                      shift_intensity=role.shift_intensity)
            config[f"split {s.name}"] = role.describe()
    if specs[first.name].labels is None:
        notes.append("no labels given (--labels FILE or a 'labels' array): only label-free scores")
    member_kind = member_kind or ("point" if m == 1 else "independent")
    config["member_kind"] = member_kind

    def members():
        try:
            for j in range(m):
                parts = {s.name: s.member(j) for s in splits}
                yield Member({k: (lambda src=src: src) for k, (src, _) in parts.items()},
                             {k: w for k, (_, w) in parts.items()}, kind=member_kind,
                             info={"source": parts[first.name][1]})
        finally:
            for s in splits:
                s.close()

    return ImportPlan(method=method, model=model, dataset=dataset, n_classes=c, splits=specs, members=members(),
                      stored_kind=kind, config=config, dtype=dtype, notes=notes, n_members=m)


def _n(s: _Split) -> int:
    return s.shapes[0][-2]


def _layout_text(s: _Split, m: int) -> str:
    if not s.stacked:
        return "one (N, C) array per member"
    return "one (M, N, C) array" if len(s.shapes[0]) == 3 else "one (N, C) array (a single member)"


def _check_shapes(splits: list[_Split]) -> tuple[int, int]:
    """M and C, the same in every split; every member's array (N_k, C)."""
    first = splits[0]
    for s in splits:
        for shape, where in zip(s.shapes, s.wheres):
            if len(shape) not in (2, 3) or (not s.stacked and len(shape) != 2):
                raise ImportFailure(f"{where}: expected (M, N, C), (N, C) or one (N, C) file per member; "
                                    f"found shape {shape}")
        if len(set(s.shapes)) != 1:
            bad = next(i for i, shape in enumerate(s.shapes) if shape != s.shapes[0])
            raise ImportFailure(f"{s.wheres[bad]}: shape {s.shapes[bad]} differs from {s.wheres[0]}'s {s.shapes[0]}")
    m, c = first.n_members(), first.shapes[0][-1]
    for s in splits[1:]:
        if s.n_members() != m or s.shapes[0][-1] != c:
            want = f"({m}, N, C)" if m > 1 else "(N, C) or (1, N, C)"
            raise ImportFailure(f"{s.wheres[0]}: shape {s.shapes[0]}; the in-domain {first.wheres[0]} has {m} "
                                f"member(s) of {c} classes, so each split needs {want} with C = {c}")
    return m, c


def _split_labels(s: _Split, labels: Path | None, labels_key: str | None, label_sources: dict, c: int,
                  notes: list[str], config: dict[str, Any]) -> np.ndarray | None:
    """The labels of one split (declared shape checked before they are read), or None."""
    n = _n(s)
    owner = None if s.role is None else s.key
    if labels is not None:
        y, where = load_labels(labels, labels_key, n), str(labels)
    elif owner in label_sources:
        path, k = label_sources[owner]
        if s.role is not None and s.role.role == "ood":
            notes.append(f"{path}:{k or path.stem}: an OOD split has no labels in the in-domain classes; ignored")
            return None
        y, where = read_npz_labels(path, k, n), f"{path}:{k}" if k else str(path)
    else:
        return None
    config["labels" if s.role is None else f"labels {s.name}"] = where
    return check_labels(y, c, n, where)


def read_npz_labels(path: Path, key: str, n: int | None) -> np.ndarray:
    """Integer labels ``key`` of an ``.npz`` (or a ``.npy`` when ``path`` is one), the declared shape checked
    against ``n`` before a byte is decompressed."""
    if path.suffix == ".npy":
        return load_labels(path, None, n)
    s = NpzStream(path, key)
    try:
        problem = label_shape_problem(s.shape, s.dtype, n)
        if problem is not None:
            raise ImportFailure(f"{s.where}: {problem}")
        arr = s.read_all()
    finally:
        s.close()
    if arr.dtype.kind == "f" and np.all(arr == np.round(arr)):
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise ImportFailure(f"{path}:{key} must be a 1-d integer array; found {arr.dtype} {arr.shape}")
    return arr.astype(np.int64)
