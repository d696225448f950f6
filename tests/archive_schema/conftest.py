# SPDX-License-Identifier: MIT
"""Fixtures of the archive tests: ``hostile`` builds one file of the hostile corpus (``hostile_corpus.py``)."""

import pytest

from hostile_corpus import CASES, Built


@pytest.fixture(params=sorted(CASES))
def hostile(request, tmp_path) -> Built:
    """One hostile file in ``tmp_path/archive``, with the finding it must produce."""
    return CASES[request.param](tmp_path)
