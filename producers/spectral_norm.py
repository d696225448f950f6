# SPDX-License-Identifier: MIT
r"""Spectral normalisation with a bound, for the distance-aware single models (SNGP, DDU).

:math:`W \mapsto W \min(1, c / \hat\sigma)`, where :math:`\hat\sigma` is the largest singular value of :math:`W`
(a convolution's kernel reshaped to ``(out, in k k)``) estimated by power iteration, one step per training forward
with the vectors kept between steps: edward2's ``SpectralNormalization`` (``norm_multiplier`` c, used by
uncertainty-baselines' SNGP with c = 6) and DDU's ``spectral_norm_fc`` (``coeff`` c = 3). Unlike torch's
``spectral_norm``, a weight whose norm is already below c is left as it is. For convolutions DDU and edward2
bound the norm of the convolution operator (``SpectralNormalizationConv2D``); ubench bounds the kernel matrix,
torch's convention, which bounds the same operator up to a factor of the kernel size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

__all__ = ["BoundedSpectralNorm", "bound_spectral_norms"]


class BoundedSpectralNorm(nn.Module):
    """The parametrization ``W -> W min(1, bound / sigma)`` with ``sigma`` from ``iterations`` power steps."""

    def __init__(self, weight: torch.Tensor, bound: float, iterations: int = 1, eps: float = 1e-12):
        super().__init__()
        rows = weight.shape[0]
        cols = weight.numel() // rows
        self.bound, self.iterations, self.eps = float(bound), int(iterations), eps
        self.register_buffer("u", F.normalize(torch.randn(rows), dim=0, eps=eps))
        self.register_buffer("v", F.normalize(torch.randn(cols), dim=0, eps=eps))

    @torch.no_grad()
    def _power_step(self, w: torch.Tensor) -> None:
        for _ in range(self.iterations):
            self.v.copy_(F.normalize(w.t() @ self.u, dim=0, eps=self.eps))
            self.u.copy_(F.normalize(w @ self.v, dim=0, eps=self.eps))

    def sigma(self, weight: torch.Tensor) -> torch.Tensor:
        """The current estimate ``u^T W v`` (differentiable in ``W``)."""
        w = weight.reshape(weight.shape[0], -1)
        return torch.dot(self.u, w @ self.v)

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        w = weight.reshape(weight.shape[0], -1)
        if self.training:
            self._power_step(w.detach())
        sigma = torch.dot(self.u, w @ self.v)
        return weight * torch.clamp(self.bound / sigma, max=1.0)


def bound_spectral_norms(layers, bound: float, iterations: int = 1) -> None:
    """Register :class:`BoundedSpectralNorm` on the weight of every module of ``layers``."""
    for layer in layers:
        parametrize.register_parametrization(layer, "weight", BoundedSpectralNorm(layer.weight.detach(), bound,
                                                                                   iterations))
