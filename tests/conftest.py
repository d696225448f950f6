# SPDX-License-Identifier: MIT
"""Suite-wide settings: hypothesis profiles, the ``torch`` marker, and the guard against writes into the repo.

* Hypothesis profiles ``dev`` (few examples, the default) and ``ci`` (more, derandomized; CI sets it).
* Every test that imports torch (``import torch``, ``from torch ...``, ``pytest.importorskip("torch")`` at module
  level, in the test function or in a fixture of its module it uses) is marked ``torch`` here at collection, so
  ``-m "not torch"`` leaves exactly those out; nobody has to remember the decorator.
* The tests listed in ``suite_guards.SLOW_TESTS`` are marked ``slow`` here (``-m "not slow"`` for a quick run).
* ``--doctest-modules`` (pyproject) is for the numpydoc Examples of ``metrics/``; files under ``tests/`` are not
  doctest-collected (they hold no examples, and importing the several ``conftest.py`` as modules collides).
* No test may write into the source tree: the repository's files (mtimes included) are snapshotted when the
  session starts and compared when it ends; any file added, removed or modified under the repository fails the
  run with the list. Only ``.git``, ``.hypothesis/`` (hypothesis's example database), ``.pytest_cache/``,
  ``__pycache__/``, virtual environments and pytest's ``--basetemp`` (when it lies inside) are ignored. Editing
  the tree while the suite runs trips it too: the list then shows your own edit. Not under mutation testing
  (``UBENCH_MUTATION`` set by ``bench/bench_mutation.py``: the tree is then mutmut's copy, which it writes).
* Hypothesis profile ``mutation``: derandomized, no example database (a mutant's verdict is reproducible), no
  shrinking (a failing example is a kill already).
* Under CI (``CI=true``) a skip fails the test unless its reason is on ``suite_guards.CI_ALLOWED_SKIPS`` (no CUDA
  GPU, no TensorRT): CI installs everything else the suite needs, so a skip there means a missing install step.
  Skips at collection (a module-level ``importorskip``) become collection errors; xfail is not a skip. With
  ``UBENCH_SKIP_SUMMARY=PATH`` the session's skips (reason, count) are written there (``.ci/run`` prints them).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from _pytest.doctest import DoctestModule  # not re-exported by pytest
from hypothesis import HealthCheck, Phase, settings
from suite_guards import SLOW_TESTS, refuse_skip_in_ci, skip_reason, torch_tests, tree_changes, tree_state

settings.register_profile("dev", max_examples=25, deadline=None)
settings.register_profile(
    "ci",
    max_examples=100,
    deadline=None,
    print_blob=True,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
#: Mutation testing (bench/bench_mutation.py): the dev profile's size, derandomized and without the example database,
#: so that a mutant's verdict never depends on an earlier run; no shrinking (a failing example already kills the
#: mutant, and shrinking it took a warm test of 0.3 s past mutmut's 16 s timeout, a timeout counting as survived).
settings.register_profile(
    "mutation", max_examples=25, deadline=None, derandomize=True, database=None,
    phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.target),
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

REPO = Path(__file__).resolve().parents[1]
_BEFORE = pytest.StashKey[dict]()


def _basetemp_skip(config: pytest.Config) -> tuple[Path, ...]:
    basetemp = config.option.basetemp
    return (Path(basetemp).resolve(),) if basetemp else ()


def pytest_sessionstart(session: pytest.Session) -> None:
    if os.environ.get("UBENCH_MUTATION"):
        return
    session.config.stash[_BEFORE] = tree_state(REPO, skip=_basetemp_skip(session.config))


@pytest.fixture(scope="session", autouse=True)
def source_tree_unchanged(request):
    """Fail the session if any test added, removed or modified a file under the repository (use ``tmp_path``)."""
    config = request.config
    if os.environ.get("UBENCH_MUTATION"):  # mutmut's working copy, which mutmut itself writes during the run
        yield
        return
    before = config.stash.get(_BEFORE, None)
    if before is None:  # this conftest was not loaded at session start
        before = tree_state(REPO, skip=_basetemp_skip(config))
    yield
    changes = tree_changes(before, tree_state(REPO, skip=_basetemp_skip(config)))
    if changes:
        shown = "\n  ".join(changes[:50]) + ("\n  ..." if len(changes) > 50 else "")
        pytest.fail(f"tests wrote into the source tree {REPO} (write under tmp_path instead):\n  {shown}",
                    pytrace=False)


@pytest.fixture
def drawn_counts(monkeypatch) -> list[int]:
    """The sample count of every ``bootstrap_counts`` draw the interval kernels make (each unit's counts drawn
    once is what several tests pin), in order; the draws themselves are unchanged."""
    from ubench.metrics import intervals

    drawn: list[int] = []
    counts_of = intervals.bootstrap_counts

    def counted(m, rows, g):
        drawn.append(m)
        return counts_of(m, rows, g)

    monkeypatch.setattr(intervals, "bootstrap_counts", counted)
    return drawn


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    collected = yield
    return [c for c in collected if not isinstance(c, DoctestModule)] if collected else collected


_TORCH_CACHE: dict[str, tuple[bool, frozenset[str]]] = {}


def _torch_info(path: Path) -> tuple[bool, frozenset[str]]:
    key = str(path)
    if key not in _TORCH_CACHE:
        try:
            _TORCH_CACHE[key] = torch_tests(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError):
            _TORCH_CACHE[key] = (False, frozenset())
    return _TORCH_CACHE[key]


def _mutation_fast_first(items: list[pytest.Item]) -> None:
    """Under a mutant (bench/bench_mutation.py; mutmut runs the tests that reach it with ``-x``): the tests in the
    order of their duration in mutmut's stats run, so that a killed mutant meets its fast killers before the slow
    tests. The same tests run and a kill is a kill: only a killed mutant's time changes. pytest's fixture
    ordering, which runs after this hook, still groups the tests that share a module or session fixture."""
    if "__mutmut_" not in os.environ.get("MUTANT_UNDER_TEST", ""):
        return
    try:
        durations = json.loads(Path("mutmut-stats.json").read_text())["duration_by_test"]  # mutmut's cwd
    except (OSError, ValueError, KeyError):
        return
    items.sort(key=lambda item: durations.get(item.nodeid, 0.0))


@pytest.hookimpl(tryfirst=True)  # before pytest's fixture ordering (see _mutation_fast_first)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("UBENCH_MUTATION"):
        _mutation_fast_first(items)
    for item in items:
        if not isinstance(item, pytest.Function) or item.path.suffix != ".py":
            continue
        whole, names = _torch_info(item.path)
        uses = {item.originalname, *getattr(item, "fixturenames", ())}
        if whole or uses & names:
            item.add_marker(pytest.mark.torch)
        if item.nodeid.split("[", 1)[0] in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)


_HITS_EPOCH = iter(range(1, 1 << 62))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """Under mutmut's stats run (bench/bench_mutation.py sets ``UBENCH_MUTATION_HITS``), the functions that the
    processes this test started reached (their sitecustomize writes them to that folder) count as reached by
    this test, so that mutmut runs it for those functions' mutants (a ``ubench serve`` child's routes)."""
    try:
        return (yield)
    finally:
        hits = os.environ.get("UBENCH_MUTATION_HITS")
        if hits and os.environ.get("MUTANT_UNDER_TEST") == "stats":
            from mutmut.state import state

            folder = Path(hits)
            for path in folder.iterdir():
                if path.name != "epoch" and path.suffix != ".read":
                    taken = path.rename(path.with_suffix(".read"))  # a child's later hits go to a new file
                    state()._stats.update(taken.read_text().split())
                    taken.unlink()
            epoch = folder / "epoch"  # a new test: the children report every function again
            epoch.touch()
            n = next(_HITS_EPOCH)
            os.utime(epoch, ns=(n, n))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    refuse_skip_in_ci(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    report = yield
    refuse_skip_in_ci(report)
    return report


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    path = os.environ.get("UBENCH_SKIP_SUMMARY")
    if not path:
        return
    counts: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        reason = skip_reason(report.longrepr)
        counts[reason] = counts.get(reason, 0) + 1
    lines = [f"{n:5d}  {reason}" for reason, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    Path(path).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
