# SPDX-License-Identifier: MIT
"""The HTTP API and pages of ``ubench serve`` (FastAPI: a maintained ASGI framework with request streaming, an
OpenAPI schema for free and plain Starlette underneath; served by uvicorn).

``POST /api/submissions`` (multipart: ``archive``, optional ``method`` and ``notes``; ``Authorization: Bearer
TOKEN``) answers ``202 {"id", "status": "queued", "sha256"}`` once the upload is stored and its queue row
committed; scoring never runs on the request path. ``GET /api/submissions/{id}`` (the submitting team's token)
gives the status, the findings of a rejection, the summary of a scored archive. ``GET /api/leaderboard``
(``?format=csv``), ``GET /`` (the page), ``GET /submissions/{id}`` (the report page). Limits, each a clear HTTP
error with nothing stored: 413 upload size (while streaming), 429 uploads per team per day and concurrent uploads
per team, 408 a client that stalls, 401 a missing/unknown/revoked token.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.concurrency import run_in_threadpool

from ..scoring.leaderboard import BoardConfig
from .db import Database
from .pages import CSP, board_csv, board_html, board_rows
from .storage import UploadError, receive_upload
from .worker import Scorer

__all__ = ["ServeConfig", "create_app"]


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
    hidden_until: _dt.datetime | None = None
    reports: bool = True
    extra: dict = field(default_factory=dict)


def _json_error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _html(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers={"Content-Security-Policy": CSP,
                                                           "X-Content-Type-Options": "nosniff",
                                                           "Referrer-Policy": "no-referrer"})


def create_app(cfg: ServeConfig) -> FastAPI:
    data_dir = Path(cfg.data_dir).resolve()
    for sub in ("uploads", "incoming", "reports", "board"):
        (data_dir / sub).mkdir(parents=True, exist_ok=True)
    for stale in (data_dir / "incoming").glob("*.part"):  # bodies cut off by a previous crash
        stale.unlink(missing_ok=True)
    db = Database.for_data_dir(data_dir, cfg.db_url)
    scorer = Scorer(db, data_dir, cfg.board, workers=cfg.workers, reports=cfg.reports, scheduler=cfg.scheduler)
    in_flight: dict[int, int] = {}
    lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        scorer.start()
        yield
        scorer.stop()

    app = FastAPI(title="ubench serve", version="1", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.state.db, app.state.scorer, app.state.config = db, scorer, cfg

    def team_of(request: Request) -> dict | None:
        auth = request.headers.get("authorization", "")
        if not auth.lower().startswith("bearer "):
            return None
        return db.team_for_token(auth[7:].strip())

    def hidden(team: dict | None) -> bool:
        return cfg.hidden_until is not None and _dt.datetime.now(_dt.timezone.utc) < cfg.hidden_until

    @app.post("/api/submissions", status_code=202)
    async def submit(request: Request):
        # database calls run in the thread pool: the event loop keeps accepting other uploads meanwhile
        team = await run_in_threadpool(team_of, request)
        if team is None:
            return _json_error(401, "missing, unknown or revoked bearer token")
        since = _dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(days=1)
        if await run_in_threadpool(db.count_since, team["id"], since) >= cfg.max_per_day:
            return _json_error(429, f"team {team['name']!r} reached {cfg.max_per_day} uploads in 24 hours")
        async with lock:
            if in_flight.get(team["id"], 0) >= cfg.max_concurrent:
                return _json_error(429, f"team {team['name']!r} already has {cfg.max_concurrent} uploads in "
                                        "progress")
            in_flight[team["id"]] = in_flight.get(team["id"], 0) + 1
        try:
            stored = await receive_upload(request, data_dir, max_bytes=cfg.max_upload_bytes,
                                          chunk_timeout=cfg.chunk_timeout)
        except UploadError as exc:
            return _json_error(exc.status, exc.message)
        finally:
            async with lock:
                in_flight[team["id"]] -= 1
        sid = await run_in_threadpool(db.add_submission, team["id"], stored.sha256, stored.size,
                                      stored.fields.get("method"), stored.fields.get("notes"))
        scorer.wake()
        return JSONResponse({"id": sid, "status": "queued", "sha256": stored.sha256}, status_code=202)

    @app.get("/api/submissions/{sid}")
    def status(sid: str, request: Request):
        team = team_of(request)
        if team is None:
            return _json_error(401, "missing, unknown or revoked bearer token")
        sub = db.submission(sid)
        if sub is None or sub["team_id"] != team["id"]:
            return _json_error(404, f"no submission {sid[:40]!r} for team {team['name']!r}")
        out = {k: (v.isoformat() if hasattr(v, "isoformat") else v)
               for k, v in sub.items() if k in ("id", "status", "sha256", "size", "method", "created", "started",
                                                "finished")}
        if sub["result_key"]:
            record = db.result(sub["result_key"])["record"]
            outcome = record["outcome"]
            if sub["status"] == "rejected":
                out["findings"] = [f for f in outcome.get("findings", []) if f.get("severity") == "error"]
                out["outcome"] = outcome.get("status")
            else:
                out["summary"] = (outcome.get("report") or {}).get("summary")
                out["report"] = f"/submissions/{sid}"
        return out

    def board() -> dict:
        return board_rows(db.scored_rows(), db.team_names(), cfg.board)

    @app.get("/api/leaderboard")
    def leaderboard(request: Request, format: str = "json"):
        if hidden(team_of(request)):
            return _json_error(403, f"results are hidden until {cfg.hidden_until.isoformat()}")
        b = board()
        if format == "csv":
            return PlainTextResponse(board_csv(b), media_type="text/csv")
        return {"columns": b["columns"], "rows": b["rows"], "config": b["config"], "counts": db.counts()}

    @app.get("/", response_class=HTMLResponse)
    def page(request: Request):
        if hidden(None):
            return _html(f"<!DOCTYPE html><title>ubench</title><p>Results are hidden until "
                         f"{cfg.hidden_until.isoformat()}.</p>")
        return _html(board_html(board()))

    @app.get("/submissions/{sid}", response_class=HTMLResponse)
    def report_page(sid: str):
        sub = db.submission(sid)
        if sub is None or sub["status"] != "scored" or hidden(None):
            return _html("<!DOCTYPE html><title>ubench</title><p>No scored submission with that id.</p>", 404)
        path = data_dir / "reports" / f"{sub['result_key']}.html"
        if not path.is_file():
            return _html("<!DOCTYPE html><title>ubench</title><p>This report's page is being drawn (or could not "
                         "be); the numbers are on the leaderboard.</p>", 404)
        return _html(path.read_text(encoding="utf-8"))

    @app.exception_handler(404)
    async def not_found(_request, _exc):
        return _json_error(404, "not found")

    return app


def favicon() -> Response:  # pragma: no cover - browsers ask; nothing is served
    return Response(status_code=204)
