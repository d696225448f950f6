# SPDX-License-Identifier: MIT
r"""Full-batch Hamiltonian Monte Carlo (or NUTS) on any producer model: the reference posterior.

The target is the Bayesian neural network's posterior at temperature 1,

.. math:: U(\theta) = -\log p(\theta \mid D) = \sum_{i=1}^{N} -\log \mathrm{softmax}(f_\theta(x_i))_{y_i}
          + \tfrac{\tau}{2} \lVert\theta\rVert^2 + \mathrm{const},

with the Gaussian prior of precision :math:`\tau` on every parameter, evaluated on the whole training set (use
``--train-samples`` for a subset on bigger data). The network is called through :func:`torch.func.functional_call`
on views of one flat parameter vector, so one potential-and-gradient evaluation is one forward and one backward
pass (the prior's gradient in closed form), and a transition of L leapfrog steps costs L evaluations: the end point's
potential and gradient are reused by the next transition. hamiltorch's ``sample`` spends L + 1 gradients and two
more forward passes (the Hamiltonian at both ends) per transition; ``bench/bench_hmc.py`` measures the difference.

The chain starts from a draw of the prior (``init=prior``; ``init=model`` keeps the network's initialisation)
and is :mod:`.hmc_chain`'s: Stan's warm-up during the ``burn_in`` iterations (dual-averaging step size
towards ``target_accept`` = 0.8, and a diagonal mass matrix learned in Stan's doubling windows; the mass starts at
the prior precision, ``mass`` = 0, so the first momenta have the prior's scale), then ``sampler=hmc`` with a
trajectory length ``trajectory_length`` jittered uniformly in :math:`(0, 2T]` (``jitter`` = 1), or
``--set sampler=nuts`` (:mod:`.hmc_nuts`, Stan's multinomial NUTS, ``max_tree_depth`` = 10). After burn-in one
member is kept every ``thin`` iterations (``kind = posterior_sample``); ``members/info`` records per member the
sampler, the step size, the leapfrog steps and trajectory length of its iteration, the acceptance rate over the
iterations since the previous member (the window), the last energy error, the divergences and leapfrog steps so far,
the NUTS tree depth, and the log-posterior (up to its normalising constant). Issue #30 measured the old defaults
(below) on the digits MLP: log-posterior split-R-hat 1.26 and bulk ESS 16, an unconverged reference; the defaults
here are chosen so that the default run's own diagnostics pass ``compare``'s bar (R-hat <= 1.05, bulk ESS >= 100 on
the log-posterior and on every probe sample); ``bench/bench_hmc.py --ess`` measures the samplers' ESS per second.

``--set preset=ursabench`` is URSABench's tuned HMC for its MLP-200 on MNIST
(``URSABench/hyperparams/MLP200MNIST/HMC_BO.json``: step size 2.09e-4, L = 40 leapfrog steps, prior precision
``tau`` = 100, mass 0.192, 300 iterations of which 200 burn-in, one sample per iteration after it) as ubench ran it
before issue #30: hamiltorch is called there with ``inv_mass = 1 / mass``, i.e. the momentum covariance is
``mass * I``, as here; ubench adds the dual averaging of the step size during burn-in, and keeps the trajectory
length ``step_size * L`` of the tuned run fixed, so the number of leapfrog steps follows the adapted step size (at
most ``max_leapfrog``). Values given with ``--set`` win over the preset's.

One "epoch" of the producer machinery is one HMC iteration, so burn-in, thinning, checkpoints and resumption work
as for the other trajectory methods: a killed run restarts from the last iteration's position, step-size and
mass-matrix state (the running variance of an unfinished window included) and statistics, and the iteration's
randomness comes from a generator seeded by (seed, iteration), so a resumed chain is bit-identical to an
uninterrupted one.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad_and_value
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from .hmc_chain import SAMPLERS, ChainSettings, chain_step, init_chain_state
from .hmc_sampler import HMCState
from .torch_trainer import Method, TrainContext, derive_seed

__all__ = ["HMC", "URSABENCH_PRESET", "log_posterior_fn"]

#: URSABench ``hyperparams/MLP200MNIST/HMC_BO.json``.
_URSABENCH_STEP = 0.00020897435024380684
_URSABENCH_L = 40


def log_posterior_fn(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, prior_precision: float,
                     compile: bool = False):
    """``potential_and_grad(theta)``: the potential U(theta) (float64 sum of the full-batch cross-entropy plus the
    Gaussian prior term) and its gradient, for a flat vector ``theta`` laid out as ``parameters_to_vector``.

    One forward and one backward pass of the network per call: autograd differentiates the likelihood only; the
    prior's gradient :math:`\\tau\\theta` is added in closed form and its value is accumulated in float64.
    ``compile=True`` compiles the likelihood's forward and backward pass into one graph
    (:func:`torch.compile` of :func:`torch.func.grad_and_value`: fused elementwise kernels around the matrix
    products; the chain agrees with the eager one to float tolerance, not bit for bit).
    """
    names = [n for n, _ in model.named_parameters()]
    shapes = [p.shape for _, p in model.named_parameters()]
    sizes = [p.numel() for _, p in model.named_parameters()]
    buffers = dict(model.named_buffers())
    tau = float(prior_precision)

    def nll(theta: torch.Tensor) -> torch.Tensor:
        params = {n: v.view(s) for n, v, s in zip(names, theta.split(sizes), shapes)}
        logits = functional_call(model, {**params, **buffers}, (x,))
        return F.cross_entropy(logits.double(), y, reduction="sum")

    if compile:  # one compiled graph for the forward and backward pass (no autograd engine at run time)
        compiled = torch.compile(grad_and_value(nll), dynamic=False)

        def nll_and_grad(theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            grad, value = compiled(theta)
            return value, grad
    else:
        def nll_and_grad(theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            theta = theta.detach().requires_grad_(True)
            value = nll(theta)
            (grad,) = torch.autograd.grad(value, theta)
            return value.detach(), grad

    def potential_and_grad(theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        theta = theta.detach()
        value, grad = nll_and_grad(theta)
        t64 = theta.double()
        return value + 0.5 * tau * torch.dot(t64, t64), grad.add_(theta, alpha=tau)

    return potential_and_grad


#: ``--set preset=ursabench``: URSABench's ``HMC_BO.json`` for MLP200MNIST as ubench ran it before issue #30: scalar
#: mass, a fixed trajectory length (no jitter), dual averaging of the step size during burn-in, plain HMC. 300
#: iterations of which 200 burn-in, as URSABench's ``num_samples`` / ``burn`` (one member per iteration after it).
URSABENCH_PRESET: dict[str, Any] = {
    "sampler": "hmc",
    "init": "model",
    "step_size": _URSABENCH_STEP,
    "trajectory_length": _URSABENCH_STEP * _URSABENCH_L,
    "jitter": 0.0,
    "max_leapfrog": 200,
    "prior_precision": 100.0,
    "mass": 0.1919177919626236,
    "adapt_mass": False,
    "burn_in": 200,
    "thin": 1,
}

PRESETS = ("default", "ursabench")
INITS = ("prior", "model")


class HMC(Method):
    """Full-batch HMC or NUTS with Stan's warm-up (windowed diagonal mass matrix, dual-averaging step size);
    members are thinned posterior samples."""

    name = "hmc"
    member_kind = "posterior_sample"
    shape = "trajectory"
    defaults = {
        "preset": "default",
        "sampler": "hmc",
        "init": "prior",
        "step_size": 0.01,
        "trajectory_length": 1.5,
        "jitter": 1.0,
        "max_leapfrog": 1024,
        "max_tree_depth": 10,
        "prior_precision": 100.0,
        "mass": 0.0,
        "adapt_mass": True,
        "burn_in": 500,
        "thin": 4,
        "adapt_step_size": True,
        "target_accept": 0.8,
        "compile": False,
    }
    #: 400 draws a chain: with about one effective draw per kept draw (thin 4, measured on the digits MLP) the
    #: largest split-R-hat over 100 probe samples stays below 1.05 (200 draws gave 1.067; independent draws give a
    #: median of 1.017 at 400 and 1.038 at 200).
    default_members = 400
    summary = "full-batch Hamiltonian Monte Carlo or NUTS (reference posterior)"

    def __init__(self, hyper, *, n_members, n_train):
        super().__init__(hyper, n_members=n_members, n_train=n_train)
        self._records: list[dict] = []
        self._target = None  # (model, x) it was built for, potential_and_grad
        self._state: HMCState | None = None  # the chain's current point with its potential and gradient

    @classmethod
    def resolve_hyperparameters(cls, overrides):
        """The defaults, then the preset's values (``preset=ursabench``), then ``overrides``."""
        out = super().resolve_hyperparameters(overrides)
        if out["preset"] not in PRESETS:
            raise ValueError(f"hmc: preset must be one of {', '.join(PRESETS)}; got {out['preset']!r}")
        if out["preset"] == "ursabench":
            out.update({k: v for k, v in URSABENCH_PRESET.items() if k not in overrides})
            cls.check_hyperparameters(out)
        return out

    @classmethod
    def check_hyperparameters(cls, hp):
        for key in ("step_size", "trajectory_length", "prior_precision"):
            if not hp[key] > 0:
                raise ValueError(f"hmc: {key} must be > 0; got {hp[key]}")
        if not hp["mass"] >= 0:
            raise ValueError(f"hmc: mass must be > 0, or 0 for the prior precision; got {hp['mass']}")
        if hp["init"] not in INITS:
            raise ValueError(f"hmc: init must be one of {', '.join(INITS)}; got {hp['init']!r}")
        if hp["sampler"] not in SAMPLERS:
            raise ValueError(f"hmc: sampler must be one of {', '.join(SAMPLERS)}; got {hp['sampler']!r}")
        if not 0.0 < hp["target_accept"] < 1.0:
            raise ValueError(f"hmc: target_accept must be in (0, 1); got {hp['target_accept']}")
        if not 0.0 <= hp["jitter"] <= 1.0:
            raise ValueError(f"hmc: jitter must be in [0, 1] (the length is drawn in [1 - jitter, 1 + jitter] times "
                             f"trajectory_length); got {hp['jitter']}")
        if int(hp["thin"]) < 1 or int(hp["burn_in"]) < 0 or int(hp["max_leapfrog"]) < 1:
            raise ValueError("hmc: need thin >= 1, burn_in >= 0 and max_leapfrog >= 1")
        if not 1 <= int(hp["max_tree_depth"]) <= 20:
            raise ValueError(f"hmc: max_tree_depth must be in [1, 20]; got {hp['max_tree_depth']}")

    # -- the schedule -----------------------------------------------------------------------------------------------
    def snapshot_epochs(self):
        b, thin = int(self.hp["burn_in"]), int(self.hp["thin"])
        return [b + (k + 1) * thin for k in range(self.n_members)]

    def total_epochs(self):
        return self.snapshot_epochs()[-1]

    def make_optimizer(self, model):
        return None

    def chain_settings(self) -> ChainSettings:
        """The chain's settings; ``mass`` 0 is the prior precision (the momentum has the prior's scale)."""
        return ChainSettings.from_hyperparameters(
            self.hp, mass=float(self.hp["mass"]) or float(self.hp["prior_precision"]))

    def init_state(self, model):
        return {
            **init_chain_state(self.chain_settings()),
            "window_accept": 0.0,
            "window_transitions": 0,
            "divergences": 0,
            "leapfrog_total": 0,
            "energy_error": 0.0,
            "log_posterior": math.nan,
            "members": [],
        }

    # -- one iteration -----------------------------------------------------------------------------------------------
    def run_epoch(self, model, optimizer, state, ctx: TrainContext, *, epoch: int, seed: int) -> tuple[float, int]:
        """One iteration of the chain (``epoch`` is the 1-based iteration; :func:`.hmc_chain.chain_step`); returns
        (U / N, leapfrog steps)."""
        model.eval()
        target = self._potential_and_grad(model, ctx)
        if epoch == 1 and self.hp["init"] == "prior":  # start from a draw of the prior, not the network's init
            generator = torch.Generator().manual_seed(derive_seed(seed, 3))
            with torch.no_grad():
                for p in model.parameters():
                    z = torch.randn(p.shape, generator=generator)
                    p.copy_(z / math.sqrt(float(self.hp["prior_precision"])))
        theta = parameters_to_vector(model.parameters()).detach()
        # The last transition's end point carries its potential and gradient: reuse them (L evaluations per
        # transition, not L + 1). After a resume the model holds the checkpoint's position and they are recomputed,
        # which gives the same numbers, so a resumed chain stays bit-identical.
        if self._state is not None and torch.equal(self._state.theta, theta):
            current = self._state
        else:
            current = HMCState.at(theta, target)
        new, step = chain_step(current, target, state, self.chain_settings(), t=epoch - 1, seed=seed)
        with torch.no_grad():
            vector_to_parameters(new.theta.to(theta.dtype), model.parameters())
        self._state = new
        state["window_accept"] += step.accept_prob
        state["window_transitions"] += 1
        state["divergences"] += int(step.divergent)
        state["leapfrog_total"] += step.n_steps
        state["energy_error"] = step.energy_error
        state["log_posterior"] = -new.potential
        state["last_step_size"] = step.step_size
        state["last_n_steps"] = step.n_steps
        state["last_depth"] = step.depth
        if epoch == int(self.hp["burn_in"]):  # the burn-in window is not a sampling window
            state["window_accept"], state["window_transitions"] = 0.0, 0
        return new.potential / len(ctx.y_train), step.n_steps

    def _potential_and_grad(self, model, ctx: TrainContext):
        """The target for this model and training set, built (and compiled) once per run."""
        key = (id(model), id(ctx.x_train))
        if self._target is None or self._target[0] != key:
            fn = log_posterior_fn(model, ctx.x_train, ctx.y_train, prior_precision=float(self.hp["prior_precision"]),
                                  compile=bool(self.hp["compile"]))
            self._target, self._state = (key, fn), None
        return self._target[1]

    def on_epoch_end(self, model, state, epoch):
        self._records = state["members"]
        if epoch in self.snapshot_epochs():
            n = max(state["window_transitions"], 1)
            record = {
                "iteration": epoch,
                "sampler": self.hp["sampler"],
                "step_size": state["last_step_size"],
                "n_leapfrog": state["last_n_steps"],
                "trajectory_length": state["last_step_size"] * state["last_n_steps"],
                "acceptance_rate": state["window_accept"] / n,
                "energy_error": state["energy_error"],
                "log_posterior": state["log_posterior"],
                "divergences_total": state["divergences"],
                "leapfrog_total": state["leapfrog_total"],
            }
            if state.get("last_depth") is not None:
                record["tree_depth"] = state["last_depth"]
            state["members"].append(record)
            state["window_accept"], state["window_transitions"] = 0.0, 0

    def log_posterior(self, model, state, ctx):
        return float(state["log_posterior"])

    def member_info(self, index: int, epoch: int) -> dict[str, Any]:
        """The record ``on_epoch_end`` kept for member ``index`` (non-finite values as None: the info is JSON)."""
        record = self._records[index] if index < len(self._records) else {}
        return {k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in record.items()}
