# SPDX-License-Identifier: MIT
"""The materialised board (issue #25 item 7): what the ranking needs of each scored submission is stored once, as
its *entry*, when the submission is scored; :func:`refresh_board` ranks every entry (``build_board``, the same
ranking as ``ubench leaderboard``) and stores each row's position and served JSON, so a request reads one page of
stored rows and re-parses no result record.

:func:`refresh_board` is the one place the board is computed: a value that needs every row (issue #26's rank
intervals) is computed there and stored per row in the ``extras`` column.
"""

from __future__ import annotations

import json
from typing import Any

from ..scoring.leaderboard import BoardConfig, build_board
from .db import Database

__all__ = ["board_entry", "refresh_board", "backfill_entries", "HEADLINE"]

#: Columns shown first, in this order (issue #18 item 4).
HEADLINE = ("cll", "dee", "accuracy", "ood_auroc_total", "calibrated_brier")


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


def rank_entries(inputs: list[dict[str, Any]], config: BoardConfig) -> dict[str, Any]:
    """``build_board`` over the entries (``Database.board_inputs``), each row extended with its submission id,
    team, date and the method name the team gave; columns headline-first."""
    records = [{**i["entry"], "archive": i["id"], "cached": False} for i in inputs]
    board = build_board(records, config)
    by_id = {i["id"]: i for i in inputs}
    for row in board["rows"]:
        i = by_id[row["archive"]]
        row.update(submission=i["id"], team=i["team"], submitted=_date(i["created"]), method_name=i["method"])
    board["columns"] = ([c for k in HEADLINE for c in board["columns"] if c["key"] == k]
                        + [c for c in board["columns"] if c["key"] not in HEADLINE])
    return board


def refresh_board(db: Database, config: BoardConfig) -> bool:
    """Rank every stored entry and store the board: each row's position, served JSON and extras, the columns and
    the configuration. Called after every scored (or re-scored) submission and at start. Returns False when an
    entry was added meanwhile (nothing is stored: the refresh that follows that addition stores the board)."""
    changes, inputs = db.board_inputs()
    board = rank_entries(inputs, config)
    rows = []
    for position, row in enumerate(board["rows"], 1):
        extras = None  # values computed across all rows (issue #26: rank intervals) go here, one JSON per row
        rows.append((row["submission"], position, _json(row), extras))
    return db.store_board(changes, rows, columns=_json(board["columns"]), config=_json(board["config"]))


def backfill_entries(db: Database) -> int:
    """Board entries for scored submissions that have none (scored before the board was materialised)."""
    missing = db.scored_without_entry()
    if missing:
        db.add_board_entries([(m["id"], board_entry(m["record"])) for m in missing])
    return len(missing)
