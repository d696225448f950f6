# SPDX-License-Identifier: MIT
"""The leaderboard as one self-contained HTML page: a table sortable by any column (a few lines of inline JS).

Every string from an upload (its name, its findings, its method and model attributes) is untrusted: all of it is
escaped (``scoring/text.py``'s :func:`~ubench.scoring.text.html_text`: control, bidi and surrogate characters as
visible escapes, then HTML escaping, cut to :data:`CELL_LIMIT` characters), and the page's
Content-Security-Policy allows no external resource, so a hostile upload cannot turn the page into a script. Each
row is rendered on its own: a row that cannot be rendered becomes a row that says so, and the page is written
(issue #16 item 1: one upload's invalid UTF-8 kept ``index.html`` from ever being updated again).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .text import html_text

__all__ = ["render_html", "CELL_LIMIT", "BELOW_ONE", "csv_metric_keys", "dee_below_one", "finding_path", "metric_cell"]

#: Characters of one upload string (name, method, model, finding) shown in a cell.
CELL_LIMIT = 200

_LABELS = {
    "cll": "CLL", "dee": "DEE", "accuracy": "accuracy", "ood_auroc_total": "OOD AUROC",
    "calibrated_brier": "calibrated Brier", "nll": "NLL", "brier": "Brier", "ece": "ECE", "tace": "TACE",
    "uce": "UCE",
}

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse}th,td{padding:4px 8px;border-bottom:1px solid #ddd;text-align:right}
th{cursor:pointer;background:#f4f4f4;position:sticky;top:0}th.nc{color:#888;font-style:italic}
td.l,th.l{text-align:left}tr.bad td{color:#a00}details{text-align:left}code{font-size:12px}
.meta{color:#555;margin-bottom:1em}
"""

_JS = """
document.querySelectorAll('th').forEach(function(th,col){th.addEventListener('click',function(){
var tb=th.closest('table').tBodies[0],rows=Array.from(tb.rows),asc=th.dataset.asc!=='1';th.dataset.asc=asc?'1':'0';
rows.sort(function(a,b){var x=a.cells[col].dataset.v,y=b.cells[col].dataset.v;
if(x===undefined||x===''){return 1}if(y===undefined||y===''){return -1}
var p=parseFloat(x),q=parseFloat(y);var c=(isNaN(p)||isNaN(q))?x.localeCompare(y):p-q;return asc?c:-c});
rows.forEach(function(r){tb.appendChild(r)})})});
"""


#: The cell of a DEE below one deep-ensemble member (``null`` in the JSON with ``dee_below_one``), never 1 or empty.
BELOW_ONE = "< 1"


def _e(value: Any) -> str:
    return html_text(value, CELL_LIMIT)


def csv_metric_keys(keys: Sequence[str]) -> list[str]:
    """The metric columns of a board's CSV: the board's, with ``dee_below_one`` right after ``dee``: a DEE below
    one deep-ensemble member is an empty ``dee`` cell (null, never 1) that this flag tells from "unavailable"."""
    out = []
    for k in keys:
        out += [k, "dee_below_one"] if k == "dee" else [k]
    return out


def dee_below_one(row: dict[str, Any], key: str) -> bool:
    """Whether ``row``'s cell of ``key`` is a DEE below one deep-ensemble member (shown as :data:`BELOW_ONE`, sorted
    below every DEE of at least 1)."""
    return key == "dee" and row["metrics"].get("dee") is None and bool(row.get("dee_below_one"))


def metric_cell(row: dict[str, Any], key: str, text: str) -> str:
    """A metric's ``<td>``: sortable by the value (``data-v``), showing ``text``; a DEE below one member reads
    :data:`BELOW_ONE` and sorts below every DEE of at least 1."""
    if dee_below_one(row, key):
        return f'<td data-v="0">{_e(BELOW_ONE)}</td>'
    v = row["metrics"].get(key)
    return f'<td data-v="{"" if v is None else repr(float(v))}">{_e(text)}</td>'


def finding_path(finding: dict[str, Any], upload: Any) -> Any:
    """Where a finding is, as a page shows it: the upload's name for a finding about the file as a whole (``<file>``
    in the JSON), else its HDF5 path."""
    path = finding.get("path")
    return upload if path == "<file>" and upload else path


def _fmt(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:.4f}" if abs(value) < 1000 else f"{value:.4g}"


def _row(r: dict[str, Any], cols: list[dict[str, Any]]) -> str:
    ok = r["status"] == "ok"
    iv = r.get("rank_interval")
    tie = " =" if r.get("tied_with_leader") else ""
    cells = [f'<td class="l" data-v="{_e(r["rank"] if r["rank"] is not None else "")}">{_e(r["rank"])}</td>',
             f'<td class="l" data-v="{_e(iv[1] if iv else "")}">{_e(f"[{iv[0]}, {iv[1]}]{tie}" if iv else "")}</td>',
             f'<td class="l" data-v="{_e(r["archive"])}"><code>{_e(r["archive"])}</code></td>',
             f'<td class="l" data-v="{_e(r["method"])}">{_e(r["method"])}</td>',
             f'<td class="l" data-v="{_e(r["model"])}">{_e(r["model"])}</td>',
             f'<td data-v="{_e(r["n_members"])}">{_e(r["n_members"])}</td>']
    cells += [metric_cell(r, c["key"], _fmt(r["metrics"].get(c["key"]))) for c in cols]
    if ok:
        status = "scored" + (" (cached)" if r["cached"] else "")
    else:
        items = "".join(f"<li><code>[{_e(f.get('check'))}]</code> {_e(finding_path(f, r['archive']))}: "
                        f"{_e(f.get('message'))}</li>" for f in r["findings"][:20])
        status = (f"<details><summary>{_e(r['status'])} ({len(r['findings'])} finding(s))</summary>"
                  f"<ul>{items}</ul></details>")
    cells.append(f'<td class="l" data-v="{_e(r["status"])}">{status}</td>')
    return f'<tr class="{"" if ok else "bad"}">{"".join(cells)}</tr>'


def _unrenderable_row(index: int, r: Any, n_metric_columns: int, exc: Exception) -> str:
    """The row of an upload whose record cannot be shown (a damaged or unexpected result): it says so. One cell
    per column, as in every other row, so sorting by any column still works."""
    name = r.get("archive") if isinstance(r, dict) else None
    why = f"this row cannot be shown ({type(exc).__name__}: {exc}); see leaderboard.json, row {index}"
    cells = ['<td class="l" data-v=""></td>', '<td class="l" data-v=""></td>',
             f'<td class="l" data-v="{_e(name)}"><code>{_e(name)}</code></td>',
             f'<td class="l" data-v="">{_e(why)}</td>', '<td class="l" data-v=""></td>', '<td data-v=""></td>']
    cells += ['<td data-v=""></td>'] * n_metric_columns
    cells.append('<td class="l" data-v="unrenderable">unrenderable</td>')
    return f'<tr class="bad">{"".join(cells)}</tr>'


def _rank_note(board: dict[str, Any]) -> str:
    info = board.get("rank_intervals")
    if not info or not info.get("rows"):
        return ""
    level = f"{100 * float(info['level']):g}"
    return (f"Rank interval: the {_e(level)} % interval of each row's rank by "
            f"{_e(info['metric'])} over {_e(info['replicates'])} paired bootstrap resamples of the test samples "
            "(every row resampled alike); = marks rows whose interval overlaps the leader's (tied with it). The order "
            "is by the point values. ")


def render_html(board: dict[str, Any]) -> str:
    """The page for a leaderboard dict from ``build_board``."""
    cols = board["columns"]
    cfg = board["config"]
    proto = cfg.get("protocol") or {}
    head = ['<th class="l" title="rank by CLL">#</th>',
            '<th class="l" title="paired bootstrap interval of the rank; = tied with the leader">rank interval</th>',
            '<th class="l">upload</th>', '<th class="l">method</th>',
            '<th class="l">model</th>', '<th>M</th>']
    for c in cols:
        label = _LABELS.get(c["key"], c["key"])
        if c["comparable"] is False:
            head.append(f'<th class="nc" title="not comparable across models ({_e(c["key"])})">{_e(label)} †</th>')
        else:
            head.append(f'<th title="{_e(c["key"])}">{_e(label)}</th>')
    head.append('<th class="l">status</th>')
    body = []
    for i, r in enumerate(board["rows"]):
        try:
            body.append(_row(r, cols))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            body.append(_unrenderable_row(i, r, len(cols), exc))
    ens = board.get("ensemble")
    ens_line = ""
    if ens:
        ens_line = (f"<div>DEE against the deep ensemble <code>{_e(ens.get('archive'))}</code>"
                    f"{'' if ens.get('cll_curve') else ': ' + _e(ens.get('note'))}</div>")
    counts = ", ".join(f"{_e(k)}: {v}" for k, v in board["counts"].items())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; \
script-src 'unsafe-inline'">
<title>ubench leaderboard</title><style>{_CSS}</style></head><body>
<h1>ubench leaderboard</h1>
<div class="meta">ubench {_e(board["ubench_version"])}, generated {_e(board["generated"])};
protocol <code>{_e(proto.get("name"))}</code>{" (overrides: " + _e(", ".join(proto.get("overrides") or [])) + ")"
                                                if proto.get("overrides") else ""};
labels from reference <code>{_e(cfg.get("reference_sha256"))}</code>; {counts}.</div>
{ens_line}
<table><thead><tr>{"".join(head)}</tr></thead>
<tbody>
{chr(10).join(body)}
</tbody></table>
<p>Columns marked † are not comparable across models (uncalibrated NLL/ECE/TACE depend on the temperature a model
happens to have; misclassification AUROC is a different task for every model). Rank by CLL (calibrated
log-likelihood, higher is better). {_rank_note(board)}Click a header to sort.</p>
<script>{_JS}</script>
</body></html>
"""
