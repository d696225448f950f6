# SPDX-License-Identifier: MIT
"""Leaderboards: one row per upload (bad ones with findings), content-addressed results scored exactly once —
across re-runs, a killed run, and a Dask worker killed mid-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

import board_hooks
from scale_archives import make_archive
from ubench.cli import cli
from ubench.scoring.leaderboard import BoardConfig, archive_digest, score_directory
from ubench.scoring.sandbox import SandboxLimits

LIMITS = SandboxLimits(cpu_seconds=30, timeout_seconds=60)
HOOKED_CLI = [sys.executable, board_hooks.__file__]


@pytest.fixture
def uploads(tmp_path, valid_archive) -> Path:
    d = tmp_path / "uploads"
    d.mkdir()
    for i in range(3):
        make_archive(d / f"team{i}.h5", seed=i)
    (d / "junk.h5").write_bytes(b"hello")
    data = (d / "team0.h5").read_bytes()
    (d / "truncated.h5").write_bytes(data[: len(data) // 2])
    (d / "<img src=x onerror=alert(1)>.h5").write_bytes(data)  # same content as team0: same result file
    (d / "escape.h5").symlink_to(valid_archive)
    return d


@pytest.fixture
def markers(tmp_path, monkeypatch) -> Path:
    """Marker files counting executions (``board_hooks.py``), installed in this process by monkeypatching and
    in subprocesses and Dask workers through ``board_hooks``' own variables."""
    d = tmp_path / "markers"
    d.mkdir()
    board_hooks.install(str(d), setattr=monkeypatch.setattr)
    monkeypatch.setenv(board_hooks.MARKERS_VAR, str(d))
    return d


def marker_counts(markers: Path, stage: str) -> Counter:
    return Counter(p.name.split("-")[1] for p in markers.iterdir() if p.name.startswith(stage + "-"))


def digests(board: Path) -> list[str]:
    return sorted(p.name.split("-")[0] for p in (board / "results").glob("*.json"))


def test_leaderboard_rows_ranks_and_cache(uploads, reference_file, tmp_path, markers):
    """Every upload is a row; good ones ranked, bad ones with findings; a re-run scores nothing again."""
    board = tmp_path / "board"
    config = BoardConfig.create(reference=reference_file, sandbox=LIMITS)
    result = score_directory(uploads, board, config)
    rows = {r["archive"]: r for r in result["rows"]}
    assert set(rows) == {p.name for p in uploads.iterdir()}
    assert [rows[f"team{i}.h5"]["status"] for i in range(3)] == ["ok"] * 3
    assert rows["junk.h5"]["status"] == "unreadable" and rows["junk.h5"]["findings"][0]["check"] == "not-hdf5"
    assert rows["truncated.h5"]["exit_code"] == 2
    assert rows["escape.h5"]["findings"][0]["check"] == "not-regular-file"
    ranked = [r for r in result["rows"] if r["rank"] is not None]
    assert [r["rank"] for r in ranked] == list(range(1, len(ranked) + 1))
    assert result["rows"][: len(ranked)] == ranked  # scored uploads first
    # content addressing: the two identical uploads share one result, scored once; the symbolic link is refused
    # from its lstat alone (no result file, nothing read)
    assert len(digests(board)) == len(set(digests(board))) == len(rows) - 2
    assert set(marker_counts(markers, "scored").values()) == {1}
    first = (board / "leaderboard.json").read_text()
    again = score_directory(uploads, board, config)
    assert all(r["cached"] == (r["archive"] != "escape.h5") for r in again["rows"])
    assert set(marker_counts(markers, "scored").values()) == {1}
    assert json.loads(first)["rows"][0]["metrics"] == again["rows"][0]["metrics"]
    page = (board / "index.html").read_text()
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "Content-Security-Policy" in page


def test_new_protocol_or_bigger_limits_rescore(uploads, reference_file, tmp_path, markers):
    """A different protocol is a different result; a timed-out upload is retried once the limit grows."""
    from ubench.scoring.protocols import Protocol

    board = tmp_path / "board"
    a = BoardConfig.create(reference=reference_file, sandbox=LIMITS)
    b = BoardConfig.create(reference=reference_file, protocol=Protocol.preset("ursabench"), sandbox=LIMITS)
    assert a.key() != b.key()
    score_directory(uploads, board, a)
    n = len(list((board / "results").glob("*.json")))
    score_directory(uploads, board, b)
    assert len(list((board / "results").glob("*.json"))) == 2 * n


def test_killed_run_resumes_where_it_stopped(uploads, reference_file, tmp_path, markers, monkeypatch):
    """`ubench leaderboard` killed while scoring its second upload: the re-run keeps the first result and scores
    every other upload exactly once."""
    board = tmp_path / "board"
    held = archive_digest(uploads / "team1.h5")[:16]
    monkeypatch.setenv(board_hooks.HOLD_VAR, held)
    cmd = HOOKED_CLI + ["leaderboard", str(uploads), "--reference", str(reference_file), "--out", str(board)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while held not in marker_counts(markers, "started"):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    done_before = set(digests(board))
    assert 0 < len(done_before) < 6 and not (board / "leaderboard.json").exists()
    monkeypatch.delenv(board_hooks.HOLD_VAR)
    res = CliRunner().invoke(cli, cmd[2:] + ["--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)["rows"]
    assert len(rows) == 7 and all(r["cached"] == (r["sha256"] in done_before) for r in rows)
    assert set(marker_counts(markers, "scored").values()) == {1}
    assert set(marker_counts(markers, "committed").values()) == {1}


def test_dask_worker_killed_mid_run_every_upload_scored_once(uploads, reference_file, tmp_path, markers,
                                                             monkeypatch):
    """On a LocalCluster of worker processes, the worker holding one upload is SIGKILLed mid-task; the scheduler
    reruns the task elsewhere and every upload ends with exactly one result and one scoring execution."""
    distributed = pytest.importorskip("distributed")
    monkeypatch.setenv(board_hooks.HOLD_VAR, archive_digest(uploads / "team2.h5")[:16])
    board = tmp_path / "board"
    config = BoardConfig.create(reference=reference_file, sandbox=LIMITS)
    from scale_archives import make_archive as mk

    for i in range(3, 8):
        mk(uploads / f"team{i}.h5", seed=i)
    team2 = None
    with distributed.LocalCluster(n_workers=3, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None, silence_logs=50, preload=[board_hooks.__file__]) as cluster:
        out: dict = {}
        runner = threading.Thread(target=lambda: out.update(
            board=score_directory(uploads, board, config, scheduler=cluster.scheduler_address)))
        runner.start()
        team2 = archive_digest(uploads / "team2.h5")[:16]
        deadline = time.monotonic() + 120
        held = []
        while not held:
            held = [p.name for p in markers.iterdir() if p.name.startswith(f"started-{team2}-")]
            assert time.monotonic() < deadline and runner.is_alive()
            time.sleep(0.05)
        victim = int(held[0].split("-")[2])
        os.kill(victim, signal.SIGKILL)
        runner.join(timeout=240)
        assert not runner.is_alive()
    rows = out["board"]["rows"]
    names = {p.name for p in uploads.iterdir()}
    assert {r["archive"] for r in rows} == names and len(rows) == len(names)
    assert len(digests(board)) == len(set(digests(board))) == len(names) - 2  # a duplicate; a symlink refused
    assert marker_counts(markers, "started")[team2] == 2  # held and killed once, then run again
    assert set(marker_counts(markers, "scored").values()) == {1}
    assert set(marker_counts(markers, "committed").values()) == {1}
    assert len(marker_counts(markers, "scored")) == len(names) - 2
