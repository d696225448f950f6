# SPDX-License-Identifier: MIT
"""Trusted reference labels: the file ``ubench score --reference`` takes its labels from.

A reference file is a prediction-archive-like HDF5 file without predictions::

    /                        ubench_format = "reference-labels", ubench_format_version = "1.0",
                             ubench_kind = "reference", dataset, n_classes, created, writer
    /splits                  group, ubench_kind = "splits"
    /splits/<name>           group, ubench_kind = "split"; role, dataset, n_samples (+ shift_kind,
                             shift_intensity for role "shift")
    /splits/<name>/labels      integer (N,)  in [0, C); required for in_domain and shift splits
    /splits/<name>/sample_ids  integer (N,)  unique; required for every split

``write_reference`` derives one from a trusted archive (``ubench reference ARCHIVE --out REF.h5``);
``read_reference`` reads it back; ``compare_to_reference`` lists every way an upload differs from it.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from .. import __version__

__all__ = ["REFERENCE_FORMAT", "ReferenceSplit", "Reference", "ReferenceError", "ReferenceMismatchError",
           "write_reference", "read_reference", "compare_to_reference"]

REFERENCE_FORMAT = ("reference-labels", "1.0")


class ReferenceError(ValueError):
    """The reference file itself is missing, unreadable or malformed."""


class ReferenceMismatchError(ValueError):
    """An upload does not match its reference; ``differences`` lists every difference, one line each."""

    def __init__(self, archive: str, reference: str, differences: list[str]):
        self.differences = differences
        super().__init__(f"{archive} does not match reference {reference}: " + "; ".join(differences))


@dataclass(frozen=True, eq=False)
class ReferenceSplit:
    """One split of a reference: role, source dataset, labels (None for OOD) and sample ids."""

    role: str
    dataset: str
    labels: NDArray[np.int64] | None
    sample_ids: NDArray[np.int64]
    shift_kind: str | None = None
    shift_intensity: float | None = None

    @property
    def n_samples(self) -> int:
        return int(self.sample_ids.shape[0])


@dataclass(frozen=True, eq=False)
class Reference:
    """A reference file in memory."""

    path: str
    dataset: str
    n_classes: int
    splits: dict[str, ReferenceSplit]


def write_reference(archive_path: str | Path, out: str | Path, *, overwrite: bool = False) -> Path:
    """Write the reference file of a trusted archive: its splits' roles, labels and sample ids, no predictions.

    Raises ``ReferenceError`` when a split lacks sample ids, or an in-domain/shift split lacks labels, and the
    archive reader's errors when the archive is invalid.
    """
    from ..archive_schema import open_archive
    from ..archive_schema.durable import atomic_path
    from ..archive_schema.safe_h5py import h5py

    out = Path(out)
    if out.exists() and not overwrite:
        raise ReferenceError(f"{out} exists; pass overwrite=True (--overwrite) to replace it")
    with open_archive(archive_path, check_values=False) as r:
        h = r.header
        splits = {}
        for name, s in h.splits.items():
            ids, labels = r.sample_ids(name), r.labels(name)
            if ids is None:
                raise ReferenceError(f"split {name!r} of {archive_path} has no sample_ids; a reference needs them")
            if labels is None and s.role != "ood":
                raise ReferenceError(f"split {name!r} ({s.role}) of {archive_path} has no labels")
            splits[name] = ReferenceSplit(s.role, s.dataset, labels, ids, s.shift_kind, s.shift_intensity)
    with atomic_path(out) as tmp:
        with h5py.File(tmp, "w") as f:
            f.attrs.update({"ubench_format": REFERENCE_FORMAT[0], "ubench_format_version": REFERENCE_FORMAT[1],
                            "ubench_kind": "reference", "dataset": h.dataset, "n_classes": np.int64(h.n_classes),
                            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                            "writer": f"ubench {__version__}"})
            g = f.create_group("splits")
            g.attrs["ubench_kind"] = "splits"
            for name, s in splits.items():
                sg = g.create_group(name)
                sg.attrs.update({"ubench_kind": "split", "role": s.role, "dataset": s.dataset,
                                 "n_samples": np.int64(s.n_samples)})
                if s.role == "shift":
                    sg.attrs["shift_kind"] = s.shift_kind
                    sg.attrs["shift_intensity"] = float(s.shift_intensity)
                sg.create_dataset("sample_ids", data=s.sample_ids.astype(np.int64))
                if s.labels is not None:
                    sg.create_dataset("labels", data=s.labels.astype(np.int64))
    return out


def _attr(obj, name: str, where: str, path: str, required: bool = True):
    if name not in obj.attrs:
        if required:
            raise ReferenceError(f"{path}: attribute {name!r} missing at {where}")
        return None
    v = obj.attrs[name]
    return v.decode() if isinstance(v, bytes) else v.item() if isinstance(v, np.generic) else v


def read_reference(path: str | Path) -> Reference:
    """Read a reference file; ``ReferenceError`` names what is wrong with it."""
    from ..archive_schema.safe_h5py import h5py

    path = str(path)
    p = Path(path)
    if not p.is_file():
        raise ReferenceError(f"{path}: no such reference file")
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise ReferenceError(f"{path}: not an HDF5 file ({exc})") from None
    with f:
        fmt = (_attr(f, "ubench_format", "/", path, False), _attr(f, "ubench_format_version", "/", path, False))
        if fmt != REFERENCE_FORMAT or _attr(f, "ubench_kind", "/", path, False) != "reference":
            raise ReferenceError(f"{path}: not a ubench reference file (ubench_format {fmt[0]!r}, version "
                                 f"{fmt[1]!r}; expected {REFERENCE_FORMAT[0]!r} {REFERENCE_FORMAT[1]!r})")
        n_classes = int(_attr(f, "n_classes", "/", path))
        dataset = str(_attr(f, "dataset", "/", path, False) or "")
        if "splits" not in f or not isinstance(f["splits"], h5py.Group):
            raise ReferenceError(f"{path}: no /splits group")
        splits = {}
        for name, g in f["splits"].items():
            where = f"/splits/{name}"
            role = _attr(g, "role", where, path)
            if "sample_ids" not in g:
                raise ReferenceError(f"{path}: {where}/sample_ids missing")
            ids = g["sample_ids"][()]
            labels = g["labels"][()] if "labels" in g else None
            if ids.dtype.kind not in "iu" or ids.ndim != 1:
                raise ReferenceError(f"{path}: {where}/sample_ids must be a 1-d integer dataset")
            if labels is not None:
                if labels.dtype.kind not in "iu" or labels.shape != ids.shape:
                    raise ReferenceError(f"{path}: {where}/labels must be integers of the sample_ids' shape")
                if labels.size and (labels.min() < 0 or labels.max() >= n_classes):
                    raise ReferenceError(f"{path}: {where}/labels must be in [0, {n_classes})")
                labels = labels.astype(np.int64)
            elif role != "ood":
                raise ReferenceError(f"{path}: {where}/labels missing (required for role {role!r})")
            intensity = _attr(g, "shift_intensity", where, path, False)
            splits[name] = ReferenceSplit(role, _attr(g, "dataset", where, path, False) or "", labels,
                                          ids.astype(np.int64), _attr(g, "shift_kind", where, path, False),
                                          None if intensity is None else float(intensity))
    return Reference(path=path, dataset=dataset, n_classes=n_classes, splits=splits)


def compare_to_reference(header, sample_ids: dict[str, NDArray | None], ref: Reference) -> list[str]:
    """Every difference between an archive (its header and per-split sample ids) and a reference.

    Checks, in order: class count; splits missing from or extra in the archive; per common split, role,
    size, missing sample ids, and the index of the first differing sample id. Empty when they match.
    """
    diffs = []
    if header.n_classes != ref.n_classes:
        diffs.append(f"n_classes differs: archive has C = {header.n_classes}, reference has C = {ref.n_classes}")
    missing = [s for s in ref.splits if s not in header.splits]
    extra = [s for s in header.splits if s not in ref.splits]
    if missing:
        diffs.append(f"split(s) missing from the archive: {', '.join(missing)}")
    if extra:
        diffs.append(f"extra split(s) not in the reference: {', '.join(extra)}")
    for name, rs in ref.splits.items():
        if name not in header.splits:
            continue
        s = header.splits[name]
        if s.role != rs.role:
            diffs.append(f"split {name!r}: role differs (archive {s.role!r}, reference {rs.role!r})")
        if s.n_samples != rs.n_samples:
            diffs.append(f"split {name!r}: N differs (archive {s.n_samples}, reference {rs.n_samples})")
            continue
        ids = sample_ids.get(name)
        if ids is None:
            diffs.append(f"split {name!r}: the archive has no sample_ids to match against the reference")
            continue
        bad = np.flatnonzero(ids != rs.sample_ids)
        if bad.size:
            i = int(bad[0])
            diffs.append(f"split {name!r}: sample ids differ first at index {i} (archive {int(ids[i])}, "
                         f"reference {int(rs.sample_ids[i])}; {bad.size} differ in all)")
    return diffs
