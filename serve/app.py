# SPDX-License-Identifier: MIT
"""The HTTP API and pages of ``ubench serve`` (FastAPI: a maintained ASGI framework with request streaming, an
OpenAPI schema for free and plain Starlette underneath; served by uvicorn).

Routes, and who may read them:

- ``POST /api/submissions`` (multipart: ``archive``, optional ``method`` and ``notes``; ``Authorization: Bearer
  TOKEN``) answers ``202 {"id", "status": "queued", "sha256"}`` once the upload is stored and its queue row
  committed; scoring never runs on the request path. The upload counts against the team's quotas from its first
  byte (a reservation in the database). Refusals, each a one-line ``{"error"}`` with nothing stored: 401 a
  missing/unknown/revoked token, 429 the uploads per day or in progress, 415/400/413 a body that is not a proper
  multipart form (``storage.py``), 408 a client that stalls or passes the upload's deadline.
- ``GET /api/submissions/{id}``: the submitting team only (its token; another team's id, or an unknown one, is
  404 alike). The status, the findings of a rejection and, once results are public, the summary and timing.
- ``GET /api/leaderboard`` (``?offset``, ``?limit``; ``?format=csv`` for every row), ``GET /`` (``?page``), ``GET
  /submissions/{id}`` (a scored submission's report): public, and before ``--hidden-until`` refused to everyone,
  the submitting team included (403; a page saying so; 404).

Before ``--hidden-until`` nothing from which a result could be derived leaves the server (issue #25 item 1): no
metric, rank, rank interval, report or timing; a team sees its uploads' status and the findings of a rejection only.

A report's per-sample statistics (its ``samples``: which test samples each upload got right, the board's rank
intervals are computed from them) never leave the server, before or after the deadline (issue #26 item 7): the
status gives the ``summary`` alone, the report page is drawn from the report without them, and the board serves
each row's interval, not its statistics.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from sqlalchemy.exc import SQLAlchemyError
from starlette.concurrency import run_in_threadpool

from ..scoring.leaderboard import BoardConfig
from .db import DB_NAME, Database, Refusal
from .pages import CSP, PAGE_ROWS, board_csv, board_html, board_tr, intervals_note, message_page, rank_extras
from .storage import UploadError, open_data_dir, receive_upload
from .worker import Scorer

__all__ = ["ServeConfig", "create_app", "API_PAGE_ROWS"]

log = logging.getLogger("ubench.serve")

#: Rows of ``GET /api/leaderboard`` by default, and the most one request may ask for.
API_PAGE_ROWS = (100, 1000)
#: Seconds a server serves the board (and the status counts) it last read before it asks the database again.
BOARD_CHECK = 0.25


@dataclass
class ServeConfig:
    data_dir: Path
    board: BoardConfig
    db_url: str | None = None
    workers: int = 1
    scheduler: str | None = None
    max_upload_bytes: int = 512 * 2**20
    max_per_day: int = 50
    max_concurrent: int = 2
    chunk_timeout: float = 30.0
    upload_timeout: float = 600.0
    lease: float = 60.0
    max_attempts: int = 3
    hidden_until: _dt.datetime | None = None
    reports: bool = True
    extra: dict = field(default_factory=dict)


def _json_error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _html(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers={"Content-Security-Policy": CSP,
                                                           "X-Content-Type-Options": "nosniff",
                                                           "Referrer-Policy": "no-referrer"})


def _iso(value) -> str | None:
    return value.isoformat() if hasattr(value, "isoformat") else value


@dataclass
class _Service:
    """What the routes read: the configuration, the database, the scorer, the data directory, and the board's page
    cache (``board_page``) and recent reads (``recent``) of ``create_app``.

    The routes' bodies are module-level functions of it, their FastAPI handlers only forward: mutmut (issue #27
    item 8, bench/bench_mutation.py) mutates neither decorated functions nor what they hold, and tests each
    function's mutants with the tests that reach that function."""

    cfg: ServeConfig
    db: Database
    scorer: Scorer
    data_dir: Path
    board_page: Callable[..., tuple]
    recent: Callable[..., object]


def _team_of(svc: _Service, request: Request) -> dict | None:
    auth = request.headers.get("authorization", "")
    if not auth.lower().startswith("bearer "):
        return None
    return svc.db.team_for_token(auth[7:].strip())


def _hidden(cfg: ServeConfig) -> bool:
    """Results are not public yet (``--hidden-until`` is in the future): for everyone, owners included."""
    return cfg.hidden_until is not None and _dt.datetime.now(_dt.timezone.utc) < cfg.hidden_until


async def _submit(svc: _Service, request: Request):
    cfg, db = svc.cfg, svc.db
    deadline = time.monotonic() + cfg.upload_timeout
    # database calls run in the thread pool: the event loop keeps accepting other uploads meanwhile
    team = await run_in_threadpool(_team_of, svc, request)
    if team is None:
        return _json_error(401, "missing, unknown or revoked bearer token")
    held = await run_in_threadpool(db.reserve_upload, team["id"], max_per_day=cfg.max_per_day,
                                   max_concurrent=cfg.max_concurrent, ttl=cfg.upload_timeout + 60)
    if isinstance(held, Refusal):
        return _json_error(429, f"team {team['name']!r} already has {held.message}")
    stored = None
    try:
        stored = await receive_upload(request, svc.data_dir, max_bytes=cfg.max_upload_bytes,
                                      chunk_timeout=cfg.chunk_timeout, deadline=deadline)
        sid = await run_in_threadpool(db.complete_upload, held, team["id"], stored.sha256, stored.size,
                                      stored.fields.get("method"), stored.fields.get("notes"))
    except UploadError as exc:
        await run_in_threadpool(db.release_upload, held)
        return _json_error(exc.status, exc.message)
    except SQLAlchemyError as exc:
        log.warning("the database refused an upload of team %r: %s", team["name"],
                    " ".join(str(getattr(exc, "orig", None) or exc).split())[:300])
        with contextlib.suppress(SQLAlchemyError):
            await run_in_threadpool(db.release_upload, held)
        if stored is not None:  # no orphan file: kept only if another submission names the same bytes
            with contextlib.suppress(SQLAlchemyError, OSError):
                if not await run_in_threadpool(db.references_upload, stored.sha256):
                    stored.path.unlink(missing_ok=True)
        return _json_error(503, "the service's database refused the upload; nothing was stored, try again")
    except BaseException:  # cancelled (the client went away) or a bug: the reservation does not stay
        with contextlib.suppress(Exception):
            await run_in_threadpool(db.release_upload, held)
        raise
    svc.scorer.wake()
    return JSONResponse({"id": sid, "status": "queued", "sha256": stored.sha256}, status_code=202)


def _status(svc: _Service, sid: str, request: Request):
    cfg, db = svc.cfg, svc.db
    team = _team_of(svc, request)
    if team is None:
        return _json_error(401, "missing, unknown or revoked bearer token")
    sub = db.submission(sid)
    if sub is None or sub["team_id"] != team["id"]:
        return _json_error(404, f"no submission {sid[:40]!r} for team {team['name']!r}")
    out = {k: _iso(sub[k]) for k in ("id", "status", "sha256", "size", "method", "created")}
    record = db.result(sub["result_key"])["record"] if sub["result_key"] else None
    outcome = (record or {}).get("outcome", {})
    if sub["status"] == "rejected":
        found = outcome.get("findings", []) if record else (sub["findings"] or [])
        out["findings"] = [f for f in found if f.get("severity") == "error"]
    if _hidden(cfg):  # a team's own upload must not tell it anything the hidden labels decide
        out["hidden_until"] = cfg.hidden_until.isoformat()
        return out
    out.update(started=_iso(sub["started"]), finished=_iso(sub["finished"]))
    if sub["status"] == "rejected" and record:
        out["outcome"] = outcome.get("status")
    elif sub["status"] == "scored":
        out["summary"] = (outcome.get("report") or {}).get("summary")
        out["report"] = f"/submissions/{sid}"
    return out


def _leaderboard(svc: _Service, format: str, offset: int, limit: int):
    cfg, db = svc.cfg, svc.db
    if _hidden(cfg):
        return _json_error(403, f"results are hidden until {cfg.hidden_until.isoformat()}")
    if format == "csv":
        page = db.board_page(0, None)
        return PlainTextResponse(board_csv(page["columns"], page["rows"]), media_type="text/csv")
    if format != "json" or offset < 0 or not 1 <= limit <= API_PAGE_ROWS[1]:
        return _json_error(400, f"format is json or csv, offset at least 0, limit 1 to {API_PAGE_ROWS[1]}")
    page, rows = svc.board_page(offset, limit, html=False)
    info = page["intervals"]
    head = json.dumps({"columns": page["columns"], "config": page["config"],
                       "counts": svc.recent("counts", db.counts, BOARD_CHECK),
                       "generated": _iso(page["generated"]), "limit": limit, "offset": offset,
                       "rank_intervals": None if info is None else {
                           **info, "stale": info.get("built_from") != page["built_from"]},
                       "total": page["total"]})
    return Response(f'{head[:-1]},"rows":[{rows}]}}', media_type="application/json")


def _page(svc: _Service, page: int):
    if _hidden(svc.cfg):
        return _html(message_page(f"Results are hidden until {svc.cfg.hidden_until.isoformat()}."))
    page = max(1, page)
    got, rows = svc.board_page((page - 1) * PAGE_ROWS, PAGE_ROWS, html=True)
    return _html(board_html(got["columns"], got["config"], rows, page=page, total=got["total"],
                            note=intervals_note(got["intervals"], got["built_from"])))


def _report_page(svc: _Service, sid: str):
    sub = None if _hidden(svc.cfg) else svc.db.submission(sid)
    if sub is None or sub["status"] != "scored":
        return _html(message_page("No scored submission with that id."), 404)
    path = svc.data_dir / "reports" / f"{sub['result_key']}.html"
    if not path.is_file():
        return _html(message_page("This report's page is being drawn (or could not be); the numbers are on "
                                  "the leaderboard."), 404)
    return _html(path.read_text(encoding="utf-8"))


def create_app(cfg: ServeConfig) -> FastAPI:
    """The app over ``cfg.data_dir`` (checked, made private and claimed: ``storage.open_data_dir``) and its
    database (migrated to the newest schema). Raises ``storage.DataDirError`` or SQLAlchemy's errors when either
    cannot be used (a read-only database among them)."""
    files = () if cfg.db_url else (DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm")
    claimed = open_data_dir(cfg.data_dir, files)
    data_dir = claimed.path
    try:
        db = Database.for_data_dir(data_dir, cfg.db_url).check_writable()
    except BaseException:
        claimed.close()
        raise
    scorer = Scorer(db, data_dir, cfg.board, workers=cfg.workers, reports=cfg.reports, scheduler=cfg.scheduler,
                    lease=cfg.lease, max_attempts=cfg.max_attempts)

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        scorer.start()
        yield
        scorer.stop()
        claimed.close()

    app = FastAPI(title="ubench serve", version="1", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.state.db, app.state.scorer, app.state.config = db, scorer, cfg

    pages: dict[tuple, tuple] = {}  # the last refresh's board pages as served, dropped when the board changes
    pages_lock = threading.Lock()
    seen: dict[str, tuple] = {}  # name -> (when it was read, value): the board's version and the status counts

    def recent(name: str, read, max_age: float):
        """``read()``, or its value read less than ``max_age`` seconds ago: eight readers of the board cost the
        database a query or two a second, not one each."""
        now = time.monotonic()
        got = seen.get(name)
        if got is None or now - got[0] > max_age:
            got = seen[name] = (now, read())
        return got[1]

    def board_page(offset: int, limit: int | None, *, html: bool) -> tuple:
        """``(page, joined rows)`` of the stored board (``db.board_page``), kept until the next refresh stores the
        board (its ``generated`` time, checked at most every :data:`BOARD_CHECK` seconds, changes)."""
        version = recent("version", db.board_version, BOARD_CHECK)
        key = (offset, limit, html)
        with pages_lock:
            if pages.get("version") != version:
                pages.clear()
                pages["version"] = version
            hit = pages.get(key)
        if hit is None:
            page = db.board_page(offset, limit, html=html)
            if html:
                rows = "\n".join(board_tr(rank, extras, cells) for rank, extras, cells in page["rows"])
            else:  # the stored rows are JSON already (serve/board.py): each gets its rank and rank interval
                rows = ",".join(f'{{"rank":{json.dumps(rank)},{json.dumps(rank_extras(extras))[1:-1]},{text[1:]}'
                                for rank, extras, text in page["rows"])
            hit = (page, rows)
            with pages_lock:
                if pages.get("version") == version and len(pages) < 256:
                    pages[key] = hit
        return hit

    svc = _Service(cfg, db, scorer, data_dir, board_page, recent)

    # the handlers only forward (see _Service)
    @app.post("/api/submissions", status_code=202)
    async def submit(request: Request):
        return await _submit(svc, request)

    @app.get("/api/submissions/{sid}")
    def status(sid: str, request: Request):
        return _status(svc, sid, request)

    @app.get("/api/leaderboard")
    def leaderboard(format: str = "json", offset: int = 0, limit: int = API_PAGE_ROWS[0]):
        return _leaderboard(svc, format, offset, limit)

    @app.get("/", response_class=HTMLResponse)
    def page(page: int = 1):
        return _page(svc, page)

    @app.get("/submissions/{sid}", response_class=HTMLResponse)
    def report_page(sid: str):
        return _report_page(svc, sid)

    @app.exception_handler(404)
    async def not_found(_request, _exc):
        return _json_error(404, "not found")

    return app
