# SPDX-License-Identifier: MIT
"""Test-only hooks around the leaderboard's scoring: marker files that count executions, and a hold point.

Production code reads no test switch (issue #9 item 14); the tests install these hooks themselves:

- in-process, through ``install(..., setattr=monkeypatch.setattr)``;
- in a ``ubench leaderboard`` subprocess, by running this file as the program (``python board_hooks.py ARGS``
  runs the CLI with ``ARGS`` after installing the hooks);
- in Dask worker processes, as a worker preload (``LocalCluster(preload=[this file])``).

The two subprocess routes read their settings from ``BOARD_HOOKS_MARKERS`` (the marker directory) and
``BOARD_HOOKS_HOLD`` (the sha256 prefix of an upload whose first scoring sleeps, so a test can kill it) — test
code reading test variables. A marker is ``<stage>-<sha256[:16]>-<pid>-<random>`` with stage ``started`` (a
sandboxed scoring begins), ``scored`` (it ended) or ``committed`` (its result was stored).
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path

MARKERS_VAR = "BOARD_HOOKS_MARKERS"
HOLD_VAR = "BOARD_HOOKS_HOLD"


def _touch(markers: str, stage: str, digest: str) -> None:
    Path(markers, f"{stage}-{digest[:16]}-{os.getpid()}-{os.urandom(3).hex()}").touch()


def install(markers: str, hold: str | None = None, *, setattr=setattr) -> None:
    """Wrap ``leaderboard.run_sandboxed`` and ``leaderboard._commit`` with marker files and the hold point."""
    from ubench.scoring import leaderboard

    if getattr(leaderboard.run_sandboxed, "board_hooks", False):
        return  # already installed in this process (a preload may be imported more than once)
    real_run, real_commit = leaderboard.run_sandboxed, leaderboard._commit

    def run_sandboxed(task, limits):
        digest = hashlib.sha256(Path(task.archive).read_bytes()).hexdigest()
        first = not any(p.startswith(f"started-{digest[:16]}-") for p in os.listdir(markers))
        _touch(markers, "started", digest)
        if hold and first and digest.startswith(hold):
            time.sleep(120)  # the test kills this process while it waits
        outcome = real_run(task, limits)
        _touch(markers, "scored", digest)
        return outcome

    def _commit(results, name, record, *, replace):
        won = real_commit(results, name, record, replace=replace)
        if won:
            _touch(markers, "committed", name)
        return won

    run_sandboxed.board_hooks = True
    setattr(leaderboard, "run_sandboxed", run_sandboxed)
    setattr(leaderboard, "_commit", _commit)


def _install_from_environment() -> None:
    if os.environ.get(MARKERS_VAR):
        install(os.environ[MARKERS_VAR], os.environ.get(HOLD_VAR) or None)


def dask_setup(worker=None) -> None:
    """Dask worker preload entry point (the hooks are installed when the module is imported)."""


if __name__ == "__main__":
    _install_from_environment()
    from ubench.cli import cli

    cli.main(args=sys.argv[1:], prog_name="ubench")
else:
    _install_from_environment()
