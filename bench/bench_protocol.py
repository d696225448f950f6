# SPDX-License-Identifier: MIT
"""Benchmarks of the calibration protocol (not tests): temperature fit vs PyTorch L-BFGS, test-time CV + CLL,
and a DEE reference sweep. Prints one table; numbers go to bench/RESULTS.md ("Protocol").

    python bench/bench_protocol.py            # all three, best of --repeat runs each
    python bench/bench_protocol.py --skip-dee # without the ~20 s sweep
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
from scipy import special

from ubench.metrics.dee import dee_reference
from ubench.metrics.protocol import cross_validated_calibration
from ubench.metrics.temperature import fit_temperature, fit_temperature_from_logits


def _best(fn, repeat):
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), float(np.median(times)), out


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
    mp = np.empty((m, n, c), np.float32)
    for k in range(m):
        mp[k] = special.softmax(2.0 * (base + 0.8 * rng.normal(size=(n, c))), axis=1)
    return mp, y


def _torch_fit(z, y, *, strong_wolfe):
    import torch

    lg, yt = torch.from_numpy(z), torch.from_numpy(y)
    temperature = torch.nn.Parameter(torch.ones(1) * 1.5)
    if strong_wolfe:
        opt = torch.optim.LBFGS([temperature], lr=1.0, max_iter=100, line_search_fn="strong_wolfe",
                                tolerance_grad=1e-10, tolerance_change=1e-14)
    else:  # the temperature_scaling repository's settings
        opt = torch.optim.LBFGS([temperature], lr=0.01, max_iter=50)
    crit = torch.nn.CrossEntropyLoss()

    def closure():
        opt.zero_grad()
        loss = crit(lg / temperature, yt)
        loss.backward()
        return loss

    opt.step(closure)
    return float(temperature.item())


def bench_fit(repeat):
    n, c = 50_000, 100
    z, y = _logits(n, c, 0)
    p = special.softmax(z.astype(np.float64), axis=1).astype(np.float32)
    rows = []
    t_logits, med_l, fit_l = _best(lambda: fit_temperature_from_logits(z, y), repeat)
    t_probs, med_p, fit_p = _best(lambda: fit_temperature(p, y), repeat)
    rows.append(("ubench fit_temperature_from_logits", t_logits, med_l, fit_l.temperature))
    rows.append(("ubench fit_temperature (probs, eps 1e-12)", t_probs, med_p, fit_p.temperature))
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        _torch_fit(z, y, strong_wolfe=False)  # warm-up (first call pays dispatcher set-up)
        t_sw, med_sw, temp_sw = _best(lambda: _torch_fit(z, y, strong_wolfe=True), max(1, repeat // 2))
        t_repo, med_repo, temp_repo = _best(lambda: _torch_fit(z, y, strong_wolfe=False), max(1, repeat // 2))
        rows.append((f"torch LBFGS strong-Wolfe ({torch.get_num_threads()} threads)", t_sw, med_sw, temp_sw))
        rows.append((f"torch LBFGS lr=0.01 max_iter=50 ({torch.get_num_threads()} threads)", t_repo, med_repo,
                     temp_repo))
    print(f"\n[1] temperature fit, N={n}, C={c}, float32")
    print(f"{'implementation':58s} {'best s':>9s} {'median s':>9s} {'T':>12s}")
    for name, best, med, temp in rows:
        print(f"{name:58s} {best:9.4f} {med:9.4f} {temp:12.8f}")
    if torch is not None:
        print(f"speed-up vs strong-Wolfe LBFGS (converged): {t_sw / t_logits:6.1f}x logits, "
              f"{t_sw / t_probs:6.1f}x probs; |dT| = {abs(temp_sw - fit_l.temperature):.2e}")
        print(f"speed-up vs repository LBFGS settings:      {t_repo / t_logits:6.1f}x logits, "
              f"{t_repo / t_probs:6.1f}x probs; |dT| = {abs(temp_repo - fit_l.temperature):.2e} "
              "(lr=0.01 x 50 steps does not always converge)")


def bench_cv(repeat):
    m, n, c = 50, 10_000, 100
    mp, y = _members(m, n, c, 1)
    best, med, res = _best(lambda: cross_validated_calibration(mp, y), repeat)
    print(f"\n[2] cross_validated_calibration, M={m}, N={n}, C={c}, float32, post, 5x2 folds (incl. validation)")
    print(f"best {best:.3f} s, median {med:.3f} s; cll {res.cll:.5f}, T {res.temperature_mean:.4f}"
          f" +- {res.temperature_std:.4f}")


def bench_dee():
    k, n, c = 50, 10_000, 100
    mp, y = _members(k, n, c, 2)
    t0 = time.perf_counter()
    ref = dee_reference(mp, y, n_orders=5)
    dt = time.perf_counter() - t0
    print(f"\n[3] dee_reference, K={k}, R=5 orders, N={n}, C={c}: {k * 5} prefixes, each test-time CV TS (10 folds)")
    print(f"{dt:.2f} s; CLL_mean(1) {ref.cll_mean[0]:.4f} -> CLL_mean({k}) {ref.cll_mean[-1]:.4f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--skip-dee", action="store_true")
    args = ap.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} logical CPUs, "
          f"numpy {np.__version__}; load average {os.getloadavg()[0]:.2f}")
    bench_fit(args.repeat)
    bench_cv(args.repeat)
    if not args.skip_dee:
        bench_dee()


if __name__ == "__main__":
    main()
