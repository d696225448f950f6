# SPDX-License-Identifier: MIT
"""``ubench.plots`` (issue #28 item 12): the papers' figures as matplotlib figures, from a report or from arrays,
drawing the report's numbers; and the HTML report from arrays. The one-member DEE figure's point is not hidden by
its legend (item 14)."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest
from matplotlib.figure import Figure

import ubench
import ubench.plots as plots
from ubench.scoring.dee import dee_between
from ubench.scoring.protocols import Protocol

matplotlib.use("Agg")  # the tests' choice; ubench.plots leaves the backend to its caller

RNG = np.random.default_rng(3)
N, C = 300, 4
Y = RNG.integers(0, C, N)
Z = RNG.normal(size=(4, N, C)) * 2.0
Z[:, np.arange(N), Y] += 2.0
Z_OOD = RNG.normal(size=(4, 120, C))


def _softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _lines(ax):
    return [(list(map(float, ln.get_xdata())), list(map(float, ln.get_ydata()))) for ln in ax.get_lines()]


def _flat(fig):
    """Every line's x and y values of every panel, in drawing order, as one list of floats."""
    return [v for ax in fig.axes for x, y in _lines(ax) for v in (*x, *y)]


def test_reliability_diagram_draws_the_accuracy_of_each_confidence_bin():
    """Oracle: the ensemble mean's confidence binned into 15 bins (lo, hi] by hand; each non-empty bin's bar has
    that bin's accuracy and its count written above it."""
    fig = plots.reliability_diagram(Z, Y, kind="logits")
    assert isinstance(fig, Figure)
    mean = _softmax(Z).mean(0)
    conf, correct = mean.max(1), mean.argmax(1) == Y
    b = np.clip(np.ceil(conf * 15).astype(int) - 1, 0, 14)
    counts = np.bincount(b, minlength=15)
    acc = [correct[b == k].mean() for k in range(15) if counts[k]]
    before = fig.axes[0]
    bars = [p for p in before.patches if p.get_height() > 0 or p.get_width() > 0]
    np.testing.assert_allclose([p.get_height() for p in bars], acc, atol=1e-12)
    texts = sorted(int(t.get_text()) for t in before.texts)
    assert texts == sorted(int(c) for c in counts if c)
    assert len(fig.axes) == 3  # before and after temperature scaling, and the UCE diagram


def test_figures_from_a_report_and_from_arrays_are_the_same():
    probs = _softmax(Z)
    report = ubench.score_arrays(probs, Y, ood=_softmax(Z_OOD),
                                 protocol=Protocol.preset("pitfalls").replace(member_curves=True))
    for draw in (plots.member_curves, plots.rejection_curves):
        a, b = draw(report), draw(Z, Y, kind="logits")
        assert _flat(a) == pytest.approx(_flat(b), abs=1e-12)
    roc = plots.ood_roc(Z, Y, ood=Z_OOD, kind="logits")
    assert [ax.get_title() for ax in roc.axes] == ["score: total", "score: knowledge", "score: confidence"]
    for ax, score in zip(roc.axes, ("total", "knowledge", "confidence")):
        curve = report["ood"]["ood"]["roc_curves"][score]
        x, y = _lines(ax)[0]
        assert x + y == pytest.approx(curve["fpr"] + curve["tpr"], abs=1e-12)
    mc = report["in_domain"]["test"]["member_curves"]
    cll = plots.member_curves(report).axes[0]
    x, y = _lines(cll)[0]
    assert x + y == pytest.approx(mc["n_members"] + mc["metrics"]["cll"]["mean"])


def test_dee_from_reports_from_arrays_and_from_its_result():
    curves = Protocol.preset("pitfalls").replace(member_curves=True)
    method = ubench.score_arrays(_softmax(Z[:3] * 1.2), Y, protocol=curves)
    ensemble = ubench.score_arrays(_softmax(Z), Y, protocol=curves)
    result = dee_between(method, ensemble)
    drawn = [plots.dee(method, ensemble), plots.dee(Z[:3] * 1.2, Z, Y, kind="logits"), plots.dee(result)]
    for fig in drawn:
        k, dee = _lines(fig.axes[0])[0]
        assert k == [1, 2, 3]
        want = [np.nan if p["dee"] is None else p["dee"] for p in result["curve"]]
        np.testing.assert_allclose(dee, want, rtol=1e-12)
    with pytest.raises(ValueError, match="ensemble="):
        plots.dee(Z, labels=Y)


@pytest.mark.parametrize("method, marker", [(Z[:1] * 1.5, "v"), (np.log(_softmax(Z[:2]).mean(0)), "o")])
def test_the_legend_of_a_one_member_dee_figure_hides_no_point(method, marker):
    """A one-member method (an overconfident member, below one deep-ensemble member: a triangle at 1; or the mean
    of two members as one model, DEE about 2): its only point lies inside the axes, away from their edges, and
    the legend is outside the axes altogether, so it covers no point (inside the axes it stood on the only one)."""
    fig = plots.dee(method, Z, Y, kind="logits")
    ax = fig.axes[0]
    fig.canvas.draw()
    point = next(ln for ln in ax.get_lines() if ln.get_marker() == marker)
    x, y = ax.transData.transform((point.get_xdata()[0], point.get_ydata()[0]))
    inside = ax.get_window_extent()
    assert inside.x0 + 20 < x < inside.x1 - 20 and inside.y0 + 20 < y < inside.y1 - 5
    assert ax.get_legend() is None and len(fig.legends) == 1
    assert not fig.legends[0].get_window_extent().overlaps(inside)


def test_bad_sources_are_named():
    with pytest.raises(ValueError, match="labels are needed"):
        plots.reliability_diagram(Z)
    with pytest.raises(ValueError, match="no member curves"):
        plots.member_curves(ubench.score_arrays(_softmax(Z), Y))
    with pytest.raises(ValueError, match="no OOD split"):
        plots.ood_roc(Z, Y, kind="logits")
    with pytest.raises(ValueError, match="expected a score report"):
        plots.rejection_curves({"summary": {}})


def test_an_html_report_from_arrays(tmp_path):
    """The README's call: write_html of score_arrays writes the self-contained page with its figures."""
    path, notes = ubench.write_html(ubench.score_arrays(Z, Y, ood=Z_OOD, kind="logits"), tmp_path / "r.html")
    page = path.read_text(encoding="utf-8")
    assert notes == () and page.count("<svg") >= 3 and "Reliability diagrams of test" in page
    assert "<script" not in page
