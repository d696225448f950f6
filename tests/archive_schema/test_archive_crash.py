# SPDX-License-Identifier: MIT
"""A producer killed with SIGKILL loses no finished member: the run resumes, or finalizes, into a valid archive."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from slow_producer import make_writer, member_probs
from ubench.archive_schema import ArchiveError, finalize_partial, partial_dir_for, read_archive, validate_archive

HERE = Path(__file__).parent
SAFETY_S = 300  # only so a broken child cannot hang the suite; nothing is timed


def _start(out: Path, size: str, mode: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(HERE / "slow_producer.py"), str(out), size, mode],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=HERE)


def _read_until(proc: subprocess.Popen, line: str) -> list[str]:
    seen = []
    while True:
        ready, _, _ = select.select([proc.stdout], [], [], SAFETY_S)
        assert ready, f"child printed {seen} and then nothing"
        got = proc.stdout.readline()
        assert got, f"child exited early: {seen}; stderr: {proc.stderr.read()}"
        seen.append(got.strip())
        if got.strip() == line:
            return seen


def _kill(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(SAFETY_S) == -signal.SIGKILL
    proc.stdout.close()
    proc.stderr.close()


def _killed_run(tmp_path: Path, size: str, mode: str, until: str) -> tuple[Path, int]:
    out = tmp_path / "run.h5"
    proc = _start(out, size, mode)
    seen = _read_until(proc, until)
    _kill(proc)
    reported = sum(line.endswith(" done") for line in seen)
    return out, reported


def _assert_members(out: Path, size: str, n: int) -> None:
    archive = read_archive(out)
    assert archive.n_members == n
    assert [m.seed for m in archive.members] == list(range(n))
    for name in ("test", "ood"):
        want = np.stack([member_probs(k, size)[name] for k in range(n)])
        assert archive.probs[name].dtype == want.dtype
        assert archive.probs[name].tobytes() == want.tobytes()  # bit-identical


@pytest.mark.parametrize("size, mode, until", [
    ("small", "after-2", "member 1 done"),    # killed between members, after two are reported
    ("large", "inside-2", "member 2 writing"),  # killed inside add_member, member 2's file half written
])
def test_killed_writer_resumes_with_every_finished_member(size, mode, until, tmp_path):
    """After SIGKILL the partial run validates as 'partial-run'; the same ArchiveWriter resumes with n_members
    equal to the members reported done; continuing and finalizing gives an archive whose members (the finished
    ones included) are bit-identical to what the producer computed."""
    out, reported = _killed_run(tmp_path, size, mode, until)
    assert reported == 2
    assert not out.exists()
    partial = partial_dir_for(out)
    leftovers = [p.name for p in (partial / "members").iterdir() if p.name.startswith(".000002.h5.tmp")]
    assert len(leftovers) == (1 if mode == "inside-2" else 0)  # the half-written member 2 is still there
    findings = validate_archive(partial)
    assert [(f.check, f.severity) for f in findings] == [("partial-run", "error")]
    assert "2 finished member(s)" in findings[0].message
    w = make_writer(out, size)
    assert w.n_members == reported
    for k in range(w.n_members, 4):
        assert w.add_member(member_probs(k, size), seed=k, epoch=2, info={"k": k}) == k
    w.finalize()
    assert not partial.exists()
    assert validate_archive(out) == []
    _assert_members(out, size, 4)
    assert read_archive(out).members[1].info == {"k": 1}


@pytest.mark.parametrize("mode, until, n", [
    ("rename-2", "member 2 renaming", 2),  # member 2 whole under its temporary name: absent from the run
    ("renamed-2", "member 2 renamed", 3),  # renamed, its directory not yet fsync'd: complete in the run
])
def test_killed_while_writing_a_large_member_unpatched(mode, until, n, tmp_path):
    """The unpatched writer killed at either side of the rename that publishes member 2 (the child stalls there,
    seen by an audit hook, so the count never depends on timing): member 2 is absent before the rename and
    complete after it (never half), members 0 and 1 are intact, and finalize_partial gives a valid archive."""
    out, reported = _killed_run(tmp_path, "large", mode, until)
    assert reported == 2
    members = partial_dir_for(out) / "members"
    leftovers = [p.name for p in members.iterdir() if p.name.startswith(".000002.h5.tmp")]
    assert (len(leftovers), (members / "000002.h5").exists()) == ((1, False) if n == 2 else (0, True))
    assert make_writer(out, "large").n_members == n
    finalize_partial(partial_dir_for(out))
    assert validate_archive(out) == []
    _assert_members(out, "large", n)


def test_finalize_partial_of_a_killed_run(tmp_path):
    """finalize_partial turns the killed run's directory into a valid archive of exactly the finished members,
    removes the directory, and refuses to overwrite that archive afterwards."""
    out, reported = _killed_run(tmp_path, "small", "after-2", "member 1 done")
    partial = partial_dir_for(out)
    assert finalize_partial(partial) == out
    assert not partial.exists()
    assert validate_archive(out) == []
    _assert_members(out, "small", reported)
    with pytest.raises(ArchiveError, match="not a partial ubench run"):
        finalize_partial(partial)


@pytest.mark.parametrize("change", [
    {"method": "mc_dropout"},
    {"config": {"lr": 0.02, "epochs": 2}},
    {"dtype": np.float64},
    {"class_names": [f"c{i}" for i in range(10)]},
    {"labels": "shuffled"},
])
def test_partial_run_with_another_config_is_refused(change, tmp_path):
    """A partial run is resumed only by the same configuration: any other method, hyperparameters, dtype,
    class names or labels raise ArchiveError and leave the partial run untouched and resumable."""
    out, reported = _killed_run(tmp_path, "small", "after-2", "member 1 done")
    if change == {"labels": "shuffled"}:
        from ubench.archive_schema import SplitSpec

        labels = np.random.default_rng(7).integers(0, 10, 300)
        labels[[0, 1]] = (labels[0] + 1) % 10, labels[1]
        change = {"splits": {"test": SplitSpec(role="in_domain", dataset="toy", labels=labels),
                             "ood": SplitSpec(role="ood", dataset="noise", n_samples=150)}}
    before = sorted(p.name for p in (partial_dir_for(out) / "members").iterdir())
    with pytest.raises(ArchiveError, match="different configuration"):
        make_writer(out, "small", **change)
    assert sorted(p.name for p in (partial_dir_for(out) / "members").iterdir()) == before
    assert make_writer(out, "small").n_members == reported


def test_finalize_partial_with_no_finished_member(tmp_path):
    out = tmp_path / "run.h5"
    make_writer(out, "small")
    with pytest.raises(ArchiveError, match="no finished member"):
        finalize_partial(partial_dir_for(out))
    assert [f.check for f in validate_archive(partial_dir_for(out))] == ["partial-run"]
