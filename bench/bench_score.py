# SPDX-License-Identifier: MIT
"""Benchmark of ``ubench score`` end to end (a real subprocess, start-up included).

Archive: M = 20 members, an in-domain split of N = 10,000 x C = 100, one OOD split and 5 shift splits of the same
size, float32, written by ``ArchiveWriter`` (shuffle + deflate 1). Target: under 5 s wall on a 2-core machine.

    python bench/bench_score.py [--keep DIR] [--repeats 3]

Writes bench/results/bench_score.json.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import Recorder  # noqa: E402


def build(path: Path, *, m: int = 20, n: int = 10_000, c: int = 100, seed: int = 0) -> Path:
    from ubench.archive_schema import ArchiveWriter, SplitSpec

    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    splits = {"test": SplitSpec(role="in_domain", dataset="bench", labels=y, sample_ids=np.arange(n)),
              "ood": SplitSpec(role="ood", dataset="noise", sample_ids=np.arange(n))}
    for k in range(5):
        splits[f"noise{k + 1}"] = SplitSpec(role="shift", dataset="bench", labels=y, sample_ids=np.arange(n),
                                            shift_kind="gaussian_noise", shift_intensity=k + 1)
    w = ArchiveWriter(path, method="deep_ensemble", model="bench", dataset="bench", n_classes=c, splits=splits,
                      overwrite=True)
    base = rng.normal(size=(n, c)).astype(np.float32)
    for j in range(m):
        preds = {}
        for i, (name, spec) in enumerate(splits.items()):
            z = base + rng.normal(scale=0.5, size=(n, c)).astype(np.float32)
            if spec.labels is not None:
                z[np.arange(n), y] += 4.0 - (i - 1) * 0.6 if spec.role == "shift" else 4.0
            z -= z.max(axis=1, keepdims=True)
            p = np.exp(z)
            p /= p.sum(axis=1, keepdims=True)
            preds[name] = p.astype(np.float32)
        w.add_member(preds, seed=j)
    return w.finalize()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", type=Path, default=None, help="directory to keep the archive in (reused if present)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--protocol", default="pitfalls")
    ap.add_argument("--out-dir", default=None)
    args = ap.parse_args()
    rec = Recorder(__file__, "h5py")
    tmp = args.keep or Path(tempfile.mkdtemp())
    path = tmp / "bench_score.h5"
    if not path.exists():
        t = time.perf_counter()
        build(path)
        print(f"built {path} ({path.stat().st_size / 2**20:.0f} MiB) in {time.perf_counter() - t:.1f} s")
    cmd = [sys.executable, "-m", "ubench.cli", "score", str(path), "--json", "--protocol", args.protocol]
    times = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t)
    print(f"ubench score --json --protocol {args.protocol}: wall " + ", ".join(f"{x:.2f}" for x in times)
          + f" s (best {min(times):.2f} s)")
    layout = "uncompressed, the writer's default chunks"
    rows = [{"protocol": args.protocol, "archive": "M=20; test, ood and 5 shift splits of 10,000 x 100 float32",
             "layout": layout, "wall_s": [round(x, 2) for x in times], "best_s": round(min(times), 2),
             "median_s": round(statistics.median(times), 2)}]
    summary = [{"what": "`ubench score` end to end", "workload": "M = 20, 7 splits of 10,000 x 100",
                "result": f"{min(times):.2f}-{max(times):.2f} s over {len(times)} runs, start-up included",
                "target": "< 5 s", "met": statistics.median(times) < 5}]
    rec.write(rows, summary, settings={"repeats": args.repeats, "protocol": args.protocol}, out_dir=args.out_dir)


if __name__ == "__main__":
    main()
