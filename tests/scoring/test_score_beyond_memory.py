# SPDX-License-Identifier: MIT
"""Scoring a split whose (N, C) mean does not fit the memory limit (issue #29 item 3): in passes over its archive,
with the numbers of the in-memory run, or refused before any prediction is read with the size it would need."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from ubench.archive_schema import ArchiveWriter, SplitSpec
from ubench.archive_schema.spec import ReadLimits
from ubench.cli import cli
from ubench.scoring.memory_plan import RESERVE_SHARE, MemoryBudgetError, plan_split, working_bytes
from ubench.scoring.score import run_score

LIMITS = ReadLimits(block_bytes=1 << 16)  # small blocks: several blocks per pass, and blocks straddle reads


def _archive(path, *, m=3, n=700, c=30, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    splits = {"test": SplitSpec(role="in_domain", dataset="bench", labels=y, sample_ids=np.arange(n)),
              "far": SplitSpec(role="ood", dataset="noise", sample_ids=np.arange(n))}
    for k in (1, 2):
        splits[f"blur{k}"] = SplitSpec(role="shift", dataset="bench", labels=y, sample_ids=np.arange(n),
                                       shift_kind="blur", shift_intensity=k)
    w = ArchiveWriter(path, method="deep_ensemble", model="mlp", dataset="bench", n_classes=c, splits=splits,
                      overwrite=True)
    for j in range(m):
        out = {}
        for name, spec in splits.items():
            rows = n
            z = rng.normal(0, 2, (rows, c))
            if spec.labels is not None:
                z[np.arange(rows), y] += 3.0 - 0.5 * (spec.shift_intensity or 0)
            p = np.exp(z - z.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            p[j::50] *= 1 + 5e-5  # rows the scorer renormalises (within the spec's tolerance, above 2**-20)
            out[name] = p.astype(np.float32)
        w.add_member(out, seed=j)
    return w.finalize()


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    return _archive(tmp_path_factory.mktemp("beyond") / "run.h5")


def _budget(memory_bytes):
    """``memory_bytes`` for the split plus what the report's working memory takes beside it (TACE's class groups,
    the bootstrap intervals' blocks and statistics: ``working_bytes``, with the plan's reserve)."""
    extra = working_bytes(dict.fromkeys(("test", "far", "blur1", "blur2"), 700), 30, bootstrap=1000)
    return int(memory_bytes + extra / (1 - RESERVE_SHARE)) + 1


def _without_notes(report):
    return {k: v for k, v in json.loads(json.dumps(report)).items() if k != "notes"}


def test_passes_give_the_in_memory_numbers_bit_for_bit(archive):
    """For a memory limit below every split's mean but above its per-sample arrays, each split is re-read in
    passes: every number of the report equals the in-memory run's exactly (the mean's rows are recomputed with
    the same operations), and a note per split says so."""
    whole = run_score(archive, limits=LIMITS)
    n, c = 700, 30
    # 7/8 of 650 kB above every split's per-sample arrays and blocks (489 kB), below them with a mean
    budget = _budget(650_000)
    extra = working_bytes(dict.fromkeys(("test", "far", "blur1", "blur2"), n), c, bootstrap=1000)
    assert not plan_split("test", 3, n, c, budget=budget, block_bytes=LIMITS.block_bytes, extra_bytes=extra).in_memory
    passes = run_score(archive, limits=LIMITS, memory_bytes=budget)
    assert _without_notes(passes) == _without_notes(whole)
    read_again = [note for note in passes["notes"] if "read it again from the archive" in note]
    assert {note.split("'")[1] for note in read_again} == {"test", "far", "blur1", "blur2"}


def test_what_needs_the_whole_mean_is_left_out_with_a_note(archive):
    """Calibrators and the shift temperature need the mean in memory: in passes they are left out, each with a
    note, and everything else is still computed."""
    from ubench.scoring.protocols import Protocol

    protocol = Protocol.preset("pitfalls").replace(calibrators=("histogram",), shift_temperature=True)
    report = run_score(archive, limits=LIMITS, protocol=protocol, memory_bytes=_budget(650_000))
    assert "calibrators" not in report["in_domain"]["test"]
    assert "temperature_scaled" not in report["shift"]["blur1"]
    assert any("the calibrators needs its mean in memory" in note for note in report["notes"])
    assert report["in_domain"]["test"]["calibrated"]["cll"] is not None


def test_refused_up_front_with_the_size_it_needs(archive, monkeypatch):
    """Below the per-sample arrays, scoring stops before a single prediction is read, naming the split, the
    size it would need and the memory left."""
    from ubench.archive_schema.reader import ArchiveReader

    def no_reads(*args, **kwargs):
        raise AssertionError("predictions were read")

    monkeypatch.setattr(ArchiveReader, "iter_checked_probs", no_reads)
    monkeypatch.setattr(ArchiveReader, "iter_checked_member_rows", no_reads)
    from ubench.scoring.protocols import Protocol

    # by hand, without intervals: 64 float64 per sample (358,400 B), two blocks of 65,536 B, TACE's class group of
    # 48 B per entry above the threshold, at most N x C (1,008,000 B), 32 MiB whatever the size: 33.4 MiB; with
    # the (700, 30) mean 33.6 MiB
    expected = (r"split 'test' \(700 samples x 30 classes\) cannot be scored within the memory limit: it needs at "
                r"least 33.4 MiB in passes over the archive \(33.6 MiB with its mean in memory\) and 0.0 MiB are left")
    with pytest.raises(MemoryBudgetError, match=expected):
        run_score(archive, limits=LIMITS, memory_bytes=10_000,
                  protocol=Protocol.preset("pitfalls").replace(intervals=False))


def test_cli_refusal_is_one_line_and_exit_1(archive, monkeypatch):
    """`ubench score` on a machine with too little memory left for a split prints one line naming the split and
    the size it needs, and exits 1 (no traceback). The memory the machine reports is what is set here."""
    from click.testing import CliRunner

    from ubench.cli import cli
    from ubench.scoring import memory_plan

    monkeypatch.setattr(memory_plan, "_memory_available", lambda: 10_000)
    monkeypatch.setattr(memory_plan, "_address_space_left", lambda: None)
    res = CliRunner().invoke(cli, ["score", str(archive), "--json"])
    assert res.exit_code == 1, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    # by hand: 358,400 B of vectors, two 504,000 B blocks (the whole split), the intervals' 240 B per cell of
    # 1,000 x 700 replicate weights (168,000,000 B), 3 KiB per sample of a batch of two splits (4,300,800 B),
    # 512 B per replicate of each of four splits (2,048,000 B) and 32 MiB
    assert len(lines) == 1 and "cannot be scored: split 'test' (700 samples x 30 classes) cannot be scored " \
        "within the memory limit: it needs at least 199.6 MiB" in lines[0]
    assert res.stdout == ""


def _sandboxed_score(path, memory_bytes):
    from ubench.scoring.sandbox import SandboxLimits, SandboxTask, run_sandboxed

    from ubench.scoring.protocols import Protocol

    task = SandboxTask("score", str(path), protocol=Protocol.preset("pitfalls").replace(intervals=False).to_dict(),
                       read_limits={"block_bytes": 1 << 18})
    return run_sandboxed(task, SandboxLimits(memory_bytes=memory_bytes, cpu_seconds=60, timeout_seconds=120))


def _mib_in(message, pattern):
    import re

    found = re.search(pattern, message)
    assert found, message
    return int(found.group(1).replace(",", "")) * 2**20


def test_sandbox_budgets_the_address_space_its_imports_leave(tmp_path):
    """Under the sandbox's RLIMIT_AS, which counts what the interpreter and its libraries map (about 200 MiB of
    address space before any archive is read), the plan budgets only what is left: a limit below the imports is
    refused at start with the size they need; a limit above them but below the split's working memory is refused
    by the plan with the limit that would do; under that limit the split is scored in passes (its mean does not
    fit) with the in-memory numbers. The child once read no budget at all (Landlock had closed /proc), planned
    every split in memory and ended in a bare ``memory-limit``."""
    from ubench.scoring.protocols import Protocol

    path = _archive(tmp_path / "run.h5", m=3, n=3000, c=600)  # mean 14 MiB: wider than the rounding below
    start = _sandboxed_score(path, 64 * 2**20)
    assert (start.status, start.exit_code, [f["check"] for f in start.findings]) == ("memory-limit", 1,
                                                                                      ["memory-limit"])
    imports = _mib_in(start.findings[0]["message"], r"below what the scoring process needs before it reads any "
                      r"archive: ([\d,]+) MiB of address space")
    assert imports > 64 * 2**20

    refused = _sandboxed_score(path, imports + 4 * 2**20)
    assert (refused.status, refused.exit_code, len(refused.findings)) == ("memory-limit", 1, 1)
    message = refused.findings[0]["message"]
    assert message.startswith("split 'test' (3,000 samples x 600 classes) cannot be scored within the memory "
                              "limit: it needs at least ") and "\n" not in message, message
    assert f"under the sandbox's memory limit of {(imports + 4 * 2**20) // 2**20:,} MiB" in message
    in_passes = _mib_in(message, r"a --memory-limit of ([\d,]+) MiB would score it in passes")

    boxed = _sandboxed_score(path, in_passes)
    assert (boxed.status, boxed.exit_code) == ("ok", 0), boxed.findings
    read_again = [note for note in boxed.report["notes"] if "read it again from the archive" in note]
    assert {note.split("'")[1] for note in read_again} == {"test", "far", "blur1", "blur2"}
    whole = run_score(path, protocol=Protocol.preset("pitfalls").replace(intervals=False),
                      limits=ReadLimits(block_bytes=1 << 18))
    assert not any("read it again" in note for note in whole["notes"])
    assert _without_notes(boxed.report) == _without_notes(whole)


def test_sandboxed_cli_refusal_is_one_line(tmp_path):
    """`ubench score --sandbox --memory-limit` below what scoring needs: exit 1, one error line naming the size
    needed and the limit, and the status line; no traceback."""
    path = _archive(tmp_path / "run.h5", m=2, n=300, c=10)
    res = CliRunner().invoke(cli, ["score", str(path), "--sandbox", "--memory-limit", "64M", "--json"])
    assert res.exit_code == 1 and res.stdout == "", res.output
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr
    assert errors[0].startswith(f"error: {path}: [memory-limit] the sandbox's memory limit of 64 MiB is below what "
                                "the scoring process needs before it reads any archive: ")
    assert res.stderr.splitlines()[-1] == f"{path}: rejected (memory-limit)"
