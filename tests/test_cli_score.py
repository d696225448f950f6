# SPDX-License-Identifier: MIT
"""ubench score / reference / compare / leaderboard through CliRunner, and one real subprocess per exit code;
hostile strings and numbers of uploads through every output (issue #16 items 1, 5, 9)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent / "scoring"))
sys.path.insert(0, str(Path(__file__).parent / "archive_schema"))
from hostile_corpus import ATTACK_FILE_NAME, OUTPUT_CASES, TERMINAL_ATTACK  # noqa: E402
from terminal_checks import assert_no_raw_controls  # noqa: E402
from scoring_archives import build_archive, member_predictions, write_plain_archive  # noqa: E402

from ubench.cli import cli  # noqa: E402
from ubench.metrics import accuracy_score, ensemble_mean_probs, nll_loss  # noqa: E402


@pytest.fixture
def run(tmp_path):
    return build_archive(tmp_path / "run.h5")


def _ubench(*args):
    return subprocess.run([sys.executable, "-m", "ubench.cli", *map(str, args)], capture_output=True, text=True)


def test_score_json(run):
    path, data = run
    res = CliRunner().invoke(cli, ["score", str(path), "--json", "--placement", "none", "--bins", "10"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    mean = ensemble_mean_probs(data["probs"]["test"])
    assert report["summary"]["accuracy"] == accuracy_score(mean, data["labels"])
    assert report["summary"]["nll"] == pytest.approx(nll_loss(mean, data["labels"]), rel=1e-12)
    assert report["protocol"]["bins"] == 10 and report["protocol"]["overrides"] == ["placement", "bins"]
    assert report["archive"]["path"] == str(path)


def test_score_table_and_html(tmp_path):
    shifts = ((("blur", 1.0), 1.5), (("blur", 2.0), 0.8), (("noise", 1.0), 1.2), (("noise", 2.0), 0.6))
    path, _ = build_archive(tmp_path / "run.h5", shifts=shifts)
    html = tmp_path / "r.html"
    res = CliRunner().invoke(cli, ["score", str(path), "--protocol", "shift", "--html", str(html)])
    assert res.exit_code == 0, res.output
    assert "in-domain split test" in res.stdout and "OOD detection" in res.stdout and "quartiles" in res.stdout
    text = html.read_text()
    assert text.count("<svg") >= 4 and "<script" not in text and "src=" not in text
    assert "protocol shift: no TS, seed 0, 15 bins, smoothing 0" in text


def test_score_cost_options(run, tmp_path):
    path, _ = run
    np.save(tmp_path / "cost.npy", 1.0 - np.eye(5))
    res = CliRunner().invoke(cli, ["score", str(path), "--json", "--protocol", "ursabench",
                                   "--cost-matrix", str(tmp_path / "cost.npy")])
    assert res.exit_code == 0, res.output
    sec = json.loads(res.stdout)["in_domain"]["test"]
    assert sec["decision_cost_sum"] == pytest.approx(sec["decision_cost"])
    res = CliRunner().invoke(cli, ["score", str(path), "--cost-preset", "mnist"])
    assert res.exit_code == 1 and "cannot be scored" in res.stderr and "Traceback" not in res.output
    res = CliRunner().invoke(cli, ["score", str(path), "--protocol", "nope"])
    assert res.exit_code == 2


def test_reference_command_and_mismatch(run, tmp_path):
    path, _ = run
    ref = tmp_path / "ref.h5"
    res = CliRunner().invoke(cli, ["reference", str(path), "--out", str(ref)])
    assert res.exit_code == 0 and ref.exists()
    res = CliRunner().invoke(cli, ["score", str(path), "--reference", str(ref), "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["labels"]["source"] == "reference"
    other, _ = build_archive(tmp_path / "other.h5", n=100)
    res = CliRunner().invoke(cli, ["score", str(other), "--reference", str(ref)])
    assert res.exit_code == 1
    assert "split 'test': N differs (archive 100, reference 120)" in res.stderr


def test_compare(run, tmp_path):
    path, _ = run
    other, _ = build_archive(tmp_path / "other.h5", seed=5)
    res = CliRunner().invoke(cli, ["compare", str(path), str(other), "--protocol", "shift"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].startswith("method") and "acc↑*" in lines[0] and " NLL↓ " in lines[0]
    assert lines[2].startswith("deep_ensemble (run.h5)") and lines[3].startswith("deep_ensemble (other.h5)")
    res = CliRunner().invoke(cli, ["compare", str(path), str(other), "--json", "--protocol", "shift"])
    d = json.loads(res.stdout)
    assert len(d["reports"]) == 2 and d["protocol"]["name"] == "shift"


def test_subprocess_exit_0(run):
    path, data = run
    res = _ubench("score", path, "--json", "--protocol", "shift")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["summary"]["accuracy"] == accuracy_score(ensemble_mean_probs(data["probs"]["test"]),
                                                            data["labels"])
    assert res.stderr == ""  # no progress bars with --json / off a terminal


def test_subprocess_exit_1_invalid_archive(tmp_path):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 20)
    p = member_predictions(rng, 20, 3, y, 2, 1.0)
    p[0, 3] = 0.9
    path = write_plain_archive(tmp_path / "bad.h5", {"test": p}, {"test": y}, {"test": "in_domain"}, 3)
    res = _ubench("score", path, "--json")
    assert res.returncode == 1 and res.stdout == ""
    assert "row-sum" in res.stderr and "member 0, sample 3" in res.stderr and "Traceback" not in res.stderr


def test_subprocess_exit_1_reference_mismatch(run, tmp_path):
    path, _ = run
    ref = tmp_path / "ref.h5"
    assert _ubench("reference", path, "--out", ref).returncode == 0
    shifted, _ = build_archive(tmp_path / "ids.h5", ids_offset=7)
    res = _ubench("score", shifted, "--reference", ref, "--json")
    assert res.returncode == 1 and res.stdout == ""
    assert "sample ids differ first at index 0 (archive 7, reference 0" in res.stderr


def test_subprocess_exit_2_unreadable(tmp_path):
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"definitely not HDF5")
    res = _ubench("score", junk, "--json")
    assert res.returncode == 2 and res.stdout == "" and "Traceback" not in res.stderr
    res = _ubench("score", tmp_path / "missing.h5")
    assert res.returncode == 2 and "Traceback" not in res.stderr


# --- hostile strings and numbers through every output (issue #16 items 1, 5, 9) ----------------------------------
# tests/terminal_checks.py judges the output with unicodedata: an oracle independent of scoring/text.py's list.
def _case(name: str, root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    return OUTPUT_CASES[name](root)


def _under_attack_name(path: Path) -> Path:
    """``path`` renamed to ATTACK_FILE_NAME in its directory (ESC, OSC, a newline, 0xff, U+202E)."""
    target = Path(os.fsdecode(os.path.join(os.fsencode(path.parent), ATTACK_FILE_NAME)))
    os.rename(path, target)
    return target


def _ubench_bytes(*args):
    return subprocess.run([sys.executable, "-m", "ubench.cli", *map(str, args)], capture_output=True)


@pytest.fixture
def attacked(tmp_path):
    """The archive whose every string carries TERMINAL_ATTACK, under a file name that carries it too."""
    return _under_attack_name(_case("every_string_attacks", tmp_path / "every"))


@pytest.mark.parametrize("command", ["score", "score-json", "compare", "compare-json"])
def test_score_and_compare_escape_every_upload_string_on_a_pipe(attacked, tmp_path, command):
    """Archive strings and the file name reach stdout and stderr escaped (no raw ESC, BEL, CR, LF inside a value,
    C1, U+202E, surrogate); JSON still carries them exactly (ensure_ascii escapes round-trip)."""
    other = tmp_path / "copy" / attacked.name
    other.parent.mkdir()
    shutil.copyfile(attacked, other)
    args = {"score": ["score", attacked], "score-json": ["score", attacked, "--json"],
            "compare": ["compare", attacked, other], "compare-json": ["compare", attacked, other, "--json"]}[command]
    res = _ubench_bytes(*args, "--placement", "none")
    assert res.returncode == 0, res.stderr
    out = assert_no_raw_controls(res.stdout, "stdout")
    assert_no_raw_controls(res.stderr, "stderr")
    if command == "score":
        assert "method\\x1b[2J\\x1b]0;pwned\\x07\\r\\nforged line\\u202eevil\\x9b31m" in out
        assert "rotate\\x1b[2J" in out and "\\udcff" in out  # shift kind; the file name's 0xff byte
    elif command == "score-json":
        report = json.loads(out)
        assert report["archive"]["method"] == "method" + TERMINAL_ATTACK
        assert report["archive"]["path"] == str(attacked)
    elif command == "compare-json":
        methods = json.loads(out)["methods"]
        assert all(m.startswith("method" + TERMINAL_ATTACK) for m in methods)


def test_invalid_utf8_in_an_upload_string_is_a_clean_rejection(attacked, tmp_path):
    """The reader decodes archive strings strictly (issue #16 item 1): an invalid byte in ``method`` is a finding
    that names the attribute, printed escaped, exit 1, in score and compare alike."""
    other = _case("invalid_utf8_method", tmp_path / "utf8")
    for args in (["score", other], ["compare", attacked, other]):
        res = _ubench_bytes(*args, "--placement", "none")
        assert res.returncode == 1, res.stderr
        err = assert_no_raw_controls(res.stderr, "stderr")
        assert "attribute 'method'" in err and "not valid UTF-8" in err


def _html_text_ok(page: str, scripts: int = 0) -> None:
    """No raw attack character in the page, and no script but the page's own (the leaderboard's sorter)."""
    for raw in ("\x1b", "\x07", "\u202e", "\x9b"):
        assert raw not in page
    assert page.count("<script") == scripts


def test_score_html_of_strange_strings_is_written_escaped(attacked, tmp_path):
    """An invalid UTF-8 byte in ``method`` (h5py: a lone surrogate) and the attack strings and file name:
    ``--html`` writes a strict UTF-8 page with every one shown escaped (it raised UnicodeEncodeError)."""
    utf8 = _under_attack_name(_case("invalid_utf8_method", tmp_path / "utf8"))
    for i, (path, shown) in enumerate(((attacked, "method\\x1b[2J\\x1b]0;pwned\\x07\\r\\nforged line\\u202eevil"),
                                       (utf8, "method\\udcff\\udcfe"))):
        page = tmp_path / f"r{i}.html"
        res = _ubench_bytes("score", path, "--html", page, "--placement", "none", "--repeats", "1")
        if res.returncode == 1:  # a reader that decodes strictly rejects the invalid byte with a finding
            assert path == utf8 and b"Traceback" not in res.stderr and not page.exists(), res.stderr
            assert_no_raw_controls(res.stderr, "stderr")
            continue
        assert res.returncode == 0, res.stderr
        assert_no_raw_controls(res.stderr, "stderr")
        text = page.read_bytes().decode("utf-8")
        _html_text_ok(text)
        assert shown in text and "forged line \\udcff\\u202e.h5" in text and text.count("<svg") >= 4


def test_leaderboard_is_written_whatever_the_uploads_strings_and_names(tmp_path):
    """A real ``ubench leaderboard`` over uploads with an invalid UTF-8 byte in a file name (bytes path) and in
    ``method``, and the attack strings: exit 0, every row on the page, the page strict UTF-8 with the names
    escaped, no raw control character on the terminal, no forged progress line; again on a rerun (cached).
    Today's code raised UnicodeEncodeError writing index.html, on every run."""
    uploads = tmp_path / "uploads"
    uploads.mkdir()
    good = _case("invalid_utf8_method", tmp_path / "c0").parent / "a.h5"
    shutil.copy(good, uploads / "utf8_method.h5")
    every = _case("every_string_attacks", tmp_path / "c1")
    shutil.copy(every, uploads / "every.h5")
    plain = _case("attack_file_name", tmp_path / "c2")
    shutil.copy(plain, os.path.join(os.fsencode(uploads), ATTACK_FILE_NAME))
    ref = tmp_path / "ref.h5"
    assert _ubench_bytes("reference", plain, "--out", ref).returncode == 0
    board = tmp_path / "board"
    for run in ("first", "rerun"):
        res = _ubench_bytes("leaderboard", uploads, "--reference", ref, "--out", board, "--timeout", "120")
        assert res.returncode == 0 and b"Traceback" not in res.stderr, res.stderr
        assert_no_raw_controls(res.stdout, f"{run} stdout")
        assert_no_raw_controls(res.stderr, f"{run} stderr")
        page = (board / "index.html").read_bytes().decode("utf-8")
        _html_text_ok(page, scripts=1)
        assert page.count("<tr class=") == 3
        assert "up\\x1b]0;pwned\\x07\\nforged line \\udcff\\u202e.h5" in page
        rows = json.loads((board / "leaderboard.json").read_text())["rows"]
        assert {r["archive"] for r in rows} == {"utf8_method.h5", "every.h5", os.fsdecode(ATTACK_FILE_NAME)}
        by_name = {r["archive"]: r for r in rows}
        assert by_name[os.fsdecode(ATTACK_FILE_NAME)]["status"] == "ok"
        # every.h5 relabels its shift kind with the attack string: the reference check (issue #16 item 7) rejects
        # it, and its finding (which quotes the string) reaches the page escaped; the invalid byte in
        # utf8_method.h5's method is a reader finding (issue #16 item 1).
        every_row = by_name["every.h5"]
        assert every_row["status"] == "rejected"
        assert any("shift_kind differs" in f["message"] for f in every_row["findings"]), every_row["findings"]
        assert "rotate\\x1b[2J" in page
        assert by_name["utf8_method.h5"]["status"] == "rejected"
        assert any("not valid UTF-8" in f["message"] for f in by_name["utf8_method.h5"]["findings"])


def test_leaderboard_page_renders_a_strange_row_as_a_row_that_says_so():
    """One row whose record cannot be rendered (a metric that is not a number, findings that are not dicts) does
    not stop the page: it becomes a row saying so, and the other rows are there."""
    from ubench.scoring.leaderboard import BoardConfig, build_board
    from ubench.scoring.leaderboard_html import render_html

    def record(name, cll):
        return {"archive": name, "sha256": name, "cached": False, "outcome": {
            "status": "ok", "exit_code": 0, "findings": [],
            "report": {"archive": {"method": "m", "model": "x", "n_members": 2}, "summary": {"cll": cll}}}}

    board = build_board([record("a.h5", -0.5), record("b.h5", -0.7), record("c.h5", -0.9)],
                        BoardConfig(kind="score", protocol={"name": "pitfalls"}))
    board["rows"][1]["metrics"]["cll"] = "-0.7\x1b[2J"
    board["rows"][2].update(status="rejected", findings=["not a finding dict"])
    page = render_html(board)
    assert page.count("<tr class=") == 3 and "a.h5" in page
    assert page.count("this row cannot be shown") == 2 and "b.h5" in page and "c.h5" in page
    assert "\x1b" not in page


@pytest.mark.parametrize("case,check", [
    ("mathtext_kind", r"$\frac{\frac{a}{b}}{c}$"),
    ("huge_intensity", "placed by rank"),
    ("long_kind", "k" * 40 + "...(960 more characters)"),
    ("many_shift_kinds", "12 of 60 kinds drawn"),
])
def test_score_html_figures_survive_hostile_strings_and_numbers(tmp_path, case, check):
    """``--html`` on a shift kind matplotlib's mathtext cannot parse, on intensities of +-1e308, on a
    1,000-character kind (longer ones are reader findings) and on 60 kinds in one figure: exit 0 and every figure drawn (today:
    ParseSyntaxException, ``arange: cannot compute length``, a 16 MB page, a line and legend entry per kind).
    The kind is drawn as plain text, cut; huge intensities are placed by rank; 12 kinds get lines."""
    path = _case(case, tmp_path / "c")
    page = tmp_path / "r.html"
    res = CliRunner().invoke(cli, ["score", str(path), "--html", str(page), "--placement", "none"])
    assert res.exit_code == 0, res.output
    text = page.read_text(encoding="utf-8")
    # reliability, rejection, member curves of 'test', one shift group, the OOD split's histograms
    # 6: the confidence figure (issue #17) names the hostile shift kind in its legend too
    assert text.count("<figure>") == 6 and "figures not drawn" not in text
    assert check in text
    assert len(text.encode()) < 1_000_000


@pytest.mark.slow
def test_score_html_draws_at_most_max_figures_and_names_the_rest(tmp_path):
    """999 splits (996 OOD): the page holds MAX_FIGURES figures and a note naming what was left out (today a
    figure per split, 354 s, outside any limit)."""
    from ubench.scoring.plots import MAX_FIGURES

    path = _case("many_ood_splits", tmp_path / "c")
    page = tmp_path / "r.html"
    res = CliRunner().invoke(cli, ["score", str(path), "--html", str(page), "--placement", "none"])
    assert res.exit_code == 0, res.output
    text = page.read_text(encoding="utf-8")
    total = 3 + 1 + 997 + 1  # test: reliability, rejection, member curves; one shift group; 997 OOD splits; confidence
    assert text.count("<figure>") == MAX_FIGURES
    assert f"{MAX_FIGURES} figures drawn, {total - MAX_FIGURES} left out (at most {MAX_FIGURES} per report" in text
    assert f"; and {total - MAX_FIGURES - 20} more" in text
    assert f"note: {MAX_FIGURES} figures drawn, {total - MAX_FIGURES} left out" in res.stderr


def test_score_html_figures_are_drawn_under_the_sandbox_limits(run, tmp_path):
    """The figures are drawn in a child limited like the scoring sandbox: with a 64 MiB address space it cannot
    even load matplotlib, so the page is written without figures and says why (today they were drawn in the
    host process, whatever --memory-limit said)."""
    path, _ = run
    page = tmp_path / "r.html"
    res = CliRunner().invoke(cli, ["score", str(path), "--html", str(page), "--placement", "none",
                                   "--memory-limit", "64M"])
    assert res.exit_code == 0, res.output
    text = page.read_text(encoding="utf-8")
    assert "<svg" not in text and "note: figures not drawn: it needed more memory than the 64 MiB" in text
    assert "note: figures not drawn" in res.stderr


def test_a_figure_that_cannot_be_drawn_is_named_and_the_others_are_drawn(run):
    """Per-figure isolation in the drawing child: one figure whose data is strange (histogram edges that are not
    numbers) becomes a note naming it; every other figure is still drawn."""
    from ubench.scoring.plot_sandbox import draw_figures

    path, _ = run
    res = CliRunner().invoke(cli, ["score", str(path), "--json", "--placement", "none"])
    report = json.loads(res.stdout)
    report["ood"]["ood"]["histograms"]["total"]["edges"] = ["not", "numbers"]
    drawn = draw_figures(report)
    captions = [c for c, _ in drawn.figures]
    assert "OOD score histograms of ood" not in captions and "Reliability diagrams of test" in captions
    assert len(captions) == 5 and all(svg.startswith("<svg") for _, svg in drawn.figures)  # 2 in-domain, 2 shift, confidence
    assert len(drawn.notes) == 1 and drawn.notes[0].startswith("figure not drawn: OOD score histograms of ood: ")
