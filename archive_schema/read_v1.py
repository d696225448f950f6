# SPDX-License-Identifier: MIT
"""Structural reader of prediction-archive v1.0 (frozen since release; later versions get their own module).

Reads attributes and dataset metadata only (names, dtypes, shapes); values are checked by the validator in
bounded blocks afterwards. Every problem becomes a finding naming its HDF5 path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from .archive import ArchiveHeader, MemberInfo, SplitInfo
from .registry import register_reader
from .safe_h5py import h5py
from .scan import Scan, read_attr
from .spec import DIAGNOSTICS_VERSION, MEMBER_KINDS, PROB_DTYPES, ROLES, ROOT_ATTRS_V1, SPLIT_NAME, VERSION, ArchiveSpec

__all__ = ["Parsed", "read_v1_0"]


@dataclass
class Parsed:
    """An archive's header plus handles of the datasets to stream (keyed ``(split, "probs"|"labels"|…)``)."""

    header: ArchiveHeader
    nodes: dict[tuple[str, str], h5py.Dataset]


def _str(scan: Scan, obj, name: str, where: str, required: bool = True) -> str | None:
    value = read_attr(scan, obj, name, where)
    if value is None:
        if required and not any(f.path == where and name in f.message for f in scan.findings):
            scan.add(where, "missing-attribute", f"required attribute {name!r} is missing")
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if not isinstance(value, str):
        scan.add(where, "attribute-type", f"attribute {name!r} must be a string; found {type(value).__name__}")
        return None
    return value


def _int(scan: Scan, obj, name: str, where: str) -> int | None:
    value = read_attr(scan, obj, name, where)
    if value is None:
        scan.add(where, "missing-attribute", f"required attribute {name!r} is missing")
        return None
    if not (isinstance(value, (int, np.integer)) and not isinstance(value, bool)):
        scan.add(where, "attribute-type", f"attribute {name!r} must be an integer; found {value!r}")
        return None
    return int(value)


def _kind(scan: Scan, obj, where: str, expected: str) -> None:
    found = _str(scan, obj, "ubench_kind", where)
    if found is not None and found != expected:
        scan.add(where, "value", f"ubench_kind must be {expected!r}; found {found!r}")


def _dataset(scan: Scan, group, name: str, where: str, safe: set[str], ndim: int, kinds: str,
             required: bool = True) -> h5py.Dataset | None:
    path = where.rstrip("/") + "/" + name
    if name not in group:
        if required:
            scan.add(path, "missing-dataset", "required dataset is missing")
        return None
    if path not in safe:  # already reported by the container walk
        return None
    ds = group[name]
    if not isinstance(ds, h5py.Dataset):
        scan.add(path, "object-type", "must be a dataset")
        return None
    if ds.ndim != ndim:
        scan.add(path, "rank", f"must have {ndim} dimensions; found shape {ds.shape}")
        return None
    if ds.dtype.kind not in kinds:
        scan.add(path, "dtype", f"dtype {ds.dtype} is not allowed here")
        return None
    return ds


def _strings(scan: Scan, ds: h5py.Dataset, path: str) -> list[str] | None:
    try:
        return [s.decode("utf-8", errors="replace") if isinstance(s, bytes) else str(s) for s in ds[()]]
    except (OSError, TypeError, ValueError) as exc:
        scan.add(path, "hdf5-read", f"cannot read strings: {exc}")
        return None


def _json_obj(scan: Scan, text: str | None, where: str, what: str) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        scan.add(where, "json", f"{what} is not valid JSON: {exc}")
        return {}
    if not isinstance(value, dict):
        scan.add(where, "json", f"{what} must be a JSON object")
        return {}
    return value


def _members(scan: Scan, f: h5py.File, safe: set[str]) -> tuple[MemberInfo, ...] | None:
    if "members" not in f or not isinstance(f["members"], h5py.Group):
        scan.add("/members", "missing-group", "required group is missing")
        return None
    g = f["members"]
    _kind(scan, g, "/members", "members")
    cols: dict[str, Any] = {}
    for key in ("seed", "epoch", "step"):
        ds = _dataset(scan, g, key, "/members", safe, 1, "iu")
        if ds is not None:
            cols[key] = ds[()].astype(np.int64)
    for key in ("kind", "info"):
        ds = _dataset(scan, g, key, "/members", safe, 1, "OS")
        if ds is not None:
            cols[key] = _strings(scan, ds, f"/members/{key}")
    if len(cols) != 5 or any(v is None for v in cols.values()):
        return None
    lengths = {k: len(v) for k, v in cols.items()}
    if len(set(lengths.values())) != 1:
        scan.add("/members", "shape", f"member columns differ in length: {lengths}")
        return None
    out = []
    for i, kind in enumerate(cols["kind"]):
        if kind not in MEMBER_KINDS:
            scan.add("/members/kind", "value", f"kind must be one of {MEMBER_KINDS}; found {kind!r} at index {i}")
            return None
        info = _json_obj(scan, cols["info"][i], "/members/info", f"info at index {i}")
        out.append(MemberInfo(int(cols["seed"][i]), int(cols["epoch"][i]), int(cols["step"][i]), kind, info))
    return tuple(out)


def _diagnostics(scan: Scan, f: h5py.File) -> dict[str, Any] | None:
    """The optional ``/diagnostics`` summary (SPEC.md §5.1); a version this reader does not know is skipped with a
    note, a malformed one is a finding."""
    if "diagnostics" not in f:
        return None
    g = f["diagnostics"]
    if not isinstance(g, h5py.Group):
        scan.add("/diagnostics", "type", "must be a group")
        return None
    version = _str(scan, g, "diagnostics_version", "/diagnostics", True)
    summary = _str(scan, g, "summary", "/diagnostics", True)
    if version is None or summary is None:
        return None
    if not VERSION.fullmatch(version) or version.split(".")[0] != DIAGNOSTICS_VERSION.split(".")[0]:
        scan.add("/diagnostics", "version", f"diagnostics_version {version!r} is not {DIAGNOSTICS_VERSION!r}; "
                 "the diagnostics are ignored", severity="warning")
        return None
    return _json_obj(scan, summary, "/diagnostics", "attribute 'summary'")


@register_reader(ArchiveSpec("prediction-archive", "1.0"))
def read_v1_0(scan: Scan, f: h5py.File, safe: set[str], version: str) -> Parsed | None:
    """Parse the v1.0 layout (see SPEC.md) into a header and dataset handles; None if it is broken."""
    root: dict[str, Any] = {}
    for name, (kind, required) in ROOT_ATTRS_V1.items():
        root[name] = _int(scan, f, name, "/") if kind == "int" else _str(scan, f, name, "/", required)
    if root.get("ubench_kind") not in (None, "archive"):
        scan.add("/", "value", f"ubench_kind must be 'archive'; found {root['ubench_kind']!r}")
    C = root.get("n_classes")
    if C is not None and not 2 <= C <= scan.limits.max_classes:
        scan.add("/", "value", f"n_classes must be in [2, {scan.limits.max_classes}]; found {C}")
        C = None
    members = _members(scan, f, safe)
    class_names = None
    if "classes" in f:
        ds = _dataset(scan, f, "classes", "/", safe, 1, "OS")
        class_names = _strings(scan, ds, "/classes") if ds is not None else None
        if class_names is not None and C is not None and len(class_names) != C:
            scan.add("/classes", "shape", f"has {len(class_names)} names but n_classes is {C}")
    scalability = None
    if "scalability" in f:
        g = f["scalability"]
        scalability = {k: read_attr(scan, g, k, "/scalability") for k in g.attrs}
        # contract (#9.9): a fixed-length string attribute reads as numpy.bytes_; decode it like _str does.
        scalability = {k: (v.decode("utf-8", errors="replace") if isinstance(v, bytes)
                           else v.item() if isinstance(v, np.generic) else v) for k, v in scalability.items()
                       if k != "ubench_kind" and v is not None}
    diagnostics = _diagnostics(scan, f)
    if "splits" not in f or not isinstance(f["splits"], h5py.Group):
        scan.add("/splits", "missing-group", "required group is missing")
        return None
    sg = f["splits"]
    _kind(scan, sg, "/splits", "splits")
    if len(sg) == 0:
        scan.add("/splits", "empty", "an archive needs at least one split")
    if len(sg) > scan.limits.max_splits:
        scan.add("/splits", "size-limit", f"{len(sg)} splits; at most {scan.limits.max_splits}")
        return None
    splits: dict[str, SplitInfo] = {}
    nodes: dict[tuple[str, str], h5py.Dataset] = {}
    M = None if members is None else len(members)
    for name in sg:
        where = f"/splits/{name}"
        if not SPLIT_NAME.match(name):
            scan.add(where, "name", f"split names must match {SPLIT_NAME.pattern}")
            continue
        g = sg[name]
        if not isinstance(g, h5py.Group):
            scan.add(where, "object-type", "each split must be a group")
            continue
        _kind(scan, g, where, "split")
        role = _str(scan, g, "role", where)
        if role is not None and role not in ROLES:
            scan.add(where, "value", f"role must be one of {ROLES}; found {role!r}")
            role = None
        dataset = _str(scan, g, "dataset", where)
        n = _int(scan, g, "n_samples", where)
        kind = intensity = None
        if role == "shift":
            kind = _str(scan, g, "shift_kind", where)
            value = read_attr(scan, g, "shift_intensity", where)
            if not isinstance(value, (float, int, np.floating, np.integer)) or not np.isfinite(value):
                scan.add(where, "missing-attribute", "shift splits need a finite numeric 'shift_intensity'")
            else:
                intensity = float(value)
        probs = _dataset(scan, g, "probs", where, safe, 3, "f")
        if probs is not None and probs.dtype not in PROB_DTYPES:
            scan.add(f"{where}/probs", "dtype", f"must be float32 or float64; found {probs.dtype}")
            probs = None
        if probs is not None:
            m, pn, pc = probs.shape
            problems = []
            if n is not None and pn != n:
                problems.append(f"{pn} samples but n_samples is {n}")
            if C is not None and pc != C:
                problems.append(f"{pc} classes but n_classes is {C}")
            if M is not None and m != M:
                problems.append(f"{m} members but /members lists {M}")
            if m == 0 or pn == 0:
                problems.append("no members or no samples")
            if m > scan.limits.max_members or pn > scan.limits.max_samples:
                problems.append("more members or samples than the read limits allow")
            if problems:
                scan.add(f"{where}/probs", "shape", f"shape {probs.shape}: " + "; ".join(problems))
                probs = None
        labels = _dataset(scan, g, "labels", where, safe, 1, "iu", required=False)
        ids = _dataset(scan, g, "sample_ids", where, safe, 1, "iu", required=False)
        for key, ds in (("labels", labels), ("sample_ids", ids)):
            if ds is not None and n is not None and ds.shape[0] != n:
                scan.add(f"{where}/{key}", "shape", f"has {ds.shape[0]} entries but n_samples is {n}")
        if None in (role, dataset, n, probs) or (role == "shift" and None in (kind, intensity)):
            continue
        splits[name] = SplitInfo(name, role, dataset, n, kind, intensity, labels is not None, ids is not None)
        nodes[(name, "probs")] = probs
        if labels is not None:
            nodes[(name, "labels")] = labels
        if ids is not None:
            nodes[(name, "sample_ids")] = ids
    if not scan.ok or members is None or C is None:
        return None
    if not any(s.role == "in_domain" for s in splits.values()):
        scan.add("/splits", "no-in-domain", "no split has role 'in_domain'; only OOD/shift scores are possible",
                 severity="warning")
    provenance = {k: root[k] for k in ("writer", "framework", "framework_version", "created") if root.get(k)}
    header = ArchiveHeader(
        path=scan.path,
        format_version=version,
        method=root["method"],
        model=root["model"],
        dataset=root["dataset"],
        n_classes=C,
        n_members=len(members),
        splits=splits,
        members=members,
        class_names=None if class_names is None else tuple(class_names),
        provenance=provenance,
        config=_json_obj(scan, root.get("config"), "/", "attribute 'config'"),
        scalability=scalability,
        diagnostics=diagnostics,
        description=root.get("description") or "",
    )
    return Parsed(header, nodes)
