# SPDX-License-Identifier: MIT
"""A bounded soak of `ubench serve` on loopback (issue #18 item 10): 8 concurrent clients send 200 uploads (good,
invalid, hostile, duplicate, over the size limit, wrong token), with a kill -9 of the server and its scoring
children half-way and a restart. Every accepted upload ends with exactly one status, nothing is scored twice, the
board equals `ubench leaderboard` over the accepted files, and the server's RSS stays bounded. The figures are
printed (run with -s) for the closing note."""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from test_serve import EXAMPLE, Server, _ubench, query, wait_board  # the same real server (tests/serve)

pytestmark = pytest.mark.slow

EXAMPLES = Path(EXAMPLE).parent


def _pool(tmp: Path) -> dict[str, Path]:
    good = {n: EXAMPLES / f"digits_{n}.h5" for n in ("deep_ensemble", "sgd", "mc_dropout")}
    raw = (EXAMPLES / "digits_sgd.h5").read_bytes()
    files = {}
    files["junk"] = tmp / "junk.h5"
    files["junk"].write_bytes(b"\x89HDF\r\n\x1a\n" + random.Random(1).randbytes(5000))
    files["truncated"] = tmp / "truncated.h5"  # hostile: a real archive cut in half
    files["truncated"].write_bytes(raw[: len(raw) // 2])
    flipped = bytearray(raw)
    for i in range(len(raw) // 3, len(raw) // 3 + 4096, 7):  # hostile: bit rot in the middle
        flipped[i] ^= 0xFF
    files["flipped"] = tmp / "flipped.h5"
    files["flipped"].write_bytes(bytes(flipped))
    files["oversize"] = tmp / "oversize.h5"
    files["oversize"].write_bytes(b"\x89HDF\r\n\x1a\n" + os.urandom(3 * 2**20))
    return {**good, **files}


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def test_soak_200_uploads_8_clients_with_a_kill_9(tmp_path):
    ref = tmp_path / "ref.h5"
    assert _ubench("reference", EXAMPLE, "--out", ref).returncode == 0
    data = tmp_path / "srv"
    token = _ubench("serve", "team", "add", "soak", "--data-dir", data).stdout.strip()
    pool = _pool(tmp_path)
    rng = random.Random(20261123)
    plan = [rng.choice(list(pool)) for _ in range(190)] + ["badtoken"] * 10
    rng.shuffle(plan)
    extra = ("--workers", "2", "--max-upload", "2600K", "--max-per-day", "1000", "--max-concurrent", "8",
             "--lease", "5")  # the killed server's claims are taken over 5 s after its last heartbeat
    srv = Server(data, ref, *extra).start()
    peak = [0]

    def send(kind: str):
        peak[0] = max(peak[0], _rss(srv.proc.pid))
        path = pool.get(kind, pool["sgd"])
        r = srv.upload("wrong-token" if kind == "badtoken" else token, path, method=f"<i>{kind}</i>")
        return kind, r.status_code, (r.json().get("id") if r.status_code == 202 else None)

    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as ex:
        first = list(ex.map(send, plan[:100]))
    srv.kill9()  # scoring is under way: queued and half-scored submissions are in the database
    srv = Server(data, ref, *extra).start()
    with ThreadPoolExecutor(8) as ex:
        second = list(ex.map(send, plan[100:]))
    answers = first + second
    accepted = [(k, sid) for k, code, sid in answers if code == 202]
    expected = {"oversize": 413, "badtoken": 401}
    for kind, code, _ in answers:
        assert code == expected.get(kind, 202), (kind, code)
    done = {sid: srv.wait_done(token, sid, timeout=600) for _, sid in accepted}
    seconds = time.monotonic() - t0
    for kind, sid in accepted:
        want = "scored" if kind in ("deep_ensemble", "sgd", "mc_dropout") else "rejected"
        assert done[sid]["status"] == want, (kind, done[sid])
    statuses = dict(query(data, "select id, status from submissions"))
    n_results = query(data, "select count(*) from results")[0][0]
    assert set(statuses) == {sid for _, sid in accepted}  # exactly the accepted ones, each with one status
    distinct = {k for k, _ in accepted}
    assert n_results == len(distinct)  # every distinct archive scored once, kill or not
    assert len(list((data / "board" / "results").glob("*.json"))) == len(distinct)
    assert list((data / "incoming").iterdir()) == []
    # The board equals `ubench leaderboard` over the accepted files.
    board = wait_board(srv, sum(1 for s in statuses.values() if s == "scored"))
    uploads = tmp_path / "accepted"
    uploads.mkdir()
    for k in distinct:
        shutil.copy(pool[k], uploads / f"{k}.h5")
    out = tmp_path / "board"
    assert _ubench("leaderboard", uploads, "--reference", ref, "--out", out).returncode == 0
    cli_rows = {r["sha256"]: r["metrics"] for r in json.loads((out / "leaderboard.json").read_text())["rows"]
                if r["status"] == "ok"}
    srv_rows = {}
    for r in board["rows"]:
        srv_rows.setdefault(r["sha256"], r["metrics"])
    assert srv_rows == cli_rows
    assert len(board["rows"]) == sum(1 for s in statuses.values() if s == "scored")
    assert peak[0] < 1.5 * 2**30  # the server process (scoring runs in its children)
    print(f"\nsoak: {len(answers)} uploads, {len(accepted)} accepted, {len(distinct)} distinct, "
          f"{sum(1 for s in statuses.values() if s == 'scored')} scored rows, {n_results} results, "
          f"peak server RSS {peak[0] / 2**20:.0f} MiB, {seconds:.0f} s with a kill -9 after upload 100")
    srv.stop()
