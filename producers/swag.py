# SPDX-License-Identifier: MIT
"""SWA-Gaussian (Maddox et al. 2019): SGD to a mode, then ``swa_epochs`` epochs at the constant rate ``swa_lr``
collecting the weights once per epoch into running first and second moments (SWAG-diagonal) and, for the low-rank
variant, the last ``rank`` deviations from the running mean (the rows of :math:`D`). Members are weight samples

.. math::
    \\theta = \\bar\\theta + \\sqrt{s} \\, \\big(\\Sigma_{diag}^{1/2} z_1 + D^\\top z_2 / \\sqrt{K - 1}\\big),
    \\qquad \\mathrm{Cov}[\\theta] = s \\, \\big(\\Sigma_{diag} + D^\\top D / (K - 1)\\big)

with :math:`\\Sigma_{diag} = \\overline{\\theta^2} - \\bar\\theta^2` (clamped at 1e-30), :math:`z_1, z_2` standard normal
and the low-rank term only for the low-rank variant. This is ``SWAG.sample_fullrank`` of wjmaddox/swa_gaussian
(``swag/posteriors/swag.py``): the paper's factor 1/2 in the covariance (its :math:`1/\\sqrt 2` in the sample) is
the code's scale ``s = 0.5``, applied once; and :math:`K` is the configured ``rank`` (the code's ``max_num_models``)
even while fewer than ``rank`` deviations have been collected. The scale defaults to the code's experiment settings
(``experiments/uncertainty/README.md``): 0.5 for SWAG, 1.0 for SWAG-diagonal.

The pretraining rate decays from ``lr`` to ``swa_lr`` between 50% and 90% of ``epochs`` (the SWAG schedule).
URSABench (appendix D) uses SWAG-diagonal with the last 20 iterates; Pitfalls (appendix B) the low-rank variant.
Networks with batch normalisation get their running statistics recomputed on the training set for every sample
(SWAG's ``bn_update``).

SWAG-Dropout (``swag_dropout``) is swa_gaussian's ``SWAGDrop`` (``experiments/uncertainty/uncertainty.py``; the
Pitfalls code, bayesgroup/pytorch-ensembles, has no SWAG on dropout networks): the network carries Bernoulli
dropout, is trained and its iterates collected with dropout on, and each member is one SWAG weight draw, batch-norm
statistics recomputed with dropout on (``bn_update`` runs in training mode), then predicting with dropout on: a
member differs from another by its weight draw and by its masks. The rate defaults to swa_gaussian's 0.05
(``VGG16Drop``, ``WideResNet28x10Drop``), the covariance to SWAG's (rank 20, scale 0.5); ``--set scale=0`` is the
code's "SWA-Dropout" (the SWA mean under dropout masks).
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from .models import set_mc_dropout
from .torch_trainer import BASE_DEFAULTS, Method, with_network

__all__ = ["SWAGDiagonal", "SWAG", "SWAGDropout", "bn_update"]


@torch.no_grad()
def bn_update(model: nn.Module, x_train: torch.Tensor, *, batch_size: int) -> None:
    """Recompute batch-norm running statistics with one pass over ``x_train`` (cumulative averages)."""
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # None: a cumulative moving average over the pass
    model.train()
    for start in range(0, len(x_train), batch_size):
        model(x_train[start: start + batch_size])
    model.eval()


class SWAGDiagonal(Method):
    """SWAG with a diagonal covariance."""

    name = "swag_diag"
    member_kind = "posterior_sample"
    shape = "posterior"
    defaults = {**BASE_DEFAULTS, "swa_epochs": 20, "swa_lr": 0.01, "scale": 1.0}
    default_members = 20
    summary = "SWAG with diagonal covariance"
    rank_key: str | None = None

    @property
    def rank(self) -> int:
        return int(self.hp[self.rank_key]) if self.rank_key else 0

    def total_epochs(self) -> int:
        return int(self.hp["epochs"]) + int(self.hp["swa_epochs"])

    def schedule(self, t):
        pre, lr, swa_lr = self.hp["epochs"], self.hp["lr"], self.hp["swa_lr"]
        u = t / max(pre, 1)
        if u <= 0.5:
            return {"lr": lr}
        if u <= 0.9:
            return {"lr": lr + (swa_lr - lr) * (u - 0.5) / 0.4}
        return {"lr": swa_lr}

    def init_state(self, model):
        d = sum(p.numel() for p in model.parameters())
        device = next(model.parameters()).device
        state = {
            "n": 0,
            "mean": torch.zeros(d, dtype=torch.float64, device=device),
            "sq_mean": torch.zeros(d, dtype=torch.float64, device=device),
        }
        if self.rank:
            state["deviations"] = torch.zeros(self.rank, d, dtype=torch.float32, device=device)
        return state

    def on_epoch_end(self, model, state, epoch):
        if epoch <= self.hp["epochs"]:
            return
        w = parameters_to_vector(model.parameters()).detach().double()
        n = state["n"]
        state["mean"].mul_(n / (n + 1)).add_(w / (n + 1))
        state["sq_mean"].mul_(n / (n + 1)).add_(w * w / (n + 1))
        if self.rank:
            # A ring buffer of the last `rank` deviations from the running mean (row n mod rank).
            state["deviations"][n % self.rank] = (w - state["mean"]).float()
        state["n"] = n + 1

    def sample_weights(self, state, generator: torch.Generator) -> torch.Tensor:
        """One weight vector from the SWAG Gaussian of the module docstring (on the mean's device, float32)."""
        mean = state["mean"]
        var = (state["sq_mean"] - mean * mean).clamp_min(1e-30)
        z1 = torch.randn(mean.shape, generator=generator, dtype=torch.float64).to(mean.device)
        sample = var.sqrt() * z1
        k = min(state["n"], self.rank)
        if k:
            # swa_gaussian divides by sqrt(max_num_models - 1) whatever number of deviations it holds.
            z2 = torch.randn(k, generator=generator, dtype=torch.float64).to(mean.device)
            sample = sample + state["deviations"][:k].double().T @ z2 / math.sqrt(self.rank - 1)
        return (mean + math.sqrt(self.hp["scale"]) * sample).float()

    def sample_model(self, model, state, ctx, seed) -> nn.Module:
        """A copy of ``model`` holding one weight sample (seeded by ``seed``), its batch-norm statistics recomputed,
        in evaluation mode."""
        if state["n"] < 2:
            raise ValueError(f"{self.name} needs at least 2 collected iterates; set swa_epochs >= 2")
        sampled = copy.deepcopy(model)
        vector_to_parameters(self.sample_weights(state, torch.Generator().manual_seed(seed)), sampled.parameters())
        bn_update(sampled, ctx.x_train, batch_size=ctx.settings.predict_batch_size)
        sampled.eval()
        return sampled

    def member_predictor(self, model, state, ctx, seed):
        sampled = self.sample_model(model, state, ctx, seed)
        return with_network(lambda x, gen: sampled(x), sampled)

    def member_info(self, index, epoch):
        return {"scale": self.hp["scale"], "rank": self.rank}


class SWAG(SWAGDiagonal):
    """SWAG with a diagonal plus rank-``rank`` covariance (the last ``rank`` deviations)."""

    name = "swag"
    defaults = {**SWAGDiagonal.defaults, "rank": 20, "scale": 0.5}
    summary = "SWAG with diagonal plus low-rank covariance"
    rank_key = "rank"

    @classmethod
    def check_hyperparameters(cls, hp):
        if hp["rank"] < 2:
            raise ValueError(f"{cls.name}: rank must be at least 2 (samples divide by sqrt(rank - 1)); got {hp['rank']}")


class SWAGDropout(SWAG):
    """SWAG on a Bernoulli-dropout network; members are a SWAG draw each, predicting with fresh dropout masks."""

    name = "swag_dropout"
    dropout = "bernoulli"
    test_time_dropout = True
    defaults = {**SWAG.defaults, "dropout_rate": 0.05}
    summary = "SWAG on a dropout network (a weight draw and dropout masks per member)"

    def member_predictor(self, model, state, ctx, seed):
        sampled = self.sample_model(model, state, ctx, seed)
        if not set_mc_dropout(sampled, True):
            raise ValueError(f"{self.name}: the {ctx.settings.model} network has no dropout layers")
        # predict_splits reseeds the global generator per member and split, so each member has its own masks.
        return with_network(lambda x, gen: sampled(x), sampled)
