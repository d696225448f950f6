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
    assert list(board.glob(".staging-*"))  # the held upload's private copy, left by the killed run
    monkeypatch.delenv(board_hooks.HOLD_VAR)
    res = CliRunner().invoke(cli, cmd[2:] + ["--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)["rows"]
    assert len(rows) == 7 and all(r["cached"] == (r["sha256"] in done_before) for r in rows)
    assert not list(board.glob(".staging-*"))  # removed by the next run
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


# -- issue #16 item 2: the bytes scored are the bytes hashed ----------------------------------------------------
def _one_upload(tmp_path, name="a.h5", seed=0) -> Path:
    d = tmp_path / "uploads"
    d.mkdir(parents=True, exist_ok=True)
    make_archive(d / name, seed=seed)
    return d


def _result_files(board: Path) -> list[Path]:
    return sorted((board / "results").glob("*.json"))


def test_upload_swapped_after_hashing_is_scored_as_hashed(tmp_path, reference_file, monkeypatch):
    """The upload is replaced (renamed over) by a better archive after it was hashed and before the sandbox
    reads it: the result stored under the first file's hash is the first file's score, as scoring an untouched
    copy of it gives, not the second file's."""
    from ubench.scoring import leaderboard

    import shutil

    config = BoardConfig.create(reference=reference_file, sandbox=LIMITS)
    uploads = _one_upload(tmp_path)
    make_archive(tmp_path / "better.h5", seed=2)
    for name, src in (("p", uploads / "a.h5"), ("o", tmp_path / "better.h5")):  # byte copies, scored untouched
        (tmp_path / name).mkdir()
        shutil.copyfile(src, tmp_path / name / "a.h5")
    pristine = score_directory(tmp_path / "p", tmp_path / "pboard", config)["rows"][0]
    other = score_directory(tmp_path / "o", tmp_path / "oboard", config)["rows"][0]
    assert pristine["metrics"]["cll"] != other["metrics"]["cll"]
    real = leaderboard.run_sandboxed

    def swap_then_run(task, limits):
        os.replace(tmp_path / "better.h5", uploads / "a.h5")
        return real(task, limits)

    monkeypatch.setattr(leaderboard, "run_sandboxed", swap_then_run)
    board = tmp_path / "board"
    row = score_directory(uploads, board, config)["rows"][0]
    assert row["sha256"] == pristine["sha256"] != archive_digest(uploads / "a.h5")
    assert row["metrics"] == pristine["metrics"]
    stored = json.loads(_result_files(board)[0].read_text())
    assert stored["outcome"]["report"]["archive"]["sha256"] == pristine["sha256"]


def test_upload_changed_in_place_while_read_is_not_stored(tmp_path, reference_file, monkeypatch):
    """Bytes rewritten in place between the hashing pass and the copy: the upload is not scored, no result is
    stored, and the row says the file changed."""
    from ubench.scoring import leaderboard

    uploads = _one_upload(tmp_path)
    real = leaderboard._file_digest

    def digest_then_rewrite(fd, name, limits, deadline, copy_to=None):
        digest = real(fd, name, limits, deadline, copy_to)
        if copy_to is None:
            with open(uploads / "a.h5", "r+b") as fh:
                fh.seek(-8, os.SEEK_END)
                fh.write(b"\xff" * 8)
        return digest

    monkeypatch.setattr(leaderboard, "_file_digest", digest_then_rewrite)
    board = tmp_path / "board"
    row = score_directory(uploads, board, BoardConfig.create(reference=reference_file, sandbox=LIMITS))["rows"][0]
    assert (row["status"], [f["check"] for f in row["findings"]]) == ("internal-error", ["archive-changed"])
    assert _result_files(board) == []


def test_result_whose_report_hash_differs_from_its_key_is_not_committed(tmp_path, reference_file, monkeypatch):
    """A sandbox answer whose report records another archive sha256 than the key is refused, not cached."""
    from ubench.scoring import leaderboard
    from ubench.scoring.sandbox import SandboxOutcome

    real = leaderboard.run_sandboxed

    def other_bytes(task, limits):
        d = real(task, limits).to_dict()
        d["report"]["archive"]["sha256"] = "0" * 64
        return SandboxOutcome.from_dict(d)

    monkeypatch.setattr(leaderboard, "run_sandboxed", other_bytes)
    board = tmp_path / "board"
    row = score_directory(_one_upload(tmp_path), board, BoardConfig.create(reference=reference_file,
                                                                           sandbox=LIMITS))["rows"][0]
    assert [f["check"] for f in row["findings"]] == ["archive-changed"]
    assert _result_files(board) == []


def test_score_sha256_is_of_the_bytes_read(tmp_path, monkeypatch):
    """`ubench score`'s sha256: the file is replaced right after the reader opened it; the report's hash is the
    opened file's (hashlib over its original bytes), not the replacement's."""
    import hashlib

    import ubench.archive_schema as archive_schema
    from ubench.scoring.score import score_archive

    a = make_archive(tmp_path / "a.h5", seed=0)
    expected = hashlib.sha256(a.read_bytes()).hexdigest()
    make_archive(tmp_path / "b.h5", seed=1)
    real = archive_schema.open_archive

    def open_then_swap(path, *args, **kwargs):
        reader = real(path, *args, **kwargs)
        os.replace(tmp_path / "b.h5", path)
        return reader

    monkeypatch.setattr(archive_schema, "open_archive", open_then_swap)
    assert score_archive(a)["archive"]["sha256"] == expected


# -- issue #16 item 13 ----------------------------------------------------------------------------------------
def test_oversized_sparse_upload_is_refused_before_it_is_read(tmp_path, reference_file):
    """A 40 GB sparse file is refused from its size alone (the default 33 GiB max_file_bytes): no hash, no
    sandbox, no result file."""
    uploads = tmp_path / "uploads"
    uploads.mkdir()
    with open(uploads / "huge.h5", "wb") as fh:
        fh.truncate(40 * 10**9)
    board = tmp_path / "board"
    row = score_directory(uploads, board, BoardConfig.create(reference=reference_file, sandbox=LIMITS))["rows"][0]
    assert (row["status"], row["sha256"], [f["check"] for f in row["findings"]]) == ("rejected", None, ["file-size"])
    assert "40000000000 bytes" in row["findings"][0]["message"]
    assert _result_files(board) == []


def test_sparse_upload_is_copied_sparsely_and_hashed_whole(tmp_path, monkeypatch):
    """Issue #25 item 14: an upload of data, a 32 MiB hole, data again and a 1 MiB hole (a few hundred KiB on
    disk) is copied with its holes (its private copy used to take the whole 33 MiB): the copy the sandbox reads
    has the upload's size, bytes (sha256) and disk usage."""
    from ubench.archive_schema.scan import file_sha256
    from ubench.scoring import leaderboard

    uploads = _one_upload(tmp_path)
    upload = uploads / "a.h5"
    end = upload.stat().st_size + 32 * 2**20
    with open(upload, "r+b") as fh:
        fh.truncate(end)
        fh.seek(end)
        fh.write(b"tail" * 1024)  # data after the hole
        fh.truncate(end + 4096 + 2**20)  # and a hole at the end
    on_disk = os.stat(upload).st_blocks * 512
    assert on_disk < 2**20
    seen = {}
    real = leaderboard.run_sandboxed

    def measure(task, limits):
        st = os.stat(task.archive)
        seen.update(size=st.st_size, disk=st.st_blocks * 512, sha256=file_sha256(task.archive))
        return real(task, limits)

    monkeypatch.setattr(leaderboard, "run_sandboxed", measure)
    row = score_directory(uploads, tmp_path / "board", BoardConfig.create(kind="validate", sandbox=LIMITS))["rows"][0]
    assert seen["size"] == upload.stat().st_size and seen["sha256"] == archive_digest(upload) == row["sha256"]
    assert seen["disk"] <= on_disk + 64 * 2**10, (seen, on_disk)


def test_planted_results_symlink_is_never_followed(tmp_path, reference_file):
    """`results` in --out is a symbolic link to another directory: the run refuses (library error, CLI exit 2
    with one line) and writes nothing through it."""
    uploads = _one_upload(tmp_path)
    board, elsewhere = tmp_path / "board", tmp_path / "elsewhere"
    board.mkdir()
    elsewhere.mkdir()
    (board / "results").symlink_to(elsewhere)
    from ubench.scoring.leaderboard import BoardError

    with pytest.raises(BoardError, match="results is not a plain directory"):
        score_directory(uploads, board, BoardConfig.create(reference=reference_file, sandbox=LIMITS))
    res = subprocess.run([sys.executable, "-m", "ubench.cli", "leaderboard", str(uploads), "--reference",
                          str(reference_file), "--out", str(board)], capture_output=True, text=True)
    assert res.returncode == 2 and "refusing to follow" in res.stderr and "Traceback" not in res.stderr
    assert list(elsewhere.iterdir()) == []


def test_public_board_and_findings_name_no_host_path(uploads, reference_file, tmp_path, tmp_path_factory):
    """leaderboard.json (config, rows, findings) and the stored results carry upload and reference file names,
    never the host's absolute paths (the uploads, the reference, the private copies)."""
    board = tmp_path / "board"
    score_directory(uploads, board, BoardConfig.create(reference=reference_file, sandbox=LIMITS))
    base = str(tmp_path_factory.getbasetemp())
    public = json.loads((board / "leaderboard.json").read_text())
    assert public["config"]["reference"] == reference_file.name
    for text in [(board / "leaderboard.json").read_text()] + [p.read_text() for p in _result_files(board)]:
        assert base not in text and ".staging-" not in text
    truncated = next(r for r in public["rows"] if r["archive"] == "truncated.h5")
    assert truncated["findings"]


def test_partial_upload_is_refused_without_a_member_count(tmp_path, reference_file):
    """A `*.partial` run directory (members 0 and 2 finished: one contiguous member) is refused with the
    partial-run finding, from its name alone, claiming no member count."""
    uploads = tmp_path / "uploads"
    part = uploads / "run.h5.partial"
    (part / "members").mkdir(parents=True)
    (part / "header.h5").write_bytes(b"")
    for k in (0, 2):
        (part / "members" / f"{k:06d}.h5").write_bytes(b"")
    row = score_directory(uploads, tmp_path / "board", BoardConfig.create(reference=reference_file,
                                                                          sandbox=LIMITS))["rows"][0]
    assert (row["archive"], row["status"], row["exit_code"]) == ("run.h5.partial", "rejected", 1)
    finding = row["findings"][0]
    assert finding["check"] == "partial-run" and "partial uploads are refused" in finding["message"]
    assert "member" not in finding["message"]


def test_hostile_reference_fails_once_naming_it(tmp_path, uploads, valid_archive):
    """A reference whose labels are an external link is refused once, naming the reference (CLI: one line,
    exit 2), before any upload is scored — not blamed on every upload, and the link is never followed."""
    import h5py
    import numpy as np

    from ubench.scoring.reference import ReferenceError, write_reference

    ref = write_reference(valid_archive, tmp_path / "hostile_ref.h5")
    outside = tmp_path / "outside.h5"
    with h5py.File(ref, "r+") as f:
        labels = f["splits/test/labels"][()]
        del f["splits/test/labels"]
        f["splits/test/labels"] = h5py.ExternalLink(str(outside), "labels")
    with h5py.File(outside, "w") as f:
        f["labels"] = np.asarray(labels, np.int64)
    board = tmp_path / "board"
    res = subprocess.run([sys.executable, "-m", "ubench.cli", "leaderboard", str(uploads), "--reference", str(ref),
                          "--out", str(board)], capture_output=True, text=True)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "hostile_ref.h5" in lines[0] and "external-link" in lines[0], res.stderr
    with pytest.raises(ReferenceError, match="external-link"):
        score_directory(uploads, board, BoardConfig(reference=str(ref), sandbox=LIMITS))
    assert not (board / "results").exists() or _result_files(board) == []


# -- issue #9 item 18: one run per board --------------------------------------------------------------------------
def test_second_run_on_the_same_board_says_who_holds_it(uploads, reference_file, tmp_path, markers, monkeypatch):
    """Two real `ubench leaderboard` processes on one --out: while the first is scoring (held), the second
    exits 2 naming the first's pid, host and start time, and scores nothing."""
    import socket

    board = tmp_path / "board"
    held = archive_digest(uploads / "team1.h5")[:16]
    monkeypatch.setenv(board_hooks.HOLD_VAR, held)
    args = ["leaderboard", str(uploads), "--reference", str(reference_file), "--out", str(board)]
    first = subprocess.Popen(HOOKED_CLI + args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while held not in marker_counts(markers, "started"):
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        before = digests(board)
        second = subprocess.run([sys.executable, "-m", "ubench.cli"] + args, capture_output=True, text=True)
        assert second.returncode == 2 and "Traceback" not in second.stderr
        assert f"pid {first.pid} on host {socket.gethostname()}, started 20" in second.stderr, second.stderr
        assert digests(board) == before
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    again = subprocess.run([sys.executable, "-m", "ubench.cli"] + args, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr  # a killed holder's lock is released with its process


def test_a_cached_result_holding_nan_is_damaged_and_rescored(tmp_path):
    """``json`` reads NaN, but the board's writer refuses it (allow_nan=False): a cache file with NaN must count as
    damaged, not stop every later board."""
    import os

    from ubench.scoring.leaderboard import _read_result

    d = tmp_path / "results"
    d.mkdir()
    (d / "nan.json").write_text('{"outcome": {"report": {"summary": {"cll": NaN}}}}')
    (d / "list.json").write_text("[1, 2]")
    (d / "ok.json").write_text('{"outcome": {"status": "ok"}}')
    fd = os.open(d, os.O_RDONLY)
    try:
        assert _read_result(fd, "nan.json") is None
        assert _read_result(fd, "list.json") is None
        assert _read_result(fd, "ok.json") == {"outcome": {"status": "ok"}}
    finally:
        os.close(fd)
