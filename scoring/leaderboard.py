# SPDX-License-Identifier: MIT
"""Score a directory of uploads into a leaderboard: sandboxed, resumable, incremental, parallel.

Every entry of the upload directory is scored in the sandbox (``scoring/sandbox.py``); a bad upload becomes a row
with its findings. Each result is a JSON file ``<board>/results/<sha256>-<config>.json`` named by the archive's
content hash and a hash of everything else that changes a result (ubench version, task, protocol, reference
content, read limits). A result file is committed once (written under a temporary name, fsync'd, then
hard-linked to its name, which fails if another run got there first), so:

- a re-run scores only uploads it has no result for (incremental), and a killed run continues where it stopped;
- when a Dask worker dies and its task runs again elsewhere, the second run finds the committed result, or
  commits its own if the first never did: every upload has exactly one result.

Results of resource failures (timeout, memory, CPU) are reused only while the sandbox limits are no larger than
those they were obtained under; raise a limit and those uploads are scored again.

The host is not poisoned by what it reads (issue #16 items 2 and 13, issue #9 item 18):

- an upload is ``lstat``-ed first: anything but a regular file (a symbolic link, a FIFO, a ``*.partial`` run
  directory) and any file over ``SandboxLimits.max_file_bytes`` is refused from its metadata, before a byte is
  read; hashing and copying share the wall-clock limit;
- the scored bytes are the hashed bytes: the upload is opened once (``O_NOFOLLOW``), hashed from that descriptor,
  and on a cache miss copied from the same descriptor into a private directory while being hashed again; the
  sandbox reads the copy, and a result whose report's sha256 (or reference sha256) differs from its key is never
  committed;
- ``results/`` is reached through directory descriptors and never through a symbolic link;
- ``leaderboard.json`` and findings name uploads and the reference by their file names, never by host paths;
- one ``ubench leaderboard`` run scores a board at a time (``fcntl.flock`` on ``<board>/.ubench-leaderboard.lock``;
  a second run is told which process, host and start time holds it).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import dataclasses
import errno
import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from ..archive_schema.durable import atomic_path, fsync_dir
from ..archive_schema.scan import file_sha256
from .dee import DEE_REFERENCE_SETTINGS, DeeUnavailableError, dee_of_report, reference_curve
from .leaderboard_html import finding_path
from .sandbox import SandboxLimits, SandboxOutcome, SandboxTask, run_sandboxed

__all__ = ["BoardConfig", "BoardError", "BoardBusyError", "archive_digest", "list_uploads", "score_one",
           "score_directory", "build_board", "board_lock", "LEADERBOARD_SCHEMA", "RESOURCE_STATUSES",
           "PRIMARY_COLUMNS", "LOCK_NAME", "add_rank_intervals"]

#: 1.1: every row's ``rank_interval`` ([best, worst]) and ``tied_with_leader``; the board's ``rank_intervals``
#: (``metric``, ``level``, ``replicates``, ``seed``, ``method``, ``rows``; ``None`` when intervals are off).
#: 1.2: every row's ``dee_below_one`` (its ``metrics.dee`` is null because its CLL is below one deep-ensemble
#: member's: shown as "< 1"; ``None`` without a DEE).
LEADERBOARD_SCHEMA = "1.2"
#: Outcomes that depend on the sandbox limits rather than on the archive alone.
RESOURCE_STATUSES = frozenset({"timeout", "memory-limit", "cpu-limit", "killed", "report-limit"})
#: Columns shown first, in this order (Ashukha et al. 2020: CLL and DEE are the comparable headline numbers).
PRIMARY_COLUMNS = ("cll", "dee", "accuracy", "ood_auroc_total", "calibrated_brier")
#: The lock file one ``ubench leaderboard`` run holds in its board directory.
LOCK_NAME = ".ubench-leaderboard.lock"
_BLOCK = 1 << 20
_ZEROS = bytes(_BLOCK)


class BoardError(RuntimeError):
    """The board directory cannot be used safely (a planted symbolic link, a lock held by another run)."""


class BoardBusyError(BoardError):
    """Another ``ubench leaderboard`` run holds the board's lock."""


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def archive_digest(path: str | Path) -> str:
    """sha256 of a regular file's bytes; for anything else (symlink, FIFO, directory) a hash of what it is,
    computed without opening it, so the sandbox can report it."""
    st = os.lstat(path)
    if stat.S_ISREG(st.st_mode):
        return file_sha256(path)
    what = os.readlink(path) if stat.S_ISLNK(st.st_mode) else ""
    return hashlib.sha256(_canonical(["not-a-regular-file", Path(path).name, st.st_mode, what])).hexdigest()


def list_uploads(directory: str | Path) -> list[Path]:
    """Every non-hidden entry of ``directory`` except sub-directories (``*.partial`` run directories included,
    so they get their finding), sorted by name. Symbolic links are listed, never followed."""
    out = []
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if entry.name.startswith("."):
            continue
        if entry.is_dir(follow_symlinks=False) and not entry.name.endswith(".partial"):
            continue
        out.append(Path(entry.path))
    return out


@dataclass(frozen=True)
class BoardConfig:
    """Everything a per-archive result depends on, plus the sandbox limits.

    ``kind`` is ``"score"`` (the default) or ``"validate"`` (findings only). ``reference_sha256`` is filled by
    :meth:`create`, which first reads the reference through the safe container checks (``ReferenceError`` for
    an unusable one); ``protocol`` is ``Protocol.to_dict()``.
    """

    kind: str = "score"
    reference: str | None = None
    reference_sha256: str | None = None
    protocol: dict[str, Any] | None = None
    read_limits: dict[str, Any] = field(default_factory=dict)
    sandbox: SandboxLimits = SandboxLimits()

    @classmethod
    def create(cls, *, kind: str = "score", reference: str | Path | None = None, protocol=None,
               read_limits: dict[str, Any] | None = None, sandbox: SandboxLimits = SandboxLimits()) -> BoardConfig:
        ref = None if reference is None else os.path.abspath(reference)
        if ref is not None:
            from .reference import read_reference

            read_reference(ref)  # refuses a FIFO, a link or a hostile file before it is hashed
        proto = protocol.to_dict() if hasattr(protocol, "to_dict") else protocol
        if kind == "score" and proto is None:
            from .protocols import Protocol

            proto = Protocol.preset("pitfalls").to_dict()
        if kind == "score" and proto.get("intervals", True):
            # every row keeps its per-sample statistics in its cached result, for the rank intervals
            proto = {**proto, "sample_stats": True}
        return cls(kind, ref, None if ref is None else file_sha256(ref), proto, dict(read_limits or {}), sandbox)

    def key(self) -> str:
        """Hash of what changes a result (not the sandbox limits, not the reference's path)."""
        body = {"ubench_version": __version__, "kind": self.kind, "reference_sha256": self.reference_sha256,
                "protocol": self.protocol, "read_limits": self.read_limits}
        return hashlib.sha256(_canonical(body)).hexdigest()


def _limits_cover(now: SandboxLimits, then: dict[str, Any]) -> bool:
    return (now.memory_bytes <= then.get("memory_bytes", 0) and now.cpu_seconds <= then.get("cpu_seconds", 0)
            and now.timeout_seconds <= then.get("timeout_seconds", 0)
            and now.max_report_bytes <= then.get("max_report_bytes", 0))


@contextlib.contextmanager
def board_lock(board: str | Path) -> Iterator[None]:
    """Hold the board's lock for the duration of a run (``fcntl.flock``, released when the process dies).

    Raises :class:`BoardBusyError` naming the holder's pid, host and start time when another run holds it, and
    :class:`BoardError` when the lock file is a symbolic link.
    """
    import fcntl
    import socket

    board = Path(board)
    try:
        fd = os.open(board / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise BoardError(f"cannot open the lock file {LOCK_NAME} in {board} (a symbolic link?): {exc.strerror}"
                         ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BoardBusyError(f"{board} is being scored by another `ubench leaderboard` run "
                                 f"({_lock_holder(fd)}); wait for it to finish or stop it") from None
        holder = {"pid": os.getpid(), "host": socket.gethostname(),
                  "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode(), 0)
        os.fsync(fd)
        yield
    finally:
        os.close(fd)  # releases the lock


def _lock_holder(fd: int) -> str:
    try:
        h = json.loads(os.pread(fd, 4096, 0))
        return f"pid {int(h['pid'])} on host {h['host']}, started {h['started']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "its holder has not recorded itself yet"


def _results_dir(board: Path) -> int:
    """A descriptor of ``board/results`` (created if missing), opened without following a symbolic link."""
    board.mkdir(parents=True, exist_ok=True)
    bfd = os.open(board, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir("results", 0o755, dir_fd=bfd)
        try:
            return os.open("results", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=bfd)
        except OSError:
            raise BoardError(f"{board / 'results'} is not a plain directory (a symbolic link?); refusing to follow "
                             "it: remove it and run again") from None
    finally:
        os.close(bfd)


def _read_result(results: int, name: str) -> dict[str, Any] | None:
    """A committed result, or None (missing, damaged, or not a regular file: never followed)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=results)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                return None
            record = json.loads(fh.read().decode("utf-8"), parse_constant=_no_constant)
    except (OSError, ValueError):
        return None  # a damaged cache entry is scored again
    return record if isinstance(record, dict) else None


def _no_constant(name: str) -> Any:
    """``json`` hook: NaN and Infinity are not JSON and the board's writer refuses them, so a cache file holding one
    is damaged (it is scored again instead of stopping the board)."""
    raise ValueError(f"{name} in a cached result")


def _commit(results: int, name: str, record: dict[str, Any], *, replace: bool) -> bool:
    """Write ``record`` as ``results/name`` durably; without ``replace`` only if no result exists (True if ours
    won). Every operation is relative to the ``results`` descriptor and creates or replaces links, never follows
    them."""
    text = json.dumps(record, indent=1, sort_keys=True, allow_nan=False)
    tmp = f".{name}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=results)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if replace:
            os.replace(tmp, name, src_dir_fd=results, dst_dir_fd=results)
        else:
            try:
                # atomic and exclusive: exactly one execution commits a result
                os.link(tmp, name, src_dir_fd=results, dst_dir_fd=results, follow_symlinks=False)
            except FileExistsError:
                return False
        os.fsync(results)
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=results)


class _Refused(Exception):
    """An upload refused before the sandbox: ``outcome`` says why."""

    def __init__(self, status: str, exit_code: int, check: str, message: str):
        super().__init__(message)
        self.outcome = SandboxOutcome(status, exit_code, ({"path": "<file>", "check": check, "severity": "error",
                                                            "message": message},))


def _open_upload(path: Path, limits: SandboxLimits) -> int:
    """A descriptor of a regular upload within the size limit, judged from metadata alone (no byte read)."""
    name = path.name
    if name.endswith(".partial"):
        raise _Refused("rejected", 1, "partial-run", f"{name} is an unfinished producer run, not an archive; "
                       "partial uploads are refused: finish the run (`ubench finalize`) and upload the archive")
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise _Refused("unreadable", 2, "not-found", f"cannot read {name}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
        raise _Refused("unreadable", 2, "not-regular-file", f"{name} is {kind}; archives must be regular files")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise _Refused("unreadable", 2, "not-regular-file", f"cannot open {name}: {exc.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > limits.max_file_bytes:
        os.close(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _Refused("unreadable", 2, "not-regular-file", f"{name} is not a regular file")
        raise _Refused("rejected", 1, "file-size", f"{name} is {st.st_size} bytes; uploads over "
                       f"{limits.max_file_bytes} bytes are refused before they are read")
    return fd


def _data_run(fd: int, offset: int) -> tuple[int, int]:
    """``(start, end)`` of the next run of data at or after ``offset`` (``SEEK_DATA``/``SEEK_HOLE``): bytes before
    ``start`` are a hole (zeros, not stored); ``start == end`` when only a hole, or nothing, is left. A file system
    that reports no holes gives one run to the end."""
    try:
        start = os.lseek(fd, offset, os.SEEK_DATA)
    except OSError as exc:
        if exc.errno != errno.ENXIO:
            return offset, 2**63  # SEEK_DATA unsupported: read everything
        end = max(offset, os.fstat(fd).st_size)
        return end, end
    return start, os.lseek(fd, start, os.SEEK_HOLE)


def _file_digest(fd: int, name: str, limits: SandboxLimits, deadline: float, copy_to: int | None = None) -> str:
    """sha256 of the file behind ``fd`` from offset 0 (``pread``: the descriptor's offset is not used), also
    writing every byte to ``copy_to`` when given; refused past ``max_file_bytes`` or the deadline.

    Holes (``SEEK_HOLE``) are hashed as the zeros they read as but not written: the copy of a sparse upload is
    as sparse as the upload (a 32 KiB file of 2 GiB used to become 2 GiB of disk; issue #25 item 14)."""
    h = hashlib.sha256()
    offset = 0
    while True:
        start, end = _data_run(fd, offset)
        while offset < start:  # a hole: zeros for the hash, nothing for the copy
            step = min(len(_ZEROS), start - offset)
            h.update(_ZEROS[:step])
            offset += step
            _check_read(name, offset, limits, deadline)
        if start == end:
            break
        block = b""
        while offset < end and (block := os.pread(fd, min(_BLOCK, end - offset), offset)):
            h.update(block)
            if copy_to is not None:
                view = memoryview(block)
                while view:
                    view = view[os.pwrite(copy_to, view, offset + len(block) - len(view)):]
            offset += len(block)
            _check_read(name, offset, limits, deadline)
        if not block:
            break
    if copy_to is not None:
        os.ftruncate(copy_to, offset)  # a trailing hole
    return h.hexdigest()


def _check_read(name: str, offset: int, limits: SandboxLimits, deadline: float) -> None:
    if offset > limits.max_file_bytes:
        raise _Refused("rejected", 1, "file-size", f"{name} grew past {limits.max_file_bytes} bytes while "
                       "it was read; refused")
    if time.monotonic() > deadline:
        raise _Refused("timeout", 1, "timeout", f"reading {name} took longer than {limits.timeout_seconds:g} s "
                       "of wall-clock time")


@contextlib.contextmanager
def _private_copy(fd: int, name: str, board: Path, limits: SandboxLimits, deadline: float, digest: str
                  ) -> Iterator[Path]:
    """Copy the upload behind ``fd`` into a fresh directory only this user can enter, hashing as it goes; yields
    the copy's path if its bytes hash to ``digest`` (the key the result is stored under)."""
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=board))  # mode 0700
    try:
        copy = staging / "upload.h5"
        out = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            copied = _file_digest(fd, name, limits, deadline, copy_to=out)
        finally:
            os.close(out)
        if copied != digest:
            raise _Refused("internal-error", 1, "archive-changed", f"{name} changed while it was read (sha256 "
                           f"{digest[:16]}… then {copied[:16]}…); it was not scored, and will be on the next run")
        yield copy
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _remove_stale_copies(board: Path) -> None:
    """Private copies left by a killed run (only called under the board's lock, before any upload is read)."""
    for entry in os.scandir(board):
        if entry.name.startswith(".staging-") and entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)


def _public(obj: Any, names: dict[str, str]) -> Any:
    """``obj`` with every host path in ``names`` (longest first) replaced by its public name."""
    if isinstance(obj, str):
        for path, public in names.items():
            obj = obj.replace(path, public)
        return obj
    if isinstance(obj, dict):
        return {k: _public(v, names) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_public(v, names) for v in obj)
    return obj


def _host_names(config: BoardConfig, copy: Path, name: str) -> dict[str, str]:
    names = {str(copy): name, str(copy.parent): "<upload>"}
    if config.reference is not None:
        names[config.reference] = Path(config.reference).name
    return dict(sorted(names.items(), key=lambda kv: -len(kv[0])))


def _scored_bytes_mismatch(outcome: SandboxOutcome, digest: str, config: BoardConfig) -> str | None:
    """Why a score report does not belong under its key (the archive or reference hash it records differs)."""
    if outcome.status != "ok" or outcome.report is None or config.kind != "score":
        return None
    got = (outcome.report.get("archive") or {}).get("sha256")
    if got != digest:
        return f"the scored archive's sha256 {str(got)[:16]}… is not the key's {digest[:16]}…"
    ref = (outcome.report.get("labels") or {}).get("reference") or {}
    if config.reference_sha256 is not None and ref.get("sha256") != config.reference_sha256:
        return f"the reference scored against (sha256 {str(ref.get('sha256'))[:16]}…) is not the board's"
    return None


def score_one(path: str | Path, *, board: str | Path, config: BoardConfig) -> dict[str, Any]:
    """Score one upload into ``board/results`` unless a usable result exists; returns its result record.

    Idempotent and safe to run concurrently for the same upload. Every problem with the upload becomes part of
    the record; only a failure to write ``board`` raises (:class:`BoardError` for a planted symbolic link).
    """
    path, board = Path(path), Path(board)
    name = path.name
    results = _results_dir(board)
    try:
        try:
            fd = _open_upload(path, config.sandbox)
        except _Refused as refused:
            return {"sha256": None, "outcome": refused.outcome.to_dict(), "cached": False, "archive": name}
        try:
            return _score_open_upload(fd, name, board, results, config)
        finally:
            os.close(fd)
    finally:
        os.close(results)


def _score_open_upload(fd: int, name: str, board: Path, results: int, config: BoardConfig) -> dict[str, Any]:
    deadline = time.monotonic() + config.sandbox.timeout_seconds
    try:
        digest = _file_digest(fd, name, config.sandbox, deadline)
    except _Refused as refused:
        return {"sha256": None, "outcome": refused.outcome.to_dict(), "cached": False, "archive": name}
    target = f"{digest}-{config.key()[:16]}.json"
    cached = _read_result(results, target)
    status = None if cached is None else cached.get("outcome", {}).get("status")
    # An internal error is a ubench bug: never trust it from the cache. A resource failure is retried when the
    # limits grew.
    stale = cached is not None and (status == "internal-error" or (
        status in RESOURCE_STATUSES and not _limits_cover(config.sandbox, cached.get("sandbox_limits", {}))))
    if cached is not None and not stale:
        return {**cached, "cached": True, "archive": name}
    try:
        with _private_copy(fd, name, board, config.sandbox, deadline, digest) as copy:
            task = SandboxTask(config.kind, str(copy), config.reference, config.protocol, config.read_limits)
            outcome = run_sandboxed(task, config.sandbox)
            outcome = SandboxOutcome.from_dict(_public(outcome.to_dict(), _host_names(config, copy, name)))
    except _Refused as refused:
        return {"sha256": digest, "outcome": refused.outcome.to_dict(), "cached": False, "archive": name}
    record = {
        "sha256": digest,
        "config_key": config.key(),
        "ubench_version": __version__,
        "uploaded_name": name,
        "scored_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "sandbox_limits": config.sandbox.to_dict(),
        "outcome": outcome.to_dict(),
    }
    if (why := _scored_bytes_mismatch(outcome, digest, config)) is not None:
        refused = _Refused("internal-error", 1, "archive-changed", f"{name}: {why}; the result was not stored")
        return {**record, "outcome": refused.outcome.to_dict(), "cached": False, "archive": name}
    if _commit(results, target, record, replace=stale):
        return {**record, "cached": False, "archive": name}
    winner = _read_result(results, target) or record
    return {**winner, "cached": True, "archive": name}


def score_directory(directory: str | Path, board: str | Path, config: BoardConfig, *, workers: int = 1,
                    scheduler: str | None = None, ensemble: str | Path | None = None,
                    progress: Callable[[int, int, dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Score every upload in ``directory`` and write ``board/leaderboard.json`` and ``board/index.html``.

    Parameters
    ----------
    directory : the uploads (see :func:`list_uploads`).
    board : output directory; holds ``results/`` (the cache), ``leaderboard.json`` and ``index.html``.
    config : what to compute and the sandbox limits (:meth:`BoardConfig.create`).
    workers : parallel scoring processes on this machine (a Dask ``LocalCluster`` when above 1).
    scheduler : address of a Dask scheduler; overrides ``workers``.
    ensemble : a deep-ensemble archive (trusted) whose CLL-versus-members curve gives each row's DEE.
    progress : ``progress(done, total, record)`` after each upload.

    Returns
    -------
    The leaderboard dict that was written.

    Raises
    ------
    BoardBusyError : another run holds the board's lock.
    BoardError : ``board/results`` is a symbolic link or not a directory.
    ReferenceError : the reference file is unusable (checked once, before any upload).
    """
    board = Path(board)
    board.mkdir(parents=True, exist_ok=True)
    with board_lock(board):
        return _score_directory(directory, board, config, workers=workers, scheduler=scheduler, ensemble=ensemble,
                                progress=progress)


def _score_directory(directory, board: Path, config: BoardConfig, *, workers, scheduler, ensemble, progress):
    from .distributed import map_unordered
    from .reference import read_reference

    if config.reference is not None:
        read_reference(config.reference)  # a bad reference fails once, here, not once per upload
    os.close(_results_dir(board))  # refuse a planted results/ link before any upload is read
    _remove_stale_copies(board)
    uploads = list_uploads(directory)
    records: list[dict[str, Any] | None] = [None] * len(uploads)
    for done, (i, record) in enumerate(map_unordered(score_one, [str(p) for p in uploads], workers=workers,
                                                      scheduler=scheduler, board=str(board), config=config), 1):
        records[i] = record
        if progress is not None:
            progress(done, len(uploads), record)
    ensemble_record = None
    if ensemble is not None:
        # The DEE reference: the same protocol with member curves on and temperature after averaging.
        ens_protocol = {**(config.protocol or {}), **DEE_REFERENCE_SETTINGS}
        ensemble_record = score_one(ensemble, board=board, config=dataclasses.replace(config, protocol=ens_protocol))
    result = build_board([r for r in records if r is not None], config, ensemble_record)
    write_board(result, board)
    return result


def _metrics(report: dict[str, Any] | None) -> dict[str, float]:
    if not report:
        return {}
    return {k: float(v) for k, v in (report.get("summary") or {}).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "n_samples"}


def _ensemble_report(record: dict[str, Any] | None) -> dict[str, Any] | None:
    report = (record or {}).get("outcome", {}).get("report")
    if not report:
        return None
    try:
        reference_curve(report)
    except DeeUnavailableError:
        return None
    return report


def _ensemble_note(record: dict[str, Any]) -> str:
    """Why the board has no DEE: the deep-ensemble archive was not scored (its status and first error), or its
    report has no CLL-versus-members curve."""
    outcome = record.get("outcome") or {}
    if outcome.get("status") != "ok" or not outcome.get("report"):
        errors = [f for f in outcome.get("findings", []) if f.get("severity") == "error"]
        f = errors[0] if errors else None
        why = f": [{f.get('check')}] {finding_path(f, record.get('archive'))}: {f.get('message')}" if f else ""
        return f"the deep-ensemble archive was not scored ({outcome.get('status')}{why}), so DEE is not reported"
    return "the deep-ensemble report has no CLL-versus-members curve, so DEE is not reported"


def build_board(records: Sequence[dict[str, Any]], config: BoardConfig,
                ensemble_record: dict[str, Any] | None = None) -> dict[str, Any]:
    """Rows (scored uploads ranked by CLL, then accuracy; rejected ones after them; each with its
    ``rank_interval`` and ``tied_with_leader``, :func:`add_rank_intervals`) and column metadata."""
    ens_report = _ensemble_report(ensemble_record)
    curve = None if ens_report is None else reference_curve(ens_report)[0]
    comparable: list[str] = []
    not_comparable: list[str] = []
    rows = []
    for rec in records:
        outcome = rec.get("outcome", {})
        report = outcome.get("report") or {}
        metrics = _metrics(report)
        below = None  # a DEE below one member is null, never 1 (issue #28 item 5): the pages show "< 1"
        if ens_report is not None and "cll" in metrics:
            try:
                d = dee_of_report(report, ens_report)
                metrics["dee"], below = d["dee"], bool(d["below_reference"])
            except DeeUnavailableError:
                pass
        elif "dee" in (report.get("summary") or {}):  # a report that carries its own DEE (score --ensemble)
            below = bool(report["summary"].get("dee_below_one"))
            if below:
                metrics["dee"] = None
        comp = (report.get("comparability") or {})
        comparable += [k for k in comp.get("comparable", []) if k not in comparable]
        not_comparable += [k for k in comp.get("not_comparable", []) if k not in not_comparable]
        archive = report.get("archive") or {}
        rows.append({
            "archive": rec.get("archive"),
            "sha256": rec.get("sha256"),
            "status": outcome.get("status"),
            "exit_code": outcome.get("exit_code"),
            "findings": [f for f in outcome.get("findings", []) if f.get("severity") == "error"],
            "method": archive.get("method"),
            "model": archive.get("model"),
            "n_members": archive.get("n_members"),
            "metrics": metrics,
            "dee_below_one": below,
            "cached": bool(rec.get("cached")),
            "seconds": outcome.get("seconds"),
        })

    def order(row):
        m = row["metrics"]
        scored = row["status"] == "ok" and bool(m)
        return (not scored, -(m.get("cll") if m.get("cll") is not None else float("-inf")),
                -(m.get("accuracy") or 0.0), row["archive"] or "")

    rows.sort(key=order)
    rank = 0
    for row in rows:
        row["rank"] = (rank := rank + 1) if row["status"] == "ok" and row["metrics"] else None
    samples = {rec.get("archive"): ((rec.get("outcome") or {}).get("report") or {}).get("samples") for rec in records}
    rank_info = add_rank_intervals(rows, samples, config.protocol or {})
    present = {k for r in rows for k in r["metrics"]}
    first = [k for k in PRIMARY_COLUMNS if k in present]
    rest_comp = [k for k in comparable if k in present and k not in first]
    rest_not = [k for k in not_comparable if k in present and k not in first]
    others = sorted(present - set(first) - set(rest_comp) - set(rest_not))
    columns = ([{"key": k, "comparable": k not in not_comparable} for k in first + rest_comp]
               + [{"key": k, "comparable": False} for k in rest_not]
               + [{"key": k, "comparable": None} for k in others])
    return {
        "leaderboard_schema": LEADERBOARD_SCHEMA,
        "ubench_version": __version__,
        "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "config": {"kind": config.kind, "key": config.key(), "protocol": config.protocol,
                   "reference": None if config.reference is None else Path(config.reference).name,
                   "reference_sha256": config.reference_sha256,
                   "sandbox_limits": config.sandbox.to_dict()},
        "ensemble": None if ensemble_record is None else {
            "archive": ensemble_record.get("archive"), "sha256": ensemble_record.get("sha256"),
            "status": ensemble_record.get("outcome", {}).get("status"), "cll_curve": curve,
            "note": None if curve is not None else _ensemble_note(ensemble_record)},
        "columns": columns,
        "counts": {s: sum(r["status"] == s for r in rows) for s in sorted({r["status"] for r in rows})},
        "rank_intervals": rank_info,
        "rows": rows,
    }


def add_rank_intervals(rows: list[dict[str, Any]], samples: dict[str, Any], protocol: dict[str, Any]
                       ) -> dict[str, Any] | None:
    """Give every ranked row ``rank_interval`` ``[best, worst]`` and ``tied_with_leader``, from a paired bootstrap
    of the ranking metric over all ranked rows (``metrics/paired.py``: every row resampled with the same counts).

    ``rows`` are the board's rows in rank order (``rank``, ``archive``, ``metrics``), ``samples`` the ``samples``
    of each row's report by archive name. The metric is the board's ordering key, CLL (accuracy when a row has no
    CLL); the ordering itself is the point values' and does not change. Returns the settings (``metric``,
    ``level``, ``replicates``, ``seed``, ``method``, ``rows``) or None (intervals off, or fewer than two rows with
    per-sample statistics); rows left out get ``rank_interval`` None.
    """
    from ..metrics.paired import HIGHER_IS_BETTER, rank_intervals, sample_replicates

    for row in rows:
        row["rank_interval"], row["tied_with_leader"] = None, None
    ranked = [r for r in rows if r["rank"] is not None and samples.get(r["archive"])]
    if not protocol.get("intervals", True) or len(ranked) < 2:
        return None
    metric = "cll" if all(r["metrics"].get("cll") is not None for r in ranked) else "accuracy"
    settings = {"metric": metric, "level": float(protocol.get("confidence", 0.95)),
                "replicates": int(protocol.get("bootstrap", 1000)), "seed": int(protocol.get("seed", 0)),
                "method": "paired percentile bootstrap of the ranks", "rows": len(ranked)}
    try:
        reps = sample_replicates([samples[r["archive"]] for r in ranked], n_replicates=settings["replicates"],
                                 seed=settings["seed"], tpr=float(protocol.get("tpr", 0.95)), keys=(metric,))
    except (ValueError, KeyError, TypeError) as exc:  # a damaged cache entry, or rows on other samples
        return {**settings, "rows": 0, "note": f"no rank intervals: {exc}"}
    names = [str(i) for i in range(len(ranked))]
    out = rank_intervals({n: r["metrics"][metric] for n, r in zip(names, ranked)},
                         {n: rep[metric] for n, rep in zip(names, reps)},
                         higher_is_better=HIGHER_IS_BETTER[metric], level=settings["level"])
    for n, r in zip(names, ranked):
        r["rank_interval"], r["tied_with_leader"] = out[n]["rank_interval"], out[n]["tied_with_leader"]
    return settings


def write_board(result: dict[str, Any], board: str | Path) -> None:
    """``leaderboard.json`` and ``index.html`` in ``board``, each replaced atomically."""
    from .leaderboard_html import render_html

    board = Path(board)
    with atomic_path(board / "leaderboard.json") as tmp:
        tmp.write_text(json.dumps(result, indent=2, sort_keys=True, allow_nan=False), encoding="utf-8")
    with atomic_path(board / "index.html") as tmp:
        tmp.write_text(render_html(result), encoding="utf-8")
