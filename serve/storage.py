# SPDX-License-Identifier: MIT
"""The service's files: the data directory (checked, made private and claimed at start) and uploads.

An upload is a multipart body parsed while it streams: the archive part is written to a private temporary file
and hashed as it arrives, the size limit enforced on the bytes seen so far (never after the whole body has been
buffered), then stored content-addressed as ``<data-dir>/uploads/<sha256>.h5`` (a name the client never chooses;
an identical archive already there is kept, not rewritten). Nothing is ever served back from here.

Hostile bodies are refused with a one-line reason and nothing stored (issue #25 items 4, 5, 9): a boundary that
RFC 2046 does not allow (empty, over 70 characters), a part header or preamble the parser refuses, more than one
part of a name or a part of another name, a body larger than the archive limit plus :data:`BODY_OVERHEAD`
(preamble and epilogue included), a body that ends before its closing boundary (a lying ``Content-Length``, a
client that went away), a client that stalls between chunks or takes longer than the upload's deadline, and form
fields that are not UTF-8, hold a control character (NUL included) or are too long: the fields are checked as
each part ends, before the archive is stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from python_multipart import MultipartParser
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import parse_options_header

__all__ = ["UploadError", "StoredUpload", "DataDirError", "DataDir", "open_data_dir", "receive_upload",
           "upload_path", "FIELD_LIMITS", "BODY_OVERHEAD", "SUBDIRS"]

#: Text fields accepted beside the archive, and their length limits (characters).
FIELD_LIMITS = {"method": 200, "notes": 4096}
#: Bytes a body may hold beyond the archive: part headers, fields, boundaries, preamble and epilogue.
BODY_OVERHEAD = 64 * 1024
#: Parts a body may hold (the archive and the two fields).
MAX_PARTS = 1 + len(FIELD_LIMITS)
#: RFC 2046 section 5.1.1: a boundary is 1 to 70 characters.
MAX_BOUNDARY = 70
#: Directories of the data directory: each must be a real directory (a planted symbolic link is refused).
SUBDIRS = ("uploads", "incoming", "reports", "board", "board/results")
#: Liveness lock of the servers using a data directory (each holds it shared while it runs).
LIVE_LOCK = ".ubench-serve.lock"


class UploadError(Exception):
    """A refused upload: ``status`` is the HTTP status, ``message`` says what is wrong."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class DataDirError(Exception):
    """The data directory cannot be used (a planted link, not writable): the message says which path and why."""


@dataclass
class StoredUpload:
    sha256: str
    size: int
    path: Path
    fields: dict[str, str] = field(default_factory=dict)


def upload_path(data_dir: Path, sha256: str) -> Path:
    return data_dir / "uploads" / f"{sha256}.h5"


# --- the data directory ----------------------------------------------------------------------------------------

@dataclass
class DataDir:
    """A data directory a server is using: ``path`` (resolved) and the liveness lock it holds until :meth:`close`."""

    path: Path
    lock_fd: int | None
    cleaned: bool

    def close(self) -> None:
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None


def _private_dir(path: Path) -> None:
    """``path`` as a real directory only its owner may enter (created 0700; group and other bits of an existing
    one removed); a link or a file there is refused."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        os.mkdir(path, 0o700)
        st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a directory"
        raise DataDirError(f"{path} is {kind}; refusing to follow it: remove it and start again")
    if st.st_mode & 0o077:  # only ever taken away: a directory made read-only stays so (and fails below)
        os.chmod(path, stat.S_IMODE(st.st_mode) & 0o700)


def _private_file(path: Path) -> None:
    """An existing ``path`` must be a regular file (not a link); its group and other bits are removed."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
        raise DataDirError(f"{path} is {kind}; refusing to follow it: remove it and start again")
    if st.st_mode & 0o077:  # a database made read-only stays so (and its start fails with that reason)
        os.chmod(path, stat.S_IMODE(st.st_mode) & 0o700)


def prepare_data_dir(data_dir: Path, files: tuple[str, ...] = ()) -> Path:
    """Create or check ``data_dir`` (issue #25 item 10): it and its :data:`SUBDIRS` become real directories of
    mode 0700, and ``files`` (the SQLite database and its ``-wal``/``-shm``) regular files of mode 0600; a
    symbolic link or other file planted in their place raises :class:`DataDirError`, as does a directory that
    cannot be created or written (item 11). Returns the resolved path."""
    data_dir = Path(data_dir)
    try:
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        data_dir = data_dir.resolve()
        _private_dir(data_dir)
        for sub in SUBDIRS:
            _private_dir(data_dir / sub)
        for name in files:
            _private_file(data_dir / name)
        probe = tempfile.TemporaryFile(dir=data_dir / "incoming")  # written below: a read-only mount fails here
        probe.close()
    except OSError as exc:
        raise DataDirError(f"cannot use the data directory {data_dir}: {exc.strerror or exc}"
                           f"{f' ({exc.filename})' if exc.filename else ''}") from None
    return data_dir


def open_data_dir(data_dir: Path, files: tuple[str, ...] = ()) -> DataDir:
    """:func:`prepare_data_dir`, then claim it: hold :data:`LIVE_LOCK` shared while the server runs. A server that
    finds no other one alive (the lock free for it alone) removes what killed servers left: bodies cut off in
    ``incoming/`` and the scorer's private ``board/.staging-*`` copies; with another server alive they may be
    its work in progress and are kept."""
    path = prepare_data_dir(data_dir, files)
    try:
        fd = os.open(path / LIVE_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise DataDirError(f"cannot open {path / LIVE_LOCK} (a symbolic link?): {exc.strerror}") from None
    alone = True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        alone = False
    if alone:
        for stale in (path / "incoming").glob("*.part"):
            stale.unlink(missing_ok=True)
        for entry in os.scandir(path / "board"):
            if entry.name.startswith(".staging-") and entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
    fcntl.flock(fd, fcntl.LOCK_SH)  # from exclusive (or nothing) to shared: the next server sees this one alive
    return DataDir(path, fd, alone)


# --- uploads ---------------------------------------------------------------------------------------------------

def _field_text(name: str, raw: bytes) -> str:
    """A form field's text, or :class:`UploadError` (400) naming the field and what is wrong."""
    try:
        value = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UploadError(400, f"field {name!r} is not UTF-8 (byte {exc.start})") from None
    allowed = "\t\n\r" if name == "notes" else ""
    bad = next((i for i, ch in enumerate(value) if (ord(ch) < 32 or ord(ch) == 127) and ch not in allowed), None)
    if bad is not None:
        raise UploadError(400, f"field {name!r} holds the control character {value[bad]!r} at character {bad}")
    if len(value) > FIELD_LIMITS[name]:
        raise UploadError(400, f"field {name!r} is {len(value)} characters long; at most {FIELD_LIMITS[name]}")
    return value


class _Parts:
    """python-multipart callbacks: the ``archive`` part goes to ``sink``, known text fields to memory."""

    def __init__(self, sink, max_bytes: int):
        self.sink, self.max_bytes = sink, max_bytes
        self.header_field, self.header_value = b"", b""
        self.headers: dict[bytes, bytes] = {}
        self.name: str | None = None
        self.parts = 0
        self.size = 0
        self.seen: set[str] = set()
        self.raw: dict[str, bytearray] = {}
        self.fields: dict[str, str] = {}
        self.archive_done = False
        self.ended = False
        self.digest = hashlib.sha256()
        self.error: UploadError | None = None

    def callbacks(self) -> dict:
        return {"on_part_begin": self.part_begin, "on_part_data": self.part_data, "on_part_end": self.part_end,
                "on_header_field": self.hfield, "on_header_value": self.hvalue, "on_header_end": self.hend,
                "on_headers_finished": self.headers_done, "on_end": self.end}

    def fail(self, status: int, message: str) -> None:
        self.error = self.error or UploadError(status, message)

    def part_begin(self):
        self.headers, self.name = {}, None
        self.parts += 1
        if self.parts > MAX_PARTS:
            self.fail(400, f"more than {MAX_PARTS} parts; send 'archive' and optionally 'method' and 'notes'")

    def hfield(self, data, start, end):
        self.header_field += data[start:end]

    def hvalue(self, data, start, end):
        self.header_value += data[start:end]

    def hend(self):
        self.headers[self.header_field.lower()] = self.header_value
        self.header_field, self.header_value = b"", b""

    def headers_done(self):
        _, opts = parse_options_header(self.headers.get(b"content-disposition", b""))
        self.name = opts.get(b"name", b"").decode("utf-8", "replace")
        if self.name != "archive" and self.name not in FIELD_LIMITS:
            self.fail(400, f"unexpected form field {self.name[:80]!r}; send 'archive', 'method' and 'notes'")
        elif self.name in self.seen:
            self.fail(400, f"more than one {self.name!r} part")
        self.seen.add(self.name)

    def part_data(self, data, start, end):
        if self.error is not None:
            return
        chunk = data[start:end]
        if self.name == "archive":
            self.size += len(chunk)
            if self.size > self.max_bytes:
                self.fail(413, f"archive larger than the upload limit of {self.max_bytes} bytes")
                return
            self.digest.update(chunk)
            self.sink.write(chunk)
        elif self.name in FIELD_LIMITS:
            buf = self.raw.setdefault(self.name, bytearray())
            buf += chunk
            if len(buf) > 4 * FIELD_LIMITS[self.name]:  # UTF-8 takes at most 4 bytes a character
                self.fail(400, f"field {self.name!r} is longer than {FIELD_LIMITS[self.name]} characters")

    def part_end(self):
        if self.error is not None:
            return
        if self.name == "archive":
            self.archive_done = True
        elif self.name in FIELD_LIMITS:
            try:  # checked as the part ends: a bad field stops the body before the archive is stored
                self.fields[self.name] = _field_text(self.name, bytes(self.raw.get(self.name, b"")))
            except UploadError as exc:
                self.error = self.error or exc

    def end(self):
        self.ended = True


def _boundary(content_type: str) -> bytes:
    ctype, opts = parse_options_header(content_type)
    if ctype != b"multipart/form-data" or b"boundary" not in opts:
        raise UploadError(415, "send the archive as multipart/form-data with a part named 'archive'")
    boundary = opts[b"boundary"]
    if not 1 <= len(boundary) <= MAX_BOUNDARY:
        raise UploadError(400, f"multipart boundary of {len(boundary)} characters; RFC 2046 allows 1 to "
                               f"{MAX_BOUNDARY}")
    return boundary


async def receive_upload(request, data_dir: Path, *, max_bytes: int, chunk_timeout: float,
                         deadline: float) -> StoredUpload:
    """Parse the multipart body of ``request`` as it streams; return the stored, content-addressed archive.

    Raises :class:`UploadError` (nothing stored): 415 a body that is not multipart; 400 a malformed body (see the
    module docstring), one without an ``archive`` part, or bad fields; 413 an archive over ``max_bytes`` or a
    body over ``max_bytes + BODY_OVERHEAD`` (checked against ``Content-Length`` first, then on every chunk); 408
    a client that sends nothing for ``chunk_timeout`` seconds or is not done by ``deadline`` (``time.monotonic``
    seconds)."""
    from starlette.requests import ClientDisconnect

    boundary = _boundary(request.headers.get("content-type", ""))
    body_limit = max_bytes + BODY_OVERHEAD
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > body_limit:
        raise UploadError(413, f"request body of {declared} bytes exceeds the upload limit of {max_bytes} bytes")
    fd, tmp_name = tempfile.mkstemp(dir=data_dir / "incoming", suffix=".part")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as sink:
            parts = _Parts(sink, max_bytes)
            parser = MultipartParser(boundary, parts.callbacks())
            stream = request.stream().__aiter__()
            received = 0
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise UploadError(408, "the upload took longer than its deadline; send it faster or ask the "
                                           "host for a longer --upload-timeout")
                try:
                    chunk = await asyncio.wait_for(stream.__anext__(), timeout=min(chunk_timeout, left))
                except StopAsyncIteration:
                    break
                except ClientDisconnect:
                    raise UploadError(400, "the client went away before the body ended") from None
                except asyncio.TimeoutError:
                    if time.monotonic() >= deadline:
                        continue  # said at the top of the loop
                    raise UploadError(408, f"no data for {chunk_timeout:g} s: upload timed out") from None
                received += len(chunk)
                if received > body_limit:
                    raise UploadError(413, f"request body larger than the upload limit of {max_bytes} bytes plus "
                                           f"{BODY_OVERHEAD} bytes of form data")
                try:
                    parser.write(chunk)
                except FormParserError as exc:
                    raise UploadError(400, f"malformed multipart body: {str(exc).splitlines()[0][:200]}") from None
                if parts.error is not None:
                    raise parts.error
            parser.finalize()
            if parts.error is not None:
                raise parts.error
            if not parts.ended:
                raise UploadError(400, "the body ends before its closing multipart boundary (cut short, or a "
                                       "Content-Length that does not match it)")
            if "archive" not in parts.seen or not parts.archive_done or parts.size == 0:
                raise UploadError(400, "no archive: send the file in a part named 'archive'")
            sink.flush()
            os.fsync(sink.fileno())
        sha = parts.digest.hexdigest()
        final = upload_path(data_dir, sha)
        if final.exists():
            tmp.unlink()
        else:
            os.replace(tmp, final)
        return StoredUpload(sha, parts.size, final, parts.fields)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
