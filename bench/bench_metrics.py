# SPDX-License-Identifier: MIT
"""Speed and memory of the ubench metrics core against the libraries users would otherwise pick.

One run, the same arrays for everyone: N = 200,000 samples, C = 100 classes, float32 softmax outputs (and M = 5
members for mutual information). For each metric it prints ubench's time, every peer's time, the ratio
``fastest peer / ubench`` (> 1 means ubench is faster), and ubench's peak extra memory as a multiple of the input
size (tracemalloc, which NumPy reports its buffers to). Times are the best of ``--repeat`` calls, validation
included (it is part of every public call). Peers that are not installed are skipped.

    python bench/bench_metrics.py [--n 200000] [--c 100] [--members 5] [--repeat 5]

Writes bench/results/bench_metrics.json. The entropy kernels run in up to ``min(4, cores)`` threads (the NumPy
baseline in one), so their ratio is also given per core (ratio / ubench threads). The "floor" rows time the
float32 ``np.log`` of every element alone, on one thread: NumPy's time over it bounds the per-core ratio.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import Recorder  # noqa: E402

from ubench import metrics as M  # noqa: E402
from ubench.metrics import uncertainty as _unc  # noqa: E402


def best_time(fn, repeat: int) -> float:
    fn()  # warm-up (imports, caches, page faults)
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def peak_extra_bytes(fn) -> int:
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def make_data(n: int, c: int, m: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, c, n)
    z = rng.normal(scale=3.0, size=(n, c)).astype(np.float32)
    z[np.arange(n), labels] += 3.0  # a model that is right most of the time
    z -= z.max(axis=1, keepdims=True)
    probs = np.exp(z, dtype=np.float32)
    probs /= probs.sum(axis=1, keepdims=True, dtype=np.float32)
    members = np.empty((m, n, c), dtype=np.float32)
    for k in range(m):
        zk = z + rng.normal(scale=1.0, size=(n, c)).astype(np.float32)
        zk -= zk.max(axis=1, keepdims=True)
        np.exp(zk, out=members[k])
        members[k] /= members[k].sum(axis=1, keepdims=True, dtype=np.float32)
    return probs, labels, members


def peers(probs, labels, members, scores, is_error):
    """name -> (ubench callable, input bytes, {peer name: callable})."""
    out = {}
    sk = tm = nc = torch = None
    try:
        from sklearn import metrics as sk
    except ImportError:
        pass
    try:
        import torch
        import torchmetrics.functional.classification as tm
    except ImportError:
        pass
    try:
        from netcal.metrics import ECE as NetcalECE

        nc = NetcalECE
    except ImportError:
        pass
    c = probs.shape[1]
    pbytes = probs.nbytes + labels.nbytes

    ece_peers = {}
    if tm is not None:
        tp, tl = torch.from_numpy(probs), torch.from_numpy(labels)
        ece_peers["torchmetrics"] = lambda: float(
            tm.multiclass_calibration_error(tp, tl, num_classes=c, n_bins=15, norm="l1"))
    if nc is not None:
        ece_peers["netcal"] = lambda: float(nc(bins=15).measure(probs, labels))
    out["ECE (15 bins)"] = (lambda: M.expected_calibration_error(probs, labels), pbytes, ece_peers)

    if sk is not None:
        out["AUROC"] = (lambda: M.auroc_score(scores, is_error), scores.nbytes + is_error.nbytes,
                        {"scikit-learn": lambda: sk.roc_auc_score(is_error, scores)})
        out["AUPR (average precision)"] = (
            lambda: M.average_precision_score(scores, is_error), scores.nbytes + is_error.nbytes,
            {"scikit-learn": lambda: sk.average_precision_score(is_error, scores)})
        out["NLL"] = (lambda: M.nll_loss(probs, labels), pbytes,
                      {"scikit-learn": lambda: sk.log_loss(labels, probs, labels=np.arange(c))})
        out["Brier"] = (lambda: M.brier_loss(probs, labels), pbytes,
                        {"scikit-learn": lambda: sk.brier_score_loss(labels, probs, labels=np.arange(c))})
    if tm is not None:
        ts, te = torch.from_numpy(scores), torch.from_numpy(is_error)
        out["AUROC"][2]["torchmetrics"] = lambda: float(tm.binary_auroc(ts, te))
        out["AUPR (average precision)"][2]["torchmetrics"] = lambda: float(tm.binary_average_precision(ts, te))

    def np_entropy(p):
        # What one writes by hand: float32 throughout, 0 log 0 guarded with where=.
        logp = np.log(p, where=p > 0, out=np.zeros_like(p))
        return -(p * logp).sum(axis=1)

    out["entropy"] = (lambda: M.predictive_entropy(probs), probs.nbytes, {"numpy": lambda: np_entropy(probs)})

    def np_mi(mp):
        mean = mp.mean(axis=0)
        return np_entropy(mean) - np.mean([np_entropy(p) for p in mp], axis=0)

    out["mutual information"] = (lambda: M.mutual_information(members), members.nbytes,
                                 {"numpy": lambda: np_mi(members)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--c", type=int, default=100)
    ap.add_argument("--members", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out-dir", default=None)
    args = ap.parse_args()
    rec = Recorder(__file__, "sklearn", "torchmetrics", "netcal")
    ubench_threads = min(_unc._MAX_THREADS, os.cpu_count() or 1)
    rows = []

    probs, labels, members = make_data(args.n, args.c, args.members)
    scores = M.predictive_entropy(probs).astype(np.float32)
    is_error = (probs.argmax(axis=1) != labels).astype(np.int64)

    print(f"# machine: {platform.processor() or platform.machine()}, {os.cpu_count()} logical CPUs, "
          f"{platform.python_implementation()} {platform.python_version()}, numpy {np.__version__}")
    print(f"# data: N={args.n}, C={args.c}, float32 probs ({probs.nbytes / 2**20:.0f} MiB), "
          f"M={args.members} members ({members.nbytes / 2**20:.0f} MiB); best of {args.repeat}")
    t_val = best_time(lambda: M._validation.check_probs(probs), args.repeat)
    print(f"# validation alone (check_probs on the (N, C) input): {t_val * 1e3:.1f} ms")
    print(f"# load average before the run: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    table = peers(probs, labels, members, scores, is_error)
    # ubench first for every metric, then the peers: torch's worker threads keep spinning for a while after a
    # call, which would otherwise slow whatever is timed next on a small machine.
    ours_t = {name: best_time(fn, args.repeat) for name, (fn, _, _) in table.items()}
    ours_mem = {name: peak_extra_bytes(fn) / in_bytes for name, (fn, in_bytes, _) in table.items()}
    print("| metric | ubench ms | peers ms | fastest peer / ubench | ubench peak extra memory / input | max abs diff |")
    print("|" + "---|" * 6)
    for name, (fn, _, peer_fns) in table.items():
        peer_t = {k: best_time(f, args.repeat) for k, f in peer_fns.items()}
        peer_txt = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in peer_t.items()) or "-"
        ratio = (min(peer_t.values()) / ours_t[name]) if peer_t else float("nan")
        # Agreement check, so a fast wrong answer cannot pass.
        ours = np.asarray(fn(), dtype=np.float64)
        diffs = "; ".join(
            f"{k} {float(np.max(np.abs(ours - np.asarray(f(), dtype=np.float64)))):.1e}" for k, f in peer_fns.items())
        print(f"| {name} | {ours_t[name] * 1e3:.1f} | {peer_txt} | {ratio:.1f}x | {ours_mem[name]:.2f} | {diffs} |")
        threads = ubench_threads if name in ("entropy", "mutual information") else 1
        rows.append({"metric": name, "ubench_ms": round(ours_t[name] * 1e3, 2),
                     "peers_ms": {k: round(v * 1e3, 2) for k, v in peer_t.items()},
                     "fastest_peer_over_ubench": round(ratio, 2), "ubench_threads": threads,
                     "ratio_per_core": round(ratio / threads, 2), "peak_extra_over_input": round(ours_mem[name], 3),
                     "max_abs_diff": diffs})

    # The floor of the entropy kernels: the float32 np.log of every element, alone, in the kernels' row blocks on
    # one thread (entropy: the probs; MI: every member and the mean). No NumPy kernel can go below it.
    step = _unc._entropy_step(args.c)
    scratch = np.empty((step, args.c), dtype=np.float32)

    def log_pass(*arrays):
        for a in arrays:
            for start in range(0, a.shape[0], step):
                block = a[start : start + step]
                np.log(block, out=scratch[: block.shape[0]])

    for name, arrays, in_bytes in (("floor: float32 np.log pass over probs (entropy)", (probs,), probs.nbytes),
                                   ("floor: float32 np.log passes over members + mean (MI)", (*members, probs),
                                    members.nbytes)):
        t = best_time(lambda: log_pass(*arrays), args.repeat)
        rows.append({"metric": name, "ubench_ms": round(t * 1e3, 2), "peers_ms": {}, "fastest_peer_over_ubench": None,
                     "ubench_threads": 1, "ratio_per_core": None,
                     "peak_extra_over_input": round(peak_extra_bytes(lambda: log_pass(*arrays)) / in_bytes, 3),
                     "max_abs_diff": ""})
        print(f"# {name}, 1 thread: {t * 1e3:.1f} ms")

    # The rest of the core has no peer in these libraries; its time and memory on the same arrays.
    cost = M.cost_matrix_preset("cifar100") if args.c == 100 else 1.0 - np.eye(args.c)
    rest = {
        "adaptive (equal-mass) ECE": lambda: M.adaptive_calibration_error(probs, labels),
        "classwise ECE": lambda: M.classwise_calibration_error(probs, labels),
        "TACE": lambda: M.tace_error(probs, labels),
        "UCE": lambda: M.uce_error(probs, labels),
        "classwise UCE": lambda: M.classwise_uce_error(probs, labels),
        "reliability bins": lambda: M.reliability_bins(probs, labels),
        "Brier decomposition": lambda: M.brier_decomposition(probs, labels),
        "accuracy": lambda: M.accuracy_score(probs, labels),
        "risk-coverage AUC": lambda: M.risk_coverage_auc(probs, labels),
        "decision cost (C x C matrix)": lambda: M.decision_cost(probs, labels, cost),
        "ensemble mean (M members)": lambda: M.ensemble_mean_probs(members),
    }
    print()
    print("| other metric | ubench ms | peak extra memory / input |")
    print("|---|---|---|")
    for name, fn in rest.items():
        in_bytes = members.nbytes if "members" in name else probs.nbytes + labels.nbytes
        t = best_time(fn, max(1, args.repeat // 3))
        mem = peak_extra_bytes(fn) / in_bytes
        print(f"| {name} | {t * 1e3:.1f} | {mem:.2f} |")
        rows.append({"metric": name, "ubench_ms": round(t * 1e3, 2), "peers_ms": {},
                     "fastest_peer_over_ubench": None, "ubench_threads": 1, "ratio_per_core": None,
                     "peak_extra_over_input": round(mem, 3), "max_abs_diff": ""})
    rec.write(rows, _summary(rows, args), settings=vars(args), out_dir=args.out_dir)


def _summary(rows, args):
    by = {r["metric"]: r for r in rows}
    work = f"N = {args.n:,}, C = {args.c}, float32"
    out = []
    for names, what in ((("ECE (15 bins)",), "ECE, 15 bins"), (("AUROC", "AUPR (average precision)"), "AUROC / AUPR"),
                        (("NLL", "Brier"), "NLL / Brier")):
        got = [by[n] for n in names if n in by and by[n]["fastest_peer_over_ubench"] is not None]
        if not got:
            continue
        res = " / ".join(f"{r['ubench_ms']:.1f} ms, {r['fastest_peer_over_ubench']:.1f}x the fastest peer "
                         f"({min(r['peers_ms'], key=r['peers_ms'].get)})" for r in got)
        out.append({"what": what, "workload": work, "result": res, "target": ">= 2x",
                    "met": all(r["fastest_peer_over_ubench"] >= 2 for r in got)})
    floors = {"entropy": "floor: float32 np.log pass over probs (entropy)",
              "mutual information": "floor: float32 np.log passes over members + mean (MI)"}
    got = [by[n] for n in ("entropy", "mutual information") if n in by]
    if got:
        def bound(r):
            # NumPy's time over the log passes alone: the per-core ratio no NumPy kernel can exceed.
            f = by.get(floors[r["metric"]])
            return f"; the np.log alone takes {f['ubench_ms']:.1f} ms on 1 core, so at most " \
                   f"{min(r['peers_ms'].values()) / f['ubench_ms']:.1f}x per core" if f else ""
        res = " / ".join(f"{r['ubench_ms']:.1f} ms, {r['fastest_peer_over_ubench']:.1f}x NumPy with "
                         f"{r['ubench_threads']} threads = {r['ratio_per_core']:.1f}x per core{bound(r)}"
                         for r in got)
        out.append({"what": "entropy / mutual information", "workload": f"{work}, M = {args.members}",
                    "result": res, "target": ">= 2x NumPy per core",
                    "met": all(r["ratio_per_core"] >= 2 for r in got)})
    worst = max(rows, key=lambda r: r["peak_extra_over_input"])
    out.append({"what": "extra memory of every metric", "workload": work,
                "result": f"at most {worst['peak_extra_over_input']:.2f}x the input ({worst['metric']})",
                "target": "<= 2x", "met": worst["peak_extra_over_input"] <= 2})
    return out


if __name__ == "__main__":
    main()
