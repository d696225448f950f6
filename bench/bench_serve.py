# SPDX-License-Identifier: MIT
"""`ubench serve` on loopback. Issue #18 item 11: uploads accepted per second and p50/p95 API latency while
scoring runs, and the end-to-end time from an upload to its leaderboard row, with 1 and 2 scoring workers. Issue
#25 item 7: p95 latency of the public board (``GET /`` and ``GET /api/leaderboard``) at ``--board-rows`` scored rows
(10,000) with 8 concurrent readers while uploads are scored; target 50 ms for each.

For each worker count: a fresh data directory and server (uvicorn in a subprocess); 8 client threads send
``--uploads`` uploads alternating between two bundled examples (so most are duplicates, scored once each) while a
ninth thread polls ``GET /api/leaderboard`` and ``GET /api/submissions/{id}`` and records their latency. Before
that, on the idle server, one upload of the bundled MC-dropout archive is timed from the POST to the moment its
row appears on the board (scoring in the sandbox included; its HTML report is drawn after the row appears).

Board latency: a fresh database is filled with ``--board-rows`` scored submissions of 40 teams through the store
(each ``complete_upload``, ``claim_next`` and ``finish`` with a trimmed copy of a real result whose CLL and accuracy
are varied, so every row ranks differently; the copy has no per-sample statistics, so these rows get no rank
interval, but the server's start still reads every one's result for them), the board is refreshed once (its time
at that size is recorded), then a server is started on it and the measurement waits until the start's work is done
(its refresh, every row's replicates and the first rank intervals: ``start_backfill_s``). The server is then read by
8 client threads (each alternating the two routes, keep-alive connections, the whole response read) for
``--seconds`` while a ninth thread uploads the bundled examples one after the other (the first of each is scored
in the sandbox, the rest are duplicates whose cached result still adds a row and refreshes the board: the readers
see the board change under them). A tenth thread reads the server's database every 0.1 s (not through the server)
and records when each upload was scored and when its row got a place on the board: ``scored_during`` counts the
uploads on the board by the end of ``--seconds``, and the POST-to-scored and POST-to-row times include those that
arrived up to 120 s later (``never_on_board`` counts the rest). Last, one reader on the same board, idle, gives the
cost of one request without contention.

    python bench/bench_serve.py [--uploads 100] [--board-rows 10000] [--seconds 30]

Writes bench/results/bench_serve.json.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import Recorder  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def _ubench(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ubench.cli", *map(str, args)], capture_output=True, text=True,
                          check=True)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _quantile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None


def _trimmed_record(ref: Path, tmp: Path) -> dict:
    """A real scored record of the bundled deep ensemble, its report cut to what the board and status read."""
    out = tmp / "one"
    _ubench("leaderboard", _one_upload(tmp), "--reference", ref, "--out", out)
    import json

    record = json.loads(next((out / "results").glob("*.json")).read_text())
    report = record["outcome"]["report"]
    record["outcome"]["report"] = {k: report[k] for k in ("summary", "comparability", "archive", "labels")}
    return record


def _one_upload(tmp: Path) -> Path:
    d = tmp / "one-upload"
    d.mkdir(exist_ok=True)
    shutil.copy(EXAMPLES / "digits_deep_ensemble.h5", d / "de.h5")
    return d


def seed_board(data: Path, n_rows: int, record: dict, ref: Path) -> tuple[str, float, float]:
    """``n_rows`` scored submissions through the store, then one board refresh; (a team's token, seconds to
    seed, seconds of the refresh)."""
    import copy
    import random

    from ubench.scoring.leaderboard import BoardConfig
    from ubench.scoring.protocols import Protocol
    from ubench.serve.board import board_entry, refresh_board
    from ubench.serve.db import Database
    from ubench.serve.storage import prepare_data_dir

    prepare_data_dir(data)
    db = Database.for_data_dir(data)
    tokens = [db.add_team(f"team-{i:02d}") for i in range(40)]
    team_ids = sorted(db.team_names())
    rng = random.Random(25)
    t0 = time.perf_counter()
    for i in range(n_rows):
        rec = copy.deepcopy(record)
        summary = rec["outcome"]["report"]["summary"]
        summary["cll"] = summary["cll"] - rng.random() * 0.5
        summary["accuracy"] = min(1.0, summary["accuracy"] + rng.uniform(-0.05, 0.02))
        sha = f"{i:064x}"
        rec["sha256"] = sha
        db.complete_upload("seed", team_ids[i % len(team_ids)], sha, 1, f"method {i}", None)
        claim = db.claim_next("bench-seed", lease=600)
        assert claim is not None
        db.finish(claim["id"], "bench-seed", f"{sha}-seed", sha, rec, "scored", board_entry(rec))
    seeded = time.perf_counter() - t0
    config = BoardConfig.create(reference=ref, protocol=Protocol.preset("pitfalls"))
    t0 = time.perf_counter()
    assert refresh_board(db, config)
    refreshed = time.perf_counter() - t0
    db.engine.dispose()
    return tokens[0], seeded, refreshed


def board_latency(n_rows: int, seconds: float, tmp: Path, ref: Path) -> dict:
    import httpx
    from sqlalchemy import bindparam, create_engine, text

    data = tmp / "board-srv"
    token, seeded, refreshed = seed_board(data, n_rows, _trimmed_record(ref, tmp), ref)
    port = _port()
    url = f"http://127.0.0.1:{port}"
    t_start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "ubench.cli", "serve", "--reference", ref, "--data-dir", data,
                             "--port", str(port), "--max-per-day", "100000", "--max-concurrent", "16"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # where each upload is, read from the server's database beside it (no request to the server measured)
    engine = create_engine(f"sqlite:///{data / 'ubench-serve.db'}")
    where = text("select s.id, s.status, b.position from submissions s left join board_rows b "
                 "on b.submission_id = s.id where s.id in :ids").bindparams(bindparam("ids", expanding=True))
    try:
        _wait(url)
        while True:  # the start's own refresh, then its replicates of every row and the first rank intervals
            info = httpx.get(url + "/api/leaderboard", params={"limit": 1}, timeout=60).json()
            if info["total"] >= n_rows and info["rank_intervals"] and not info["rank_intervals"]["stale"]:
                break
            time.sleep(0.2)
        backfill = time.perf_counter() - t_start
        latency: dict[str, list[float]] = {"/": [], "/api/leaderboard": []}
        stop = threading.Event()
        posted: dict[str, float] = {}  # id -> when its POST started
        scored: dict[str, float] = {}  # id -> when it was seen scored (or rejected)
        on_board: dict[str, float] = {}  # id -> when it was seen with a position on the board

        def read(i: int) -> None:
            routes = list(latency)
            with httpx.Client(base_url=url, timeout=60) as client:
                k = i
                while not stop.is_set():
                    route = routes[k % 2]
                    t = time.perf_counter()
                    r = client.get(route)
                    r.read()
                    latency[route].append(time.perf_counter() - t)
                    assert r.status_code == 200
                    k += 1

        def upload() -> None:
            files = [EXAMPLES / n for n in ("digits_sgd.h5", "digits_deep_ensemble.h5", "digits_mc_dropout.h5")]
            headers = {"Authorization": f"Bearer {token}"}
            k = 0
            while not stop.is_set():
                t = time.perf_counter()
                with open(files[k % len(files)], "rb") as f:
                    r = httpx.post(url + "/api/submissions", headers=headers, files={"archive": ("a.h5", f)},
                                   timeout=60)
                posted[r.json()["id"]] = t
                k += 1
                time.sleep(0.5)

        def watch(until: threading.Event) -> None:
            while not until.is_set():
                ids = [i for i in list(posted) if i not in on_board]
                if ids:
                    with engine.connect() as c:
                        rows = c.execute(where, {"ids": ids}).all()
                    now = time.perf_counter()
                    for sid, status, position in rows:
                        if status in ("scored", "rejected"):
                            scored.setdefault(sid, now)
                        if position is not None:
                            on_board.setdefault(sid, now)
                until.wait(0.1)

        watched = threading.Event()
        watcher = threading.Thread(target=watch, args=(watched,))
        watcher.start()
        threads = [threading.Thread(target=read, args=(i,)) for i in range(8)] + [threading.Thread(target=upload)]
        for t in threads:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join()
        in_window = dict(on_board)
        final = httpx.get(url + "/api/leaderboard", params={"limit": 1}, timeout=60).json()
        deadline = time.perf_counter() + 120  # the uploads still on their way, for their times
        while len(on_board) < len(posted) and time.perf_counter() < deadline:
            time.sleep(0.2)
        watched.set()
        watcher.join()
        to_row = [on_board[i] - posted[i] for i in on_board]
        to_scored = [scored[i] - posted[i] for i in scored]
        return {"board_rows": n_rows, "seconds": seconds, "seed_s": round(seeded, 1),
                "refresh_s": round(refreshed, 3), "start_backfill_s": round(backfill, 1),
                "uploads": len(posted), "scored_during": len(in_window), "rows_after": final["total"],
                "on_board_later": len(on_board) - len(in_window), "never_on_board": len(posted) - len(on_board),
                "post_to_scored_p50_s": _round(_quantile(to_scored, 0.5)),
                "post_to_scored_max_s": _round(max(to_scored, default=None)),
                "post_to_row_p50_s": _round(_quantile(to_row, 0.5)),
                "post_to_row_max_s": _round(max(to_row, default=None)),
                **{f"{name}_{q}_ms": round(1e3 * _quantile(lat, {"p50": 0.5, "p95": 0.95}[q]), 1)
                   for route, lat in latency.items() for name in [("page" if route == "/" else "api")]
                   for q in ("p50", "p95")},
                "requests": sum(len(v) for v in latency.values())}
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        engine.dispose()


def _round(x: float | None, digits: int = 2) -> float | None:
    return None if x is None else round(x, digits)


def idle_page(n_rows: int, tmp: Path) -> dict:
    """One reader on the idle board server of :func:`board_latency` (its data directory kept): what one ``GET /``
    and ``GET /api/leaderboard`` cost at ``n_rows`` rows without contention (the kept page served again)."""
    import httpx

    port = _port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "ubench.cli", "serve", "--reference", tmp / "ref.h5",
                             "--data-dir", tmp / "board-srv", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(url)
        while not (info := httpx.get(url + "/api/leaderboard", params={"limit": 1}, timeout=60).json()
                   )["rank_intervals"] or info["rank_intervals"]["stale"]:
            time.sleep(0.2)
        out = {"board_rows": n_rows, "readers": 1}
        with httpx.Client(base_url=url, timeout=60) as client:
            for route, name in (("/", "page"), ("/api/leaderboard", "api")):
                lat = []
                for _ in range(300):
                    t = time.perf_counter()
                    client.get(route).read()
                    lat.append(time.perf_counter() - t)
                out.update({f"idle_{name}_p50_ms": round(1e3 * _quantile(lat, 0.5), 1),
                            f"idle_{name}_p95_ms": round(1e3 * _quantile(lat, 0.95), 1)})
        return out
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _wait(url: str) -> None:
    import httpx

    while True:
        try:
            if httpx.get(url + "/openapi.json", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)


def run(workers: int, n_uploads: int, tmp: Path, ref: Path) -> dict:
    import httpx

    data = tmp / f"srv{workers}"
    token = _ubench("serve", "team", "add", "bench", "--data-dir", data).stdout.strip()
    port = _port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "ubench.cli", "serve", "--reference", ref, "--data-dir", data,
                             "--port", str(port), "--workers", str(workers), "--max-per-day", "100000",
                             "--max-concurrent", "16"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(url)
        headers = {"Authorization": f"Bearer {token}"}
        files = [EXAMPLES / n for n in ("digits_deep_ensemble.h5", "digits_sgd.h5")]
        ids: list[str] = []
        api_lat: list[float] = []
        stop = threading.Event()

        def poll():
            while not stop.is_set():
                t = time.perf_counter()
                httpx.get(url + "/api/leaderboard", timeout=30)
                if ids:
                    httpx.get(f"{url}/api/submissions/{ids[-1]}", headers=headers, timeout=30)
                api_lat.append((time.perf_counter() - t) / (2 if ids else 1))

        def send(i):
            with open(files[i % len(files)], "rb") as f:
                t = time.perf_counter()
                r = httpx.post(url + "/api/submissions", headers=headers, files={"archive": ("a.h5", f)},
                               timeout=60)
                dt = time.perf_counter() - t
            ids.append(r.json()["id"])
            return dt

        # end to end on an idle server: an archive never seen, from POST to its row on the board
        t1 = time.perf_counter()
        with open(EXAMPLES / "digits_mc_dropout.h5", "rb") as f:
            sid = httpx.post(url + "/api/submissions", headers=headers, files={"archive": ("b.h5", f)},
                             timeout=60).json()["id"]
        while not any(r["submission"] == sid for r in httpx.get(url + "/api/leaderboard", timeout=30).json()["rows"]):
            time.sleep(0.05)
        e2e = time.perf_counter() - t1
        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        t0 = time.perf_counter()
        with ThreadPoolExecutor(8) as ex:
            post_lat = list(ex.map(send, range(n_uploads)))
        accept_seconds = time.perf_counter() - t0
        stop.set()
        poller.join()
        return {"workers": workers, "uploads": n_uploads, "accepted_per_s": round(n_uploads / accept_seconds, 1),
                "post_p50_ms": round(1e3 * statistics.median(post_lat), 1),
                "post_p95_ms": round(1e3 * _quantile(post_lat, 0.95), 1),
                "api_get_p50_ms": round(1e3 * statistics.median(api_lat), 1),
                "api_get_p95_ms": round(1e3 * _quantile(api_lat, 0.95), 1),
                "upload_to_row_s": round(e2e, 2)}
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--uploads", type=int, default=100)
    ap.add_argument("--board-rows", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=30.0)
    args = ap.parse_args(argv)
    rec = Recorder(__file__, "fastapi", "uvicorn", "sqlalchemy")
    tmp = Path(tempfile.mkdtemp(prefix="ubench-bench-serve-"))
    try:
        ref = tmp / "ref.h5"
        _ubench("reference", EXAMPLES / "digits_deep_ensemble.h5", "--out", ref)
        rows = []
        for workers in (1, 2):
            row = run(workers, args.uploads, tmp, ref)
            print(row, flush=True)
            rows.append(row)
        summary = [{"what": f"serve, {r['workers']} worker(s): uploads accepted while scoring",
                    "workload": f"{r['uploads']} uploads of bundled examples, 8 clients, loopback",
                    "result": (f"{r['accepted_per_s']}/s; POST p50 {r['post_p50_ms']} ms, p95 {r['post_p95_ms']} "
                               f"ms; GET p50 {r['api_get_p50_ms']} ms, p95 {r['api_get_p95_ms']} ms; upload to "
                               f"row {r['upload_to_row_s']} s"),
                    "target": "accept path does not wait on scoring", "met": None} for r in rows]
        b = board_latency(args.board_rows, args.seconds, tmp, ref)
        print(b, flush=True)
        rows.append(b)
        idle = idle_page(args.board_rows, tmp)
        print(idle, flush=True)
        rows.append(idle)
        summary.append({"what": "serve: public board latency while uploads are scored",
                        "workload": f"{b['board_rows']:,} scored rows, 8 concurrent readers of / and "
                                    f"/api/leaderboard for {b['seconds']:g} s while {b['uploads']} uploads were "
                                    f"sent, {b['scored_during']} of them scored and on the board within the "
                                    "time, loopback",
                        "result": (f"GET / p50 {b['page_p50_ms']} ms, p95 {b['page_p95_ms']} ms; /api/leaderboard "
                                   f"p50 {b['api_p50_ms']} ms, p95 {b['api_p95_ms']} ms; POST to row p50 "
                                   f"{b['post_to_row_p50_s']} s, max {b['post_to_row_max_s']} s; one full refresh "
                                   f"of the board {b['refresh_s']} s; start to replicates of every row "
                                   f"{b['start_backfill_s']} s"),
                        "target": "p95 <= 50 ms for each",
                        "met": max(b["page_p95_ms"], b["api_p95_ms"]) <= 50 and b["scored_during"] > 0})
        summary.append({"what": "serve: public board latency, one reader, idle server",
                        "workload": f"{idle['board_rows']:,} scored rows, 300 sequential requests per route, "
                                    "loopback",
                        "result": (f"GET / p50 {idle['idle_page_p50_ms']} ms, p95 {idle['idle_page_p95_ms']} ms; "
                                   f"/api/leaderboard p50 {idle['idle_api_p50_ms']} ms, p95 "
                                   f"{idle['idle_api_p95_ms']} ms"),
                        "target": "the floor under the 8-reader figures", "met": None})
        rec.write(rows, summary, settings=vars(args))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
