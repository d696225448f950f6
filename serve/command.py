# SPDX-License-Identifier: MIT
"""``ubench serve`` (start the service) and ``ubench serve team add|revoke`` (the teams' tokens)."""

from __future__ import annotations

import datetime as _dt
import sys
from pathlib import Path

import click

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
                     "limit or scheduler).")
_TEAM_EXIT_CODES = ("Exit codes: 0 done; 1 no such team, or a team of that name exists already (add), or the "
                    "serve extra is not installed; 2 usage error.")


@click.group(invoke_without_command=True, epilog=_SERVE_EXIT_CODES)
@click.option("--reference", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Trusted reference label file (`ubench reference`): every upload is scored against it.")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory of the database (SQLite default), uploads and reports.")
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
@click.option("--max-upload", "max_upload", default="512M", show_default=True,
              help="Largest archive accepted (checked while the body streams).")
@click.option("--max-per-day", type=click.IntRange(min=1), default=50, show_default=True,
              help="Uploads per team in any 24 hours.")
@click.option("--max-concurrent", type=click.IntRange(min=1), default=2, show_default=True,
              help="Uploads per team in progress at once.")
@click.option("--hidden-until", default=None, metavar="ISO-8601",
              help="Hide every result (board, reports) until this UTC time.")
@click.pass_context
def serve(ctx, reference, data_dir, db_url, workers, scheduler, host, port, preset, max_upload, max_per_day,
          max_concurrent, hidden_until):
    """Run the benchmark host's upload service: uploads over HTTP, a live leaderboard that re-scores every upload.

    \b
    ubench serve team add my-team --data-dir srv      (prints the team's token once)
    ubench serve --reference ref.h5 --data-dir srv    (http://127.0.0.1:8000/)
    curl -H "Authorization: Bearer TOKEN" -F archive=@run.h5 -F method=de http://127.0.0.1:8000/api/submissions
    """
    _require(db_url, scheduler)
    if ctx.invoked_subcommand is not None:
        return
    if reference is None or data_dir is None:
        raise click.UsageError("ubench serve needs --reference and --data-dir")
    if workers is not None and scheduler is not None:
        raise click.UsageError("--workers and --scheduler exclude each other (the cluster's workers score)")
    import uvicorn

    from ..scoring.leaderboard import BoardConfig
    from ..scoring.protocols import Protocol
    from ..scoring.reference import ReferenceError
    from ..scoring.sandbox import SandboxLimits, parse_size
    from .app import ServeConfig, create_app

    until = None
    if hidden_until:
        try:
            until = _dt.datetime.fromisoformat(hidden_until)
        except ValueError:
            raise click.UsageError(f"--hidden-until: not an ISO-8601 time: {hidden_until!r}") from None
        until = until if until.tzinfo else until.replace(tzinfo=_dt.timezone.utc)
    try:
        limit = parse_size(max_upload)
        board = BoardConfig.create(reference=reference, protocol=Protocol.preset(preset),
                                   sandbox=SandboxLimits(max_file_bytes=limit))
    except (ValueError, ReferenceError) as exc:
        raise click.UsageError(str(exc)) from None
    cfg = ServeConfig(data_dir=data_dir, board=board, db_url=db_url, workers=workers or 1, scheduler=scheduler,
                      max_upload_bytes=limit,
                      max_per_day=max_per_day, max_concurrent=max_concurrent, hidden_until=until)
    if scheduler is not None:
        from ..scoring.distributed import SchedulerClient

        try:  # a wrong address is a usage error here, not a traceback from the server's start-up
            SchedulerClient(scheduler, timeout=15).close()
        except (OSError, TimeoutError, ValueError) as exc:
            raise click.UsageError(f"--scheduler: cannot reach a Dask scheduler at {scheduler!r}: {exc}") from None
    app = create_app(cfg)
    click.echo(f"ubench serve: http://{host}:{port}/ (data in {data_dir})", err=True)
    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_keep_alive=5)


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

    from .db import Database

    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        token = Database.for_data_dir(data_dir, db_url).add_team(name)
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
    from .db import Database

    if not Database.for_data_dir(data_dir, db_url).revoke_team(name):
        click.echo(f"error: no team {name!r}", err=True)
        sys.exit(1)
    click.echo(f"revoked {name}")
