# SPDX-License-Identifier: MIT
"""Snapshot ensembles (Huang et al. 2017): M cycles of cosine-annealed SGD, restarting at ``lr``; each cycle's
final weights are a member. Huang et al. use 40-50-epoch cycles on CIFAR; the default 10 suits MNIST-size data."""

from __future__ import annotations

import math

from .torch_trainer import BASE_DEFAULTS, Method

__all__ = ["SnapshotEnsemble"]


class SnapshotEnsemble(Method):
    """SSE: ``members * cycle_epochs`` epochs, one snapshot at the end of each cycle."""

    name = "sse"
    member_kind = "snapshot"
    shape = "trajectory"
    defaults = {key: BASE_DEFAULTS[key] for key in ("momentum", "weight_decay")} | {"lr": 0.1, "cycle_epochs": 10}
    default_members = 5
    summary = "snapshot ensembles (cyclic cosine learning rate)"

    def total_epochs(self):
        return self.n_members * int(self.hp["cycle_epochs"])

    def schedule(self, t):
        cycle = self.hp["cycle_epochs"]
        return {"lr": 0.5 * self.hp["lr"] * (math.cos(math.pi * (t % cycle) / cycle) + 1.0)}

    def snapshot_epochs(self):
        return [(k + 1) * int(self.hp["cycle_epochs"]) for k in range(self.n_members)]

    def member_info(self, index, epoch):
        return {"cycle": index}
