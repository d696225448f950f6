# SPDX-License-Identifier: MIT
"""A self-contained HTML report: tables and inline SVG figures in one file, no scripts, no external resources.

Every string from the report goes through ``scoring/text.py``'s :func:`~ubench.scoring.text.html_text` (control,
bidi and surrogate characters as visible escapes, then HTML escaping; a table cell cut to :data:`CELL_LIMIT`
characters), so an upload's strings can neither script the page nor stop it from being written as UTF-8.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .tables import latency_table, shift_rows, with_interval
from .text import html_text

__all__ = ["render_html", "write_html", "summary_groups", "HEADLINE", "CELL_LIMIT"]

#: Characters of one table cell, note or title part shown (a 100k-character shift kind wrote a 16 MB page).
CELL_LIMIT = 200

_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th:first-child,td:first-child,td:nth-child(2){text-align:left}
figure{margin:1.5em 0}figure svg{max-width:100%;height:auto}figcaption{font-size:90%;color:#444}.note{color:#844}code{font-size:90%}
.headline{display:flex;flex-wrap:wrap;gap:1em}.hl{border:1px solid #ccc;padding:.5em 1em;min-width:8em}
.hv{font-size:150%;font-weight:bold}.hi{font-size:85%}.hk{font-size:85%;color:#444}.proto{font-size:85%;color:#444}
td.best{font-weight:bold;background:#e6f4e6}td.tied{background:#f4f4e0}.iv{font-size:85%;color:#444}"""


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4f}"
    return "-" if v is None else html_text(v, CELL_LIMIT)


def _table(header, rows) -> str:
    h = "".join(f"<th>{html_text(x, CELL_LIMIT)}</th>" for x in header)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(v)}</td>" for v in r) + "</tr>" for r in rows)
    return f"<table><tr>{h}</tr>{body}</table>"


#: The headline block, first on the page: (summary key, label). OOD AUROC is the mean over OOD splits of the
#: total-uncertainty score (the report's ``ood_auroc_total``).
HEADLINE = (("cll", "CLL (calibrated log-likelihood)"), ("dee", "DEE (deep-ensemble equivalent)"),
            ("accuracy", "accuracy"), ("nll", "NLL"), ("ece", "ECE"), ("ood_auroc_total", "OOD AUROC (total)"))

#: Groups of the summary table, in page order: (title, key prefixes or keys); what matches none goes last.
_GROUPS = (
    ("in-domain", ("accuracy", "nll", "brier", "ece", "tace", "uce", "mean_")),
    ("calibrated", ("cll", "dee", "temperature", "calibrated_")),
    ("misclassification", ("misclassification_", "aurc_")),
    ("OOD", ("ood_",)),
    ("shift", ("shift_",)),
    ("decision", ("decision_",)),
)


def summary_groups(summary: Mapping[str, Any]) -> list[tuple[str, str, Any]]:
    """``(group, key, value)`` of every summary key, grouped as :data:`_GROUPS` orders them (in-domain,
    calibrated, misclassification, OOD, shift, decision, other), keys in the order the report has them."""
    rows: dict[str, list[tuple[str, str, Any]]] = {g: [] for g, _ in _GROUPS}
    rows["other"] = []
    for key, value in summary.items():
        group = next((g for g, prefixes in _GROUPS if any(key == p or (p.endswith("_") and key.startswith(p))
                                                             for p in prefixes)), "other")
        rows[group].append((group, key, value))
    return [row for group_rows in rows.values() for row in group_rows]


def _headline(summary: Mapping[str, Any], comparable: set[str], report: Mapping[str, Any]) -> str:
    cells = []
    for key, label in HEADLINE:
        if key not in summary:
            continue
        mark = " *" if key in comparable else ""
        value = _fmt(summary[key])
        iv = ((report.get("intervals") or {}).get("summary") or {}).get(key)
        interval = "" if iv is None else f"<div class='hi'>[{_fmt(iv[0])}, {_fmt(iv[1])}]</div>"
        dee = report.get("dee")
        if key == "dee" and dee and dee["curve"] and dee["curve"][-1].get("beyond_reference"):
            value = "≥ " + value  # beyond the reference's largest ensemble: a lower bound
        if key == "dee" and summary[key] is None and summary.get("dee_below_one"):
            value = html_text("< 1")  # below one deep-ensemble member (null in the report, never 1)
        cells.append(f"<div class='hl'><div class='hv'>{value}</div>{interval}"
                     f"<div class='hk'>{html_text(label)}{mark}</div></div>")
    return ("<h2>Headline</h2><div class='headline'>" + "".join(cells) + "</div>"
            f"<p class='proto'>{html_text(report['protocol']['description'], CELL_LIMIT)}</p>")


def render_html(report: Mapping[str, Any], *, figures: Sequence[tuple[str, str]] = (),
                figure_notes: Sequence[str] = (), title: str | None = None) -> str:
    """The report as one HTML document, with ``figures`` (``(caption, svg)`` pairs, plain-text captions, from
    ``scoring/plot_sandbox.py``) and ``figure_notes`` (what was left out or failed) under "Figures"."""
    a = report["archive"]
    if title is None:
        title = "ubench report: " + " / ".join(html_text(a[k], CELL_LIMIT) for k in ("method", "model", "dataset"))
    else:
        title = html_text(title, CELL_LIMIT)
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title>"
             f"<style>{_CSS}</style></head><body><h1>{title}</h1>"]
    summary = report.get("summary", {})
    comparable = set(report.get("comparability", {}).get("comparable", ()))
    if summary:  # the headline block first (issue #10 item 4), then what was scored
        parts.append(_headline(summary, comparable, report))
    parts.append("<h2>Archive</h2>")
    parts.append(_table(("archive", "value"), [
        ("path", a["path"]), ("sha256", a["sha256"]), ("format version", a["format_version"]),
        ("members", a["n_members"]), ("classes", a["n_classes"]), ("labels from", report["labels"]["source"]),
        ("protocol", report["protocol"]["description"]), ("ubench", report["ubench_version"])]))
    if report.get("dee"):
        e = report["dee"]["ensemble"]
        parts.append(f"<p>DEE against the deep ensemble {html_text(e['method'], CELL_LIMIT)} "
                     f"(<code>{html_text(e['path'], CELL_LIMIT)}</code>, {int(e['n_members'])} members).</p>")
    if summary:
        intervals = report.get("intervals") or {}
        ivs = intervals.get("summary") or {}
        parts.append("<h2>All summary numbers</h2><p>* comparable across models (Ashukha et al. 2020); unmarked "
                     "values are not."
                     + (f" [low, high]: {100 * intervals['level']:g} % {html_text(intervals['method'])} bootstrap "
                        f"intervals over the test samples ({int(intervals['replicates'])} replicates, seed "
                        f"{int(intervals['seed'])}; scoring/REPORT_KEYS.md says what each covers)." if ivs else "")
                     + "</p>")
        parts.append(_table(("group", "key", "value"), [(g, k + (" *" if k in comparable else ""),
                                                         with_interval(v, ivs.get(k)))
                                                        for g, k, v in summary_groups(summary)]))
    diagnostics = a.get("diagnostics")
    if isinstance(diagnostics, Mapping) and diagnostics:
        parts.append("<h2>MCMC diagnostics</h2><p>As the producer recorded them (SPEC 5.1): R-hat above 1.01 says "
                     "the chains have not mixed (Vehtari et al. 2021).</p>")
        rows = []
        for key, value in list(diagnostics.items())[:20]:
            if isinstance(value, Mapping):
                rows += [(f"{key}.{k}", v) for k, v in list(value.items())[:20]]
            else:
                rows.append((key, value))
        parts.append(_table(("quantity", "value"), rows))
    if report.get("method_scores"):  # issue #31: method-specific and logit scores
        from .method_score_view import METHOD_SCORE_NOTE, method_score_table

        parts.append(f"<h2>Method and logit scores</h2><p>{html_text(METHOD_SCORE_NOTE)}.</p>")
        parts.append(_table(*method_score_table(report)))
    if report.get("shift"):
        parts.append("<h2>Shift</h2>")
        parts.append(_table(("split", "kind", "intensity", "accuracy", "NLL", "Brier", "ECE"), shift_rows(report)))
    header, rows = latency_table([report], [a["method"]])
    if rows:  # the archive carries ubench latency --record-into's numbers (SPEC.md 5.2)
        parts.append("<h2>Accuracy against latency</h2>")
        parts.append(_table(header, rows))
        parts.append("<p>URSABench's table: the ensemble's latency per batch with its members run one after another "
                     "(and as one fused graph), from <code>ubench latency --record-into</code>.</p>")
    parts.append("<h2>Figures</h2>")
    for caption, svg in figures:
        # the protocol line is in the figure's own title, once
        parts.append(f"<figure>{svg}<figcaption>{html_text(caption)}</figcaption></figure>")
    for n in figure_notes:
        parts.append(f"<p class='note'>note: {html_text(n)}</p>")
    for n in report.get("notes", ()):
        parts.append(f"<p class='note'>note: {html_text(n, 10 * CELL_LIMIT)}</p>")
    # JSON with ensure_ascii: no control or surrogate character left but the indentation's line breaks
    settings = json.dumps(report["protocol"], indent=2, sort_keys=True)
    parts.append(f"<h2>Settings</h2><pre><code>{html.escape(settings)}</code></pre></body></html>")
    return "\n".join(parts)


def write_html(report: Mapping[str, Any], path: str | Path, *, limits=None) -> tuple[Path, tuple[str, ...]]:
    """Draw the figures in a limited child (``scoring/plot_sandbox.py``, under ``limits``, a ``SandboxLimits``;
    its defaults when None) and write :func:`render_html` to ``path`` (UTF-8); returns the path and the figure
    notes (what was left out or failed), which are also on the page."""
    from .plot_sandbox import draw_figures
    from .sandbox import SandboxLimits

    drawn = draw_figures(report, SandboxLimits() if limits is None else limits)
    path = Path(path)
    path.write_text(render_html(report, figures=drawn.figures, figure_notes=drawn.notes), encoding="utf-8")
    return path, drawn.notes
