# SPDX-License-Identifier: MIT
"""The figures' text is readable at 100 % zoom (issue #28 item 14: bin counts rendered ~3 px, titles ~7 px on the
comparison page), measured in headless Chromium (Debian's ``chromium``, driven by Playwright).

matplotlib draws text as glyph paths: each text is a ``<g id="text_N">`` holding a ``<g transform="... scale(s
-s)">`` of glyphs whose em is 100 units, so the font size in the figure is ``100 s`` points. Chromium's screen
transform of that group (``getScreenCTM``: the figure's own points to CSS pixels, with any scaling the page applies
to a figure wider than it) gives the rendered size in CSS pixels, ``100 sqrt(|det|)``. A calibration figure with a
10 pt text, shown at its own size, must measure 10 x 4/3 px, so the measurement itself is checked."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from scoring_archives import build_archive

playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")

#: The smallest text a figure may render, in CSS px at 100 % zoom (the bin counts, 7.5 pt, are 10 px).
MIN_PX = 9.0

_MEASURE = """() => Array.from(document.querySelectorAll('svg g[id^="text_"] > g[transform]')).map(g => {
  const m = g.getScreenCTM();
  const owner = g.parentElement;
  const note = Array.from(owner.childNodes).find(n => n.nodeType === 8);
  const svg = g.ownerSVGElement;
  return {px: 100 * Math.sqrt(Math.abs(m.a * m.d - m.b * m.c)), text: note ? note.data.trim() : '',
          figure: Array.from(document.querySelectorAll('svg')).indexOf(svg)};
})"""


def _calibration(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import io

    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(3, 1))
    fig.text(0.1, 0.5, "calibration", fontsize=10)
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    plt.close(fig)
    svg = buf.getvalue()
    page = tmp_path / "calibration.html"
    page.write_text(f"<!DOCTYPE html><html><body style='margin:0'>{svg[svg.index('<svg'):]}</body></html>")
    return page


def _pages(tmp_path):
    """A comparison page of four methods (a one-member one among them) with the DEE against a deep ensemble, and
    the score page of the one-member method with its DEE curve."""
    from ubench.cli import cli

    archives = [build_archive(tmp_path / f"m{m}.h5", m=m, seed=m, n=120)[0] for m in (4, 3, 2, 1)]
    compare = tmp_path / "compare.html"
    res = CliRunner().invoke(cli, ["compare", *map(str, archives), "--ensemble", str(archives[0]), "--html",
                                   str(compare), "--orders", "2", "--repeats", "2"])
    assert res.exit_code == 0, res.output
    score = tmp_path / "score.html"
    res = CliRunner().invoke(cli, ["score", str(archives[-1]), "--ensemble", str(archives[0]), "--html",
                                   str(score), "--orders", "2", "--repeats", "2"])
    assert res.exit_code == 0, res.output
    return compare, score


def test_figure_text_is_readable_at_100_percent(tmp_path):
    calibration = _calibration(tmp_path)
    pages = _pages(tmp_path)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900}, device_scale_factor=1)
        page.goto(calibration.resolve().as_uri())
        texts = page.evaluate(_MEASURE)
        assert [t["text"] for t in texts] == ["calibration"]
        assert texts[0]["px"] == pytest.approx(10 * 4 / 3, abs=0.05)  # 10 pt at its own size
        measured = {}
        for path in pages:
            page.goto(path.resolve().as_uri())
            measured[path.name] = page.evaluate(_MEASURE)
            assert page.evaluate("document.querySelectorAll('svg').length") >= 4
        browser.close()
    for name, texts in measured.items():
        assert len(texts) > 100, name
        small = [t for t in texts if t["px"] < MIN_PX]
        assert not small, f"{name}: {len(small)} texts under {MIN_PX} px, e.g. {small[:5]}"
        counts = [t["px"] for t in texts if t["text"].isdigit()]  # the bin counts among them
        assert counts and min(counts) >= MIN_PX
