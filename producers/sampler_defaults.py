# SPDX-License-Identifier: MIT
"""What the SG-MCMC producers of every framework share, in plain Python (no torch, no JAX): the temperature's
reference value, the rate schedule and the tuned defaults (see :mod:`ubench.producers.sgmcmc` for the update and
the sources)."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["REFERENCE_TEMPERATURE", "SGLD_DEFAULTS", "SGHMC_DEFAULTS", "cosine_to_half", "resolve_temperature"]

#: The ``temperature`` hyperparameter's default: ``T = 1/N``, the noise of the csgmcmc and URSABench code.
REFERENCE_TEMPERATURE = "1/N"

#: URSABench ``hyperparams/MLP200MNIST/SGLD_BO.json`` (4 significant digits).
SGLD_DEFAULTS: dict[str, Any] = {"lr": 0.1, "prior_std": 0.1664, "temperature": REFERENCE_TEMPERATURE,
                                 "burn_in_epochs": 50, "thin_epochs": 1}
#: URSABench ``hyperparams/MLP200MNIST/SGHMC_BO.json`` (4 significant digits).
SGHMC_DEFAULTS: dict[str, Any] = {"lr": 0.03135, "prior_std": 0.1405, "temperature": REFERENCE_TEMPERATURE,
                                  "friction": 0.102, "burn_in_epochs": 50, "thin_epochs": 1}


def cosine_to_half(t: float, lr: float, total: float) -> float:
    """``lr`` at ``t = 0`` annealed along a half cosine to ``lr / 2`` at ``t = total``."""
    return lr * (0.75 + 0.25 * math.cos(math.pi * min(t / max(total, 1e-12), 1.0)))


def resolve_temperature(value: Any, n_data: int) -> float:
    """``T`` from the ``temperature`` hyperparameter: ``"1/N"`` gives ``1 / n_data``; otherwise a positive finite
    number. Raises ``ValueError`` naming the hyperparameter for anything else."""
    if isinstance(value, str) and value.strip().upper() == REFERENCE_TEMPERATURE:
        return 1.0 / n_data
    try:
        out = float(value)
    except (TypeError, ValueError):
        out = float("nan")
    if not (math.isfinite(out) and out > 0.0):
        raise ValueError(f"hyperparameter 'temperature' must be {REFERENCE_TEMPERATURE!r} or a positive finite "
                         f"number; got {value!r}")
    return out
