# SPDX-License-Identifier: MIT
"""SGHMC (Chen et al. 2014): the update of :mod:`ubench.producers.sgmcmc` with friction :math:`\\alpha < 1`,

.. math:: v \\leftarrow (1 - \\alpha) v - \\mathrm{lr} \\, (\\nabla \\bar L + \\theta / (\\sigma^2 N))
          + \\sqrt{2 \\, \\mathrm{lr} \\, \\alpha \\, T / N} \\; \\varepsilon, \\qquad \\theta \\leftarrow \\theta + v,

at the reference code's temperature ``T = 1/N`` by default. Defaults are URSABench's tuned MLP values
(``URSABench/hyperparams/MLP200MNIST/SGHMC_BO.json``, 4 significant digits): rate 0.03135, prior std 0.1405,
friction 0.102, 50 burn-in epochs; the SGLD schedule (cosine to half the rate by the end of sampling)."""

from __future__ import annotations

from .sgld import SGLD
from .sampler_defaults import SGHMC_DEFAULTS

__all__ = ["SGHMC"]


class SGHMC(SGLD):
    """Hamiltonian dynamics with friction; the chain and sampling schedule of :class:`~ubench.producers.sgld.SGLD`."""

    name = "sghmc"
    defaults = dict(SGHMC_DEFAULTS)
    summary = "stochastic gradient Hamiltonian Monte Carlo"
