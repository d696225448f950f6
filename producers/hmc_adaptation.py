# SPDX-License-Identifier: MIT
r"""Warm-up of the HMC/NUTS samplers as Stan does it: a diagonal mass matrix learned in doubling windows, the step
size found by the doubling heuristic and adapted by dual averaging (:class:`.hmc_sampler.DualAveraging`).

Stan's windowed adaptation (Stan Reference Manual, "HMC algorithm parameters", "Automatic parameter tuning";
``stan/mcmc/windowed_adaptation.hpp``, ``var_adaptation.hpp``, ``base_hmc.hpp::init_stepsize``), with its defaults
(``init_buffer`` 75, ``term_buffer`` 50, ``base_window`` 25): the warm-up iterations :math:`0 .. W - 1` are

* a fast initial buffer (step size only);
* slow windows of 25, 50, 100, ... iterations (the last one stretched to the terminal buffer when the next doubling
  would not fit), in each of which the positions are accumulated (Welford); at a window's end the inverse mass
  matrix becomes their regularised variance :math:`\frac{n}{n+5}\,\widehat{\mathrm{var}} + 10^{-3}\frac{5}{n+5}`,
  the accumulator restarts, the step size is re-initialised by the doubling heuristic and dual averaging restarts
  from it (:math:`\mu = \log 10\varepsilon`);
* a fast terminal buffer (step size only), after which the step size is frozen at dual averaging's average.

When the three default buffers do not fit in :math:`W`, Stan's rule applies: 15% initial, 10% terminal, the rest one
window; below 20 warm-up iterations no mass matrix is learned. BlackJAX's ``window_adaptation`` uses the same
schedule. Everything here is plain numbers and float64 tensors, so the state checkpoints with the chain.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from .hmc_sampler import HMCState, draw_momentum, kinetic_energy, leapfrog

__all__ = ["adaptation_windows", "find_reasonable_step_size", "regularised_variance", "welford_start",
           "welford_update"]


def adaptation_windows(num_warmup: int, *, init_buffer: int = 75, term_buffer: int = 50,
                       base_window: int = 25) -> list[tuple[int, int]]:
    """The slow windows ``[(first, last), ...]`` (0-based warm-up iterations, inclusive) of Stan's schedule.

    Examples
    --------
    >>> adaptation_windows(1000)
    [(75, 99), (100, 149), (150, 249), (250, 449), (450, 949)]
    >>> adaptation_windows(100)
    [(15, 89)]
    >>> adaptation_windows(19)
    []
    """
    n = int(num_warmup)
    if n < 20:
        return []
    if init_buffer + base_window + term_buffer > n:
        init_buffer, term_buffer = int(0.15 * n), int(0.1 * n)
        base_window = n - (init_buffer + term_buffer)
    last = n - term_buffer - 1  # the last iteration of the last slow window
    # Stan's compute_next_window, literally: the first window is never stretched; each later one (twice the size) is
    # stretched to the terminal buffer when the window after it would end there or later.
    size, end = base_window, init_buffer + base_window - 1
    windows = [(init_buffer, end)]
    while end != last:
        size *= 2
        start, end = end + 1, end + size
        if end != last and end + 2 * size >= last + 1:
            end = last
        windows.append((start, end))
    return windows


def welford_start(like: torch.Tensor) -> dict:
    """An empty running mean/variance accumulator (float64, on ``like``'s device)."""
    zeros = torch.zeros(like.shape, dtype=torch.float64, device=like.device)
    return {"count": 0, "mean": zeros, "m2": zeros.clone()}


def welford_update(acc: dict, x: torch.Tensor) -> None:
    """Add one draw ``x`` to the accumulator (Welford's update, in place)."""
    x = x.detach().to(acc["mean"].device, torch.float64)
    acc["count"] += 1
    delta = x - acc["mean"]
    acc["mean"] += delta / acc["count"]
    acc["m2"] += delta * (x - acc["mean"])


def regularised_variance(acc: dict) -> torch.Tensor:
    """Stan's diagonal inverse mass matrix from a window of ``n`` draws: the sample variance (``n - 1``) shrunk
    towards :math:`10^{-3}` as :math:`\\frac{n}{n+5}\\,\\mathrm{var} + 10^{-3}\\,\\frac{5}{n+5}`."""
    n = acc["count"]
    if n < 2:
        raise ValueError(f"a mass-matrix window needs at least 2 draws; got {n}")
    var = acc["m2"] / (n - 1)
    return (n / (n + 5.0)) * var + 1e-3 * (5.0 / (n + 5.0))


def find_reasonable_step_size(state: HMCState, potential_and_grad: Callable, *, step_size: float,
                              mass: torch.Tensor | float, generator: torch.Generator, max_tries: int = 100) -> float:
    """Stan's ``init_stepsize`` (Hoffman & Gelman 2014, Algorithm 4 with Stan's threshold): from ``step_size``,
    double (or halve) it while one leapfrog step from ``state`` with a fresh momentum keeps (or misses) an acceptance
    :math:`\\exp(-\\Delta H)` of 0.8; returns the first step size on the other side. ``max_tries`` bounds the loop
    (the step size changes by at most :math:`2^{100}`)."""
    inv_mass = 1.0 / mass.to(state.theta.device, state.theta.dtype) if torch.is_tensor(mass) else 1.0 / mass
    threshold = math.log(0.8)

    def delta_h(eps: float) -> float:
        p0 = draw_momentum(state.theta, mass, generator)
        h0 = state.potential + kinetic_energy(p0, inv_mass)
        _, p, u, _ = leapfrog(state.theta, p0, state.grad, potential_and_grad, step_size=eps, n_steps=1,
                              inv_mass=inv_mass)
        h = u + kinetic_energy(p, inv_mass) if math.isfinite(u) else math.inf
        return h0 - h if math.isfinite(h) else -math.inf

    eps = float(step_size)
    direction = 1 if delta_h(eps) > threshold else -1
    for _ in range(max_tries):
        d = delta_h(eps)
        if (direction == 1 and not d > threshold) or (direction == -1 and not d < threshold):
            break
        eps = eps * 2.0 if direction == 1 else eps * 0.5
    return eps
