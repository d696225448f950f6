# SPDX-License-Identifier: MIT
"""HMC and JAX producer speed on the digits MLP (issue #11 item 9), side by side in one run; with ``--ess`` the
effective sample size per second of the samplers (issue #30).

HMC iterations per second (L leapfrog steps of full-batch potential-and-gradient each, same L for all) of
- ubench's torch HMC (``producers/hmc_sampler.py`` + ``functional_call`` on a flat vector, L gradients per
  iteration), eager and with ``compile=True``,
- a hamiltorch-style loop: hamiltorch's ``sample_model`` for plain HMC re-implemented step for step (hamiltorch is
  on no registry reachable here; see :func:`hamiltorch_style`): L + 1 gradients and two forward passes per
  iteration,
- BlackJAX's ``hmc`` kernel on the same MLP in JAX (jit-compiled, compile time excluded);
and the training time of one epoch of SGD on the torch and JAX producers. Ratios > 1 mean ubench torch is faster.
Times are wall and process CPU seconds (best of interleaved repeats); on the CPU the ratio against the target is
taken in CPU time, which other jobs on a shared machine disturb least. ``gemm_floor`` times the matrix products of
one gradient alone: the loop's time over L times that floor bounds any float32 speed-up of the same computation.

``--device cuda`` puts the model, the data and every torch contender on the GPU, and every timed region ends with
``torch.cuda.synchronize()`` (JAX's with ``block_until_ready``), so wall times are the GPU's. The host process's
CPU time says little there (it includes the busy-wait of each synchronisation): the ratio against the target is
taken in wall time, and ``gemm_floor`` times the products on the GPU in wall time, synchronised. JAX stays on its
default backend (the GPU when its CUDA plugin is installed; ``settings.jax_backend`` records which) with full
float32 matrix products like torch's default (JAX's GPU default would round them to TF32), and does not pre-allocate
the GPU's memory. On the CPU JAX is pinned to the CPU and one thread.

    python bench/bench_hmc.py [--device cpu|cuda] [--iterations 30] [--leapfrog 40] [--threads 1]
    python bench/bench_hmc.py --ess [--ess-targets softmax,mlp] [--warmup 500] [--draws 500]
    python bench/bench_hmc.py --default-run [--members M --set KEY=VALUE ...]

``--ess`` runs one chain of each sampler on the digits softmax regression and the digits MLP (the producer's
posterior, prior precision 100) and reports bulk ESS (``ubench.metrics.diagnostics``) of the log-posterior and of
the predictive probability of the true label on 100 probe test images, per second (wall and CPU, warm-up
included) and per 1000 gradients: torch HMC with the URSABench preset (the old defaults: scalar mass, fixed
trajectory), torch HMC with the new defaults (Stan's windowed diagonal mass, jittered trajectory length), torch
NUTS, and BlackJAX's NUTS after its ``window_adaptation`` (jit-compiled ahead of the clock). It writes
bench/results/bench_hmc_ess.json after every chain (``settings.complete`` false until the last).

``--default-run`` runs ``ubench produce hmc --dataset digits`` with the producer's defaults (its library entry point,
torch one thread), times it and judges the archive's own diagnostics by ``compare --reference-posterior``'s bar
(split-R-hat <= 1.05, bulk ESS >= 100 on the log-posterior and every probe sample): bench_hmc_default.json.

Writes bench/results/bench_hmc.json, or bench_hmc_cuda.json with ``--device cuda`` (``bench/_results.py``);
``bench/render.py`` puts them in the README. A contender that cannot run (BlackJAX not installed, ``torch.compile``
or JAX failing on the machine) is skipped with its reason in ``settings.skipped``; the run goes on.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import traceback
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import Recorder  # noqa: E402


def _no_sync() -> None:
    pass


def device_sync(device: str):
    """What ends a timed region on ``device``: ``torch.cuda.synchronize`` on CUDA (the kernels queued by the region
    have finished), nothing on the CPU."""
    if device == "cuda":
        import torch

        return torch.cuda.synchronize
    return _no_sync


def _timed(fn, repeats: int, sync=_no_sync) -> float:
    """Best of ``repeats`` wall times of ``fn()``, each ended by ``sync()``."""
    best = math.inf
    for _ in range(repeats):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t)
    return best


def _timed_both(fn, sync=_no_sync) -> tuple[float, float]:
    """Wall and process CPU seconds of one ``fn()`` ended by ``sync()`` (CPU time is what other jobs on a shared
    machine disturb least)."""
    sync()
    w, c = time.perf_counter(), time.process_time()
    fn()
    sync()
    return time.perf_counter() - w, time.process_time() - c


def gemm_floor(model, x, *, repeats: int, device: str = "cpu") -> float:
    """Seconds of the matrix products alone in one forward and backward pass of the MLP on ``x``: the three
    ``addmm`` of the forward, and the weight gradients and hidden-layer input gradients of the backward (no input
    gradient for the first layer), on tensors of the same shapes. No implementation of the same computation in
    float32 can evaluate a gradient faster than this. CPU seconds on the CPU; on CUDA the products run on the GPU
    (where ``model`` and ``x`` are) and the time is wall, from a synchronisation to a synchronisation."""
    import torch

    cuda = device == "cuda"
    sync = device_sync(device)
    clock = time.perf_counter if cuda else time.process_time

    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    h = [x.reshape(len(x), -1).contiguous()]
    for lin in linears:
        h.append(torch.relu(torch.nn.functional.linear(h[-1], lin.weight.detach(), lin.bias.detach())))
    deltas = [torch.randn_like(a) for a in h[1:]]

    def products():
        for a, lin in zip(h[:-1], linears):
            torch.addmm(lin.bias.detach(), a, lin.weight.detach().t())
        for i, (a, d, lin) in enumerate(zip(h[:-1], deltas, linears)):
            torch.mm(d.t(), a)
            if i > 0:
                torch.mm(d, lin.weight.detach())

    products()
    best = math.inf
    for _ in range(repeats):
        sync()
        c = clock()
        for _ in range(20):
            products()
        sync()
        best = min(best, (clock() - c) / 20)
    return best


def torch_setup(task, seed=0, device="cpu"):
    """The MLP (initialised on the CPU from ``seed``, so the same weights on every device) and the full training set,
    on ``device``."""
    import torch

    from ubench.producers.models import build_model

    torch.manual_seed(seed)
    model = build_model("mlp", task.input_shape, task.n_classes, mean=task.mean, std=task.std, dropout="none", p=0.0)
    dev = torch.device(device)
    x = torch.from_numpy(task.train.images).to(dev)
    y = torch.from_numpy(task.train.labels).to(dev)
    return model.to(dev), x, y


def ubench_hmc(model, x, y, *, iterations, leapfrog, step, compile=False):
    import torch

    from ubench.producers.hmc import log_posterior_fn
    from ubench.producers.hmc_sampler import HMCState, hmc_transition

    target = log_posterior_fn(model, x, y, prior_precision=100.0, compile=compile)
    theta = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    # The producer's generator: a CPU one, whose draws hmc_transition moves to theta's device.
    gen = torch.Generator().manual_seed(0)
    target(theta)  # compile (compile=True) or warm up (eager: CUDA's kernels and handles) outside the timed runs

    def run():
        state = HMCState.at(theta, target)
        for _ in range(iterations):
            state, _ = hmc_transition(state, target, step_size=step, n_steps=leapfrog, mass=0.19, generator=gen)

    return run


def hamiltorch_style(model, x, y, *, iterations, leapfrog, step):
    """hamiltorch's ``sample_model`` for plain HMC (``samplers.py``: ``define_model_log_prob``, ``gibbs``,
    ``hamiltonian``, ``leapfrog``, ``sample``; github.com/AdamCobb/hamiltorch, master), step for step:

    - ``log_prob_func`` slices the flat vector into views per parameter, sums ``Normal(0, tau**-0.5).log_prob`` of
      each layer's slice (inside autograd) and calls the model functionally (hamiltorch's ``make_functional``; here
      ``functional_call``, the same views, no copies) with ``CrossEntropyLoss(reduction="sum")``;
    - every iteration: momentum from ``Normal(0, mass**0.5)``; the Hamiltonian at the start evaluates
      ``log_prob_func`` again (a forward pass, plus ``has_nan_or_inf``'s host syncs); the leapfrog evaluates the
      gradient at the start point (L + 1 gradients per trajectory), keeps a clone of every intermediate position
      and momentum; the Hamiltonian at the end point is another forward pass; accept if
      ``min(0, H0 - H1) >= log(u)``.
    """
    import torch
    import torch.nn.functional as F
    from torch.func import functional_call

    names = [n for n, _ in model.named_parameters()]
    shapes = [p.shape for _, p in model.named_parameters()]
    sizes = [p.numel() for _, p in model.named_parameters()]
    buffers = dict(model.named_buffers())
    theta0 = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    device = theta0.device
    priors = [torch.distributions.Normal(torch.zeros((), device=device), torch.tensor(100.0, device=device) ** -0.5)
              for _ in sizes]
    mass = torch.full_like(theta0, 0.19)
    inv_mass = 1.0 / mass

    def log_prob_func(params):
        views = params.split(sizes)
        l_prior = torch.zeros_like(params[0], requires_grad=True)
        for w, dist in zip(views, priors):
            l_prior = dist.log_prob(w).sum() + l_prior
        output = functional_call(model, {**{n: v.view(s) for n, v, s in zip(names, views, shapes)}, **buffers},
                                 (x,))
        return -F.cross_entropy(output, y, reduction="sum") + l_prior

    def has_nan_or_inf(value):
        value = torch.sum(value)
        return int(torch.isnan(value)) > 0 or int(torch.isinf(value)) > 0

    def hamiltonian(params, momentum):
        log_prob = log_prob_func(params)
        if has_nan_or_inf(log_prob):
            raise FloatingPointError
        return -log_prob + 0.5 * torch.dot(momentum, inv_mass * momentum)

    def params_grad(p):
        p = p.detach().requires_grad_()
        return torch.autograd.grad(log_prob_func(p), p)[0]

    def leapfrog_(params, momentum):
        params, momentum = params.clone(), momentum.clone()
        ret_params, ret_momenta = [], []
        momentum += 0.5 * step * params_grad(params)
        for _ in range(leapfrog):
            params = params + step * inv_mass * momentum
            p_grad = params_grad(params)
            momentum += step * p_grad
            ret_params.append(params.clone())
            ret_momenta.append(momentum.clone())
        ret_momenta[-1] = ret_momenta[-1] - 0.5 * step * p_grad.clone()
        return ret_params, ret_momenta

    # hamiltorch draws momenta and the acceptance uniform on the parameters' device: a generator there.
    gen = torch.Generator(device=device).manual_seed(0)
    params_grad(theta0)  # warm up (CUDA's kernels and handles) outside the timed runs, as for the other contenders

    def run():
        params = theta0.clone().requires_grad_()
        for _ in range(iterations):
            momentum = torch.randn(params.shape, generator=gen, device=device) * mass ** 0.5
            ham = hamiltonian(params, momentum)
            lp, lm = leapfrog_(params, momentum)
            proposal = lp[-1].detach().requires_grad_()
            new_ham = hamiltonian(proposal, lm[-1])
            rho = min(0.0, float(-new_ham + ham))
            if rho >= math.log(float(torch.rand((), generator=gen, device=device))):
                params = proposal

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


def torch_epoch_time(task, *, repeats, device="cpu"):
    """Seconds of one SGD epoch of the MLP (batch 128) in the torch trainer on ``device`` (``RunSettings.device``)."""
    from ubench.producers.sgd import SGDPointEstimate
    from ubench.producers.torch_trainer import RunSettings, TrainContext, train_epoch

    method = SGDPointEstimate(dict(SGDPointEstimate.defaults), n_members=1, n_train=len(task.train))
    ctx = TrainContext.create(task, RunSettings(model="mlp", members=1, seed=0, device=device))
    model = ctx.new_model(method, 0)
    opt = method.make_optimizer(model)
    sync = device_sync(device)
    train_epoch(model, opt, method, ctx, epoch=1, seed=0)  # warm up (on CUDA: kernels and handles)
    sync()
    return _timed(lambda: train_epoch(model, opt, method, ctx, epoch=1, seed=0), repeats, sync)


def jax_epoch_time(task, *, repeats):
    """One SGD epoch of the MLP (batch 128) in the JAX trainer, on JAX's default device; compile excluded."""
    import tempfile

    import jax

    from ubench.producers.jax.train import train_run
    from ubench.producers.sgd import SGDPointEstimate

    hp = {**SGDPointEstimate.defaults, "epochs": 1}
    x, y = task.train.images, task.train.labels.astype(np.int32)

    def jax_epoch():
        with tempfile.TemporaryDirectory() as d:
            params, _, _ = train_run(hp, x=x, y=y, n_classes=task.n_classes, mean=task.mean, std=task.std, seed=0,
                                     batch_size=128, checkpoint=Path(d) / "c.npz")
            jax.block_until_ready(params)

    jax_epoch()  # compile
    return _timed(jax_epoch, repeats)


# -- ESS per second (issue #30) -----------------------------------------------------------------------------------
#: The posteriors the ESS section samples: (label, hidden layers, prior precision). The MLP is the producer's
#: network and prior; the softmax regression is the same code with no hidden layer (64 x 10 + 10 weights).
ESS_TARGETS = {"mlp": ("digits MLP 64-200-200-10", (200, 200), 100.0),
               "softmax": ("digits softmax regression", (), 1.0)}


def _ess_summary(lp: np.ndarray, probe: np.ndarray) -> dict:
    """Bulk ESS and split-R-hat (one chain; ``ubench.metrics.diagnostics``, pinned to ArviZ) of the log-posterior
    draws and of each probe sample's p(label) draws: the probe's minimum and median ESS and maximum R-hat."""
    from ubench.metrics.diagnostics import bulk_ess, split_rhat

    ess = np.array([bulk_ess(probe[None, :, i]) for i in range(probe.shape[1]) if np.ptp(probe[:, i]) > 0])
    rhat = np.array([split_rhat(probe[None, :, i]) for i in range(probe.shape[1]) if np.ptp(probe[:, i]) > 0])
    return {"lp_ess": round(bulk_ess(lp[None]), 1), "lp_rhat": round(split_rhat(lp[None]), 4),
            "probe_ess_min": round(float(np.min(ess)), 1), "probe_ess_median": round(float(np.median(ess)), 1),
            "probe_rhat_max": round(float(np.max(rhat)), 4)}


def torch_ess_run(task, hidden, tau, settings, *, draws, init="prior", seed=0):
    """One chain of :func:`ubench.producers.hmc_chain.run_chain` on the posterior of the MLP with ``hidden`` layers,
    from a draw of the prior (``init="prior"``, the producer's default) or the network's initialisation
    (``"model"``, the URSABench preset's): wall and CPU seconds of warm-up plus sampling, leapfrog steps, the
    log-posterior and the probe's p(label) per draw."""
    import torch
    from torch.func import functional_call

    from ubench.producers.hmc import log_posterior_fn
    from ubench.producers.hmc_chain import run_chain
    from ubench.producers.models import MLP

    torch.manual_seed(seed)
    model = MLP(task.input_shape, task.n_classes, mean=task.mean, std=task.std, hidden=hidden)
    x, y = torch.from_numpy(task.train.images), torch.from_numpy(task.train.labels)
    target = log_posterior_fn(model, x, y, prior_precision=tau)
    theta0 = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    if init == "prior":
        theta0 = torch.randn(theta0.shape, generator=torch.Generator().manual_seed(seed)) / tau ** 0.5
    w, c = time.perf_counter(), time.process_time()
    samples, steps = run_chain(target, theta0, settings, n_draws=draws, seed=seed)
    wall, cpu = time.perf_counter() - w, time.process_time() - c
    probe_x = torch.from_numpy(task.splits["test"].images[:100])
    probe_y = task.splits["test"].labels[:100]
    names = [n for n, _ in model.named_parameters()]
    shapes = [p.shape for _, p in model.named_parameters()]
    sizes = [p.numel() for _, p in model.named_parameters()]
    lp = [-float(target(theta)[0]) for theta in samples]  # the target differentiates: outside no_grad
    probe = []
    with torch.no_grad():
        for theta in samples:
            params = {n: v.view(s) for n, v, s in zip(names, theta.split(sizes), shapes)}
            logits = functional_call(model, {**params, **dict(model.named_buffers())}, (probe_x,))
            probs = torch.softmax(logits.double(), 1)
            probe.append(probs.numpy()[np.arange(100), probe_y])
    return {"wall": wall, "cpu": cpu, "gradients": int(sum(s.n_steps for s in steps)),
            "divergences": int(sum(s.divergent for s in steps[settings.burn_in:])),
            "step_size": steps[-1].step_size,
            "mean_steps": float(np.mean([s.n_steps for s in steps[settings.burn_in:]])),
            "accept": float(np.mean([s.accept_prob for s in steps[settings.burn_in:]])),
            **_ess_summary(np.array(lp), np.array(probe))}


def blackjax_nuts_ess_run(task, hidden, tau, *, warmup, draws, max_depth=10, seed=0):
    """BlackJAX's ``window_adaptation`` (Stan's schedule, diagonal mass) then ``nuts`` on the same posterior in
    JAX from a draw of the prior; both jit-compiled ahead of the clock (compile time excluded)."""
    import blackjax
    import jax
    import jax.numpy as jnp
    from jax.flatten_util import ravel_pytree

    from ubench.producers.jax.hmc import log_posterior
    from ubench.producers.jax.mlp import init_mlp, mlp_logits

    params = init_mlp(jax.random.key(seed), int(np.prod(task.input_shape)), task.n_classes, hidden=hidden)
    theta0, unravel = ravel_pytree(params)
    theta0 = jax.random.normal(jax.random.key(seed + 2), theta0.shape, theta0.dtype) / tau ** 0.5  # a prior draw
    logdensity = log_posterior(unravel, jnp.asarray(task.train.images), jnp.asarray(task.train.labels),
                               task.mean, task.std, tau)
    adapt = blackjax.window_adaptation(blackjax.nuts, logdensity, max_num_doublings=max_depth)
    key_warm, key_run = jax.random.split(jax.random.key(seed + 1))
    warm = jax.jit(lambda k, x: adapt.run(k, x, num_steps=warmup)).lower(key_warm, theta0).compile()

    def sample(state, step_size, inverse_mass, key):
        kernel = blackjax.nuts(logdensity, step_size=step_size, inverse_mass_matrix=inverse_mass,
                               max_num_doublings=max_depth)

        def one(s, k):
            s, info = kernel.step(k, s)
            return s, (s.position, s.logdensity, info.num_integration_steps, info.is_divergent,
                       info.acceptance_rate)

        return jax.lax.scan(one, state, jax.random.split(key, draws))[1]

    w, c = time.perf_counter(), time.process_time()
    (state, parameters), warm_info = warm(key_warm, theta0)
    jax.block_until_ready(state)
    wall_warm, cpu_warm = time.perf_counter() - w, time.process_time() - c
    compiled = jax.jit(sample).lower(state, parameters["step_size"], parameters["inverse_mass_matrix"],
                                     key_run).compile()
    w, c = time.perf_counter(), time.process_time()
    positions, lp, steps, divergent, accept = jax.block_until_ready(
        compiled(state, parameters["step_size"], parameters["inverse_mass_matrix"], key_run))
    wall, cpu = wall_warm + time.perf_counter() - w, cpu_warm + time.process_time() - c
    probe_x = jnp.asarray(task.splits["test"].images[:100])
    probe_y = task.splits["test"].labels[:100]
    logits = jax.vmap(lambda t: mlp_logits(unravel(t), probe_x, task.mean, task.std))(positions)
    probs = np.asarray(jax.nn.softmax(logits.astype(jnp.float64) if jax.config.jax_enable_x64 else logits), np.float64)
    warm_steps = int(np.sum(np.asarray(warm_info.info.num_integration_steps)))
    return {"wall": wall, "cpu": cpu, "gradients": warm_steps + int(np.sum(np.asarray(steps))),
            "divergences": int(np.sum(np.asarray(divergent))), "step_size": float(parameters["step_size"]),
            "mean_steps": float(np.mean(np.asarray(steps))), "accept": float(np.mean(np.asarray(accept))),
            **_ess_summary(np.asarray(lp, np.float64), probs[:, np.arange(100), probe_y])}


def ess_section(task, *, targets, warmup, draws, skipped: dict, checkpoint=None) -> tuple[list[dict], list[dict]]:
    """ESS per second of torch HMC (the URSABench preset, issue #30's "old", and the new default), BlackJAX NUTS and
    torch NUTS on each target, one chain each of ``warmup`` + ``draws`` iterations. ``checkpoint(rows, summary)``
    is called after every chain (a run cut short keeps what it measured)."""
    from ubench.producers.hmc import HMC, URSABENCH_PRESET
    from ubench.producers.hmc_chain import ChainSettings

    rows, summary = [], []
    for key in targets:
        label, hidden, tau = ESS_TARGETS[key]
        new = {**HMC.defaults, "burn_in": warmup}
        old = ChainSettings.from_hyperparameters({**HMC.defaults, **URSABENCH_PRESET, "burn_in": warmup},
                                                 mass=URSABENCH_PRESET["mass"])
        default = ChainSettings.from_hyperparameters(new, mass=tau)
        nuts = ChainSettings.from_hyperparameters({**new, "sampler": "nuts"}, mass=tau)
        contenders = {  # the cheapest first: on a busy machine torch NUTS on the MLP is the one a cut leaves out
            "torch HMC, URSABench preset (old)": lambda: torch_ess_run(task, hidden, tau, old, draws=draws,
                                                                       init=URSABENCH_PRESET["init"]),
            "torch HMC (default)": lambda: torch_ess_run(task, hidden, tau, default, draws=draws),
            "BlackJAX NUTS": lambda: blackjax_nuts_ess_run(task, hidden, tau, warmup=warmup, draws=draws),
            "torch NUTS": lambda: torch_ess_run(task, hidden, tau, nuts, draws=draws),
        }
        results = {}
        for name, run in contenders.items():
            _say(f"ESS: {label}, {name}: {warmup} warm-up + {draws} draws ...")
            r = _soft(f"{key}: {name}", run, skipped) if name == "BlackJAX NUTS" else run()
            if r is None:
                continue
            results[name] = r
            row = {"what": "ESS per second", "target": label, "contender": name, "warmup": warmup, "draws": draws,
                   **{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()},
                   "lp_ess_per_second": round(r["lp_ess"] / r["wall"], 4),
                   "probe_ess_min_per_second": round(r["probe_ess_min"] / r["wall"], 4),
                   "lp_ess_per_cpu_second": round(r["lp_ess"] / r["cpu"], 4),
                   "lp_ess_per_1000_gradients": round(1000 * r["lp_ess"] / r["gradients"], 3)}
            rows.append(row)
            _say(f"  {row}")
            if checkpoint is not None:
                checkpoint(rows, summary + _ess_summary_lines(label, results, warmup, draws))
        summary += _ess_summary_lines(label, results, warmup, draws)
    return rows, summary


def _ess_summary_lines(label: str, results: dict, warmup: int, draws: int) -> list[dict]:
    """The summary of one target: every contender's log-posterior ESS per CPU second, where its chain passes
    compare's R-hat bar (an unconverged chain's ESS estimate means nothing: it is named so instead). Whether the
    producer's default run converges is ``--default-run``'s verdict (its members are thinned; these chains are not)."""
    def one(name: str, r: dict) -> str:
        detail = (f"{r['lp_ess']:.0f} ESS, R-hat {r['lp_rhat']:.3f}, probe ESS min {r['probe_ess_min']:.0f}, "
                  f"R-hat max {r['probe_rhat_max']:.3f}")
        if max(r["lp_rhat"], r["probe_rhat_max"]) > 1.05:
            return f"{name}: unconverged ({detail})"
        return f"{name}: {r['lp_ess'] / r['cpu']:.3g} lp-ESS/CPU s ({detail})"

    return [{"what": f"ESS per second, {label}", "workload": f"one chain each, {warmup} warm-up + {draws} draws "
             "(thin 1), log-posterior and 100 probe p(label) (torch 1 thread, JAX 1 thread)",
             "result": "; ".join(one(n, r) for n, r in results.items()), "target": "reported", "met": None}]


def default_run_section(task, *, threads: int, members: int | None, hyper: dict, seed: int = 0):
    """``ubench produce hmc --dataset digits`` with the producer's defaults (issue #30 item 1: they must converge),
    through its library entry point into a temporary directory: wall and CPU time of the whole run (scoring of the
    splits included), and the archive's own ``/diagnostics`` judged by ``compare``'s bar
    (:func:`ubench.scoring.posterior_agreement.convergence_problems`). ``members``/``hyper`` shrink it for a smoke
    run (then the JSON says so and the line has no verdict)."""
    import tempfile

    from ubench.producers.archive_run import produce_archive
    from ubench.producers.hmc import HMC
    from ubench.producers.torch_trainer import RunSettings
    from ubench.scoring.posterior_agreement import MAX_RHAT, MIN_ESS, convergence_problems, reference_diagnostics

    n = members or HMC.default_members
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "hmc.h5"
        _say(f"default run: produce hmc on digits, {n} members, {hyper or 'the defaults'} ...")
        w, c = time.perf_counter(), time.process_time()
        produce_archive("hmc", task, out, hyper=hyper, threads=threads,
                        settings=RunSettings(model="mlp", members=n, seed=seed))
        wall, cpu = time.perf_counter() - w, time.process_time() - c
        diagnostics = reference_diagnostics(out)
    problems = convergence_problems(diagnostics)
    lp, probe = (diagnostics or {}).get("log_posterior") or {}, (diagnostics or {}).get("probe") or {}
    def finite(v):  # strict JSON: a NaN R-hat (too few draws) is recorded as null
        return v if isinstance(v, (int, float)) and math.isfinite(v) else None

    row = {"what": "default hmc run", "members": n, "overrides": hyper, "chains": (diagnostics or {}).get("chains"),
           "wall": round(wall, 1), "cpu": round(cpu, 1), "lp_rhat": finite(lp.get("rhat")),
           "lp_ess": finite(lp.get("ess_bulk")), "probe_rhat_max": finite(probe.get("rhat_max")),
           "probe_ess_min": finite(probe.get("ess_bulk_min")), "problems": "; ".join(problems) or None}
    _say(f"  {row}")
    smoke = bool(hyper) or members is not None
    summary = [{"what": "default `produce hmc` converges, digits MLP" + (" (smoke run)" if smoke else ""),
                "workload": f"{n} members" + (f", {hyper}" if hyper else ", the defaults") + f", torch {threads} "
                            "thread(s), archive written",
                "result": f"log-posterior R-hat {_num(lp.get('rhat'), '.3f')}, bulk ESS "
                          f"{_num(lp.get('ess_bulk'), '.0f')}; "
                          f"probe R-hat max {_num(probe.get('rhat_max'), '.3f')}, ESS min "
                          f"{_num(probe.get('ess_bulk_min'), '.0f')}; {wall / 60:.1f} min wall, {cpu / 60:.1f} min CPU",
                "target": f"R-hat <= {MAX_RHAT}, bulk ESS >= {MIN_ESS:g}",
                "met": None if smoke else not problems}]
    return [row], summary


def _num(v, fmt: str) -> str:
    return format(v, fmt) if isinstance(v, (int, float)) else "n/a"


def _say(text: str) -> None:
    print(text, flush=True)


def _soft(name: str, fn, skipped: dict):
    """``fn()``, or None with the reason in ``skipped[name]`` (and the traceback on stderr) when it raises: a
    contender that cannot run on this machine must not cost the others' figures."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - whatever broke, the run goes on without it
        if not isinstance(exc, ImportError):  # a missing package needs no traceback
            traceback.print_exc()
        skipped[name] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        _say(f"{name} skipped: {skipped[name]}")
        return None


def configure_jax(device: str) -> None:
    """Before JAX is imported. CPU: JAX on the CPU, one thread (like torch's ``--threads 1``). CUDA: JAX's default
    backend (its GPU when the CUDA plugin is installed), no pre-allocation of 75% of the GPU's memory beside torch."""
    if device == "cpu":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
    else:
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def jax_settings(device: str) -> dict:
    """JAX's backend (None when JAX cannot start). On CUDA also its float32 matmul precision, set to full float32
    like torch's default (``torch.get_float32_matmul_precision() == "highest"``): JAX's GPU default rounds the
    products to TF32 on recent GPUs, which would time a less precise computation."""
    def reason(exc: Exception) -> str:
        return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]

    try:
        import jax

        info = {"jax_backend": jax.default_backend()}
    except Exception as exc:  # noqa: BLE001 - JAX missing or its plugin broken: the torch contenders still run
        return {"jax_backend": None, "jax_error": reason(exc)}
    if device == "cuda":
        info["jax_devices"] = [str(d) for d in jax.devices()]
        try:
            jax.config.update("jax_default_matmul_precision", "highest")
            info["jax_matmul_precision"] = "highest"
        except Exception as exc:  # noqa: BLE001 - an older or newer JAX without the option: say so, run on
            info["jax_matmul_precision"] = f"default (setting highest failed: {reason(exc)})"
    return info


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="where the model, the data and the torch contenders run (default cpu); cuda writes "
                         "bench_hmc_cuda.json")
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--leapfrog", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ess", action="store_true",
                    help="run the ESS-per-second section instead (writes bench_hmc_ess.json; CPU only)")
    ap.add_argument("--ess-targets", default="softmax,mlp", help="comma-separated: softmax, mlp")
    ap.add_argument("--warmup", type=int, default=500, help="ESS section: warm-up iterations of every chain")
    ap.add_argument("--draws", type=int, default=500, help="ESS section: draws kept (thin 1) of every chain")
    ap.add_argument("--default-run", action="store_true",
                    help="run `produce hmc --dataset digits` with its defaults instead and judge its diagnostics "
                         "(writes bench_hmc_default.json; CPU only)")
    ap.add_argument("--members", type=int, default=None, help="--default-run: fewer members (a smoke run)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="--default-run: a hyperparameter override (a smoke run)")
    args = ap.parse_args()
    device = args.device
    cuda = device == "cuda"
    # hamiltorch's acceptance takes float() of a tensor that requires grad; the warning is not news
    warnings.filterwarnings("ignore", message="Converting a tensor with requires_grad=True")
    configure_jax(device)
    import torch

    from ubench.producers.task import build_task

    if args.ess:
        if cuda:
            raise SystemExit("--ess runs on the CPU (the 2-core machine the reference posterior must converge on)")
        torch.set_num_threads(args.threads)
        targets = [t.strip() for t in args.ess_targets.split(",") if t.strip()]
        unknown = sorted(set(targets) - set(ESS_TARGETS))
        if unknown:
            raise SystemExit(f"--ess-targets: unknown {', '.join(unknown)}; known: {', '.join(ESS_TARGETS)}")
        recorder = Recorder(__file__, "jax", "blackjax", name="bench_hmc_ess")
        skipped: dict[str, str] = {}
        settings = {"warmup": args.warmup, "draws": args.draws, "targets": targets,
                    "torch_threads": torch.get_num_threads(), **jax_settings("cpu")}

        def write(rows, summary, *, complete=False):  # after every chain: "complete" false until the last
            recorder.write(rows, summary, settings={**settings, "complete": complete,
                                                    **({"skipped": skipped} if skipped else {})})

        rows, summary = ess_section(build_task("digits", shift_kinds=()), targets=targets, warmup=args.warmup,
                                    draws=args.draws, skipped=skipped, checkpoint=write)
        write(rows, summary, complete=True)
        return

    if args.default_run:
        if cuda:
            raise SystemExit("--default-run runs on the CPU (the 2-core machine the reference posterior must "
                             "converge on)")
        hyper = {}  # strings, as `ubench produce --set` passes them (the method coerces and checks them)
        for item in args.overrides:
            key, sep, value = item.partition("=")
            if not sep:
                raise SystemExit(f"--set {item!r}: expected KEY=VALUE")
            hyper[key.strip()] = value.strip()
        recorder = Recorder(__file__, name="bench_hmc_default")
        rows, summary = default_run_section(build_task("digits"), threads=args.threads, members=args.members,
                                            hyper=hyper)
        recorder.write(rows, summary, settings={"torch_threads": args.threads, "members": args.members,
                                                "overrides": hyper})
        return

    if cuda and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device")
    torch.set_num_threads(args.threads)
    sync = device_sync(device)
    gpu = torch.cuda.get_device_name(0) if cuda else None
    task = build_task("digits", shift_kinds=())
    recorder = Recorder(__file__, "jax", "blackjax", "optax", name="bench_hmc_cuda" if cuda else None,
                        note=None if not cuda else f"GPU machine ({gpu}), lent for this run; see load")
    jax_info = jax_settings(device)
    _say(f"device {device}{f' ({gpu})' if gpu else ''}; JAX backend {jax_info['jax_backend']}")
    model, x, y = torch_setup(task, device=device)
    step = 2e-4
    kw = dict(iterations=args.iterations, leapfrog=args.leapfrog, step=step)
    skipped: dict[str, str] = {}
    runs = {}
    setups = [("ubench torch HMC", lambda: ubench_hmc(model, x, y, **kw)),
              ("ubench torch HMC, compile=True", lambda: ubench_hmc(model, x, y, compile=True, **kw)),
              ("hamiltorch-style loop", lambda: hamiltorch_style(model, x, y, **kw)),
              ("BlackJAX hmc", lambda: blackjax_hmc(task, **kw))]
    for name, setup in setups:
        _say(f"setting up {name} ...")
        t = time.perf_counter()
        if name in ("ubench torch HMC", "hamiltorch-style loop"):  # the verdict's two: they must run
            runs[name] = setup()
        elif (fn := _soft(name, setup, skipped)) is not None:  # may be missing or broken on this machine
            runs[name] = fn
        else:
            continue
        sync()
        _say(f"  ready in {time.perf_counter() - t:.1f} s (compile and warm-up, not timed)")
    wall, cpu = {}, {}
    for r in range(args.repeats):  # interleaved, so load changes hit every contender alike
        for name, fn in runs.items():
            w, c = _timed_both(fn, sync)
            wall[name], cpu[name] = min(wall.get(name, math.inf), w), min(cpu.get(name, math.inf), c)
            _say(f"repeat {r + 1}/{args.repeats}: {name}: {w:.3f} s wall, {c:.3f} s CPU "
                 f"({args.iterations / w:.3g} iterations/s)")
    rows = []
    base = "ubench torch HMC, compile=True" if "ubench torch HMC, compile=True" in runs else "ubench torch HMC"
    # the verdict's clock: CPU time on the CPU (least disturbed by other jobs), wall time on the GPU
    verdict = wall if cuda else cpu
    clock = "wall" if cuda else "CPU"
    for name in runs:
        rows.append({"what": "HMC iterations per second", "contender": name, "seconds": round(wall[name], 4),
                     "cpu_seconds": round(cpu[name], 4),
                     "iterations_per_second": round(args.iterations / wall[name], 3),
                     "ubench_speedup": round(wall[name] / wall[base], 2),
                     "ubench_speedup_cpu": round(cpu[name] / cpu[base], 2)})
    _say("gemm floor ...")
    floor = gemm_floor(model, x, repeats=max(args.repeats, 5), device=device)
    grads = {"ubench torch HMC": args.leapfrog, "ubench torch HMC, compile=True": args.leapfrog,
             "hamiltorch-style loop": args.leapfrog + 1}
    for name, n in grads.items():
        if name not in runs:
            continue
        key = "wall_ms" if cuda else "cpu_ms"
        rows.append({"what": f"per gradient evaluation ({clock} ms)", "contender": name,
                     key: round(verdict[name] / (args.iterations * n) * 1e3, 3),
                     f"gemm_floor_{key}": round(floor * 1e3, 3), "gradients_per_iteration": n})
    _say("SGD epoch, torch producer ...")
    t_torch = _soft("torch producer epoch", lambda: torch_epoch_time(task, repeats=args.repeats, device=device),
                    skipped)
    if t_torch is not None:
        rows.append({"what": "SGD epoch, MLP, digits (batch 128)", "contender": "torch producer",
                     "seconds": round(t_torch, 4)})
    _say("SGD epoch, JAX producer ...")
    t_jax = _soft("JAX producer epoch", lambda: jax_epoch_time(task, repeats=args.repeats), skipped)
    if t_jax is not None:
        rows.append({"what": "SGD epoch, MLP, digits (batch 128)", "contender": "JAX producer",
                     "seconds": round(t_jax, 4),
                     "torch_over_jax": round(t_torch / t_jax, 2) if t_torch is not None else None})
    loop = "hamiltorch-style loop"
    ratio_wall = wall[loop] / wall[base]
    ratio_cpu = cpu[loop] / cpu[base]
    ratio = ratio_wall if cuda else ratio_cpu
    ratio_eager = verdict[loop] / verdict["ubench torch HMC"]
    bound = verdict[loop] / (args.iterations * args.leapfrog * floor)
    bj = verdict.get("BlackJAX hmc")
    blackjax_text = (f"BlackJAX {verdict[base] / bj:.2f}x ubench torch{' in wall time' if cuda else ''}" if bj
                     else f"BlackJAX skipped ({skipped.get('BlackJAX hmc', 'not run')})")
    base_text = "" if base.endswith("compile=True") else " (compile=True skipped: eager)"
    if cuda:
        workload = (f"digits MLP 64-200-200-10, full batch N = {len(task.train)}, L = {args.leapfrog}, "
                    f"CUDA on {gpu}")
        result = (f"{args.iterations / wall[base]:.3g} iterations/s{base_text}, {ratio_wall:.2f}x the loop in wall "
                  f"time (the verdict's clock on the GPU; CPU time {ratio_cpu:.2f}x, host only; eager "
                  f"{ratio_eager:.2f}x wall); bound by the matrix products on the GPU (wall, synchronised): at most "
                  f"{bound:.2f}x with no time outside them; {blackjax_text} (JAX backend {jax_info['jax_backend']})")
    else:
        workload = (f"digits MLP 64-200-200-10, full batch N = {len(task.train)}, L = {args.leapfrog}, "
                    f"{args.threads} thread{'s' if args.threads != 1 else ''}")
        result = (f"{args.iterations / wall[base]:.3g} iterations/s{base_text}, {ratio_cpu:.2f}x the loop in CPU "
                  f"time ({ratio_wall:.2f}x wall; eager {ratio_eager:.2f}x); bound by the matrix products: at most "
                  f"{bound:.2f}x with no time outside them; {blackjax_text}")
    where = f" on {gpu} (JAX backend {jax_info['jax_backend']})" if cuda else ""
    if t_torch is not None and t_jax is not None:
        epoch_result = f"torch {t_torch * 1e3:.1f} ms, JAX {t_jax * 1e3:.1f} ms ({t_torch / t_jax:.2f}x){where}"
    else:
        epoch_result = "; ".join(f"{who} {t * 1e3:.1f} ms" if t is not None else
                                 f"{who} skipped ({skipped[f'{who} producer epoch']})"
                                 for who, t in (("torch", t_torch), ("JAX", t_jax))) + where
    summary = [{"what": "torch HMC vs a hamiltorch-style loop" + (" (CUDA)" if cuda else ""), "workload": workload,
                "result": result, "target": ">= 2x the loop", "met": bool(ratio >= 2.0)},
               {"what": "JAX producer epoch vs torch producer epoch" + (" (CUDA)" if cuda else ""),
                "workload": "digits MLP, SGD, batch 128", "result": epoch_result, "target": "reported", "met": None}]
    settings = {"iterations": args.iterations, "leapfrog": args.leapfrog, "step_size": step,
                "n_train": len(task.train), "torch_threads": torch.get_num_threads(), "repeats": args.repeats,
                "device": device,
                "verdict_clock": clock, **jax_info}
    if cuda:
        settings.update({"gpu": gpu, "torch_matmul_precision": torch.get_float32_matmul_precision(),
                         "gemm_floor": "on the GPU, wall, synchronised"})
    if skipped:
        settings["skipped"] = skipped
    recorder.write(rows, summary, settings=settings)
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
