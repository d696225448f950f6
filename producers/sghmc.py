# SPDX-License-Identifier: MIT
"""SGHMC (Chen et al. 2014) with URSABench's MNIST hyperparameters (appendix D): rate 0.03, prior std 0.14,
friction 0.1, 50 burn-in epochs; the SGLD schedule (cosine to half the rate by the end of sampling)."""

from __future__ import annotations

from .sgld import SGLD

__all__ = ["SGHMC"]


class SGHMC(SGLD):
    """Hamiltonian dynamics with friction; the chain and sampling schedule of :class:`~ubench.producers.sgld.SGLD`."""

    name = "sghmc"
    defaults = {"lr": 0.03, "prior_std": 0.14, "temperature": 1.0, "friction": 0.1, "burn_in_epochs": 50,
                "thin_epochs": 1}
    summary = "stochastic gradient Hamiltonian Monte Carlo"
