# SPDX-License-Identifier: MIT
"""Structural reader of prediction-archive v1.0 (frozen since release; later versions get their own module).

Reads attributes and dataset metadata only (names, dtypes, shapes) plus the small string and integer columns;
probability values are checked by the validator in bounded blocks afterwards. Every problem becomes a finding
naming its HDF5 path. ``read_v1_0`` runs the named steps below in SPEC.md's order: root attributes (§2), members
(§3), class names (§1), scalability (§5), then each split (§4).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from .archive import ArchiveHeader, MemberInfo, SplitInfo
from .blocks import read_all
from .registry import register_reader
from .safe_h5py import h5py
from .scan import Scan, child, read_attr
from .fingerprint import SHA256_HEX
from .spec import (DIAGNOSTICS_VERSION, MEMBER_KINDS, PROB_DTYPES, ROLES, ROOT_ATTRS_V1, SPLIT_NAME, VERSION,
                   ArchiveSpec)
from .strings import read_strings, utf8_problem

__all__ = ["Parsed", "read_v1_0"]

#: Root string attributes that hold free text, bounded by ``max_attr_bytes``; every other string attribute is a
#: name, bounded by ``max_name_bytes``.
_TEXT_ATTRS = frozenset({"config", "description"})


@dataclass
class Parsed:
    """An archive's header plus handles of the datasets to stream (keyed ``(split, "probs"|"labels"|…)``)."""

    header: ArchiveHeader
    nodes: dict[tuple[str, str], h5py.Dataset]


# -- attributes ----------------------------------------------------------------------------------------------
def _str(scan: Scan, obj, name: str, where: str, required: bool = True, text: bool = False) -> str | None:
    """A string attribute (strict UTF-8, at most ``max_name_bytes`` unless ``text``), or None with a finding."""
    value = read_attr(scan, obj, name, where)
    if value is None:
        if required and not any(f.path == where and name in f.message for f in scan.findings):
            scan.add(where, "missing-attribute", f"required attribute {name!r} is missing")
        return None
    if not isinstance(value, str):
        scan.add(where, "attribute-type", f"attribute {name!r} must be a string; found {type(value).__name__}")
        return None
    if not text and len(value.encode("utf-8")) > scan.limits.max_name_bytes:
        scan.add(where, "string-length", f"attribute {name!r} is {len(value.encode('utf-8'))} bytes; at most "
                 f"{scan.limits.max_name_bytes}")
        return None
    return value


def _int(scan: Scan, obj, name: str, where: str) -> int | None:
    value = read_attr(scan, obj, name, where)
    if value is None:
        if not any(f.path == where and name in f.message for f in scan.findings):
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


# -- datasets ------------------------------------------------------------------------------------------------
def _dataset(scan: Scan, group, name: str, where: str, safe: set[str], ndim: int, kinds: str,
             required: bool = True) -> h5py.Dataset | None:
    """The dataset ``where/name`` if the walk judged it safe and its rank and dtype kind fit; else None."""
    path = where.rstrip("/") + "/" + name
    if name not in group:
        if required:
            scan.add(path, "missing-dataset", "required dataset is missing")
        return None
    if path not in safe:  # already reported by the container walk
        return None
    ds = child(group, name)
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


def _column(scan: Scan, ds: h5py.Dataset, path: str, max_len: int) -> bool:
    """True when a 1-D metadata column has at most ``max_len`` entries (checked before it is read)."""
    if ds.shape[0] > max_len:
        scan.add(path, "shape", f"has {ds.shape[0]} entries; at most {max_len} are read")
        return False
    return True


# -- the steps -----------------------------------------------------------------------------------------------
def _root_attrs(scan: Scan, f: h5py.File) -> dict[str, Any]:
    """SPEC.md §2: every root attribute by its declared kind; a wrong ``ubench_kind`` or ``n_classes`` is a
    finding and ``n_classes`` becomes None."""
    root: dict[str, Any] = {}
    for name, (kind, required) in ROOT_ATTRS_V1.items():
        root[name] = (_int(scan, f, name, "/") if kind == "int"
                      else _str(scan, f, name, "/", required, text=name in _TEXT_ATTRS))
    if root.get("ubench_kind") not in (None, "archive"):
        scan.add("/", "value", f"ubench_kind must be 'archive'; found {root['ubench_kind']!r}")
    C = root.get("n_classes")
    if C is not None and not 2 <= C <= scan.limits.max_classes:
        scan.add("/", "value", f"n_classes must be in [2, {scan.limits.max_classes}]; found {C}")
        root["n_classes"] = None
    return root


def _members(scan: Scan, f: h5py.File, safe: set[str]) -> tuple[MemberInfo, ...] | None:
    """SPEC.md §3: five columns of one length — integer seed, epoch, step; string kind (one of MEMBER_KINDS)
    and info (one JSON object each)."""
    g = child(f, "members") if "members" in f else None
    if not isinstance(g, h5py.Group):
        scan.add("/members", "missing-group", "required group is missing")
        return None
    _kind(scan, g, "/members", "members")
    cap = scan.limits.max_members
    cols: dict[str, Any] = {}
    for key in ("seed", "epoch", "step"):
        ds = _dataset(scan, g, key, "/members", safe, 1, "iu")
        if ds is not None and _column(scan, ds, f"/members/{key}", cap):
            cols[key] = read_all(ds, scan.limits).astype(np.int64)
    for key, item_bytes in (("kind", scan.limits.max_name_bytes), ("info", scan.limits.max_string_bytes)):
        ds = _dataset(scan, g, key, "/members", safe, 1, "OS")
        if ds is not None and _column(scan, ds, f"/members/{key}", cap):
            cols[key] = read_strings(scan, ds, f"/members/{key}", item_bytes)
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


def _class_names(scan: Scan, f: h5py.File, safe: set[str], C: int | None) -> list[str] | None:
    """SPEC.md §1: optional ``/classes``, C names of at most ``max_name_bytes`` each."""
    if "classes" not in f:
        return None
    ds = _dataset(scan, f, "classes", "/", safe, 1, "OS")
    if ds is None or not _column(scan, ds, "/classes", scan.limits.max_classes):
        return None
    names = read_strings(scan, ds, "/classes", scan.limits.max_name_bytes)
    if names is not None and C is not None and len(names) != C:
        scan.add("/classes", "shape", f"has {len(names)} names but n_classes is {C}")
    return names


def _scalability(scan: Scan, f: h5py.File) -> dict[str, Any] | None:
    """SPEC.md §5: optional ``/scalability`` attributes; names and string values are names (strict UTF-8,
    ``max_name_bytes``)."""
    if "scalability" not in f:
        return None
    g = child(f, "scalability")
    out: dict[str, Any] = {}
    for key in g.attrs:  # h5py hands back a name that is not valid UTF-8 as bytes
        problem = utf8_problem(key)
        if problem is not None:
            scan.add("/scalability", "encoding", f"attribute name {key!r}: {problem}")
            continue
        if len(key.encode("utf-8")) > scan.limits.max_name_bytes:
            scan.add("/scalability", "name-length", f"an attribute name of {len(key.encode('utf-8'))} bytes; at "
                     f"most {scan.limits.max_name_bytes}")
            continue
        if key == "ubench_kind":
            continue
        value = read_attr(scan, g, key, "/scalability")
        if isinstance(value, str) and len(value.encode("utf-8")) > scan.limits.max_name_bytes:
            scan.add("/scalability", "string-length", f"attribute {key!r} is {len(value.encode('utf-8'))} bytes; "
                     f"at most {scan.limits.max_name_bytes}")
            continue
        if value is not None:
            out[key] = value.item() if isinstance(value, np.generic) else value
    return out


def _diagnostics(scan: Scan, f: h5py.File) -> dict[str, Any] | None:
    """The optional ``/diagnostics`` summary (SPEC.md §5.1); a version this reader does not know is skipped with a
    note, a malformed one is a finding."""
    if "diagnostics" not in f:
        return None
    g = child(f, "diagnostics")
    if not isinstance(g, h5py.Group):
        scan.add("/diagnostics", "type", "must be a group")
        return None
    version = _str(scan, g, "diagnostics_version", "/diagnostics", True)
    summary = _str(scan, g, "summary", "/diagnostics", True, text=True)
    if version is None or summary is None:
        return None
    if not VERSION.fullmatch(version) or version.split(".")[0] != DIAGNOSTICS_VERSION.split(".")[0]:
        scan.add("/diagnostics", "version", f"diagnostics_version {version!r} is not {DIAGNOSTICS_VERSION!r}; "
                 "the diagnostics are ignored", severity="warning")
        return None
    return _json_obj(scan, summary, "/diagnostics", "attribute 'summary'")


def _splits_group(scan: Scan, f: h5py.File) -> h5py.Group | None:
    """SPEC.md §4: ``/splits`` exists, is a group of kind ``splits`` with 1 to ``max_splits`` members."""
    sg = child(f, "splits") if "splits" in f else None
    if not isinstance(sg, h5py.Group):
        scan.add("/splits", "missing-group", "required group is missing")
        return None
    _kind(scan, sg, "/splits", "splits")
    if len(sg) == 0:
        scan.add("/splits", "empty", "an archive needs at least one split")
    if len(sg) > scan.limits.max_splits:
        scan.add("/splits", "size-limit", f"{len(sg)} splits; at most {scan.limits.max_splits}")
        return None
    return sg


def _split_attrs(scan: Scan, g: h5py.Group, where: str) -> tuple[str | None, str | None, int | None,
                                                                    str | None, float | None]:
    """A split's role, dataset, n_samples and, for shifts, a finite numeric shift_kind and shift_intensity
    (the optional ``inputs_sha256`` is read by :func:`_inputs_sha256`)."""
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
        if (not isinstance(value, (float, int, np.floating, np.integer)) or isinstance(value, bool)
                or not np.isfinite(value)):
            scan.add(where, "missing-attribute", "shift splits need a finite numeric 'shift_intensity'")
        else:
            intensity = float(value)
    return role, dataset, n, kind, intensity


def _inputs_sha256(scan: Scan, g: h5py.Group, where: str) -> str | None:
    """The optional split fingerprint (SPEC.md §4.2): a lower-case hex sha256, or a ``value`` finding."""
    value = _str(scan, g, "inputs_sha256", where, required=False)
    if value is not None and not SHA256_HEX.match(value):
        scan.add(where, "value", f"attribute 'inputs_sha256' must be 64 lower-case hex digits; found "
                 f"{value[:80]!r}")
        return None
    return value


def _split_probs(scan: Scan, g: h5py.Group, where: str, safe: set[str], n: int | None, C: int | None,
                 M: int | None) -> h5py.Dataset | None:
    """``probs``: float32/float64 of shape (M, n_samples, C) within the dimension limits."""
    probs = _dataset(scan, g, "probs", where, safe, 3, "f")
    if probs is None:
        return None
    if probs.dtype not in PROB_DTYPES:
        scan.add(f"{where}/probs", "dtype", f"must be float32 or float64; found {probs.dtype}")
        return None
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
        return None
    return probs


def _split_columns(scan: Scan, g: h5py.Group, where: str, safe: set[str], n: int | None
                   ) -> dict[str, h5py.Dataset]:
    """Optional integer ``labels`` and ``sample_ids`` of n_samples entries each."""
    out = {}
    for key in ("labels", "sample_ids"):
        ds = _dataset(scan, g, key, where, safe, 1, "iu", required=False)
        if ds is not None and n is not None and ds.shape[0] != n:
            scan.add(f"{where}/{key}", "shape", f"has {ds.shape[0]} entries but n_samples is {n}")
        elif ds is not None:
            out[key] = ds
    return out


def _split(scan: Scan, sg: h5py.Group, name: str, safe: set[str], C: int | None, M: int | None
           ) -> tuple[SplitInfo, dict[str, h5py.Dataset]] | None:
    """One split: its name, group, attributes and datasets; None when any of them is broken."""
    where = f"/splits/{name}"
    if not SPLIT_NAME.match(name):
        scan.add(where, "name", f"split names must match {SPLIT_NAME.pattern}")
        return None
    g = child(sg, name)
    if not isinstance(g, h5py.Group):
        scan.add(where, "object-type", "each split must be a group")
        return None
    role, dataset, n, kind, intensity = _split_attrs(scan, g, where)
    fingerprint = _inputs_sha256(scan, g, where)
    probs = _split_probs(scan, g, where, safe, n, C, M)
    columns = _split_columns(scan, g, where, safe, n)
    if None in (role, dataset, n, probs) or (role == "shift" and None in (kind, intensity)):
        return None
    info = SplitInfo(name, role, dataset, n, kind, intensity, "labels" in columns, "sample_ids" in columns,
                     fingerprint)
    return info, {"probs": probs, **columns}


def _header(scan: Scan, version: str, root: dict[str, Any], members: tuple[MemberInfo, ...],
            class_names: list[str] | None, scalability: dict[str, Any] | None,
            splits: dict[str, SplitInfo], diagnostics: dict[str, Any] | None = None) -> ArchiveHeader:
    provenance = {k: root[k] for k in ("writer", "framework", "framework_version", "created") if root.get(k)}
    return ArchiveHeader(
        path=scan.path,
        format_version=version,
        method=root["method"],
        model=root["model"],
        dataset=root["dataset"],
        n_classes=root["n_classes"],
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


@register_reader(ArchiveSpec("prediction-archive", "1.0"))
def read_v1_0(scan: Scan, f: h5py.File, safe: set[str], version: str) -> Parsed | None:
    """Parse the v1.0 layout (see SPEC.md) into a header and dataset handles; None if it is broken."""
    root = _root_attrs(scan, f)
    C = root["n_classes"]
    members = _members(scan, f, safe)
    class_names = _class_names(scan, f, safe, C)
    scalability = _scalability(scan, f)
    diagnostics = _diagnostics(scan, f)
    sg = _splits_group(scan, f)
    if sg is None:
        return None
    M = None if members is None else len(members)
    splits: dict[str, SplitInfo] = {}
    nodes: dict[tuple[str, str], h5py.Dataset] = {}
    for name in sg:
        parsed = _split(scan, sg, name, safe, C, M)
        if parsed is not None:
            splits[name] = parsed[0]
            nodes.update({(name, key): ds for key, ds in parsed[1].items()})
    if not scan.ok or members is None or C is None:
        return None
    if not any(s.role == "in_domain" for s in splits.values()):
        scan.add("/splits", "no-in-domain", "no split has role 'in_domain'; only OOD/shift scores are possible",
                 severity="warning")
    header = _header(scan, version, root, members, class_names, scalability, splits, diagnostics)
    return Parsed(header, nodes)
