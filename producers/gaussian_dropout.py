# SPDX-License-Identifier: MIT
"""MC Gaussian dropout (Laves et al. 2020, section 3.2): Gaussian dropout of fixed rate p = 0.2, sampled at the next
layer's output by the reparameterisation trick, kept on at test time; each member is one stochastic forward pass.
"""

from __future__ import annotations

from .mc_dropout import MCDropout
from .torch_trainer import BASE_DEFAULTS

__all__ = ["MCGaussianDropout"]


class MCGaussianDropout(MCDropout):
    """:class:`~ubench.producers.mc_dropout.MCDropout` with Gaussian instead of Bernoulli noise."""

    name = "gaussian_dropout"
    dropout = "gaussian"
    defaults = {**BASE_DEFAULTS, "dropout_rate": 0.2}
    summary = "MC Gaussian dropout (Laves et al.)"
