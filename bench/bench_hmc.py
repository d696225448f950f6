# SPDX-License-Identifier: MIT
"""HMC and JAX producer speed on the digits MLP (issue #11 item 9), side by side in one run.

HMC iterations per second (L leapfrog steps of full-batch potential-and-gradient each, same L for all) of
- ubench's torch HMC (``producers/hmc_sampler.py`` + ``functional_call`` on a flat vector),
- a hamiltorch-style loop: the flat vector copied into the module's parameters before every gradient, then
  ``autograd.grad`` over the module's parameters and a concatenation (what hamiltorch's ``sample_model`` does
  per leapfrog step, with the module machinery in the loop),
- BlackJAX's ``hmc`` kernel on the same MLP in JAX (jit-compiled, compile time excluded);
and the training time of one epoch of SGD on the torch and JAX producers. Ratios > 1 mean ubench torch is faster.

    python bench/bench_hmc.py [--iterations 30] [--leapfrog 40] [--threads 1]

Writes bench/results/bench_hmc.json (``bench/_results.py``); ``bench/render.py`` puts it in the README.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import Recorder  # noqa: E402


def _timed(fn, repeats: int) -> float:
    """Best of ``repeats`` wall times of ``fn()``."""
    best = math.inf
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def torch_setup(task, seed=0):
    import torch

    from ubench.producers.models import build_model

    torch.manual_seed(seed)
    model = build_model("mlp", task.input_shape, task.n_classes, mean=task.mean, std=task.std, dropout="none", p=0.0)
    x = torch.from_numpy(task.train.images)
    y = torch.from_numpy(task.train.labels)
    return model, x, y


def ubench_hmc(model, x, y, *, iterations, leapfrog, step):
    import torch

    from ubench.producers.hmc import log_posterior_fn
    from ubench.producers.hmc_sampler import HMCState, hmc_transition

    target = log_posterior_fn(model, x, y, prior_precision=100.0)
    theta = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    gen = torch.Generator().manual_seed(0)

    def run():
        state = HMCState.at(theta, target)
        for _ in range(iterations):
            state, _ = hmc_transition(state, target, step_size=step, n_steps=leapfrog, mass=0.19, generator=gen)

    return run


def hamiltorch_style(model, x, y, *, iterations, leapfrog, step):
    """Per-step module round trip: vector -> module parameters -> forward -> autograd.grad -> vector."""
    import torch
    import torch.nn.functional as F
    from torch.nn.utils import parameters_to_vector, vector_to_parameters

    params = list(model.parameters())
    theta0 = parameters_to_vector(params).detach().clone()

    def potential_and_grad(theta):
        vector_to_parameters(theta, params)
        loss = F.cross_entropy(model(x), y, reduction="sum") + 50.0 * sum((p ** 2).sum() for p in params)
        grads = torch.autograd.grad(loss, params)
        return float(loss.detach()), torch.cat([g.reshape(-1) for g in grads]).detach()

    gen = torch.Generator().manual_seed(0)

    def run():
        theta = theta0.clone()
        u, g = potential_and_grad(theta)
        for _ in range(iterations):
            p0 = torch.randn(theta.shape, generator=gen) * math.sqrt(0.19)
            th, p = theta.clone(), p0 - 0.5 * step * g
            for i in range(leapfrog):
                th = th + step / 0.19 * p
                u1, g1 = potential_and_grad(th)
                p = p - (step if i < leapfrog - 1 else 0.5 * step) * g1
            h0 = u + 0.5 * float(p0 @ p0) / 0.19
            h1 = u1 + 0.5 * float(p @ p) / 0.19
            if float(torch.rand((), generator=gen)) < math.exp(min(0.0, h0 - h1)):
                theta, u, g = th, u1, g1
        vector_to_parameters(theta0, params)

    return run


def blackjax_hmc(task, *, iterations, leapfrog, step):
    import blackjax
    import jax
    import jax.numpy as jnp
    from jax.flatten_util import ravel_pytree

    from ubench.producers.jax.hmc import log_posterior
    from ubench.producers.jax.mlp import init_mlp

    params = init_mlp(jax.random.key(0), int(np.prod(task.input_shape)), task.n_classes)
    theta, unravel = ravel_pytree(params)
    logdensity = log_posterior(unravel, jnp.asarray(task.train.images), jnp.asarray(task.train.labels),
                               task.mean, task.std, 100.0)
    kernel = blackjax.hmc(logdensity, step_size=step, inverse_mass_matrix=jnp.full(theta.shape, 1 / 0.19),
                          num_integration_steps=leapfrog)

    @jax.jit
    def chain(state, key):
        def one(s, k):
            s, info = kernel.step(k, s)
            return s, info.acceptance_rate

        return jax.lax.scan(one, state, jax.random.split(key, iterations))

    state = kernel.init(theta)
    jax.block_until_ready(chain(state, jax.random.key(1)))  # compile

    def run():
        jax.block_until_ready(chain(state, jax.random.key(2)))

    return run


def epoch_times(task, *, repeats):
    """One SGD epoch of the MLP (batch 128) in the torch trainer and in the JAX trainer."""
    import tempfile

    import torch

    from ubench.producers.jax.train import train_run
    from ubench.producers.sgd import SGDPointEstimate
    from ubench.producers.torch_trainer import RunSettings, TrainContext, train_epoch

    method = SGDPointEstimate(dict(SGDPointEstimate.defaults), n_members=1, n_train=len(task.train))
    ctx = TrainContext.create(task, RunSettings(model="mlp", members=1, seed=0, device="cpu"))
    model = ctx.new_model(method, 0)
    opt = method.make_optimizer(model)
    t_torch = _timed(lambda: train_epoch(model, opt, method, ctx, epoch=1, seed=0), repeats)
    hp = {**SGDPointEstimate.defaults, "epochs": 1}
    x, y = task.train.images, task.train.labels.astype(np.int32)

    def jax_epoch():
        with tempfile.TemporaryDirectory() as d:
            train_run(hp, x=x, y=y, n_classes=task.n_classes, mean=task.mean, std=task.std, seed=0, batch_size=128,
                      checkpoint=Path(d) / "c.npz")

    jax_epoch()  # compile
    t_jax = _timed(jax_epoch, repeats)
    return t_torch, t_jax, torch.get_num_threads()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--leapfrog", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
    import torch

    from ubench.producers.task import build_task

    torch.set_num_threads(args.threads)
    task = build_task("digits", shift_kinds=())
    recorder = Recorder(__file__, "jax", "blackjax", "optax")
    model, x, y = torch_setup(task)
    step = 2e-4
    kw = dict(iterations=args.iterations, leapfrog=args.leapfrog, step=step)
    runs = {"ubench torch HMC": ubench_hmc(model, x, y, **kw), "hamiltorch-style loop": hamiltorch_style(model, x, y, **kw)}
    try:
        runs["BlackJAX hmc"] = blackjax_hmc(task, **kw)
    except ImportError as exc:
        print(f"BlackJAX skipped: {exc}")
    seconds = {}
    for _ in range(args.repeats):  # interleaved, so load changes hit every contender alike
        for name, fn in runs.items():
            seconds[name] = min(seconds.get(name, math.inf), _timed(fn, 1))
    rows = []
    base = seconds["ubench torch HMC"]
    for name, s in seconds.items():
        rows.append({"what": "HMC iterations per second", "contender": name, "seconds": round(s, 4),
                     "iterations_per_second": round(args.iterations / s, 3),
                     "ubench_speedup": round(s / base, 2)})
    t_torch, t_jax, threads = epoch_times(task, repeats=args.repeats)
    rows.append({"what": "SGD epoch, MLP, digits (batch 128)", "contender": "torch producer", "seconds": round(t_torch, 4)})
    rows.append({"what": "SGD epoch, MLP, digits (batch 128)", "contender": "JAX producer", "seconds": round(t_jax, 4),
                 "torch_over_jax": round(t_torch / t_jax, 2)})
    hmc_ratio = seconds["hamiltorch-style loop"] / base
    bj = seconds.get("BlackJAX hmc")
    blackjax_text = f"BlackJAX {base / bj:.2f}x ubench torch" if bj else "BlackJAX not installed"
    summary = [{"what": "torch HMC vs a hamiltorch-style loop", "workload":
                f"digits MLP 64-200-200-10, full batch N = {len(task.train)}, L = {args.leapfrog}, 1 thread",
                "result": f"{args.iterations / base:.3g} iterations/s, {hmc_ratio:.2f}x the loop; {blackjax_text}",
                "target": ">= 2x the loop", "met": bool(hmc_ratio >= 2.0)},
               {"what": "JAX producer epoch vs torch producer epoch", "workload": "digits MLP, SGD, batch 128",
                "result": f"torch {t_torch * 1e3:.1f} ms, JAX {t_jax * 1e3:.1f} ms ({t_torch / t_jax:.2f}x)",
                "target": "reported", "met": None}]
    recorder.write(rows, summary, settings={"iterations": args.iterations, "leapfrog": args.leapfrog,
                                            "step_size": step, "n_train": len(task.train), "torch_threads": threads,
                                            "repeats": args.repeats})
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
