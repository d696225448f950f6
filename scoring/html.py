# SPDX-License-Identifier: MIT
"""A self-contained HTML report: tables and inline SVG figures in one file, no scripts, no external resources."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .tables import shift_rows

__all__ = ["render_html", "write_html"]

_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th:first-child,td:first-child{text-align:left}
figure{margin:1.5em 0}figure svg{max-width:100%;height:auto}figcaption{font-size:90%;color:#444}.note{color:#844}code{font-size:90%}"""


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4f}"
    return "-" if v is None else html.escape(str(v))


def _table(header, rows) -> str:
    h = "".join(f"<th>{html.escape(str(x))}</th>" for x in header)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(v)}</td>" for v in r) + "</tr>" for r in rows)
    return f"<table><tr>{h}</tr>{body}</table>"


def render_html(report: Mapping[str, Any], *, title: str | None = None) -> str:
    """The report as one HTML document (figures from ``scoring/plots.py``)."""
    from .plots import figures

    a = report["archive"]
    title = title or f"ubench report: {a['method']} / {a['model']} / {a['dataset']}"
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>"]
    parts.append(_table(("archive", "value"), [
        ("path", a["path"]), ("sha256", a["sha256"]), ("format version", a["format_version"]),
        ("members", a["n_members"]), ("classes", a["n_classes"]), ("labels from", report["labels"]["source"]),
        ("protocol", report["protocol"]["description"]), ("ubench", report["ubench_version"])]))
    summary = report.get("summary", {})
    comparable = set(report.get("comparability", {}).get("comparable", ()))
    if summary:
        parts.append("<h2>Summary</h2><p>* comparable across models (Ashukha et al. 2020); unmarked values are "
                     "not.</p>")
        parts.append(_table(("key", "value"), [(k + (" *" if k in comparable else ""), v)
                                               for k, v in sorted(summary.items())]))
    if report.get("shift"):
        parts.append("<h2>Shift</h2>")
        parts.append(_table(("split", "kind", "intensity", "accuracy", "NLL", "Brier", "ECE"), shift_rows(report)))
    parts.append("<h2>Figures</h2>")
    for caption, svg in figures(report):
        parts.append(f"<figure>{svg}<figcaption>{html.escape(caption)} — "
                     f"{html.escape(report['protocol']['description'])}</figcaption></figure>")
    for n in report.get("notes", ()):
        parts.append(f"<p class='note'>note: {html.escape(n)}</p>")
    settings = json.dumps(report["protocol"], indent=2, sort_keys=True)
    parts.append(f"<h2>Settings</h2><pre><code>{html.escape(settings)}</code></pre></body></html>")
    return "\n".join(parts)


def write_html(report: Mapping[str, Any], path: str | Path) -> Path:
    """Write :func:`render_html` to ``path`` (UTF-8)."""
    path = Path(path)
    path.write_text(render_html(report), encoding="utf-8")
    return path
