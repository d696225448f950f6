# SPDX-License-Identifier: MIT
"""The calibration protocol against the peers users actually run, the same work, interleaved in one process.

1. Temperature fit, N = 50,000, C = 100 float32 logits: ubench against torch L-BFGS run to convergence, and
   against the temperature_scaling repository's settings (lr 0.01, 50 steps; not converged, for reference).
   "Converged" here: the peer's own stopping rule, ``tolerance_grad = 1e-7`` on |dNLL/dT| (a relative error in T
   of about 1e-7 / (T * d2NLL/dT2), below 1e-7 on this workload, as ubench's relative Newton step 1e-7), must
   leave it within 1e-6 (relative) of ubench's T; both T's are recorded and the row says whether it was. Two
   peers: (a) T itself as the parameter (the temperature_scaling parameterisation) with plain L-BFGS steps
   (lr 1, no line search); (b) log T as the parameter with the strong-Wolfe line search. Not used: strong-Wolfe
   on T itself, which stalls 2.4e-4 away from the optimum here: the float32 cross-entropy is flat to its
   rounding (~1e-6) there, so the line search cannot find a decrease and stops (the 1e-7 tolerances never act).
   What bounds the ratio: ubench reads the logits once; that pass exponentiates every entry twice, at T = 1 (for
   ``nll_before``, which the fit reports) and at the sub-sample's start (the moments that certify the answer),
   and float32 ``exp`` is most of its cost. ``floor_fit_s`` times those two ``np.exp`` passes alone, over row
   blocks that stay in cache, as the fit runs them: no converged fit that reports the NLL at T = 1 can do less
   (one exponential per entry at the optimum to know the gradient there, one at T = 1), so
   ``ratio_bound = peer_median_s / floor_fit_s`` is the most any such fit could reach against that peer with
   numpy's float32 ``exp`` (the metrics core imports numpy and scipy only; torch's float32 ``exp`` is faster
   than numpy's on an AVX2-only CPU).
2. Test-time CV TS + CLL, M = 50, N = 10,000, C = 100: ``cross_validated_calibration`` (from the members'
   probabilities) against two runs of the Pitfalls repository's pipeline, each row naming which:
   (a) ``metrics_kfold``: from the members' log-probabilities, as its networks give them, ``logsumexp`` of the
   members minus log M (``ens/ens-deepens.py``), then ``metrics.metrics_kfold(..., temp_scale=True)``
   (Nelder-Mead ``ts``, ``KFold(2, shuffle)`` x 5); (b) the notebooks' run: ``metrics_kfold(..., temp_scale=True)``
   on the log of the members' mean probability (``np.log(mp.mean(0))``, the saved ensemble log-probabilities
   the notebooks load), the cheaper peer. What bounds the ratio: every run from the members' probabilities reads
   the stack once and averages it; ``floor_stack_mean_float64_s`` times ``np.add.reduce(axis=0, dtype=float64)``
   (numpy's mean, no checks; best of 5), so ``ratio_bound = peer_best_s / floor_stack_mean_float64_s`` is the most
   any such run could reach against that peer (the notebooks' pipeline pays the same mean: it is part of the
   peer's time), and ``ubench_over_floor = ubench_best_s / floor_stack_mean_float64_s`` is ubench's time in units
   of it (validation, the logs and exps of the fits and the scoring included).
3. DEE sweep, K = 50, R = 5 orders: ``dee_reference`` against the repository's per-prefix approach (each try
   permutes the members; every prefix recomputes the log-mean of its k members and calls ``metrics_kfold``).

The Pitfalls peer is imported from a checkout of bayesgroup/pytorch-ensembles given by ``--pitfalls`` or
``$PITFALLS_REPO`` (its ``metrics.py`` on ``sys.path``); without it those peers are skipped with a note. Timings
alternate ubench / peer; each ratio is the median of the per-pair ratios. Writes bench/results/bench_protocol.json.

    python bench/bench_protocol.py --pitfalls /tmp/pitfalls-ensembles [--repeat 5] [--dee-peer-prefixes 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

# One BLAS thread, set before numpy loads OpenBLAS: ubench and the peers are compared per core, and numpy's
# OpenBLAS would otherwise spread the row sums (matrix-vector products) of ubench's kernels over every core for
# blocks above 9,216 entries (2 threads on the bench machine: the same work cost 64 CPU ms instead of 58 at
# load 8, and the "1 thread" of the rows would not hold).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from scipy import special  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import Recorder  # noqa: E402

from ubench.metrics.dee import dee_reference  # noqa: E402
from ubench.metrics.protocol import cross_validated_calibration  # noqa: E402
from ubench.metrics.temperature import fit_temperature_from_logits  # noqa: E402

UBENCH_RTOL = 1e-7  # metrics/temperature_solver.py:_RTOL, the relative Newton step ubench stops at


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _interleaved(ours, peer, repeat):
    """Alternate ours / peer ``repeat`` times: (our times, peer times, per-pair ratios, our out, peer out)."""
    t_o, t_p, ratios, out_o, out_p = [], [], [], None, None
    for _ in range(repeat):
        a, out_o = _timed(ours)
        b, out_p = _timed(peer)
        t_o.append(a)
        t_p.append(b)
        ratios.append(b / a)
    return t_o, t_p, ratios, out_o, out_p


def _logits(n, c, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    z = rng.normal(size=(n, c)) * 2.0
    z[np.arange(n), y] += 4.0
    return (1.8 * z).astype(np.float32), y  # overconfident: T* is about 1.8


def _members(m, n, c, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    base = rng.normal(size=(n, c))
    base[np.arange(n), y] += 2.5
    log_mp = np.empty((m, n, c), np.float32)
    for k in range(m):
        log_mp[k] = special.log_softmax(2.0 * (base + 0.8 * rng.normal(size=(n, c))), axis=1)
    return np.exp(log_mp), log_mp, y


def _torch_fit(z, y, *, peer):
    """One torch L-BFGS fit of the temperature; ``peer`` "T" / "logT" (converged, see the module docstring) or
    "ts" (the temperature_scaling repository's settings)."""
    import torch

    lg, yt = torch.from_numpy(z), torch.from_numpy(y)
    log_param = peer == "logT"
    param = torch.nn.Parameter(torch.full((1,), float(np.log(1.5)) if log_param else 1.5))
    if peer == "T":
        opt = torch.optim.LBFGS([param], lr=1.0, max_iter=100, tolerance_grad=UBENCH_RTOL, tolerance_change=1e-12)
    elif peer == "logT":
        opt = torch.optim.LBFGS([param], lr=1.0, max_iter=100, line_search_fn="strong_wolfe",
                                tolerance_grad=UBENCH_RTOL, tolerance_change=1e-12)
    else:
        opt = torch.optim.LBFGS([param], lr=0.01, max_iter=50)
    crit = torch.nn.CrossEntropyLoss()
    evals = [0]

    def closure():
        opt.zero_grad()
        loss = crit(lg / (param.exp() if log_param else param), yt)
        loss.backward()
        evals[0] += 1
        return loss

    opt.step(closure)
    t = float(param.exp().item() if log_param else param.item())
    return t, evals[0]


UBENCH_THREADS = 1  # the temperature and CV kernels are single-threaded (threads measured slower on 2 cores);
# their BLAS too, by OPENBLAS_NUM_THREADS above


def _floor(fn, repeat=5):
    """Best time of ``fn`` (a floor: one pass of the work every method must do at least once)."""
    return round(min(_timed(fn)[0] for _ in range(repeat)), 4)


def _two_exp_passes(z, block_entries=1 << 15):
    """``np.exp`` of every entry of ``z`` twice, over row blocks of ``block_entries`` that stay in cache (the
    exponentials of ubench's fit pass, without the moments, the start or the checks around them)."""
    step = max(1, block_entries // z.shape[1])
    buf = np.empty((step, z.shape[1]), z.dtype)
    for a in range(0, z.shape[0], step):
        b = min(a + step, z.shape[0])
        np.exp(z[a:b], out=buf[: b - a])
        np.exp(buf[: b - a], out=buf[: b - a])


def _per_core(row) -> float:
    """ubench threads / peer threads: divide a ratio by it for the per-core ratio."""
    return row.get("ubench_threads", 1) / max(1, row.get("peer_threads", 1))


def _row(name, workload, t_o, t_p, ratios, peer, **extra):
    return {"benchmark": name, "workload": workload, "ubench_best_s": round(min(t_o), 4),
            "ubench_median_s": round(statistics.median(t_o), 4), "peer": peer,
            "peer_best_s": None if t_p is None else round(min(t_p), 4),
            "peer_median_s": None if t_p is None else round(statistics.median(t_p), 4),
            "ratio_median": None if ratios is None else round(statistics.median(ratios), 2),
            "ratio_min": None if ratios is None else round(min(ratios), 2), **extra}


def bench_fit(repeat):
    n, c = 50_000, 100
    z, y = _logits(n, c, 0)
    rows = []
    try:
        import torch
    except ImportError:
        return [_row("temperature fit", f"N={n}, C={c}", [_timed(lambda: fit_temperature_from_logits(z, y))[0]],
                     None, None, "torch not installed")]
    threads = torch.get_num_threads()
    # What bounds the ratio (module docstring): the fit's two float32 exp passes, floor_fit_s.
    z_shifted = z - z.max()  # exponents <= 0, as in the fit
    floors = {"floor_exp_pass_s": _floor(lambda: np.exp(z)),
              "floor_fit_s": _floor(lambda: _two_exp_passes(z_shifted), repeat=9)}
    _torch_fit(z, y, peer="ts")  # warm-up (dispatcher set-up)
    fit_temperature_from_logits(z, y)
    nt = f"{threads} thread" + ("s" if threads != 1 else "")
    for peer, label in (("T", f"torch LBFGS on T, tolerance_grad 1e-7 ({nt})"),
                        ("logT", f"torch LBFGS strong-Wolfe on log T, tolerance_grad 1e-7 ({nt})"),
                        ("ts", f"torch LBFGS temperature_scaling settings lr 0.01 x 50 ({nt})")):
        t_o, t_p, r, ours, (temp, evals) = _interleaved(lambda: fit_temperature_from_logits(z, y),
                                                        lambda: _torch_fit(z, y, peer=peer), repeat)
        rel = abs(temp - ours.temperature) / ours.temperature
        # Converged is what the run shows (T within 1e-6 of ubench's), not what the settings intend.
        label = label.replace(" (", ", converged (" if peer != "ts" and rel <= 1e-6
                              else f", not converged: T off by {rel:.1e} (", 1)
        rows.append(_row("temperature fit", f"N={n:,}, C={c}, float32 logits", t_o, t_p, r, label,
                         ubench_T=round(ours.temperature, 9), peer_T=round(temp, 9), peer_rel_diff=float(f"{rel:.3g}"),
                         peer_s_per_evaluation=round(statistics.median(t_p) / evals, 4),
                         peer_converged=bool(rel <= 1e-6) if peer != "ts" else False, peer_evals=evals,
                         ubench_threads=UBENCH_THREADS, peer_threads=threads,
                         ratio_bound=round(statistics.median(t_p) / floors["floor_fit_s"], 1), **floors))
    return rows


def _pitfalls_pipeline(pm, log_mp, y):
    """(a) metrics_kfold on the logsumexp of the members' log-probabilities (ens/ens-deepens.py)."""
    log_p = special.logsumexp(np.dstack(list(log_mp)), axis=2) - np.log(len(log_mp))
    return pm.metrics_kfold(log_p, y, n_splits=2, n_runs=5, temp_scale=True)["ll"]


def _pitfalls_log_mean(pm, mp, y):
    """(b) the notebooks' run: metrics_kfold on the log of the members' mean probability."""
    log_p = np.log(mp.mean(axis=0, dtype=np.float64))
    return pm.metrics_kfold(log_p, y, n_splits=2, n_runs=5, temp_scale=True)["ll"]


#: The two Pitfalls pipelines of the CV row: (label, function of (pm, mp, log_mp, y)).
CV_PEERS = (
    ("Pitfalls notebooks: metrics_kfold(temp_scale=True) on log(mean p)",
     lambda pm, mp, log_mp, y: _pitfalls_log_mean(pm, mp, y)),
    ("Pitfalls metrics_kfold(temp_scale=True) + logsumexp of the members",
     lambda pm, mp, log_mp, y: _pitfalls_pipeline(pm, log_mp, y)),
)


def bench_cv(repeat, pm):
    m, n, c = 50, 10_000, 100
    mp, log_mp, y = _members(m, n, c, 1)
    cross_validated_calibration(mp, y)  # warm-up
    workload = f"M={m}, N={n:,}, C={c}, float32, 5 x 2 folds"
    if pm is None:
        t_o = [_timed(lambda: cross_validated_calibration(mp, y))[0] for _ in range(repeat)]
        return [_row("test-time CV TS + CLL", workload, t_o, None, None, "Pitfalls repository not given: skipped")]
    floors = {"floor_stack_read_s": _floor(lambda: mp.sum(axis=0)),
              "floor_stack_mean_float64_s": _floor(lambda: np.add.reduce(mp, axis=0, dtype=np.float64))}
    rows = []
    for label, peer in CV_PEERS:
        np.random.seed(0)
        t_o, t_p, r, ours, theirs = _interleaved(lambda: cross_validated_calibration(mp, y),
                                                 lambda: peer(pm, mp, log_mp, y), repeat)
        rows.append(_row("test-time CV TS + CLL", workload, t_o, t_p, r, label, ubench_cll=round(ours.cll, 6),
                         peer_cll=round(float(theirs), 6), ubench_threads=UBENCH_THREADS, peer_threads=1,
                         ubench_over_floor=round(min(t_o) / floors["floor_stack_mean_float64_s"], 2),
                         ratio_bound=round(min(t_p) / floors["floor_stack_mean_float64_s"], 1),
                         **floors))
    return rows


def _pitfalls_prefix(pm, log_mp, y, order, k):
    """One prefix of the repository's DEE try: log-mean of the first k members, then metrics_kfold with TS."""
    log_p = special.logsumexp(np.dstack(list(log_mp[order[:k]])), axis=2) - np.log(k)
    return pm.metrics_kfold(log_p, y, n_splits=2, n_runs=5, temp_scale=True)["ll"]


def bench_dee(pm, peer_prefixes):
    """ubench's whole sweep against the peer's per-prefix cost: the peer runs ``peer_prefixes`` prefix sizes of
    one try (spread over 1..K); its sweep time is R x sum over k = 1..K of a least-squares line a + b k through
    those times (its cost is linear in k: a k-member log-mean plus a fixed CV)."""
    k, n, c, r = 50, 10_000, 100, 5
    mp, log_mp, y = _members(k, n, c, 2)
    workload = f"K={k}, R={r} orders, N={n:,}, C={c}: {k * r} prefixes x 10 folds"
    t_o, ref = _timed(lambda: dee_reference(mp, y, n_orders=r))
    extra = {"ubench_cll_mean_1": round(float(ref.cll_mean[0]), 5),
             "ubench_cll_mean_K": round(float(ref.cll_mean[-1]), 5),
             "ubench_cll_std_K": round(float(ref.cll_std[-1]), 6)}
    if pm is None:
        return [_row("DEE sweep", workload, [t_o], None, None, "Pitfalls repository not given: skipped", **extra)]
    np.random.seed(0)  # not interleaved: ubench's sweep ran just before, in the same process
    order = np.random.permutation(k)
    sizes = np.unique(np.linspace(1, k, max(2, peer_prefixes)).round().astype(int))
    times = [_timed(lambda: _pitfalls_prefix(pm, log_mp, y, order, int(s)))[0] for s in sizes]
    b, a = np.polyfit(sizes, times, 1)
    t_p = float(r * sum(a + b * s for s in range(1, k + 1)))
    note = (f"Pitfalls per-prefix approach: {len(sizes)} prefix sizes timed, sweep extrapolated "
            f"(R x sum_k (a + b k))") if len(sizes) < k else "Pitfalls per-prefix approach, one try x R"
    return [_row("DEE sweep", workload, [t_o], [t_p], [t_p / t_o], note,
                 peer_prefix_sizes=sizes.tolist(), peer_prefix_s=[round(t, 3) for t in times], **extra)]


def _summary(rows):
    out = []
    for row in rows:
        ratio = row["ratio_median"]
        if row["benchmark"] == "temperature fit":
            converged = row.get("peer_converged", False)
            target = 20.0 if converged else None  # the target is against a converged peer only
            res = (f"{row['ubench_median_s'] * 1e3:.1f} ms vs {row['peer']} {row['peer_median_s'] * 1e3:.0f} ms "
                   f"({row['peer_evals']} evaluations): **{ratio:.1f}x**, {ratio / _per_core(row):.1f}x per core "
                   f"(T {row['ubench_T']:.7f} vs {row['peer_T']:.7f}); bound {row['ratio_bound']:.1f}x: the two "
                   f"float32 exp passes alone take {row['floor_fit_s'] * 1e3:.1f} ms") if ratio else "peer skipped"
        elif row["benchmark"] == "test-time CV TS + CLL":
            target = 10.0
            bound = (f"; bound {row['ratio_bound']:.1f}x: the float64 mean of the stack alone takes "
                     f"{row['floor_stack_mean_float64_s'] * 1e3:.0f} ms (ubench's best run "
                     f"{row['ubench_over_floor']:.2f}x it)"
                     ) if "ratio_bound" in row else ""
            res = (f"{row['ubench_median_s']:.3f} s vs {row['peer']} {row['peer_median_s']:.3f} s: "
                   f"**{ratio:.1f}x**, {ratio / _per_core(row):.1f}x per core (CLL {row['ubench_cll']:.4f} vs "
                   f"{row['peer_cll']:.4f}, own halvings){bound}"
                   ) if ratio else f"{row['ubench_median_s']:.3f} s; peer skipped"
        else:
            target = 10.0
            res = (f"{row['ubench_best_s']:.1f} s vs the per-prefix approach {row['peer_best_s']:.1f} s "
                   f"({row['peer']}): **{ratio:.1f}x**") if ratio else f"{row['ubench_best_s']:.1f} s; peer skipped"
        peer_name = row["peer"].split(" (")[0] if "torch" in row["peer"] else (
            row["peer"].split(":")[0] if row["benchmark"] == "test-time CV TS + CLL" and ratio else "")
        out.append({"what": row["benchmark"] + (f" vs {peer_name}" if peer_name else ""),
                    "workload": row["workload"], "result": res,
                    "target": "none (peer not converged)" if target is None else f">= {target:g}x",
                    "met": None if ratio is None or target is None else bool(ratio >= target)})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--pitfalls", default=os.environ.get("PITFALLS_REPO"),
                    help="checkout of bayesgroup/pytorch-ensembles (default $PITFALLS_REPO)")
    ap.add_argument("--dee-peer-prefixes", type=int, default=5, help="prefix sizes of the peer's DEE try to time")
    ap.add_argument("--torch-threads", type=int, default=1,
                    help="torch threads of the peers (default 1: per core, as numpy's ubench kernels)")
    ap.add_argument("--skip-dee", action="store_true")
    ap.add_argument("--out-dir", default=None)
    args = ap.parse_args()
    rec = Recorder(__file__, "sklearn")
    try:
        import torch

        torch.set_num_threads(args.torch_threads)
    except ImportError:
        pass
    pm = None
    if args.pitfalls:
        sys.path.insert(0, args.pitfalls)
        if not hasattr(np, "trapz"):  # numpy 2 renamed np.trapz, which metrics.py's acc_aac calls
            np.trapz = np.trapezoid
        import warnings

        warnings.filterwarnings("ignore", message="Unknown solver options")  # its 'xtol' (scipy: xatol)
        import metrics as pm  # noqa: F401  (bayesgroup/pytorch-ensembles/metrics.py)
    else:
        print("no --pitfalls / $PITFALLS_REPO: the Pitfalls peers are skipped")
    rows = bench_fit(args.repeat)
    rows += bench_cv(args.repeat, pm)
    if not args.skip_dee:
        rows += bench_dee(pm, args.dee_peer_prefixes)
    for row in rows:
        print(row)
    rec.write(rows, _summary(rows), settings={"repeat": args.repeat, "dee_peer_prefixes": args.dee_peer_prefixes,
                                              "torch_threads": args.torch_threads,
                                              "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
                                              "pitfalls_repo_given": pm is not None},
              out_dir=args.out_dir)


if __name__ == "__main__":
    main()
