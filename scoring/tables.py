# SPDX-License-Identifier: MIT
"""Tables of score reports (``ubench score``, ``compare``, ``dee``, ``leaderboard``): dicts in, strings out.

Two renderings of the same cells: plain fixed-width text (no ANSI, no box art: what a pipe, a log file and the
tests get) and, with ``styled=True`` (the CLI asks for it when stdout is a terminal), a ``rich`` table. Numbers
are compact (:func:`compact`: ``15``, ``0.2766``, ``1.2e-05``), splits in natural order (:func:`natural_key`:
``shift_2`` before ``shift_10``). :func:`report_rows` is the one flat view of reports that ``--csv`` and
:func:`report_frame` (a pandas DataFrame, for people who plot in their own notebooks) share.

Every string from a report (archive strings, file names, notes) goes through ``scoring/text.py``
(:func:`~ubench.scoring.text.escape_text`; a table cell is also cut to :data:`CELL_LIMIT` characters), so an
upload's control sequences never reach the terminal; in a styled table each cell is a ``rich.text.Text``, so
``[bold]`` in an upload is shown, not interpreted as markup.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..archive_schema.spec import LATENCY_ATTRIBUTES
from .leaderboard_html import BELOW_ONE, csv_metric_keys, dee_below_one
from .text import escape_text, shorten

__all__ = ["format_score", "with_interval", "format_compare", "format_groups", "format_dee", "format_notes", "format_leaderboard", "format_csv",
           "leaderboard_csv", "report_rows", "report_frame", "compact", "natural_key", "COMPARE_COLUMNS",
           "DISPLAY_NAMES", "HIGHER_IS_BETTER", "LOWER_IS_BETTER", "display_name", "direction",
           "compare_cell", "compare_columns"]

#: How a report key is named for people: the labels of the HTML report, the comparison page and the leaderboard
#: (``scoring/html.py``, ``scoring/leaderboard_html.py``), one place for the terminal tables too.
DISPLAY_NAMES = {
    "accuracy": "accuracy", "nll": "NLL", "brier": "Brier", "ece": "ECE", "tace": "TACE", "uce": "UCE",
    "l2_ce_debiased": "debiased L2 calibration error",
    "misclassification_auroc_total": "misclassification AUROC (total)",
    "misclassification_auroc_confidence": "misclassification AUROC (confidence)",
    "misclassification_auroc_knowledge": "misclassification AUROC (knowledge)",
    "aurc_confidence": "AURC (confidence)", "decision_cost": "decision cost",
    "cll": "CLL (calibrated log-likelihood)", "temperature": "temperature T", "temperature_std": "std of T over folds",
    "calibrated_accuracy": "calibrated accuracy", "calibrated_brier": "calibrated Brier",
    "calibrated_ece": "calibrated ECE", "dee": "DEE (deep-ensemble equivalent)",
    "ood_auroc_total": "OOD AUROC (total)", "ood_auroc_knowledge": "OOD AUROC (knowledge)",
    "ood_auroc_confidence": "OOD AUROC (confidence)", "ood_aupr_total": "OOD AUPR (total)",
    "ood_fpr95_total": "OOD FPR at 95% TPR (total)", "shift_accuracy_median": "shift accuracy (median)",
    "posterior_agreement": "agreement with HMC", "posterior_total_variation": "total variation from HMC",
}
#: Keys where a larger value is better (↑ in the tables; the best value of a comparison is the largest).
HIGHER_IS_BETTER = frozenset({
    "accuracy", "cll", "dee", "ood_auroc_total", "ood_auroc_knowledge", "ood_auroc_confidence", "ood_aupr_total",
    "shift_accuracy_median", "posterior_agreement", "calibrated_accuracy", "misclassification_auroc_total",
    "misclassification_auroc_confidence", "misclassification_auroc_knowledge",
})
#: Keys where a smaller value is better (↓). A key in neither (the temperature) has no better direction.
LOWER_IS_BETTER = frozenset({
    "nll", "brier", "ece", "l2_ce_debiased", "tace", "uce", "aurc_confidence", "decision_cost", "calibrated_brier",
    "calibrated_ece", "calibrated_nll", "ood_fpr95_total", "posterior_total_variation",
})


def direction(key: str) -> str:
    """``↑`` when a larger value of ``key`` is better, ``↓`` when a smaller one is, else ``""``."""
    return "↑" if key in HIGHER_IS_BETTER else "↓" if key in LOWER_IS_BETTER else ""


def display_name(key: str, *, arrow: bool = True) -> str:
    """The name a table shows for report key ``key`` (:data:`DISPLAY_NAMES`, else the key), with its
    :func:`direction` after it: ``display_name("nll") == "NLL ↓"``."""
    name = DISPLAY_NAMES.get(key, key)
    return f"{name} {direction(key)}" if arrow and direction(key) else name


#: The line under a table whose names carry arrows.
_ARROWS = "↑ higher is better, ↓ lower is better"

#: Columns of ``ubench compare``: (summary key, header). Comparability comes from the report's own lists.
COMPARE_COLUMNS = (
    ("accuracy", "acc"), ("cll", "CLL"), ("dee", "DEE"), ("nll", "NLL"), ("brier", "Brier"), ("ece", "ECE"),
    ("tace", "TACE"), ("uce", "UCE"), ("temperature", "T"), ("misclassification_auroc_confidence", "misAUROC"),
    ("ood_auroc_total", "OOD-AUROC(tot)"), ("ood_auroc_knowledge", "OOD-AUROC(kn)"),
    ("shift_accuracy_median", "shift acc(med)"), ("posterior_agreement", "agree(HMC)"),
    ("posterior_total_variation", "TV(HMC)"),
)
#: Characters of one table cell or archive string shown (a 100k-character shift kind would make every row
#: of the shift table 100k wide); the rest is counted, not shown.
CELL_LIMIT = 120
#: Significant digits of a non-integer number in a table (integers are shown whole).
DIGITS = 4


def compact(v: float) -> str:
    """A number as a person reads it: integral values without a fraction (``15``, not ``15.0000``), others with
    :data:`DIGITS` significant digits and never fewer digits than their integer part (``0.2766``, ``1.2e-05``,
    ``12346``); ``nan``/``inf`` as Python spells them.

    Examples
    --------
    >>> [compact(x) for x in (15.0, 0.27661, 0.000012345, 12345.6, -0.5)]
    ['15', '0.2766', '1.234e-05', '12346', '-0.5']
    """
    x = float(v)
    if not math.isfinite(x):
        return str(x)
    if x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    int_digits = int(math.floor(math.log10(abs(x)))) + 1 if x else 1
    digits = int_digits if DIGITS < int_digits <= 15 else DIGITS
    return f"{x:.{digits}g}"


_DIGIT_RUNS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple:
    """Sort key putting ``shift_2`` before ``shift_10`` (digit runs compare as numbers, the rest as text)."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part)
                 for part in _DIGIT_RUNS.split(str(name)) if part)


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return compact(v)
    return shorten(v, CELL_LIMIT)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], *, styled: bool = False) -> list[str]:
    """The lines of one table: fixed-width plain text, or a ``rich`` table (ANSI) when ``styled``."""
    cells = [[escape_text(h) for h in header]] + [[_fmt(v) for v in r] for r in rows]
    if styled:
        return _rich_table(cells)
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = []
    for k, r in enumerate(cells):
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def _rich_table(cells: list[list[str]]) -> list[str]:
    """Render already escaped cells with rich (header in bold, a rule under it); each cell a ``Text``, so no
    markup or emoji code in a cell is interpreted."""
    import shutil

    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False, show_edge=False)
    for i, h in enumerate(cells[0]):
        table.add_column(Text(h), justify="left" if i == 0 else "right", overflow="fold",
                         min_width=max(len(r[i]) for r in cells))
    for r in cells[1:]:
        table.add_row(*(Text(c) for c in r))
    # never fold a cell: a table wider than the terminal is as wide as its cells (the terminal wraps the lines,
    # as it does the plain table's)
    natural = sum(max(len(r[i]) for r in cells) + 3 for i in range(len(cells[0])))
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, color_system="standard", highlight=False, emoji=False,
                      markup=False, width=max(natural, shutil.get_terminal_size((120, 24)).columns))
    console.print(table)
    return out.getvalue().rstrip("\n").split("\n")


def with_interval(value: Any, interval: Sequence[float] | None) -> Any:
    """``value [low, high]`` (compact numbers) when the report has an interval for it, else the value itself."""
    if interval is None or value is None or isinstance(value, bool):
        return value
    return f"{_fmt(value)} [{compact(interval[0])}, {compact(interval[1])}]"


def _split_intervals(report: Mapping[str, Any], split: str) -> Mapping[str, Any]:
    return ((report.get("intervals") or {}).get("splits") or {}).get(split) or {}


def _split_items(section: Mapping[str, Any]) -> list[tuple[str, Any]]:
    return sorted(section.items(), key=lambda kv: natural_key(kv[0]))


_IN_DOMAIN_KEYS = ("accuracy", "nll", "brier", "ece", "l2_ce_debiased", "tace", "uce",
                   "misclassification_auroc_total", "misclassification_auroc_confidence", "aurc_confidence",
                   "decision_cost")
#: The calibrated rows: CLL and not calibrated_nll, which is -CLL (the same number twice, with opposite signs).
_CAL_KEYS = ("cll", "temperature", "temperature_std", "calibrated_accuracy", "calibrated_brier", "calibrated_ece")


def _dee_text(value: Any, below: Any, beyond: Any = False) -> str:
    """A DEE (or bound) cell: ``< 1`` below one deep-ensemble member, ``≥ K`` beyond the reference, else the number."""
    if value is None:
        return "< 1" if below else "-"
    return ("≥ " if beyond else "") + compact(value)


def format_score(report: Mapping[str, Any], *, styled: bool = False) -> str:
    """The terminal view of one score report (``styled``: rich tables, for a terminal)."""
    a = report["archive"]
    lines = [f"{escape_text(a['path'])}  method {_fmt(a['method'])}, model {_fmt(a['model'])}, "
             f"dataset {_fmt(a['dataset'])}, M = {a['n_members']}, C = {a['n_classes']}",
             f"labels from {escape_text(report['labels']['source'])}"
             + (f" {escape_text(report['labels']['reference']['path'])}" if report["labels"]["reference"] else ""),
             escape_text(report["protocol"]["description"]), ""]
    iv = report.get("intervals")
    if iv:
        lines.insert(-1, f"[low, high]: {100 * iv['level']:g} % {iv['method']} bootstrap intervals over the test "
                         f"samples ({iv['replicates']} replicates, seed {iv['seed']})")
    for name, sec in _split_items(report["in_domain"]):
        lines.append(f"in-domain split {_fmt(name)} (N = {sec['n_samples']}; {_ARROWS})")
        ivs = _split_intervals(report, name)
        rows = [(display_name(k), with_interval(sec[k], ivs.get(k))) for k in _IN_DOMAIN_KEYS if k in sec]
        cal = sec.get("calibrated") or {}
        rows += [(display_name(k), with_interval(cal[k], ivs.get(k))) for k in _CAL_KEYS if k in cal]
        lines += ["  " + ln for ln in _table(("metric", "value"), rows, styled=styled)] + [""]
        if sec.get("calibrators"):
            lines.append(f"  post-hoc calibrators, held-out under test-time CV ({_fmt(name)})")
            lines += ["  " + ln for ln in _table(("calibrator", "NLL ↓", "Brier ↓", "ECE ↓"),
                                                 [(c, v["nll"], v["brier"], v["ece"])
                                                  for c, v in sec["calibrators"].items()], styled=styled)] + [""]
    if report["ood"]:
        lines.append("OOD detection (positive = OOD)")
        rows = [(name, s["against"], *(with_interval(s[k], _split_intervals(report, name).get(k)) for k in (
                 "ood_auroc_total", "ood_auroc_knowledge", "ood_auroc_confidence", "ood_aupr_total",
                 "ood_fpr95_total"))) for name, s in _split_items(report["ood"])]
        lines += ["  " + ln for ln in _table(("split", "against", "AUROC tot ↑", "AUROC kn ↑", "AUROC conf ↑",
                                               "AUPR tot ↑", "FPR95 tot ↓"), rows, styled=styled)] + [""]
    if report.get("method_scores"):  # method-specific and logit scores (format 1.1)
        from .method_score_view import METHOD_SCORE_NOTE, method_score_table

        lines.append(METHOD_SCORE_NOTE)
        lines += ["  " + ln for ln in _table(*method_score_table(report), styled=styled)] + [""]
    if report["shift"]:
        lines.append("shift")
        lines += ["  " + ln for ln in _table(("split", "kind", "intensity", "accuracy ↑", "NLL ↓", "Brier ↓",
                                               "ECE ↓"), shift_rows(report), styled=styled)]
        for group in report["shift_summary"]["groups"]:
            if len(group["kinds"]) < 2:
                continue
            rows = [(k, v["n_splits"], v["accuracy"]["q1"], v["accuracy"]["median"], v["accuracy"]["q3"],
                     v["ece"]["median"]) for k, v in group["by_intensity"].items()]
            lines += ["", f"  quartiles over shift kinds per intensity ({', '.join(map(_fmt, group['kinds']))})"]
            lines += ["  " + ln for ln in _table(("intensity", "kinds", "accuracy q1 ↑", "accuracy median ↑",
                                                   "accuracy q3 ↑", "ECE median ↓"), rows, styled=styled)]
        lines.append("")
    if report["archive"].get("latency"):
        lines.append("accuracy against latency (URSABench; ubench latency --record-into)")
        lines += ["  " + ln for ln in _table(*latency_table([report], [a["method"]]), styled=styled)] + [""]
    if report.get("dee"):
        d = report["dee"]
        last = d["curve"][-1]
        below = last.get("below_reference")
        lines.append(f"DEE against {escape_text(d['ensemble']['path'])} ({d['ensemble']['n_members']} members): "
                     f"{_dee_text(last['dee'], below, last['beyond_reference'])} (bounds "
                     f"{_dee_text(last['dee_lower'], True)} to {_dee_text(last['dee_upper'], True)})"
                     + (" — beyond the reference" if last["beyond_reference"] else "")
                     + (" — below one deep-ensemble member" if below else ""))
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def latency_table(reports: Sequence[Mapping[str, Any]], names: Sequence[str]) -> tuple[list[str], list[list]]:
    """URSABench's accuracy-against-latency table: (header, rows) of the reports whose archive carries latency
    (SPEC.md 5.2): accuracy, NLL, the ensemble's per-batch p50 and p95 run member after member, the fused p50,
    throughput at the largest batch, model MiB and how it was timed."""
    header = ["method", "acc", "NLL", "members", "batch", "p50 ms", "p95 ms", "fused p50 ms", "samples/s",
              "at batch", "model MiB", "timed with"]
    rows = []
    for name, r in zip(names, reports):
        lat = r["archive"].get("latency")
        if not lat:
            continue
        rows.append([name, r["summary"].get("accuracy"), r["summary"].get("nll"), lat.get("latency_members"),
                     lat.get("latency_batch_size"), lat["latency_p50_ms"], lat.get("latency_p95_ms"),
                     lat.get("latency_fused_p50_ms"), lat.get("latency_throughput_per_s"),
                     lat.get("latency_throughput_batch_size"),
                     None if lat.get("latency_model_bytes") is None else lat["latency_model_bytes"] / 2 ** 20,
                     f"{lat.get('latency_backend', '?')} {lat.get('latency_precision', '')} "
                     + (f"on {lat['latency_device']}" if lat.get("latency_device") else
                        f"{lat.get('latency_threads', '?')} thread(s)")])
    return header, rows


def format_notes(reports: Sequence[Mapping[str, Any]], names: Sequence[str] | None = None) -> str:
    """Every report's notes, one ``note:`` line each (prefixed by the archive's name when there are several): for
    stderr, so that stdout holds only the results."""
    lines = []
    for i, r in enumerate(reports):
        prefix = f"{escape_text(names[i])}: " if names is not None and len(reports) > 1 else ""
        lines += [f"note: {prefix}{escape_text(n)}" for n in r.get("notes", ())]
    return "".join(line + "\n" for line in lines)


def shift_rows(report: Mapping[str, Any]) -> list[tuple]:
    """(split, kind, intensity, accuracy, NLL, Brier, ECE) of every shift split, by kind then numeric intensity
    then natural split name (a report that went through JSON has its splits in name order, where rotate_105 sorts
    before rotate_15)."""
    rows = [(name, s["shift_kind"], s["shift_intensity"],
             *(with_interval(s[k], _split_intervals(report, name).get(k)) for k in ("accuracy", "nll", "brier", "ece")))
            for name, s in report["shift"].items()]
    return sorted(rows, key=lambda r: (r[1], r[2], natural_key(r[0])))


def _paired_mark(comparison: Mapping[str, Any] | None, key: str, name: str) -> str:
    """``^`` for the best of a column, ``~`` for a method not distinguishable from it, else nothing (attached to
    the number, so that a cell stays one word for whoever splits the table on white space)."""
    if not comparison or key not in comparison.get("best", {}):
        return ""
    if comparison["best"][key] == name:
        return "^"
    return "~" if name in comparison["tied"].get(key, ()) else ""


def format_compare(reports: Sequence[Mapping[str, Any]], names: Sequence[str], *, styled: bool = False,
                   comparison: Mapping[str, Any] | None = None) -> str:
    """One table, methods as rows; ``*`` marks columns comparable across models (Ashukha et al. 2020). With
    ``comparison`` (``scoring/compare.py``'s paired section) ``^`` marks each column's best and ``~`` every method
    not distinguishable from it (the intervals themselves are in ``--json`` and ``--html``)."""
    # a key is comparable when any report says so (a report leaves out the keys undefined on its own data)
    comparable = set().union(*(r["comparability"]["comparable"] for r in reports))
    cols = compare_columns(reports)
    header = ["method", "dataset"] + [h + direction(k) + ("*" if k in comparable else "") for k, h in cols]

    def cell(r, k, n):
        v = compare_cell(r["summary"], k)
        mark = _paired_mark(comparison, k, n)
        return v if not mark or v is None else f"{_fmt(v)}{mark}"

    rows = [[n, r["archive"].get("dataset")] + [cell(r, k, n) for k, _ in cols] for n, r in zip(names, reports)]
    lines = _table(header, rows, styled=styled)
    lines += ["", "* comparable across models (calibrated metrics, DEE, accuracy, OOD/shift scores); unmarked "
              "columns (uncalibrated NLL/Brier/ECE/TACE/UCE, misclassification AUROC) are not "
              f"(Ashukha et al. 2020). {_ARROWS}."]
    iv = next((r["intervals"] for r in reports if r.get("intervals")), None)
    if comparison and comparison.get("best"):
        lines.append(f"^ best in its column; ~ not distinguishable from the best (paired bootstrap on the shared "
                     f"samples, {iv['replicates'] if iv else ''} replicates, p >= {1 - iv['level'] if iv else 0.05:g} "
                     "after Holm's adjustment over the comparisons with the best); every difference with its "
                     "interval and p-value in --json (paired), the intervals in --json and --html.")
    if reports:
        lines.append(escape_text(reports[0]["protocol"]["description"]))
    header, rows = latency_table(reports, names)
    if rows:
        lines += ["", "accuracy against latency (URSABench; archives with ubench latency --record-into)"]
        lines += _table(header, rows, styled=styled)
    return "\n".join(lines).rstrip() + "\n"


def compare_columns(reports: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """The ``(key, header)`` of :data:`COMPARE_COLUMNS` that some report has a cell for."""
    return [(k, h) for k, h in COMPARE_COLUMNS if any(compare_cell(r["summary"], k) is not None for r in reports)]


def compare_cell(summary: Mapping[str, Any], key: str) -> Any:
    """A compare cell: the summary value; a DEE below one deep-ensemble member (``null``) reads ``< 1``."""
    if key == "dee" and summary.get("dee") is None and summary.get("dee_below_one"):
        return "< 1"
    return summary.get(key)


def format_groups(comparison: Mapping[str, Any], *, styled: bool = False) -> str:
    """``compare --group-by method``: one row per method, ``mean ± sd [low, high]`` over its runs per comparable
    key (``^``/``~`` as in :func:`format_compare`)."""
    groups = comparison["groups"]
    keys = [k for k, _ in COMPARE_COLUMNS if any(k in g["summary"] for g in groups)]
    heads = dict(COMPARE_COLUMNS)
    rows = []
    for g in groups:
        label = f"{g['method']} ({g['n_runs']} runs)"
        cells = []
        for k in keys:
            s = g["summary"].get(k)
            if s is None:
                cells.append(None)
                continue
            iv = s["interval"]
            text = f"{compact(s['mean'])} ± {compact(s['sd'])}" + (
                f" [{compact(iv[0])}, {compact(iv[1])}]" if iv else "")
            cells.append(text + _paired_mark(comparison, k, label))
        rows.append([label, *cells])
    lines = _table(["method", *(heads[k] + direction(k) for k in keys)], rows, styled=styled)
    lines += ["", "mean ± sd over runs (training seeds) [interval of the method's expected value: runs and test "
              "samples resampled together, Bouthillier et al. 2021]; ^ best, ~ not distinguishable from it."]
    return "\n".join(lines).rstrip() + "\n"


def format_dee(result: Mapping[str, Any], *, styled: bool = False) -> str:
    """The terminal view of ``ubench dee``: the method's DEE per number of members, with bounds (``< 1`` where
    the CLL is below one deep-ensemble member's, ``≥ K`` beyond the reference's largest ensemble)."""
    rows = [(p["n_members"], p["cll"], _dee_text(p["dee"], p.get("below_reference"), p["beyond_reference"]),
             _dee_text(p["dee_lower"], True), _dee_text(p["dee_upper"], True)) for p in result["curve"]]
    lines = [f"DEE of {escape_text(result['method']['path'])} against deep ensemble "
             f"{escape_text(result['ensemble']['path'])}", ""]
    lines += _table(("members", "CLL ↑", "DEE ↑", "DEE lower", "DEE upper"), rows, styled=styled)
    lines += ["", escape_text(result["protocol"]["description"])]
    return "\n".join(lines).rstrip() + "\n"


#: Leaderboard columns shown in the terminal table (all of them go to ``--csv`` and the JSON).
LEADERBOARD_TABLE_KEYS = ("cll", "dee", "accuracy", "ood_auroc_total")
#: Their headers, as the leaderboard page names them (``scoring/leaderboard_html.py``).
_LEADERBOARD_NAMES = {"cll": "CLL", "dee": "DEE", "accuracy": "accuracy", "ood_auroc_total": "OOD AUROC"}


def format_leaderboard(board: Mapping[str, Any], *, styled: bool = False) -> str:
    """The terminal view of ``ubench leaderboard``: rank, upload, status and the headline columns."""
    keys = [c["key"] for c in board["columns"] if c["key"] in LEADERBOARD_TABLE_KEYS]
    rows = [[row["rank"] or "", _rank_interval_text(row), row["archive"] or "", row["status"],
             *(BELOW_ONE if dee_below_one(row, k) else row["metrics"].get(k) for k in keys)] for row in board["rows"]]
    lines = _table(["#", "rank interval", "upload", "status",
                    *(_LEADERBOARD_NAMES.get(k, k) + " " + direction(k) for k in keys)], rows, styled=styled)
    info = board.get("rank_intervals")
    if info and info.get("rows"):
        lines += ["", f"rank interval: {100 * info['level']:g} % paired bootstrap interval of the rank by "
                      f"{info['metric']} ({info['replicates']} replicates); = : tied with the leader (overlapping "
                      "intervals). The order is by the point values."]
    return "\n".join(lines) + "\n"


def _rank_interval_text(row: Mapping[str, Any]) -> str:
    iv = row.get("rank_interval")
    if not iv:
        return ""
    return f"[{iv[0]}, {iv[1]}]" + (" =" if row.get("tied_with_leader") else "")


def _csv_cell(v: Any) -> Any:
    """A CSV cell: numbers as Python writes them (full precision), ``None`` empty, strings escaped
    (``scoring/text.py``) and, when they start like a spreadsheet formula (``= + - @``), prefixed with ``'`` so
    that an upload's name cannot run a formula in the spreadsheet that opens the file (OWASP CSV injection)."""
    if v is None:
        return ""
    if isinstance(v, (bool, int, float)):
        return v
    text = escape_text(v)
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text


def _csv(columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        w.writerow([_csv_cell(r.get(c)) for c in columns])
    return out.getvalue()


def _as_reports(reports: Any) -> list[Mapping[str, Any]]:
    """One report, a list of reports, or ``compare --json``'s ``{"methods", "reports"}``, as a list."""
    if isinstance(reports, Mapping):
        return list(reports["reports"]) if "reports" in reports else [reports]
    return list(reports)


def report_rows(reports: Any, names: Sequence[str] | None = None) -> tuple[list[str], list[dict[str, Any]]]:
    """One flat row per report: ``method`` (the name given, else the archive's method), ``dataset``, ``model``,
    ``n_members``, ``archive`` (path) and every ``summary`` key, with the columns in order (``compare``'s first,
    then the rest by name), then the archives' recorded ``latency_*`` (SPEC.md 5.2) where any report has them.
    What ``--csv`` and :func:`report_frame` hold.

    ``reports`` is one report, a list of them, or the JSON of ``ubench compare --json`` (whose ``methods`` name
    the rows).
    """
    if names is None and isinstance(reports, Mapping) and "methods" in reports:
        names = reports["methods"]
    reports = _as_reports(reports)
    if names is not None and len(names) != len(reports):
        raise ValueError(f"{len(names)} names for {len(reports)} reports")
    keys = {k for r in reports for k in r["summary"]}
    first = [k for k, _ in COMPARE_COLUMNS if k in keys]
    # the archive's recorded latency (SPEC.md 5.2), after the metrics, where any report has it
    seen = {k for r in reports for k in (r["archive"].get("latency") or {})}
    latency = [k for k in LATENCY_ATTRIBUTES if k in seen]
    columns = ["method", "dataset", "model", "n_members", "archive", *first, *sorted(keys - set(first)), *latency]
    rows = []
    for i, r in enumerate(reports):
        a = r["archive"]
        rows.append({"method": a.get("method") if names is None else names[i], "dataset": a.get("dataset"),
                     "model": a.get("model"), "n_members": a.get("n_members"), "archive": a.get("path"),
                     **r["summary"], **{k: (a.get("latency") or {}).get(k) for k in latency}})
    return columns, rows


def format_csv(reports: Any, names: Sequence[str] | None = None) -> str:
    """``ubench compare --csv``: :func:`report_rows` as CSV (a header line, then one line per report)."""
    return _csv(*report_rows(reports, names))


def leaderboard_csv(board: Mapping[str, Any]) -> str:
    """``ubench leaderboard --csv``: rank, rank_interval (``[best, worst]``), tied_with_leader, upload, status,
    method, model, n_members, then every metric column of the board (as ``leaderboard.json`` orders them; with
    ``dee``, ``leaderboard_html.csv_metric_keys``'s ``dee_below_one`` after it)."""
    metric_keys = csv_metric_keys([c["key"] for c in board["columns"]])
    rows = [{"rank": r["rank"], "rank_interval": None if not r.get("rank_interval") else
             f"[{r['rank_interval'][0]}, {r['rank_interval'][1]}]", "tied_with_leader": r.get("tied_with_leader"),
             "upload": r["archive"], "status": r["status"], "method": r.get("method"), "model": r.get("model"),
             "n_members": r.get("n_members"), "dee_below_one": r.get("dee_below_one"), **r["metrics"]}
            for r in board["rows"]]
    return _csv(["rank", "rank_interval", "tied_with_leader", "upload", "status", "method", "model", "n_members",
                 *metric_keys], rows)


def report_frame(reports: Any, names: Sequence[str] | None = None):
    """A pandas DataFrame of :func:`report_rows`: one row per report, one column per summary key (``None`` as
    NaN), for your own plots.

    Needs pandas (``pip install 'ubench[frame]'``); raises ``MissingExtraError`` (an ``ImportError``) saying so when
    it is missing.

    Examples
    --------
    ``report_frame([score_archive("de.h5"), score_archive("swag.h5")])[["method", "cll", "accuracy"]]``
    """
    from ..extras import require

    require("frame", what="report_frame")
    import pandas as pd
    columns, rows = report_rows(reports, names)
    return pd.DataFrame.from_records(rows, columns=columns)
