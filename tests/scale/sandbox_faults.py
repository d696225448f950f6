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
    elif fault == "memory":
        import numpy as np

        np.ones(2**40 // 8)  # 1 TiB: beyond any address-space limit
    elif fault == "spin":
        while True:
            pass
    elif fault == "sleep":
        time.sleep(3600)
    elif fault == "raise":
        raise RuntimeError("injected test fault")
    elif fault.startswith("report:"):  # an answer of this many bytes, written in one line
        size = int(fault.split(":")[1])
        return sandbox.SandboxOutcome("ok", 0, (), {"padding": "x" * size}, None, 0.0)
    else:
        raise AssertionError(f"unknown test fault {fault!r}")
    return None


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
