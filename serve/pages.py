# SPDX-License-Identifier: MIT
"""The service's leaderboard as CSV and as self-contained HTML pages (no external resource; a strict
Content-Security-Policy; every string from an upload escaped), from the rows ``serve/board.py`` stores. The HTML
board shows one page of rows at a time (:data:`PAGE_ROWS`) with links to the others."""

from __future__ import annotations

import csv
import io
from typing import Any

from ..scoring.leaderboard_html import _CSS, _JS, _LABELS
from ..scoring.text import escape_text, html_text

__all__ = ["board_csv", "board_html", "message_page", "CSP", "PAGE_ROWS"]

#: The page's Content-Security-Policy: nothing external, inline style and the sorting script only.
CSP = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
#: Rows on one HTML page of the board.
PAGE_ROWS = 100


def _e(v: Any) -> str:
    return html_text("" if v is None else str(v), limit=200)


def message_page(text: str) -> str:
    """A page that says one thing (a hidden board, a missing report)."""
    return f"<!DOCTYPE html><title>ubench</title><p>{_e(text)}</p>"


def _csv_text(v: Any) -> str:
    """An upload's string for a CSV cell: control characters made visible, and a leading ``= + - @`` neutralised
    with a quote so a spreadsheet does not run it as a formula."""
    text = escape_text("" if v is None else v)
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text


def board_csv(board: dict[str, Any]) -> str:
    """One line per row: rank, submission, team, method, submitted, then every metric column."""
    out = io.StringIO()
    w = csv.writer(out)
    keys = [c["key"] for c in board["columns"]]
    w.writerow(["rank", "submission", "team", "method", "submitted", *keys])
    for r in board["rows"]:
        w.writerow([r["rank"], r["submission"], _csv_text(r.get("team")), _csv_text(r.get("method_name") or r["method"]),
                    r["submitted"], *[r["metrics"].get(k) for k in keys]])
    return out.getvalue()


def _pager(page: int, total: int) -> str:
    pages = max(1, -(-total // PAGE_ROWS))
    first, last = (page - 1) * PAGE_ROWS + 1, min(page * PAGE_ROWS, total)
    links = []
    if page > 1:
        links.append(f'<a href="/?page={page - 1}">previous</a>')
    if page < pages:
        links.append(f'<a href="/?page={page + 1}">next</a>')
    shown = f"rows {first}-{last} of {total}" if total else "no scored submission yet"
    return f'<p class="meta">{shown} (page {page} of {pages}) {" ".join(links)}</p>'


def board_html(board: dict[str, Any], *, page: int = 1, total: int | None = None, title: str = "ubench leaderboard",
               note: str = "") -> str:
    """One page of the board: ``board["rows"]`` are that page's rows, ``total`` the board's row count."""
    cols = board["columns"]
    head = ['<th class="l">#</th>', '<th class="l">team</th>', '<th class="l">method</th>',
            '<th class="l">submitted</th>']
    for c in cols:
        label = _LABELS.get(c["key"], c["key"])
        mark = "" if c["comparable"] else " †"
        cls = ' class="nc"' if c["comparable"] is False else ""
        head.append(f'<th{cls} title="{_e(c["key"])}">{_e(label)}{"*" if c["comparable"] else ""}{mark}</th>')
    head.append('<th class="l">report</th>')
    body = []
    for r in board["rows"]:
        cells = [f'<td class="l" data-v="{_e(r["rank"])}">{_e(r["rank"])}</td>',
                 f'<td class="l" data-v="{_e(r.get("team"))}">{_e(r.get("team"))}</td>',
                 f'<td class="l" data-v="{_e(r.get("method_name") or r["method"])}">'
                 f'{_e(r.get("method_name") or r["method"])}</td>',
                 f'<td class="l" data-v="{_e(r["submitted"])}">{_e(r["submitted"][:19])}</td>']
        for c in cols:
            v = r["metrics"].get(c["key"])
            cells.append(f'<td data-v="{"" if v is None else repr(float(v))}">'
                         f'{"" if v is None else f"{float(v):.4g}"}</td>')
        cells.append(f'<td class="l"><a href="/submissions/{_e(r["submission"])}">report</a></td>')
        body.append(f'<tr>{"".join(cells)}</tr>')
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<title>{_e(title)}</title><style>{_CSS}</style></head><body>
<h1>{_e(title)}</h1>
<div class="meta">ubench {_e(board["ubench_version"])}; protocol <code>{_e((board["config"].get("protocol") or {}).get("name"))}</code>;
labels from the host's reference <code>{_e(board["config"].get("reference_sha256"))}</code>. {_e(note)}</div>
{_pager(page, len(board["rows"]) if total is None else total)}
<table id="board"><thead><tr>{"".join(head)}</tr></thead>
<tbody>
{chr(10).join(body)}
</tbody></table>
<p>Columns marked * may be compared across models, † may not. Ranked by CLL (higher is better); click a header
to sort this page.</p>
<script>{_JS}</script>
</body></html>
"""
