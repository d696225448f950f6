# SPDX-License-Identifier: MIT
"""SGLD (Welling & Teh 2011) with URSABench's MNIST hyperparameters (appendix D): rate 0.099, prior std 0.16,
50 burn-in epochs, then one sample every ``thin_epochs``; the rate decays by cosine annealing to half its initial
value by the end of sampling."""

from __future__ import annotations

import math

from .sgmcmc import SGMCMCMethod

__all__ = ["SGLD", "cosine_to_half"]


def cosine_to_half(t: float, lr: float, total: float) -> float:
    """``lr`` at ``t = 0`` annealed along a half cosine to ``lr / 2`` at ``t = total``."""
    return lr * (0.75 + 0.25 * math.cos(math.pi * min(t / max(total, 1e-12), 1.0)))


class SGLD(SGMCMCMethod):
    """Langevin dynamics (no momentum); noise from the first step."""

    name = "sgld"
    defaults = {"lr": 0.099, "prior_std": 0.16, "temperature": 1.0, "burn_in_epochs": 50, "thin_epochs": 1}
    summary = "stochastic gradient Langevin dynamics"

    def schedule(self, t):
        return {"lr": cosine_to_half(t, self.hp["lr"], self.total_epochs()), "noise": True}

    def snapshot_epochs(self):
        b, thin = int(self.hp["burn_in_epochs"]), int(self.hp["thin_epochs"])
        return [b + (k + 1) * thin for k in range(self.n_members)]
