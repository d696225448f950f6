# SPDX-License-Identifier: MIT
"""Dask LocalCluster throughput: the leaderboard (many archives), and one big archive (target: 2 workers at least
1.7x one worker / one process).

1. Leaderboard: a batch of 20 archives (M = 20, N = 10,000, C = 10 float32 each, one in-domain split) is scored
   into a fresh board (no cache hits) through ``score_directory`` on an already-started ``LocalCluster``
   (processes, one thread per worker, 127.0.0.1), so cluster start-up is not timed. Each upload is sandboxed (a
   fresh interpreter each).
2. ``--one-archive``: an ImageNet-C-shaped archive (``bench/_archives.py``: an in-domain split and
   ``--shift-splits`` shift splits of ``--samples`` x ``--classes``, ``--members`` members; 4.2 GB at the
   defaults 20, 50,000, 1,000, 1) scored by ``run_score`` in this process and with ``scheduler=`` a started
   2-worker ``LocalCluster`` (issue #29 item 4: the archive's splits spread over the workers), interleaved;
   the two reports must be equal.

Both clusters start their workers with the malloc settings of ``score --workers`` / ``leaderboard --workers``
(``scoring.distributed.worker_environ``), not Dask's ``MALLOC_TRIM_THRESHOLD_=65536``.

    python bench/bench_scale.py [--archives 20] [--repeats 3] [--keep DIR] [--one-archive] [--skip-board]
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


def bench_one_archive(d: Path, args) -> tuple[list[dict], list[dict]]:
    """One ImageNet-C-shaped archive: this process against a 2-worker LocalCluster, interleaved."""
    import json

    from distributed import Client, LocalCluster

    from _archives import imagenet_like
    from ubench.scoring.distributed import worker_environ
    from ubench.scoring.score import run_score

    path = imagenet_like(d / f"imagenet_c_m{args.members}_n{args.samples}_c{args.classes}_s{args.shift_splits}.h5",
                         m=args.members, n=args.samples, c=args.classes, shift_splits=args.shift_splits)
    shape = f"{args.shift_splits + 1} splits of {args.samples:,} x {args.classes:,}, M = {args.members}"
    print(f"{path} ({path.stat().st_size / 2**30:.1f} GiB): {shape}")
    import psutil  # a dependency of distributed

    times: dict[str, list[float]] = {"one process": [], "2 workers": []}
    # CPU seconds (user + system) of this process and of the workers: their sum against twice the wall time says
    # how much of the run kept both cores busy, and a sum above the one-process CPU is the cluster's overhead
    cpu: dict[str, list[dict]] = {"one process": [], "2 workers": []}
    loads: list[float] = []
    with worker_environ():  # the workers' malloc settings of `score --workers` (scoring/distributed.py)
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                               dashboard_address=None, silence_logs=50)
    with cluster:
        with Client(cluster, set_as_default=False) as client:
            procs = [psutil.Process()] + [psutil.Process(pid) for pid in client.run(os.getpid).values()]

        def cpu_seconds() -> list[float]:
            return [sum(p.cpu_times()[:2]) for p in procs]

        run_score(path, scheduler=cluster.scheduler_address)  # warm: workers import ubench, page cache filled
        for _ in range(args.repeats):
            for how in times:
                loads.append(os.getloadavg()[0])
                c0, t0 = cpu_seconds(), time.perf_counter()
                report = run_score(path, scheduler=None if how == "one process" else cluster.scheduler_address)
                times[how].append(time.perf_counter() - t0)
                used = [b - a for a, b in zip(c0, cpu_seconds())]
                cpu[how].append({"client": round(used[0], 2), "workers": round(sum(used[1:]), 2)})
                if how == "one process":
                    one = report
                else:
                    many = report
    same = json.dumps(one) == json.dumps(many)
    base = statistics.median(times["one process"])
    rows = [{"what": "one archive", "how": how, "archive": shape, "wall_s": [round(x, 2) for x in t],
             "median_s": round(statistics.median(t), 2), "speedup_median": round(base / statistics.median(t), 2),
             "cpu_s": cpu[how], "load_1min_before_each": [round(x, 2) for x in loads],
             "same_report": same} for how, t in times.items()]
    for r in rows:
        print(r)
    speedup = rows[1]["speedup_median"]
    best = round(base / min(times["2 workers"]), 2)
    # the CPU floor on the machine's cores: no schedule of a run's CPU seconds ends before they / cores; the one
    # process already keeps a second core partly busy (its resampling thread), so its CPU, not its wall, is the work
    cores = os.cpu_count() or 1
    one_cpu = statistics.median(c["client"] + c["workers"] for c in cpu["one process"])
    two_cpu = statistics.median(c["client"] + c["workers"] for c in cpu["2 workers"])
    bounds = {"work_cpu_s": round(one_cpu, 1), "cluster_cpu_s": round(two_cpu, 1), "cores": cores,
              "speedup_bound_work": round(base / (one_cpu / cores), 2),
              "speedup_bound_cluster": round(base / (two_cpu / cores), 2), "speedup_best": best}
    rows[1].update(bounds)
    summary = [{"what": "one archive on a Dask LocalCluster (`score --scheduler`)", "workload": shape +
                ", 2 workers vs one process",
                "result": f"{speedup:.2f}x median, {best:.2f}x best; reports equal: {same}. CPU floor on {cores} "
                          f"cores: the one process's {one_cpu:.0f} CPU-s allow at most "
                          f"{bounds['speedup_bound_work']:.2f}x, the cluster's {two_cpu:.0f} CPU-s (its overhead "
                          f"included) {bounds['speedup_bound_cluster']:.2f}x",
                "target": ">= 1.7x, same numbers", "met": speedup >= 1.7 and same}]
    return rows, summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--archives", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--keep", type=Path, default=None)
    ap.add_argument("--skip-board", action="store_true", help="only the one-archive benchmark")
    ap.add_argument("--one-archive", action="store_true", help="also one ImageNet-C-shaped archive (GBs)")
    ap.add_argument("--members", type=int, default=1)
    ap.add_argument("--samples", type=int, default=50_000)
    ap.add_argument("--classes", type=int, default=1_000)
    ap.add_argument("--shift-splits", type=int, default=20)
    ap.add_argument("--out-dir", default=None)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _results import Recorder

    rec = Recorder(__file__, "distributed", "h5py")
    rows, summary = [], []
    if not args.skip_board:
        r, s = bench_board(args)
        rows += r
        summary += s
    if args.one_archive:
        with tempfile.TemporaryDirectory() as tmp:
            r, s = bench_one_archive(args.keep or Path(tmp), args)
        rows += r
        summary += s
    rec.write(rows, summary, settings={"archives": args.archives, "repeats": args.repeats,
                                       "one_archive": args.one_archive, "members": args.members,
                                       "samples": args.samples, "classes": args.classes,
                                       "shift_splits": args.shift_splits}, out_dir=args.out_dir)


def bench_board(args) -> tuple[list[dict], list[dict]]:
    """The leaderboard: ``args.archives`` uploads on 1 and 2 workers."""
    from distributed import LocalCluster

    from ubench.scoring.distributed import worker_environ
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
            with worker_environ():
                cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                                       dashboard_address=None, silence_logs=50)
            with cluster:
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
    return rows, summary


if __name__ == "__main__":
    main()
