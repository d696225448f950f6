# SPDX-License-Identifier: MIT
"""Benchmark of the bootstrap intervals (issue #26 item 9), three targets measured in one run:

1. ``ubench score ARCHIVE --json`` (1,000 replicates, the default) against ``--no-intervals`` on an archive of
   M = 5 members, test, OOD and 5 shift splits of N = 10,000 x C = 100 (``bench_score.build``), real
   subprocesses, calls alternating; target: ratio <= 1.5. Beside it, the CPU seconds of the resampling alone on
   one thread (and one BLAS thread), in fresh processes: the work, whatever the load.
2. Rank intervals of a 100-row board at N = 10,000 (CLL columns as the reports' ``samples`` carry them, decoded,
   resampled, ranked: ``scoring.leaderboard.add_rank_intervals``); target: <= 2 s.
3. The peer, ``scipy.stats.bootstrap`` (percentile, 1,000 resamples where it is fast enough, else fewer and the
   time per resample compared; medians of ``--repeats`` runs, ubench's too), on the same statistics at
   N = 10,000: accuracy (scipy vectorised), OOD detection (two samples resampled independently, as ubench
   stratifies; AUROC alone, and the same work as ubench's kernel: AUROC, AUPR and FPR95, the statistic written
   with ubench.metrics' functions, the fastest peer, and with scikit-learn's, as users write it), and the
   test-time CV CLL with its temperatures refitted in every resample (scipy's statistic reruns
   ``cross_validated_calibration``); target: ubench >= 20x faster. Beside each, the floor both pay: drawing the resampled indices (``rng.integers``, n per replicate and
   unit); ``speedup_bound`` = peer / floor is the most any implementation could gain over the peer. Where the peer
   is vectorised (the mean) or cheap per resample (one sort for AUROC), that bound is below 20x.

    python bench/bench_intervals.py [--repeats 3] [--n 10000] [--keep DIR] [--baseline-src DIR]

``--baseline-src DIR`` (DIR/ubench an earlier ubench, e.g. ``git archive main``) also times that version's
``score`` pair in the same rounds (its ratio beside ours) and compares the two reports' interval bounds.
``resample`` runs its sorted kernels on up to 2 threads (as many as there are CPUs; in the JSON's settings).

Writes bench/results/bench_intervals.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import Recorder  # noqa: E402
from bench_score import _numbers, build  # noqa: E402


def _score_ratio(path: Path, repeats: int, baseline: Path | None = None) -> dict:
    """Median wall of ``ubench score --json`` with and without intervals (subprocesses, calls alternating); with
    ``baseline`` (a directory holding an earlier ``ubench`` package), the same pair of that version in the same
    rounds, and the largest difference of any interval bound between the two versions' reports."""
    base = [sys.executable, "-m", "ubench.cli", "score", str(path), "--json"]
    versions = {"": None} if baseline is None else {"": None, "baseline_": baseline}
    times: dict[str, list[float]] = {}
    out = Path(tempfile.mkdtemp())
    for _ in range(repeats):
        for prefix, src in versions.items():
            env = dict(os.environ)
            if src is not None:  # its package directory's parent on the path, before the installed one
                env["PYTHONPATH"] = str(src)
            for key, extra in (("no_intervals", ["--no-intervals"]), ("intervals", [])):
                t = time.perf_counter()
                with open(out / f"{prefix}{key}.json", "w") as f:
                    subprocess.run(base + extra, check=True, stdout=f, env=env, cwd=tempfile.gettempdir())
                times.setdefault(prefix + key, []).append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    row = {"what": "score", "intervals_s": [round(x, 2) for x in times["intervals"]],
           "no_intervals_s": [round(x, 2) for x in times["no_intervals"]],
           "ratio": round(med["intervals"] / med["no_intervals"], 2)}
    if baseline is not None:
        bounds = [dict(_numbers(json.loads((out / f"{p}intervals.json").read_text())["intervals"]))
                  for p in versions]
        shared = [k for k in bounds[0] if k in bounds[1]]
        row.update(baseline_intervals_s=[round(x, 2) for x in times["baseline_intervals"]],
                   baseline_no_intervals_s=[round(x, 2) for x in times["baseline_no_intervals"]],
                   baseline_ratio=round(med["baseline_intervals"] / med["baseline_no_intervals"], 2),
                   baseline_src=str(baseline), interval_numbers_compared=len(shared),
                   max_abs_diff_vs_baseline=max((abs(bounds[0][k] - bounds[1][k]) for k in shared), default=0.0))
    return row


#: A fresh process scores the archive ``repeats`` times with intervals and prints, per scoring, the CPU seconds of
#: the resampling alone (every ``resample`` call of that scoring summed: a report resamples its splits a batch at
#: a time; ``resample`` on one thread, BLAS on one thread by the environment): the work, apart from how the
#: machine's load shares the cores out. A batch that the report would resample beside the next split
#: (``IntervalCollector.overlap``) is resampled in line instead, so that the process's CPU time is its own.
_RESAMPLE_CHILD = """
import json, sys, time
import ubench.metrics.report_intervals as rim
from ubench.scoring.score import run_score
class Inline:
    def __init__(self, fn, batch, units, after=None):
        self.value = fn(batch, units)
    def result(self):
        return self.value
rim._Resampling = Inline
cpu = []
resample = rim.resample
def timed(*args, **kwargs):
    kwargs["threads"] = 1
    t = time.process_time()
    try:
        return resample(*args, **kwargs)
    finally:
        cpu.append(time.process_time() - t)
rim.resample = timed
runs = []
for _ in range(int(sys.argv[2])):
    cpu.clear()
    run_score(sys.argv[1], protocol="pitfalls")
    runs.append(sum(cpu))
print(json.dumps(runs))
"""


def _resample_cpu(path: Path, repeats: int, baseline: Path | None) -> dict:
    """CPU seconds of ``resample`` alone on one thread (min over ``repeats`` scorings), ours and the baseline's
    in alternating fresh processes."""
    versions = {"": None} if baseline is None else {"": None, "baseline_": baseline}
    cpu: dict[str, list[float]] = {}
    for _ in range(2):
        for prefix, src in versions.items():
            env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
            if src is not None:
                env["PYTHONPATH"] = str(src)
            res = subprocess.run([sys.executable, "-c", _RESAMPLE_CHILD, str(path), str(repeats)], env=env,
                                 capture_output=True, text=True, check=True, cwd=tempfile.gettempdir())
            cpu.setdefault(prefix, []).extend(json.loads(res.stdout.strip().splitlines()[-1]))
    row = {"what": "resample CPU, one thread", "cpu_s": round(min(cpu[""]), 3)}
    if baseline is not None:
        row.update(baseline_cpu_s=round(min(cpu["baseline_"]), 3),
                   ratio_to_baseline=round(min(cpu[""]) / min(cpu["baseline_"]), 2))
    return row


def _board_samples(rows: int, n: int, seed: int = 0) -> dict:
    from ubench.metrics.intervals import SAMPLE_ENCODING, encode_samples

    rng = np.random.default_rng(seed)
    common = rng.normal(-0.3, 0.3, n)  # hard samples are hard for every row
    out = {}
    for i in range(rows):
        cll = common + rng.normal(-0.002 * i, 0.1, n)
        out[f"row{i:03d}"] = {"encoding": SAMPLE_ENCODING, "seed": 0, "primary": "test", "scores": [],
                              "splits": {"test": {"role": "in_domain", "unit": "ids:test", "n": n,
                                                  "columns": encode_samples({"cll": cll})}}}
    return out


def _rank_intervals(rows: int, n: int, repeats: int) -> dict:
    from ubench.metrics.intervals import decode_samples
    from ubench.scoring.leaderboard import add_rank_intervals

    samples = _board_samples(rows, n)
    board_rows = []
    for k, (name, s) in enumerate(samples.items()):
        cll = float(decode_samples(s["splits"]["test"]["columns"], n)["cll"].mean())
        board_rows.append({"rank": k + 1, "archive": name, "metrics": {"cll": cll}})
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        info = add_rank_intervals(board_rows, samples, {"intervals": True, "bootstrap": 1000, "seed": 0})
        times.append(time.perf_counter() - t)
    widths = [r["rank_interval"][1] - r["rank_interval"][0] for r in board_rows]
    return {"what": "rank intervals", "rows": rows, "n": n, "seconds": [round(x, 3) for x in times],
            "best_s": round(min(times), 3), "median_rank_interval_width": float(np.median(widths)),
            "metric": info["metric"]}


def _peer(n: int, c: int, scipy_resamples: int, repeats: int = 3) -> list[dict]:
    from scipy import special, stats
    from sklearn import metrics as skm

    from ubench.metrics import auroc_score, average_precision_score, cross_validated_calibration, fpr_at_tpr
    from ubench.metrics.intervals import resample
    from ubench.metrics.protocol_bootstrap import cv_influence
    from ubench.scoring.blas import one_blas_thread

    rng = np.random.default_rng(1)
    y = rng.integers(0, c, n)
    z = rng.normal(0, 1, (n, c))
    z[np.arange(n), y] += 3.0
    probs = special.softmax(z, axis=1)
    # OOD samples that overlap the in-domain ones (entropy AUROC about 0.74): a weaker peak on a random class
    r_ood = np.random.default_rng(2)
    z_ood = r_ood.normal(0, 1, (n, c))
    z_ood[np.arange(n), r_ood.integers(0, c, n)] += 1.5
    ood = special.softmax(z_ood, axis=1)
    rows = []

    from ubench.metrics.bootstrap import LinearColumns
    from ubench.metrics.bootstrap_ranking import _Sorted, weighted_detection

    class _Kernel:
        """ubench's machinery for one sorted statistic, as the report's ``OODStatistics``: counts, then its kernel
        (what the peer computes, no more), one job per block, run on halves of the block's rows."""

        cols, sorted_kernels = None, True

        def __init__(self, unit, n, fn):
            self.unit, self.n, self.fn = unit, n, fn

        def jobs(self, weights):
            return [lambda: self.fn(weights)]

        def replicates(self, weights):
            return self.fn(weights)

    class _Linear:
        """ubench's machinery for linear columns, as the report's ``LabelledStatistics``: a matrix product."""

        sorted_kernels = False

        def __init__(self, unit, cols):
            self.unit, self.n, self.cols = unit, cols.n, cols

        def jobs(self, weights):
            return []

        def linear(self, w, sums=None):
            return self.cols.apply(w, sums)

        def replicates(self, weights):
            return self.linear(weights[self.unit])

    def floor_time(units):
        """The draws every bootstrap makes, peer or ubench: ``n`` indices with replacement per replicate and unit
        (``rng.integers``, 1,000 replicates), per replicate. No implementation resamples faster than this."""
        g = np.random.default_rng(0)
        t = time.perf_counter()
        for m in units.values():
            for _ in range(10):
                g.integers(0, m, (100, m))
        return (time.perf_counter() - t) / 1000

    def ubench_time(fn, units):
        """Median over ``repeats`` runs of 1,000 replicates (the statistic's set-up, its sort, included)."""
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            stat = fn()
            with one_blas_thread():  # as scoring multiplies (scoring/blas.py)
                resample({"x": stat}, units, n_replicates=1000, seed=0)
            times.append((time.perf_counter() - t) / 1000)
        return statistics.median(times)

    def peer_time(statistic, data, k, **kwargs):
        """Median over ``repeats`` runs of ``scipy.stats.bootstrap`` with ``k`` resamples, per resample."""
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            stats.bootstrap(data, statistic, n_resamples=k, method="percentile",
                            random_state=np.random.default_rng(0), **kwargs)
            times.append((time.perf_counter() - t) / k)
        return statistics.median(times)

    def row(statistic, k, peer, ours, floor, note, **extra):
        """One peer row: both times per replicate, the speed-up and the draws' bound on it."""
        return {"statistic": statistic, "peer_resamples": k, "peer_s_per_resample": peer,
                "ubench_s_per_replicate": ours, "speedup": round(peer / ours, 1), "floor_s_per_replicate": floor,
                "speedup_bound": round(peer / floor, 1), "note": note, **extra}

    # accuracy: scipy vectorised over resamples
    hit = (probs.argmax(1) == y).astype(float)
    peer = peer_time(np.mean, (hit,), 1000, vectorized=True, batch=100)

    def accuracy_stat():
        cols = LinearColumns(n)
        cols.add("accuracy", hit)
        return _Linear("u", cols)

    ours = ubench_time(accuracy_stat, {"u": n})
    floor = floor_time({"u": n})
    rows.append(row("accuracy (mean)", 1000, peer, ours, floor, "scipy vectorised (batches of 100 resamples)"))
    # OOD AUROC: two samples resampled independently
    s_in = -np.sum(special.xlogy(probs, probs), axis=1)
    s_ood = -np.sum(special.xlogy(ood, ood), axis=1)

    def auroc(a, b):
        return auroc_score(np.r_[a, b], np.r_[np.zeros(a.size, int), np.ones(b.size, int)])

    k = min(scipy_resamples, 1000)
    peer = peer_time(auroc, (s_in, s_ood), k, vectorized=False)

    def auroc_stat():
        order = _Sorted.of(s_ood, s_in)
        return _Kernel("u", n, lambda w: weighted_detection(order.pos, order.neg, w["o"], w["u"], order=order))

    ours = ubench_time(auroc_stat, {"u": n, "o": n})
    floor = floor_time({"u": n, "o": n})
    rows.append(row("OOD AUROC (stratified)", k, peer, ours, floor,
                    "not the same work: ubench's kernel also gives AUPR and FPR95 from the same sort", same_work=False))
    # the same work as ubench's kernel: the report's three detection numbers of every resample
    def detection(a, b):
        s, lab = np.r_[a, b], np.r_[np.zeros(a.size, int), np.ones(b.size, int)]
        return np.array([auroc_score(s, lab), average_precision_score(s, lab), fpr_at_tpr(s, lab, tpr=0.95)])

    peer = peer_time(detection, (s_in, s_ood), k, vectorized=False)
    rows.append(row("OOD AUROC, AUPR, FPR95 (stratified)", k, peer, ours, floor,
                    "the same work: the three numbers the report has, ubench's from one sort per replicate "
                         "block; the peer's statistic returns ubench.metrics' auroc_score, "
                         "average_precision_score and fpr_at_tpr (one sort each, no input checks: faster than "
                         "scikit-learn's, the strictest peer)"))

    # the same work as users write it: scikit-learn's functions as the statistic
    def detection_sklearn(a, b):
        s, lab = np.r_[a, b], np.r_[np.zeros(a.size, int), np.ones(b.size, int)]
        fpr, tpr, _ = skm.roc_curve(lab, s, drop_intermediate=False)
        return np.array([skm.roc_auc_score(lab, s), skm.average_precision_score(lab, s),
                         fpr[np.searchsorted(tpr, 0.95, side="left")]])

    want = detection(s_in, s_ood)
    assert np.allclose(detection_sklearn(s_in, s_ood), want, atol=1e-12), "the two peers' statistics differ"
    k_sk = max(20, k // 2)
    peer = peer_time(detection_sklearn, (s_in, s_ood), k_sk, vectorized=False)
    rows.append(row("OOD AUROC, AUPR, FPR95 (stratified), scikit-learn", k_sk, peer, ours, floor,
                    "the same work as it is usually written: scipy.stats.bootstrap over scikit-learn's "
                         "roc_auc_score, average_precision_score and roc_curve (FPR at the first TPR >= 0.95; "
                         "equal to ubench's on the data, checked)"))
    # CLL under test-time CV with the refit in every resample
    k = max(5, scipy_resamples // 20)
    rows_of = np.arange(n)  # resample row indices; the statistic reads the rows (probs and labels together)
    peer = peer_time(lambda i: cross_validated_calibration(probs[i.astype(np.intp)][None], y[i.astype(np.intp)]).cll,
                     (rows_of,), k, vectorized=False)

    def cll_stat():
        cols = LinearColumns(n)
        cols.add("cll", cv_influence(probs[None], y).psi["cll"])
        return _Linear("u", cols)

    ours = ubench_time(cll_stat, {"u": n})
    floor = floor_time({"u": n})
    rows.append(row("CLL (test-time CV, refit per resample)", k, peer, ours, floor,
                    "ubench refits to first order (metrics/protocol_bootstrap.py); scipy refits exactly"))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--rows", type=int, default=100)
    ap.add_argument("--scipy-resamples", type=int, default=200)
    ap.add_argument("--keep", type=Path, default=None)
    ap.add_argument("--baseline-src", type=Path, default=None,
                    help="directory holding an earlier ubench package (DIR/ubench): its score ratio in the same rounds")
    ap.add_argument("--out-dir", default=None)
    args = ap.parse_args()
    rec = Recorder(__file__, "scipy")
    tmp = args.keep or Path(tempfile.mkdtemp())
    path = tmp / f"bench_intervals_m5_n{args.n}.h5"
    if not path.exists():
        build(path, m=5, n=args.n)
    score = _score_ratio(path, args.repeats, args.baseline_src)
    print(score)
    cpu = _resample_cpu(path, args.repeats, args.baseline_src)
    print(cpu)
    ranks = _rank_intervals(args.rows, args.n, args.repeats)
    print(ranks)
    peers = _peer(args.n, 100, args.scipy_resamples, args.repeats)
    for p in peers:
        print(p)
    rows = [score, cpu, ranks, *[{"what": "vs scipy.stats.bootstrap", **p} for p in peers]]
    summary = [
        {"what": "`score` with 1,000 bootstrap replicates against `--no-intervals`",
         "workload": f"M = 5, 7 splits of {args.n:,} x 100, subprocess, medians of {args.repeats}",
         "result": f"{score['ratio']}x" + (f" (before, same rounds: {score['baseline_ratio']}x; interval bounds "
                                           f"differ by <= {score['max_abs_diff_vs_baseline']:.1e})"
                                           if "baseline_ratio" in score else "")
                   + f"; resampling CPU on one thread {cpu['cpu_s']} s"
                   + (f" (before: {cpu['baseline_cpu_s']} s)" if "baseline_cpu_s" in cpu else ""),
         "target": "<= 1.5x", "met": score["ratio"] <= 1.5},
        {"what": "rank intervals of a board", "workload": f"{args.rows} rows, N = {args.n:,}, 1,000 replicates",
         "result": f"{ranks['best_s']} s", "target": "<= 2 s", "met": ranks["best_s"] <= 2.0},
        {"what": "bootstrap against scipy.stats.bootstrap (time per replicate)",
         "workload": f"N = {args.n:,}, C = 100: " + ", ".join(p["statistic"] for p in peers),
         "result": ", ".join(f"{p['speedup']}x" for p in peers)
         + " (the draws alone bound it at " + ", ".join(f"{p['speedup_bound']}x" for p in peers) + ")",
         "target": ">= 20x where the draws allow it",
         "met": all(p["speedup"] >= 20 or p["speedup_bound"] < 20 for p in peers if p.get("same_work", True))},
    ]
    rec.write(rows, summary, settings={"repeats": args.repeats, "n": args.n, "rows": args.rows,
                                       "scipy_resamples": args.scipy_resamples, "cpus": os.cpu_count(),
                                       "resample_threads": max(1, min(2, os.cpu_count() or 1)),
                                       "baseline_src": None if args.baseline_src is None else str(args.baseline_src)},
              out_dir=args.out_dir)


if __name__ == "__main__":
    main()
