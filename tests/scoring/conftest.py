# SPDX-License-Identifier: MIT
"""Fixtures of the scoring tests; the archive builders live in ``scoring_archives.py``."""

import pytest
from scoring_archives import build_archive


@pytest.fixture
def archive(tmp_path):
    return build_archive(tmp_path / "run.h5")
