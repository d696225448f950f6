# SPDX-License-Identifier: MIT
"""SGLD (Welling & Teh 2011): the update of :mod:`ubench.producers.sgmcmc` with friction 1,

.. math:: \\theta \\leftarrow \\theta - \\mathrm{lr} \\, (\\nabla \\bar L + \\theta / (\\sigma^2 N))
          + \\sqrt{2 \\, \\mathrm{lr} \\, T / N} \\; \\varepsilon,

at the reference code's temperature ``T = 1/N`` by default. Defaults are URSABench's tuned MLP values
(``URSABench/hyperparams/MLP200MNIST/SGLD_BO.json``, 4 significant digits): rate 0.1, prior std 0.1664, 50 burn-in
epochs; then one sample every ``thin_epochs``. The rate decays by cosine annealing to half its initial value by
the end of sampling (URSABench's ``SGHMC.update_hyp``)."""

from __future__ import annotations

from .sampler_defaults import SGLD_DEFAULTS, cosine_to_half
from .sgmcmc import SGMCMCMethod

__all__ = ["SGLD", "cosine_to_half"]


class SGLD(SGMCMCMethod):
    """Langevin dynamics (no momentum); noise from the first step."""

    name = "sgld"
    defaults = dict(SGLD_DEFAULTS)
    summary = "stochastic gradient Langevin dynamics"

    def schedule(self, t):
        return {"lr": cosine_to_half(t, self.hp["lr"], self.total_epochs()), "noise": True}

    def snapshot_epochs(self):
        b, thin = int(self.hp["burn_in_epochs"]), int(self.hp["thin_epochs"])
        return [b + (k + 1) * thin for k in range(self.n_members)]
