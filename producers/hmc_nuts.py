# SPDX-License-Identifier: MIT
r"""The No-U-Turn Sampler in torch: Stan's multinomial NUTS with a diagonal mass matrix.

One transition from :math:`\theta` (Hoffman & Gelman 2014, "The No-U-Turn Sampler", with the multinomial sampling
and generalised no-U-turn criterion of Betancourt 2017, "A Conceptual Introduction to Hamiltonian Monte Carlo",
Appendix A, as Stan implements them in ``stan/mcmc/hmc/nuts/base_nuts.hpp``):

1. draw :math:`p \sim \mathcal N(0, M)`; :math:`H_0 = U(\theta) + \tfrac12 p^\top M^{-1} p`;
2. double the trajectory, each time in a random direction, by a subtree of :math:`2^{depth}` leapfrog steps of size
   :math:`\varepsilon`, until the no-U-turn criterion fails across the whole trajectory or across either half of
   any subtree (Stan's extra checks that join a subtree's halves through their neighbouring states), a leapfrog
   step diverges (:math:`H - H_0 > 1000`), or ``max_depth`` doublings were made;
3. each state carries the weight :math:`e^{H_0 - H}`; inside a subtree the proposal is drawn in proportion to the
   weights (uniform multinomial), and a new subtree's proposal replaces the current sample with probability
   :math:`\min(1, w_{\mathrm{new}} / w_{\mathrm{old}})` (biased progressive sampling towards the new half).

The criterion between the momenta :math:`p^-, p^+` at the two ends of a span with summed momentum :math:`\rho` is
:math:`(M^{-1}p^-)^\top \rho > 0` and :math:`(M^{-1}p^+)^\top \rho > 0`. The acceptance statistic for step-size
adaptation is the mean over all new states of :math:`\min(1, e^{H_0 - H})`.

Randomness comes only from the ``torch.Generator`` passed in (the momentum, then one uniform per direction and per
subtree merge, in the order the tree is built), so a seeded chain is bit-identical.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .hmc_sampler import HMCState, _inverse, draw_momentum, kinetic_energy

__all__ = ["NUTSInfo", "nuts_transition"]

#: Stan's divergence threshold on the energy error of one leapfrog state.
MAX_DELTA_H = 1000.0


@dataclass(frozen=True)
class NUTSInfo:
    """What one NUTS transition did: the acceptance statistic (for dual averaging), the leapfrog steps it took,
    the tree depth reached, whether it stopped on a divergence, and :math:`H(\\text{sample}) - H_0`."""

    accept_prob: float
    n_steps: int
    depth: int
    divergent: bool
    energy_error: float


@dataclass
class _Point:
    """A phase-space point with the potential and gradient at its position."""

    theta: torch.Tensor
    p: torch.Tensor
    potential: float
    grad: torch.Tensor


class _Tree:
    """The state of one transition's tree building (counters, the generator and the constants)."""

    def __init__(self, target, step_size, inv_mass, h0, generator):
        self.target, self.eps, self.inv_mass, self.h0, self.gen = target, step_size, inv_mass, h0, generator
        self.n_steps = 0
        self.sum_metro = 0.0
        self.divergent = False

    def uniform(self) -> float:
        return float(torch.rand((), generator=self.gen, dtype=torch.float64, device=self.gen.device))

    def sharp(self, p: torch.Tensor) -> torch.Tensor:
        return self.inv_mass * p

    def step(self, z: _Point, direction: int) -> tuple[_Point, float]:
        """One leapfrog step of signed size ``direction * eps``; returns the new point and its :math:`H_0 - H`."""
        eps = direction * self.eps
        p = z.p - 0.5 * eps * z.grad
        theta = z.theta + eps * self.inv_mass * p
        u, g = self.target(theta)
        u = float(u)
        p = p - 0.5 * eps * g
        self.n_steps += 1
        h = u + kinetic_energy(p, self.inv_mass) if math.isfinite(u) else math.inf
        if not math.isfinite(h):
            h = math.inf
        log_w = self.h0 - h
        if h - self.h0 > MAX_DELTA_H:
            self.divergent = True
        self.sum_metro += 1.0 if log_w > 0 else math.exp(log_w)
        return _Point(theta, p, u, g), log_w

    def build(self, z: _Point, depth: int, direction: int):
        """A subtree of ``2**depth`` steps from ``z`` in ``direction``. Returns ``(valid, end point, proposal,
        log weight, rho, p and p_sharp at the subtree's first and last states)``; ``valid`` is False when it
        diverged or made a U-turn (its proposal is then discarded)."""
        if depth == 0:
            new, log_w = self.step(z, direction)
            sharp = self.sharp(new.p)
            return (not self.divergent, new, new, log_w, new.p.double(), new.p, sharp, new.p, sharp)
        valid, z_mid, prop_init, lw_init, rho_init, p_beg, sh_beg, p_init_end, sh_init_end = self.build(
            z, depth - 1, direction)
        if not valid:
            return (False, z_mid, prop_init, lw_init, rho_init, p_beg, sh_beg, p_init_end, sh_init_end)
        valid, z_end, prop_final, lw_final, rho_final, p_final_beg, sh_final_beg, p_end, sh_end = self.build(
            z_mid, depth - 1, direction)
        if not valid:
            return (False, z_end, prop_final, lw_final, rho_final, p_beg, sh_beg, p_end, sh_end)
        lw_subtree = _logaddexp(lw_init, lw_final)
        # Uniform multinomial sampling inside a subtree: the final half with probability w_final / w_subtree.
        proposal = prop_init
        if self.uniform() < math.exp(lw_final - lw_subtree):
            proposal = prop_final
        rho = rho_init + rho_final
        persist = (_no_u_turn(sh_beg, sh_end, rho)
                   and _no_u_turn(sh_beg, sh_final_beg, rho_init + p_final_beg.double())
                   and _no_u_turn(sh_init_end, sh_end, rho_final + p_init_end.double()))
        return (persist, z_end, proposal, lw_subtree, rho, p_beg, sh_beg, p_end, sh_end)


def _logaddexp(a: float, b: float) -> float:
    if a == -math.inf:
        return b
    if b == -math.inf:
        return a
    m = max(a, b)
    return m + math.log(math.exp(a - m) + math.exp(b - m))


def _no_u_turn(sharp_minus: torch.Tensor, sharp_plus: torch.Tensor, rho: torch.Tensor) -> bool:
    return float(torch.dot(sharp_minus.double(), rho)) > 0 and float(torch.dot(sharp_plus.double(), rho)) > 0


def nuts_transition(
    state: HMCState,
    potential_and_grad: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    *,
    step_size: float,
    mass: torch.Tensor | float,
    generator: torch.Generator,
    max_depth: int = 10,
) -> tuple[HMCState, NUTSInfo]:
    """One NUTS transition from ``state`` with mass matrix ``mass`` (a float or the diagonal of :math:`M`) and at
    most ``2**max_depth - 1`` leapfrog steps."""
    inv_mass = _inverse(mass, state.theta)
    p0 = draw_momentum(state.theta, mass, generator)
    h0 = state.potential + kinetic_energy(p0, inv_mass)
    tree = _Tree(potential_and_grad, step_size, inv_mass, h0, generator)
    start = _Point(state.theta, p0, state.potential, state.grad)
    fwd = bck = start
    sample = start
    sharp0 = tree.sharp(p0)
    # Momenta (and M^-1 p) at both ends of the backward and forward parts of the trajectory.
    p_fwd_bck = p_fwd_fwd = p_bck_fwd = p_bck_bck = p0
    sh_fwd_bck = sh_fwd_fwd = sh_bck_fwd = sh_bck_bck = sharp0
    rho = p0.double()
    log_w = 0.0
    depth = 0
    while depth < max_depth:
        if tree.uniform() > 0.5:
            rho_bck = rho  # the trajectory so far becomes the backward part; its forward end is the old one
            p_bck_fwd, sh_bck_fwd = p_fwd_fwd, sh_fwd_fwd
            valid, fwd, proposal, lw_sub, rho_fwd, p_fwd_bck, sh_fwd_bck, p_fwd_fwd, sh_fwd_fwd = tree.build(
                fwd, depth, +1)
        else:
            rho_fwd = rho
            p_fwd_bck, sh_fwd_bck = p_bck_bck, sh_bck_bck
            valid, bck, proposal, lw_sub, rho_bck, p_bck_fwd, sh_bck_fwd, p_bck_bck, sh_bck_bck = tree.build(
                bck, depth, -1)
        if not valid:
            break
        depth += 1
        # Biased progressive sampling: move to the new subtree's proposal with probability min(1, w_new / w_old).
        if lw_sub > log_w or tree.uniform() < math.exp(lw_sub - log_w):
            sample = proposal
        log_w = _logaddexp(log_w, lw_sub)
        rho = rho_bck + rho_fwd
        persist = (_no_u_turn(sh_bck_bck, sh_fwd_fwd, rho)
                   and _no_u_turn(sh_bck_bck, sh_fwd_bck, rho_bck + p_fwd_bck.double())
                   and _no_u_turn(sh_bck_fwd, sh_fwd_fwd, rho_fwd + p_bck_fwd.double()))
        if not persist:
            break
    accept = tree.sum_metro / max(tree.n_steps, 1)
    energy_error = sample.potential + kinetic_energy(sample.p, inv_mass) - h0
    new = state if sample is start else HMCState(sample.theta, sample.potential, sample.grad)
    return new, NUTSInfo(accept, tree.n_steps, depth, tree.divergent, energy_error)
