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

import pytest

from suite_guards import (
    CI_ALLOWED_SKIPS,
    SLOW_TESTS,
    ci_allows_skip,
    defines_test,
    refuse_skip_in_ci,
    skip_reason,
    torch_tests,
    tree_changes,
    tree_state,
)

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


SKIPPING_MODULE = '''
import pytest


@pytest.fixture
def server():
    pytest.skip("PostgreSQL binaries not installed (Debian's postgresql package)")


def test_gpu():
    pytest.skip("needs a CUDA device")


def test_trt():
    pytest.importorskip("tensorrt_is_not_installed_here".replace("_is_not_installed_here", ""))


def test_component():
    pytest.skip("Debian's chromium is not installed")


@pytest.mark.skipif(True, reason="the shared MNIST/notMNIST test copies are not on this machine")
def test_marked():
    pass


def test_fixture(server):
    pass


@pytest.mark.xfail(reason="known", strict=True)
def test_expected_failure():
    assert False


def test_runs():
    pass
'''

MISSING_EXTRA_MODULE = '''
import pytest

pytest.importorskip("a_module_ci_would_install")


def test_never_collected():
    pass
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


def _pytest(root: Path, *args: str, **env_changes: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k != "CI"} | env_changes
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


def test_ci_fails_on_a_skip_that_is_not_on_the_allow_list(tmp_path):
    """With CI=true: skips in a test, a fixture, a skipif mark and a module-level importorskip fail (naming their
    reason); the allow-listed CUDA/TensorRT skips stay skips, xfail stays xfail, and the summary file lists the
    skips. Without CI the same tests skip (run in-process below, on the same reports)."""
    if not ci_allows_skip("could not import 'tensorrt': No module named 'tensorrt'"):
        raise AssertionError("TensorRT must be on the allow-list for this test's module")
    root = _project(tmp_path, {"test_skips.py": SKIPPING_MODULE, "test_missing.py": MISSING_EXTRA_MODULE})
    summary = tmp_path / "skips.txt"
    # A collection error stops a run before any test (the CI run then lists every such module and fails);
    # --continue-on-collection-errors lets this one run check both kinds.
    res = _pytest(root, "-rA", "--continue-on-collection-errors", "tests", CI="true", UBENCH_SKIP_SUMMARY=str(summary))
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    # a skip in the test body fails it; one in setup (a skipif mark, a fixture) or collection is an error
    assert "1 failed, 1 passed, 2 skipped, 1 xfailed, 3 errors" in out, out
    assert "FAILED tests/test_skips.py::test_component" in out, out
    for name in ("test_skips.py::test_marked", "test_skips.py::test_fixture", "test_missing.py"):
        assert f"ERROR tests/{name}" in out, out
    for reason in ("Debian's chromium is not installed", "PostgreSQL binaries not installed",
                   "the shared MNIST/notMNIST test copies", "could not import 'a_module_ci_would_install'"):
        assert f"not on the CI allow-list (tests/suite_guards.py CI_ALLOWED_SKIPS): {reason}" in out, (reason, out)
    assert summary.read_text().splitlines() == ["    1  could not import 'tensorrt': No module named 'tensorrt'",
                                                "    1  needs a CUDA device"]


@pytest.mark.parametrize("reason, allowed", [
    ("needs a CUDA device (runs where the device tool lends a GPU)", True),
    ("this onnxruntime has no CUDA provider (CPUExecutionProvider)", True),
    ("needs CUDA", True),
    ("TensorRT needs a CUDA device", True),
    ("could not import 'tensorrt': No module named 'tensorrt'", True),
    ("could not import 'torch': No module named 'torch'", False),
    ("could not import 'onnxruntime': No module named 'onnxruntime'", False),
    ("this kernel has no Landlock", False),
    ("curl not installed", False),
    ("torch.compile on the CPU needs a C++ compiler", False),
    ("test images not present (looked for /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz)", False),
    ("running as root without runuser: cannot start PostgreSQL as its own user", False),
    ("no chromium on this machine (CI installs Debian's chromium)", False),
    ("accumulated", False),  # no pattern matches a substring of a word ("cu" "da")
])
def test_ci_allow_list(reason, allowed):
    """Only hardware the CI machine cannot have (a CUDA GPU, TensorRT) may skip; every component CI installs may
    not. ``skip_reason`` reads pytest's ``(path, line, "Skipped: ...")`` and plain strings alike."""
    assert ci_allows_skip(reason) is allowed
    assert skip_reason(("t.py", 3, "Skipped: " + reason)) == reason == skip_reason(reason)
    assert len(CI_ALLOWED_SKIPS) == 2


def test_skips_pass_outside_ci():
    """Without CI the hook changes nothing (a module-level importorskip's CollectReport stays skipped); with CI=true
    or CI=1 it fails, naming the reason; an xfail report is never touched."""
    import pytest as _pytest_mod

    def report():
        return _pytest_mod.CollectReport("tests/test_missing.py", "skipped",
                                         ("tests/test_missing.py", 3, "Skipped: could not import 'x'"), [])

    for env in ({}, {"CI": "false"}, {"CI": ""}):
        r = report()
        refuse_skip_in_ci(r, env)
        assert r.skipped, env
    for env in ({"CI": "true"}, {"CI": "1"}, {"CI": " TRUE "}):
        r = report()
        refuse_skip_in_ci(r, env)
        assert r.failed and "could not import 'x'" in str(r.longrepr), env
    r = report()
    r.wasxfail = "known"
    refuse_skip_in_ci(r, {"CI": "true"})
    assert r.skipped


def test_ci_script_runs_the_readmes_test_command_and_installs_what_the_skips_need():
    """``.ci/run`` runs the README's test command verbatim, installs the Debian packages whose absence would now
    fail CI (and stops if apt-get fails), and prints the skip summary after the tests."""
    root = TESTS.parent
    readme = (root / "README.md").read_text(encoding="utf-8")
    block = readme.split("Install the test dependencies and run the tests", 1)[1].split("```bash\n", 1)[1]
    command = block.split("\n", 1)[0]
    script = (root / ".ci" / "run").read_text(encoding="utf-8")
    assert command.startswith("python3 -m pip install -e")
    assert any(line.startswith(command + " ") for line in script.splitlines()), command
    for package in ("chromium", "postgresql", "dataset-fashion-mnist", "curl", "g++"):
        assert f" {package}" in script.split("install -y -qq", 1)[1].split(">/dev/null", 1)[0], package
    assert "exit 1" in script.split("apt-get could not install", 1)[1].split("fi", 1)[0]
    assert "UBENCH_SKIP_SUMMARY" in script and script.rstrip().endswith('exit "$status"')
