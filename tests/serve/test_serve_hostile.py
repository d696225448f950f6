# SPDX-License-Identifier: MIT
"""`ubench serve` against hostile clients and hosts (issue #25 items 1, 2, 4-11, 16), tested running: real servers
in subprocesses on loopback, on SQLite and on the real PostgreSQL of conftest.py, clients over httpx and raw
sockets (malformed bodies, slow clients). Each test names the item it pins."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import create_database  # noqa: E402
from test_serve import EXAMPLE, Server, _ubench, httpx, query, wait_board, wait_intervals  # the same real server

EXAMPLES = Path(EXAMPLE).parent
JUNK = b"\x89HDF\r\n\x1a\n" + bytes(range(256)) * 8  # an upload the scorer rejects quickly


# --- fixtures --------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    ref = tmp_path_factory.mktemp("ref") / "ref.h5"
    assert _ubench("reference", EXAMPLE, "--out", ref).returncode == 0
    return ref


def _db_url(request, param: str) -> str | None:
    """None for SQLite; for PostgreSQL a fresh database on the session's server (also for module fixtures)."""
    return create_database(request.getfixturevalue("postgres_server")) if param == "postgresql" else None


def _teams(data: Path, db_url: str | None, *names: str) -> list[str]:
    """Tokens of new teams, made by the same store ``ubench serve team add`` calls."""
    from ubench.serve.db import Database

    data.mkdir(mode=0o700, parents=True, exist_ok=True)
    db = Database.for_data_dir(data, db_url)
    try:
        return [db.add_team(n) for n in names]
    finally:
        db.engine.dispose()


class Host:
    """A data directory, a database (SQLite in it, or a PostgreSQL database), teams, and the servers on them."""

    def __init__(self, root: Path, reference: Path, db_url: str | None, *teams: str):
        self.data, self.reference, self.db_url = root / "srv", reference, db_url
        self.tokens = dict(zip(teams, _teams(self.data, db_url, *teams)))
        self.servers: list[Server] = []

    def server(self, *extra: str, wait: bool = True) -> Server:
        s = Server(self.data, self.reference, *(("--db", self.db_url) if self.db_url else ()), *extra)
        self.servers.append(s)
        return s.start() if wait else s.launch()

    def sql(self, statement: str) -> list[tuple]:
        return query(self.data, statement, self.db_url)

    def execute(self, statement: str) -> None:
        from sqlalchemy import create_engine, text

        engine = create_engine(self.db_url or f"sqlite:///{self.data / 'ubench-serve.db'}")
        try:
            with engine.begin() as c:
                c.execute(text(statement))
        finally:
            engine.dispose()

    def stop(self) -> None:
        for s in self.servers:
            s.stop()

    def stored(self) -> list[str]:
        """Upload files and unfinished bodies in the data directory (the scorer deletes a rejected upload's file
        meanwhile, so tests check that nothing was added)."""
        return sorted(p.name for d in ("uploads", "incoming") for p in (self.data / d).iterdir())


@pytest.fixture
def new_host(tmp_path, reference):
    """``new_host(*teams)``: a Host on SQLite under this test's directory; its servers are stopped at teardown."""
    made = []

    def make(*teams: str) -> Host:
        made.append(Host(tmp_path / f"host{len(made)}", reference, None, *teams))
        return made[-1]

    yield make
    for h in made:
        h.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def host(request, tmp_path, reference):
    h = Host(tmp_path, reference, _db_url(request, request.param), "alpha", "beta")
    yield h
    h.stop()


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def hostile(request, tmp_path_factory, reference):
    """One server per database for the tests that only send requests: a small upload limit and short timeouts."""
    h = Host(tmp_path_factory.mktemp("hostile"), reference, _db_url(request, request.param), "alpha")
    h.server("--max-upload", "16K", "--header-timeout", "1", "--upload-timeout", "2.5", "--max-per-day", "1000",
             "--max-concurrent", "100", "--memory-limit", "3G", "--cpu-limit", "77", "--timeout", "111")
    yield h
    h.stop()
    assert "Traceback" not in h.servers[0].log()  # no request ended in an unhandled exception


# --- raw HTTP --------------------------------------------------------------------------------------------------------

def _reply(data: bytes) -> tuple[int | None, dict]:
    if not data.startswith(b"HTTP/1.1 "):
        return None, {}
    head, _, body = data.partition(b"\r\n\r\n")
    try:
        return int(head.split()[1]), json.loads(body)
    except ValueError:
        return int(head.split()[1]), {"raw": body.decode("latin-1")}


def _complete(data: bytes) -> bool:
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return False


def raw(port: int, request: bytes, *, half_close: bool = False, timeout: float = 15) -> tuple[int | None, dict]:
    """Send ``request`` as given on a fresh connection and read the reply: (status, JSON body); None without one."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(request)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        data = b""
        while not _complete(data):
            try:
                chunk = s.recv(65536)
            except OSError:
                break
            if not chunk:
                break
            data += chunk
    return _reply(data)


def part(name: str, data: bytes, *, filename: str | None = None, extra: bytes = b"") -> bytes:
    disposition = f'form-data; name="{name}"' + ("" if filename is None else f'; filename="{filename}"')
    return b"Content-Disposition: " + disposition.encode("latin-1") + b"\r\n" + extra + b"\r\n" + data


def form(boundary: bytes, parts: list[bytes], *, preamble: bytes = b"", epilogue: bytes = b"",
         close: bool = True) -> bytes:
    body = preamble + b"".join(b"--" + boundary + b"\r\n" + p + b"\r\n" for p in parts)
    return body + (b"--" + boundary + b"--\r\n" if close else b"") + epilogue


def post(token: str, body: bytes, *, boundary: bytes = b"b0undary", length: int | None = None,
         chunked: bool = False) -> bytes:
    """An upload request's bytes: the head (with ``length`` as its Content-Length, or chunked) and ``body``."""
    head = [b"POST /api/submissions HTTP/1.1", b"Host: 127.0.0.1", b"Authorization: Bearer " + token.encode(),
            b"Content-Type: multipart/form-data; boundary=" + boundary]
    if chunked:
        head.append(b"Transfer-Encoding: chunked")
        body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in
                        (body[i:i + 8192] for i in range(0, len(body), 8192))) + b"0\r\n\r\n"
    else:
        head.append(b"Content-Length: %d" % (len(body) if length is None else length))
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def good_form(boundary: bytes = b"b0undary", *, epilogue: bytes = b"", **fields: str) -> bytes:
    return form(boundary, [part(k, v.encode()) for k, v in fields.items()]
                + [part("archive", JUNK, filename="run.h5")], epilogue=epilogue)


def upload(srv: Server, token: str, data: bytes = JUNK, **fields):
    return httpx.post(srv.url + "/api/submissions", headers={"Authorization": f"Bearer {token}"},
                      files={"archive": ("run.h5", data)}, data=fields, timeout=60)


# --- item 1 and 16: --hidden-until and every route's authentication --------------------------------------------------

ROUTES = ("status-scored", "status-rejected", "board-json", "board-csv", "board-page", "report", "upload")


def _call(srv: Server, route: str, token: str | None, ids: dict[str, str]) -> httpx.Response:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    if route == "upload":  # an empty form: past the token check it is a 400, before it a 401
        return httpx.post(srv.url + "/api/submissions", headers=headers, files={"method": (None, "x")}, timeout=30)
    path = {"status-scored": f"/api/submissions/{ids['scored']}", "status-rejected": f"/api/submissions/"
            f"{ids['rejected']}", "board-json": "/api/leaderboard", "board-csv": "/api/leaderboard?format=csv",
            "board-page": "/", "report": f"/submissions/{ids['scored']}"}[route]
    return httpx.get(srv.url + path, headers=headers, timeout=30)


def _expected(route: str, who: str, public: bool) -> int:
    """The status every (route, caller, phase) must get: who is "none", "wrong", "owner" or "other"."""
    if route == "upload":
        return 401 if who in ("none", "wrong") else 400
    if route.startswith("status"):
        return {"none": 401, "wrong": 401, "owner": 200, "other": 404}[who]
    if route == "report":
        return 200 if public else 404
    if route == "board-page":
        return 200  # before the deadline, a page that says so
    return 200 if public else 403


def _sweep(srv, tokens, ids, *, public: bool) -> list[tuple[str, str]]:
    """Every route with every caller's token: the status each must get (``_expected``), and the bodies."""
    bodies = []
    for route in ROUTES:
        for who, token in tokens.items():
            r = _call(srv, route, token, ids)
            assert r.status_code == _expected(route, who, public=public), (route, who, r.text)
            bodies.append((route, r.text))
    return bodies


def test_hidden_results_and_every_routes_authentication(new_host):
    """Items 1 and 16: before --hidden-until no route tells anyone (the submitting team included) a metric, a
    rank, a report or a timing, and a team's own status says the status and a rejection's findings only; after
    it, the board is public and the status complete. Every route with no token, a wrong token, the owning team
    and another team, in both phases: another team's submission is a 404 like an unknown id."""
    h = new_host("alpha", "beta")
    tokens = {"none": None, "wrong": "not-a-token", "owner": h.tokens["alpha"], "other": h.tokens["beta"]}
    srv = h.server("--hidden-until", "2999-01-01T00:00:00")
    ids = {"scored": upload(srv, h.tokens["alpha"], EXAMPLE.read_bytes(), method="de").json()["id"],
           "rejected": upload(srv, h.tokens["alpha"], JUNK).json()["id"]}
    other = upload(srv, h.tokens["beta"], (EXAMPLES / "digits_sgd.h5").read_bytes(), method="sgd")
    assert other.status_code == 202  # the other team has an upload of its own: two rows, so rank intervals
    for _ in range(600):  # scoring runs before the deadline: the rows are done and the report drawn, only hidden
        done = {s for (s,) in h.sql("select status from submissions")} <= {"scored", "rejected"}
        if done and any((h.data / "reports").glob("*.html")):
            break
        time.sleep(0.2)
    hidden_bodies = _sweep(srv, tokens, ids, public=False)
    own = _call(srv, "status-scored", tokens["owner"], ids).json()
    assert own["status"] == "scored" and set(own) == {"id", "status", "sha256", "size", "method", "created",
                                                      "hidden_until"}
    rejected = _call(srv, "status-rejected", tokens["owner"], ids).json()
    assert rejected["status"] == "rejected" and rejected["findings"]
    assert not {"outcome", "summary", "started", "finished", "report"} & set(rejected)
    srv.stop()

    srv = h.server("--hidden-until", "2000-01-01T00:00:00")  # the same data, the deadline passed
    rows = wait_intervals(srv, 2)["rows"]
    assert [r["submission"] for r in rows][0] == ids["scored"] and [r["rank_interval"] for r in rows] == [[1, 1],
                                                                                                        [2, 2]]
    public_bodies = _sweep(srv, tokens, ids, public=True)
    own = _call(srv, "status-scored", tokens["owner"], ids).json()
    assert own["summary"]["accuracy"] > 0.9 and own["started"] and own["finished"] and own["report"]
    assert _call(srv, "status-rejected", tokens["owner"], ids).json()["outcome"] in ("rejected", "unreadable")
    metrics = [f for k in ("cll", "accuracy", "nll", "ece")
               for f in (repr(own["summary"][k]), f"{own['summary'][k]:.4g}", f"{own['summary'][k]:.4f}")]
    leaked = [(route, m) for route, body in hidden_bodies for m in metrics + ["rank_interval", "[1, 1]"]
              if m in body]
    leaked += [(route, "id") for route, body in hidden_bodies if route.startswith("board") and ids["scored"] in body]
    assert leaked == []  # no hidden answer held a metric or a rank interval; no board named the row
    # issue #26 item 7: no answer, before or after the deadline, holds a per-sample statistic of the reports
    columns = [text[:24] for (record,) in h.sql("select record from results where status = 'ok'")
               for split in json.loads(record)["outcome"]["report"]["samples"]["splits"].values()
               for text in split["columns"].values()]
    assert len(columns) >= 8
    leaked = [(route, c) for route, body in hidden_bodies + public_bodies for c in columns if c in body]
    leaked += [(route, "samples") for route, body in hidden_bodies + public_bodies if '"samples"' in body]
    assert leaked == []
    _assert_private(h.data)


def _assert_private(data: Path) -> None:
    """Item 10: every directory the service made is 0700 and every file 0600 (database, -wal, -shm, uploads,
    results, reports), and nothing is a symbolic link."""
    seen = []
    for root, dirs, files in os.walk(data):
        for name in dirs + files:
            st = os.lstat(os.path.join(root, name))
            assert not stat.S_ISLNK(st.st_mode), name
            want = 0o700 if stat.S_ISDIR(st.st_mode) else 0o600
            seen.append((os.path.relpath(os.path.join(root, name), data), oct(stat.S_IMODE(st.st_mode)), oct(want)))
    assert oct(stat.S_IMODE(os.stat(data).st_mode)) == oct(0o700)
    assert [s for s in seen if s[1] != s[2]] == []
    names = {Path(s[0]).name for s in seen}
    assert {"ubench-serve.db", "ubench-serve.db-wal", "ubench-serve.db-shm"} <= names
    for sub in ("uploads", "reports", "board/results"):
        assert any(s[0].startswith(sub + "/") for s in seen), sub


# --- item 2: quotas under parallel uploads ---------------------------------------------------------------------------

@contextlib.contextmanager
def _reservation_in_progress(host: Host, team: str):
    """Hold what a reservation of ``team`` holds while it counts (PostgreSQL: the team's row, SQLite: the write
    lock) on a connection of its own; yields the function that commits it."""
    from sqlalchemy import create_engine, text

    engine = create_engine(host.db_url or f"sqlite:///{host.data / 'ubench-serve.db'}")
    conn = engine.connect()
    if host.db_url:
        conn.execute(text("SELECT id FROM teams WHERE name = :n FOR UPDATE"), {"n": team})
    else:
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    try:
        yield conn.commit
    finally:
        conn.close()
        engine.dispose()


class _Held:
    """An upload whose head and first half are sent and whose second half is held back."""

    def __init__(self, port: int, token: str):
        request = post(token, good_form())
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.sendall(request[:-2000])
        self.rest = request[-2000:]

    def answered(self, wait: float) -> tuple[int | None, dict] | None:
        """The reply the server already sent (within ``wait`` seconds), or None while it still reads the body."""
        self.sock.settimeout(wait)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            return None
        self.sock.settimeout(30)
        while data and not _complete(data):
            more = self.sock.recv(65536)
            if not more:
                break
            data += more
        return _reply(data)

    def finish(self) -> tuple[int | None, dict]:
        self.sock.sendall(self.rest)
        reply = self.answered(30)
        self.sock.close()
        return reply


def test_parallel_uploads_hold_the_daily_quota_and_the_concurrency_limit(host):
    """Item 2: twenty uploads of one team released together against --max-per-day 3 (one SQLite server, or three
    servers on one PostgreSQL) give exactly three 202s; reservations wait for one in progress elsewhere; uploads
    held open count against --max-concurrent across servers from their first byte, and one that fails gives its
    place back."""
    n_servers = 3 if host.db_url else 1
    servers = [host.server("--max-per-day", "3", "--max-concurrent", "20", wait=False) for _ in range(n_servers)]
    for s in servers:
        s.wait_ready()
    token = host.tokens["alpha"]
    barrier = threading.Barrier(20)

    def send(i):
        barrier.wait()
        return upload(servers[i % n_servers], token, JUNK + bytes([i])).status_code

    with ThreadPoolExecutor(20) as ex:
        codes = list(ex.map(send, range(20)))
    assert sorted(codes) == [202] * 3 + [429] * 17
    assert host.sql("select count(*) from submissions") == [(3,)]
    assert len(list((host.data / "uploads").glob("*.h5"))) <= 3

    # Another team's reservation in progress elsewhere (its transaction holding the team's row on PostgreSQL, the
    # write lock on SQLite): the servers' reservations for that team wait for it instead of counting past it.
    with _reservation_in_progress(host, "beta") as done:
        with ThreadPoolExecutor(5) as ex:
            futures = [ex.submit(upload, servers[i % n_servers], host.tokens["beta"], JUNK + b"b%d" % i)
                       for i in range(5)]
            time.sleep(1.5)
            assert not any(f.done() for f in futures)  # all wait for the lock
            done()
            codes = sorted(f.result().status_code for f in futures)
    assert codes == [202] * 3 + [429] * 2
    for s in servers:
        s.stop()

    # --max-concurrent 2, the other team: uploads held open on every server
    servers = [host.server("--max-per-day", "100", "--max-concurrent", "2", wait=False) for _ in range(n_servers)]
    for s in servers:
        s.wait_ready()
    beta = host.tokens["beta"]
    held = [_Held(servers[i % n_servers].port, beta) for i in range(6)]
    early = [h.answered(1.5) for h in held]  # refusals come at once; the held uploads are still being read
    waiting = [h for h, e in zip(held, early) if e is None]
    assert len(waiting) == 2 and all(e[0] == 429 and "in progress" in e[1]["error"] for e in early if e)
    waiting[0].sock.close()  # a failed upload (the client went away) gives its place back
    for _ in range(50):
        retry = _Held(servers[-1].port, beta)
        if retry.answered(0.5) is None:
            break
        retry.sock.close()
        time.sleep(0.1)
    assert waiting[1].finish()[0] == 202 and retry.finish()[0] == 202
    assert host.sql("select count(*) from reservations") == [(0,)]


# --- item 4: malformed multipart bodies ------------------------------------------------------------------------------

BAD_BODIES = {  # name: (request bytes given a token, expected status, words in the error)
    "not multipart": (lambda t: post(t, b"raw").replace(b"multipart/form-data; boundary=b0undary", b"text/plain"),
                      415, "multipart/form-data"),
    "empty boundary": (lambda t: post(t, good_form(), boundary=b""), 400, "boundary of 0 characters"),
    "5000-byte boundary": (lambda t: post(t, good_form(b"x" * 5000), boundary=b"x" * 5000), 400,
                           "boundary of 5000 characters"),
    "huge preamble": (lambda t: post(t, form(b"b0undary", [part("archive", JUNK)], preamble=b"p" * 60_000)), 400,
                      "malformed multipart body"),
    "huge part header": (lambda t: post(t, form(b"b0undary", [part("archive", JUNK,
                                                                    extra=b"X-Pad: " + b"h" * 9000 + b"\r\n")])),
                         400, "malformed multipart body"),
    "5000-character file name": (lambda t: post(t, form(b"b0undary", [part("archive", JUNK, filename="f" * 5000)])),
                                 400, "malformed multipart body"),
    "CRLF in the file name": (lambda t: post(t, form(b"b0undary", [part("archive", JUNK, filename="a\r\nb.h5")])),
                              400, "malformed multipart body"),
    "many parts": (lambda t: post(t, form(b"b0undary", [part("method", b"m")] * 500 + [part("archive", JUNK)])),
                   400, "more than one 'method' part"),
    "a fourth part": (lambda t: post(t, form(b"b0undary", [part("method", b"m"), part("notes", b"n"),
                                                            part("archive", JUNK), part("archive", JUNK)])),
                      400, "more than 3 parts"),
    "unknown part": (lambda t: post(t, form(b"b0undary", [part("archive", JUNK), part("evil", b"x")])), 400,
                     "unexpected form field"),
    "no closing boundary": (lambda t: post(t, good_form()[:-len(b"--b0undary--\r\n")]), 400,
                            "closing multipart boundary"),
    "cut short by its Content-Length": (lambda t: post(t, good_form()[:1000], length=1000), 400,
                                        "closing multipart boundary"),
    "archive part over the limit": (lambda t: post(t, form(b"b0undary", [part("archive", b"a" * 20_000)])), 413,
                                    "upload limit"),
    "Content-Length over the limit": (lambda t: post(t, b"", length=10**9), 413, "upload limit"),
    "huge epilogue (chunked)": (lambda t: post(t, good_form(epilogue=b"e" * 100_000), chunked=True), 413,
                                "form data"),
    "huge CRLF preamble (chunked)": (lambda t: post(t, form(b"b0undary", [part("archive", JUNK)],
                                                            preamble=b"\r\n" * 50_000), chunked=True), 413,
                                     "form data"),
    "no archive part": (lambda t: post(t, form(b"b0undary", [part("method", b"m")])), 400, "no archive"),
}


def test_malformed_multipart_bodies_are_400_with_one_line_and_store_nothing(hostile):
    """Item 4: each hostile body over real HTTP gets its 4xx and a one-line reason (never a 500 or a traceback:
    the fixture checks the server's log), and nothing is stored or counted."""
    srv, token = hostile.servers[0], hostile.tokens["alpha"]
    before, stored = hostile.sql("select count(*) from submissions"), hostile.stored()
    got = {}
    for name, (request, status, words) in BAD_BODIES.items():
        code, body = raw(srv.port, request(token))
        got[name] = (code, body.get("error", body))
        assert code == status and words in body["error"] and "\n" not in body["error"], (name, code, body)
    assert set(hostile.stored()) <= set(stored) and hostile.sql("select count(*) from submissions") == before
    # a body promising more than it sends, from a client that then stops writing: nothing stored either
    assert raw(srv.port, post(token, good_form(), length=len(good_form()) + 500), half_close=True)[0] in (None, 400)
    assert raw(srv.port, post(token, good_form()))[0] == 202  # the same body, whole, is fine
    # the cut body's reservation is released once the server has read its end (the client may not wait for the
    # 400: None above), so poll for it; the good upload's reservation became its submission
    for _ in range(300):
        if hostile.sql("select count(*) from reservations") == [(0,)]:
            break
        time.sleep(0.1)
    assert hostile.sql("select count(*) from reservations") == [(0,)]


# --- item 5: slow clients --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("hostile", ["sqlite"], indirect=True)
def test_slow_clients_meet_the_header_timeout_and_the_upload_deadline(hostile):
    """Item 5 (--header-timeout 1, --upload-timeout 2.5): 40 connections dripping their request heads a byte at a
    time are all answered 408 and closed within a few seconds; an upload dripping its body is 408 once its
    deadline passes, and its place is given back; the server still answers."""
    srv, token = hostile.servers[0], hostile.tokens["alpha"]
    stored = hostile.stored()
    head = b"POST /api/submissions HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"s" * 200
    socks = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(40)]
    for s in socks:
        s.setblocking(False)
    t0, closed = time.monotonic(), {}
    for i in range(len(head)):
        for k, s in enumerate(socks):
            if k in closed:
                continue
            try:
                data = s.recv(4096)
                closed[k] = (time.monotonic() - t0, data)
                continue
            except BlockingIOError:
                pass
            except OSError as exc:
                closed[k] = (time.monotonic() - t0, repr(exc).encode())
                continue
            try:
                s.send(head[i:i + 1])
            except OSError:
                pass
        if len(closed) == len(socks) or time.monotonic() - t0 > 8:
            break
        time.sleep(0.1)
    for s in socks:
        s.close()
    assert len(closed) == 40 and max(t for t, _ in closed.values()) < 4
    assert sum(d.startswith(b"HTTP/1.1 408") for _, d in closed.values()) >= 30  # (a few may see only the close)

    body = good_form()
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(post(token, body)[:-len(body)])
        t0, reply = time.monotonic(), b""
        for byte in body:
            s.settimeout(0.25)
            try:
                reply = s.recv(65536)
                s.settimeout(5)
                while reply and not _complete(reply):  # the head and the body may come apart
                    reply += s.recv(65536)
                break
            except socket.timeout:
                if time.monotonic() - t0 > 8:
                    break  # no deadline (the bug): the reply check below fails
                s.sendall(bytes([byte]))
        elapsed = time.monotonic() - t0
    assert reply.startswith(b"HTTP/1.1 408") and b"deadline" in reply and 2 < elapsed < 6
    assert set(hostile.stored()) <= set(stored) and hostile.sql("select count(*) from reservations") == [(0,)]
    assert httpx.get(srv.url + "/openapi.json").status_code == 200


# --- item 9: form fields validated before anything is stored ---------------------------------------------------------

NO_BOOM = "no boom,\n" + "not even a little one " * 20


def test_bad_form_fields_are_400_before_anything_is_stored(hostile):
    """Item 9 (SQLite and PostgreSQL): a method over 200 characters, a NUL in the method or the notes, notes over
    4096 characters, a field that is not UTF-8: 400 naming the field, no row and no file (the archive part comes
    after the field, and before it); a row the database refuses leaves no file either; exactly 200 characters and
    notes with line breaks are accepted."""
    srv, token = hostile.servers[0], hostile.tokens["alpha"]
    before, stored = hostile.sql("select count(*) from submissions")[0][0], hostile.stored()
    bad = {"method": ["m" * 201, "de\x00ep", "\xff"], "notes": ["n\x00", "n" * 4097]}
    for name, values in bad.items():
        for value in values:
            raw_value = b"\xff\xfe" if value == "\xff" else value.encode()
            for order in ("field first", "archive first"):
                parts = [part(name, raw_value), part("archive", JUNK, filename="r.h5")]
                code, body = raw(srv.port, post(token, form(b"b0undary", parts[::1 if order == "field first" else -1])))
                assert code == 400 and repr(name) in body["error"], (name, value[:10], order, body)
    assert set(hostile.stored()) <= set(stored) and hostile.sql("select count(*) from submissions")[0][0] == before
    # the database itself refuses the row (a rule the host added): 503, and the stored file does not stay behind
    # (SQLite's message is longer than the 300 characters the log keeps of it, and spans lines)
    refuse = ("ALTER TABLE submissions ADD CONSTRAINT no_boom CHECK (method <> 'boom')" if hostile.db_url else
              "CREATE TRIGGER no_boom BEFORE INSERT ON submissions WHEN NEW.method = 'boom' "
              f"BEGIN SELECT RAISE(ABORT, '{NO_BOOM}'); END")
    hostile.execute(refuse)
    try:
        r = upload(srv, token, JUNK + b"boom", method="boom")
    finally:
        hostile.execute("ALTER TABLE submissions DROP CONSTRAINT no_boom" if hostile.db_url else
                        "DROP TRIGGER no_boom")
    assert (r.status_code, r.json()) == (503, {"error": "the service's database refused the upload; nothing was "
                                                        "stored, try again"})
    assert set(hostile.stored()) <= set(stored) and hostile.sql("select count(*) from reservations") == [(0,)]
    # the host's log says so in one line: the team and the database's own message (not SQLAlchemy's wrapping of
    # it with the statement), its whitespace folded, cut at 300 characters
    logged = [line.partition(": ")[2] for line in srv.log().splitlines()
              if line.startswith("the database refused an upload of team 'alpha': ")]
    assert len(logged) == 1 and "[SQL" not in logged[0], logged
    if hostile.db_url:
        assert logged[0].startswith('new row for relation "submissions" violates check constraint "no_boom" ')
        assert len(logged[0]) <= 300
    else:
        assert logged[0] == " ".join(NO_BOOM.split())[:300]
    r = upload(srv, token, JUNK + b"ok", method="m" * 200, notes="line one\nline two\ttab")
    assert r.status_code == 202
    got = hostile.sql(f"select method, notes from submissions where id = '{r.json()['id']}'")
    assert got == [("m" * 200, "line one\nline two\ttab")]


# --- item 6: round-robin scheduling and the sandbox limits -----------------------------------------------------------

@pytest.fixture(params=["sqlite", "postgresql"])
def database(request, tmp_path):
    from ubench.serve.db import Database

    db = Database(_db_url(request, request.param) or f"sqlite:///{tmp_path / 'q.db'}")
    yield db
    db.engine.dispose()


def test_queue_is_round_robin_across_teams(database):
    """Item 6: one team's backlog does not delay another team's single upload: claims go to the team served longest
    ago (a team never served first), each team's own uploads in order."""
    for name in ("a", "b", "c"):
        database.add_team(name)
    ids = {n: i for i, n in database.team_names().items()}
    queued = {}
    for i in range(6):
        queued[database.complete_upload("r", ids["a"], f"{i:064x}", 1, f"a{i}", None)] = f"a{i}"
        time.sleep(0.002)
    queued[database.complete_upload("r", ids["b"], "b" * 64, 1, "b0", None)] = "b0"
    time.sleep(0.002)
    for i in range(2):
        queued[database.complete_upload("r", ids["c"], f"c{i:063x}", 1, f"c{i}", None)] = f"c{i}"
        time.sleep(0.002)
    order = []
    while (sub := database.claim_next("w", lease=60)) is not None:
        order.append(sub["method"])
    assert order == ["a0", "b0", "c0", "a1", "c1", "a2", "a3", "a4", "a5"]


def test_serve_takes_the_sandbox_limits_like_leaderboard(hostile):
    """Item 6: --memory-limit, --cpu-limit and --timeout (the same options as `ubench leaderboard`) are the
    board's sandbox limits, and --max-upload its file-size limit."""
    for _ in range(100):
        config = httpx.get(hostile.servers[0].url + "/api/leaderboard").json()["config"]
        if config:
            break
        time.sleep(0.1)
    limits = config["sandbox_limits"]
    assert (limits["memory_bytes"], limits["cpu_seconds"], limits["timeout_seconds"], limits["max_file_bytes"]) == \
        (3 * 2**30, 77, 111.0, 16 * 1024)
    helps = {_ubench(c, "--help").stdout.count(o) for c in ("serve", "leaderboard")
             for o in ("--memory-limit", "--cpu-limit", "--timeout")}
    assert helps == {1}


# --- item 8: leases, the error path, .staging leftovers --------------------------------------------------------------

def test_error_path_gives_back_only_its_own_claim_and_attempts_are_bounded(database):
    """Item 8 and 10: a worker's error path requeues its own claim and no other server's; an expired lease is
    requeued, a live one is not; after max_attempts claims the submission is rejected with a reason."""
    database.add_team("t")
    tid = next(iter(database.team_names()))
    s1 = database.complete_upload("r", tid, "1" * 64, 1, None, None)
    s2 = database.complete_upload("r", tid, "2" * 64, 1, None, None)
    c1, c2 = database.claim_next("server-1", lease=60), database.claim_next("server-2", lease=60)
    assert {c1["id"], c2["id"]} == {s1, s2}
    assert database.release(c1["id"], "server-2", max_attempts=3) == 0  # not its claim
    assert database.release(c1["id"], "server-1", max_attempts=3) == 1
    assert database.submission(c1["id"])["status"] == "queued"
    assert database.submission(c2["id"])["status"] == "scoring"  # the other server's claim stays
    assert database.requeue_expired(max_attempts=3) == 0  # live leases are not taken
    assert database.renew_leases("server-2", [c2["id"]], lease=-1) == {c2["id"]}  # its lease runs out
    assert database.requeue_expired(max_attempts=3) == 1
    assert database.submission(c2["id"])["status"] == "queued"
    for attempts in (2, 3):  # c1 was claimed once above
        claim = database.claim_next("server-1", lease=60)
        assert (claim["id"], claim["attempts"]) == (c1["id"], attempts)
        database.release(claim["id"], "server-1", max_attempts=3)
    sub = database.submission(c1["id"])
    assert sub["status"] == "rejected" and sub["attempts"] == 3 and sub["findings"][0]["check"] == "attempts"
    assert not database.finish(c2["id"], "server-2", "k", "2" * 64, {"outcome": {"status": "ok"}}, "scored")


@pytest.mark.parametrize("host", ["postgresql"], indirect=True)
def test_second_server_takes_no_live_claim_and_a_lone_one_cleans_up(host):
    """Item 8 with real servers on one PostgreSQL database and one data directory. A claim whose server is alive
    (here a thread renewing its lease through the store, as a server's heartbeat does) is left alone by a server
    that starts and runs beside it; once its heartbeat stops and the lease expires, that server takes it over and
    scores it (a second attempt). A server starting beside a live one keeps the private copies under
    board/.staging-*; one starting alone removes them and the bodies that killed servers left in incoming/."""
    from ubench.serve.db import Database

    (host.data / "uploads").mkdir(mode=0o700, exist_ok=True)
    sha = hashlib.sha256(JUNK).hexdigest()
    (host.data / "uploads" / f"{sha}.h5").write_bytes(JUNK)
    db = Database(host.db_url)
    tid = db.team_for_token(host.tokens["alpha"])["id"]
    sid = db.complete_upload("r", tid, sha, len(JUNK), "ghost's", None)
    assert db.claim_next("ghost-server", lease=3)["id"] == sid
    alive = threading.Event()
    alive.set()

    def heartbeat():
        while alive.is_set():
            db.renew_leases("ghost-server", [sid], lease=3)
            time.sleep(0.5)

    beat = threading.Thread(target=heartbeat)
    beat.start()
    try:
        a = host.server("--lease", "2")  # its start-up and its own heartbeats (every 0.5 s) pass the live claim
        live = host.data / "board" / ".staging-live"
        live.mkdir()
        b = host.server("--lease", "2")
        time.sleep(1.5)
        assert host.sql("select status, attempts, lease_owner from submissions") == [("scoring", 1, "ghost-server")]
        assert live.is_dir()  # a is alive: its copies are not b's to remove
    finally:
        alive.clear()
        beat.join()
    done = a.wait_done(host.tokens["alpha"], sid, timeout=120)  # the lease runs out: a or b scores it
    assert done["status"] == "rejected" and host.sql("select attempts from submissions") == [(2,)]
    assert not db.finish(sid, "ghost-server", "k", sha, {"outcome": {"status": "ok"}}, "scored")  # too late
    db.engine.dispose()
    a.stop()
    b.stop()
    (host.data / "incoming" / "cut.part").write_bytes(b"x")
    host.server()
    assert not live.exists() and list((host.data / "incoming").iterdir()) == []


# --- item 10: planted links and bounded attempts ---------------------------------------------------------------------

def test_planted_links_are_refused_at_start_with_one_line(tmp_path, reference):
    """Item 10: a symbolic link in place of uploads/, reports/, board/results or the database is refused at start
    (exit 2, one line naming it, no traceback) and nothing is written where it points."""
    outside = tmp_path / "outside"
    outside.mkdir()
    procs = {}
    for name in ("uploads", "reports", "board/results", "ubench-serve.db"):
        data = tmp_path / name.replace("/", "_") / "srv"
        (data / "board").mkdir(parents=True)
        target = outside / name.replace("/", "_")
        (target.mkdir() if "." not in name else target.write_bytes(b""))
        (data / name).symlink_to(target)
        procs[name] = (subprocess.Popen([sys.executable, "-m", "ubench.cli", "serve", "--reference", str(reference),
                                         "--data-dir", str(data), "--port", "1"], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True), target)
    try:
        results = {name: (proc.communicate(timeout=120)[1], proc.returncode, target)
                   for name, (proc, target) in procs.items()}
    finally:
        for proc, _ in procs.values():
            if proc.poll() is None:  # a server that started anyway (the bug): stopped here
                proc.kill()
                proc.wait()
    for name, (err, returncode, target) in results.items():
        assert returncode == 2 and "Traceback" not in err, (name, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "symbolic link" in lines[0] and name in lines[0], (name, err)
        assert (list(target.iterdir()) if target.is_dir() else target.read_bytes()) in ([], b""), name


def test_a_submission_that_keeps_failing_is_rejected_after_max_attempts(new_host, tmp_path):
    """Item 10: a results link planted while the server runs makes every scoring attempt fail (the scorer refuses
    to follow it): the submission is tried --max-attempts times and then rejected with a reason, not retried for
    ever; the link's target stays empty."""
    h = new_host("alpha")
    srv = h.server("--max-attempts", "2")
    outside = tmp_path / "outside"
    outside.mkdir()
    results = h.data / "board" / "results"
    if results.is_dir():
        results.rmdir()
    results.symlink_to(outside)
    token = h.tokens["alpha"]
    sid = upload(srv, token, JUNK).json()["id"]
    done = srv.wait_done(token, sid, timeout=60)
    assert done["status"] == "rejected" and [f["check"] for f in done["findings"]] == ["attempts"]
    assert "2 attempt" in done["findings"][0]["message"] and str(tmp_path) not in json.dumps(done)
    assert h.sql("select attempts from submissions") == [(2,)] and list(outside.iterdir()) == []


# --- item 11: a data directory or database that cannot be used -------------------------------------------------------

def _unprivileged() -> list[str]:
    """A prefix that runs a command without root's permission override (file modes apply to it), or nothing when
    the tests do not run as root."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    assert setpriv, "running as root needs util-linux's setpriv to test file permissions"
    return [setpriv, "--bounding-set", "-dac_override,-dac_read_search,-fowner"]


def test_unusable_data_dir_or_database_is_one_line_and_exit_2(tmp_path, reference, postgres_server):
    """Item 11: a data directory under a read-only directory, a read-only data directory, a read-only SQLite
    database and an unreachable PostgreSQL each end `ubench serve` (and `serve team add`) with one line on stderr
    and exit code 2, no traceback."""
    ro_parent = tmp_path / "ro-parent"
    ro_parent.mkdir()
    ro_dir = tmp_path / "ro-dir"
    ro_dir.mkdir()
    ro_db = tmp_path / "ro-db"
    _teams(ro_db, None, "alpha")
    (ro_db / "ubench-serve.db").chmod(0o400)
    ro_parent.chmod(0o500)
    ro_dir.chmod(0o500)
    dead_pg = postgres_server.rsplit(":", 1)[0] + ":1/none"
    cases = {"read-only parent": ["--data-dir", str(ro_parent / "srv")],
             "read-only data dir": ["--data-dir", str(ro_dir)],
             "read-only database": ["--data-dir", str(ro_db)],
             "unreachable PostgreSQL": ["--data-dir", str(tmp_path / "pg"), "--db", dead_pg]}
    commands = {name: ["serve", "--reference", str(reference), "--port", "1", *args] for name, args in cases.items()}
    commands["team add, read-only database"] = ["serve", "team", "add", "x", *cases["read-only database"]]
    procs = [(name, cmd, subprocess.Popen([*_unprivileged(), sys.executable, "-m", "ubench.cli", *cmd],
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
             for name, cmd in commands.items()]
    try:
        for name, cmd, proc in procs:
            try:
                _, err = proc.communicate(timeout=120)
            finally:
                if proc.poll() is None:
                    proc.kill()
            lines = err.strip().splitlines()
            assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), (name, cmd, err)
            assert "Traceback" not in err
    finally:
        ro_parent.chmod(0o700)
        ro_dir.chmod(0o700)
    assert list(ro_dir.iterdir()) == [] and list(ro_parent.iterdir()) == []


# --- item 7: the materialised board ----------------------------------------------------------------------------------

@pytest.mark.parametrize("host", ["sqlite"], indirect=True)  # PostgreSQL: test_serve.py's boards
def test_board_is_materialised_when_scored_and_served_without_the_records(host):
    """Item 7: a scored submission's board row is stored when it is scored; the routes serve the stored rows (the
    result records can be emptied and the board stays), paged; a better upload re-ranks the stored rows, and the
    pages served before show the new board. Issue #26 item 7: every row's rank interval and tie mark, equal to
    ``ubench leaderboard``'s over the same results, in the JSON, the CSV and the page (stored: served without the
    records too)."""
    srv = host.server()
    token = host.tokens["alpha"]
    first = upload(srv, token, (EXAMPLES / "digits_sgd.h5").read_bytes(), method="sgd").json()["id"]
    assert srv.wait_done(token, first)["status"] == "scored"
    assert wait_board(srv, 1)["total"] == 1
    assert first in httpx.get(srv.url + "/").text  # this page is kept until the board changes
    second = upload(srv, token, EXAMPLE.read_bytes(), method="de").json()["id"]
    assert srv.wait_done(token, second)["status"] == "scored"
    board = wait_intervals(srv, 2)
    assert [(r["submission"], r["rank"]) for r in board["rows"]] == [(second, 1), (first, 2)]  # DE's CLL is higher
    assert host.sql("select submission_id, position from board_rows order by position") == [(second, 1), (first, 2)]
    # issue #26 item 7: the rows' rank intervals are ubench leaderboard's over the same results (build_board)
    from ubench.scoring.leaderboard import BoardConfig, build_board

    records = [{**json.loads(r), "archive": sid} for sid, r in host.sql(
        "select s.id, r.record from submissions s join results r on r.key = s.result_key")]
    want = build_board(records, BoardConfig.create(reference=host.reference))
    assert [(r["submission"], r["rank_interval"], r["tied_with_leader"]) for r in board["rows"]] == \
        [(r["archive"], r["rank_interval"], r["tied_with_leader"]) for r in want["rows"]]
    assert [r["rank_interval"] for r in board["rows"]] == [[1, 1], [2, 2]]
    info = board["rank_intervals"]
    assert (info["metric"], info["rows"], info["stale"]) == ("cll", 2, False)
    host.execute("update results set record = 'not json'")  # nothing re-reads the records per request
    again = httpx.get(srv.url + "/api/leaderboard", params={"offset": 1, "limit": 1}).json()
    assert [r["submission"] for r in again["rows"]] == [first] and again["total"] == 2
    assert again["rows"][0]["metrics"] == board["rows"][1]["metrics"]
    assert again["rows"][0]["rank_interval"] == [2, 2] and again["rows"][0]["tied_with_leader"] is False
    page = httpx.get(srv.url + "/")
    assert page.status_code == 200 and first in page.text and second in page.text
    assert ">rank interval</th>" in page.text and '<td class="l" data-v="2">[2, 2]</td>' in page.text
    assert "over the 2 ranked rows" in page.text
    csv = httpx.get(srv.url + "/api/leaderboard", params={"format": "csv"}).text.splitlines()
    assert csv[0].startswith("rank,rank_interval,tied_with_leader,submission,")
    assert len(csv) == 3 and csv[1].startswith(f'1,"[1, 1]",False,{second},')


def test_upload_reaches_the_board_while_replicates_are_computed(tmp_path, reference, postgres_server):
    """Item 7 (issue #26 item 7): a server started on a board whose rows have no replicates yet computes them for
    every row (a minute at 10,000 rows); an upload scored meanwhile is on the board at once, its rank interval
    pending, and the rank intervals follow when the replicates are done. The replicates' writes are held back by
    a transaction of the test's that locks the rows without them (the real PostgreSQL's row locks): with the
    statistics in the board refresh's own thread, the new row never reached the board while they were written."""
    from sqlalchemy import bindparam, create_engine, text

    from ubench.scoring.leaderboard import BoardConfig
    from ubench.scoring.protocols import Protocol
    from ubench.serve.board import board_entry, refresh_board
    from ubench.serve.db import Database

    url = create_database(postgres_server)
    host = Host(tmp_path, reference, url, "alpha", "seeders")
    sgd = EXAMPLES / "digits_sgd.h5"
    try:
        srv = host.server()  # a real result of the example, scored once, for the seeded rows
        first = srv.upload(host.tokens["seeders"], sgd).json()["id"]
        assert srv.wait_done(host.tokens["seeders"], first)["status"] == "scored"
        for _ in range(300):  # on the board, its replicates computed (one row: no interval)
            info = httpx.get(srv.url + "/api/leaderboard", params={"limit": 1}).json()
            if info["total"] == 1 and info["rank_intervals"] and not info["rank_intervals"]["stale"]:
                break
            time.sleep(0.1)
        assert info["total"] == 1 and info["rank_intervals"]["rows"] == 0
        before = info["rank_intervals"]
        srv.kill9()  # at once: its report page, still being drawn, is not needed
        db = Database(url)
        tid = next(i for i, name in db.team_names().items() if name == "seeders")  # alpha's quota stays free
        (record,) = [json.loads(r) for r, in host.sql("select record from results")]
        record["outcome"]["report"].pop("samples")  # the seeded rows' replicates: none, quickly
        cll = record["outcome"]["report"]["summary"]["cll"]
        seeded = []
        for i in range(40):  # better than the example: its new row ranks last, no seeded row moves
            record["outcome"]["report"]["summary"]["cll"] = cll + 0.001 * (i + 1)
            sha = f"{i:064x}"
            db.complete_upload("seed", tid, sha, 1, f"seed {i}", None)
            claim = db.claim_next("seed", lease=60)
            assert db.finish(claim["id"], "seed", f"{sha}-seed", sha, record, "scored", board_entry(record))
            seeded.append(claim["id"])
        assert refresh_board(db, BoardConfig.create(reference=reference, protocol=Protocol.preset("pitfalls")))
        db.engine.dispose()
        locker = create_engine(url)
        lock = locker.connect()
        held = lock.begin()
        try:
            lock.execute(text("select submission_id from board_rows where submission_id in :ids for update")
                         .bindparams(bindparam("ids", expanding=True)), {"ids": seeded})
            srv = host.server()
            sid = srv.upload(host.tokens["alpha"], sgd).json()["id"]  # a duplicate: its result is known
            assert srv.wait_done(host.tokens["alpha"], sid)["status"] == "scored"
            for _ in range(300):  # a refresh of 42 rows takes milliseconds
                board = httpx.get(srv.url + "/api/leaderboard", params={"offset": 40, "limit": 2}).json()
                if board["total"] == 42:
                    break
                time.sleep(0.1)
            assert board["total"] == 42 and sid in [r["submission"] for r in board["rows"]], srv.log()
            assert sorted(r["rank"] for r in board["rows"]) == [41, 42]  # the first's twin, after the seeded
            assert host.sql("select count(*) from board_rows where stats_key is null") == [(41,)]  # waiting
            assert board["rank_intervals"] == {**before, "stale": True}  # none since the first upload: stale
        finally:
            held.rollback()
            lock.close()
            locker.dispose()
        for _ in range(300):  # the lock gone, the replicates of every row and then the rank intervals
            info = httpx.get(srv.url + "/api/leaderboard", params={"limit": 1}).json()["rank_intervals"]
            if not info["stale"]:
                break
            time.sleep(0.1)
        assert not info["stale"] and info["rows"] == 2, info  # the two uploads; the seeded rows have no samples
        assert host.sql("select count(*) from board_rows where stats_key is null") == [(0,)]
    finally:
        host.stop()


def test_refresh_orders_and_ranks_the_stored_rows_as_build_board_does(tmp_path, reference):
    """Item 7: the stored board (rows rendered once, ordered by their stored keys on every refresh) equals
    ``build_board`` over the full records: ties in CLL broken by accuracy, then by id; rows without CLL after the
    others; rows without metrics unranked at the end; a better row added later moves everyone below it down; a
    refresh computed from entries that changed meanwhile stores what is still valid, and nothing when a newer
    refresh was stored first."""
    import random

    from ubench.scoring.leaderboard import BoardConfig, build_board
    from ubench.serve.board import board_entry, refresh_board
    from ubench.serve.db import Database

    config = BoardConfig.create(reference=reference)
    db = Database(f"sqlite:///{tmp_path / 'b.db'}")
    db.add_team("t")
    tid = next(iter(db.team_names()))
    rng = random.Random(7)
    records = {}

    def add(summary):
        sid = db.complete_upload("r", tid, f"{len(records):064x}", 1, None, None)
        rec = {"sha256": f"{len(records):064x}", "outcome": {"status": "ok", "exit_code": 0, "findings": [],
               "report": {"summary": summary, "archive": {"method": "m"}, "comparability": {"comparable": ["cll"]}}}}
        db.add_board_entries([(sid, board_entry(rec))])
        records[sid] = rec

    for i in range(40):
        summary = {"cll": rng.choice([-0.5, -0.25, rng.uniform(-1, 0)]), "accuracy": rng.choice([0.9, 0.8]),
                   "ece": rng.random()}
        if i % 9 == 0:
            summary.pop("cll")
        if i % 13 == 0:
            summary = {}
        if i % 11 == 5:
            summary = {"ece": rng.random()}  # ranked: it has a metric, though neither CLL nor accuracy
        add(summary)

    def stored():
        page = db.board_page(0, None)
        return [(json.loads(row)["submission"], rank) for rank, _, row in page["rows"]]

    def expected():
        board = build_board([{**r, "archive": sid} for sid, r in records.items()], config)
        return [(r["archive"], r["rank"]) for r in board["rows"]]

    assert refresh_board(db, config) and stored() == expected()
    assert [r for _, r in stored()][-4:] == [None] * 4 and stored()[0][1] == 1
    add({"cll": 0.0, "accuracy": 1.0})  # the best row arrives
    assert refresh_board(db, config) and stored() == expected() and stored()[0][0] == list(records)[-1]
    # entries that change while a refresh runs (at 10,000 rows it takes seconds, and submissions scored faster
    # than that kept every refresh from being stored): the refresh stores what it computed; the row added meanwhile
    # stays off the board and the row re-scored meanwhile keeps neither its old rendering nor its place, until the
    # next refresh
    store = db.store_board
    first = list(records)[0]  # on the board
    add({"cll": -0.0001, "accuracy": 0.1})  # pending (to be rendered) when the refresh reads the entries
    add({"cll": -0.0002, "accuracy": 0.1})  # this one too
    pending, rescored = list(records)[-2:]
    sneaked = {}

    def meanwhile(*args, **kwargs):
        add({"cll": 0.5, "accuracy": 1.0})  # the best row yet
        sneaked["new"] = list(records)[-1]
        for sid in (first, rescored):
            records[sid] = {**records[sid], "outcome": {**records[sid]["outcome"], "report": {
                **records[sid]["outcome"]["report"], "summary": {"cll": -0.001, "accuracy": 0.5}}}}
            db.add_board_entries([(sid, board_entry(records[sid]))])  # re-scored
        return store(*args, **kwargs)

    db.store_board = meanwhile
    assert refresh_board(db, config)
    db.store_board = store
    got = dict(stored())
    assert not {sneaked["new"], first, rescored} & set(got)  # none of them is on the board yet
    assert pending in got  # the row the refresh rendered is
    assert [sid for sid, _ in stored()] == [sid for sid, _ in expected() if sid in got]  # in the right order
    assert refresh_board(db, config) and stored() == expected() and stored()[0][0] == sneaked["new"]
    # a refresh older than the stored one (another server's, stored first) stores nothing
    assert not db.store_board(db.board_state()["changes"] - 1, rendered=[], order=[], columns="[]",
                              column_state="{}", config="{}", renderer="x")
    db.engine.dispose()
