# SPDX-License-Identifier: MIT
"""The materialised board (issue #25 item 7): what the ranking needs of each scored submission is stored once, as
its *entry*, when the submission is scored; :func:`refresh_board` renders the new rows once (their served JSON and
HTML cells) and orders every row by its stored keys, so a request reads one page of stored rows and parses no
result record. Rendering, columns and order all come from ``build_board``, the ranking of ``ubench leaderboard``.

:func:`refresh_board` is the one place the board is computed: a value that needs every row (issue #26's rank
intervals) is computed there and stored per row in the ``extras`` column.
"""

from __future__ import annotations

import json
from typing import Any

from .. import __version__
from ..scoring.leaderboard import BoardConfig, build_board
from .db import Database
from .pages import row_cells

__all__ = ["board_entry", "refresh_board", "backfill_entries", "render_rows", "board_order", "HEADLINE"]

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
    rendered again only when a column appears or ubench changed). Returns False when an entry was added meanwhile
    (nothing is stored: the refresh that follows that addition stores the board)."""
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
    rendered = []
    for row, ranked in rows:
        keys[row["submission"]] = (ranked, row["metrics"].get("cll"), row["metrics"].get("accuracy"))
        rendered.append({"id": row["submission"], "ranked": ranked, "cll": row["metrics"].get("cll"),
                         "accuracy": row["metrics"].get("accuracy"), "row": _json(row),
                         "cells": row_cells(row, columns)})
    order = []
    for position, (sid, rank) in enumerate(board_order(keys, config), 1):
        extras = None  # values computed across all rows (issue #26: rank intervals) go here, one JSON per row
        order.append((sid, position, rank, extras))
    return db.store_board(state["changes"], rendered=rendered, order=order, columns=_json(columns),
                          column_state=_json(column_state), config=_json(board_config), renderer=__version__)


def backfill_entries(db: Database) -> int:
    """Board entries for scored submissions that have none (scored before the board was materialised)."""
    done = 0
    while missing := db.scored_without_entry():
        db.add_board_entries([(m["id"], board_entry(m["record"])) for m in missing])
        done += len(missing)
    return done
