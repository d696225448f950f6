# SPDX-License-Identifier: MIT
"""Throughput of the leaderboard on a Dask LocalCluster: 1 worker versus 2 (target: at least 1.7x).

A batch of 20 archives (M = 20, N = 10,000, C = 10 float32 each, one in-domain split) is scored into a fresh
board (no cache hits) through ``score_directory`` on an already-started ``LocalCluster`` (processes, one thread
per worker, 127.0.0.1), so cluster start-up is not timed. Each upload is sandboxed (a fresh interpreter each).

    python bench/bench_scale.py [--archives 20] [--repeats 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def build(path: Path, *, m: int, n: int, c: int, seed: int) -> Path:
    from ubench.archive_schema import ArchiveWriter, SplitSpec

    y = np.random.default_rng(0).integers(0, c, n)
    rng = np.random.default_rng(seed)
    w = ArchiveWriter(path, method="bench", model="bench", dataset="bench", n_classes=c, overwrite=True,
                      splits={"test": SplitSpec(role="in_domain", dataset="bench", labels=y, sample_ids=np.arange(n))})
    for k in range(m):
        z = rng.normal(0, 2, (n, c))
        z[np.arange(n), y] += 1 + seed / 10
        p = np.exp(z - z.max(1, keepdims=True))
        w.add_member({"test": (p / p.sum(1, keepdims=True)).astype(np.float32)}, seed=k)
    return w.finalize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--archives", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--keep", type=Path, default=None)
    ap.add_argument("--out-dir", default=None)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _results import Recorder

    rec = Recorder(__file__, "distributed", "h5py")

    from distributed import LocalCluster

    from ubench.scoring.leaderboard import BoardConfig, score_directory
    from ubench.scoring.reference import write_reference

    with tempfile.TemporaryDirectory() as tmp:
        d = args.keep or Path(tmp)
        uploads = d / "uploads"
        uploads.mkdir(parents=True, exist_ok=True)
        for i in range(args.archives):
            if not (uploads / f"u{i:02d}.h5").exists():
                build(uploads / f"u{i:02d}.h5", m=20, n=10_000, c=10, seed=i)
        ref = write_reference(uploads / "u00.h5", d / "ref.h5", overwrite=True)
        config = BoardConfig.create(reference=ref)
        print(f"{args.archives} archives, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
        times: dict[int, list[float]] = {}
        for workers in args.workers:
            with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                              dashboard_address=None, silence_logs=50) as cluster:
                for r in range(args.repeats):
                    board = d / f"board-{workers}-{r}"
                    shutil.rmtree(board, ignore_errors=True)
                    t0 = time.perf_counter()
                    result = score_directory(uploads, board, config, scheduler=cluster.scheduler_address)
                    times.setdefault(workers, []).append(time.perf_counter() - t0)
                    assert result["counts"] == {"ok": args.archives}, result["counts"]
            t = times[workers]
            print(f"workers {workers}: wall {', '.join(f'{x:.1f}' for x in t)} s; "
                  f"best {args.archives / min(t):.2f} archives/s, median {args.archives / statistics.median(t):.2f}")
        base = times[args.workers[0]]
        rows, summary = [], []
        for workers in args.workers:
            rows.append({"workers": workers, "archives": args.archives, "wall_s": [round(x, 2) for x in times[workers]],
                         "speedup_best": round(min(base) / min(times[workers]), 2),
                         "speedup_median": round(statistics.median(base) / statistics.median(times[workers]), 2)})
        for workers in args.workers[1:]:
            best, med = rows[args.workers.index(workers)]["speedup_best"], rows[args.workers.index(workers)]["speedup_median"]
            print(f"speed-up {workers} vs {args.workers[0]}: best {best:.2f}x, median {med:.2f}x")
            summary.append({"what": "leaderboard throughput", "workload": f"{args.archives} archives, Dask "
                            f"LocalCluster, {workers} workers vs {args.workers[0]}",
                            "result": f"{med:.2f}x median, {best:.2f}x best", "target": ">= 1.7x", "met": med >= 1.7})
        rec.write(rows, summary, settings={"archives": args.archives, "repeats": args.repeats}, out_dir=args.out_dir)


if __name__ == "__main__":
    main()
