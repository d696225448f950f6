# SPDX-License-Identifier: MIT
"""A report holds one split's (N, C) arrays at a time (issue #29 item 2): the peak memory of scoring does not grow
with the number of splits (traced allocations, not wall-clock; bench/bench_memory.py measures the peak RSS)."""

from __future__ import annotations

import tracemalloc

import numpy as np

from ubench.archive_schema import ArchiveWriter, SplitSpec
from ubench.scoring.protocols import Protocol
from ubench.scoring.score import run_score

N, C = 1500, 200
MEAN_BYTES = 8 * N * C


def _archive(path, n_ood: int, n_shift: int):
    rng = np.random.default_rng(0)
    y = rng.integers(0, C, N)
    splits = {"test": SplitSpec(role="in_domain", dataset="bench", labels=y, sample_ids=np.arange(N))}
    splits.update({f"ood{k}": SplitSpec(role="ood", dataset=f"o{k}", sample_ids=np.arange(N)) for k in range(n_ood)})
    splits.update({f"blur{k}": SplitSpec(role="shift", dataset="bench", labels=y, sample_ids=np.arange(N),
                                         shift_kind="blur", shift_intensity=k + 1) for k in range(n_shift)})
    w = ArchiveWriter(path, method="m", model="m", dataset="bench", n_classes=C, splits=splits, overwrite=True)
    for j in range(2):
        out = {}
        for name in splits:
            z = rng.normal(0, 2, (N, C))
            p = np.exp(z - z.max(1, keepdims=True))
            out[name] = (p / p.sum(1, keepdims=True)).astype(np.float32)
        w.add_member(out, seed=j)
    return w.finalize()


def _peak(path) -> int:
    tracemalloc.start()
    try:
        # no temperature scaling and no bootstrap intervals (whose per-sample columns are kept per split by
        # design): the splits' arrays are what is measured
        run_score(path, protocol=Protocol.preset("shift").replace(intervals=False))
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_peak_does_not_grow_with_splits(tmp_path):
    """Scoring 4 OOD and 4 shift splits peaks within half of one split's mean of scoring 1 and 1: what is kept
    of a scored split is its (N,) scores (OOD splits used to be held whole until the end: 3 means more)."""
    few = _peak(_archive(tmp_path / "few.h5", 1, 1))
    many = _peak(_archive(tmp_path / "many.h5", 4, 4))
    assert many - few < MEAN_BYTES / 2, (few, many)


def test_sandbox_reports_the_childs_own_peak(tmp_path):
    """The sandboxed child's peak RSS is its own (``VmHWM``, read from a file opened before Landlock): a host
    holding 256 MiB does not show up in it (``ru_maxrss`` carries the parent's pages over fork and exec)."""
    from pathlib import Path

    from ubench.scoring.sandbox import SandboxLimits, SandboxTask, run_sandboxed

    example = Path(__file__).resolve().parents[2] / "examples" / "digits_deep_ensemble.h5"
    held = np.ones(256 * 2**20 // 8)  # resident in this (the parent) process while the child starts
    out = run_sandboxed(SandboxTask("validate", str(example)), SandboxLimits())
    assert out.status == "ok" and held[-1] == 1.0
    assert out.peak_rss_bytes < 200 * 2**20, out.peak_rss_bytes / 2**20
