# SPDX-License-Identifier: MIT
"""Fixtures of the scale tests: small valid archives, their reference, and an upload directory."""

from __future__ import annotations

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


@pytest.fixture
def faults(monkeypatch):
    """Let the sandboxed child honour injected test faults."""
    monkeypatch.setenv("UBENCH_SANDBOX_TEST_FAULTS", "1")
