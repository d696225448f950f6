# SPDX-License-Identifier: MIT
"""``ubench compare --html`` (issue #10 item 3): one self-contained page, every method overlaid and named in each
figure, the best value of each comparable column marked, hostile method names shown as text. The page is read
back with ``html.parser``, each figure's SVG with ``xml.etree`` (``html_pages.py``), and loaded in headless
Chromium when one is installed (CI: Debian's ``chromium`` package)."""

from __future__ import annotations

import json
import re

import h5py
import pytest
from click.testing import CliRunner

from ubench.cli import cli

from html_pages import chromium, load_in_chromium, read_page
from scoring_archives import build_archive

SHIFTS = ((("blur", 1.0), 1.5), (("blur", 2.0), 0.8), (("noise", 1.0), 1.2), (("noise", 2.0), 0.6))
EVIL = "<script>alert(1)</script>"
FIGURES = ("CLL, accuracy and Brier against the number of members", "Deep Ensemble Equivalent of every method",
           "Shift accuracy per kind: blur, noise", "Shift ece per kind: blur, noise",
           "Box plots over shift kinds per intensity: blur, noise", "Reliability diagrams side by side",
           "OOD ROC curves of ood", "Accuracy-rejection curves",
           "Accuracy and count against confidence (primary split)")


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    d = tmp_path_factory.mktemp("compare_html")
    de, _ = build_archive(d / "de.h5", m=4, seed=0, shifts=SHIFTS)
    other, _ = build_archive(d / "other.h5", m=3, seed=0, shifts=SHIFTS)
    evil, _ = build_archive(d / "evil.h5", m=2, seed=0, shifts=SHIFTS)
    with h5py.File(evil, "r+") as f:  # an upload's method name is any string
        f.attrs["method"] = EVIL
    page = d / "cmp.html"
    res = CliRunner().invoke(cli, ["compare", str(de), str(other), str(evil), "--ensemble", str(de), "--html",
                                   str(page), "--json"])
    assert res.exit_code == 0, res.output
    return page, json.loads(res.stdout)


def test_every_figure_is_drawn_with_every_method_named(compared):
    page_path, out = compared
    text = page_path.read_text(encoding="utf-8")
    page = read_page(text)
    assert [f.caption for f in page.figures] == list(FIGURES)
    names = out["methods"]
    assert names[2] == f"{EVIL} (evil.h5)"
    for fig in page.figures:
        for name in names:
            assert fig.has(name), (fig.caption, name)
    dee = next(f for f in page.figures if f.caption.startswith("Deep Ensemble"))
    assert dee.has("deep ensemble deep_ensemble (de.h5), 4 members")
    # self-contained: no script, no source, every link a reference inside the page's own SVG
    assert "src=" not in text and "@import" not in text and "url(http" not in text
    assert all(v.startswith("#") for v in re.findall(r'href="([^"]*)"', text))


def test_hostile_method_name_is_text_not_markup(compared):
    page_path, out = compared
    text = page_path.read_text(encoding="utf-8")
    assert "<script" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt; (evil.h5)" in text
    page = read_page(text)
    assert f"{EVIL} (evil.h5)" in page.text  # shown, as text


def test_best_value_of_each_comparable_column_is_marked(compared):
    page_path, out = compared
    page = read_page(page_path.read_text(encoding="utf-8"))
    table = next(t for t in page.tables if t[0][0][1] == "method" and t[0][1][1] == "dataset")
    header = [h for _, h in table[0]]
    reports = out["reports"]
    checked = 0
    for col, (key, higher) in {"acc↑ *": ("accuracy", True), "CLL↑ *": ("cll", True), "DEE↑ *": ("dee", True),
                               "OOD-AUROC(tot)↑ *": ("ood_auroc_total", True)}.items():
        j = header.index(col)
        values = [r["summary"][key] for r in reports]
        best = max(values) if higher else min(values)
        marked = [i for i, row in enumerate(table[1:]) if row[j][0] == "best"]
        assert marked == [i for i, v in enumerate(values) if v == best], col
        assert all(table[1:][i][j][1].endswith("▲") for i in marked)
        checked += 1
    # columns that are not comparable (uncalibrated NLL/ECE) are never marked
    for col in ("NLL↓", "ECE↓"):
        j = header.index(col)
        assert all(row[j][0] != "best" for row in table[1:])
    assert checked == 4


#: Which way each compare column is better, written out here (not read from ``scoring/tables.py``): the terminal
#: table's and the page's headers must say the same.
DIRECTIONS = {"acc": "↑", "CLL": "↑", "DEE": "↑", "NLL": "↓", "Brier": "↓", "ECE": "↓", "TACE": "↓", "UCE": "↓",
              "T": "", "misAUROC": "↑", "OOD-AUROC(tot)": "↑", "OOD-AUROC(kn)": "↑", "shift acc(med)": "↑",
              "agree(HMC)": "↑", "TV(HMC)": "↓"}


def test_headers_carry_the_direction_like_the_terminal(compared):
    """Every column header of the page's table is its name, ↑ (higher is better) or ↓ (lower) or nothing (the
    temperature), then `` *`` when comparable; the legend says what the arrows mean (issue #28)."""
    page_path, out = compared
    page = read_page(page_path.read_text(encoding="utf-8"))
    table = next(t for t in page.tables if t[0][0][1] == "method" and t[0][1][1] == "dataset")
    header = [h for _, h in table[0]][2:]
    pattern = re.compile(r"^(.*?)([↑↓]?)( \*)?$")
    seen = {}
    for cell in header:
        name, arrow, _ = pattern.match(cell).groups()
        assert name in DIRECTIONS, cell
        seen[name] = arrow
    assert seen == {name: DIRECTIONS[name] for name in seen}
    assert {"acc", "CLL", "NLL", "ECE", "Brier", "T", "OOD-AUROC(tot)"} <= set(seen)  # both arrows and none
    assert "↑ higher is better, ↓ lower is better" in page.text


def test_best_value_skips_rows_on_another_task(tmp_path):
    from ubench.scoring.compare_html import best_rows

    def rep(acc, n):
        return {"summary": {"accuracy": acc}, "comparability": {"comparable": ["accuracy"]},
                "archive": {"n_classes": 3, "splits": {"test": {"n_samples": n}}}, "primary_split": "test"}

    assert best_rows([rep(0.5, 10), rep(0.9, 20), rep(0.7, 10)], "accuracy") == {2}
    assert best_rows([rep(0.5, 10), rep(0.5, 10)], "accuracy") == {0, 1}  # ties: both


@pytest.mark.skipif(chromium() is None, reason="no chromium on this machine (CI installs Debian's chromium)")
def test_page_renders_in_headless_chromium_without_console_errors(compared, tmp_path):
    page_path, _ = compared
    dom, console = load_in_chromium(page_path, tmp_path)
    assert console == ""
    assert dom.count("<svg") == len(FIGURES)
    assert "<script" not in dom
