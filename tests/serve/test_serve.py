# SPDX-License-Identifier: MIT
"""`ubench serve` tested running: the real uvicorn server in a subprocess on loopback, SQLite in a temporary
directory, uploads over HTTP with httpx (issue #18 items 2-6 and the kill -9 part of item 10)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("sqlalchemy")

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "digits_deep_ensemble.h5"


def _ubench(*args, **kw):
    return subprocess.run([sys.executable, "-m", "ubench.cli", *map(str, args)], capture_output=True, text=True,
                          **kw)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``ubench serve`` in a subprocess on a free loopback port; its stderr goes to a file beside the data
    directory (:meth:`log`), so a server that logs a lot never blocks on a full pipe."""

    def __init__(self, data_dir: Path, reference: Path, *extra: str):
        self.data_dir, self.reference, self.extra = data_dir, reference, extra
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.stderr_path = Path(data_dir).parent / f"serve-{self.port}.log"

    def launch(self) -> Server:
        """Start the process without waiting for it to answer (several servers start together)."""
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ubench.cli", "serve", "--reference", str(self.reference), "--data-dir",
                 str(self.data_dir), "--port", str(self.port), *self.extra],
                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        return self

    def wait_ready(self) -> Server:
        for _ in range(300):
            try:
                if httpx.get(self.url + "/openapi.json", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(self.log())
            time.sleep(0.1)
        raise RuntimeError("server did not start")

    def start(self) -> Server:
        return self.launch().wait_ready()

    def log(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""

    def kill9(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)  # the server and its sandboxed scoring children
        self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill9()

    def upload(self, token: str, path: Path, method: str = "m", **kw):
        with open(path, "rb") as f:
            return httpx.post(self.url + "/api/submissions", headers={"Authorization": f"Bearer {token}"},
                              files={"archive": ("x.h5", f)}, data={"method": method}, timeout=60, **kw)

    def wait_done(self, token: str, sid: str, timeout: float = 240) -> dict:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            r = httpx.get(f"{self.url}/api/submissions/{sid}", headers={"Authorization": f"Bearer {token}"})
            body = r.json()
            if body["status"] in ("scored", "rejected"):
                return body
            time.sleep(0.3)
        raise AssertionError(f"submission {sid} not done: {body}")


def wait_board(srv: Server, n_rows: int, timeout: float = 120) -> dict:
    """``GET /api/leaderboard`` (up to 1,000 rows) once it holds ``n_rows`` rows: a scored submission's row appears
    with the board's next refresh, right after its status says ``scored``."""
    end = time.monotonic() + timeout
    while True:
        board = httpx.get(srv.url + "/api/leaderboard", params={"limit": 1000}, timeout=30).json()
        if board["total"] >= n_rows or time.monotonic() > end:
            return board
        time.sleep(0.1)


def wait_intervals(srv: Server, n_rows: int, timeout: float = 120) -> dict:
    """``GET /api/leaderboard`` once its ``n_rows`` rows all have their rank interval (computed right after the
    board's refresh on a small board)."""
    end = time.monotonic() + timeout
    while True:
        board = wait_board(srv, n_rows, timeout)
        if all(r["rank_interval"] for r in board["rows"]) or time.monotonic() > end:
            return board
        time.sleep(0.1)


def query(data: Path, sql: str, db_url: str | None = None) -> list[tuple]:
    """Rows of ``sql`` from the service's database (SQLite under ``data`` or ``db_url``), read with SQLAlchemy."""
    from sqlalchemy import create_engine, text

    engine = create_engine(db_url or f"sqlite:///{data / 'ubench-serve.db'}")
    try:
        with engine.connect() as c:
            return [tuple(r) for r in c.execute(text(sql))]
    finally:
        engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def host(request, tmp_path):
    """The service on the embedded SQLite default, and the same tests on a real PostgreSQL (``--db``)."""
    db_url = request.getfixturevalue("postgres_db") if request.param == "postgresql" else None
    db = ("--db", db_url) if db_url else ()
    ref = tmp_path / "ref.h5"
    assert _ubench("reference", EXAMPLE, "--out", ref).returncode == 0
    data = tmp_path / "srv"
    token = _ubench("serve", "team", "add", "alpha", "--data-dir", data, *db).stdout.strip()
    assert token, "team add printed no token"
    servers = []

    def make(*extra):
        s = Server(data, ref, *db, *extra).start()
        servers.append(s)
        return s

    make.db, make.db_url = db, db_url
    yield make, token, data
    for s in servers:
        s.stop()


def test_upload_becomes_a_row_with_its_report(host):
    make, token, data = host
    srv = make()
    r = srv.upload(token, EXAMPLE, method="deep <script>alert(1)</script>")
    assert r.status_code == 202 and r.json()["status"] == "queued"
    sid = r.json()["id"]
    done = srv.wait_done(token, sid)
    assert done["status"] == "scored" and done["summary"]["accuracy"] > 0.9
    board = wait_board(srv, 1)
    assert [row["submission"] for row in board["rows"]] == [sid] and board["rows"][0]["team"] == "alpha"
    assert [c["key"] for c in board["columns"]][:2] == ["cll", "accuracy"]
    page = httpx.get(srv.url + "/")
    assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text and "<script>alert(1)" not in page.text
    for _ in range(600):  # the row comes first; the page's figures are drawn right after
        report = httpx.get(f"{srv.url}/submissions/{sid}")
        if report.status_code == 200:
            break
        time.sleep(0.2)
    assert report.status_code == 200
    missing = httpx.get(f"{srv.url}/submissions/no-such-id")
    assert missing.status_code == 404 and "No scored submission with that id." in missing.text
    assert httpx.get(srv.url + "/openapi.json").json()["info"] == {"title": "ubench serve", "version": "1"}
    assert [httpx.get(srv.url + p).status_code for p in ("/docs", "/redoc")] == [404, 404]  # no interactive docs
    for html in (page, report, missing):  # every HTML answer carries the security headers
        assert html.headers["content-security-policy"].startswith("default-src 'none'; ")
        assert (html.headers["x-content-type-options"], html.headers["referrer-policy"]) == ("nosniff",
                                                                                              "no-referrer")
    csv = httpx.get(srv.url + "/api/leaderboard", params={"format": "csv"}).text.splitlines()
    assert csv[0].startswith("rank,rank_interval,tied_with_leader,submission,team,method,submitted,cll")
    assert sid in csv[1]
    assert sorted(p.name for p in (data / "uploads").iterdir()) == [f"{r.json()['sha256']}.h5"]


def test_duplicate_bytes_are_scored_once_and_both_show_the_result(host):
    make, token, data = host
    srv = make()
    a = srv.upload(token, EXAMPLE).json()["id"]
    b = srv.upload(token, EXAMPLE).json()["id"]
    da, db = srv.wait_done(token, a), srv.wait_done(token, b)
    assert da["status"] == db["status"] == "scored" and da["summary"] == db["summary"]
    assert query(data, "select count(*) from results", make.db_url) == [(1,)]
    assert query(data, "select count(distinct result_key) from submissions", make.db_url) == [(1,)]
    assert len(list((data / "board" / "results").glob("*.json"))) == 1  # the sandbox ran once


def test_refusals_store_nothing(host, tmp_path):
    make, token, data = host
    srv = make("--max-upload", "4K", "--max-per-day", "3")
    big = tmp_path / "big.h5"
    big.write_bytes(os.urandom(64 * 1024))
    r = srv.upload(token, big)
    assert r.status_code == 413 and "upload limit" in r.json()["error"]
    assert srv.upload("not-a-token", EXAMPLE).status_code == 401
    r = httpx.post(srv.url + "/api/submissions", headers={"Authorization": f"Bearer {token}"},
                   content=b"raw", timeout=10)
    assert r.status_code == 415
    assert list((data / "uploads").iterdir()) == [] and list((data / "incoming").iterdir()) == []
    # an archive that fails validation: accepted, then rejected with its findings; its file is deleted
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"\x89HDF\r\n\x1a\n" + os.urandom(2000))
    sid = srv.upload(token, junk).json()["id"]
    done = srv.wait_done(token, sid)
    assert done["status"] == "rejected" and done["findings"]
    assert list((data / "uploads").iterdir()) == []
    # the per-day limit counts accepted uploads (1 so far): two more, then 429
    for _ in range(2):
        assert srv.upload(token, junk).status_code == 202
    r = srv.upload(token, junk)
    assert r.status_code == 429 and "24 hours" in r.json()["error"]
    # a revoked team is refused
    assert _ubench("serve", "team", "revoke", "alpha", "--data-dir", data, *make.db).returncode == 0
    assert srv.upload(token, EXAMPLE).status_code == 401


def test_kill_9_loses_nothing_and_scores_nothing_twice(host):
    make, token, data = host
    srv = make("--lease", "3")  # the killed server's claims expire 3 s after its last heartbeat
    ids = [srv.upload(token, EXAMPLE, method=f"m{i}").json()["id"] for i in range(2)]
    srv.kill9()  # right after the 202s: queued or mid-scoring
    before = dict(query(data, "select id, status from submissions", make.db_url))
    assert set(before) == set(ids)  # every accepted upload is in the queue
    srv2 = make("--lease", "3")
    for sid in ids:
        assert srv2.wait_done(token, sid)["status"] == "scored"
    assert query(data, "select count(*) from results", make.db_url) == [(1,)]
    statuses = [s for (s,) in query(data, "select status from submissions", make.db_url)]
    assert statuses == ["scored", "scored"]


def test_scheduler_scores_on_an_existing_dask_cluster(tmp_path):
    """--scheduler: a real LocalCluster (worker processes on loopback) started here; the upload is scored by
    score_one on one of its workers (the sandbox inside it), and the row appears as with local threads."""
    distributed = pytest.importorskip("distributed")
    ref = tmp_path / "ref.h5"
    assert _ubench("reference", EXAMPLE, "--out", ref).returncode == 0
    data = tmp_path / "srv"
    token = _ubench("serve", "team", "add", "alpha", "--data-dir", data).stdout.strip()
    clash = _ubench("serve", "--reference", ref, "--data-dir", data, "--workers", "2", "--scheduler", "tcp://x:1")
    assert clash.returncode == 2 and "exclude each other" in clash.stderr
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        srv = Server(data, ref, "--scheduler", cluster.scheduler_address).start()
        try:
            sid = srv.upload(token, EXAMPLE, method="on-dask").json()["id"]
            done = srv.wait_done(token, sid)
            assert done["status"] == "scored" and done["summary"]["accuracy"] > 0.9
            rows = wait_board(srv, 1)["rows"]
            assert [r["submission"] for r in rows] == [sid]
        finally:
            srv.stop()
        prefixes = cluster.scheduler.task_prefixes  # what the scheduler ran
        assert "score_one" in prefixes and prefixes["score_one"].max_exec_time > 0  # it ran on a worker
    assert len(list((data / "board" / "results").glob("*.json"))) == 1  # the cluster's result file


def test_scheduler_that_cannot_be_reached_is_a_usage_error(tmp_path):
    ref = tmp_path / "ref.h5"
    assert _ubench("reference", EXAMPLE, "--out", ref).returncode == 0
    r = _ubench("serve", "--reference", ref, "--data-dir", tmp_path / "srv", "--scheduler",
                f"tcp://127.0.0.1:{_free_port()}")
    assert r.returncode == 2 and "cannot reach a Dask scheduler" in r.stderr and "Traceback" not in r.stderr


def test_pages_a_stopped_server_left_undrawn_are_drawn_at_the_next_start(tmp_path):
    """Report pages are drawn by a thread of their own after the row is stored (the scoring thread claims the next
    upload meanwhile), so a server stopped in between leaves scored submissions without a page: the next start
    draws every scored submission's missing page, without any new upload. SQLite only: the listing is one query
    that the PostgreSQL tests above run too (they draw the pages of their own uploads)."""
    ref = tmp_path / "ref.h5"
    assert _ubench("reference", EXAMPLE, "--out", ref).returncode == 0
    data = tmp_path / "srv"
    token = _ubench("serve", "team", "add", "alpha", "--data-dir", data).stdout.strip()

    def page_of(srv, sid, tries=600):
        for _ in range(tries):
            r = httpx.get(f"{srv.url}/submissions/{sid}")
            if r.status_code == 200:
                return r
            time.sleep(0.2)
        return r

    srv = Server(data, ref).start()
    try:
        sid = srv.upload(token, EXAMPLE).json()["id"]
        assert srv.wait_done(token, sid)["status"] == "scored"
        assert page_of(srv, sid).status_code == 200
    finally:
        srv.stop()
    (page,) = (data / "reports").glob("*.html")
    page.unlink()  # as if the server had stopped before drawing it
    srv = Server(data, ref).start()
    try:
        got = page_of(srv, sid)
        assert got.status_code == 200 and "default-src 'none'" in got.headers["content-security-policy"]
        assert [p.name for p in (data / "reports").glob("*.html")] == [page.name]
    finally:
        srv.stop()
