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
from .strings import charge_metadata, decode_name, text_bytes, utf8_problem

__all__ = ["Scan", "UNREADABLE_CHECKS", "check_container", "open_readonly", "open_walked", "walk", "read_attr",
           "open_dataset", "child"]

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
    metadata_bytes: int = 0  # decoded attribute values and strings read so far (``limits.max_metadata_bytes``)

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


#: Bytes of HDF5's metadata cache for one open file (object headers, the chunk index's B-tree nodes). HDF5 lets it
#: grow to 32 MiB and keeps several times its accounted size resident: walking the chunk index of an archive of
#: 200 members (19,400 chunks; the scan counts them) or of 21 ImageNet-sized splits left 7-9 MiB resident, which
#: grew the peak memory of scoring with M and with the number of splits (issue #29 item 2). Capped, the nodes are
#: read again from the file (the OS's page cache) when needed: reading M = 200's 19,400 chunks took 0.23 s
#: either way, and the 21-split archive scored in 62 s at load 5.5 (67 s at load 3 before).
METADATA_CACHE_BYTES = 64 * 2**10


def open_readonly(scan: Scan) -> h5py.File | None:
    """Open read-only with the sec2 driver and no file locking; a failure becomes a finding.

    No chunk cache (``rdcc_nbytes=0``): the readers read whole chunks, which HDF5 2.0 otherwise copies through
    an 8 MiB cache per open dataset, and each open dataset's cache index alone took 64 KiB (an archive keeps
    every split's datasets open); and a metadata cache of :data:`METADATA_CACHE_BYTES`.
    """
    try:
        f = h5py.File(scan.path, "r", driver="sec2", locking=False, rdcc_nbytes=0)
    except (OSError, ValueError, RuntimeError) as exc:
        scan.add("<file>", "hdf5-open", f"HDF5 cannot open the file (truncated or corrupt?): {exc}")
        return None
    config = f.id.get_mdc_config()
    config.set_initial_size = True
    config.initial_size = config.max_size = METADATA_CACHE_BYTES
    config.min_size = min(config.min_size, METADATA_CACHE_BYTES)
    f.id.set_mdc_config(config)
    return f


def open_walked(path: str | Path, limits: ReadLimits) -> tuple[Scan, h5py.File | None, set[str]]:
    """The container checks, the read-only open and the link walk in one, for any untrusted HDF5 file (archives,
    reference files, imported release files): returns the scan, the open file (None when it could not be opened;
    the caller closes it otherwise) and the datasets that may be read (through :func:`open_dataset`). Errors in
    ``scan.findings`` (external links, external storage, virtual datasets, unknown filters, sizes) say why a file
    must not be read further."""
    scan = Scan(str(path), limits)
    if not check_container(scan):
        return scan, None, set()
    f = open_readonly(scan)
    if f is None:
        return scan, None, set()
    return scan, f, walk(scan, f)


def _dapl() -> h5py.h5p.PropDAID:
    dapl = h5py.h5p.create(h5py.h5p.DATASET_ACCESS)
    dapl.set_virtual_view(h5py.h5d.VDS_FIRST_MISSING)
    dapl.set_virtual_prefix(_NOWHERE)
    dapl.set_efile_prefix(_NOWHERE)
    return dapl


def open_dataset(parent: h5py.Group, name: str) -> h5py.Dataset:
    """Open a hard-linked dataset with access properties that point any external file reference nowhere.

    libhdf5 shares a dataset that is already open in this process (through any handle of the same file) and
    refuses to open it again with other external-file or virtual-dataset prefixes than it holds. It holds the
    defaults when it was opened plainly (``group[name]``) or reopened by ``H5Drefresh``
    (:func:`~ubench.archive_schema.blocks.drop_chunk_cache`), so a second reader of an archive that one reader had
    open failed. Such a dataset is opened with the default prefixes: the open shares the object already open and
    resolves nothing about its storage again, and its layout is judged as any other's (:func:`walk`)."""
    try:
        return h5py.Dataset(h5py.h5d.open(parent.id, name.encode(), dapl=_dapl()))
    except KeyError as exc:  # h5py's type for this refusal
        if "prefix does not match" not in str(exc):
            raise
        return h5py.Dataset(h5py.h5d.open(parent.id, name.encode()))


def child(parent: h5py.Group, name: str) -> h5py.HLObject:
    """``parent[name]`` in a file whose walk found only hard links, with a dataset opened through
    :func:`open_dataset`. A plain ``parent[name]`` of a dataset that the walk's temporary handle still held open
    failed (libhdf5 refuses other external-file prefixes for an open dataset): in a Dask worker, whose profiler
    keeps a sampled frame, and its locals, alive for a while."""
    if parent.get(name, getclass=True) is h5py.Dataset:  # the class from the object header, nothing opened
        return open_dataset(parent, name)
    return parent[name]


def read_attr(scan: Scan, obj: h5py.HLObject, name: str, where: str):
    """Read one attribute within the limits; None (with a finding) when it cannot or must not be read.

    An empty attribute (null dataspace, ``h5py.Empty``) is an ``attribute-empty`` finding. Bounded before reading:
    its stored size (``max_attr_bytes``) and, for variable-length types (whose stored
    size is 16 bytes per element whatever the heap holds), one element at most. Bounded after reading: its decoded
    size (a 32 MiB variable-length string stores 16 bytes) and the file's metadata budget. Text is returned as
    ``str`` decoded strictly as UTF-8; an invalid byte is an ``encoding`` finding naming the attribute.
    """
    limit = scan.limits.max_attr_bytes
    try:
        if not obj.attrs.__contains__(name):
            return None
        aid = h5py.h5a.open(obj.id, name.encode())
        if aid.get_space().get_simple_extent_type() == h5py.h5s.NULL:  # libhdf5 would only say "unspecified error"
            scan.add(where, "attribute-empty", f"attribute {name!r} has no value (an empty HDF5 attribute: null "
                     "dataspace, h5py.Empty); give it a value or leave it out")
            return None
        if aid.get_storage_size() > limit:
            scan.add(where, "attribute-size",
                     f"attribute {name!r} stores {aid.get_storage_size()} bytes (limit {limit})")
            return None
        if aid.dtype.kind == "O" and aid.get_space().get_simple_extent_npoints() > 1:
            scan.add(where, "attribute-shape", f"attribute {name!r} holds several variable-length values; "
                     "variable-length attributes must be scalars")
            return None
        value = obj.attrs[name]
    except (OSError, KeyError, TypeError, ValueError, RuntimeError) as exc:
        scan.add(where, "attribute-read", f"attribute {name!r} cannot be read: {exc}")
        return None
    size = text_bytes(value)
    if size > limit:
        scan.add(where, "attribute-size", f"attribute {name!r} holds {size} bytes once read (limit {limit})")
        return None
    if not charge_metadata(scan, where, f"attribute {name!r}", size):
        return None
    texts = value.ravel().tolist() if isinstance(value, np.ndarray) and value.dtype.kind in "OSU" else [value]
    for text in texts:
        if isinstance(text, (str, bytes, np.bytes_)):
            problem = utf8_problem(text)
            if problem is not None:
                scan.add(where, "encoding", f"attribute {name!r}: {problem}")
                return None
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value).decode("utf-8")
    return value


def _child_name(scan: Scan, gpath: str, raw: bytes) -> str | None:
    """A link name as text, or None (with a finding) when it is too long or not valid UTF-8.

    The finding's path shows at most 64 characters of a refused name, so no message grows with the name."""
    shown = decode_name(raw[:64]) + ("…" if len(raw) > 64 else "")
    where = gpath.rstrip("/") + "/" + shown
    if len(raw) > scan.limits.max_name_bytes:
        scan.add(where, "name-length", f"a link name of {len(raw)} bytes; names may have at most "
                 f"{scan.limits.max_name_bytes}")
        return None
    problem = utf8_problem(raw)
    if problem is not None:
        scan.add(where, "encoding", f"link name: {problem}")
        return None
    return raw.decode("utf-8")


def _attr_count_ok(scan: Scan, path: str, info) -> bool:
    if info.num_attrs > scan.limits.max_attrs:
        scan.add(path, "attribute-count", f"{info.num_attrs} attributes; an object may have at most "
                 f"{scan.limits.max_attrs}")
        return False
    return True


def walk(scan: Scan, f: h5py.File) -> set[str]:
    """Classify every link and judge every dataset's storage; returns the paths of the datasets that are safe.

    Linear in the number of links: a group's link count is checked against ``max_objects`` before its names are
    listed, names are bounded (``max_name_bytes``, strict UTF-8) and groups nest at most ``max_depth`` deep, so
    every path stays short (a deep chain of long names made path building quadratic: issue #16 item 10).
    """
    safe: set[str] = set()
    seen: set[int] = set()
    _attr_count_ok(scan, "/", h5py.h5o.get_info(f.id))
    stack = [("/", f, 0)]
    count = 0
    while stack:
        gpath, group, depth = stack.pop()
        try:
            if count + group.id.get_num_objs() > scan.limits.max_objects:
                scan.add(gpath, "object-count", f"more than {scan.limits.max_objects} links in the file")
                return safe
            names = list(group.id)  # raw bytes: h5py would hand back undecodable names as bytes, others as str
        except (OSError, RuntimeError, ValueError) as exc:
            scan.add(gpath, "hdf5-read", f"cannot list the group: {exc}")
            continue
        for raw in names:
            count += 1
            name = _child_name(scan, gpath, raw)
            if name is None:
                continue
            path = gpath.rstrip("/") + "/" + name
            try:
                ltype = group.id.links.get_info(raw).type
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
                info = h5py.h5o.get_info(group.id, raw)
            except (OSError, RuntimeError, ValueError, KeyError) as exc:
                scan.add(path, "hdf5-read", f"cannot read the object header: {exc}")
                continue
            if info.addr in seen:
                continue
            seen.add(info.addr)
            if not _attr_count_ok(scan, path, info):
                continue
            try:
                if info.type == h5py.h5o.TYPE_GROUP:
                    if depth + 1 > scan.limits.max_depth:
                        scan.add(path, "depth", f"groups nest more than {scan.limits.max_depth} levels deep")
                        continue
                    stack.append((path, group[name], depth + 1))
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
        if not _chunk_count_ok(scan, path, shape, chunk, expected, chunk_bytes):
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


def _chunk_count_ok(scan: Scan, path: str, shape, chunk, expected: int, chunk_bytes: int) -> bool:
    """Chunk counts, judged before the chunk index is walked: libhdf5's cost per chunk (index, bookkeeping of
    each read) does not depend on the chunk's size, so tiny chunks over large data cost memory and time that the
    byte limits do not see (issue #16 item 4)."""
    lim = scan.limits
    if expected > lim.max_chunks:
        scan.add(path, "chunk-count", f"{expected} chunks declared; at most {lim.max_chunks} are read")
        return False
    if expected > lim.max_small_chunks and chunk_bytes < lim.min_chunk_bytes:
        scan.add(path, "chunk-size", f"{expected} chunks of only {chunk_bytes} bytes (chunk shape {tuple(chunk)}): "
                 f"a dataset of more than {lim.max_small_chunks} chunks needs chunks of at least "
                 f"{lim.min_chunk_bytes} bytes")
        return False
    axis = 1 if len(shape) == 3 else 0
    span = int(np.prod([-(-s // c) for i, (s, c) in enumerate(zip(shape, chunk)) if i != axis], dtype=np.float64))
    if span > lim.max_chunks_per_read:
        scan.add(path, "chunk-shape", f"one sample spans {span} chunks (chunk shape {tuple(chunk)} over shape "
                 f"{tuple(shape)}); a read may touch at most {lim.max_chunks_per_read}")
        return False
    return True


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
