# SPDX-License-Identifier: MIT
"""Scoring a split whose (N, C) mean does not fit the memory limit (issue #29 item 3): in passes over its archive,
with the numbers of the in-memory run, or refused before any prediction is read with the size it would need."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ubench.archive_schema import ArchiveWriter, SplitSpec
from ubench.archive_schema.spec import ReadLimits
from ubench.scoring.memory_plan import MemoryBudgetError, plan_split
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


def _without_notes(report):
    return {k: v for k, v in json.loads(json.dumps(report)).items() if k != "notes"}


def test_passes_give_the_in_memory_numbers_bit_for_bit(archive):
    """For a memory limit below every split's mean but above its per-sample arrays, each split is re-read in
    passes: every number of the report equals the in-memory run's exactly (the mean's rows are recomputed with
    the same operations), and a note per split says so."""
    whole = run_score(archive, limits=LIMITS)
    n, c = 700, 30
    budget = 650_000  # 7/8 of it above every split's per-sample arrays and blocks (489 kB), below them with a mean
    assert not plan_split("test", 3, n, c, budget=budget, block_bytes=LIMITS.block_bytes).in_memory
    passes = run_score(archive, limits=LIMITS, memory_bytes=budget)
    assert _without_notes(passes) == _without_notes(whole)
    read_again = [note for note in passes["notes"] if "read it again from the archive" in note]
    assert {note.split("'")[1] for note in read_again} == {"test", "far", "blur1", "blur2"}


def test_what_needs_the_whole_mean_is_left_out_with_a_note(archive):
    """Calibrators and the shift temperature need the mean in memory: in passes they are left out, each with a
    note, and everything else is still computed."""
    from ubench.scoring.protocols import Protocol

    protocol = Protocol.preset("pitfalls").replace(calibrators=("histogram",), shift_temperature=True)
    report = run_score(archive, limits=LIMITS, protocol=protocol, memory_bytes=650_000)
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
    expected = (r"split 'test' \(700 samples x 30 classes\) cannot be scored within the memory limit: it needs at "
                r"least 0.5 MiB in passes over the archive \(0.6 MiB with its mean in memory\) and 0.0 MiB are left")
    with pytest.raises(MemoryBudgetError, match=expected):
        run_score(archive, limits=LIMITS, memory_bytes=10_000)


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
    assert len(lines) == 1 and "cannot be scored: split 'test' (700 samples x 30 classes) cannot be scored " \
        "within the memory limit: it needs at least 1.3 MiB" in lines[0]
    assert res.stdout == ""
