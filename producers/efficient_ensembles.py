# SPDX-License-Identifier: MIT
"""Efficient ensembles (issue #31): M members in one network trained once, each member one archive member.

* ``batch_ensemble`` — BatchEnsemble (Wen et al. 2020), following uncertainty-baselines'
  ``baselines/cifar/batchensemble.py`` (edward2 layers): the training batch is tiled M times (every member sees the
  same examples, member-major) and the loss is the mean cross-entropy over all M x B rows; the fast weights r, s are
  trained at half the learning rate (``fast_weight_lr_multiplier = 0.5``, applied to their gradients, which is the
  same for SGD with momentum) and without weight decay, which applies to the shared weights only.
* ``packed_ensembles`` — Packed-Ensembles (Laurent et al. 2023), following the authors' torch-uncertainty
  (``PackedLinear``/``PackedConv2d``, ``ClassificationRoutine`` with ``RepeatTarget``): alpha = 2, gamma = 1, every
  member sees the whole batch, mean cross-entropy over the M x B outputs.
* ``mimo`` — MIMO (Havasi et al. 2021), following uncertainty-baselines' ``baselines/cifar/mimo.py``: each step
  repeats the batch ``batch_repetitions`` = 4 times, shuffles it independently for every member (a fraction
  ``input_repetition_probability`` of the rows shared), stacks the members' images along channels, and minimises
  the sum over members of the mean cross-entropy; at test time every member gets the same image.

The layers are in :mod:`ubench.producers.ensemble_layers`; the network is any of ``producers/models.py``
converted layer by layer.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .ensemble_layers import BatchConv2d, BatchLinear, set_member, to_batch_ensemble, to_mimo, to_packed
from .torch_trainer import BASE_DEFAULTS, Method, with_network

__all__ = ["BatchEnsemble", "PackedEnsembles", "MIMO"]


class _OneNetwork(Method):
    """The M members are heads of one network trained once."""

    member_kind = "independent"
    shape = "posterior"
    default_members = 4
    exportable = False  # --save-models (edge/export.py) refuses it, saying why
    not_exportable_because = "every member is a head of one network computing all of them"

    def format_batch(self, x, y, generator):
        return x, y.repeat(self.n_members)  # the network's output is M member-major blocks


class BatchEnsemble(_OneNetwork):
    """Shared weights, rank-one fast weights per member (Wen et al. 2020)."""

    name = "batch_ensemble"
    defaults = {**BASE_DEFAULTS, "fast_weight_lr_multiplier": 0.5}
    summary = "BatchEnsemble: rank-one fast weights per member on shared weights (Wen et al. 2020)"

    def prepare_model(self, model: nn.Module) -> nn.Module:
        model = to_batch_ensemble(model, self.n_members)
        mult = float(self.hp["fast_weight_lr_multiplier"])
        for layer in model.modules():
            if isinstance(layer, (BatchLinear, BatchConv2d)):
                for p in (layer.r, layer.s):
                    p.register_hook(lambda g, m=mult: g * m)
        return model

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        fast = {id(p) for layer in model.modules() if isinstance(layer, (BatchLinear, BatchConv2d))
                for p in (layer.r, layer.s)}
        groups = [{"params": [p for p in model.parameters() if id(p) not in fast],
                   "weight_decay": self.hp["weight_decay"]},
                  {"params": [p for p in model.parameters() if id(p) in fast], "weight_decay": 0.0}]
        return torch.optim.SGD(groups, lr=self.hp["lr"], momentum=self.hp["momentum"])

    def format_batch(self, x, y, generator):
        """The batch tiled M times, member-major (the reference's ``tf.tile(images, [ensemble_size, 1, 1, 1])``)."""
        return x.repeat(self.n_members, *([1] * (x.dim() - 1))), y.repeat(self.n_members)

    def run_epoch(self, model, optimizer, state, ctx, *, epoch, seed):
        set_member(model, None)
        return super().run_epoch(model, optimizer, state, ctx, epoch=epoch, seed=seed)

    def indexed_predictor(self, index, model, state, ctx, seed):
        model.eval()

        def predict(x, gen):
            set_member(model, index)
            return model(x)

        return with_network(predict, model)


class PackedEnsembles(_OneNetwork):
    """M sub-networks packed into grouped layers (Laurent et al. 2023)."""

    name = "packed_ensembles"
    defaults = {**BASE_DEFAULTS, "alpha": 2.0, "gamma": 1}
    summary = "Packed-Ensembles: M sub-networks in grouped layers of width alpha (Laurent et al. 2023)"

    @classmethod
    def check_hyperparameters(cls, hp) -> None:
        if hp["alpha"] <= 0 or hp["gamma"] < 1:
            raise ValueError(f"packed_ensembles: alpha must be > 0 and gamma >= 1; got {hp['alpha']}, {hp['gamma']}")

    def prepare_model(self, model: nn.Module) -> nn.Module:
        return to_packed(model, self.n_members, float(self.hp["alpha"]), int(self.hp["gamma"]))

    def indexed_predictor(self, index, model, state, ctx, seed):
        model.eval()
        return with_network(lambda x, gen: model(x).reshape(self.n_members, x.shape[0], -1)[index], model)


class _MIMONet(nn.Module):
    """A MIMO network: (B, M c, H, W) in, (M B, C) out, member-major."""

    def __init__(self, inner: nn.Module, n_members: int):
        super().__init__()
        self.inner, self.n_members = inner, int(n_members)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.inner(x)
        b = out.shape[0]
        return out.reshape(b, self.n_members, -1).transpose(0, 1).reshape(self.n_members * b, -1)


class MIMO(_OneNetwork):
    """M subnetworks with their own inputs and heads in one network (Havasi et al. 2021)."""

    name = "mimo"
    defaults = {**BASE_DEFAULTS, "batch_repetitions": 4, "input_repetition_probability": 0.0}
    default_members = 3
    summary = "MIMO: M subnetworks with their own inputs and outputs in one network (Havasi et al. 2021)"

    @classmethod
    def check_hyperparameters(cls, hp) -> None:
        if hp["batch_repetitions"] < 1 or not 0.0 <= hp["input_repetition_probability"] <= 1.0:
            raise ValueError("mimo: batch_repetitions must be >= 1 and input_repetition_probability in [0, 1]; got "
                             f"{hp['batch_repetitions']}, {hp['input_repetition_probability']}")

    def prepare_model(self, model: nn.Module) -> nn.Module:
        return _MIMONet(to_mimo(model, self.n_members), self.n_members)

    def format_batch(self, x: torch.Tensor, y: torch.Tensor, generator: torch.Generator):
        """The reference's batch: the B rows repeated ``batch_repetitions`` times and shuffled once; each member
        then reshuffles the first ``(1 - input_repetition_probability)`` of that order (the rest stays shared).
        Returns the members' images stacked along channels (r B, M c, H, W) and their labels, member-major."""
        m, rows = self.n_members, x.shape[0] * int(self.hp["batch_repetitions"])
        main = torch.arange(x.shape[0]).repeat(int(self.hp["batch_repetitions"]))
        main = main[torch.randperm(rows, generator=generator)]
        keep = int(rows * (1.0 - float(self.hp["input_repetition_probability"])))
        orders = [torch.cat([main[:keep][torch.randperm(keep, generator=generator)], main[keep:]])
                  for _ in range(m)]
        orders = [o.to(x.device) for o in orders]
        return torch.cat([x[o] for o in orders], dim=1), torch.cat([y[o] for o in orders])

    def loss(self, outputs: torch.Tensor, y: torch.Tensor, t: float) -> torch.Tensor:
        return F.cross_entropy(outputs, y) * self.n_members  # sum over members of each member's mean

    def indexed_predictor(self, index, model, state, ctx, seed):
        model.eval()

        def predict(x, gen):
            out = model(x.repeat(1, self.n_members, *([1] * (x.dim() - 2))))
            return out.reshape(self.n_members, x.shape[0], -1)[index]

        return with_network(predict, model)

