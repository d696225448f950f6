# SPDX-License-Identifier: MIT
"""Rank intervals on `ubench serve`'s materialised board (issue #26 item 7), through the store on SQLite and on the
real PostgreSQL of conftest.py: each row's replicates are computed once from its result's per-sample statistics
and stored with the row; a computation ranks every row's replicates and stores each row's interval; the oracle is
``build_board`` (``ubench leaderboard``'s ranking) over the same full records. The running server's routes are
tested in test_serve_hostile.py (the board test, and --hidden-until). Last, what the stored page shows of a DEE
below one member (issue #28)."""

from __future__ import annotations

import csv
import io
import json
import re

import numpy as np
import pytest
from scipy import special

pytest.importorskip("sqlalchemy")

from conftest import create_database  # noqa: E402

from ubench.scoring.leaderboard import BoardConfig, build_board  # noqa: E402
from ubench.scoring.protocols import Protocol  # noqa: E402
from ubench.scoring.score import score_arrays  # noqa: E402

PROTOCOL = Protocol.preset("pitfalls").replace(bootstrap=200, sample_stats=True)


def _report(seed: int, scale: float, n: int = 300, c: int = 4, protocol: Protocol = PROTOCOL) -> dict:
    """A 3-member ensemble's report with its ``samples``; the labels depend on ``n`` only (every report on the
    same test samples), the predictions on ``seed`` and ``scale`` (larger: better)."""
    y = np.random.default_rng(0).integers(0, c, n)
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 1, (n, c))
    z[np.arange(n), y] += scale
    members = special.softmax(z[None] + rng.normal(0, 0.5, (3, n, c)), axis=2)
    return score_arrays(members, y, protocol=protocol, method=f"m{seed}")


@pytest.fixture(params=["sqlite", "postgresql"])
def board(request, tmp_path):
    """A store with one team, the board's configuration, and ``add(report)`` that scores a submission through the
    store as the worker does (``finish`` with the full record and its board entry); returns its id."""
    from ubench.serve.board import board_entry
    from ubench.serve.db import Database

    url = (create_database(request.getfixturevalue("postgres_server")) if request.param == "postgresql"
           else f"sqlite:///{tmp_path / 'b.db'}")
    db = Database(url)
    db.add_team("t")
    tid = next(iter(db.team_names()))
    records: dict[str, dict] = {}

    def add(report: dict) -> str:
        sha = f"{len(records) + 1:064x}"
        record = {"sha256": sha, "outcome": {"status": "ok", "exit_code": 0, "findings": [], "report": report}}
        db.complete_upload("r", tid, sha, 1, report["archive"]["method"], None)
        claim = db.claim_next("w", lease=60)
        assert db.finish(claim["id"], "w", f"{sha}-k", sha, record, "scored", board_entry(record))
        records[claim["id"]] = record
        return claim["id"]

    config = BoardConfig.create(protocol=PROTOCOL)
    yield db, config, add, records
    db.engine.dispose()


def _stored(db) -> dict[str, tuple]:
    """Every stored row's (rank, rank interval, tied with the leader), by submission id."""
    from ubench.serve.pages import rank_extras

    out = {}
    for rank, extras, text in db.board_page(0, None)["rows"]:
        got = rank_extras(extras)
        out[json.loads(text)["submission"]] = (rank, got["rank_interval"], got["tied_with_leader"])
    return out


def _oracle(records: dict[str, dict], config) -> dict[str, tuple]:
    rows = build_board([{**r, "archive": sid} for sid, r in records.items()], config)["rows"]
    return {r["archive"]: (r["rank"], r["rank_interval"], r["tied_with_leader"]) for r in rows}


def _refresh(db, config, cache=None, *, intervals: bool = True):
    from ubench.serve.board import compute_intervals, fill_statistics, refresh_board

    assert refresh_board(db, config)
    fill_statistics(db, config)
    return compute_intervals(db, config, cache) if intervals else None


def test_stored_rank_intervals_equal_build_boards_and_follow_new_rows(board):
    """The stored intervals and tie marks equal ``build_board``'s over the full records (a copy of the leader tied
    with it at [1, 1], two close rows sharing an interval, a far worse row alone); a better row scored later has
    none and the others keep theirs (the board says the intervals are older than it) until the next computation,
    which equals ``build_board`` again; a second computation reads no row's replicates again."""
    from ubench.serve.board import ReplicateCache
    from ubench.serve.pages import intervals_note

    db, config, add, records = board
    good = _report(1, 3.0)
    ids = [add(good), add(good), add(_report(2, 1.2)), add(_report(6, 1.2)), add(_report(4, 0.2))]
    cache = ReplicateCache()
    read: list[list[str]] = []
    replicates = db.board_replicates
    db.board_replicates = lambda wanted, metric: read.append(sorted(wanted)) or replicates(wanted, metric)
    info = _refresh(db, config, cache)
    assert (info["metric"], info["rows"], info["replicates"], info["level"]) == ("cll", 5, 200, 0.95)
    want = _oracle(records, config)
    assert _stored(db) == want
    assert want[ids[0]][1:] == ([1, 1], True) or want[ids[1]][1:] == ([1, 1], True)  # the copies: one is the leader
    assert want[ids[2]][1] == want[ids[3]][1] and want[ids[2]][1][0] < want[ids[2]][1][1]  # close: both [3, 4]
    assert want[ids[4]][1:] == ([5, 5], False)
    assert read == [sorted(ids)]
    _refresh(db, config, cache)
    assert read[-1] == []  # nothing changed: every row's replicates come from the cache
    page = db.board_page(0, None)
    assert "over the 5 ranked rows" in intervals_note(page["intervals"], page["built_from"])
    assert "scored since" not in intervals_note(page["intervals"], page["built_from"])

    best = add(_report(5, 6.0))
    _refresh(db, config, cache, intervals=False)  # the positions are refreshed, the intervals not yet
    stored = _stored(db)
    assert stored[best] == (1, None, None) and stored[ids[4]] == (6, [5, 5], False)  # still the older board's
    page = db.board_page(0, None)
    assert "rows scored since show none" in intervals_note(page["intervals"], page["built_from"])
    info = _refresh(db, config, cache)
    assert info["rows"] == 6 and _stored(db) == _oracle(records, config)
    assert read[-1] == [best]  # the new row only


def test_rows_without_usable_statistics_get_no_interval_and_cost_nothing_again(board):
    """A result without ``samples`` (scored with intervals off) and one whose samples are damaged get no interval
    (and are not read again); the others are ranked among themselves as ``build_board`` ranks the rows that have
    statistics; a re-scored row loses its interval and replicates until they are computed again; with fewer than
    two usable rows there are no intervals and a note says why."""
    from ubench.serve.board import board_entry, fill_statistics, refresh_board

    db, config, add, records = board
    a = add(_report(1, 3.0))
    lone = _report(2, 0.5)
    lone.pop("samples")
    b = add(lone)
    info = _refresh(db, config)
    assert info["rows"] == 0 and "fewer than two" in info["note"]
    assert _stored(db)[a][1] is None and _stored(db)[b][1] is None
    damaged = _report(3, 2.5)  # better than d: ranked above it, left out of the intervals
    damaged["samples"]["splits"]["test"]["columns"]["cll"] = "not base64!"
    c = add(damaged)
    d = add(_report(4, 2.0))
    info = _refresh(db, config)
    assert info["rows"] == 2 and fill_statistics(db, config) == 0  # nothing left to compute, nothing re-read
    stored = _stored(db)
    assert stored[b][1] is None and stored[c][1] is None and stored[a][1:] == ([1, 1], False)
    assert stored[d][1:] == ([2, 2], False)
    assert [stored[k][0] for k in (a, c, d, b)] == [1, 2, 3, 4]  # the ranks stay the point values' among all rows
    want = _oracle({k: v for k, v in records.items() if k in (a, d)}, config)
    assert {k: v[1:] for k, v in want.items()} == {k: stored[k][1:] for k in (a, d)}
    db.add_board_entries([(a, board_entry(records[a]))])  # scored again (as when its claim expired mid-scoring)
    assert a not in _stored(db)  # off the board until it is rendered again
    assert refresh_board(db, config) and _stored(db)[a] == (1, None, None)  # its interval went with its old result
    assert fill_statistics(db, config) == 1  # and its replicates: computed again


def test_a_throttled_board_is_recomputed_once_its_time_has_come():
    """The schedule: due at once; after a computation of s seconds, not before s + duty * s; ``wait`` says how
    long."""
    from ubench.serve.board import IntervalSchedule

    s = IntervalSchedule(duty=10.0)
    assert s.due(0.0) and s.wait(0.0) == 0.0
    s.done(100.0, 2.0)
    assert not s.due(121.9) and s.due(122.0) and s.wait(112.0) == pytest.approx(10.0)
    s.done(200.0, 0.001)
    assert s.due(200.011) and not s.due(200.0)


@pytest.mark.parametrize("board", ["sqlite"], indirect=True)
def test_a_dee_below_one_member_reads_below_one_on_the_stored_board(board):
    """A row whose DEE is below one deep-ensemble member (``dee: null``, ``dee_below_one``: a report scored with
    ``--ensemble``, ``scoring/dee.py``) keeps the flag through the store's entry and refresh, and the page as the
    board route joins it (``board_tr`` of the stored cells inside ``board_html``) shows "< 1" in the DEE column,
    never 1 or an empty cell; a DEE above one keeps its number. ``ubench serve`` scores without an ensemble, so no
    upload reaches this through the running server: the server tests (test_serve_hostile.py) cover the route's
    joining of the same stored rows."""
    from ubench.scoring.dee import attach_dee
    from ubench.serve.board import refresh_board
    from ubench.serve.pages import board_csv, board_html, board_tr

    db, config, add, _ = board
    ens = _report(1, 3.0)
    ens_curves = _report(1, 3.0, protocol=PROTOCOL.replace(member_curves=True))  # the reference's CLL curve
    worse = _report(7, 0.0)  # no signal: far below one member
    for rep in (ens, worse):
        attach_dee(rep, ens_curves, curve=False)
    assert worse["summary"]["dee"] is None and worse["summary"]["dee_below_one"] is True
    assert ens["summary"]["dee"] > 1
    ids = {add(ens): "ens", add(worse): "worse"}
    assert refresh_board(db, config)
    data = db.board_page(0, None)
    rows = {ids[r["submission"]]: r for r in (json.loads(text) for _, _, text in data["rows"])}
    assert rows["worse"]["metrics"].get("dee") is None and rows["worse"]["dee_below_one"] is True  # the API's row
    got = db.board_page(0, None, html=True)
    page = board_html(got["columns"], got["config"], "\n".join(board_tr(*r) for r in got["rows"]))
    head = re.findall(r"<th[^>]*>(.*?)</th>", page)
    j = next(i for i, h in enumerate(head) if h.startswith("DEE"))
    cells = {}
    for tr in re.findall(r"<tr>(.*?)</tr>", page, flags=re.S)[1:]:
        cell = re.findall(r"<td[^>]*>(.*?)</td>", tr)
        cells[cell[3]] = cell[j]
    assert cells == {"m1": f"{ens['summary']['dee']:.4g}", "m7": "&lt; 1"}
    # the CSV (``/api/leaderboard?format=csv``): the DEE cell is empty, and the flag beside it says why
    table = list(csv.DictReader(io.StringIO(board_csv(data["columns"], data["rows"]))))
    flags = {r["method"]: (r["dee"], r["dee_below_one"]) for r in table}
    assert flags == {"m1": (repr(ens["summary"]["dee"]), "False"), "m7": ("", "True")}
