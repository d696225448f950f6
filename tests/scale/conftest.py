# SPDX-License-Identifier: MIT
"""Fixtures of the scale tests: small valid archives, their reference, and an upload directory."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from scale_archives import make_archive


@pytest.fixture(scope="session")
def valid_archive(tmp_path_factory) -> Path:
    return make_archive(tmp_path_factory.mktemp("valid") / "run.h5")


@pytest.fixture(scope="session")
def reference_file(valid_archive, tmp_path_factory) -> Path:
    from ubench.scoring.reference import write_reference

    return write_reference(valid_archive, tmp_path_factory.mktemp("ref") / "ref.h5")


FAULT_CHILD = str(Path(__file__).with_name("sandbox_faults.py"))


@pytest.fixture
def child_faults(monkeypatch, tmp_path, valid_archive):
    """``add(fault) -> path``: a copy of the valid archive on which the sandboxed child injects ``fault``.

    The parent's child command is monkeypatched to ``sandbox_faults.py`` (a wrapper around the real child), so
    faults are injected from the test, never through a switch in production code."""
    from ubench.scoring import sandbox

    faults: dict[str, str] = {}

    def add(fault: str) -> Path:
        path = tmp_path / f"fault-{len(faults)}.h5"
        shutil.copyfile(valid_archive, path)
        faults[str(path.resolve())] = fault
        return path

    monkeypatch.setattr(sandbox, "_child_argv", lambda: [sys.executable, "-I", "-B", FAULT_CHILD, json.dumps(faults)])
    return add
