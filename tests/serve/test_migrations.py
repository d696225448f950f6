# SPDX-License-Identifier: MIT
"""The service's Alembic migrations (serve/migrations, issue #18 item 2), on SQLite and on the real PostgreSQL of
conftest.py: a fresh database reaches head and equals the models (Alembic's autogenerate diff is the oracle: it
must be empty); a database made by the previous ``create_all`` layout is stamped and upgraded with its rows
intact; servers starting at once migrate one after the other."""

from __future__ import annotations

import datetime as dt
import threading

import pytest

pytest.importorskip("alembic")
sa = pytest.importorskip("sqlalchemy")

from alembic.autogenerate import compare_metadata  # noqa: E402
from alembic.migration import MigrationContext  # noqa: E402

from ubench.serve.db import Database, metadata  # noqa: E402

HEAD = "0004"


def _previous_layout() -> sa.MetaData:
    """The tables as serve/db.py declared them before migrations existed (commit aebee09), which
    ``metadata.create_all`` made on every start."""
    m = sa.MetaData()
    sa.Table("teams", m, sa.Column("id", sa.Integer, primary_key=True),
             sa.Column("name", sa.String(200), unique=True, nullable=False),
             sa.Column("token_sha256", sa.String(64), unique=True, nullable=False),
             sa.Column("revoked", sa.Boolean, nullable=False, default=False),
             sa.Column("created", sa.DateTime(timezone=True), nullable=False))
    sa.Table("submissions", m, sa.Column("id", sa.String(36), primary_key=True),
             sa.Column("team_id", sa.Integer, sa.ForeignKey("teams.id"), nullable=False, index=True),
             sa.Column("sha256", sa.String(64), nullable=False, index=True),
             sa.Column("size", sa.Integer, nullable=False), sa.Column("method", sa.String(200)),
             sa.Column("notes", sa.Text), sa.Column("status", sa.String(16), nullable=False, index=True),
             sa.Column("created", sa.DateTime(timezone=True), nullable=False),
             sa.Column("started", sa.DateTime(timezone=True)), sa.Column("finished", sa.DateTime(timezone=True)),
             sa.Column("attempts", sa.Integer, nullable=False, default=0), sa.Column("result_key", sa.String(200)))
    sa.Table("results", m, sa.Column("key", sa.String(200), primary_key=True),
             sa.Column("sha256", sa.String(64), nullable=False), sa.Column("status", sa.String(32), nullable=False),
             sa.Column("record", sa.Text, nullable=False),
             sa.Column("created", sa.DateTime(timezone=True), nullable=False))
    return m


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    if request.param == "postgresql":
        return request.getfixturevalue("postgres_db")
    return f"sqlite:///{tmp_path / 'serve.db'}"


def _state(url: str, target: sa.MetaData = metadata) -> tuple[str | None, list]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as c:
            ctx = MigrationContext.configure(c)
            return ctx.get_current_revision(), compare_metadata(ctx, target)
    finally:
        engine.dispose()


def test_fresh_database_reaches_head_equal_to_the_models(url):
    Database(url).engine.dispose()
    revision, diff = _state(url)
    assert revision == HEAD and diff == []
    Database(url).engine.dispose()  # a second start finds it at head and changes nothing
    assert _state(url) == (HEAD, [])


def test_previous_create_all_database_is_upgraded_without_data_loss(url):
    old = _previous_layout()
    engine = sa.create_engine(url)
    now = dt.datetime(2026, 11, 20, tzinfo=dt.timezone.utc)
    with engine.begin() as c:
        old.create_all(c)
        c.execute(old.tables["teams"].insert().values(id=1, name="alpha", token_sha256="a" * 64, revoked=False,
                                                      created=now))
        c.execute(old.tables["results"].insert().values(key="k", sha256="b" * 64, status="ok", record='{"x": 1}',
                                                        created=now))
        c.execute(old.tables["submissions"].insert().values(
            id="s1", team_id=1, sha256="b" * 64, size=10, method="<m>", notes=None, status="scored", created=now,
            attempts=1, result_key="k"))
    engine.dispose()
    revision, diff = _state(url, old)
    assert revision is None and diff == []  # the oracle layout really is what the old code made
    db = Database(url)
    assert _state(url) == (HEAD, [])
    rows = db.scored_rows()
    assert [(r["id"], r["method"], r["record"]) for r in rows] == [("s1", "<m>", {"x": 1})]
    assert db.team_names() == {1: "alpha"}
    db.engine.dispose()


def test_downgrade_to_the_initial_revision_gives_the_previous_layout(url):
    from alembic import command

    from ubench.serve.db import _alembic_config

    Database(url).engine.dispose()
    engine = sa.create_engine(url)
    with engine.begin() as c:
        command.downgrade(_alembic_config(c), "0001")
    engine.dispose()
    assert _state(url, _previous_layout()) == ("0001", [])


def test_servers_starting_at_once_migrate_one_after_the_other(url):
    errors, barrier = [], threading.Barrier(4)

    def start():
        try:
            barrier.wait()
            Database(url).engine.dispose()
        except Exception as exc:  # noqa: BLE001 - collected and shown below
            errors.append(repr(exc))

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and _state(url) == (HEAD, [])


def test_a_new_sqlite_database_another_start_holds_is_waited_for(tmp_path):
    """Switching a new SQLite database to WAL needs it alone, and SQLite says "database is locked" at once (no busy
    wait) while another connection holds a write lock: the start waits for it instead of failing (CI saw one of
    four simultaneous starts fail so)."""
    import sqlite3

    path = tmp_path / "s.db"
    holder = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("CREATE TABLE other_start (a)")
    threading.Timer(0.5, lambda: holder.execute("COMMIT")).start()
    db = Database(f"sqlite:///{path}")
    with db.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    db.engine.dispose()
    holder.close()
