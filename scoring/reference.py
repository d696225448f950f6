# SPDX-License-Identifier: MIT
"""Trusted reference labels: the file ``ubench score --reference`` takes its labels from.

A reference file is a prediction-archive-like HDF5 file without predictions::

    /                        ubench_format = "reference-labels", ubench_format_version = "1.1",
                             ubench_kind = "reference", dataset, n_classes, created, writer,
                             primary (1.1: the in-domain split behind the headline, ranking and OOD scores)
    /splits                  group, ubench_kind = "splits"
    /splits/<name>           group, ubench_kind = "split"; role, dataset, n_samples (+ shift_kind,
                             shift_intensity for role "shift")
    /splits/<name>/labels      integer (N,)  in [0, C); required for in_domain and shift splits
    /splits/<name>/sample_ids  integer (N,)  unique; required for every split

``write_reference`` derives one from a trusted archive (``ubench reference ARCHIVE --out REF.h5``);
``read_reference`` reads it back; ``compare_to_reference`` lists every way an upload differs from it (class
count, splits, roles, sizes, sample ids, and each shift split's kind and intensity); ``primary_split`` says which
in-domain split the headline comes from, so the upload never picks it by the order it wrote its splits in.

Version 1.0 files (no ``primary``) stay readable: their primary split is the first labelled in-domain split in
the reference's own ``/splits`` order. A reference is host data but is read like an upload: through the safe
reader's container checks (no links, no external storage, no filter plugins, size limits), and a problem with it
is one ``ReferenceError`` naming the file.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from .. import __version__
from ..archive_schema.fingerprint import SHA256_HEX

__all__ = ["REFERENCE_FORMAT", "READABLE_VERSIONS", "ReferenceSplit", "Reference", "ReferenceError",
           "ReferenceMismatchError", "write_reference", "read_reference", "describe_reference",
           "compare_to_reference", "primary_split"]

REFERENCE_FORMAT = ("reference-labels", "1.1")
#: Versions ``read_reference`` reads (1.0: no ``primary`` attribute).
READABLE_VERSIONS = ("1.0", "1.1")


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
    #: the split's fingerprint (SPEC.md §4.2) when the archive the reference was made from had one
    inputs_sha256: str | None = None

    @property
    def n_samples(self) -> int:
        return int(self.sample_ids.shape[0])


@dataclass(frozen=True, eq=False)
class Reference:
    """A reference file in memory; ``splits`` in the file's order, ``primary`` the headline in-domain split."""

    path: str
    dataset: str
    n_classes: int
    splits: dict[str, ReferenceSplit]
    primary: str | None = None


def write_reference(archive_path: str | Path, out: str | Path, *, overwrite: bool = False,
                    primary: str | None = None) -> Path:
    """Write the reference file of a trusted archive: its splits' roles, labels and sample ids, no predictions.

    ``primary`` names the in-domain split the headline is computed on (default: the archive's first in-domain
    split); it is stored, so uploads are scored on it whatever order they write their splits in.

    Raises ``ReferenceError`` when a split lacks sample ids, an in-domain/shift split lacks labels, or
    ``primary`` is not an in-domain split, and the archive reader's errors when the archive is invalid. Labels and
    sample ids are value-checked (labels in [0, C), ids unique) before anything is written: a reference is trusted
    by every score against it, so a label equal to C or negative never gets into one.
    """
    from ..archive_schema import open_archive
    from ..archive_schema.durable import atomic_path
    from ..archive_schema.safe_h5py import h5py

    out = Path(out)
    if out.exists() and not overwrite:
        raise ReferenceError(f"{out} already exists; choose another output or replace it with --overwrite")
    with open_archive(archive_path, check_values=False) as r:
        r.check_labels_and_ids()  # the predictions need no check; the labels and ids become the reference
        h = r.header
        splits = {}
        for name, s in h.splits.items():
            ids, labels = r.sample_ids(name), r.labels(name)
            if ids is None:
                raise ReferenceError(f"split {name!r} of {archive_path} has no sample_ids; a reference needs them")
            if labels is None and s.role != "ood":
                raise ReferenceError(f"split {name!r} ({s.role}) of {archive_path} has no labels")
            splits[name] = ReferenceSplit(s.role, s.dataset, labels, ids, s.shift_kind, s.shift_intensity,
                                          s.inputs_sha256)
    primary = _primary_of(splits, primary, f"--primary {primary!r} is not an in-domain split of {archive_path}")
    with atomic_path(out) as tmp:
        with h5py.File(tmp, "w") as f:
            f.attrs.update({"ubench_format": REFERENCE_FORMAT[0], "ubench_format_version": REFERENCE_FORMAT[1],
                            "ubench_kind": "reference", "dataset": h.dataset, "n_classes": np.int64(h.n_classes),
                            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                            "writer": f"ubench {__version__}"})
            if primary is not None:
                f.attrs["primary"] = primary
            g = f.create_group("splits", track_order=True)
            g.attrs["ubench_kind"] = "splits"
            for name, s in splits.items():
                sg = g.create_group(name)
                sg.attrs.update({"ubench_kind": "split", "role": s.role, "dataset": s.dataset,
                                 "n_samples": np.int64(s.n_samples)})
                if s.role == "shift":
                    sg.attrs["shift_kind"] = s.shift_kind
                    sg.attrs["shift_intensity"] = float(s.shift_intensity)
                if s.inputs_sha256 is not None:
                    sg.attrs["inputs_sha256"] = s.inputs_sha256
                sg.create_dataset("sample_ids", data=s.sample_ids.astype(np.int64))
                if s.labels is not None:
                    sg.create_dataset("labels", data=s.labels.astype(np.int64))
    return out


def _attr(scan, obj, name: str, where: str, required: bool = True):
    from ..archive_schema.scan import read_attr

    v = read_attr(scan, obj, name, where)
    if not scan.ok:
        _fail(scan)
    if v is None:
        if required:
            raise ReferenceError(f"{scan.path}: attribute {name!r} missing at {where}")
        return None
    return v.decode() if isinstance(v, bytes) else v.item() if isinstance(v, np.generic) else v


def _fail(scan) -> None:
    f = next(f for f in scan.findings if f.severity == "error")
    # a finding about the file as a whole (HDF5 path ``<file>``) is about the reference named just before
    where = "" if f.path == "<file>" else f"{f.path}: "
    raise ReferenceError(f"reference {scan.path}: {where}{f.message} ({f.check})")


def _read_ints(scan, group, name: str, where: str, safe: set[str]) -> np.ndarray | None:
    """A 1-d integer dataset the container walk judged safe, read through its nowhere-pointing access list."""
    from ..archive_schema.scan import open_dataset

    if name not in group:
        return None
    if f"{where}/{name}" not in safe:
        raise ReferenceError(f"{scan.path}: {where}/{name} is not a plain dataset")
    ds = open_dataset(group, name)
    if ds.dtype.kind not in "iu" or ds.ndim != 1:
        raise ReferenceError(f"{scan.path}: {where}/{name} must be a 1-d integer dataset")
    return ds[()].astype(np.int64)


def read_reference(path: str | Path, limits=None) -> Reference:
    """Read a reference file through the safe reader's container checks; ``ReferenceError`` names what is wrong.

    The file must be a regular file with the HDF5 signature; links, external storage, virtual datasets,
    unknown filters and sizes over ``limits`` (``ReadLimits``) are refused before any label is read.
    """
    from ..archive_schema.safe_h5py import h5py
    from ..archive_schema.scan import open_walked
    from ..archive_schema.spec import ReadLimits

    path = str(path)
    scan, f, safe = open_walked(path, limits or ReadLimits())
    if f is None:
        if scan.findings[0].check == "not-found":
            raise ReferenceError(f"{path}: no such reference file")
        if scan.findings[-1].check == "hdf5-open":
            raise ReferenceError(f"{path}: not an HDF5 file ({scan.findings[-1].message})")
        _fail(scan)
    with f:
        if not scan.ok:
            _fail(scan)
        fmt = (_attr(scan, f, "ubench_format", "/", False), _attr(scan, f, "ubench_format_version", "/", False))
        if fmt[0] == "prediction-archive":
            raise ReferenceError(f"{path} is a prediction archive, not a ubench reference file (the label file "
                                 "that `ubench reference ARCHIVE --out REF.h5` writes from a trusted archive)")
        if (fmt[0] != REFERENCE_FORMAT[0] or fmt[1] not in READABLE_VERSIONS
                or _attr(scan, f, "ubench_kind", "/", False) != "reference"):
            raise ReferenceError(f"{path}: not a ubench reference file (ubench_format {fmt[0]!r}, version "
                                 f"{fmt[1]!r}; expected {REFERENCE_FORMAT[0]!r}, one of {READABLE_VERSIONS})")
        n_classes = int(_attr(scan, f, "n_classes", "/"))
        dataset = str(_attr(scan, f, "dataset", "/", False) or "")
        primary = _attr(scan, f, "primary", "/", False)
        if "splits" not in f or not isinstance(f["splits"], h5py.Group):
            raise ReferenceError(f"{path}: no /splits group")
        splits = {}
        for name, g in f["splits"].items():
            where = f"/splits/{name}"
            if not isinstance(g, h5py.Group):
                raise ReferenceError(f"{path}: {where} must be a group")
            role = _attr(scan, g, "role", where)
            ids = _read_ints(scan, g, "sample_ids", where, safe)
            if ids is None:
                raise ReferenceError(f"{path}: {where}/sample_ids missing")
            labels = _read_ints(scan, g, "labels", where, safe)
            if labels is not None:
                if labels.shape != ids.shape:
                    raise ReferenceError(f"{path}: {where}/labels must be integers of the sample_ids' shape")
                bad = np.flatnonzero((labels < 0) | (labels >= n_classes))
                if bad.size:
                    raise ReferenceError(f"{path}: {where}/labels must be in [0, {n_classes}); found {labels[bad[0]]} "
                                         f"at index {bad[0]} ({bad.size} outside in all)")
            elif role != "ood":
                raise ReferenceError(f"{path}: {where}/labels missing (required for role {role!r})")
            intensity = _attr(scan, g, "shift_intensity", where, False)
            fingerprint = _attr(scan, g, "inputs_sha256", where, False)
            if fingerprint is not None and not (isinstance(fingerprint, str) and SHA256_HEX.match(fingerprint)):
                raise ReferenceError(f"{path}: {where}: attribute 'inputs_sha256' must be 64 lower-case hex digits")
            splits[name] = ReferenceSplit(role, _attr(scan, g, "dataset", where, False) or "", labels, ids,
                                          _attr(scan, g, "shift_kind", where, False),
                                          None if intensity is None else float(intensity), fingerprint)
    primary = _primary_of(splits, primary, f"{path}: attribute 'primary' at / names {primary!r}, which is not an "
                                           "in-domain split of the reference")
    return Reference(path=path, dataset=dataset, n_classes=n_classes, splits=splits, primary=primary)


def describe_reference(ref: Reference) -> dict:
    """What ``ubench inspect`` shows of a reference file (JSON-able): ``kind`` ``"reference-labels"``, ``path``,
    ``file_bytes``, ``dataset``, ``n_classes``, ``primary`` and per split (in the file's order) ``name``,
    ``role``, ``dataset``, ``shift_kind``, ``shift_intensity``, ``n_samples``, ``has_labels``, ``n_labelled_classes``
    (distinct labels present)."""
    return {
        "kind": "reference-labels", "path": ref.path, "file_bytes": Path(ref.path).stat().st_size,
        "dataset": ref.dataset, "n_classes": ref.n_classes, "primary": ref.primary,
        "splits": [{"name": name, "role": s.role, "dataset": s.dataset, "shift_kind": s.shift_kind,
                    "shift_intensity": s.shift_intensity, "n_samples": s.n_samples, "has_labels": s.labels is not None,
                    "n_labelled_classes": None if s.labels is None else int(np.unique(s.labels).size)}
                   for name, s in ref.splits.items()],
    }


def _primary_of(splits: dict[str, "ReferenceSplit"], primary: str | None, error: str) -> str | None:
    """``primary`` checked to be an in-domain split of ``splits`` (``ReferenceError`` starting with ``error``
    otherwise), or, when None, the first in-domain split (None if there is none)."""
    in_domain = [n for n, s in splits.items() if s.role == "in_domain"]
    if primary is None:
        return in_domain[0] if in_domain else None
    if primary not in in_domain:
        raise ReferenceError(f"{error}; in-domain splits: {', '.join(in_domain) or 'none'}")
    return primary


def primary_split(header, labels: dict[str, NDArray | None], ref: Reference | None) -> str | None:
    """The in-domain split behind the headline CLL, the ranking and the OOD scores.

    With a reference, the reference decides (its ``primary`` attribute, or for version 1.0 files its first
    labelled in-domain split in its own order), whatever order the upload wrote its splits in; without one, the
    archive's first in-domain split that has labels (the user's own run).
    """
    if ref is not None:
        return ref.primary
    return next((s for s in header.splits_with_role("in_domain") if labels.get(s) is not None), None)


def compare_to_reference(header, sample_ids: Mapping[str, NDArray | None], ref: Reference) -> list[str]:
    """Every difference between an archive (its header and per-split sample ids) and a reference.

    Checks, in order: class count; splits missing from or extra in the archive; per common split, role,
    shift kind and intensity (shift splits), size, missing sample ids, and the index of the first differing
    sample id. Empty when they match.
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
        elif rs.role == "shift":
            diffs += _shift_differences(name, s, rs)
        if rs.inputs_sha256 is not None and s.inputs_sha256 is not None and s.inputs_sha256 != rs.inputs_sha256:
            diffs.append(f"split {name!r}: predicted on other inputs: inputs_sha256 {s.inputs_sha256[:12]}... "
                         f"differs from the reference's {rs.inputs_sha256[:12]}... (SPEC.md section 4.2)")
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


def _shift_differences(name: str, s, rs: ReferenceSplit) -> list[str]:
    """A shift split's kind and intensity against the reference's; intensities agree to float32 precision
    (an archive may store them as float32)."""
    diffs = []
    if rs.shift_kind is not None and s.shift_kind != rs.shift_kind:
        diffs.append(f"split {name!r}: shift_kind differs (archive {s.shift_kind!r}, reference {rs.shift_kind!r})")
    if rs.shift_intensity is not None and not (
            s.shift_intensity is not None and np.float32(s.shift_intensity) == np.float32(rs.shift_intensity)):
        diffs.append(f"split {name!r}: shift_intensity differs (archive {s.shift_intensity!r}, reference "
                     f"{rs.shift_intensity!r})")
    return diffs
