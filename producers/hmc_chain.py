# SPDX-License-Identifier: MIT
r"""One chain of torch HMC or NUTS with Stan's warm-up, on any target ``potential_and_grad(theta)``: what the
``hmc`` producer runs for a network, and what the tests and ``bench/bench_hmc.py`` run on other posteriors.

Iteration :math:`t` (0-based) makes one transition from the current point with the current step size and mass
matrix, then, while :math:`t <` ``burn_in``, adapts them (:mod:`.hmc_adaptation`): dual averaging of the step size
towards ``target_accept`` (frozen at its average after the last warm-up iteration), and with ``adapt_mass`` Stan's
windowed diagonal mass matrix, each window's end re-initialising the step size and restarting dual averaging (the
first iteration starts from a re-initialised step size too). The transition is

* ``sampler="hmc"``: ``ceil(T / step)`` leapfrog steps (at most ``max_leapfrog``) for a trajectory length
  :math:`T` = ``trajectory_length`` drawn uniformly in :math:`[1 - j, 1 + j]\,T` with :math:`j` = ``jitter``
  (:math:`j = 1`: uniform on :math:`(0, 2T]`, the jitter of ChEES-HMC, Hoffman, Radul & Sountsov 2021, which keeps
  a fixed length from resonating with the posterior's periods);
* ``sampler="nuts"``: :func:`.hmc_nuts.nuts_transition`, at most ``2 ** max_tree_depth - 1`` steps.

Randomness: the transition's generator is seeded by ``seed`` (the jitter's uniform first, then the transition's
draws); step-size re-initialisations use generators derived from it, so a chain is bit-identical given the seeds,
and resumable from the state dict (plain numbers and float64 tensors).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from .hmc_adaptation import (adaptation_windows, find_reasonable_step_size, regularised_variance, welford_start,
                             welford_update)
from .hmc_nuts import nuts_transition
from .hmc_sampler import DualAveraging, HMCState, hmc_transition, n_leapfrog_steps
from .run_record import derive_seed

__all__ = ["ChainSettings", "ChainStep", "chain_step", "init_chain_state", "run_chain"]

SAMPLERS = ("hmc", "nuts")


@dataclass(frozen=True)
class ChainSettings:
    """How a chain samples and warms up (the ``hmc`` producer's hyperparameters of the same names; ``mass`` is the
    scalar mass before any window, :math:`M = m I`)."""

    sampler: str = "hmc"
    burn_in: int = 500
    step_size: float = 0.01
    trajectory_length: float = 1.5
    jitter: float = 1.0
    max_leapfrog: int = 1024
    max_tree_depth: int = 10
    mass: float = 1.0
    adapt_mass: bool = True
    adapt_step_size: bool = True
    target_accept: float = 0.8

    @classmethod
    def from_hyperparameters(cls, hp: Mapping[str, Any], *, mass: float) -> "ChainSettings":
        return cls(sampler=str(hp["sampler"]), burn_in=int(hp["burn_in"]), step_size=float(hp["step_size"]),
                   trajectory_length=float(hp["trajectory_length"]), jitter=float(hp["jitter"]),
                   max_leapfrog=int(hp["max_leapfrog"]), max_tree_depth=int(hp["max_tree_depth"]), mass=float(mass),
                   adapt_mass=bool(hp["adapt_mass"]), adapt_step_size=bool(hp["adapt_step_size"]),
                   target_accept=float(hp["target_accept"]))


@dataclass(frozen=True)
class ChainStep:
    """One iteration: the acceptance statistic, leapfrog steps, tree depth (NUTS), divergence, energy error and
    the step size it used."""

    accept_prob: float
    n_steps: int
    depth: int | None
    divergent: bool
    energy_error: float
    step_size: float


def init_chain_state(settings: ChainSettings) -> dict:
    """The adaptation state before the first iteration (checkpointable)."""
    return {"step_size": settings.step_size,
            "adaptation": DualAveraging.start(settings.step_size, target=settings.target_accept).to_dict(),
            "mass": None, "welford": None}


def _mass(state: dict, settings: ChainSettings) -> torch.Tensor | float:
    return state["mass"] if state["mass"] is not None else settings.mass


def _restart_step_size(at: HMCState, target, state: dict, settings: ChainSettings, seed: int) -> None:
    step = find_reasonable_step_size(at, target, step_size=float(state["step_size"]), mass=_mass(state, settings),
                                     generator=torch.Generator().manual_seed(seed))
    state["step_size"] = step
    state["adaptation"] = DualAveraging.start(step, target=settings.target_accept).to_dict()


def chain_step(current: HMCState, target: Callable, state: dict, settings: ChainSettings, *, t: int,
               seed: int) -> tuple[HMCState, ChainStep]:
    """Iteration ``t`` (0-based) from ``current``: the transition, then the warm-up's update of ``state`` (in
    place). Returns the new point and what the iteration did."""
    warm = t < settings.burn_in
    adapt_step, adapt_mass = settings.adapt_step_size and warm, settings.adapt_mass and warm
    if adapt_mass and adapt_step and t == 0:  # Stan starts its warm-up from a step size that fits the start
        _restart_step_size(current, target, state, settings, derive_seed(seed, 2))
    step_size = float(state["step_size"])
    mass = _mass(state, settings)
    generator = torch.Generator().manual_seed(seed)
    if settings.sampler == "nuts":
        new, info = nuts_transition(current, target, step_size=step_size, mass=mass, generator=generator,
                                    max_depth=settings.max_tree_depth)
        step = ChainStep(info.accept_prob, info.n_steps, info.depth, info.divergent, info.energy_error, step_size)
    else:
        length = settings.trajectory_length
        if settings.jitter > 0:  # drawn first, and only with jitter (a fixed-length chain's stream is unchanged)
            u = float(torch.rand((), generator=generator, dtype=torch.float64))
            length *= 1.0 + settings.jitter * (2.0 * u - 1.0)
        n_steps = n_leapfrog_steps(length, step_size, max_steps=settings.max_leapfrog)
        new, info = hmc_transition(current, target, step_size=step_size, n_steps=n_steps, mass=mass,
                                   generator=generator)
        step = ChainStep(info.accept_prob, n_steps, None, not math.isfinite(info.energy_error), info.energy_error,
                         step_size)
    if adapt_step:
        adaptation = DualAveraging(**state["adaptation"])
        next_step = adaptation.update(info.accept_prob)
        state["adaptation"] = adaptation.to_dict()
        state["step_size"] = adaptation.final if t == settings.burn_in - 1 else next_step
    if adapt_mass:
        for first, last in adaptation_windows(settings.burn_in):
            if first <= t <= last:
                if state["welford"] is None:
                    state["welford"] = welford_start(new.theta)
                welford_update(state["welford"], new.theta)
                if t == last:  # the window's regularised variance is the new inverse mass matrix
                    state["mass"] = 1.0 / regularised_variance(state["welford"])
                    state["welford"] = None
                    if settings.adapt_step_size:
                        _restart_step_size(new, target, state, settings, derive_seed(seed, 1, 2))
                break
    return new, step


def run_chain(target: Callable, theta0: torch.Tensor, settings: ChainSettings, *, n_draws: int, thin: int = 1,
              seed: int) -> tuple[torch.Tensor, list[ChainStep]]:
    """``burn_in + n_draws * thin`` iterations from ``theta0``; returns the kept draws (n_draws, dim) and every
    iteration's :class:`ChainStep`. Iteration ``t`` is seeded by ``derive_seed(seed, t + 1)`` (the producer's
    epoch seeds)."""
    state = init_chain_state(settings)
    current = HMCState.at(theta0, target)
    draws, steps = [], []
    for t in range(settings.burn_in + n_draws * thin):
        current, step = chain_step(current, target, state, settings, t=t, seed=derive_seed(seed, t + 1))
        steps.append(step)
        if t >= settings.burn_in and (t - settings.burn_in + 1) % thin == 0:
            draws.append(current.theta.clone())
    return torch.stack(draws), steps
