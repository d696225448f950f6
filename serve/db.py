# SPDX-License-Identifier: MIT
"""The service's database: teams, submissions (the queue) and results (one per archive content and scoring
configuration). SQLAlchemy 2 Core, so one schema runs on SQLite (the embedded default, WAL mode) and PostgreSQL.

The queue lives here, not in memory: a submission is ``queued`` once its row is committed (the HTTP 202 is sent
after that), a worker claims it with one conditional UPDATE (``queued -> scoring``; only one claimer can win), and
the outcome is stored with the state change in one transaction. ``requeue_interrupted`` puts back every
``scoring`` row at start-up (its worker died with the server), so a kill -9 loses nothing; results are keyed by
(archive sha256, configuration key), so an archive uploaded twice, or re-claimed after a crash, is scored once.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import secrets
import time
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import (Boolean, Column, DateTime, ForeignKey, Index, Integer, MetaData, String, Table, Text,
                        create_engine, event, func, insert, inspect, select, text, update)
from sqlalchemy.engine import Engine

__all__ = ["Database", "STATUSES", "upgrade_to_head", "MIGRATIONS"]

STATUSES = ("queued", "scoring", "scored", "rejected")

metadata = MetaData()

teams = Table(
    "teams", metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(200), unique=True, nullable=False),
    Column("token_sha256", String(64), unique=True, nullable=False),
    Column("revoked", Boolean, nullable=False, default=False),
    Column("created", DateTime(timezone=True), nullable=False),
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
    Index("ix_submissions_status_created", "status", "created"),  # claim_next: the queue in arrival order
    Index("ix_submissions_team_created", "team_id", "created"),  # count_since: a team's uploads per day
)

results = Table(
    "results", metadata,
    Column("key", String(200), primary_key=True),  # "<sha256>-<config key>"
    Column("sha256", String(64), nullable=False),
    Column("status", String(32), nullable=False),
    Column("record", Text, nullable=False),  # the leaderboard's result record (JSON)
    Column("created", DateTime(timezone=True), nullable=False),
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
        return cls(url or f"sqlite:///{Path(data_dir).resolve() / 'ubench-serve.db'}")

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

    # --- submissions ---------------------------------------------------------------------------------------
    def add_submission(self, team_id: int, sha256: str, size: int, method: str | None, notes: str | None) -> str:
        sid = str(uuid.uuid4())
        with self.engine.begin() as c:
            c.execute(insert(submissions).values(id=sid, team_id=team_id, sha256=sha256, size=size, method=method,
                                                 notes=notes, status="queued", created=_now(), attempts=0))
        return sid

    def count_since(self, team_id: int, since: _dt.datetime) -> int:
        with self.engine.connect() as c:
            return c.execute(select(func.count()).select_from(submissions).where(
                submissions.c.team_id == team_id, submissions.c.created >= since)).scalar_one()

    def submission(self, sid: str) -> dict | None:
        with self.engine.connect() as c:
            row = c.execute(select(submissions).where(submissions.c.id == sid)).mappings().first()
        return dict(row) if row else None

    def claim_next(self) -> dict | None:
        """Claim the oldest queued submission for scoring (``None`` when the queue is empty)."""
        with self.engine.begin() as c:
            for row in c.execute(select(submissions.c.id).where(submissions.c.status == "queued")
                                 .order_by(submissions.c.created).limit(8)).all():
                won = c.execute(update(submissions).where(submissions.c.id == row.id,
                                                          submissions.c.status == "queued")
                                .values(status="scoring", started=_now(),
                                        attempts=submissions.c.attempts + 1)).rowcount
                if won:
                    return dict(c.execute(select(submissions).where(submissions.c.id == row.id)).mappings().one())
        return None

    def requeue_interrupted(self) -> int:
        """Put every ``scoring`` submission back in the queue (its worker died with the previous server)."""
        with self.engine.begin() as c:
            return c.execute(update(submissions).where(submissions.c.status == "scoring")
                             .values(status="queued", started=None)).rowcount

    def result(self, key: str) -> dict | None:
        with self.engine.connect() as c:
            row = c.execute(select(results).where(results.c.key == key)).mappings().first()
        return None if row is None else {**dict(row), "record": json.loads(row["record"])}

    def finish(self, sid: str, key: str, sha256: str, record: dict, status: str) -> None:
        """Store ``record`` under ``key`` (unless a result is already there: the first one stays) and mark the
        submission ``scored`` or ``rejected``, in one transaction."""
        with self.engine.begin() as c:
            exists = c.execute(select(results.c.key).where(results.c.key == key)).first()
            if exists is None:
                c.execute(insert(results).values(key=key, sha256=sha256, status=record["outcome"]["status"],
                                                 record=json.dumps(record, sort_keys=True), created=_now()))
            c.execute(update(submissions).where(submissions.c.id == sid)
                      .values(status=status, finished=_now(), result_key=key))

    def scored_rows(self) -> list[dict]:
        """Every scored submission with its result record (the leaderboard's input)."""
        with self.engine.connect() as c:
            rows = c.execute(select(submissions, results.c.record).join(
                results, results.c.key == submissions.c.result_key).where(submissions.c.status == "scored")
                .order_by(submissions.c.created)).mappings().all()
        return [{**dict(r), "record": json.loads(r["record"])} for r in rows]

    def counts(self) -> dict[str, int]:
        with self.engine.connect() as c:
            return {s: n for s, n in c.execute(select(submissions.c.status, func.count())
                                               .group_by(submissions.c.status))}
