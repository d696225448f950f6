# SPDX-License-Identifier: MIT
"""Container-level checks of an untrusted HDF5 file, before any archive data is read.

Order matters: the file is stat'ed and its signature read with plain Python first; HDF5 opens it read-only only
if that passes; then every link is classified without following it, and every dataset's creation property list
(layout, external storage, filters, chunking) and declared versus stored size are judged. Nothing here reads
dataset values.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import Finding
from .safe_h5py import h5py
from .spec import ALLOWED_FILTERS, ReadLimits

__all__ = ["Scan", "UNREADABLE_CHECKS", "check_container", "open_readonly", "walk", "read_attr", "open_dataset"]

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
#: Findings that mean "not readable as an archive at all" (CLI exit code 2 rather than 1).
UNREADABLE_CHECKS = frozenset({"not-found", "not-regular-file", "not-hdf5", "hdf5-open"})
# A directory that never exists: HDF5 resolves relative external-storage and VDS source names against it.
_NOWHERE = b"/nonexistent/ubench-refuses-external-files/"


@dataclass
class Scan:
    """Findings gathered while inspecting one file."""

    path: str
    limits: ReadLimits
    findings: list[Finding] = field(default_factory=list)
    declared_bytes: int = 0

    def add(self, path: str, check: str, message: str, severity: str = "error") -> None:
        self.findings.append(Finding(path, check, severity, message))

    @property
    def ok(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)


def check_container(scan: Scan) -> bool:
    """Regular file (not a link, FIFO or device), HDF5 signature at offset 0 (no user block)."""
    try:
        st = os.lstat(scan.path)
    except OSError as exc:
        scan.add("<file>", "not-found", f"cannot stat {scan.path}: {exc.strerror}")
        return False
    if not stat.S_ISREG(st.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
        scan.add("<file>", "not-regular-file", f"{scan.path} is {kind}; archives must be regular files")
        return False
    try:
        with open(scan.path, "rb") as fh:
            head = fh.read(8)
            if head == HDF5_SIGNATURE:
                return True
            # HDF5 looks for its signature at 0, 512, 1024, 2048, …: anything before it is a user block.
            offset = 512
            while offset + 8 <= st.st_size:
                fh.seek(offset)
                if fh.read(8) == HDF5_SIGNATURE:
                    scan.add("<file>", "user-block",
                             f"the file starts with a {offset}-byte user block; archives must not have one")
                    return False
                offset *= 2
    except OSError as exc:
        scan.add("<file>", "not-hdf5", f"cannot read {scan.path}: {exc.strerror}")
        return False
    scan.add("<file>", "not-hdf5", "no HDF5 signature found: this is not an HDF5 file")
    return False


def open_readonly(scan: Scan) -> h5py.File | None:
    """Open read-only with the sec2 driver and no file locking; a failure becomes a finding."""
    try:
        return h5py.File(scan.path, "r", driver="sec2", locking=False)
    except (OSError, ValueError, RuntimeError) as exc:
        scan.add("<file>", "hdf5-open", f"HDF5 cannot open the file (truncated or corrupt?): {exc}")
        return None


def _dapl() -> h5py.h5p.PropDAID:
    dapl = h5py.h5p.create(h5py.h5p.DATASET_ACCESS)
    dapl.set_virtual_view(h5py.h5d.VDS_FIRST_MISSING)
    dapl.set_virtual_prefix(_NOWHERE)
    dapl.set_efile_prefix(_NOWHERE)
    return dapl


def open_dataset(parent: h5py.Group, name: str) -> h5py.Dataset:
    """Open a hard-linked dataset with access properties that point any external file reference nowhere."""
    return h5py.Dataset(h5py.h5d.open(parent.id, name.encode(), dapl=_dapl()))


def read_attr(scan: Scan, obj: h5py.HLObject, name: str, where: str):
    """Read one attribute after bounding its storage size; None (with a finding) when it cannot be read."""
    try:
        if not obj.attrs.__contains__(name):
            return None
        aid = h5py.h5a.open(obj.id, name.encode())
        if aid.get_storage_size() > scan.limits.max_attr_bytes:
            scan.add(where, "attribute-size",
                     f"attribute {name!r} stores {aid.get_storage_size()} bytes (limit {scan.limits.max_attr_bytes})")
            return None
        return obj.attrs[name]
    except (OSError, KeyError, TypeError, ValueError, RuntimeError) as exc:
        scan.add(where, "attribute-read", f"attribute {name!r} cannot be read: {exc}")
        return None


def walk(scan: Scan, f: h5py.File) -> set[str]:
    """Classify every link and judge every dataset's storage; returns the paths of the datasets that are safe."""
    safe: set[str] = set()
    seen: set[int] = set()
    stack = [("/", f)]
    count = 0
    while stack:
        gpath, group = stack.pop()
        try:
            names = list(group.keys())
        except (OSError, RuntimeError, ValueError) as exc:
            scan.add(gpath, "hdf5-read", f"cannot list the group: {exc}")
            continue
        for name in names:
            count += 1
            path = gpath.rstrip("/") + "/" + name
            if count > scan.limits.max_objects:
                scan.add(path, "object-count", f"more than {scan.limits.max_objects} links in the file")
                return safe
            try:
                ltype = group.id.links.get_info(name.encode()).type
            except (OSError, RuntimeError, ValueError, KeyError) as exc:
                scan.add(path, "link", f"cannot classify the link: {exc}")
                continue
            if ltype == h5py.h5l.TYPE_SOFT:
                scan.add(path, "soft-link", "soft links are not allowed (they can point anywhere in the file)")
                continue
            if ltype == h5py.h5l.TYPE_EXTERNAL:
                scan.add(path, "external-link", "external links are not allowed (they point to other files)")
                continue
            if ltype != h5py.h5l.TYPE_HARD:
                scan.add(path, "user-defined-link", f"link type {ltype} is not allowed")
                continue
            try:
                info = h5py.h5o.get_info(group.id, name.encode())
            except (OSError, RuntimeError, ValueError, KeyError) as exc:
                scan.add(path, "hdf5-read", f"cannot read the object header: {exc}")
                continue
            if info.addr in seen:
                continue
            seen.add(info.addr)
            try:
                if info.type == h5py.h5o.TYPE_GROUP:
                    stack.append((path, group[name]))
                elif info.type == h5py.h5o.TYPE_DATASET:
                    if _check_dataset(scan, path, open_dataset(group, name)):
                        safe.add(path)
            except (OSError, RuntimeError, ValueError, KeyError, TypeError) as exc:
                scan.add(path, "hdf5-read", f"cannot open the object: {exc}")
    return safe


def _check_dataset(scan: Scan, path: str, ds: h5py.Dataset) -> bool:
    """Judge one dataset from its creation property list and its storage size; True if it may be read."""
    before = len(scan.findings)
    dcpl = ds.id.get_create_plist()
    layout = dcpl.get_layout()
    if layout == h5py.h5d.VIRTUAL:
        scan.add(path, "virtual-dataset", "virtual datasets are not allowed (they map data from other files)")
        return False
    if dcpl.get_external_count() > 0:
        scan.add(path, "external-storage", "external raw storage is not allowed (the data lives in other files)")
        return False
    compressed = False
    for i in range(dcpl.get_nfilters()):
        code, _flags, _values, fname = dcpl.get_filter(i)
        if code not in ALLOWED_FILTERS:
            label = fname.decode(errors="replace") if isinstance(fname, bytes) else str(fname)
            scan.add(path, "filter", f"filter id {code} ({label!r}) is not allowed; allowed: deflate, shuffle, fletcher32")
            return False
        compressed |= code == 1
    shape = ds.shape or ()
    declared = int(np.prod(shape, dtype=np.float64)) * ds.dtype.itemsize if shape else ds.dtype.itemsize
    if scan.declared_bytes + declared > scan.limits.max_total_bytes:
        scan.add(path, "size-limit",
                 f"declares {declared} bytes; archives may declare at most {scan.limits.max_total_bytes} in all")
        return False  # not counted: one refused dataset must not make every later one 'over the limit'
    scan.declared_bytes += declared
    storage = ds.id.get_storage_size()
    if layout == h5py.h5d.CHUNKED:
        chunk = dcpl.get_chunk()
        chunk_bytes = int(np.prod(chunk, dtype=np.float64)) * ds.dtype.itemsize
        if chunk_bytes > scan.limits.max_chunk_bytes:
            scan.add(path, "chunk-size",
                     f"chunks of {chunk_bytes} bytes exceed the limit of {scan.limits.max_chunk_bytes}")
            return False
        expected = int(np.prod([-(-s // c) for s, c in zip(shape, chunk)], dtype=np.float64)) if declared else 0
        if expected > 10_000_000:
            scan.add(path, "chunk-count", f"{expected} chunks declared; at most 10,000,000 are read")
            return False
        stored = ds.id.get_num_chunks() if expected else 0
        if stored < expected:
            scan.add(path, "missing-storage",
                     f"declares {declared} bytes in {expected} chunks but only {stored} chunks are stored")
            return False
    elif declared and storage < declared:
        scan.add(path, "missing-storage", f"declares {declared} bytes but stores only {storage}")
        return False
    if compressed and declared:
        ratio = declared / max(storage, 1)
        if ratio > scan.limits.max_compression_ratio:
            scan.add(path, "compression-ratio",
                     f"{declared} declared bytes stored in {storage} (ratio {ratio:.0f}:1, limit "
                     f"{scan.limits.max_compression_ratio:.0f}:1): refusing a likely decompression bomb")
            return False
    return len(scan.findings) == before


def file_sha256(path: str | Path, block: int = 1 << 20) -> str:
    """sha256 of a regular file's bytes (recorded in reports and leaderboard keys).

    Opened without following a symbolic link and refused (``OSError``) unless it is a regular file, so hashing
    an upload can neither be redirected nor block on a FIFO.
    """
    import hashlib

    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise OSError(f"{path} is not a regular file")
        while chunk := fh.read(block):
            h.update(chunk)
    return h.hexdigest()
