# SPDX-License-Identifier: MIT
"""The service's leaderboard as CSV and as self-contained HTML pages (no external resource; a strict
Content-Security-Policy; every string from an upload escaped, in :func:`row_cells` when the row is stored), from
the rows ``serve/board.py`` stores. The HTML board shows one page of rows at a time (:data:`PAGE_ROWS`) with links
to the others."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from .. import __version__
from ..scoring.leaderboard_html import _CSS, _JS, _LABELS, csv_metric_keys, metric_cell
from ..scoring.text import escape_text, html_text

__all__ = ["board_csv", "board_html", "board_tr", "row_cells", "message_page", "rank_extras", "intervals_note",
           "CSP", "PAGE_ROWS"]

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


def rank_extras(extras: str | None) -> dict[str, Any]:
    """A stored row's ``rank_interval`` ([best, worst]) and ``tied_with_leader`` from its ``extras`` (both None
    until a rank-interval computation has included the row; ``serve/board.py``)."""
    got = json.loads(extras) if extras else {}
    return {"rank_interval": got.get("rank_interval"), "tied_with_leader": got.get("tied_with_leader")}


def _interval_text(got: dict[str, Any]) -> str:
    iv = got["rank_interval"]
    return "" if not iv else f"[{iv[0]}, {iv[1]}]" + (" =" if got["tied_with_leader"] else "")


def board_csv(columns: list[dict], rows: list[tuple[int | None, str | None, str]]) -> str:
    """One line per stored row (``(rank, extras JSON, row JSON)``): rank, rank interval (``[best, worst]``, as
    ``ubench leaderboard --csv`` writes it), tied with the leader, submission, team, method, submitted, every
    metric (with ``dee``, ``dee_below_one`` after it: ``csv_metric_keys``)."""
    out = io.StringIO()
    w = csv.writer(out)
    keys = csv_metric_keys([c["key"] for c in columns])
    w.writerow(["rank", "rank_interval", "tied_with_leader", "submission", "team", "method", "submitted", *keys])
    for rank, extras, text in rows:
        r, got = json.loads(text), rank_extras(extras)
        iv = got["rank_interval"]
        w.writerow([rank, f"[{iv[0]}, {iv[1]}]" if iv else None, got["tied_with_leader"], r["submission"], _csv_text(r.get("team")),
                    _csv_text(r.get("method_name") or r["method"]), r["submitted"],
                    *[r.get(k) if k == "dee_below_one" else r["metrics"].get(k) for k in keys]])
    return out.getvalue()


def _g4(v: Any) -> str:
    return "" if v is None else f"{float(v):.4g}"


def row_cells(row: dict[str, Any], columns: list[dict]) -> str:
    """A board row's cells after its rank (team, method, date, each column's value, the report link): rendered
    once when the row is stored (serve/board.py), so a page request only joins stored cells."""
    cells = [f'<td class="l" data-v="{_e(row.get("team"))}">{_e(row.get("team"))}</td>',
             f'<td class="l" data-v="{_e(row.get("method_name") or row["method"])}">'
             f'{_e(row.get("method_name") or row["method"])}</td>',
             f'<td class="l" data-v="{_e(row["submitted"])}">{_e(row["submitted"][:19])}</td>']
    cells += [metric_cell(row, c["key"], _g4(row["metrics"].get(c["key"]))) for c in columns]
    cells.append(f'<td class="l"><a href="/submissions/{_e(row["submission"])}">report</a></td>')
    return "".join(cells)


def board_tr(rank: int | None, extras: str | None, cells: str) -> str:
    """A stored row on a page: its rank and rank-interval cells (the interval sorts by its worst rank, as on
    ``ubench leaderboard``'s page), then its stored :func:`row_cells`."""
    shown = "" if rank is None else rank
    got = rank_extras(extras)
    worst = got["rank_interval"][1] if got["rank_interval"] else ""
    return (f'<tr><td class="l" data-v="{shown}">{shown}</td>'
            f'<td class="l" data-v="{worst}">{_e(_interval_text(got))}</td>{cells}</tr>')


def intervals_note(info: dict | None, built_from: int | None) -> str:
    """The line under the board about its rank intervals: how they were computed, when, and, when rows were scored
    after that computation (the service recomputes them at most every few times their cost), that those rows have
    none yet."""
    if not info:
        return "Rank intervals: not computed yet."
    if not info.get("rows"):
        return f"Rank intervals: {info.get('note') or 'none'} (as of {info.get('computed')})."
    level = f"{100 * float(info['level']):g}"
    text = (f"Rank interval: the {level} % interval of each row's rank by {info['metric']} over "
            f"{info['replicates']} paired bootstrap resamples of the test samples (every row resampled alike); = "
            f"marks rows whose interval overlaps the leader's (tied with it); the order is by the point values. "
            f"Computed at {info['computed']} over the {info['rows']} ranked rows then on the board")
    if info.get("built_from") != built_from:
        text += ("; rows scored since show none, and the others' intervals do not count them yet, until the next "
                 "computation (a large board is recomputed at most every few times the computation's cost)")
    return text + "."


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


def board_html(columns: list[dict], config: dict, rows: str, *, page: int = 1, total: int = 0,
               title: str = "ubench leaderboard", note: str = "") -> str:
    """One page of the board around its ``rows`` (:func:`board_tr` of each, joined); ``total`` rows in all;
    ``note`` (:func:`intervals_note`) under the table."""
    head = ['<th class="l">#</th>',
            '<th class="l" title="paired bootstrap interval of the rank; = tied with the leader">rank interval</th>',
            '<th class="l">team</th>', '<th class="l">method</th>', '<th class="l">submitted</th>']
    for c in columns:
        label = _LABELS.get(c["key"], c["key"])
        mark = "" if c["comparable"] else " †"
        cls = ' class="nc"' if c["comparable"] is False else ""
        head.append(f'<th{cls} title="{_e(c["key"])}">{_e(label)}{"*" if c["comparable"] else ""}{mark}</th>')
    head.append('<th class="l">report</th>')
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<title>{_e(title)}</title><style>{_CSS}</style></head><body>
<h1>{_e(title)}</h1>
<div class="meta">ubench {_e(__version__)}; protocol <code>{_e((config.get("protocol") or {}).get("name"))}</code>;
labels from the host's reference <code>{_e(config.get("reference_sha256"))}</code>.</div>
{_pager(page, total)}
<table id="board"><thead><tr>{"".join(head)}</tr></thead>
<tbody>
{rows}
</tbody></table>
<p>Columns marked * may be compared across models, † may not. Ranked by CLL (higher is better); click a header
to sort this page.</p>
<p class="meta" id="rank-intervals">{html_text(note, limit=2000)}</p>
<script>{_JS}</script>
</body></html>
"""
