# SPDX-License-Identifier: MIT
"""Fast geometric ensembling (Garipov et al. 2018): pretrain ``epochs`` with the Pitfalls schedule, then cycles of
``cycle_epochs`` in which the rate falls linearly from ``lr_high`` to ``lr_low`` and rises back; the weights at each
cycle's midpoint (the lowest rate) are a member. Defaults are the FGE code's CIFAR values (cycle 2-4 epochs,
0.05 -> 0.0005)."""

from __future__ import annotations

from .torch_trainer import BASE_DEFAULTS, Method, pitfalls_schedule

__all__ = ["FastGeometricEnsemble"]


class FastGeometricEnsemble(Method):
    """FGE: ``epochs + members * cycle_epochs`` epochs; ``cycle_epochs`` must be even."""

    name = "fge"
    member_kind = "snapshot"
    shape = "trajectory"
    defaults = {**BASE_DEFAULTS, "cycle_epochs": 2, "lr_high": 0.05, "lr_low": 0.0005}
    default_members = 10
    summary = "fast geometric ensembling (triangular cyclic rate)"

    def __init__(self, hyper, *, n_members, n_train):
        super().__init__(hyper, n_members=n_members, n_train=n_train)
        if self.hp["cycle_epochs"] < 2 or self.hp["cycle_epochs"] % 2:
            raise ValueError(f"fge: cycle_epochs must be even and at least 2; got {self.hp['cycle_epochs']}")

    def total_epochs(self):
        return int(self.hp["epochs"]) + self.n_members * int(self.hp["cycle_epochs"])

    def schedule(self, t):
        pre = self.hp["epochs"]
        if t < pre:
            return {"lr": pitfalls_schedule(t, self.hp["lr"], pre)}
        u = ((t - pre) % self.hp["cycle_epochs"]) / self.hp["cycle_epochs"]
        high, low = self.hp["lr_high"], self.hp["lr_low"]
        return {"lr": high + (low - high) * 2 * u if u < 0.5 else low + (high - low) * (2 * u - 1)}

    def snapshot_epochs(self):
        c = int(self.hp["cycle_epochs"])
        return [int(self.hp["epochs"]) + k * c + c // 2 for k in range(self.n_members)]

    def member_info(self, index, epoch):
        return {"cycle": index}
