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

__all__ = ["Figures", "figures", "compare_figures", "dee_figure", "MAX_FIGURES", "MAX_KINDS_DRAWN", "LABEL_LIMIT",
           "AXIS_LIMIT"]

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
#: Panels in one row of a figure, and the size of one panel in inches (width, height): three panels are
#: 10.8 in = 778 pt = 1037 CSS px wide, narrower than the pages' 1100 px, so a figure is shown at its own size and
#: its text at the sizes of :data:`FONT` (issue #28 item 14: a row of 12 panels was shrunk to a fifth, its bin
#: counts to 3 px).
MAX_COLUMNS = 3
PANEL_SIZE = (3.6, 3.1)
#: Font sizes in points (1 pt = 4/3 CSS px at 100 % zoom): the smallest, the bin counts, is 10 px on the page.
FONT = {"title": 10, "panel": 9, "label": 9, "tick": 8, "legend": 8, "count": 7.5}


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _new(plt, title: str, protocol_line: str, npanels: int = 1):
    """A figure of ``npanels`` panels, at most :data:`MAX_COLUMNS` to a row, each :data:`PANEL_SIZE` inches, so
    that no figure is wider than a page and a browser never scales its text down; returns (figure, the panels)."""
    # constrained layout keeps the two-line title (what, and the protocol that produced it) clear of the axes
    ncols = max(1, min(npanels, MAX_COLUMNS))
    nrows = max(1, math.ceil(npanels / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(PANEL_SIZE[0] * ncols, PANEL_SIZE[1] * nrows + 0.5),
                             squeeze=False, layout="constrained")
    fig.suptitle(f"{title}\n{_label(protocol_line, 4 * LABEL_LIMIT)}", fontsize=FONT["title"])
    panels = list(axes.flat)
    for ax in panels[max(npanels, 1):]:
        ax.remove()
    return fig, panels[:max(npanels, 1)]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


@contextlib.contextmanager
def _plain_text() -> Iterator[None]:
    """Every Text created inside draws its string as it is (no mathtext ``$...$``, no LaTeX), at the sizes of
    :data:`FONT`."""
    import matplotlib

    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False, "font.size": FONT["label"],
                                "axes.titlesize": FONT["panel"], "axes.labelsize": FONT["label"],
                                "xtick.labelsize": FONT["tick"], "ytick.labelsize": FONT["tick"],
                                "legend.fontsize": FONT["legend"], "figure.titlesize": FONT["title"]}):
        yield


def _label(value: Any, limit: int = LABEL_LIMIT) -> str:
    return shorten(value, limit)


def _intensity_axis(values) -> dict[float, int] | None:
    """None when the intensities fit a linear axis; else the rank of each distinct value (drawn at its rank)."""
    distinct = sorted({float(v) for v in values})
    if all(math.isfinite(v) and abs(v) <= AXIS_LIMIT for v in distinct):
        return None
    return {v: i for i, v in enumerate(distinct)}


def _ece_of_bins(conf: Mapping[str, Any]) -> float:
    """ECE from a reliability section's bins: sum_b n_b / N |acc_b - conf_b| (the report's equal-width ECE)."""
    n = sum(conf["counts"])
    return sum(c * abs(a - m) for c, a, m in zip(conf["counts"], conf["accuracy"], conf["mean_confidence"])) / max(n, 1)


def _confidence_panel(ax, rel: Mapping[str, Any], title: str, color: str = "C0", counts: bool = True) -> None:
    """Accuracy per confidence bin (bars), the diagonal, each bin's sample count above its bar, ECE in the title."""
    import numpy as np

    edges = np.asarray(rel["edges"])
    mids, width = (edges[:-1] + edges[1:]) / 2, np.diff(edges)
    c = rel["confidence"]
    n = np.asarray(c["counts"])
    keep = n > 0
    acc = np.asarray(c["accuracy"])
    ax.bar(mids[keep], acc[keep], width=width[keep], edgecolor="k", alpha=0.7, color=color)
    ax.plot([0, 1], [0, 1], "k--", lw=1)
    if counts:
        for x, y, k in zip(mids[keep], acc[keep], n[keep]):
            ax.text(x, min(y, 0.9) + 0.01, str(int(k)), ha="center", va="bottom", fontsize=FONT["count"],
                    rotation=90)
    ax.set(xlabel="confidence", ylabel="accuracy", xlim=(0, 1), ylim=(0, 1.15),
           title=f"{title}: ECE {_ece_of_bins(c):.4f}")


def _reliability(plt, name: str, sec: Mapping[str, Any], line: str):
    """Confidence reliability before and (when calibrated) after temperature scaling, with per-bin counts and
    the ECE of each; and the uncertainty (UCE) diagram."""
    import numpy as np

    rel = sec["reliability"]
    after = (sec.get("calibrated") or {}).get("reliability")
    fig, axes = _new(plt, f"reliability diagrams, split {_label(name)} (numbers: samples per bin)", line,
                     3 if after else 2)
    _confidence_panel(axes[0], rel, "before temperature scaling")
    if after:
        t = sec["calibrated"].get("temperature")
        _confidence_panel(axes[1], after, "after scaling" + (f" (T = {t:.3g})" if isinstance(t, float) else ""),
                          color="C2")
    b = axes[-1]
    edges = np.asarray(rel["edges"])
    mids, width = (edges[:-1] + edges[1:]) / 2, np.diff(edges)
    u = rel["uncertainty"]
    keep = np.asarray(u["counts"]) > 0
    b.bar(mids[keep], np.asarray(u["error"])[keep], width=width[keep], edgecolor="k", alpha=0.7, color="C1")
    b.plot([0, 1], [0, 1], "k--", lw=1)
    b.set(xlabel="normalized entropy", ylabel="error", xlim=(0, 1), ylim=(0, 1), title="uncertainty (UCE)")
    return fig


def _baselines(ax, accuracy: float) -> None:
    """Oracle (errors rejected first: accuracy a / (1 - r), capped at 1) and random (accuracy a throughout)."""
    import numpy as np

    r = np.linspace(0.0, 0.99, 100)
    ax.plot(r, np.minimum(1.0, accuracy / (1.0 - r)), "k:", lw=1, label="oracle")
    ax.plot([0, 1], [accuracy, accuracy], color="grey", ls="--", lw=1, label="random")


def _rejection(plt, name: str, curves: Mapping[str, Any], line: str):
    fig, (a,) = _new(plt, f"accuracy-rejection curves, split {_label(name)}", line)
    for score, c in curves.items():
        a.plot(c["rejected_fraction"], c["accuracy"], label=_label(score))
    first = next(iter(curves.values()))
    _baselines(a, float(first["accuracy"][0]))
    a.set(xlabel="fraction rejected (most uncertain first)", ylabel="accuracy of the rest")
    a.legend()
    return fig


def _member_curve(plt, name: str, mc: Mapping[str, Any], line: str):
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
    axes[0].legend()
    return fig


def _ood_hist(plt, name: str, hists: Mapping[str, Any], line: str):
    import numpy as np

    fig, axes = _new(plt, f"OOD scores, split {_label(name)} (positive = OOD)", line, len(hists))
    for a, (score, h) in zip(axes, hists.items()):
        edges = np.asarray(h["edges"])
        a.stairs(h["in_domain"], edges, label="in-domain", fill=True, alpha=0.5)
        a.stairs(h["ood"], edges, label="OOD", fill=True, alpha=0.5)
        a.set(xlabel=f"{_label(score)} (higher = more uncertain)", ylabel="count")
        a.legend()
    return fig


def _ood_roc(plt, ood: Mapping[str, Any], line: str):
    """ROC curves of OOD detection (positive = OOD): one panel per uncertainty score, one line per OOD split."""
    scores = list(dict.fromkeys(sc for sec in ood.values() for sc in (sec.get("roc_curves") or {})))
    fig, axes = _new(plt, "OOD ROC curves (positive = OOD)", line, len(scores))
    for ax, sc in zip(axes, scores):
        for i, (name, sec) in enumerate(ood.items()):
            c = (sec.get("roc_curves") or {}).get(sc)
            if c:
                ax.plot(c["fpr"], c["tpr"], color=f"C{i}", label=_label(name))
        ax.plot([0, 1], [0, 1], "k:", lw=1)
        ax.set(xlabel="false-positive rate", ylabel="true-positive rate", title=f"score: {_label(sc)}",
               xlim=(0, 1), ylim=(0, 1.02))
    _legend(axes[0])
    return fig


def _kinds(group: Mapping[str, Any]) -> str:
    kinds = group["kinds"]
    shown = _label(", ".join(kinds[:MAX_KINDS_DRAWN]), 3 * LABEL_LIMIT)
    return shown if len(kinds) <= MAX_KINDS_DRAWN else f"{shown}; {MAX_KINDS_DRAWN} of {len(kinds)} kinds drawn"


def _shift(plt, summary: Mapping[str, Any], group: Mapping[str, Any], line: str):
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
    a.legend()
    return fig


def _reference_size(dee: Mapping[str, Any]) -> int:
    ref = dee.get("reference_curve") or {}
    return len(ref.get("n_members") or ()) or int(dee["ensemble"]["n_members"])


def _reference_name(dee: Mapping[str, Any]) -> str:
    e = dee["ensemble"]
    if not e.get("path"):  # arrays (score_arrays): no file to name
        return f"{_label(e.get('method'))}, {_reference_size(dee)} members"
    path = str(e["path"]).replace("\\", "/").rsplit("/", 1)[-1]
    return f"{_label(e.get('method'))} ({_label(path)}), {_reference_size(dee)} members"


def _diagonal(ax, k_max: int, dee: Mapping[str, Any]) -> None:
    """y = k from 1 to the method's size + 1/2 (to the axis' end; a one-member method's diagonal is not a point),
    but not beyond the reference ensemble's size: there the DEE is only a lower bound."""
    k = max(1.0, min(k_max + 0.5, _reference_size(dee)))
    ax.plot([1, k], [1, k], "k--", lw=1, label=f"deep ensemble {_reference_name(dee)}")


def _beyond(ax, curves) -> None:
    """Ring the points whose CLL beats the reference's largest ensemble: their DEE reads "at least K"."""
    pts = [(p["n_members"], p["dee"]) for curve in curves for p in curve
           if p.get("beyond_reference") and p["dee"] is not None]
    if pts:
        ax.scatter([x for x, _ in pts], [y for _, y in pts], s=120, facecolors="none", edgecolors="k", zorder=3,
                   label="beyond the reference: DEE at least this")


def _dee_line(ax, curve, color: str, label: str, below_label: bool) -> None:
    """One method's DEE against its members: the points with a number joined by a line, the bounds as a band (a
    bound below one member drawn at 0, open below, and at most 1 above), and the points below one deep-ensemble
    member as down-pointing triangles at 1 ("< 1", never drawn as a DEE of 1)."""
    import numpy as np

    k = np.array([p["n_members"] for p in curve], dtype=float)
    dee = np.array([np.nan if p["dee"] is None else p["dee"] for p in curve], dtype=float)
    lower = np.array([0.0 if p["dee_lower"] is None else p["dee_lower"] for p in curve], dtype=float)
    upper = np.array([1.0 if p["dee_upper"] is None else p["dee_upper"] for p in curve], dtype=float)
    ax.plot(k, dee, marker="o", color=color, label=label)
    ax.fill_between(k, lower, upper, color=color, alpha=0.15)
    below = np.array([bool(p.get("below_reference")) for p in curve])
    if below.any():
        ax.plot(k[below], np.ones(int(below.sum())), marker="v", markersize=9, linestyle="none", color=color,
                label="DEE < 1: below one deep-ensemble member" if below_label else None)


def _dee_axes(fig, ax, k_max: int) -> None:
    """Axes from 0.5 to the largest size + 0.5 (a one-member method's only point is not on an edge), and the
    legend outside the axes, right of them, where it hides no point (issue #28 item 14)."""
    from matplotlib.ticker import MaxNLocator

    ax.set_xlim(0.5, k_max + 0.5)
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xlabel="members of the method", ylabel="equivalent deep-ensemble members")
    fig.set_size_inches(2 * PANEL_SIZE[0], PANEL_SIZE[1] + 0.5)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside right center")


def _dee(plt, dee: Mapping[str, Any], line: str):
    """The DEE figure of one method (:func:`dee_figure`)."""
    fig, (a,) = _new(plt, f"Deep Ensemble Equivalent against {_reference_name(dee)}", line)
    k_max = max(p["n_members"] for p in dee["curve"])
    _dee_line(a, dee["curve"], "C0", "DEE (band: bounds)", True)
    _diagonal(a, k_max, dee)
    _beyond(a, [dee["curve"]])
    _dee_axes(fig, a, max(k_max, min(k_max, _reference_size(dee))))
    return fig


def dee_figure(dee: Mapping[str, Any], line: str) -> str:
    """The DEE curve as SVG: the method's DEE against its number of members, with lower/upper bounds, the
    diagonal of the reference deep ensemble up to its size, and the reference named; a point below one
    deep-ensemble member is a down-pointing triangle at 1."""
    plt = _pyplot()
    with _plain_text():
        return _svg(_dee(plt, dee, line))


def _confidence_lines(report: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(label, confidence_curves) of the primary in-domain split, every OOD split (counts only) and, per shift
    kind, its most intense split: at most 8 lines (Ovadia et al.'s confidence figures)."""
    out = []
    primary = report.get("primary_split")
    if primary and (report["in_domain"].get(primary) or {}).get("confidence_curves"):
        out.append((f"{primary} (in-domain)", report["in_domain"][primary]["confidence_curves"]))
    worst: dict[str, tuple[float, str]] = {}
    for name, sec in (report.get("shift") or {}).items():
        if sec.get("confidence_curves"):
            kind, level = sec.get("shift_kind"), float(sec.get("shift_intensity") or 0.0)
            if kind not in worst or level > worst[kind][0]:
                worst[kind] = (level, name)
    out += [(f"{name} ({kind} {level:g})", report["shift"][name]["confidence_curves"])
            for kind, (level, name) in worst.items()]
    out += [(f"{name} (OOD)", sec["confidence_curves"]) for name, sec in (report.get("ood") or {}).items()
            if sec.get("confidence_curves")]
    return out[:8]


def _confidence_panels(plt, title: str, lines: list[tuple[str, Mapping[str, Any]]], line: str):
    """Accuracy and number of samples with top-1 confidence >= τ (Ovadia et al. 2019, Fig. 3's confidence plots)."""
    fig, (acc, cnt) = _new(plt, title, line, 2)
    for i, (label, c) in enumerate(lines):
        t = c["thresholds"]
        pts = [(x, a) for x, a in zip(t, c["accuracy"]) if a is not None]
        if pts:
            acc.plot([p[0] for p in pts], [p[1] for p in pts], color=f"C{i}", marker=".", label=_label(label))
        cnt.plot(t, c["count"], color=f"C{i}", marker=".", label=_label(label))
    acc.set(xlabel="confidence threshold τ", ylabel="accuracy on samples with confidence ≥ τ")
    cnt.set(xlabel="confidence threshold τ", ylabel="samples with confidence ≥ τ")
    cnt.legend()
    return fig


def _planned(report: Mapping[str, Any], line: str) -> list[tuple[str, Callable[[Any], str]]]:
    """``(caption, draw(plt))`` of every figure the report has data for, in the order of :data:`MAX_FIGURES`."""
    primary = report.get("primary_split")
    names = sorted(report["in_domain"], key=lambda n: n != primary)  # stable: the primary split first
    out: list[tuple[str, Callable[[Any], str]]] = []
    for name in names:
        sec = report["in_domain"][name]
        if sec.get("reliability"):
            out.append((f"Reliability diagrams of {_label(name)}",
                        lambda plt, n=name, s=sec: _reliability(plt, n, s, line)))
        if sec.get("rejection_curves"):  # method and logit scores (issue #31) drawn beside the softmax ones
            curves = {**sec["rejection_curves"], **{f"{k} ({'method' if v['method_specific'] else 'logits'})":
                                                    v["rejection_curve"] for k, v in
                                                    (sec.get("method_scores") or {}).items()}}
            out.append((f"Accuracy-rejection curves of {_label(name)}",
                        lambda plt, n=name, c=curves: _rejection(plt, n, c, line)))
        if sec.get("member_curves"):
            out.append((f"Metrics against members of {_label(name)}",
                        lambda plt, n=name, s=sec: _member_curve(plt, n, s["member_curves"], line)))
    if report.get("dee"):
        out.append(("Deep Ensemble Equivalent", lambda plt: _dee(plt, report["dee"], line)))
    if report.get("shift_summary"):
        for group in report["shift_summary"]["groups"]:
            out.append((f"Accuracy and ECE against shift intensity: {_kinds(group)}",
                        lambda plt, g=group: _shift(plt, report["shift_summary"], g, line)))
    for name, sec in report["ood"].items():
        if sec.get("histograms"):
            out.append((f"OOD score histograms of {_label(name)}",
                        lambda plt, n=name, s=sec: _ood_hist(plt, n, s["histograms"], line)))
    if (conf := _confidence_lines(report)):
        out.append(("Accuracy and count against confidence",
                    lambda plt: _confidence_panels(plt, "accuracy and count vs confidence threshold", conf, line)))
    return out


# --- several methods at once (ubench compare --html) -------------------------------------------------------------


def _primary_section(report: Mapping[str, Any]) -> Mapping[str, Any]:
    return report["in_domain"].get(report.get("primary_split"), {}) if report.get("primary_split") else {}


def _legend(ax) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend()


def _cmp_members(plt, names, reports, line: str):
    """CLL, accuracy and Brier against the number of members, one line and one-std band per method."""
    import numpy as np

    keys = ("cll", "accuracy", "brier")
    fig, axes = _new(plt, "metrics against the number of members (mean and ± std over member orders)", line, 3)
    for i, (name, r) in enumerate(zip(names, reports)):
        mc = _primary_section(r).get("member_curves")
        if not mc:
            continue
        k = np.asarray(mc["n_members"])
        for ax, key in zip(axes, keys):
            mean, std = np.asarray(mc["metrics"][key]["mean"]), np.asarray(mc["metrics"][key]["std"])
            ax.plot(k, mean, marker=".", color=f"C{i}", label=_label(name))
            ax.fill_between(k, mean - std, mean + std, color=f"C{i}", alpha=0.15)
    for ax, key in zip(axes, ("CLL (calibrated)", "accuracy", "Brier")):
        ax.set(xlabel="members in the ensemble", ylabel=key)
    _legend(axes[0])
    return fig


def _cmp_dee(plt, names, dees, line: str):
    """Every method's DEE curve with its bounds, and the reference deep ensemble's diagonal up to its size."""
    fig, (a,) = _new(plt, "Deep Ensemble Equivalent (Ashukha et al. 2020, Fig. 1)", line)
    ref, k_max, below_label = None, 1, True
    for i, (name, d) in enumerate(zip(names, dees)):
        if not d:
            continue
        ref = d
        k_max = max(k_max, max(p["n_members"] for p in d["curve"]))
        _dee_line(a, d["curve"], f"C{i}", _label(name), below_label)
        below_label = below_label and not any(p.get("below_reference") for p in d["curve"])
    _diagonal(a, k_max, ref)
    _beyond(a, [d["curve"] for d in dees if d])
    _dee_axes(fig, a, k_max)
    return fig


def _latency_point(report) -> tuple[float, float] | None:
    """(batch latency p50 in ms, accuracy) of a report whose archive carries latency, else None."""
    lat, acc = report.get("latency") or {}, report.get("accuracy")
    p50 = lat.get("latency_p50_ms")
    if not isinstance(p50, (int, float)) or not isinstance(acc, (int, float)) or not p50 > 0:
        return None
    return float(p50), float(acc)


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point dominates (lower or equal latency and higher or equal accuracy, one
    of them strictly), by latency."""
    front = [i for i, (t, a) in enumerate(points)
             if not any((t2 <= t and a2 >= a) and (t2 < t or a2 > a) for t2, a2 in points)]
    return sorted(front, key=lambda i: points[i])


def _cmp_pareto(plt, names, reports, line: str):
    """Accuracy against the ensemble's batch latency (p50, members one after another; hollow marker: fused), one
    marker per method, the Pareto front as a step line (URSABench, fig. 1)."""
    fig, (a,) = _new(plt, "Accuracy against latency (URSABench)", line)
    pts, idx = [], []
    for i, (name, r) in enumerate(zip(names, reports)):
        p = _latency_point(r)
        if p is None:
            continue
        pts.append(p)
        idx.append(i)
        lat = r["latency"]
        a.plot([p[0]], [p[1]], marker="o", linestyle="none", color=f"C{i}",
               label=f"{_label(name)} ({lat.get('latency_members', '?')} members, batch "
                     f"{lat.get('latency_batch_size', '?')})")
        fused = lat.get("latency_fused_p50_ms")
        if isinstance(fused, (int, float)) and fused > 0:
            a.plot([float(fused)], [p[1]], marker="o", markerfacecolor="none", linestyle="none", color=f"C{i}")
    front = [pts[k] for k in pareto_front(pts)]
    a.step([t for t, _ in front], [acc for _, acc in front], where="post", color="0.4", linewidth=0.8,
           label="Pareto front (sequential)")
    a.set_xscale("log")
    a.set(xlabel="ensemble latency per batch, p50 (ms; hollow: fused graph)", ylabel="accuracy")
    a.legend()
    return fig


def _shared_kinds(reports) -> list[str]:
    kinds: list[str] = []
    for r in reports:
        for kind in (r.get("shift_summary") or {}).get("by_kind", {}):
            if kind not in kinds:
                kinds.append(kind)
    return kinds


def _cmp_shift_kinds(plt, names, reports, kinds, metric: str, line: str):
    """One panel per shift kind: ``metric`` against intensity, one line per method."""
    fig, axes = _new(plt, f"{metric} against shift intensity, per kind", line, len(kinds))
    for ax, kind in zip(axes, kinds):
        rows_by_method = [(r.get("shift_summary") or {}).get("by_kind", {}).get(kind, []) for r in reports]
        ranks = _intensity_axis([row["intensity"] for rows in rows_by_method for row in rows] or [0.0])
        for i, (name, rows) in enumerate(zip(names, rows_by_method)):
            if not rows:
                continue
            x = [float(row["intensity"]) if ranks is None else ranks[float(row["intensity"])] for row in rows]
            ax.plot(x, [row[metric] for row in rows], marker="o", color=f"C{i}", label=_label(name))
        if ranks is not None:
            ax.set_xticks(list(ranks.values()), [f"{v:.3g}" for v in ranks])
        ax.set(xlabel="intensity", ylabel=metric, title=_label(kind))
        _legend(axes[0])
    return fig


def _cmp_shift_boxes(plt, names, reports, group_index: int, line: str):
    """Ovadia et al. (2019) Fig. 2: per intensity, one box per method over the shift kinds (whiskers min-max,
    box quartiles, line median), for accuracy and ECE."""
    groups = []
    for r in reports:
        gs = (r.get("shift_summary") or {}).get("groups") or []
        groups.append(gs[group_index] if group_index < len(gs) else None)
    first = next(g for g in groups if g)
    fig, axes = _new(plt, f"accuracy and ECE over shift kinds per intensity ({_kinds(first)})", line, 2)
    intensities = list(first["by_intensity"])
    ranks = _intensity_axis([first["by_intensity"][i]["intensity"] for i in intensities])
    width = 0.8 / max(len(reports), 1)
    for ax, metric in zip(axes, ("accuracy", "ece")):
        for i, (name, g) in enumerate(zip(names, groups)):
            if not g:
                continue
            stats, pos = [], []
            for j, key in enumerate(intensities):
                v = g["by_intensity"].get(key)
                if v is None:
                    continue
                q = v[metric]
                stats.append({"med": q["median"], "q1": q["q1"], "q3": q["q3"], "whislo": q["min"],
                              "whishi": q["max"], "label": ""})
                pos.append(j + (i - (len(reports) - 1) / 2) * width)
            if stats:
                arts = ax.bxp(stats, positions=pos, widths=width * 0.9, showfliers=False, patch_artist=True)
                for box in arts["boxes"]:
                    box.set(facecolor=f"C{i}", alpha=0.5)
                ax.plot([], [], color=f"C{i}", lw=6, alpha=0.5, label=_label(name))
        labels = [f"{float(first['by_intensity'][k]['intensity']):.3g}" for k in intensities]
        ax.set_xticks(range(len(intensities)), labels)
        ax.set(xlabel="shift intensity" + ("" if ranks is None else " (by rank)"), ylabel=metric)
    _legend(axes[0])
    return fig


def _cmp_reliability(plt, names, reports, line: str):
    """One confidence reliability diagram per method, side by side (before temperature scaling, with counts)."""
    shown = [(n, _primary_section(r)["reliability"]) for n, r in zip(names, reports)
             if _primary_section(r).get("reliability")][:MAX_KINDS_DRAWN]
    fig, axes = _new(plt, "reliability diagrams of the primary split (numbers: samples per bin)", line, len(shown))
    for i, (ax, (name, rel)) in enumerate(zip(axes, shown)):
        _confidence_panel(ax, rel, _label(name), color=f"C{i}")
    return fig


def _cmp_roc(plt, names, reports, split: str, line: str):
    """ROC curves of OOD detection on one OOD split, one panel per uncertainty score, one line per method."""
    scores: list[str] = []
    for r in reports:
        for sc in (r["ood"].get(split) or {}).get("roc_curves") or {}:
            if sc not in scores:
                scores.append(sc)
    fig, axes = _new(plt, f"OOD ROC curves, split {_label(split)} (positive = OOD)", line, len(scores))
    for ax, sc in zip(axes, scores):
        for i, (name, r) in enumerate(zip(names, reports)):
            c = ((r["ood"].get(split) or {}).get("roc_curves") or {}).get(sc)
            if c:
                ax.plot(c["fpr"], c["tpr"], color=f"C{i}", label=_label(name))
        ax.plot([0, 1], [0, 1], "k:", lw=1)
        ax.set(xlabel="false-positive rate", ylabel="true-positive rate", title=f"score: {_label(sc)}",
               xlim=(0, 1), ylim=(0, 1.02))
        _legend(axes[0])
    return fig


def _cmp_rejection(plt, names, reports, line: str):
    """Accuracy-rejection curves of the primary split, one panel per score, one line per method."""
    scores: list[str] = []
    for r in reports:
        for sc in _primary_section(r).get("rejection_curves") or {}:
            if sc not in scores:
                scores.append(sc)
    fig, axes = _new(plt, "accuracy-rejection curves of the primary split (most uncertain rejected first)", line,
                     len(scores))
    for ax, sc in zip(axes, scores):
        for i, (name, r) in enumerate(zip(names, reports)):
            c = (_primary_section(r).get("rejection_curves") or {}).get(sc)
            if c:
                ax.plot(c["rejected_fraction"], c["accuracy"], color=f"C{i}", label=_label(name))
        ax.set(xlabel="fraction rejected", ylabel="accuracy of the rest", title=f"score: {_label(sc)}")
        _legend(axes[0])
    return fig


def _planned_compare(inputs: Mapping[str, Any]) -> list[tuple[str, Callable[[Any], str]]]:
    """``(caption, draw(plt))`` of every comparison figure the reports have data for."""
    names, reports, line = inputs["methods"], inputs["reports"], inputs["protocol"]["description"]
    dees = inputs.get("dee") or [None] * len(reports)
    out: list[tuple[str, Callable[[Any], str]]] = []
    if any(_primary_section(r).get("member_curves") for r in reports):
        out.append(("CLL, accuracy and Brier against the number of members",
                    lambda plt: _cmp_members(plt, names, reports, line)))
    if any(dees):
        out.append(("Deep Ensemble Equivalent of every method", lambda plt: _cmp_dee(plt, names, dees, line)))
    if any(_latency_point(r) for r in reports):
        out.append(("Accuracy against latency, Pareto front (URSABench)",
                    lambda plt: _cmp_pareto(plt, names, reports, line)))
    kinds = _shared_kinds(reports)
    for start in range(0, min(len(kinds), 2 * MAX_KINDS_DRAWN), 4):
        chunk = kinds[start:start + 4]
        for metric in ("accuracy", "ece"):
            out.append((f"Shift {metric} per kind: {_label(', '.join(chunk), 3 * LABEL_LIMIT)}",
                        lambda plt, c=chunk, m=metric: _cmp_shift_kinds(plt, names, reports, c, m, line)))
    n_groups = max((len((r.get("shift_summary") or {}).get("groups") or ()) for r in reports), default=0)
    for gi in range(n_groups):
        first = next(gs[gi] for r in reports if gi < len(gs := (r.get("shift_summary") or {}).get("groups") or []))
        if len(first["kinds"]) > 1:  # a box over one kind is a line: its curve is in the per-kind figure
            out.append((f"Box plots over shift kinds per intensity: {_kinds(first)}",
                        lambda plt, g=gi: _cmp_shift_boxes(plt, names, reports, g, line)))
    if any(_primary_section(r).get("reliability") for r in reports):
        out.append(("Reliability diagrams side by side", lambda plt: _cmp_reliability(plt, names, reports, line)))
    splits: list[str] = []
    for r in reports:
        splits += [s for s, sec in r["ood"].items() if sec.get("roc_curves") and s not in splits]
    for split in splits:
        out.append((f"OOD ROC curves of {_label(split)}", lambda plt, s=split: _cmp_roc(plt, names, reports, s, line)))
    if any(_primary_section(r).get("rejection_curves") for r in reports):
        out.append(("Accuracy-rejection curves", lambda plt: _cmp_rejection(plt, names, reports, line)))
    conf = [(name, _primary_section(r)["confidence_curves"]) for name, r in zip(names, reports)
            if _primary_section(r).get("confidence_curves")]
    if conf:
        out.append(("Accuracy and count against confidence (primary split)",
                    lambda plt: _confidence_panels(plt, "accuracy and count vs confidence, primary split", conf,
                                                   line)))
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


def _draw(planned, limit: int) -> Figures:
    plt = _pyplot()
    drawn, failed = [], []
    with _plain_text():
        for caption, draw in planned[:limit]:
            try:
                drawn.append((caption, _svg(draw(plt))))
            except _DRAW_ERRORS as exc:
                plt.close("all")
                failed.append(f"{caption}: {type(exc).__name__}: {shorten(exc, 3 * LABEL_LIMIT)}")
    return Figures(drawn, [caption for caption, _ in planned[limit:]], failed)


def compare_figures(inputs: Mapping[str, Any], *, limit: int = MAX_FIGURES) -> Figures:
    """The comparison figures of ``ubench compare --html``, every method overlaid and named in a legend.

    ``inputs``: ``methods`` (names), ``reports`` (each :func:`~ubench.scoring.plot_sandbox.figure_inputs` of a
    report), ``dee`` (per method its ``dee_between`` section or None) and ``protocol.description``. Drawn as
    :func:`figures` draws: each on its own, a failure listed, at most ``limit``.
    """
    return _draw(_planned_compare(inputs), limit)


def figures(report: Mapping[str, Any], *, limit: int = MAX_FIGURES) -> Figures:
    """The first ``limit`` figures the report has data for (the order of :data:`MAX_FIGURES`), each drawn on its
    own: one that raises is listed in ``failed`` and the others are still drawn.

    Every string in a caption or a figure is escaped and cut (:func:`~ubench.scoring.text.shorten`).
    """
    return _draw(_planned(report, report["protocol"]["description"]), limit)
