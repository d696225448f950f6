# SPDX-License-Identifier: MIT
"""The base training hyperparameters and learning-rate schedule every framework's producers share (plain Python,
no torch or JAX)."""

from __future__ import annotations

from typing import Any

__all__ = ["BASE_DEFAULTS", "pitfalls_schedule"]

#: Training hyperparameters of the plain SGD runs; the base schedule is Pitfalls' eq. (6) (appendix B).
BASE_DEFAULTS: dict[str, Any] = {
    "epochs": 20,
    "lr": 0.05,
    "momentum": 0.9,
    "weight_decay": 5e-4,
}


def pitfalls_schedule(t: float, lr: float, total_epochs: int) -> float:
    """Pitfalls appendix B eq. (6): ``lr`` for the first half, linear decay to ``0.01 lr`` by 90%, then flat.
    ``t`` is the (fractional) number of epochs done."""
    u = t / max(total_epochs, 1)
    if u <= 0.5:
        return lr
    if u < 0.9:
        return lr * (1.0 - 0.99 * (u - 0.5) / 0.4)
    return lr * 0.01
