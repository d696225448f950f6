# SPDX-License-Identifier: MIT
"""The public API (``ubench.__all__``) and the table formats (issue #10 items 5 and 7)."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent / "scoring"))
from scoring_archives import build_archive, member_predictions  # noqa: E402

from ubench.cli import cli  # noqa: E402

_LABEL_NOTE = "labels were taken from the archive itself"


def test_import_ubench_is_light_and_the_public_names_resolve():
    """``import ubench`` loads none of h5py, numpy, scipy, torch or the subpackages; every name in
    ``ubench.__all__`` then resolves, and the three the issue names come from where they are defined."""
    code = (
        "import sys, ubench\n"
        "heavy = sorted(m for m in ('h5py', 'numpy', 'scipy', 'torch', 'jax', 'pandas', 'ubench.scoring',"
        " 'ubench.archive_schema', 'ubench.metrics') if m in sys.modules)\n"
        "from ubench import read_archive, score_archive, ArchiveWriter\n"
        "missing = [n for n in ubench.__all__ if getattr(ubench, n, None) is None]\n"
        "print(heavy, missing, read_archive.__module__, score_archive.__module__, ArchiveWriter.__module__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[:2] == ["[]", "[]"]
    assert out[2:] == ["ubench.archive_schema.reader", "ubench.scoring.score", "ubench.archive_schema.writer"]


def test_unknown_attribute_is_an_attribute_error():
    import ubench

    with pytest.raises(AttributeError, match="no attribute 'score_everything'"):
        ubench.score_everything  # noqa: B018
    assert {"read_archive", "score_archive", "score_arrays", "ArchiveWriter", "report_frame"} <= set(dir(ubench))


def test_score_archive_accepts_a_preset_name(tmp_path):
    """``protocol="ursabench"`` is ``Protocol.preset("ursabench")``; an unknown name lists the presets."""
    from ubench import Protocol, score_archive

    path, _ = build_archive(tmp_path / "run.h5", shifts=())
    by_name = score_archive(path, protocol="ursabench")
    by_object = score_archive(path, protocol=Protocol.preset("ursabench"))
    assert by_name["protocol"]["name"] == "ursabench"
    assert {k: v for k, v in by_name.items() if k != "archive"} == \
        {k: v for k, v in by_object.items() if k != "archive"}
    with pytest.raises(ValueError, match="unknown protocol 'pitfall'.*pitfalls"):
        score_archive(path, protocol="pitfall")


@pytest.mark.parametrize("preset", ["pitfalls", "ursabench"])
def test_score_arrays_equals_scoring_the_same_arrays_in_an_archive(tmp_path, preset):
    """For arrays written to an archive with ``ArchiveWriter``, ``score_arrays`` returns the report ``score``
    gives for the file: every section equal, only what names the file (path, hash, limits, label source) apart."""
    from ubench import Protocol, score_archive, score_arrays

    protocol = Protocol.preset(preset).replace(member_curves=True)
    path, data = build_archive(tmp_path / "run.h5", shifts=())
    from_file = score_archive(path, protocol=protocol)
    from_arrays = score_arrays(data["probs"]["test"], data["labels"], ood={"ood": data["probs"]["ood"]},
                               protocol=protocol, method="deep_ensemble", model="mlp", dataset="toy")
    for key in ("protocol", "primary_split", "summary", "in_domain", "ood", "shift", "shift_summary",
                "comparability", "row_sums", "report_schema", "ubench_version"):
        assert from_arrays[key] == from_file[key], key
    assert "member_curves" in from_arrays["in_domain"]["test"]
    assert [n for n in from_file["notes"] if not n.startswith(_LABEL_NOTE)] == from_arrays["notes"]
    assert from_arrays["labels"] == {"source": "arrays", "reference": None}
    fa, ff = from_arrays["archive"], from_file["archive"]
    assert (fa["path"], fa["sha256"], fa["format_version"]) == (None, None, None)
    for key in ("method", "model", "dataset", "n_classes", "n_members"):
        assert fa[key] == ff[key]
    for name in ("test", "ood"):
        assert fa["splits"][name]["n_samples"] == ff["splits"][name]["n_samples"]
        assert fa["splits"][name]["role"] == ff["splits"][name]["role"]
    json.dumps(from_arrays, allow_nan=False)  # JSON-able like every report


def test_score_arrays_names_the_bad_array_and_index():
    from ubench import score_arrays

    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 20)
    probs = member_predictions(rng, 20, 3, y, 2, 1.0)
    with pytest.raises(ValueError, match=r"labels must be in \[0, 3\); found 3 at index 4"):
        score_arrays(probs, np.where(np.arange(20) == 4, 3, y))
    with pytest.raises(ValueError, match="member_probs has 20 samples but labels has 19"):
        score_arrays(probs, y[:19])
    with pytest.raises(ValueError, match=r"ood\['far'\] must have shape \(2, n_ood, 3\)"):
        score_arrays(probs, y, ood={"far": member_predictions(rng, 5, 4, None, 2, 0.0)})
    one = score_arrays(probs, y, ood=member_predictions(rng, 5, 3, None, 2, 0.0))  # one array: split "ood"
    assert list(one["ood"]) == ["ood"] and one["ood"]["ood"]["against"] == "test"
    bad = probs.copy()
    bad[1, 7, 0] = np.nan
    with pytest.raises(ValueError, match="member_probs"):
        score_arrays(bad, y)
    with pytest.raises(TypeError, match="member_probs"):
        score_arrays(probs.astype(np.int64), y)


# --- item 5: numbers, split order, plain and styled tables, CSV, DataFrame ---------------------------------------

@pytest.mark.parametrize("value, text", [
    (15.0, "15"), (0.0, "0"), (-3.0, "-3"), (0.27661, "0.2766"), (0.905, "0.905"), (1.2345e-5, "1.234e-05"),
    (12345.6, "12346"), (-0.5, "-0.5"), (3e-7, "3e-07"), (2.5e17, "2.5e+17"), (float("inf"), "inf"),
])
def test_compact_numbers(value, text):
    """Integral values lose their fraction; others keep 4 significant digits but all of their integer part."""
    from ubench.scoring.tables import compact

    assert compact(value) == text


def test_natural_split_order():
    from ubench.scoring.tables import natural_key

    names = ["shift_10", "shift_2", "rotate_105", "rotate_15", "test", "shift_1"]
    assert sorted(names, key=natural_key) == ["rotate_15", "rotate_105", "shift_1", "shift_2", "shift_10", "test"]


def _report_with_splits(tmp_path):
    from ubench import score_archive

    shifts = [(("blur", float(i)), 1.0) for i in (1, 2, 10)]
    path, _ = build_archive(tmp_path / "run.h5", shifts=shifts, m=2, n=40)
    return score_archive(path)


def test_score_table_is_plain_in_a_pipe_and_sorts_splits_naturally(tmp_path):
    """CliRunner's stdout is not a terminal: no escape sequence, no box drawing, compact numbers; the shift
    table lists blur_2 before blur_10 (JSON's sort_keys put blur_10 first)."""
    path, _ = build_archive(tmp_path / "run.h5", shifts=[(("blur", float(i)), 1.0) for i in (1, 2, 10)], m=2, n=40)
    res = CliRunner().invoke(cli, ["score", str(path)])
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "\x1b" not in out and "─" not in out and "│" not in out
    rows = [ln.split()[0] for ln in out.splitlines() if ln.strip().startswith("blur_")]
    assert rows == ["blur_1", "blur_2", "blur_10"]
    assert ".0000" not in out  # 15.0000-style padding is gone


def test_styled_table_uses_rich_and_shows_upload_markup_literally(tmp_path, monkeypatch):
    """On a terminal the table is rich's (ANSI styles); a method name holding rich markup and a control
    character is shown as text: escaped, never interpreted."""
    from ubench.scoring.tables import format_compare

    monkeypatch.setenv("COLUMNS", "400")  # a wide terminal: no cell is folded

    report = _report_with_splits(tmp_path)
    styled = format_compare([report], ["[bold red]evil[/bold red]\x1b[2J"], styled=True)
    plain = format_compare([report], ["[bold red]evil[/bold red]\x1b[2J"])
    assert "\x1b[1m" in styled  # rich's bold header
    assert "\x1b[2J" not in styled and "\x1b[2J" not in plain
    assert "[bold red]evil[/bold red]\\x1b[2J" in styled and "[bold red]evil[/bold red]\\x1b[2J" in plain
    assert "\x1b" not in plain


def test_compare_csv_holds_every_summary_key_at_full_precision(tmp_path):
    """``compare --csv``: one header and one row per archive; each number reads back to the JSON's float."""
    a, _ = build_archive(tmp_path / "a.h5", shifts=(), seed=0)
    b, _ = build_archive(tmp_path / "b.h5", shifts=(), seed=0, m=2)
    runner = CliRunner()
    res = runner.invoke(cli, ["compare", str(a), str(b), "--csv"])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    js = json.loads(runner.invoke(cli, ["compare", str(a), str(b), "--json"]).stdout)
    assert [r["method"] for r in rows] == js["methods"]
    for row, report in zip(rows, js["reports"]):
        assert row["archive"] == report["archive"]["path"]
        assert int(row["n_members"]) == report["archive"]["n_members"]
        for key, value in report["summary"].items():
            assert (row[key] == "") if value is None else (float(row[key]) == value), key
    both = runner.invoke(cli, ["compare", str(a), "--csv", "--json"])
    assert both.exit_code == 2 and "choose one" in both.output


def test_csv_cells_cannot_run_spreadsheet_formulas():
    from ubench.scoring.tables import leaderboard_csv

    board = {"columns": [{"key": "cll"}, {"key": "accuracy"}],
             "rows": [{"rank": 1, "archive": "=HYPERLINK(\"x\")\n.h5", "status": "ok", "method": "@sum",
                       "model": "mlp", "n_members": 3, "metrics": {"cll": -0.25, "accuracy": 0.9}},
                      {"rank": None, "archive": "bad.h5", "status": "rejected", "method": None, "model": None,
                       "n_members": None, "metrics": {}}]}
    rows = list(csv.reader(io.StringIO(leaderboard_csv(board))))
    assert rows[0] == ["rank", "rank_interval", "tied_with_leader", "upload", "status", "method", "model",
                       "n_members", "cll", "accuracy"]
    assert rows[1] == ["1", "", "", "'=HYPERLINK(\"x\")\\n.h5", "ok", "'@sum", "mlp", "3", "-0.25", "0.9"]
    assert rows[2] == ["", "", "", "bad.h5", "rejected", "", "", "", "", ""]


def test_report_frame_is_the_summary_as_a_dataframe(tmp_path):
    pd = pytest.importorskip("pandas")
    from ubench import report_frame, score_archive

    a, _ = build_archive(tmp_path / "a.h5", shifts=())
    b, _ = build_archive(tmp_path / "b.h5", shifts=(), m=2, seed=1)
    reports = [score_archive(a), score_archive(b)]
    frame = report_frame(reports, names=["A", "B"])
    assert isinstance(frame, pd.DataFrame)
    assert list(frame["method"]) == ["A", "B"]
    for i, r in enumerate(reports):
        for key, value in r["summary"].items():
            assert frame.loc[i, key] == value, key
    compare_json = {"methods": ["x", "y"], "reports": reports}
    assert list(report_frame(compare_json)["method"]) == ["x", "y"]
    assert len(report_frame(reports[0])) == 1


def test_report_frame_without_pandas_says_how_to_get_it(tmp_path, monkeypatch):
    from ubench import report_frame

    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r"pip install 'ubench\[frame\]'"):
        report_frame([])


def test_calibration_api_names_are_the_report_keys():
    """``cross_validated_calibration`` returns its numbers under the names the report's ``calibrated`` section
    (``scoring/REPORT_KEYS.md``) uses: every metric key of a real section is an attribute with the same value;
    the older names remain readable aliases."""
    from ubench import score_arrays
    from ubench.metrics import cross_validated_calibration

    rng = np.random.default_rng(3)
    y = rng.integers(0, 4, 60)
    probs = member_predictions(rng, 60, 4, y, 3, 1.0).astype(np.float64)
    section = score_arrays(probs, y)["in_domain"]["test"]["calibrated"]
    cv = cross_validated_calibration(probs, y, n_repeats=5, seed=0)
    # reliability: the diagram data of --html (bins after the mean temperature), not a number of the CV
    metric_keys = set(section) - {"placement", "folds", "repeats", "seed", "reliability"}
    assert metric_keys >= {"temperature", "calibrated_nll", "cll", "cv_nll_before"}
    for key in sorted(metric_keys):
        expected = section[key]
        got = list(getattr(cv, key)) if key == "temperatures" else getattr(cv, key)
        assert got == pytest.approx(expected, rel=1e-12), key
    assert (cv.temperature_mean, cv.nll_after, cv.ece_before) == (cv.temperature, cv.calibrated_nll,
                                                                  cv.cv_ece_before)


def test_leaderboard_csv_flags_a_dee_below_one_member_beside_its_empty_cell():
    """A DEE below one deep-ensemble member is null in ``leaderboard.json`` (never 1); in the CSV its cell is empty
    like an unavailable DEE, so ``dee_below_one`` follows ``dee`` and tells the two apart (empty when unknown)."""
    from ubench.scoring.tables import leaderboard_csv

    board = {"columns": [{"key": "cll"}, {"key": "dee"}],
             "rows": [{"rank": 1, "archive": "de.h5", "status": "ok", "metrics": {"cll": -0.2, "dee": 4.5},
                       "dee_below_one": False},
                      {"rank": 2, "archive": "sgd.h5", "status": "ok", "metrics": {"cll": -0.9, "dee": None},
                       "dee_below_one": True},
                      {"rank": 3, "archive": "x.h5", "status": "ok", "metrics": {"cll": -1.0, "dee": None},
                       "dee_below_one": None}]}
    rows = list(csv.DictReader(io.StringIO(leaderboard_csv(board))))
    assert list(rows[0])[-3:] == ["cll", "dee", "dee_below_one"]
    assert [(r["dee"], r["dee_below_one"]) for r in rows] == [("4.5", "False"), ("", "True"), ("", "")]
