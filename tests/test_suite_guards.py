# SPDX-License-Identifier: MIT
"""The suite's own guards (tests/conftest.py): torch tests are marked from their source, and a test that writes
into the source tree fails the run. Each guard is run end to end on a throw-away project under tmp_path, with
this repository's conftest.py and suite_guards.py copied in."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from suite_guards import SLOW_TESTS, defines_test, torch_tests, tree_changes, tree_state

TESTS = Path(__file__).parent

TORCH_MODULE = '''
import pytest

if False:  # never runs: the marker is read from the source, so no test here needs torch installed
    import torch.nn


def test_module_level_import():
    pass
'''

MIXED_MODULE = '''
import pytest


def test_plain():
    pass


def test_imports_torch_itself():
    if False:
        import torch


def test_importorskip_torchvision():
    if False:
        pytest.importorskip("torchvision")


@pytest.fixture
def net():
    if False:
        from torch import nn
    return 1


def test_uses_a_torch_fixture(net):
    pass


class TestGroup:
    def test_method_with_torch(self):
        if False:
            from torch.utils import data

    def test_method_without(self):
        pass


def test_mentions_torch_in_a_string():
    assert "import torch" != "torch"
'''

WRITER_MODULE = '''
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_writes_into_the_tree():
    (ROOT / "data").mkdir()
    (ROOT / "data" / "out.txt").write_text("x")
    (ROOT / "keep.txt").write_text("changed")


def test_writes_under_tmp_path(tmp_path):
    (tmp_path / "out.txt").write_text("fine")
'''


def _project(tmp_path: Path, modules: dict[str, str]) -> Path:
    root = tmp_path / "project"
    (root / "tests").mkdir(parents=True)
    for name in ("conftest.py", "suite_guards.py"):
        shutil.copy(TESTS / name, root / "tests" / name)
    (root / "pytest.ini").write_text("[pytest]\naddopts = --strict-markers -p no:cacheprovider -p no:benchmark\n"
                                     "markers =\n    slow: long\n    torch: needs PyTorch\n")
    (root / "keep.txt").write_text("original")
    for name, source in modules.items():
        (root / "tests" / name).write_text(textwrap.dedent(source))
    return root


def _pytest(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", *args], cwd=root,
                          capture_output=True, text=True, env=env)


def test_torch_marker_follows_the_imports(tmp_path):
    """Exactly the tests that import torch (module level, own body, a fixture they use, a method) are marked."""
    root = _project(tmp_path, {"test_torch_mod.py": TORCH_MODULE, "test_mixed.py": MIXED_MODULE})
    res = _pytest(root, "--collect-only", "-m", "torch", "tests")
    marked = sorted(line.split("::", 1)[1] for line in res.stdout.splitlines() if "::" in line)
    assert marked == ["TestGroup::test_method_with_torch", "test_importorskip_torchvision",
                      "test_imports_torch_itself", "test_module_level_import", "test_uses_a_torch_fixture"], \
        res.stdout + res.stderr
    res = _pytest(root, "-m", "not torch", "tests")
    assert res.returncode == 0 and "3 passed, 5 deselected" in res.stdout, res.stdout + res.stderr


def test_a_test_writing_into_the_source_tree_fails_the_run(tmp_path):
    """A write under the repository (new directory, new file, changed file) fails the session and names each path;
    the same session's writes under tmp_path are fine."""
    root = _project(tmp_path, {"test_writer.py": WRITER_MODULE})
    res = _pytest(root, "tests")
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert "2 passed, 1 error" in out and "tests wrote into the source tree" in out
    for line in ("added data/", "added data/out.txt", "modified keep.txt"):
        assert line in out, out
    res = _pytest(root, "tests", "-k", "tmp_path")
    assert res.returncode == 0 and "1 passed" in res.stdout, res.stdout + res.stderr


def test_tree_state_ignores_caches_and_environments(tmp_path):
    """Caches, git data, virtual environments and the skipped basetemp never count as changes; anything else does."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("a = 1")
    (tmp_path / ".git").write_text("gitdir: elsewhere")  # a worktree's .git is a file
    for d in ("__pycache__", ".hypothesis", ".pytest_cache", "env", "base"):
        (tmp_path / d).mkdir()
    (tmp_path / "env" / "pyvenv.cfg").write_text("home = /usr")
    before = tree_state(tmp_path, skip=(tmp_path / "base",))
    assert sorted(before) == ["src/", "src/a.py"]
    for d in ("__pycache__", ".hypothesis", ".pytest_cache", "env", "base"):
        (tmp_path / d / "x").write_text("x")
    (tmp_path / ".git").write_text("gitdir: moved")
    assert tree_changes(before, tree_state(tmp_path, skip=(tmp_path / "base",))) == []
    os.utime(tmp_path / "src" / "a.py", ns=(0, 0))  # same size and content, other mtime
    (tmp_path / "src" / "b").mkdir()
    after = tree_state(tmp_path, skip=(tmp_path / "base",))
    assert tree_changes(before, after) == ["modified src/a.py", "added src/b/"]
    (tmp_path / "src" / "a.py").unlink()
    assert tree_changes(before, tree_state(tmp_path)) [:2] == ["added base/", "added base/x"]
    assert "removed src/a.py" in tree_changes(before, tree_state(tmp_path))


def test_torch_tests_reads_the_source():
    whole, names = torch_tests(textwrap.dedent(MIXED_MODULE))
    assert not whole and names == {"test_imports_torch_itself", "test_importorskip_torchvision", "net",
                                   "test_method_with_torch"}
    assert torch_tests("import numpy\nfrom . import torch\n") == (False, frozenset())  # a relative module named torch
    assert torch_tests("torch = __import__('pytest').importorskip('torch')\n")[0]


def test_every_slow_entry_names_an_existing_test():
    """A renamed or deleted slow test must leave SLOW_TESTS too, or the marker silently stops applying."""
    repo = TESTS.parent
    for entry in sorted(SLOW_TESTS):
        path, name = entry.split("::")
        assert (repo / path).is_file(), entry
        assert defines_test((repo / path).read_text(encoding="utf-8"), name), entry


def test_slow_marker_is_applied(request):
    """This session's collection marked the listed tests (checked on the ones collected with this file)."""
    items = [i for i in request.session.items if i.nodeid.split("[", 1)[0] in SLOW_TESTS]
    assert all(i.get_closest_marker("slow") for i in items)
    assert not request.node.get_closest_marker("slow")
