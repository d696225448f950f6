# SPDX-License-Identifier: MIT
"""Figures of a score report, drawn from the report dict alone, returned as inline SVG text.

matplotlib is imported inside :func:`figures` with the Agg backend, so importing this module costs nothing.
Every figure carries the protocol line (placement, folds, seed, bins, smoothing) in its title.

The report's strings and intensities come from an upload, so the drawing is bounded whatever they hold (issue
#16 item 9): text is drawn as plain text, never as mathtext or LaTeX (a ``$`` in a shift kind raised
``ValueError`` or ``RecursionError``); every label from the report is escaped and cut to :data:`LABEL_LIMIT`
characters (``scoring/text.py``); intensities an axis cannot hold (beyond :data:`AXIS_LIMIT` in magnitude,
where matplotlib's tick locators overflow) are placed by rank with their values as tick labels; at most
:data:`MAX_KINDS_DRAWN` shift kinds get a line of their own in one figure; and at most :data:`MAX_FIGURES`
figures are drawn per report. ``score --html`` draws them in a limited child process
(``scoring/plot_sandbox.py``).
"""

from __future__ import annotations

import contextlib
import io
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .text import shorten

__all__ = ["Figures", "figures", "dee_figure", "MAX_FIGURES", "MAX_KINDS_DRAWN", "LABEL_LIMIT", "AXIS_LIMIT"]

#: Figures drawn per report, in this order: the in-domain splits (primary first), the DEE curve, the shift
#: groups, the OOD histograms. Each takes about 0.3 s and 50-100 kB of SVG, so 999 OOD splits took 354 s and
#: the page grew without bound; the rest is named in a note.
MAX_FIGURES = 24
#: Characters of one label from the report (a split name, a shift kind) drawn in a figure.
LABEL_LIMIT = 40
#: Shift kinds drawn as their own line in one shift figure (the quartile band and median cover every kind).
MAX_KINDS_DRAWN = 12
#: Largest intensity magnitude drawn on a linear axis: at +-1e308 the tick locator's range overflows
#: (``arange: cannot compute length``), and far before that ticks stop meaning anything.
AXIS_LIMIT = 1e12


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _new(plt, title: str, protocol_line: str, ncols: int = 1):
    # constrained layout keeps the two-line title (what, and the protocol that produced it) clear of the axes
    fig, axes = plt.subplots(1, ncols, figsize=(4.6 * ncols, 3.8), squeeze=False, layout="constrained")
    fig.suptitle(f"{title}\n{_label(protocol_line, 4 * LABEL_LIMIT)}", fontsize=8)
    return fig, axes[0]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


@contextlib.contextmanager
def _plain_text() -> Iterator[None]:
    """Every Text created inside draws its string as it is: no mathtext (``$...$``), no LaTeX."""
    import matplotlib

    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        yield


def _label(value: Any, limit: int = LABEL_LIMIT) -> str:
    return shorten(value, limit)


def _intensity_axis(values) -> dict[float, int] | None:
    """None when the intensities fit a linear axis; else the rank of each distinct value (drawn at its rank)."""
    distinct = sorted({float(v) for v in values})
    if all(math.isfinite(v) and abs(v) <= AXIS_LIMIT for v in distinct):
        return None
    return {v: i for i, v in enumerate(distinct)}


def _reliability(plt, name: str, rel: Mapping[str, Any], line: str) -> str:
    import numpy as np

    edges = np.asarray(rel["edges"])
    mids, width = (edges[:-1] + edges[1:]) / 2, np.diff(edges)
    fig, (a, b) = _new(plt, f"reliability diagrams, split {_label(name)}", line, 2)
    c = rel["confidence"]
    keep = np.asarray(c["counts"]) > 0
    a.bar(mids[keep], np.asarray(c["accuracy"])[keep], width=width[keep], edgecolor="k", alpha=0.7, label="accuracy")
    a.plot([0, 1], [0, 1], "k--", lw=1)
    a.set(xlabel="confidence", ylabel="accuracy", xlim=(0, 1), ylim=(0, 1), title="confidence (ECE)")
    u = rel["uncertainty"]
    keep = np.asarray(u["counts"]) > 0
    b.bar(mids[keep], np.asarray(u["error"])[keep], width=width[keep], edgecolor="k", alpha=0.7, color="C1")
    b.plot([0, 1], [0, 1], "k--", lw=1)
    b.set(xlabel="normalized entropy", ylabel="error", xlim=(0, 1), ylim=(0, 1), title="uncertainty (UCE)")
    return _svg(fig)


def _rejection(plt, name: str, curves: Mapping[str, Any], line: str) -> str:
    fig, (a,) = _new(plt, f"accuracy-rejection curves, split {_label(name)}", line)
    for score, c in curves.items():
        a.plot(c["rejected_fraction"], c["accuracy"], label=_label(score))
    a.set(xlabel="fraction rejected (most uncertain first)", ylabel="accuracy of the rest")
    a.legend(fontsize=7)
    return _svg(fig)


def _member_curve(plt, name: str, mc: Mapping[str, Any], line: str) -> str:
    """One panel per metric (their scales differ): mean over member orders, with a one-std band."""
    import numpy as np

    metrics = mc["metrics"]
    fig, axes = _new(plt, f"metrics against members, split {_label(name)}", line, len(metrics))
    k = np.asarray(mc["n_members"])
    for a, (key, vals) in zip(axes, metrics.items()):
        mean, std = np.asarray(vals["mean"]), np.asarray(vals["std"])
        a.plot(k, mean, marker=".")
        a.fill_between(k, mean - std, mean + std, alpha=0.2, label="± std over orders")
        a.set(xlabel="members in the ensemble", ylabel=_label(key))
    axes[0].legend(fontsize=7)
    return _svg(fig)


def _ood_hist(plt, name: str, hists: Mapping[str, Any], line: str) -> str:
    import numpy as np

    fig, axes = _new(plt, f"OOD scores, split {_label(name)} (positive = OOD)", line, len(hists))
    for a, (score, h) in zip(axes, hists.items()):
        edges = np.asarray(h["edges"])
        a.stairs(h["in_domain"], edges, label="in-domain", fill=True, alpha=0.5)
        a.stairs(h["ood"], edges, label="OOD", fill=True, alpha=0.5)
        a.set(xlabel=f"{_label(score)} (higher = more uncertain)", ylabel="count")
        a.legend(fontsize=7)
    return _svg(fig)


def _kinds(group: Mapping[str, Any]) -> str:
    kinds = group["kinds"]
    shown = _label(", ".join(kinds[:MAX_KINDS_DRAWN]), 3 * LABEL_LIMIT)
    return shown if len(kinds) <= MAX_KINDS_DRAWN else f"{shown}; {MAX_KINDS_DRAWN} of {len(kinds)} kinds drawn"


def _shift(plt, summary: Mapping[str, Any], group: Mapping[str, Any], line: str) -> str:
    """Accuracy and ECE against intensity for the kinds of one intensity grid, with their quartile band."""
    fig, (a, b) = _new(plt, f"accuracy and ECE against shift intensity ({_kinds(group)})", line, 2)
    q = list(group["by_intensity"].values())
    rows_of = {kind: summary["by_kind"][kind] for kind in group["kinds"]}
    ranks = _intensity_axis([v["intensity"] for v in q] + [r["intensity"] for rows in rows_of.values()
                                                            for r in rows])

    def at(values):
        return [float(v) for v in values] if ranks is None else [ranks[float(v)] for v in values]

    for kind, rows in list(rows_of.items())[:MAX_KINDS_DRAWN]:
        x = at(r["intensity"] for r in rows)
        a.plot(x, [r["accuracy"] for r in rows], marker="o", label=_label(kind))
        b.plot(x, [r["ece"] for r in rows], marker="o", label=_label(kind))
    xs = at(v["intensity"] for v in q)
    for ax, key in ((a, "accuracy"), (b, "ece")):
        if len(group["kinds"]) > 1:
            ax.fill_between(xs, [v[key]["q1"] for v in q], [v[key]["q3"] for v in q], color="grey", alpha=0.2,
                            label="quartiles over kinds")
            ax.plot(xs, [v[key]["median"] for v in q], "k--", lw=1, label="median")
        if ranks is None:
            ax.set(xlabel="shift intensity", ylabel=key)
        else:
            ax.set_xticks(list(ranks.values()), [f"{v:.3g}" for v in ranks])
            ax.set(xlabel="shift intensity (placed by rank: values beyond an axis's range)", ylabel=key)
    a.legend(fontsize=7)
    return _svg(fig)


def dee_figure(dee: Mapping[str, Any], line: str) -> str:
    """The DEE curve: the method's DEE against its number of members, with lower/upper bounds."""
    plt = _pyplot()
    with _plain_text():
        fig, (a,) = _new(plt, "Deep Ensemble Equivalent", line)
        k = [p["n_members"] for p in dee["curve"]]
        a.plot(k, [p["dee"] for p in dee["curve"]], marker="o", label="DEE")
        a.fill_between(k, [p["dee_lower"] for p in dee["curve"]], [p["dee_upper"] for p in dee["curve"]],
                       alpha=0.2, label="bounds")
        a.plot(k, k, "k--", lw=1, label="deep ensemble")
        a.set(xlabel="members of the method", ylabel="equivalent deep-ensemble members")
        a.legend(fontsize=7)
        return _svg(fig)


def _planned(report: Mapping[str, Any], line: str) -> list[tuple[str, Callable[[Any], str]]]:
    """``(caption, draw(plt))`` of every figure the report has data for, in the order of :data:`MAX_FIGURES`."""
    primary = report.get("primary_split")
    names = sorted(report["in_domain"], key=lambda n: n != primary)  # stable: the primary split first
    out: list[tuple[str, Callable[[Any], str]]] = []
    for name in names:
        sec = report["in_domain"][name]
        if sec.get("reliability"):
            out.append((f"Reliability diagrams of {_label(name)}",
                        lambda plt, n=name, s=sec: _reliability(plt, n, s["reliability"], line)))
        if sec.get("rejection_curves"):
            out.append((f"Accuracy-rejection curves of {_label(name)}",
                        lambda plt, n=name, s=sec: _rejection(plt, n, s["rejection_curves"], line)))
        if sec.get("member_curves"):
            out.append((f"Metrics against members of {_label(name)}",
                        lambda plt, n=name, s=sec: _member_curve(plt, n, s["member_curves"], line)))
    if report.get("dee"):
        out.append(("Deep Ensemble Equivalent", lambda plt: dee_figure(report["dee"], line)))
    if report.get("shift_summary"):
        for group in report["shift_summary"]["groups"]:
            out.append((f"Accuracy and ECE against shift intensity: {_kinds(group)}",
                        lambda plt, g=group: _shift(plt, report["shift_summary"], g, line)))
    for name, sec in report["ood"].items():
        if sec.get("histograms"):
            out.append((f"OOD score histograms of {_label(name)}",
                        lambda plt, n=name, s=sec: _ood_hist(plt, n, s["histograms"], line)))
    return out


@dataclass(frozen=True)
class Figures:
    """``drawn``: ``(caption, svg)`` pairs; ``left_out``: captions past the cap; ``failed``: ``caption: error``
    of figures that could not be drawn. Captions are escaped plain text (``html.escape`` them for a page)."""

    drawn: list[tuple[str, str]]
    left_out: list[str]
    failed: list[str]


#: What drawing one figure may raise on strange data (the sandbox boundary catches anything else): the figure is
#: reported as not drawn and the others still are.
_DRAW_ERRORS = (ValueError, TypeError, KeyError, IndexError, OverflowError, RecursionError)


def figures(report: Mapping[str, Any], *, limit: int = MAX_FIGURES) -> Figures:
    """The first ``limit`` figures the report has data for (the order of :data:`MAX_FIGURES`), each drawn on its
    own: one that raises is listed in ``failed`` and the others are still drawn.

    Every string in a caption or a figure is escaped and cut (:func:`~ubench.scoring.text.shorten`).
    """
    plt = _pyplot()
    line = report["protocol"]["description"]
    planned = _planned(report, line)
    drawn, failed = [], []
    with _plain_text():
        for caption, draw in planned[:limit]:
            try:
                drawn.append((caption, draw(plt)))
            except _DRAW_ERRORS as exc:
                plt.close("all")
                failed.append(f"{caption}: {type(exc).__name__}: {shorten(exc, 3 * LABEL_LIMIT)}")
    return Figures(drawn, [caption for caption, _ in planned[limit:]], failed)
