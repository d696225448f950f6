# SPDX-License-Identifier: MIT
"""bench/bench_mutation.py: the mutation score per module and the mutmut configuration it writes (the run itself
is not in CI)."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_mutation", ROOT / "bench" / "bench_mutation.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_score_counts_kills_over_non_equivalent_mutants(bench, monkeypatch):
    """killed (exit 1 or 3) / (mutants - equivalent - not yet checked); survivors, 'no tests' and timeouts are not
    kills; an interrupted run's unchecked mutants are counted apart and leave the target undecided."""
    monkeypatch.setattr(bench, "EQUIVALENT", {"m.x_f__mutmut_5": "why"})
    codes = {"m.x_f__mutmut_1": 1, "m.x_f__mutmut_2": 3, "m.x_f__mutmut_3": 0, "m.x_f__mutmut_4": 33,
             "m.x_f__mutmut_5": 0, "m.x_f__mutmut_6": 36, "m.x_f__mutmut_7": 1, "m.x_f__mutmut_8": None}
    row = bench._row("metrics", "metrics/calibration.py", codes, 1.0, [1.0, 1.0, 1.0])
    assert (row["mutants"], row["equivalent"], row["killed"], row["survived"], row["no_tests"], row["timeout"],
            row["not_checked"]) == (8, 1, 3, 1, 1, 1, 1)
    assert row["score"] == pytest.approx(3 / 6, abs=1e-4)
    assert row["survivors"] == ["m.x_f__mutmut_3"]
    summary = {s["what"]: s for s in bench._summary([row])}
    assert summary["mutants killed in metrics"]["met"] is None  # one module of many: no verdict yet
    assert summary["mutants killed in serve"]["result"].startswith("not run")


def test_every_configured_path_is_a_shard_unit_and_the_config_parses(bench, tmp_path):
    """pyproject's [tool.mutmut] source paths are exactly the shards' units (under the staging's ubench/), and the
    per-shard file mutmut reads is valid TOML with the shard's sources and tests."""
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]
    units = {m for modules, _ in bench.SHARDS.values() for m in modules}
    configured = set()
    for path in conf["source_paths"]:
        rel = path.removeprefix("ubench/")
        configured |= {m for m in units if m == rel or m.startswith(rel + "/")}
        assert (ROOT / rel).exists(), path
    assert configured == units
    modules, tests = bench.SHARDS["validator"]
    bench._write_config(tmp_path, modules, tests)
    written = tomllib.loads((tmp_path / "pyproject.toml").read_text())["tool"]["mutmut"]
    assert written["source_paths"] == ["ubench/archive_schema/validator.py"]
    assert written["pytest_add_cli_args_test_selection"] == [f"ubench/{t}" for t in tests]
    assert written["pytest_add_cli_args"] == conf["pytest_add_cli_args"]


def test_a_run_names_only_the_mutants_without_a_verdict(bench, monkeypatch):
    """mutmut re-tests every mutant it is given by name: an incremental run names those without a verdict (or the
    unit's glob when none has one and none is judged equivalent), --survivors the survived, untested and timed-out
    ones not judged equivalent, --force the glob."""
    codes = {"ubench.metrics.ranking.x_f__mutmut_1": 1, "ubench.metrics.ranking.x_f__mutmut_2": 0,
             "ubench.metrics.ranking.x_f__mutmut_3": None, "ubench.metrics.ranking.x_f__mutmut_4": 33,
             "ubench.metrics.ranking.x_f__mutmut_5": -24}
    monkeypatch.setattr(bench, "EQUIVALENT", {"ubench.metrics.ranking.x_f__mutmut_6": "why"})
    codes["ubench.metrics.ranking.x_f__mutmut_6"] = 0  # equivalent: never re-tested as a survivor
    glob = "ubench.metrics.ranking.*"
    assert bench._names_to_run("metrics/ranking.py", codes, force=False, survivors=False) == [
        "ubench.metrics.ranking.x_f__mutmut_3"]
    assert bench._names_to_run("metrics/ranking.py", codes, force=False, survivors=True) == [
        "ubench.metrics.ranking.x_f__mutmut_2", "ubench.metrics.ranking.x_f__mutmut_4",
        "ubench.metrics.ranking.x_f__mutmut_5"]
    assert bench._names_to_run("metrics/ranking.py", codes, force=True, survivors=False) == [glob]
    fresh = dict.fromkeys(codes)  # a mutant judged equivalent is not tested: the others are named
    assert bench._names_to_run("metrics/ranking.py", fresh, force=False, survivors=False) == [
        f"ubench.metrics.ranking.x_f__mutmut_{k}" for k in range(1, 6)]
    fresh.pop("ubench.metrics.ranking.x_f__mutmut_6")  # none equivalent: the unit's glob
    assert bench._names_to_run("metrics/ranking.py", fresh, force=False, survivors=False) == [glob]
    done = {k: 1 for k in codes}
    assert bench._names_to_run("metrics/ranking.py", done, force=False, survivors=False) == []


@pytest.mark.parametrize("shard", ["metrics", "serve"])
def test_also_copy_covers_every_other_file_and_no_unit(bench, shard):
    """mutmut's also_copy holds every repository file except the shard's units, each once (itself or a folder
    above it), and no folder holding a unit (copying it would overwrite the mutants and re-mutate every run)."""
    units = bench.SHARDS[shard][0]
    entries = [e.removeprefix("ubench/") for e in bench._also_copy(units)]
    for e in entries:
        assert not any(u == e or u.startswith(e + "/") for u in units), e
    for f in bench._repo_files() - set(units):
        covering = [e for e in entries if f == e or f.startswith(e + "/")]
        assert len(covering) == 1, (f, covering)
