# SPDX-License-Identifier: MIT
"""Test-only stand-in for the sandbox child: injects a fault into chosen tasks, then runs the real child.

The tests point ``ubench.scoring.sandbox._child_argv`` at this script (monkeypatching the parent in-process,
fixture ``child_faults``); the production child has no switch that reaches these faults. ``argv[1]`` is a JSON
object ``{absolute archive path: fault}``; the fault runs where ``_run_task`` would start, after the child has
limited itself (rlimits, Landlock), so it stands in for a hostile file inside libhdf5.
"""

from __future__ import annotations

import json
import os
import sys
import time

from ubench.scoring import sandbox

FAULTS: dict[str, str] = json.loads(sys.argv[1])


def _inject(task, fault: str):
    if fault == "segv":
        import ctypes

        ctypes.string_at(0)  # a real null-pointer read in C: SIGSEGV
    elif fault == "abort":
        os.abort()
    elif fault.startswith("memory:"):  # an untouched allocation of this many bytes: refused only by RLIMIT_AS
        import numpy as np

        np.empty(int(fault.split(":")[1]), dtype=np.uint8)
    elif fault == "spin":
        while True:
            pass
    elif fault == "sleep":
        time.sleep(3600)
    elif fault == "raise":
        raise RuntimeError("injected test fault")
    elif fault.startswith("probe:"):  # the child's own limits, measured from inside it
        return sandbox.SandboxOutcome("ok", 0, (), _probe(int(fault.split(":")[1])), None, 0.0)
    elif fault.startswith("report:"):  # an answer of this many bytes, written in one line
        size = int(fault.split(":")[1])
        return sandbox.SandboxOutcome("ok", 0, (), {"padding": "x" * size}, None, 0.0)
    else:
        raise AssertionError(f"unknown test fault {fault!r}")
    return None


def _probe(memory_bytes: int) -> dict:
    """What the sandboxed child can do, each limit tried rather than read: write one byte to a memfd (a file no
    Landlock rule covers, so only RLIMIT_FSIZE stops it), open descriptors until refused, map ``memory_bytes``
    untouched (only RLIMIT_AS refuses that on a machine with that much memory free), and the kernel's
    no-new-privileges and core-size settings."""
    import ctypes
    import errno
    import mmap
    import resource

    out = {}
    fd = os.memfd_create("ubench-probe")
    try:
        os.write(fd, b"x")
        out["file_write"] = "written"
    except OSError as exc:
        out["file_write"] = errno.errorcode.get(exc.errno, str(exc.errno))
    finally:
        os.close(fd)
    opened = []
    try:
        for _ in range(4096):  # enough to tell a limit of a few hundred from none
            opened.append(os.dup(0))
        out["open_files"] = "more than 4096"
    except OSError as exc:
        out["open_files"] = max(opened) + 1 if exc.errno == errno.EMFILE else errno.errorcode.get(exc.errno)
    finally:
        for d in opened:
            os.close(d)
    try:
        mmap.mmap(-1, memory_bytes).close()
        out["address_space"] = "mapped"
    except OSError as exc:
        out["address_space"] = errno.errorcode.get(exc.errno, str(exc.errno))
    libc = ctypes.CDLL(None, use_errno=True)
    out["no_new_privs"] = libc.prctl(39, 0, 0, 0, 0)  # PR_GET_NO_NEW_PRIVS
    out["core"] = list(resource.getrlimit(resource.RLIMIT_CORE))
    return out


_real_run_task = sandbox._run_task


def _run_task(task):
    fault = FAULTS.get(task.archive)
    if fault is not None:
        injected = _inject(task, fault)
        if injected is not None:
            return injected
    return _real_run_task(task)


sandbox._run_task = _run_task
sandbox.main()
