# SPDX-License-Identifier: MIT
"""``ubench serve`` (start the service) and ``ubench serve team add|revoke`` (the teams' tokens)."""

from __future__ import annotations

import datetime as _dt
import sys
from pathlib import Path

import click

from ..cli_options import Size, sandbox_limit_options, sandbox_limits

__all__ = ["serve"]

_DATA_DIR = click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), required=True,
                         help="Directory of the database (SQLite default), uploads and reports.")
_DB = click.option("--db", "db_url", default=None, metavar="URL",
                   help="SQLAlchemy database URL (e.g. postgresql://user@host/db). [default: SQLite in --data-dir]")


def _require(db_url: str | None, scheduler: str | None = None) -> None:
    """The serve extra, and the postgres extra for a PostgreSQL --db, scale for --scheduler (``ubench/extras.py``)."""
    from ..extras import require

    require("serve", what="ubench serve")
    if db_url is not None and db_url.startswith("postgresql"):
        require("postgres", what="--db postgresql")
    if scheduler is not None:
        require("scale", what="--scheduler")


_SERVE_EXIT_CODES = ("Exit codes: 0 the server stopped; 1 an extra it needs is not installed (its pip install line "
                     "printed); 2 usage error (--reference or --data-dir missing, an unusable reference, a bad "
                     "limit or scheduler), or a data directory or database that cannot be used (one line).")
_TEAM_EXIT_CODES = ("Exit codes: 0 done; 1 no such team, or a team of that name exists already (add), or the "
                    "serve extra is not installed; 2 usage error, or a data directory or database that cannot be "
                    "used.")


def _private_files() -> None:
    """Everything the service creates is its owner's alone: files 0600, directories 0700 (issue #25 item 10;
    the SQLite ``-wal``/``-shm`` files take the database's mode)."""
    import os

    os.umask(0o077)


def _fail(message: str) -> None:
    """A start-up problem (the data directory, the database): one line on stderr and exit 2, no traceback."""
    click.echo(f"error: {' '.join(str(message).split())}", err=True)
    sys.exit(2)


def _db_files(db_url: str | None) -> tuple[str, ...]:
    """The SQLite files in the data directory (none with ``--db``)."""
    from .db import DB_NAME

    return () if db_url else (DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm")


def _start_error(exc: BaseException, db_url: str | None) -> str:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    if isinstance(exc, SQLAlchemyError):
        where = "the SQLite database in --data-dir" if db_url is None else \
            make_url(db_url).render_as_string(hide_password=True)
        orig = getattr(exc, "orig", None)
        text = str(orig if orig is not None else exc).strip().splitlines() or [type(exc).__name__]
        return f"cannot use {where}: {text[0]}"
    return str(exc)


def _open_database(data_dir: Path, db_url: str | None):
    """The database of ``team add|revoke``, in a checked private data directory; or a one-line error, exit 2."""
    from sqlalchemy.exc import SQLAlchemyError

    from .storage import DataDirError, prepare_data_dir

    _private_files()
    try:
        prepare_data_dir(data_dir, _db_files(db_url))
        from .db import Database

        return Database.for_data_dir(data_dir, db_url).check_writable()
    except (DataDirError, SQLAlchemyError) as exc:
        _fail(_start_error(exc, db_url))


@click.group(invoke_without_command=True, epilog=_SERVE_EXIT_CODES)
@click.option("--reference", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Trusted reference label file (`ubench reference`): every upload is scored against it.")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory of the database (SQLite default), uploads and reports; made private (0700).")
@_DB
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Scoring threads (each runs its archive in a limited child process).  [default: 1]")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Score on the workers of this Dask scheduler (tcp://host:8786) instead, one archive per worker "
                   "thread, each still in the sandbox; the workers must see --data-dir at the same path.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--protocol", "preset", type=click.Choice(("pitfalls", "ursabench", "shift")), default="pitfalls",
              show_default=True, help="Scoring protocol preset.")
@sandbox_limit_options
@click.option("--max-upload", "max_upload", type=Size(), default="512M", show_default=True,
              help="Largest archive accepted (checked while the body streams).")
@click.option("--max-per-day", type=click.IntRange(min=1), default=50, show_default=True,
              help="Uploads per team in any 24 hours (counted from the moment an upload starts).")
@click.option("--max-concurrent", type=click.IntRange(min=1), default=2, show_default=True,
              help="Uploads per team in progress at once (across every server on the database).")
@click.option("--upload-timeout", type=click.FloatRange(min=0, min_open=True), default=600.0, show_default=True,
              help="Seconds one upload may take from its request's head to its body's end (then 408).")
@click.option("--header-timeout", type=click.FloatRange(min=0, min_open=True), default=10.0, show_default=True,
              help="Seconds a connection may take to send a complete request head (then 408 and closed).")
@click.option("--lease", type=click.FloatRange(min=1), default=60.0, show_default=True,
              help="Seconds a scoring claim stays valid without its server's heartbeat (sent every quarter of "
                   "it); a stopped server's claims are scored again after it.")
@click.option("--max-attempts", type=click.IntRange(min=1), default=3, show_default=True,
              help="Claims of one submission before it is rejected with a reason (a server that dies on it, a "
                   "host error).")
@click.option("--hidden-until", default=None, metavar="ISO-8601",
              help="Hide every result (board, reports, a team's own scores and timing) until this UTC time.")
@click.pass_context
def serve(ctx, reference, data_dir, db_url, workers, scheduler, host, port, preset, memory_limit, cpu_limit, timeout,
          max_upload, max_per_day, max_concurrent, upload_timeout, header_timeout, lease, max_attempts,
          hidden_until):
    """Run the benchmark host's upload service: uploads over HTTP, a live leaderboard that re-scores every upload.

    \b
    ubench serve team add my-team --data-dir srv      (prints the team's token once)
    ubench serve --reference ref.h5 --data-dir srv    (http://127.0.0.1:8000/)
    curl -H "Authorization: Bearer TOKEN" -F archive=@run.h5 -F method=de http://127.0.0.1:8000/api/submissions

    A data directory or database that cannot be used is a one-line error and exit code 2.
    """
    _require(db_url, scheduler)
    if ctx.invoked_subcommand is not None:
        return
    if reference is None or data_dir is None:
        raise click.UsageError("ubench serve needs --reference and --data-dir")
    if workers is not None and scheduler is not None:
        raise click.UsageError("--workers and --scheduler exclude each other (the cluster's workers score)")
    from .storage import DataDirError, prepare_data_dir

    _private_files()
    try:  # before the heavy imports: a bad data directory is said at once (create_app checks it again)
        prepare_data_dir(data_dir, _db_files(db_url))
    except DataDirError as exc:
        _fail(str(exc))
    import uvicorn
    from sqlalchemy.exc import SQLAlchemyError

    from ..scoring.leaderboard import BoardConfig
    from ..scoring.protocols import Protocol
    from ..scoring.reference import ReferenceError
    from .app import ServeConfig, create_app
    from .connection import with_header_timeout

    until = None
    if hidden_until:
        try:
            until = _dt.datetime.fromisoformat(hidden_until)
        except ValueError:
            raise click.UsageError(f"--hidden-until: not an ISO-8601 time: {hidden_until!r}") from None
        until = until if until.tzinfo else until.replace(tzinfo=_dt.timezone.utc)
    limits = sandbox_limits(memory_limit, cpu_limit, timeout, max_file_bytes=max_upload)
    try:
        board = BoardConfig.create(reference=reference, protocol=Protocol.preset(preset), sandbox=limits)
    except (ValueError, ReferenceError) as exc:
        raise click.UsageError(str(exc)) from None
    cfg = ServeConfig(data_dir=data_dir, board=board, db_url=db_url, workers=workers or 1, scheduler=scheduler,
                      max_upload_bytes=max_upload, max_per_day=max_per_day, max_concurrent=max_concurrent,
                      upload_timeout=upload_timeout, lease=lease, max_attempts=max_attempts, hidden_until=until)
    if scheduler is not None:
        from ..scoring.distributed import SchedulerClient

        try:  # a wrong address is a usage error here, not a traceback from the server's start-up
            SchedulerClient(scheduler, timeout=15).close()
        except (OSError, TimeoutError, ValueError) as exc:
            raise click.UsageError(f"--scheduler: cannot reach a Dask scheduler at {scheduler!r}: {exc}") from None
    _private_files()
    try:
        app = create_app(cfg)
    except (DataDirError, SQLAlchemyError) as exc:
        _fail(_start_error(exc, db_url))
    click.echo(f"ubench serve: http://{host}:{port}/ (data in {data_dir})", err=True)
    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_keep_alive=5,
                http=with_header_timeout(header_timeout), h11_max_incomplete_event_size=16 * 1024)


@serve.group(epilog=_TEAM_EXIT_CODES)
def team() -> None:
    """Teams and their bearer tokens (only a hash of each token is stored)."""


@team.command("add", epilog=_TEAM_EXIT_CODES)
@click.argument("name")
@_DATA_DIR
@_DB
def team_add(name: str, data_dir: Path, db_url: str | None) -> None:
    """Create team NAME and print its token (shown once)."""
    _require(db_url)
    from sqlalchemy.exc import IntegrityError

    db = _open_database(data_dir, db_url)
    try:
        token = db.add_team(name)
    except IntegrityError:
        click.echo(f"error: team {name!r} exists", err=True)
        sys.exit(1)
    click.echo(token)


@team.command("revoke", epilog=_TEAM_EXIT_CODES)
@click.argument("name")
@_DATA_DIR
@_DB
def team_revoke(name: str, data_dir: Path, db_url: str | None) -> None:
    """Revoke team NAME's token: its uploads are refused from now on (its results stay)."""
    _require(db_url)
    if not _open_database(data_dir, db_url).revoke_team(name):
        click.echo(f"error: no team {name!r}", err=True)
        sys.exit(1)
    click.echo(f"revoked {name}")
