# SPDX-License-Identifier: MIT
"""The materialised board (issue #25 item 7): what the ranking needs of each scored submission is stored once, as
its *entry*, when the submission is scored; :func:`refresh_board` renders the new rows once (their served JSON and
HTML cells) and orders every row by its stored keys, so a request reads one page of stored rows and parses no
result record. Rendering, columns and order all come from ``build_board``, the ranking of ``ubench leaderboard``.

Rank intervals (issue #26 item 7), as ``ubench leaderboard`` computes them (``add_rank_intervals``: a paired
bootstrap of the ranking metric over every ranked row, ``metrics/paired.py``), in two steps that keep a refresh
cheap:

- :func:`fill_statistics`: a newly scored row's bootstrap replicates of CLL and accuracy (B values each, drawn
  with the counts of its resampling unit, which every row on the same test samples shares) are computed once from
  its result's ``samples`` and stored with the row (``cll_replicates``, ``accuracy_replicates``: 8 B bytes each,
  whatever the test set's size N; never re-read from the reports);
- :func:`compute_intervals`: every ranked row's replicates (kept in memory by :class:`ReplicateCache`, which
  reads only the rows that changed) are ranked together, one sort per replicate, and each row's
  ``{rank_interval, tied_with_leader}`` is stored in its ``extras``, with the computation's settings, time and
  cost in ``board_meta.intervals``.

At 10,000 rows the second step takes seconds, so the service (``serve/worker.py``) runs it at most every
:data:`INTERVAL_DUTY` times its last cost (:class:`IntervalSchedule`): rows scored since keep no interval until
then, and the page and the API say when the intervals were computed and that newer rows wait for them. Both steps
run in a thread apart from :func:`refresh_board`'s, so a scored row reaches the board while they run (the first
step over a whole 10,000-row board, at a server's start on an older database, takes a minute).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import time
from typing import Any

import numpy as np

from .. import __version__
from ..scoring.leaderboard import BoardConfig, build_board
from .db import Database
from .pages import row_cells

__all__ = ["board_entry", "refresh_board", "backfill_entries", "render_rows", "board_order", "HEADLINE",
           "interval_settings", "row_statistics", "fill_statistics", "compute_intervals", "ReplicateCache",
           "IntervalSchedule", "INTERVAL_DUTY"]

log = logging.getLogger("ubench.serve")

#: The service recomputes the rank intervals at most every INTERVAL_DUTY x (the last computation's seconds), so at
#: most about a tenth of the refresher's time goes to them however fast submissions arrive.
INTERVAL_DUTY = 10.0
#: Keys of each row's replicates (the ranking metric is CLL, accuracy when a row has no CLL).
RANK_METRICS = ("cll", "accuracy")

#: Columns shown first, in this order (issue #18 item 4).
HEADLINE = ("cll", "dee", "accuracy", "ood_auroc_total", "calibrated_brier")
#: Row values that ``build_board`` computes across the rows it is given (the rank itself; the rank intervals of
#: issue #26 where ``build_board`` has them): rendering a few new rows cannot know them, :func:`refresh_board`
#: sets the rank for every row, and values like the intervals belong in its per-row ``extras``.
ACROSS_ROWS = ("rank", "rank_interval", "tied_with_leader")


def board_entry(record: dict[str, Any]) -> dict[str, Any]:
    """The part of a result record that ``build_board`` reads (status, error findings, time, and of the report the
    summary, comparability and archive description): about 3 KB instead of the record's 100 KB."""
    outcome = record.get("outcome") or {}
    report = outcome.get("report") or {}
    archive = report.get("archive") or {}
    return {"sha256": record.get("sha256"),
            "outcome": {"status": outcome.get("status"), "exit_code": outcome.get("exit_code"),
                        "seconds": outcome.get("seconds"),
                        "findings": [f for f in outcome.get("findings", []) if f.get("severity") == "error"],
                        "report": {"summary": report.get("summary") or {},
                                   "comparability": report.get("comparability") or {},
                                   "archive": {k: archive.get(k) for k in ("method", "model", "n_members")}}}}


def _date(value: Any) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, allow_nan=False, separators=(",", ":"))


def render_rows(pending: list[dict[str, Any]], config: BoardConfig) -> list[tuple[dict[str, Any], bool]]:
    """``build_board`` over the entries (``Database.board_pending``): each row as served, with its submission id,
    team, date and the method name the team gave, and whether ``build_board`` ranks it. The values it computes
    across the rows it is given (:data:`ACROSS_ROWS`) are left out: among a few new rows they mean nothing."""
    rows = build_board([{**i["entry"], "archive": i["id"], "cached": False} for i in pending], config)["rows"]
    by_id = {i["id"]: i for i in pending}
    out = []
    for row in rows:
        i = by_id[row["archive"]]
        row.update(submission=i["id"], team=i["team"], submitted=_date(i["created"]), method_name=i["method"])
        ranked = row["rank"] is not None
        for across in ACROSS_ROWS:
            row.pop(across, None)
        out.append((row, ranked))
    return out


def merge_column_state(state: dict | None, pending: list[dict[str, Any]], rows: list[tuple[dict, bool]]) -> dict:
    """The metric keys seen and the comparability lists in first-seen order, as ``build_board`` merges them over
    its records, extended by the pending entries and their rendered ``rows``."""
    state = state or {"present": [], "comparable": [], "not_comparable": []}
    present = set(state["present"]).union(*(r["metrics"] for r, _ in rows))
    out = {"present": sorted(present), "comparable": list(state["comparable"]),
           "not_comparable": list(state["not_comparable"])}
    for i in pending:
        comp = ((i["entry"].get("outcome") or {}).get("report") or {}).get("comparability") or {}
        for kind in ("comparable", "not_comparable"):
            out[kind] += [k for k in comp.get(kind, []) if k not in out[kind]]
    return out


def board_columns(state: dict, config: BoardConfig) -> tuple[list[dict], dict]:
    """The board's columns (headline first) and configuration, as ``build_board`` makes them from rows whose
    metrics and comparability lists are ``state``'s."""
    one = {"archive": "-", "outcome": {"status": "ok", "report": {
        "summary": {k: 0.0 for k in state["present"]},
        "comparability": {"comparable": state["comparable"], "not_comparable": state["not_comparable"]}}}}
    board = build_board([one], config)
    columns = ([c for k in HEADLINE for c in board["columns"] if c["key"] == k]
               + [c for c in board["columns"] if c["key"] not in HEADLINE])
    return columns, board["config"]


def board_order(keys: dict[str, tuple[bool, float | None, float | None]], config: BoardConfig
                ) -> list[tuple[str, int | None]]:
    """Every row's (submission id, rank) in board order, as ``build_board`` orders and ranks rows whose status,
    CLL and accuracy are ``keys`` (one ranking rule, ``ubench leaderboard``'s)."""
    records = []
    for sid, (ranked, cll, accuracy) in keys.items():
        summary = {k: v for k, v in (("cll", cll), ("accuracy", accuracy)) if v is not None}
        if ranked:
            summary["ranked"] = 1.0  # a row with metrics other than these two is still ranked
        records.append({"archive": sid, "outcome": {"status": "ok", "report": {"summary": summary}}})
    return [(r["archive"], r["rank"]) for r in build_board(records, config)["rows"]]


def refresh_board(db: Database, config: BoardConfig) -> bool:
    """Bring the stored board up to date: render the new (or re-scored) rows, order and rank every row, and
    store the positions, ranks and extras that changed with the columns and the configuration. Called after each
    scored submission and at start; costs the new rows plus one ordering of every row's keys (every row is
    rendered again only when a column appears or ubench changed). Rows added or re-scored while it ran wait for
    the next refresh (``Database.store_board``); returns False only when a refresh from newer entries was stored
    first (nothing is stored)."""
    state = db.board_state()
    every = state["renderer"] != __version__
    pending = db.board_pending(every=every)
    rows = render_rows(pending, config)
    column_state = merge_column_state(None if every else state["column_state"], pending, rows)
    columns, board_config = board_columns(column_state, config)
    if not every and columns != state["columns"]:  # a new column: every row's cells change
        every = True
        pending = db.board_pending(every=True)
        rows = render_rows(pending, config)
    keys = {sid: (bool(ranked), cll, acc) for sid, ranked, cll, acc in db.board_keys()}
    entries = {i["id"]: i["entry_text"] for i in pending}
    rendered = []
    for row, ranked in rows:
        keys[row["submission"]] = (ranked, row["metrics"].get("cll"), row["metrics"].get("accuracy"))
        rendered.append({"id": row["submission"], "entry": entries[row["submission"]], "ranked": ranked,
                         "cll": row["metrics"].get("cll"),
                         "accuracy": row["metrics"].get("accuracy"), "row": _json(row),
                         "cells": row_cells(row, columns)})
    order = [(sid, position, rank) for position, (sid, rank) in enumerate(board_order(keys, config), 1)]
    return db.store_board(state["changes"], rendered=rendered, order=order, columns=_json(columns),
                          column_state=_json(column_state), config=_json(board_config), renderer=__version__)


def backfill_entries(db: Database) -> int:
    """Board entries for scored submissions that have none (scored before the board was materialised)."""
    done = 0
    while missing := db.scored_without_entry():
        db.add_board_entries([(m["id"], board_entry(m["record"])) for m in missing])
        done += len(missing)
    return done


# --- rank intervals (issue #26 item 7) ----------------------------------------------------------------------------

def interval_settings(config: BoardConfig) -> dict[str, Any] | None:
    """The bootstrap settings of the board's rank intervals (``level``, ``replicates``, ``seed``, ``tpr``: the
    protocol's, as ``add_rank_intervals`` reads them), or None when the protocol has intervals off (its results
    then carry no per-sample statistics)."""
    p = config.protocol or {}
    if config.kind != "score" or not p.get("intervals", True) or not p.get("sample_stats"):
        return None
    return {"level": float(p.get("confidence", 0.95)), "replicates": int(p.get("bootstrap", 1000)),
            "seed": int(p.get("seed", 0)), "tpr": float(p.get("tpr", 0.95))}


def _stats_key(settings: dict[str, Any]) -> str:
    """What a row's stored replicates depend on besides its samples: the seed and the number of replicates."""
    return f"seed={settings['seed']};B={settings['replicates']}"


def _primary(samples: Any) -> tuple[str, int] | None:
    """(resampling unit, n) of a report's ``samples``' primary split, or None when they are not usable."""
    try:
        split = samples["splits"][samples["primary"]]
        return str(split["unit"]), int(split["n"])
    except (KeyError, TypeError, ValueError):
        return None


def row_statistics(samples: list[Any], settings: dict[str, Any]
                   ) -> list[tuple[str | None, int | None, bytes | None, bytes | None]]:
    """Each report's ``(unit, n, CLL replicates, accuracy replicates)`` from its ``samples`` (bytes: B
    little-endian float64; None where the report lacks the column, and all None for unusable samples).

    The replicates are ``sample_replicates``' (``metrics/paired.py``), one call per resampling unit and size: the
    counts of a unit depend on the unit, the seed and B alone (drawn replicate by replicate, whatever the block), so
    a row computed alone has the replicates it has among every row of ``ubench leaderboard``'s board, and rows on
    the same test samples are paired. A group that fails (damaged samples) is computed row by row, so one bad
    result loses its own statistics only.
    """
    from ..metrics.paired import sample_replicates

    out: list[tuple[str | None, int | None, bytes | None, bytes | None]] = [(None, None, None, None)] * len(samples)
    groups: dict[tuple[str, int], list[int]] = {}
    for i, s in enumerate(samples):
        if (key := _primary(s)) is not None:
            groups.setdefault(key, []).append(i)

    def compute(idx: list[int]) -> list[dict]:
        return sample_replicates([samples[i] for i in idx], n_replicates=settings["replicates"],
                                 seed=settings["seed"], tpr=settings["tpr"], keys=RANK_METRICS)

    for (unit, n), idx in groups.items():
        try:
            reps = compute(idx)
            parts = list(zip(idx, reps))
        except (ValueError, KeyError, TypeError):
            parts = []
            for i in idx:
                try:
                    parts.append((i, compute([i])[0]))
                except (ValueError, KeyError, TypeError) as exc:
                    log.warning("a board row's per-sample statistics are unusable (%s); it gets no rank interval",
                                str(exc)[:200])
        for i, rep in parts:
            blobs = [None if k not in rep else np.asarray(rep[k], dtype="<f8").tobytes() for k in RANK_METRICS]
            out[i] = (unit, n, *blobs)
    return out


def fill_statistics(db: Database, config: BoardConfig, *, batch: int = 200, stop: Any = None) -> int:
    """Compute and store the replicates of every board row that has none under the board's settings (new and
    re-scored rows; every row after the settings changed), from the samples of its stored result, ``batch`` rows
    at a time (one short write each), until none is left or ``stop`` (an Event) is set. Returns the rows
    stored."""
    settings = interval_settings(config)
    if settings is None:
        return 0
    key = _stats_key(settings)
    done = 0
    while not (stop is not None and stop.is_set()) and (rows := db.board_without_stats(key, limit=batch)):
        samples = [(((r["record"] or {}).get("outcome") or {}).get("report") or {}).get("samples")
                   if isinstance(r["record"], dict) else None for r in rows]
        stats = row_statistics(samples, settings)
        stored = db.store_stats(key, [(r["id"], r["result_key"], *s) for r, s in zip(rows, stats)])
        done += stored
        if stored == 0:  # every row of the batch was re-scored meanwhile: the next refresh takes them
            break
    return done


class ReplicateCache:
    """The rows' replicates of one metric as last read, by submission id with their ``stats_at``: a computation
    reads from the database only the rows that are new or whose replicates changed (a 10,000-row board at B = 1,000
    is 80 MB of replicates; reading them all per computation would cost more than ranking them)."""

    def __init__(self) -> None:
        self.metric: str | None = None
        self.rows: dict[str, tuple[int, np.ndarray]] = {}

    def get(self, db: Database, metric: str, wanted: dict[str, int]) -> dict[str, np.ndarray]:
        """The replicates of ``wanted`` (id -> the ``stats_at`` the caller read), reading the missing or changed
        ones; rows whose stored ``stats_at`` moved on meanwhile are left out (the next computation has them)."""
        if metric != self.metric:
            self.metric, self.rows = metric, {}
        stale = [sid for sid, at in wanted.items() if self.rows.get(sid, (None,))[0] != at]
        for sid, (at, blob) in db.board_replicates(stale, metric).items():
            self.rows[sid] = (at, np.frombuffer(blob, dtype="<f8"))
        self.rows = {sid: v for sid, v in self.rows.items() if sid in wanted}
        return {sid: v[1] for sid, v in self.rows.items() if v[0] == wanted[sid]}


def compute_intervals(db: Database, config: BoardConfig, cache: ReplicateCache | None = None) -> dict[str, Any]:
    """Every ranked row's rank interval and tie mark, stored in its ``extras``; returns what was stored in
    ``board_meta.intervals``.

    As ``add_rank_intervals`` (``scoring/leaderboard.py``): the metric is CLL when every ranked row with replicates
    has a CLL, else accuracy; ``rank_intervals`` over those rows' paired replicates; the order and ``rank`` stay the
    point values'. Rows without replicates (their result has no per-sample statistics) and rows ranked after the
    stored board was last refreshed get none. The returned dict: ``metric``, ``level``, ``replicates``, ``seed``,
    ``method``, ``rows`` (0 and a ``note`` when there are no intervals), ``computed`` (UTC), ``built_from`` (the
    board's change counter whose positions it ranked) and ``seconds`` (its cost).
    """
    from ..metrics.paired import HIGHER_IS_BETTER, rank_intervals

    t0 = time.perf_counter()
    settings = interval_settings(config)
    state = db.board_ranked_stats(_stats_key(settings) if settings else "")
    ranked = state["rows"]
    info: dict[str, Any] = {"metric": None, "level": None, "replicates": None, "seed": None,
                            "method": "paired percentile bootstrap of the ranks", "rows": 0}
    extras: dict[str, str | None] = {r["id"]: None for r in ranked}
    usable = [r for r in ranked if r["stats_at"] is not None and (r["has_cll"] or r["has_accuracy"])]
    if settings is None:
        info["note"] = "no rank intervals: the protocol has intervals off"
    else:
        info.update(level=settings["level"], replicates=settings["replicates"], seed=settings["seed"])
        metric = "cll" if all(r["cll"] is not None and r["has_cll"] for r in usable) else "accuracy"
        rows = [r for r in usable if r[metric] is not None and r[f"has_{metric}"]]
        info["metric"] = metric
        sizes: dict[str, set[int]] = {}
        for r in rows:
            sizes.setdefault(r["unit"], set()).add(r["n"])
        clash = next((u for u, n in sizes.items() if len(n) > 1), None)
        if clash is not None:  # as sample_replicates refuses it: the rows are not on the same samples
            info["note"] = (f"no rank intervals: resampling unit {clash[:80]!r} has different sample counts in "
                            "different rows")
        elif len(rows) >= 2:
            reps = (cache or ReplicateCache()).get(db, metric, {r["id"]: r["stats_at"] for r in rows})
            rows = [r for r in rows if r["id"] in reps]
            if len(rows) >= 2:
                out = rank_intervals({r["id"]: r[metric] for r in rows}, {r["id"]: reps[r["id"]] for r in rows},
                                     higher_is_better=HIGHER_IS_BETTER[metric], level=settings["level"])
                for r in rows:
                    extras[r["id"]] = json.dumps({"rank_interval": out[r["id"]]["rank_interval"],
                                                  "tied_with_leader": out[r["id"]]["tied_with_leader"]},
                                                 separators=(",", ":"))
                info["rows"] = len(rows)
        if info["rows"] < 2 and "note" not in info:
            info["rows"] = 0
            info["note"] = "no rank intervals: fewer than two ranked rows have per-sample statistics"
    info.update(computed=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                built_from=state["built_from"])
    stats_at = {r["id"]: r["stats_at"] for r in ranked}
    info["seconds"] = round(time.perf_counter() - t0, 3)
    db.store_intervals([(sid, stats_at[sid], text) for sid, text in extras.items()], _json(info))
    return info


class IntervalSchedule:
    """When the service recomputes the rank intervals: right away when the board changed and the last computation
    is more than :data:`INTERVAL_DUTY` times its cost ago; else once that time has come (rows scored meanwhile show
    no interval until then). Cheap boards (100 rows: milliseconds) are recomputed on every scored submission; a
    10,000-row board (seconds) at most every few tens of seconds."""

    def __init__(self, duty: float = INTERVAL_DUTY):
        self.duty = duty
        self.next_at = float("-inf")

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def done(self, now: float, seconds: float) -> None:
        """A computation that started at ``now`` took ``seconds``."""
        self.next_at = now + seconds + self.duty * seconds

    def wait(self, now: float) -> float:
        """Seconds until the next computation may run."""
        return max(0.0, self.next_at - now)
