# SPDX-License-Identifier: MIT
"""MC batch normalisation (Teye, Azizpour & Smith 2018): a batch-normalised network whose members normalise with
the statistics of a random training mini-batch instead of the running averages.

Follows torch-uncertainty's ``MCBatchNorm`` (its docstring: "matches [Teye et al.'s] reference implementation"):
for member m a training batch of ``mc_batch_size`` images is drawn (seeded by the member's seed) and passed
through the network in evaluation mode; each batch-norm layer replaces its running mean and variance by the mean
and the *unbiased* variance of the input it receives, and normalises that input with them, so every layer's
statistics are those of the batch as normalised by the layers before it. The member then predicts with those
statistics. ``mc_batch_size`` defaults to the training batch size, as Teye et al. prescribe.

Networks without batch norm (``mlp``, ``lenet``) get a ``BatchNorm1d``/``BatchNorm2d`` after every hidden linear
layer and convolution (before its activation), as in Teye et al.'s networks; ``resnet20`` and the Pitfalls
networks keep theirs.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from .ensemble_layers import parametric_layers
from .torch_trainer import BASE_DEFAULTS, Method, with_network

__all__ = ["MCBatchNorm", "insert_batchnorm", "batch_statistics"]

_BN = (nn.BatchNorm1d, nn.BatchNorm2d)


def insert_batchnorm(model: nn.Module) -> nn.Module:
    """``model`` with a batch norm after every Linear and Conv2d but the last one, inside their ``nn.Sequential``
    (unchanged when it already has batch norm)."""
    if any(isinstance(m, _BN) for m in model.modules()):
        return model
    last = parametric_layers(model)[-1][2]
    for seq in [m for m in model.modules() if isinstance(m, nn.Sequential)]:
        for i in reversed(range(len(seq))):
            layer = seq[i]
            if layer is last or not isinstance(layer, (nn.Linear, nn.Conv2d)):
                continue
            seq.insert(i + 1, nn.BatchNorm1d(layer.out_features) if isinstance(layer, nn.Linear)
                       else nn.BatchNorm2d(layer.out_channels))
    return model


@torch.no_grad()
def batch_statistics(model: nn.Module, batch: torch.Tensor) -> nn.Module:
    """Set every batch norm's running statistics to those of ``batch`` as it flows through ``model`` (evaluation
    mode; mean and unbiased variance over all axes but the channels) and return ``model``."""

    def hook(module, inputs):
        x = inputs[0]
        dims = (0, *range(2, x.dim()))
        module.running_mean.copy_(x.mean(dims))
        module.running_var.copy_(x.var(dims, unbiased=True))

    handles = [m.register_forward_pre_hook(hook) for m in model.modules() if isinstance(m, _BN)]
    try:
        model.eval()
        model(batch)
    finally:
        for h in handles:
            h.remove()
    return model


class MCBatchNorm(Method):
    """Members normalise with the statistics of one random training batch each."""

    name = "mc_batchnorm"
    member_kind = "mc_sample"
    shape = "posterior"
    defaults = {**BASE_DEFAULTS, "mc_batch_size": 128}
    default_members = 20
    summary = "MC batch norm: batch-norm statistics of a random training batch per member (Teye et al. 2018)"

    @classmethod
    def check_hyperparameters(cls, hp) -> None:
        if hp["mc_batch_size"] < 2:
            raise ValueError(f"mc_batchnorm: mc_batch_size must be at least 2 (a variance); got {hp['mc_batch_size']}")

    def prepare_model(self, model: nn.Module) -> nn.Module:
        return insert_batchnorm(model)

    def member_predictor(self, model, state, ctx, seed):
        gen = torch.Generator().manual_seed(seed)
        n = len(ctx.x_train)
        index = torch.randperm(n, generator=gen)[: min(n, int(self.hp["mc_batch_size"]))].to(ctx.device)
        member = batch_statistics(copy.deepcopy(model), ctx.x_train[index])
        return with_network(lambda x, g: member(x), member)
