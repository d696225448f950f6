# SPDX-License-Identifier: MIT
"""Cyclical SG-MCMC (Zhang et al. 2020): the rate follows a cosine from ``lr`` to 0 in each cycle of
``cycle_epochs``; the first ``exploration_epochs`` of a cycle are noise-free SGD (exploration), the rest add the
sampler's noise (sampling: the update of :mod:`ubench.producers.sgmcmc`,

.. math:: v \\leftarrow (1 - \\alpha) v - \\mathrm{lr} \\, (\\nabla \\bar L + \\theta / (\\sigma^2 N))
          + \\sqrt{2 \\, \\mathrm{lr} \\, \\alpha \\, T / N} \\; \\varepsilon, \\qquad \\theta \\leftarrow \\theta + v,

with :math:`\\alpha = 1` for cSGLD and ``T = 1/N`` by default, the reference code's noise), and the last
``samples_per_cycle`` epochs each yield a member.

Defaults are URSABench's tuned MLP values (``URSABench/hyperparams/MLP200MNIST/cSGLD_BO.json`` and
``cSGHMC_BO.json``, 4 significant digits), not the paper's appendix D, whose cSGLD row copies cSGHMC's. URSABench's
``burn_in_epochs`` counts the noisy epochs before the sampling ones, so its exploration is ``cycle_length -
burn_in_epochs - num_samples_per_cycle`` epochs:

* cSGLD: rate 0.05867, prior std 0.1796, 21-epoch cycles, 17 exploration epochs, samples from the last 3;
* cSGHMC: rate 0.06825, prior std 0.3304, friction 0.2126, 22-epoch cycles, 17 exploration epochs, samples from the
  last 4.
"""

from __future__ import annotations

import math

from .sampler_defaults import REFERENCE_TEMPERATURE
from .sgmcmc import SGMCMCMethod

__all__ = ["CyclicalSGLD", "CyclicalSGHMC"]


class CyclicalSGLD(SGMCMCMethod):
    """cSGLD: ``ceil(members / samples_per_cycle)`` cycles."""

    name = "csgld"
    defaults = {"lr": 0.05867, "prior_std": 0.1796, "temperature": REFERENCE_TEMPERATURE, "cycle_epochs": 21,
                "exploration_epochs": 17, "samples_per_cycle": 3}
    summary = "cyclical SGLD (exploration then sampling per cycle)"

    @classmethod
    def check_hyperparameters(cls, hp):
        super().check_hyperparameters(hp)
        c, e, s = (int(hp[k]) for k in ("cycle_epochs", "exploration_epochs", "samples_per_cycle"))
        if not (0 <= e < c and 1 <= s <= c - e):
            raise ValueError(
                f"{cls.name}: need 0 <= exploration_epochs < cycle_epochs and 1 <= samples_per_cycle <= "
                f"cycle_epochs - exploration_epochs; got cycle {c}, exploration {e}, samples {s}"
            )

    def schedule(self, t):
        cycle = self.hp["cycle_epochs"]
        within = t % cycle
        return {
            "lr": 0.5 * self.hp["lr"] * (math.cos(math.pi * within / cycle) + 1.0),
            "noise": within >= self.hp["exploration_epochs"],
        }

    def snapshot_epochs(self):
        c, s = int(self.hp["cycle_epochs"]), int(self.hp["samples_per_cycle"])
        return [(k // s) * c + c - s + 1 + (k % s) for k in range(self.n_members)]

    def member_info(self, index, epoch):
        return {**super().member_info(index, epoch), "cycle": index // int(self.hp["samples_per_cycle"])}


class CyclicalSGHMC(CyclicalSGLD):
    """cSGHMC: the cSGLD schedule with the SGHMC update (friction ``friction``)."""

    name = "csghmc"
    defaults = {**CyclicalSGLD.defaults, "lr": 0.06825, "prior_std": 0.3304, "friction": 0.2126, "cycle_epochs": 22,
                "samples_per_cycle": 4}
    summary = "cyclical SGHMC (exploration then sampling per cycle)"
