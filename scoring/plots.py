# SPDX-License-Identifier: MIT
"""Figures of a score report, drawn from the report dict alone, returned as inline SVG text.

matplotlib is imported inside :func:`figures` with the Agg backend, so importing this module costs nothing.
Every figure carries the protocol line (placement, folds, seed, bins, smoothing) in its title.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

__all__ = ["figures", "dee_figure"]


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
    fig.suptitle(f"{title}\n{protocol_line}", fontsize=8)
    return fig, axes[0]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _reliability(plt, name: str, rel: Mapping[str, Any], line: str) -> str:
    import numpy as np

    edges = np.asarray(rel["edges"])
    mids, width = (edges[:-1] + edges[1:]) / 2, np.diff(edges)
    fig, (a, b) = _new(plt, f"reliability diagrams, split {name}", line, 2)
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
    fig, (a,) = _new(plt, f"accuracy-rejection curves, split {name}", line)
    for score, c in curves.items():
        a.plot(c["rejected_fraction"], c["accuracy"], label=score)
    a.set(xlabel="fraction rejected (most uncertain first)", ylabel="accuracy of the rest")
    a.legend(fontsize=7)
    return _svg(fig)


def _member_curve(plt, name: str, mc: Mapping[str, Any], line: str) -> str:
    """One panel per metric (their scales differ): mean over member orders, with a one-std band."""
    import numpy as np

    metrics = mc["metrics"]
    fig, axes = _new(plt, f"metrics against members, split {name}", line, len(metrics))
    k = np.asarray(mc["n_members"])
    for a, (key, vals) in zip(axes, metrics.items()):
        mean, std = np.asarray(vals["mean"]), np.asarray(vals["std"])
        a.plot(k, mean, marker=".")
        a.fill_between(k, mean - std, mean + std, alpha=0.2, label="± std over orders")
        a.set(xlabel="members in the ensemble", ylabel=key)
    axes[0].legend(fontsize=7)
    return _svg(fig)


def _ood_hist(plt, name: str, hists: Mapping[str, Any], line: str) -> str:
    import numpy as np

    fig, axes = _new(plt, f"OOD scores, split {name} (positive = OOD)", line, len(hists))
    for a, (score, h) in zip(axes, hists.items()):
        edges = np.asarray(h["edges"])
        a.stairs(h["in_domain"], edges, label="in-domain", fill=True, alpha=0.5)
        a.stairs(h["ood"], edges, label="OOD", fill=True, alpha=0.5)
        a.set(xlabel=f"{score} (higher = more uncertain)", ylabel="count")
        a.legend(fontsize=7)
    return _svg(fig)


def _shift(plt, summary: Mapping[str, Any], group: Mapping[str, Any], line: str) -> str:
    """Accuracy and ECE against intensity for the kinds of one intensity grid, with their quartile band."""
    fig, (a, b) = _new(plt, f"accuracy and ECE against shift intensity ({', '.join(group['kinds'])})", line, 2)
    for kind in group["kinds"]:
        rows = summary["by_kind"][kind]
        x = [r["intensity"] for r in rows]
        a.plot(x, [r["accuracy"] for r in rows], marker="o", label=kind)
        b.plot(x, [r["ece"] for r in rows], marker="o", label=kind)
    q = list(group["by_intensity"].values())
    xs = [v["intensity"] for v in q]
    for ax, key in ((a, "accuracy"), (b, "ece")):
        if len(group["kinds"]) > 1:
            ax.fill_between(xs, [v[key]["q1"] for v in q], [v[key]["q3"] for v in q], color="grey", alpha=0.2,
                            label="quartiles over kinds")
            ax.plot(xs, [v[key]["median"] for v in q], "k--", lw=1, label="median")
        ax.set(xlabel="shift intensity", ylabel=key)
    a.legend(fontsize=7)
    return _svg(fig)


def dee_figure(dee: Mapping[str, Any], line: str) -> str:
    """The DEE curve: the method's DEE against its number of members, with lower/upper bounds."""
    plt = _pyplot()
    fig, (a,) = _new(plt, "Deep Ensemble Equivalent", line)
    k = [p["n_members"] for p in dee["curve"]]
    a.plot(k, [p["dee"] for p in dee["curve"]], marker="o", label="DEE")
    a.fill_between(k, [p["dee_lower"] for p in dee["curve"]], [p["dee_upper"] for p in dee["curve"]], alpha=0.2,
                   label="bounds")
    a.plot(k, k, "k--", lw=1, label="deep ensemble")
    a.set(xlabel="members of the method", ylabel="equivalent deep-ensemble members")
    a.legend(fontsize=7)
    return _svg(fig)


def figures(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(caption, svg)`` for every figure the report has data for."""
    plt = _pyplot()
    line = report["protocol"]["description"]
    out = []
    for name, sec in report["in_domain"].items():
        out.append((f"Reliability diagrams of {name}", _reliability(plt, name, sec["reliability"], line)))
        out.append((f"Accuracy-rejection curves of {name}", _rejection(plt, name, sec["rejection_curves"], line)))
        if sec.get("member_curves"):
            out.append((f"Metrics against members of {name}", _member_curve(plt, name, sec["member_curves"], line)))
    for name, sec in report["ood"].items():
        out.append((f"OOD score histograms of {name}", _ood_hist(plt, name, sec["histograms"], line)))
    if report.get("shift_summary"):
        for group in report["shift_summary"]["groups"]:
            out.append((f"Accuracy and ECE against shift intensity: {', '.join(group['kinds'])}",
                        _shift(plt, report["shift_summary"], group, line)))
    if report.get("dee"):
        out.append(("Deep Ensemble Equivalent", dee_figure(report["dee"], line)))
    return out
