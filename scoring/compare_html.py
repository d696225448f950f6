# SPDX-License-Identifier: MIT
"""The self-contained comparison page of ``ubench compare --html``: the comparison table (the best value of each
comparable column marked) and the papers' figures with every method overlaid, as inline SVG; no script, no
external resource.

The figures come from ``scoring/plots.py`` (:func:`~ubench.scoring.plots.compare_figures`, the module that also
draws ``score --html``), drawn in the limited child of ``scoring/plot_sandbox.py``. Every string from a report
(method names, paths, notes) goes through :func:`~ubench.scoring.text.html_text`, so a method named
``<script>`` is shown as text.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .compare import task_difference
from .html import _CSS, CELL_LIMIT, _fmt
from .tables import HIGHER_IS_BETTER, compare_cell, compare_columns, direction, latency_table
from .text import html_text

__all__ = ["HIGHER_IS_BETTER", "best_rows", "render_compare_html", "write_compare_html"]


def best_rows(reports: Sequence[Mapping[str, Any]], key: str) -> set[int]:
    """Indices of the rows holding the best value of comparable column ``key`` (ties all marked), among the
    rows on the first report's task (a row on another task, shown with ``--allow-mismatch``, is never best);
    empty when the column is not comparable in every such row or no row has a value."""
    same = [i for i, r in enumerate(reports) if i == 0 or task_difference(r, reports[0]) is None]
    if not all(key in reports[i]["comparability"]["comparable"] for i in same):
        return set()
    values = {i: reports[i]["summary"].get(key) for i in same}
    values = {i: float(v) for i, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if len(values) < 2:
        return set()
    best = (max if key in HIGHER_IS_BETTER else min)(values.values())
    return {i for i, v in values.items() if v == best}


def _table(reports: Sequence[Mapping[str, Any]], names: Sequence[str],
           comparison: Mapping[str, Any] | None = None) -> str:
    cols = compare_columns(reports)
    comparable = set().union(*(r["comparability"]["comparable"] for r in reports))
    best = {k: best_rows(reports, k) for k, _ in cols}
    tied = (comparison or {}).get("tied", {})
    # the terminal's headers (``format_compare``): the name with its direction, ↑ higher or ↓ lower is better
    head = "".join(f"<th>{html_text(h + direction(k))}{' *' if k in comparable else ''}</th>" for k, h in cols)
    rows = []

    def value(r, k):
        iv = ((r.get("intervals") or {}).get("summary") or {}).get(k)
        v = _fmt(compare_cell(r["summary"], k))
        return v if iv is None else f"{v} <span class='iv'>[{_fmt(iv[0])}, {_fmt(iv[1])}]</span>"

    for i, (name, r) in enumerate(zip(names, reports)):
        cells = "".join(f"<td class='best'>{value(r, k)} ▲</td>" if i in best[k]
                        else f"<td class='tied'>{value(r, k)} ≈</td>" if name in tied.get(k, ())
                        else f"<td>{value(r, k)}</td>" for k, _ in cols)
        dataset = html_text(r["archive"].get("dataset"), CELL_LIMIT)
        rows.append(f"<tr><td>{html_text(name, CELL_LIMIT)}</td><td>{dataset}</td>{cells}</tr>")
    return f"<table><tr><th>method</th><th>dataset</th>{head}</tr>{''.join(rows)}</table>"


def render_compare_html(reports: Sequence[Mapping[str, Any]], names: Sequence[str], *,
                        figures: Sequence[tuple[str, str]] = (), figure_notes: Sequence[str] = (),
                        ensemble: str | None = None, comparison: Mapping[str, Any] | None = None) -> str:
    """The comparison page: table, figures (``(caption, svg)`` pairs, plain-text captions), notes and the
    protocol; ``ensemble`` names the DEE reference archive."""
    title = "ubench comparison: " + ", ".join(html_text(n, CELL_LIMIT) for n in names[:8]) + \
        (f" and {len(names) - 8} more" if len(names) > 8 else "")
    protocol = reports[0]["protocol"]
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title>"
             f"<style>{_CSS}</style></head><body><h1>{title}</h1>",
             f"<p class='proto'>{html_text(protocol['description'], CELL_LIMIT)}</p>",
             "<h2>Comparison</h2>", _table(reports, names, comparison),
             "<p>↑ higher is better, ↓ lower is better. * comparable across models (calibrated metrics, DEE, "
             "accuracy, OOD and shift scores; Ashukha et al. 2020); ▲ marks the best value of each comparable "
             "column among the methods on the first one's task. Unmarked columns are not comparable."
             + (" ≈ marks every method not distinguishable from the best (paired bootstrap on the shared test "
                "samples, Holm-adjusted p ≥ 1 - level); [low, high] are the bootstrap intervals over the test "
                "samples." if comparison and comparison.get("best") else "") + "</p>"]
    if ensemble is not None:
        parts.append(f"<p>DEE reference: the deep ensemble <code>{html_text(ensemble, CELL_LIMIT)}</code>.</p>")
    header, rows = latency_table(reports, names)
    if rows:
        head = "".join(f"<th>{html_text(h)}</th>" for h in header)
        body = "".join("<tr>" + "".join(f"<td>{_fmt(c)}</td>" for c in row) + "</tr>" for row in rows)
        parts += ["<h2>Accuracy against latency</h2>", f"<table><tr>{head}</tr>{body}</table>",
                  "<p>URSABench's table: the ensemble's latency per batch with its members run one after another "
                  "(and as one fused graph), from <code>ubench latency --record-into</code> (SPEC.md 5.2).</p>"]
    parts.append("<h2>Archives</h2>")
    rows = "".join(f"<tr><td>{html_text(n, CELL_LIMIT)}</td><td>{html_text(r['archive']['path'], CELL_LIMIT)}</td>"
                   f"<td>{html_text(r['archive']['sha256'], CELL_LIMIT)}</td><td>{_fmt(r['archive']['n_members'])}"
                   f"</td><td>{html_text(r['labels']['source'], CELL_LIMIT)}</td></tr>" for n, r in zip(names, reports))
    parts.append(f"<table><tr><th>method</th><th>path</th><th>sha256</th><th>members</th><th>labels from</th></tr>"
                 f"{rows}</table>")
    parts.append("<h2>Figures</h2>")
    for caption, svg in figures:
        parts.append(f"<figure>{svg}<figcaption>{html_text(caption)}</figcaption></figure>")
    for n in figure_notes:
        parts.append(f"<p class='note'>note: {html_text(n)}</p>")
    for name, r in zip(names, reports):
        for n in r.get("notes", ()):
            parts.append(f"<p class='note'>note ({html_text(name, CELL_LIMIT)}): {html_text(n, 10 * CELL_LIMIT)}</p>")
    settings = json.dumps(protocol, indent=2, sort_keys=True)
    parts.append(f"<h2>Settings</h2><pre><code>{html.escape(settings)}</code></pre></body></html>")
    return "\n".join(parts)


def write_compare_html(reports: Sequence[Mapping[str, Any]], names: Sequence[str], path: str | Path, *,
                       ensemble: str | None = None, limits=None, comparison: Mapping[str, Any] | None = None
                       ) -> tuple[Path, tuple[str, ...]]:
    """Draw the comparison figures in the limited child (under ``limits``, a ``SandboxLimits``; its defaults
    when None) and write :func:`render_compare_html` to ``path`` (UTF-8); returns the path and the figure notes."""
    from .plot_sandbox import draw_compare_figures
    from .sandbox import SandboxLimits

    drawn = draw_compare_figures(reports, names, SandboxLimits() if limits is None else limits)
    path = Path(path)
    path.write_text(render_compare_html(reports, names, figures=drawn.figures, figure_notes=drawn.notes,
                                        ensemble=ensemble, comparison=comparison), encoding="utf-8")
    return path, drawn.notes
