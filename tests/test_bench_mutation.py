# SPDX-License-Identifier: MIT
"""bench/bench_mutation.py: the mutation score per module and the mutmut configuration it writes (the run itself
is not in CI)."""

from __future__ import annotations

import importlib.util
import json
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


def test_verdicts_survive_a_fresh_workdir_only_for_unchanged_functions(bench, monkeypatch, tmp_path):
    """The verdicts kept in the repository refill mutmut's table on a fresh machine: a function whose hash is
    unchanged gets its mutants' codes and times back (a gap in the numbering stays unchecked), a changed function
    and a mutant with no record keep None, and a verdict mutmut already has is not overwritten."""
    monkeypatch.setattr(bench, "VERDICTS", tmp_path / "kept" / "verdicts.json")
    module, p = "serve/app.py", "ubench.serve.app."
    meta = tmp_path / "run" / "mutants" / "ubench" / "serve" / "app.py.meta"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({
        "exit_code_by_key": {p + "x__page__mutmut_1": 1, p + "x__page__mutmut_3": 0, p + "x__html__mutmut_1": 1,
                             p + "xǁBoardǁrow__mutmut_2": 33},
        "hash_by_function_name": {"x__page": "aa", "x__html": "bb", "xǁBoardǁrow": "cc"},
        "durations_by_key": {p + "x__page__mutmut_1": 6.46, p + "x__page__mutmut_3": 60.04}}))
    bench._save_verdicts(tmp_path / "run", module)
    kept = json.loads(bench.VERDICTS.read_text())[module]
    assert kept["x__page"] == {"hash": "aa", "codes": [1, None, 0], "seconds": [6.5, None, 60.0]}
    assert kept["xǁBoardǁrow"] == {"hash": "cc", "codes": [None, 33], "seconds": [None, None]}

    fresh = tmp_path / "fresh" / "mutants" / "ubench" / "serve" / "app.py.meta"
    fresh.parent.mkdir(parents=True)
    keys = [p + k for k in ("x__page__mutmut_1", "x__page__mutmut_2", "x__page__mutmut_3", "x__page__mutmut_4",
                            "x__html__mutmut_1", "xǁBoardǁrow__mutmut_2")]
    hashes = {"x__page": "aa", "x__html": "changed", "xǁBoardǁrow": "cc"}
    fresh.write_text(json.dumps({"exit_code_by_key": {**dict.fromkeys(keys), p + "xǁBoardǁrow__mutmut_2": 1},
                                 "hash_by_function_name": hashes}))
    assert bench._restore_verdicts(tmp_path / "fresh", module) == 2
    got = json.loads(fresh.read_text())
    assert [got["exit_code_by_key"][k] for k in keys] == [1, None, 0, None, None, 1]
    assert got["durations_by_key"] == {p + "x__page__mutmut_1": 6.5, p + "x__page__mutmut_3": 60.0}
    assert bench._restore_verdicts(tmp_path / "elsewhere", module) == 0  # no table there: nothing to fill
    # a table without those verdicts (a work folder never restored) does not erase them when it is recorded
    fresh.write_text(json.dumps({"exit_code_by_key": dict.fromkeys(keys),
                                 "hash_by_function_name": {**hashes, "xǁBoardǁrow": "dd"}}))
    bench._save_verdicts(tmp_path / "fresh", module)
    kept = json.loads(bench.VERDICTS.read_text())[module]
    assert kept["x__page"] == {"hash": "aa", "codes": [1, None, 0, None], "seconds": [6.5, None, 60.0, None]}
    assert kept["xǁBoardǁrow"] == {"hash": "dd", "codes": [None, None], "seconds": [None, None]}
