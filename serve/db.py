# SPDX-License-Identifier: MIT
"""The service's database: teams, submissions (the queue), results (one per archive content and scoring
configuration), upload reservations and the materialised board. SQLAlchemy 2 Core, so one schema runs on SQLite
(the embedded default, WAL mode) and PostgreSQL. The store holds the tables and the legal transitions, nothing else.

The queue lives here, not in memory: a submission is ``queued`` once its row is committed (the HTTP 202 is sent
after that); a worker claims it with one conditional UPDATE (``queued -> scoring``; only one claimer can win) that
gives it a lease (owner and expiry) which the worker's heartbeat renews; the outcome is stored with the state change
in one transaction, and only by the lease's owner. Only an *expired* lease is requeued (its server died), so a
second server on the same database never takes a live claim, and a worker's error path puts back only its own row;
after ``max_attempts`` claims a submission is rejected with a reason instead of being tried for ever. Results are
keyed by (archive sha256, configuration key), so an archive uploaded twice, or re-claimed after a crash, is scored
once. Queued submissions are claimed round-robin across teams (the team served longest ago first).

Quotas are reservations: a row in ``reservations`` is written when an upload *starts*, in a transaction that counts
the team's uploads of the last 24 hours and its uploads in progress and refuses past the limits, atomically across
servers (SQLite: ``BEGIN IMMEDIATE``, one writer at a time; PostgreSQL: the team's row locked ``FOR NO KEY
UPDATE``, which serialises one team's reservations and nothing else: no retry loop as a serializable transaction
would need, no lock key to keep unique as with an advisory lock, other teams never wait, and inserts that name the
team, which take a key-share lock, go on). A finished upload turns its reservation into its submission in one
transaction; a failed one deletes it; one whose server died expires (its expiry is the upload's deadline plus a
margin).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import secrets
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import (Boolean, Column, DateTime, Float, ForeignKey, Index, Integer, LargeBinary, MetaData, String,
                        Table, Text, bindparam, create_engine, delete, event, func, insert, inspect, or_, select, text,
                        update)
from sqlalchemy.engine import Connection, Engine

__all__ = ["Database", "STATUSES", "Refusal", "upgrade_to_head", "MIGRATIONS"]

STATUSES = ("queued", "scoring", "scored", "rejected")

metadata = MetaData()

teams = Table(
    "teams", metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(200), unique=True, nullable=False),
    Column("token_sha256", String(64), unique=True, nullable=False),
    Column("revoked", Boolean, nullable=False, default=False),
    Column("created", DateTime(timezone=True), nullable=False),
    Column("last_claimed", DateTime(timezone=True)),  # round-robin: the team served longest ago goes first
)

submissions = Table(
    "submissions", metadata,
    Column("id", String(36), primary_key=True),
    Column("team_id", Integer, ForeignKey("teams.id"), nullable=False),
    Column("sha256", String(64), nullable=False, index=True),
    Column("size", Integer, nullable=False),
    Column("method", String(200)),
    Column("notes", Text),
    Column("status", String(16), nullable=False),
    Column("created", DateTime(timezone=True), nullable=False),
    Column("started", DateTime(timezone=True)),
    Column("finished", DateTime(timezone=True)),
    Column("attempts", Integer, nullable=False, default=0),
    Column("result_key", String(200)),
    Column("lease_owner", String(64)),  # the server holding a ``scoring`` claim
    Column("lease_expires", DateTime(timezone=True)),  # renewed by its heartbeat; requeued only once passed
    Column("findings", Text),  # JSON list: why the service itself rejected it (no result), e.g. attempts used up
    Index("ix_submissions_status_created", "status", "created"),  # claim_next: the queue in arrival order
    Index("ix_submissions_team_created", "team_id", "created"),  # reserve_upload: a team's uploads per day
)

results = Table(
    "results", metadata,
    Column("key", String(200), primary_key=True),  # "<sha256>-<config key>"
    Column("sha256", String(64), nullable=False),
    Column("status", String(32), nullable=False),
    Column("record", Text, nullable=False),  # the leaderboard's result record (JSON)
    Column("created", DateTime(timezone=True), nullable=False),
)

reservations = Table(
    "reservations", metadata,  # uploads in progress: counted against the quotas from their first byte
    Column("id", String(36), primary_key=True),
    Column("team_id", Integer, ForeignKey("teams.id"), nullable=False, index=True),
    Column("created", DateTime(timezone=True), nullable=False),
    Column("expires", DateTime(timezone=True), nullable=False),
)

board = Table(
    "board_rows", metadata,  # the materialised board: one row per scored submission (serve/board.py)
    Column("submission_id", String(36), ForeignKey("submissions.id"), primary_key=True),
    Column("entry", Text, nullable=False),  # what the ranking reads of the result (JSON)
    Column("ranked", Boolean),  # the ranking's keys, set when the row is rendered: has metrics,
    Column("cll", Float),  # its CLL,
    Column("accuracy", Float),  # its accuracy
    Column("position", Integer, index=True),  # order on the board (1 = top); NULL until the next refresh
    Column("rank", Integer),  # rank among ranked rows (NULL for a row without metrics)
    Column("row", Text),  # the row as the API serves it (JSON, its rank left out); NULL until rendered
    Column("cells", Text),  # the row's HTML cells after its rank
    Column("extras", Text),  # per-row values computed across all rows: the rank interval (JSON; issue #26)
    # the row's bootstrap replicates for the rank intervals, computed once from its result's ``samples``
    Column("stats_key", String(64)),  # the settings they were drawn under (NULL: not computed yet)
    Column("stats_at", Integer),  # the board's change counter when they were stored (the servers' cache key)
    Column("sample_unit", Text),  # the resampling unit of the primary split (rows of one unit share the counts)
    Column("sample_n", Integer),  # its number of samples
    Column("cll_replicates", LargeBinary),  # B little-endian float64 (NULL: no such per-sample column)
    Column("accuracy_replicates", LargeBinary),
)

board_meta = Table(
    "board_meta", metadata,  # one row (id 1), written by the migration
    Column("id", Integer, primary_key=True),
    Column("changes", Integer, nullable=False),  # bumped whenever an entry is added or replaced
    Column("built_from", Integer),  # the ``changes`` the stored positions were computed from
    Column("columns", Text),  # JSON list of the board's columns
    Column("column_state", Text),  # JSON: metric keys seen and comparability lists, merged row by row
    Column("config", Text),  # JSON: the scoring configuration the board was built under
    Column("renderer", String(64)),  # the ubench version that rendered the stored rows
    Column("generated", DateTime(timezone=True)),
    Column("intervals", Text),  # JSON: the last rank-interval computation (settings, rows, when, its cost)
)


#: The Alembic scripts (``env.py``, ``versions/``); the schema above is their head.
MIGRATIONS = Path(__file__).with_name("migrations")
#: The revision whose schema ``metadata.create_all`` made before the service had migrations.
_CREATE_ALL_REVISION = "0001"
#: Key of the PostgreSQL advisory lock held while a server migrates (any constant unique to ubench serve).
_MIGRATION_LOCK = 0x75626E6368  # "ubnch"


def _alembic_config(connection):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


def upgrade_to_head(engine: Engine) -> None:
    """Bring the database to the newest schema with Alembic, in one transaction under a lock: PostgreSQL's
    transaction-level advisory lock, SQLite's write lock (``BEGIN IMMEDIATE``), so that servers starting at once
    migrate one after the other and the later ones find the database at head. A database made by ``create_all``
    before migrations existed (the three tables, no ``alembic_version``) is stamped at the initial revision and
    upgraded from there, its rows untouched."""
    from alembic import command

    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK})
        elif engine.dialect.name == "sqlite":
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        cfg = _alembic_config(conn)
        tables = set(inspect(conn).get_table_names())
        if "alembic_version" not in tables and {"teams", "submissions", "results"} <= tables:
            command.stamp(cfg, _CREATE_ALL_REVISION)
        command.upgrade(cfg, "head")


def _set_wal(cur, wait_s: float = 30.0) -> None:
    """``PRAGMA journal_mode=WAL``, retried while the database is locked. Switching a new database to WAL needs it
    to itself, and SQLite answers "database is locked" at once, without its busy handler, when another connection
    holds a lock: with four servers starting on one new database, about 1 start in 250 failed so under load."""
    import sqlite3

    deadline = time.monotonic() + wait_s
    while True:
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _finding(check: str, message: str) -> dict[str, str]:
    return {"path": "<file>", "check": check, "severity": "error", "message": message}


@dataclass(frozen=True)
class Refusal:
    """Why an upload may not start: ``limit`` is ``"per-day"`` or ``"concurrent"``."""

    limit: str
    message: str


class Database:
    """The service's tables behind one SQLAlchemy engine (``url``: ``sqlite:///path`` or ``postgresql://...``)."""

    def __init__(self, url: str):
        self.url = url
        kwargs: dict[str, Any] = {"future": True}
        if url.startswith("sqlite"):
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
        self.engine: Engine = create_engine(url, **kwargs)
        if url.startswith("sqlite"):
            @event.listens_for(self.engine, "connect")
            def _sqlite_pragmas(dbapi_conn, _record):  # WAL: readers never wait for the scoring writer
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA busy_timeout=30000")
                _set_wal(cur)
                cur.execute("PRAGMA synchronous=NORMAL")
                cur.close()
        upgrade_to_head(self.engine)

    @classmethod
    def for_data_dir(cls, data_dir: str | Path, url: str | None = None) -> Database:
        return cls(url or f"sqlite:///{Path(data_dir).resolve() / DB_NAME}")

    def check_writable(self) -> Database:
        """Write one row without changing it: a read-only database (file, mount or role) fails here, at start,
        not on the first upload. Returns the database."""
        with self._writing() as c:
            c.execute(update(board_meta).where(board_meta.c.id == 1).values(changes=board_meta.c.changes))
        return self

    @contextlib.contextmanager
    def _writing(self) -> Iterator[Connection]:
        """A transaction holding SQLite's write lock from its first statement (``BEGIN IMMEDIATE``: what it reads
        cannot change before it commits); on PostgreSQL a plain transaction whose callers lock the rows they
        decide on."""
        with self.engine.begin() as c:
            if self.engine.dialect.name == "sqlite":
                c.exec_driver_sql("BEGIN IMMEDIATE")
            yield c

    # --- teams ---------------------------------------------------------------------------------------------
    def add_team(self, name: str) -> str:
        """Create team ``name`` and return its bearer token (shown once; only its sha256 is stored)."""
        token = secrets.token_urlsafe(32)
        with self.engine.begin() as c:
            c.execute(insert(teams).values(name=name, token_sha256=token_hash(token), revoked=False, created=_now()))
        return token

    def revoke_team(self, name: str) -> bool:
        with self.engine.begin() as c:
            return c.execute(update(teams).where(teams.c.name == name).values(revoked=True)).rowcount > 0

    def team_for_token(self, token: str) -> dict | None:
        with self.engine.connect() as c:
            row = c.execute(select(teams).where(teams.c.token_sha256 == token_hash(token),
                                                teams.c.revoked.is_(False))).mappings().first()
        return dict(row) if row else None

    def team_names(self) -> dict[int, str]:
        with self.engine.connect() as c:
            return {r.id: r.name for r in c.execute(select(teams.c.id, teams.c.name))}

    # --- uploads: reservations, then the submission ----------------------------------------------------------
    def reserve_upload(self, team_id: int, *, max_per_day: int, max_concurrent: int, ttl: float) -> str | Refusal:
        """Count an upload against the team's limits as it starts: the id of its reservation, or a
        :class:`Refusal` when the team already has ``max_per_day`` uploads in the last 24 hours (accepted ones and
        those in progress) or ``max_concurrent`` in progress. Atomic across servers (see the module docstring);
        the reservation expires after ``ttl`` seconds (the upload's own deadline plus a margin) if its server dies
        before :meth:`complete_upload` or :meth:`release_upload`."""
        now = _now()
        with self._writing() as c:
            if self.engine.dialect.name != "sqlite":  # FOR NO KEY UPDATE: inserts naming the team still go on
                c.execute(select(teams.c.id).where(teams.c.id == team_id).with_for_update(key_share=True))
            c.execute(delete(reservations).where(reservations.c.team_id == team_id, reservations.c.expires < now))
            running = c.execute(select(func.count()).select_from(reservations)
                                .where(reservations.c.team_id == team_id)).scalar_one()
            accepted = c.execute(select(func.count()).select_from(submissions).where(
                submissions.c.team_id == team_id, submissions.c.created >= now - _dt.timedelta(days=1))).scalar_one()
            if accepted + running >= max_per_day:
                return Refusal("per-day", f"{max_per_day} uploads in 24 hours")
            if running >= max_concurrent:
                return Refusal("concurrent", f"{max_concurrent} uploads in progress")
            rid = str(uuid.uuid4())
            c.execute(insert(reservations).values(id=rid, team_id=team_id, created=now,
                                                  expires=now + _dt.timedelta(seconds=ttl)))
        return rid

    def release_upload(self, reservation: str) -> None:
        """An upload that failed: its reservation no longer counts."""
        with self.engine.begin() as c:
            c.execute(delete(reservations).where(reservations.c.id == reservation))

    def complete_upload(self, reservation: str, team_id: int, sha256: str, size: int, method: str | None,
                        notes: str | None) -> str:
        """The stored upload becomes a queued submission and its reservation goes, in one transaction; its id."""
        sid = str(uuid.uuid4())
        with self.engine.begin() as c:
            c.execute(delete(reservations).where(reservations.c.id == reservation))
            c.execute(insert(submissions).values(id=sid, team_id=team_id, sha256=sha256, size=size, method=method,
                                                 notes=notes, status="queued", created=_now(), attempts=0))
        return sid

    def references_upload(self, sha256: str) -> bool:
        """Whether any submission names the stored archive ``sha256`` (its file must stay)."""
        with self.engine.connect() as c:
            return c.execute(select(submissions.c.id).where(submissions.c.sha256 == sha256).limit(1)).first() \
                is not None

    def submission(self, sid: str) -> dict | None:
        with self.engine.connect() as c:
            row = c.execute(select(submissions).where(submissions.c.id == sid)).mappings().first()
        if row is None:
            return None
        return {**dict(row), "findings": json.loads(row["findings"]) if row["findings"] else None}

    # --- the queue -----------------------------------------------------------------------------------------
    def claim_next(self, owner: str, *, lease: float) -> dict | None:
        """Claim a queued submission for ``owner`` with a lease of ``lease`` seconds (``None`` when the queue is
        empty): the oldest upload of the team whose last claim is the oldest (round-robin across teams)."""
        now = _now()
        order = (teams.c.last_claimed.asc().nulls_first(), submissions.c.created, submissions.c.id)
        with self.engine.begin() as c:
            for row in c.execute(select(submissions.c.id, submissions.c.team_id)
                                 .join(teams, teams.c.id == submissions.c.team_id)
                                 .where(submissions.c.status == "queued").order_by(*order).limit(8)).all():
                won = c.execute(update(submissions).where(submissions.c.id == row.id,
                                                          submissions.c.status == "queued")
                                .values(status="scoring", started=now, attempts=submissions.c.attempts + 1,
                                        lease_owner=owner, lease_expires=now + _dt.timedelta(seconds=lease))
                                ).rowcount
                if won:
                    c.execute(update(teams).where(teams.c.id == row.team_id).values(last_claimed=now))
                    return dict(c.execute(select(submissions).where(submissions.c.id == row.id)).mappings().one())
        return None

    def renew_leases(self, owner: str, sids: list[str], *, lease: float) -> set[str]:
        """The heartbeat: extend ``owner``'s leases on ``sids``; returns those it still holds."""
        if not sids:
            return set()
        with self.engine.begin() as c:
            c.execute(update(submissions).where(submissions.c.id.in_(sids), submissions.c.lease_owner == owner,
                                                submissions.c.status == "scoring")
                      .values(lease_expires=_now() + _dt.timedelta(seconds=lease)))
            return {r.id for r in c.execute(select(submissions.c.id).where(
                submissions.c.id.in_(sids), submissions.c.lease_owner == owner, submissions.c.status == "scoring"))}

    def _give_back(self, c: Connection, where, *, max_attempts: int, finding: dict) -> int:
        """``scoring -> queued`` for the rows ``where`` selects, or ``scoring -> rejected`` with ``finding`` for
        those that used their ``max_attempts`` claims."""
        base = (submissions.c.status == "scoring", where)
        rejected = c.execute(update(submissions).where(*base, submissions.c.attempts >= max_attempts)
                             .values(status="rejected", finished=_now(), lease_owner=None, lease_expires=None,
                                     findings=json.dumps([finding]))).rowcount
        requeued = c.execute(update(submissions).where(*base)
                             .values(status="queued", started=None, lease_owner=None, lease_expires=None)).rowcount
        return rejected + requeued

    def release(self, sid: str, owner: str, *, max_attempts: int) -> int:
        """A worker's error path: put back its own claim on ``sid`` (no other row), or reject it after
        ``max_attempts``."""
        finding = _finding("attempts", f"the service could not score this upload in {max_attempts} attempt(s) (an "
                                       "error on the host's side, in its log); it will not be tried again")
        with self.engine.begin() as c:
            return self._give_back(c, (submissions.c.id == sid) & (submissions.c.lease_owner == owner),
                                   max_attempts=max_attempts, finding=finding)

    def requeue_expired(self, *, max_attempts: int) -> int:
        """Put back every claim whose lease has expired (its server stopped renewing it), or reject it after
        ``max_attempts``; a claim without a lease (made before leases existed) counts as expired."""
        finding = _finding("attempts", f"scoring this upload was interrupted {max_attempts} time(s) (its server "
                                       "stopped); it will not be tried again")
        with self.engine.begin() as c:
            return self._give_back(c, or_(submissions.c.lease_expires.is_(None),
                                          submissions.c.lease_expires < _now()),
                                   max_attempts=max_attempts, finding=finding)

    def result(self, key: str) -> dict | None:
        with self.engine.connect() as c:
            row = c.execute(select(results).where(results.c.key == key)).mappings().first()
        return None if row is None else {**dict(row), "record": json.loads(row["record"])}

    def finish(self, sid: str, owner: str, key: str, sha256: str, record: dict, status: str,
               entry: dict | None = None) -> bool:
        """Store ``record`` under ``key`` (unless a result is already there: the first one stays) and move
        ``owner``'s claim on ``sid`` to ``scored`` (with its board ``entry``) or ``rejected``, in one transaction.
        False when ``owner`` no longer holds the claim (its lease expired and the row went back to the queue):
        the row is left to its new claim."""
        with self.engine.begin() as c:
            exists = c.execute(select(results.c.key).where(results.c.key == key)).first()
            if exists is None:
                c.execute(insert(results).values(key=key, sha256=sha256, status=record["outcome"]["status"],
                                                 record=json.dumps(record, sort_keys=True), created=_now()))
            won = c.execute(update(submissions).where(submissions.c.id == sid, submissions.c.lease_owner == owner,
                                                      submissions.c.status == "scoring")
                            .values(status=status, finished=_now(), result_key=key, lease_owner=None,
                                    lease_expires=None)).rowcount
            if won and status == "scored" and entry is not None:
                self._put_entries(c, [(sid, entry)])
        return bool(won)

    def counts(self) -> dict[str, int]:
        with self.engine.connect() as c:
            return {s: n for s, n in c.execute(select(submissions.c.status, func.count())
                                               .group_by(submissions.c.status))}

    def scored_rows(self) -> list[dict]:
        """Every scored submission with its full result record (the board's backfill reads what it lacks)."""
        with self.engine.connect() as c:
            rows = c.execute(select(submissions, results.c.record).join(
                results, results.c.key == submissions.c.result_key).where(submissions.c.status == "scored")
                .order_by(submissions.c.created)).mappings().all()
        return [{**dict(r), "record": json.loads(r["record"])} for r in rows]

    def scored_result_keys(self) -> list[str]:
        """The result keys of every scored submission, oldest first, without their records (pages to draw)."""
        with self.engine.connect() as c:
            rows = c.execute(select(submissions.c.result_key).where(submissions.c.status == "scored")
                             .order_by(submissions.c.created)).all()
        return list(dict.fromkeys(r[0] for r in rows))

    # --- the materialised board ------------------------------------------------------------------------------
    def _put_entries(self, c: Connection, entries: list[tuple[str, dict]]) -> None:
        # the counter first: like store_board, lock the one meta row before any board row (no deadlock)
        c.execute(update(board_meta).where(board_meta.c.id == 1).values(changes=board_meta.c.changes + 1))
        for sid, entry in entries:
            text_ = json.dumps(entry, sort_keys=True, allow_nan=False)
            # re-scored: off the board (a page never gets a row whose rendering is gone) until it is rendered again
            if c.execute(update(board).where(board.c.submission_id == sid)
                         .values(entry=text_, row=None, cells=None, position=None, rank=None, **_NO_STATS)
                         ).rowcount == 0:
                c.execute(insert(board).values(submission_id=sid, entry=text_))

    def add_board_entries(self, entries: list[tuple[str, dict]]) -> None:
        """Add (or replace) the board entries of scored submissions, e.g. those scored before the board existed."""
        with self.engine.begin() as c:
            self._put_entries(c, entries)

    def scored_without_entry(self, limit: int = 500) -> list[dict]:
        """Up to ``limit`` scored submissions that have no board entry yet, with their result records."""
        with self.engine.connect() as c:
            rows = c.execute(select(submissions.c.id, results.c.record)
                             .join(results, results.c.key == submissions.c.result_key)
                             .outerjoin(board, board.c.submission_id == submissions.c.id)
                             .where(submissions.c.status == "scored", board.c.submission_id.is_(None))
                             .limit(limit)).all()
        return [{"id": r.id, "record": json.loads(r.record)} for r in rows]

    def board_state(self) -> dict:
        """The board's change counter and what its last refresh stored (columns, column state, renderer)."""
        with self.engine.connect() as c:
            m = c.execute(select(board_meta).where(board_meta.c.id == 1)).mappings().one()
        return {"changes": m["changes"], "columns": json.loads(m["columns"] or "null"),
                "column_state": json.loads(m["column_state"] or "null"), "renderer": m["renderer"]}

    def board_pending(self, *, every: bool = False) -> list[dict]:
        """Entries to render (new or re-scored; ``every`` row with ``every``), each with its text as stored
        (``entry_text``: :meth:`store_board` writes a rendering only over the entry it was made from) and its
        submission's team, date and method."""
        query_ = (select(board.c.submission_id, board.c.entry, submissions.c.created, submissions.c.method,
                         teams.c.name)
                  .join(submissions, submissions.c.id == board.c.submission_id)
                  .join(teams, teams.c.id == submissions.c.team_id))
        if not every:
            query_ = query_.where(board.c.row.is_(None))
        with self.engine.connect() as c:
            rows = c.execute(query_).all()
        return [{"id": r.submission_id, "entry": json.loads(r.entry), "entry_text": r.entry, "created": r.created,
                 "method": r.method, "team": r.name} for r in rows]

    def board_keys(self) -> list[tuple[str, bool, float | None, float | None]]:
        """The ranking keys of every rendered row: (submission id, has metrics, CLL, accuracy)."""
        with self.engine.connect() as c:
            return [tuple(r) for r in c.execute(select(board.c.submission_id, board.c.ranked, board.c.cll,
                                                       board.c.accuracy).where(board.c.row.is_not(None)))]

    def store_board(self, changes: int, *, rendered: list[dict], order: list[tuple[str, int, int | None]],
                    columns: str, column_state: str, config: str, renderer: str) -> bool:
        """Store a refresh computed from the entries at ``changes``: the ``rendered`` rows (``id``, ``entry`` (the
        entry's text as read), ``ranked``, ``cll``, ``accuracy``, ``row``, ``cells``), every row's ``(id, position,
        rank)`` (written where it differs), the columns and configuration.

        Entries that changed since ``changes`` do not hold it back (at 10,000 rows a refresh takes a second or
        two, and submissions scored faster than that would keep every refresh from being stored): a row added
        meanwhile stays off the board and a row re-scored meanwhile keeps neither its old rendering nor a position
        (each write is guarded by the row's entry and rendering), and the refresh that follows that change stores
        them. False (nothing written) only when a refresh computed from newer entries was stored already (another
        server's). The rank intervals are stored apart (:meth:`store_intervals`)."""
        with self._writing() as c:
            built = c.execute(select(board_meta.c.built_from).where(board_meta.c.id == 1).with_for_update()
                              ).scalar_one()
            if built is not None and built > changes:
                return False
            if rendered:
                c.execute(update(board).where(board.c.submission_id == bindparam("b_id"),
                                              board.c.entry == bindparam("b_entry"))
                          .values(ranked=bindparam("b_ranked"), cll=bindparam("b_cll"),
                                  accuracy=bindparam("b_accuracy"), row=bindparam("b_row"),
                                  cells=bindparam("b_cells")),
                          [{f"b_{k}": v for k, v in r.items()} for r in rendered])
            old = {r.submission_id: (r.position, r.rank)
                   for r in c.execute(select(board.c.submission_id, board.c.position, board.c.rank))}
            moved = [{"b_id": sid, "b_position": pos, "b_rank": rank}
                     for sid, pos, rank in order if old.get(sid) != (pos, rank)]
            if moved:
                c.execute(update(board).where(board.c.submission_id == bindparam("b_id"), board.c.row.is_not(None))
                          .values(position=bindparam("b_position"), rank=bindparam("b_rank")), moved)
            c.execute(update(board_meta).where(board_meta.c.id == 1)
                      .values(built_from=changes, columns=columns, column_state=column_state, config=config,
                              renderer=renderer, generated=_now()))
        return True

    def board_version(self) -> Any:
        """When the board was last stored (a page read before that is stale)."""
        with self.engine.connect() as c:
            return c.execute(select(board_meta.c.generated).where(board_meta.c.id == 1)).scalar_one()

    def board_page(self, offset: int, limit: int | None, *, html: bool = False) -> dict:
        """Rows ``offset .. offset + limit`` of the board in order, each ``(rank, extras JSON, row JSON)``
        (``(rank, extras JSON, cells)`` with ``html``), with the total, the columns and configuration of the last
        refresh, the change counter it was built from and the last rank-interval computation."""
        text_ = board.c.cells if html else board.c.row
        with self.engine.connect() as c:
            meta = c.execute(select(board_meta.c.columns, board_meta.c.config, board_meta.c.generated,
                                    board_meta.c.built_from, board_meta.c.intervals)
                             .where(board_meta.c.id == 1)).one()
            total = c.execute(select(func.count()).select_from(board).where(board.c.position.is_not(None))
                              ).scalar_one()
            rows = [tuple(r) for r in c.execute(select(board.c.rank, board.c.extras, text_)
                                                .where(board.c.position.is_not(None))
                                                .order_by(board.c.position).offset(offset).limit(limit))]
        return {"columns": json.loads(meta.columns or "[]"), "config": json.loads(meta.config or "{}"),
                "generated": meta.generated, "built_from": meta.built_from,
                "intervals": json.loads(meta.intervals or "null"), "total": total, "rows": rows}

    # --- the rank intervals' statistics (serve/board.py) ------------------------------------------------------
    def board_without_stats(self, key: str, limit: int = 200) -> list[dict]:
        """Up to ``limit`` board rows whose replicates were not computed under settings ``key``, with their
        result's key and record (``None`` when the stored record is not JSON)."""
        with self.engine.connect() as c:
            rows = c.execute(select(board.c.submission_id, submissions.c.result_key, results.c.record)
                             .join(submissions, submissions.c.id == board.c.submission_id)
                             .join(results, results.c.key == submissions.c.result_key)
                             .where(or_(board.c.stats_key.is_(None), board.c.stats_key != key))
                             .order_by(board.c.submission_id).limit(limit)).all()
        out = []
        for r in rows:
            try:
                record = json.loads(r.record)
            except ValueError:
                record = None
            out.append({"id": r.submission_id, "result_key": r.result_key, "record": record})
        return out

    def store_stats(self, key: str, stats: list[tuple[str, str, str | None, int | None, bytes | None,
                                                      bytes | None]]) -> int:
        """Store rows' replicates ``(id, result key, unit, n, CLL bytes, accuracy bytes)`` computed under settings
        ``key``: only where the submission still has that result (a row re-scored meanwhile is computed again).
        Returns the rows written."""
        if not stats:
            return 0
        with self.engine.begin() as c:
            at = c.execute(select(board_meta.c.changes).where(board_meta.c.id == 1)).scalar_one()
            # the row's own submission by its primary key (``submission_id IN (... WHERE result_key = ?)`` scanned
            # every submission per row: 40 s of write lock for a 10,000-row backfill)
            same = (select(submissions.c.result_key).where(submissions.c.id == board.c.submission_id)
                    .scalar_subquery())
            return c.execute(update(board).where(board.c.submission_id == bindparam("b_id"),
                                                 same == bindparam("b_result"))
                             .values(stats_key=key, stats_at=at, sample_unit=bindparam("b_unit"),
                                     sample_n=bindparam("b_n"), cll_replicates=bindparam("b_cll"),
                                     accuracy_replicates=bindparam("b_accuracy")),
                             [{"b_id": sid, "b_result": rk, "b_unit": unit, "b_n": n, "b_cll": cll, "b_accuracy": acc}
                              for sid, rk, unit, n, cll, acc in stats]).rowcount

    def board_ranked_stats(self, key: str) -> dict:
        """What a rank-interval computation reads, without the replicates themselves: the change counter the
        stored positions were built from, and every ranked row on the board in order as ``{id, rank, cll,
        accuracy, stats_at, unit, n, has_cll, has_accuracy}`` (``stats_at`` None when its replicates were not
        computed under ``key`` yet)."""
        with self.engine.connect() as c:
            built_from = c.execute(select(board_meta.c.built_from).where(board_meta.c.id == 1)).scalar_one()
            rows = c.execute(select(board.c.submission_id, board.c.rank, board.c.cll, board.c.accuracy,
                                    board.c.stats_key, board.c.stats_at, board.c.sample_unit, board.c.sample_n,
                                    board.c.cll_replicates.is_not(None), board.c.accuracy_replicates.is_not(None))
                             .where(board.c.position.is_not(None), board.c.rank.is_not(None))
                             .order_by(board.c.position)).all()
        return {"built_from": built_from, "rows": [
            {"id": r[0], "rank": r[1], "cll": r[2], "accuracy": r[3], "stats_at": r[5] if r[4] == key else None,
             "unit": r[6], "n": r[7], "has_cll": bool(r[8]), "has_accuracy": bool(r[9])} for r in rows]}

    def board_replicates(self, ids: list[str], metric: str) -> dict[str, tuple[int, bytes]]:
        """``{id: (stats_at, replicate bytes)}`` of ``metric`` (``cll`` or ``accuracy``) for the rows ``ids``."""
        column = {"cll": board.c.cll_replicates, "accuracy": board.c.accuracy_replicates}[metric]
        out = {}
        with self.engine.connect() as c:
            for i in range(0, len(ids), 500):
                for sid, at, blob in c.execute(select(board.c.submission_id, board.c.stats_at, column)
                                               .where(board.c.submission_id.in_(ids[i:i + 500]))):
                    if blob is not None:
                        out[sid] = (at, bytes(blob))
        return out

    def store_intervals(self, extras: list[tuple[str, int | None, str | None]], info: str) -> None:
        """Store a rank-interval computation: each ranked row's ``(id, stats_at, extras JSON)`` (written where it
        differs, and only while the row still has the replicates of ``stats_at``: a row re-scored meanwhile keeps
        none until the next computation) and ``info`` (``board_meta.intervals``); the board's version moves, so
        the servers' kept pages are read again. Not tied to the board's change counter: intervals computed a
        moment ago stay valid for the rows they were computed over (``info`` says when and from which board)."""
        with self._writing() as c:
            # the meta row first, as store_board and _put_entries lock it (one lock order: no deadlock)
            c.execute(select(board_meta.c.id).where(board_meta.c.id == 1).with_for_update())
            old = {r.submission_id: (r.stats_at, r.extras)
                   for r in c.execute(select(board.c.submission_id, board.c.stats_at, board.c.extras))}
            changed = [(sid, at, text_) for sid, at, text_ in extras
                       if sid in old and old[sid][1] != text_ and (text_ is None or old[sid][0] == at)]
            cleared = [{"b_id": sid} for sid, _, text_ in changed if text_ is None]
            if cleared:
                c.execute(update(board).where(board.c.submission_id == bindparam("b_id")).values(extras=None),
                          cleared)
            written = [{"b_id": sid, "b_at": at, "b_extras": text_} for sid, at, text_ in changed if text_ is not None]
            if written:
                c.execute(update(board).where(board.c.submission_id == bindparam("b_id"),
                                              board.c.stats_at == bindparam("b_at"))
                          .values(extras=bindparam("b_extras")), written)
            c.execute(update(board_meta).where(board_meta.c.id == 1).values(intervals=info, generated=_now()))


#: What a re-scored row loses until the next refresh and statistics computation.
_NO_STATS = {"extras": None, "stats_key": None, "stats_at": None, "sample_unit": None, "sample_n": None,
             "cll_replicates": None, "accuracy_replicates": None}


#: The SQLite database's file name under ``--data-dir``.
DB_NAME = "ubench-serve.db"
