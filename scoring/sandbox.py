# SPDX-License-Identifier: MIT
"""Score or validate untrusted archives in a child process that cannot take the host down with it.

The parent (:func:`run_sandboxed`, :func:`run_sandboxed_batch`) starts a fresh interpreter
(``python -I -B -m ubench.scoring.sandbox``) in an empty temporary directory, with a minimal environment, in a
new session (so a timeout kills the whole process group), and sends it one JSON request on stdin. The child
(:func:`main`) limits itself before it reads any archive:

- ``RLIMIT_AS`` (address space; set once the modules it needs are imported, a limit below what they map
  refused with that size, and what is left is what the memory plan budgets: ``scoring/memory_plan.py``),
  ``RLIMIT_CPU (per task; the hard limit a little above), ``RLIMIT_FSIZE = 0``
  (it writes no file), ``RLIMIT_CORE = 0``, ``RLIMIT_NOFILE``; ``PR_SET_PDEATHSIG`` so it dies with its parent;
  ``PR_SET_NO_NEW_PRIVS``;
- HDF5 filter plugins off (``HDF5_PLUGIN_PRELOAD="::"``, ``HDF5_PLUGIN_PATH`` pointing nowhere; ``safe_h5py``
  also calls ``H5PLset_loading_state(0)``);
- where the kernel has Landlock, after importing what it needs: no file may be written or created anywhere, and
  files may be read only from the interpreter's and the libraries' directories and the archives of the request
  (a ``.partial`` run directory of the request: listed and read) (and no TCP connection may be made, Landlock
  ABI >= 4).

It answers with one JSON line per task on stdout. Whatever the child does — a signal inside libhdf5, running out
of its address space or CPU time, hanging — the parent turns it into a finding (``hdf5-crash``,
``memory-limit``, ``cpu-limit``, ``timeout``) with exit code 1, and the remaining tasks of a batch run in a fresh
child. Only :data:`SANDBOX_CHECKS` and the reader's own checks appear in the outcomes.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..sizes import parse_size  # re-exported: the sandbox's limits are written in these sizes

__all__ = [
    "SandboxLimits",
    "SandboxTask",
    "SandboxOutcome",
    "SANDBOX_CHECKS",
    "parse_size",
    "limit_process",
    "run_sandboxed",
    "run_sandboxed_batch",
    "main",
]

#: Finding checks the sandbox itself produces (all exit code 1: the upload is rejected).
SANDBOX_CHECKS = frozenset({"hdf5-crash", "memory-limit", "cpu-limit", "timeout", "killed", "internal-error",
                            "report-size"})
#: What a task may ask the child to do.
TASK_KINDS = ("validate", "score", "inspect")
_NOWHERE = "/nonexistent/ubench-sandbox-no-plugins"
_STDERR_TAIL = 8192


@dataclass(frozen=True)
class SandboxLimits:
    """Resources one sandboxed task may use.

    Attributes
    ----------
    memory_bytes : address-space limit of the child (``RLIMIT_AS``). It counts mapped, not resident, memory:
        the interpreter with numpy, scipy and h5py maps about 250 MiB before reading anything (a limit below
        that is refused with the size); the memory plan budgets what is left.
    cpu_seconds : CPU time per task (``RLIMIT_CPU``, moved forward before each task of a batch).
    timeout_seconds : wall-clock time per task; the child's process group is killed when it passes.
    max_open_files : ``RLIMIT_NOFILE`` of the child.
    landlock : restrict the child's file access with Landlock where the kernel supports it.
    max_report_bytes : size of one task's JSON answer; a longer one is cut off with the ``report-size``
        finding (the parent never buffers more than this).
    max_file_bytes : size of one upload a leaderboard will hash and copy; a larger file is refused from its
        ``stat`` alone, before any byte is read (the reader's 32 GiB of declared data plus room for metadata).
    """

    memory_bytes: int = 4 * 2**30
    cpu_seconds: int = 600
    timeout_seconds: float = 900.0
    max_open_files: int = 256
    landlock: bool = True
    max_report_bytes: int = 128 * 2**20
    max_file_bytes: int = 33 * 2**30

    def __post_init__(self) -> None:
        if self.memory_bytes < 64 * 2**20:
            raise ValueError(f"memory_bytes must be at least 64 MiB; found {self.memory_bytes}")
        if self.cpu_seconds < 1:
            raise ValueError(f"cpu_seconds must be at least 1; found {self.cpu_seconds}")
        if self.timeout_seconds <= 0:
            raise ValueError(f"timeout_seconds must be positive; found {self.timeout_seconds}")
        if self.max_report_bytes < 2**16 or self.max_file_bytes < 1:
            raise ValueError(f"max_report_bytes must be at least 64 KiB and max_file_bytes positive; found "
                             f"{self.max_report_bytes} and {self.max_file_bytes}")

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class SandboxTask:
    """One unit of work for the child.

    ``kind`` is ``"validate"`` (``validate_archive``), ``"score"`` (``score_archive``) or ``"inspect"``
    (``describe_archive``; the description is the outcome's ``report``). ``archive`` and ``reference`` are
    paths; ``protocol`` is ``Protocol.to_dict()``; ``read_limits`` are ``ReadLimits`` fields (defaults when
    empty).
    """

    kind: str
    archive: str
    reference: str | None = None
    protocol: dict[str, Any] | None = None
    read_limits: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in TASK_KINDS:
            raise ValueError(f"kind must be one of {TASK_KINDS}; found {self.kind!r}")

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class SandboxOutcome:
    """What became of one task.

    ``status``: ``ok`` (valid / scored), ``rejected`` (findings with errors, exit 1), ``unreadable`` (exit 2),
    or the sandbox's own ``crashed``, ``memory-limit``, ``cpu-limit``, ``timeout``, ``killed``,
    ``report-limit``, ``internal-error`` (all exit 1). ``findings`` are ``Finding.to_dict()`` dicts; ``report`` is the score report
    (``score`` tasks that succeeded); ``peak_rss_bytes`` the child's peak resident memory when it answered.
    """

    status: str
    exit_code: int
    findings: tuple[dict[str, str], ...] = ()
    report: dict[str, Any] | None = None
    peak_rss_bytes: int | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["findings"] = list(self.findings)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SandboxOutcome:
        kw = {f.name: d[f.name] for f in fields(cls) if f.name in d}
        kw["findings"] = tuple(kw.get("findings", ()))
        return cls(**kw)


def _finding(check: str, message: str, path: str = "<file>") -> dict[str, str]:
    return {"path": path, "check": check, "severity": "error", "message": message}


def _sandbox_outcome(status: str, check: str, message: str, seconds: float, rss: int | None = None
                     ) -> SandboxOutcome:
    return SandboxOutcome(status, 1, (_finding(check, message),), None, rss, seconds)


# ---------------------------------------------------------------------------------------------------------------
# Parent side
# ---------------------------------------------------------------------------------------------------------------
def _child_env(workdir: str) -> dict[str, str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HDF5_PLUGIN_PRELOAD": "::",
        "HDF5_PLUGIN_PATH": _NOWHERE,
        "HDF5_USE_FILE_LOCKING": "FALSE",
        "MPLCONFIGDIR": workdir,
        "MPLBACKEND": "Agg",
        # One thread per BLAS/OpenMP pool: less mapped memory, and no oversubscription when many children run.
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "NUMEXPR_NUM_THREADS": "1",
        # glibc reserves 64 MiB of address space for each further malloc arena (128 MiB while it aligns it):
        # under RLIMIT_AS the threads (the file's hash, the intervals' pool) would take a share of the memory
        # limit that no data uses, and a share that depends on the limit (under a small one the reservation
        # fails and the thread shares the main arena), so the memory plan could not predict it. One arena.
        "MALLOC_ARENA_MAX": "1",
    }
    return env


def _child_argv() -> list[str]:
    """The child's command line: a fresh isolated interpreter running this module's :func:`main`."""
    return [sys.executable, "-I", "-B", "-m", "ubench.scoring.sandbox"]


class ReportTooLarge(Exception):
    """The child's answer grew past ``SandboxLimits.max_report_bytes``."""


class _Lines:
    """Newline-terminated records from a pipe in linear time: chunks are appended to one ``bytearray`` and only
    the bytes not yet searched are searched for a newline (re-joining and re-scanning the whole buffer on every
    chunk made a 64 MiB report take 28 s instead of 2.5 s). A partial record longer than ``limit`` raises
    :class:`ReportTooLarge`, so the parent never holds more than ``limit`` bytes of it."""

    def __init__(self, limit: int):
        self.limit = limit
        self._buf = bytearray()
        self._searched = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buf += chunk
        lines = []
        while (end := self._buf.find(b"\n", self._searched)) >= 0:
            lines.append(bytes(self._buf[:end]))
            del self._buf[: end + 1]  # O(1) amortised at the front of a bytearray
            self._searched = 0
        self._searched = len(self._buf)
        if len(self._buf) > self.limit:
            raise ReportTooLarge
        return lines


def _signal_outcome(sig: int, seconds: float, rss: int | None) -> SandboxOutcome:
    name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else f"signal {sig}"
    if sig == signal.SIGXCPU:
        return _sandbox_outcome("cpu-limit", "cpu-limit", "scoring used more CPU time than the sandbox allows",
                                seconds, rss)
    if sig == signal.SIGKILL:
        return _sandbox_outcome("killed", "killed", "the scoring process was killed (SIGKILL: the CPU hard limit "
                                "or the system's out-of-memory killer)", seconds, rss)
    return _sandbox_outcome("crashed", "hdf5-crash", f"the archive crashed the HDF5 reader ({name} in the "
                            "scoring process; the host and other uploads are unaffected)", seconds, rss)


def _exit_outcome(returncode: int, stderr: str, seconds: float, rss: int | None) -> SandboxOutcome:
    if "MemoryError" in stderr or "Cannot allocate memory" in stderr:
        return _sandbox_outcome("memory-limit", "memory-limit", "scoring needed more memory than the sandbox's "
                                "address-space limit", seconds, rss)
    last = next((line for line in reversed(stderr.strip().splitlines()) if line.strip()), "no message")
    return _sandbox_outcome("internal-error", "internal-error",
                            f"the scoring process exited with status {returncode}: {last[:500]}", seconds, rss)


def _run_child(tasks: list[SandboxTask], limits: SandboxLimits) -> tuple[list[SandboxOutcome], int | None]:
    """Run tasks in one child until it finishes or fails; returns the outcomes so far (the failed one included)
    and the child's peak RSS in bytes."""
    request = {"tasks": [t.to_dict() for t in tasks], "limits": limits.to_dict(), "parent": os.getpid()}
    outcomes: list[SandboxOutcome] = []
    with tempfile.TemporaryDirectory(prefix="ubench-sandbox-") as workdir:
        proc = subprocess.Popen(
            _child_argv(),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=workdir, env=_child_env(workdir), start_new_session=True, close_fds=True,
        )
        try:
            proc.stdin.write(json.dumps(request).encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ, "out")
        sel.register(proc.stderr, selectors.EVENT_READ, "err")
        lines, err = _Lines(limits.max_report_bytes), b""
        started = time.monotonic()
        deadline = started + limits.timeout_seconds
        timed_out = too_large = False
        open_streams = 2
        while open_streams and not too_large:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            for key, _ in sel.select(timeout=remaining):
                chunk = os.read(key.fileobj.fileno(), 1 << 20)
                if not chunk:
                    sel.unregister(key.fileobj)
                    open_streams -= 1
                    continue
                if key.data == "err":
                    err = (err + chunk)[-_STDERR_TAIL:]
                    continue
                try:
                    done = lines.feed(chunk)
                except ReportTooLarge:
                    too_large = True
                    break
                for line in done:
                    outcomes.append(SandboxOutcome.from_dict(json.loads(line)))
                    started = time.monotonic()
                    deadline = started + limits.timeout_seconds
        sel.close()
        if timed_out or too_large:
            os.killpg(proc.pid, signal.SIGKILL)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        proc.stdout.close()
        proc.stderr.close()
        rss = usage.ru_maxrss * 1024
        seconds = time.monotonic() - started
        if len(outcomes) < len(tasks):
            if too_large:
                outcomes.append(_sandbox_outcome("report-limit", "report-size", f"the scoring report is larger "
                                                 f"than {limits.max_report_bytes} bytes (the sandbox's "
                                                 "max_report_bytes); it was cut off", seconds, rss))
            elif timed_out:
                outcomes.append(_sandbox_outcome("timeout", "timeout", f"scoring took longer than "
                                                 f"{limits.timeout_seconds:g} s of wall-clock time", seconds, rss))
            elif proc.returncode < 0:
                outcomes.append(_signal_outcome(-proc.returncode, seconds, rss))
            else:
                outcomes.append(_exit_outcome(proc.returncode, err.decode(errors="replace"), seconds, rss))
    return outcomes, rss


def run_sandboxed_batch(tasks: list[SandboxTask], limits: SandboxLimits = SandboxLimits()) -> list[SandboxOutcome]:
    """Run ``tasks`` in as few sandboxed children as possible; one outcome per task, in order.

    Each task gets the full CPU and wall-clock limits. When a task kills its child (signal, limit, timeout), it
    gets the corresponding finding and the tasks after it run in a fresh child, so one hostile archive never
    changes another's outcome.
    """
    tasks = [SandboxTask(**{**t.to_dict(), "archive": os.path.abspath(t.archive),
                            "reference": None if t.reference is None else os.path.abspath(t.reference)})
             for t in tasks]
    done: list[SandboxOutcome] = []
    while len(done) < len(tasks):
        outcomes, _ = _run_child(tasks[len(done):], limits)
        done.extend(outcomes)
    return done


def run_sandboxed(task: SandboxTask, limits: SandboxLimits = SandboxLimits()) -> SandboxOutcome:
    """Run one task in a fresh sandboxed child; see :func:`run_sandboxed_batch`."""
    return run_sandboxed_batch([task], limits)[0]


# ---------------------------------------------------------------------------------------------------------------
# Child side
# ---------------------------------------------------------------------------------------------------------------
def _prctl(option: int, arg: int) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(option, arg, 0, 0, 0)


def _limit_self(limits: dict[str, Any], parent: int, *, address_space: bool = True) -> None:
    """rlimits and process flags; runs before any archive is touched (``RLIMIT_AS`` only with
    ``address_space``: the scoring child sets it after its imports, :func:`_limit_address_space`)."""
    import resource

    _prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the parent
    if os.getppid() != parent:
        os._exit(70)
    _prctl(38, 1)  # PR_SET_NO_NEW_PRIVS
    os.umask(0o777)
    if address_space:
        mem = int(limits["memory_bytes"])
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    nofile = int(limits["max_open_files"])
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))


#: Address space the child needs beyond its imports before the memory plan can answer (opening the archive and
#: reading its header and labels); a limit closer than this to what the imports map is refused at start.
START_BYTES = 32 * 2**20


def _mapped_bytes() -> int | None:
    """This process's mapped address space (``VmSize``), or None where ``/proc`` cannot tell."""
    try:
        with open("/proc/self/statm", "rb") as f:
            import resource

            return int(f.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return None


def _limit_address_space(memory_bytes: int) -> str | None:
    """Set ``RLIMIT_AS`` to ``memory_bytes`` once the modules are imported; a message instead (and no limit: the
    child then answers without reading anything) when what they map leaves less than :data:`START_BYTES`."""
    import resource

    mapped = _mapped_bytes()
    if mapped is not None and mapped + START_BYTES > memory_bytes:
        return (f"the sandbox's memory limit of {memory_bytes / 2**20:,.0f} MiB is below what the scoring process "
                f"needs before it reads any archive: {(mapped + START_BYTES) / 2**20:,.0f} MiB of address space "
                "(Python, numpy, scipy and h5py mapped, and room to open the archive); raise --memory-limit")
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    return None


def limit_process(limits: dict[str, Any], parent: int) -> None:
    """Apply the child's limits (:func:`_limit_self`) to the calling process: for other limited children, such as
    the one that draws ``score --html``'s figures (``scoring/plot_sandbox.py``)."""
    _limit_self(limits, parent)


def _cpu_used() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _allow_cpu(seconds: int, n_tasks_left: int) -> None:
    """Soft CPU limit ``seconds`` from now (SIGXCPU), hard limit a little above the whole batch's allowance."""
    import resource

    used = int(_cpu_used()) + 1
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard == resource.RLIM_INFINITY:
        hard = used + seconds * n_tasks_left + 5
    resource.setrlimit(resource.RLIMIT_CPU, (min(used + seconds, hard), hard))


def _preimport(kinds: set[str]) -> None:
    """Import everything a task needs before Landlock closes the file system, and have OpenBLAS map its buffer
    (on its first product; under a limit it could no longer map it, and OpenBLAS then ends the process) so that
    the address space measured before ``RLIMIT_AS`` counts it."""
    import numpy
    import scipy.special  # noqa: F401

    numpy.ones((256, 256)) @ numpy.ones((256, 256))  # a smaller product takes a path without the buffer

    from ..archive_schema import validate_archive  # noqa: F401
    from ..archive_schema.safe_h5py import h5py  # noqa: F401

    if "score" in kinds:
        from . import protocols, reference, score  # noqa: F401
    if "inspect" in kinds:
        from ..archive_schema import describe  # noqa: F401
        from . import reference  # noqa: F401  (a reference label file is described too)


def _landlock(read_files: list[str]) -> bool:
    """Allow reading only code/library directories and ``read_files``; forbid every write. False if unsupported."""
    import ctypes
    import struct
    import sysconfig

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(444, None, 0, 1)  # landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
    if abi < 1:
        return False
    execute, write_file, read_file, read_dir = 1 << 0, 1 << 1, 1 << 2, 1 << 3
    handled = (1 << 13) - 1  # EXECUTE .. MAKE_SYM
    if abi >= 2:
        handled |= 1 << 13  # REFER
    if abi >= 3:
        handled |= 1 << 14  # TRUNCATE
    net = 0b11 if abi >= 4 else 0  # BIND_TCP | CONNECT_TCP
    attr = struct.pack("QQ", handled, net) if abi >= 4 else struct.pack("Q", handled)
    ruleset = libc.syscall(444, attr, len(attr), 0)
    if ruleset < 0:
        return False
    dirs = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    dirs |= {p for p in sys.path if p and os.path.isdir(p)}
    dirs |= {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    dirs |= {d for d in ("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/local/lib", "/usr/share/zoneinfo")
             if os.path.isdir(d)}
    rules = [(d, execute | read_file | read_dir, 0) for d in sorted(dirs)]
    # a request's file is read; a request's directory (a `<out>.partial` run) is listed and its files read: the
    # validator counts its finished members (without read_dir it counted none)
    rules += [(f, read_file | (read_dir if os.path.isdir(f) else 0), os.O_NOFOLLOW) for f in read_files]
    o_path = getattr(os, "O_PATH", 0o10000000)
    try:
        for path, access, nofollow in rules:
            try:
                fd = os.open(path, o_path | os.O_CLOEXEC | nofollow)
            except OSError:
                continue
            try:
                rule = struct.pack("=Qi", access, fd)  # struct landlock_path_beneath_attr is packed
                libc.syscall(445, ruleset, 1, rule, 0)  # an unusable rule (a symlink) is skipped: the file stays shut
            finally:
                os.close(fd)
        return libc.syscall(446, ruleset, 0) == 0
    finally:
        os.close(ruleset)


def _protocol(d: dict[str, Any] | None):
    from .protocols import Protocol

    if d is None:
        return Protocol.preset("pitfalls")
    names = {f.name for f in fields(Protocol)}
    kw = {k: v for k, v in d.items() if k in names}
    if kw.get("cost_matrix") is not None:
        kw["cost_matrix"] = tuple(tuple(float(x) for x in row) for row in kw["cost_matrix"])
    kw["overrides"] = tuple(kw.get("overrides", ()))
    kw["calibrators"] = tuple(kw.get("calibrators", ()))
    return Protocol(**kw)


def _findings_outcome(findings: list, seconds: float) -> SandboxOutcome:
    from ..archive_schema.scan import UNREADABLE_CHECKS

    errors = [f for f in findings if f.severity == "error"]
    code = 0 if not errors else 2 if any(f.check in UNREADABLE_CHECKS for f in errors) else 1
    status = {0: "ok", 1: "rejected", 2: "unreadable"}[code]
    return SandboxOutcome(status, code, tuple(f.to_dict() for f in findings), None, None, seconds)


def _inspect(archive: str, limits, t0: float) -> SandboxOutcome:
    """``ubench inspect``'s description of an archive, read in the child like a score."""
    from ..archive_schema import (ArchiveError, InvalidArchiveError, UnreadableArchiveError, UnsupportedArchiveError,
                                  open_archive)
    from ..archive_schema.describe import describe_archive

    from ..archive_schema.errors import NotAnArchiveError
    from .reference import ReferenceError, describe_reference, read_reference

    try:
        with open_archive(archive, limits, check_values=False) as reader:
            info = describe_archive(reader)
    except NotAnArchiveError as exc:
        if exc.found_format != "reference-labels":
            return SandboxOutcome("rejected", 1, (_finding("version", str(exc), "/"),), None, None,
                                  time.monotonic() - t0)
        try:  # a reference label file: describe it instead
            info = describe_reference(read_reference(archive, limits))
        except ReferenceError as ref_exc:
            return SandboxOutcome("rejected", 1, (_finding("rejected", str(ref_exc)),), None, None,
                                  time.monotonic() - t0)
    except (InvalidArchiveError, UnreadableArchiveError) as exc:
        return _findings_outcome(exc.findings, time.monotonic() - t0)
    except UnsupportedArchiveError as exc:
        return SandboxOutcome("rejected", 1, (_finding("version", str(exc), "/"),), None, None, time.monotonic() - t0)
    except ArchiveError as exc:
        return SandboxOutcome("rejected", 1, (_finding("rejected", str(exc)),), None, None, time.monotonic() - t0)
    return SandboxOutcome("ok", 0, (), info, None, time.monotonic() - t0)


def _run_task(task: SandboxTask) -> SandboxOutcome:
    from ..archive_schema import (ArchiveError, InvalidArchiveError, ReadLimits, UnreadableArchiveError,
                                  UnsupportedArchiveError, validate_archive)

    t0 = time.monotonic()
    limits = ReadLimits(**task.read_limits)
    if task.kind == "validate":
        return _findings_outcome(validate_archive(task.archive, limits), time.monotonic() - t0)
    if task.kind == "inspect":
        return _inspect(task.archive, limits, t0)
    from .memory_plan import MemoryBudgetError
    from .reference import ReferenceError, ReferenceMismatchError
    from .score import score_archive

    try:
        report = score_archive(task.archive, reference=task.reference, protocol=_protocol(task.protocol),
                               limits=limits)
    except (InvalidArchiveError, UnreadableArchiveError) as exc:
        return _findings_outcome(exc.findings, time.monotonic() - t0)
    except UnsupportedArchiveError as exc:
        return SandboxOutcome("rejected", 1, (_finding("version", str(exc), "/"),), None, None, time.monotonic() - t0)
    except ReferenceMismatchError as exc:
        found = tuple(_finding("reference", d) for d in exc.differences) or (_finding("reference", str(exc)),)
        return SandboxOutcome("rejected", 1, found, None, None, time.monotonic() - t0)
    except ReferenceError as exc:
        # The host's reference file, not the upload, is unusable (exit 2, as `ubench score` without a sandbox).
        return SandboxOutcome("unreadable", 2, (_finding("reference-file", str(exc)),), None, None,
                              time.monotonic() - t0)
    except ArchiveError as exc:
        return SandboxOutcome("rejected", 1, (_finding("rejected", str(exc)),), None, None, time.monotonic() - t0)
    except MemoryBudgetError as exc:
        # refused up front by the memory plan, before any prediction was read: the size needed and the limit
        import resource

        suggested = -(-(exc.limit_needed(resource.getrlimit(resource.RLIMIT_AS)[0]) + _MAPPED_SLACK) // 2**20)
        return _sandbox_outcome("memory-limit", "memory-limit", f"{exc}, under the sandbox's memory limit of "
                                f"{_limit_text()}; a --memory-limit of {suggested:,} MiB would score it in passes",
                                time.monotonic() - t0)
    except ValueError as exc:
        # A valid archive that cannot be scored under the protocol (a metric undefined on its data, a cost matrix
        # of the wrong size), as `ubench score` treats it.
        return SandboxOutcome("rejected", 1, (_finding("unscorable", str(exc)),), None, None, time.monotonic() - t0)
    return SandboxOutcome("ok", 0, (), report, None, time.monotonic() - t0)


#: Added to the limit a refusal suggests: what the child maps before its plan varies by a few hundred KiB from
#: one limit to another (the heap as the archive is opened), and a suggestion 1 MiB short was refused again.
_MAPPED_SLACK = 4 * 2**20


def _limit_text() -> str:
    """The child's address-space limit, for messages (``--memory-limit``)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return "none" if soft == resource.RLIM_INFINITY else f"{soft / 2**20:,.0f} MiB"


def _open_status():
    """``/proc/self/status``, opened before Landlock closes the file system (None where there is none): the file
    :func:`_peak_rss` re-reads after each task."""
    try:
        return open("/proc/self/status", "rb")  # noqa: SIM115 - kept open for the child's lifetime
    except OSError:
        return None


def _peak_rss(status) -> int:
    """This process's peak resident memory: ``VmHWM`` of its own address space, from the open ``status`` file.
    ``ru_maxrss`` (the fallback) also counts the parent's pages the child shared between fork and exec (Linux
    carries the old address space's high-water mark over the exec): the host's own memory, not the upload's."""
    if status is not None:
        try:
            status.seek(0)
            for line in status.read().splitlines():
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
        except (OSError, ValueError):
            pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _emit(outcome: SandboxOutcome, status=None) -> None:
    rss = _peak_rss(status)
    d = outcome.to_dict()
    d["peak_rss_bytes"] = rss
    try:
        line = json.dumps(d, allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as exc:  # NaN/inf or a non-JSON value in a report: a scorer bug
        line = json.dumps(_sandbox_outcome("internal-error", "internal-error", f"the report is not valid JSON "
                                           f"(a bug; please report it): {exc}", outcome.seconds, rss).to_dict())
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> None:
    """The child: read the request, limit itself, run each task, write one JSON line per task."""
    request = json.loads(sys.stdin.read())
    limits = request["limits"]
    _limit_self(limits, int(request["parent"]), address_space=False)
    tasks = [SandboxTask(**t) for t in request["tasks"]]
    _preimport({t.kind for t in tasks})  # no archive is read before RLIMIT_AS is set: only the modules
    too_small = _limit_address_space(int(limits["memory_bytes"]))
    status = _open_status()
    from .memory_plan import keep_proc_open

    keep_proc_open()  # the memory plan measures the address space left through /proc, which Landlock closes
    if limits.get("landlock", True):
        _landlock(sorted({p for t in tasks for p in (t.archive, t.reference) if p}))
    for i, task in enumerate(tasks):
        if too_small is not None:
            _emit(_sandbox_outcome("memory-limit", "memory-limit", too_small, 0.0), status)
            continue
        _allow_cpu(int(limits["cpu_seconds"]), len(tasks) - i)
        t0 = time.monotonic()
        try:
            outcome = _run_task(task)
        except MemoryError:
            outcome = _sandbox_outcome("memory-limit", "memory-limit", "scoring needed more memory than the "
                                       f"sandbox's address-space limit ({_limit_text()})", time.monotonic() - t0)
        except Exception as exc:  # noqa: BLE001 - the sandbox boundary: any escape is a ubench bug, reported as one
            outcome = _sandbox_outcome("internal-error", "internal-error", f"ubench failed on this archive "
                                       f"(a bug; please report it): {type(exc).__name__}: {exc}"[:2000],
                                       time.monotonic() - t0)
        _emit(outcome, status)


if __name__ == "__main__":
    main()
