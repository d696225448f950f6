# SPDX-License-Identifier: MIT
r"""Hamiltonian Monte Carlo on a flat parameter vector: the leapfrog integrator, the Metropolis-Hastings
transition and dual-averaging step-size adaptation. Torch only, no model: the target is a function
``potential_and_grad(theta) -> (U, dU/dtheta)`` with :math:`U(\theta) = -\log p(\theta \mid D)` up to a constant.

With a diagonal mass matrix :math:`M` (``mass``: a float for :math:`m I`, or a vector of its diagonal) the
Hamiltonian is :math:`H(\theta, p) = U(\theta) + \tfrac12 p^\top M^{-1} p` and one transition (Neal 2011, "MCMC
using Hamiltonian dynamics", Sec. 5.2 and 5.3) is

1. draw :math:`p \sim \mathcal N(0, M)`;
2. ``n_steps`` leapfrog steps of size :math:`\varepsilon`: :math:`p \leftarrow p - \tfrac{\varepsilon}{2} \nabla U`,
   :math:`\theta \leftarrow \theta + \varepsilon M^{-1} p`, :math:`p \leftarrow p - \tfrac{\varepsilon}{2} \nabla U`;
3. accept :math:`(\theta', p')` with probability :math:`\min(1, \exp(H(\theta, p) - H(\theta', p')))`, else keep
   :math:`\theta`. A non-finite energy is a divergence and is rejected.

The step size is tuned during burn-in by the dual averaging of Hoffman & Gelman (2014, "The No-U-Turn Sampler",
Algorithm 5, with their :math:`\gamma = 0.05, t_0 = 10, \kappa = 0.75, \mu = \log 10 \varepsilon_0`) towards a target
mean acceptance probability, then frozen at the averaged value :math:`\bar\varepsilon`. The default target 0.8 is
Stan's and BlackJAX's ``window_adaptation`` default (Hoffman & Gelman suggest 0.65 for plain HMC).

Randomness comes only from the ``torch.Generator`` passed in, so a seeded chain is bit-identical. The draws are
made on the generator's device and moved to the chain's: a CPU generator gives a CUDA chain the same momenta as a
CPU chain, and a CUDA generator works too.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

__all__ = ["DualAveraging", "HMCState", "TransitionInfo", "draw_momentum", "hmc_transition", "kinetic_energy",
           "leapfrog", "n_leapfrog_steps"]

PotentialAndGrad = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class HMCState:
    """A position with its potential energy and gradient (so a transition evaluates the target L times, not L+1)."""

    theta: torch.Tensor
    potential: float
    grad: torch.Tensor

    @classmethod
    def at(cls, theta: torch.Tensor, potential_and_grad: PotentialAndGrad) -> "HMCState":
        u, g = potential_and_grad(theta)
        return cls(theta, float(u), g)


@dataclass(frozen=True)
class TransitionInfo:
    """What one transition did: the acceptance probability min(1, exp(-ΔH)), whether it moved, and
    ΔH = H(proposal) - H(start) (``inf`` for a divergence)."""

    accept_prob: float
    accepted: bool
    energy_error: float


def leapfrog(
    theta: torch.Tensor,
    momentum: torch.Tensor,
    grad: torch.Tensor,
    potential_and_grad: PotentialAndGrad,
    *,
    step_size: float,
    n_steps: int,
    inv_mass: torch.Tensor | float,
) -> tuple[torch.Tensor, torch.Tensor, float, torch.Tensor]:
    """``n_steps`` leapfrog steps from ``(theta, momentum)`` with ``grad = dU/dtheta`` at ``theta``.

    Returns the new position, momentum, potential and gradient. Inputs are not modified. The map is volume
    preserving and, with the momentum negated, its own inverse (tested).
    """
    theta = theta.clone()
    p = momentum - 0.5 * step_size * grad
    potential = math.nan
    for i in range(n_steps):
        theta = theta + step_size * inv_mass * p
        u, grad = potential_and_grad(theta)
        potential = float(u)
        if not math.isfinite(potential):
            break
        p = p - (step_size if i < n_steps - 1 else 0.5 * step_size) * grad
    return theta, p, potential, grad


def kinetic_energy(p: torch.Tensor, inv_mass: torch.Tensor | float) -> float:
    """:math:`\\tfrac12 p^\\top M^{-1} p` in float64 (``inv_mass`` a float or the diagonal of :math:`M^{-1}`)."""
    p64 = p.double()
    if torch.is_tensor(inv_mass):
        return 0.5 * float(torch.dot(p64 * inv_mass.to(p64.device, torch.float64), p64))
    return 0.5 * float(torch.sum(p64 * p64 * float(inv_mass)))


def draw_momentum(theta: torch.Tensor, mass: torch.Tensor | float, generator: torch.Generator) -> torch.Tensor:
    """:math:`p \\sim \\mathcal N(0, M)`: standard normals drawn on the generator's device (a CPU generator gives a
    CUDA chain the momenta of a CPU chain), moved to ``theta``'s and scaled by :math:`\\sqrt{M}`."""
    z = torch.randn(theta.shape, generator=generator, dtype=theta.dtype, device=generator.device).to(theta.device)
    if torch.is_tensor(mass):
        return z * mass.to(theta.device, theta.dtype).sqrt()
    return math.sqrt(mass) * z


def _inverse(mass: torch.Tensor | float, like: torch.Tensor) -> torch.Tensor | float:
    """:math:`M^{-1}` in ``like``'s dtype and device (a float stays a float)."""
    return 1.0 / mass.to(like.device, like.dtype) if torch.is_tensor(mass) else 1.0 / mass


def hmc_transition(
    state: HMCState,
    potential_and_grad: PotentialAndGrad,
    *,
    step_size: float,
    n_steps: int,
    mass: torch.Tensor | float,
    generator: torch.Generator,
) -> tuple[HMCState, TransitionInfo]:
    """One HMC transition with mass matrix ``mass`` (a float ``m``: momentum covariance ``m I``; a vector: the
    diagonal of :math:`M`)."""
    inv_mass = _inverse(mass, state.theta)
    p0 = draw_momentum(state.theta, mass, generator)
    h0 = state.potential + kinetic_energy(p0, inv_mass)
    theta, p, u, g = leapfrog(state.theta, p0, state.grad, potential_and_grad, step_size=step_size,
                              n_steps=n_steps, inv_mass=inv_mass)
    h1 = u + kinetic_energy(p, inv_mass) if math.isfinite(u) else math.inf
    energy_error = h1 - h0 if math.isfinite(h1) else math.inf
    accept_prob = math.exp(min(0.0, -energy_error)) if math.isfinite(energy_error) else 0.0
    # One uniform per transition, drawn whatever the outcome, so the stream does not depend on the energy.
    uniform = float(torch.rand((), generator=generator, dtype=torch.float64, device=generator.device))
    if uniform < accept_prob:
        return HMCState(theta, u, g), TransitionInfo(accept_prob, True, energy_error)
    return state, TransitionInfo(accept_prob, False, energy_error)


def n_leapfrog_steps(trajectory_length: float, step_size: float, *, max_steps: int) -> int:
    """Steps of a trajectory of fixed length ``trajectory_length``: ``ceil(length / step)``, in ``[1, max_steps]``."""
    return int(min(max(math.ceil(trajectory_length / step_size - 1e-9), 1), max_steps))


@dataclass
class DualAveraging:
    """Hoffman & Gelman (2014) Algorithm 5; plain floats, so the state checkpoints as a dict.

    ``update(accept_prob)`` after each burn-in transition returns the next step size to use;
    ``final`` is the averaged step size :math:`\\bar\\varepsilon` used after burn-in.
    """

    mu: float
    target: float = 0.8
    gamma: float = 0.05
    t0: float = 10.0
    kappa: float = 0.75
    count: int = 0
    h_bar: float = 0.0
    log_step: float = 0.0
    log_step_bar: float = 0.0

    @classmethod
    def start(cls, step_size: float, *, target: float = 0.8) -> "DualAveraging":
        """A fresh adaptation from ``step_size`` (:math:`\\mu = \\log 10\\varepsilon`); also Stan's restart after each
        mass-matrix window."""
        return cls(mu=math.log(10.0 * step_size), target=target, log_step=math.log(step_size))

    def update(self, accept_prob: float) -> float:
        self.count += 1
        m = self.count
        w = 1.0 / (m + self.t0)
        self.h_bar = (1.0 - w) * self.h_bar + w * (self.target - accept_prob)
        self.log_step = self.mu - math.sqrt(m) / self.gamma * self.h_bar
        eta = m ** (-self.kappa)
        self.log_step_bar = eta * self.log_step + (1.0 - eta) * self.log_step_bar
        return math.exp(self.log_step)

    @property
    def final(self) -> float:
        return math.exp(self.log_step_bar) if self.count else math.exp(self.log_step)

    def to_dict(self) -> dict:
        return asdict(self)
