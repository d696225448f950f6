# SPDX-License-Identifier: MIT
r"""Layers of the efficient ensembles (issue #31): one network whose M members share most of its weights.

* BatchEnsemble (Wen et al. 2020): every linear map :math:`W` is shared and member :math:`m` owns rank-one fast
  weights, :math:`y = ((x \circ r_m) W^\top) \circ s_m + b_m`. As in the reference code (edward2's
  ``BatchEnsembleDense`` / ``Conv2DBatchEnsemble``, and torch-uncertainty's ``BatchLinear``/``BatchConv2d``, which
  follow it), a training batch holds the members' rows one block after another (member-major), :math:`r, s \sim
  \mathcal N(1, 0.5^2)` (edward2's ``random_sign_init = -0.5``), :math:`W` keeps the base layer's initialisation and
  :math:`b_m` the uniform :math:`\pm 1/\sqrt{\text{fan-in}}` of PyTorch's layers.
* Packed-Ensembles (Laurent et al. 2023; the authors' code is torch-uncertainty's ``PackedLinear``/``PackedConv2d``):
  every layer is widened by :math:`\alpha` and split into :math:`M\gamma` groups, so the members are independent
  sub-networks packed into grouped layers; the first layer sees the whole input (one group), the last gives
  :math:`M \times C` outputs, member-major. Widths are rounded up to a multiple of :math:`M\gamma` (the reference
  refuses widths that do not divide; ``ceil`` keeps every M usable on the 200-unit MLP).
* MIMO (Havasi et al. 2021; uncertainty-baselines ``baselines/cifar/mimo.py``): the first layer takes the M members'
  inputs stacked along channels, the last one gives M heads; nothing else changes.

:func:`to_batch_ensemble`, :func:`to_packed` and :func:`to_mimo` convert a network of ``producers/models.py`` in
place of its layers (Linear, Conv2d, BatchNorm); forward order is the order of ``model.modules()``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["BatchLinear", "BatchConv2d", "PackedLinear", "packed_width", "to_batch_ensemble", "to_packed",
           "to_mimo", "set_member", "parametric_layers"]


def parametric_layers(model: nn.Module) -> list[tuple[nn.Module, str, nn.Module]]:
    """``(parent, attribute, layer)`` of every Linear and Conv2d, in forward (depth-first registration) order."""
    out = []
    for qualname, layer in model.named_modules():
        if isinstance(layer, (nn.Linear, nn.Conv2d)):
            parent, _, name = qualname.rpartition(".")
            out.append((model.get_submodule(parent), name, layer))
    return out


def _replace(parent: nn.Module, name: str, layer: nn.Module) -> None:
    if isinstance(parent, nn.Sequential):
        parent[int(name)] = layer
    else:
        setattr(parent, name, layer)


class _Fast(nn.Module):
    """The rank-one fast weights of M members and which member(s) a call uses (``member``: None = the rows are
    M member-major blocks; an int = every row is that member's)."""

    def __init__(self, n_members: int, n_in: int, n_out: int, bias: torch.Tensor | None):
        super().__init__()
        self.n_members, self.member = int(n_members), None
        self.r = nn.Parameter(torch.empty(n_members, n_in).normal_(1.0, 0.5))
        self.s = nn.Parameter(torch.empty(n_members, n_out).normal_(1.0, 0.5))
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone().repeat(n_members, 1))

    def rows(self, p: torch.Tensor, n: int) -> torch.Tensor:
        """``p`` (M, F) per row of a batch of ``n`` rows."""
        if self.member is not None:
            return p[self.member].expand(n, -1)
        if n % self.n_members:
            raise ValueError(f"a BatchEnsemble batch holds M = {self.n_members} blocks; got {n} rows")
        return p.repeat_interleave(n // self.n_members, dim=0)


class BatchLinear(_Fast):
    """BatchEnsemble's linear layer, from an ``nn.Linear`` whose weight is the shared :math:`W`."""

    def __init__(self, base: nn.Linear, n_members: int):
        super().__init__(n_members, base.in_features, base.out_features, base.bias)
        self.weight = nn.Parameter(base.weight.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        out = F.linear(x * self.rows(self.r, n), self.weight) * self.rows(self.s, n)
        return out if self.bias is None else out + self.rows(self.bias, n)


class BatchConv2d(_Fast):
    """BatchEnsemble's convolution: input channels scaled by :math:`r_m`, output channels by :math:`s_m`."""

    def __init__(self, base: nn.Conv2d, n_members: int):
        super().__init__(n_members, base.in_channels, base.out_channels, base.bias)
        self.conv = base
        self.conv.bias = None  # moved into the members' biases

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        out = self.conv(x * self.rows(self.r, n)[:, :, None, None]) * self.rows(self.s, n)[:, :, None, None]
        return out if self.bias is None else out + self.rows(self.bias, n)[:, :, None, None]


def set_member(model: nn.Module, member: int | None) -> None:
    """Make every BatchEnsemble layer compute member ``member`` for all rows (None: member-major blocks)."""
    for m in model.modules():
        if isinstance(m, _Fast):
            m.member = member


def to_batch_ensemble(model: nn.Module, n_members: int) -> nn.Module:
    """Replace every Linear and Conv2d of ``model`` by its BatchEnsemble layer (batch norm stays shared)."""
    for parent, name, layer in parametric_layers(model):
        _replace(parent, name, BatchLinear(layer, n_members) if isinstance(layer, nn.Linear)
                 else BatchConv2d(layer, n_members))
    return model


def packed_width(width: int, alpha: float, groups: int) -> int:
    """``width * alpha`` rounded up to a multiple of ``groups``."""
    return int(math.ceil(width * alpha / groups) * groups)


class PackedLinear(nn.Module):
    """A block-diagonal linear layer of ``groups`` blocks: weight (G, out / G, in / G), bias (out,); the input's
    features are G contiguous blocks, so are the output's (torch-uncertainty's ``PackedLinear`` layout)."""

    def __init__(self, in_features: int, out_features: int, groups: int, bias: bool = True):
        super().__init__()
        if in_features % groups or out_features % groups:
            raise ValueError(f"{in_features} -> {out_features} features do not split into {groups} groups")
        self.groups = int(groups)
        self.weight = nn.Parameter(torch.empty(groups, out_features // groups, in_features // groups))
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None
        for g in range(groups):  # PyTorch's Linear initialisation of each block (the reference's too)
            nn.init.kaiming_uniform_(self.weight[g], a=math.sqrt(5))
        if self.bias is not None:
            bound = 1.0 / math.sqrt(in_features // groups)
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        blocks = x.reshape(*x.shape[:-1], self.groups, -1)
        out = torch.einsum("...gi,goi->...go", blocks, self.weight).reshape(*x.shape[:-1], -1)
        return out if self.bias is None else out + self.bias


class _MemberMajor(nn.Module):
    """The last layer of a packed network: (B, M C) -> (M B, C), member-major (the reference's
    ``rearrange(out, "b (m c) -> (m b) c")``)."""

    def __init__(self, layer: nn.Module, n_members: int):
        super().__init__()
        self.layer, self.n_members = layer, int(n_members)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.layer(x)
        return out.reshape(out.shape[0], self.n_members, -1).transpose(0, 1).reshape(-1, out.shape[1] // self.n_members)


def to_packed(model: nn.Module, n_members: int, alpha: float, gamma: int) -> nn.Module:
    """Replace the layers of ``model`` by their Packed-Ensembles counterparts (widths :func:`packed_width`,
    ``M gamma`` groups; the first layer ungrouped on the raw input, the last one M heads) and widen its batch
    norms. The output is (M B, C), member-major. Conv2d with groups, Linear as :class:`PackedLinear`."""
    layers = parametric_layers(model)
    groups = n_members * gamma
    widths: dict[int, int] = {}

    def wide(c: int) -> int:
        return widths.setdefault(c, packed_width(c, alpha, groups))

    last_conv: tuple[int, int] | None = None  # (channels, widened channels) of the latest convolution
    for i, (parent, name, layer) in enumerate(layers):
        first, last = i == 0, i == len(layers) - 1
        if isinstance(layer, nn.Conv2d):
            c_in = layer.in_channels if first else wide(layer.in_channels)
            c_out = layer.out_channels * n_members if last else wide(layer.out_channels)
            new = nn.Conv2d(c_in, c_out, layer.kernel_size, layer.stride, layer.padding, layer.dilation,
                            groups=1 if first else groups, bias=layer.bias is not None)
            last_conv = (layer.out_channels, c_out)
        else:
            if first:
                f_in = layer.in_features
            elif last_conv is not None and layer.in_features != last_conv[0]:
                # a Linear after Flatten: the last convolution's (widened) channels times the spatial positions
                f_in = last_conv[1] * (layer.in_features // last_conv[0])
                last_conv = None
            else:
                f_in = wide(layer.in_features)
            f_out = layer.out_features * n_members if last else wide(layer.out_features)
            new = PackedLinear(f_in, f_out, 1 if first else groups, bias=layer.bias is not None)
        _replace(parent, name, _MemberMajor(new, n_members) if last else new)
    for parent in list(model.modules()):
        for name, child in parent.named_children():
            if isinstance(child, (nn.BatchNorm1d, nn.BatchNorm2d)):
                _replace(parent, name, type(child)(wide(child.num_features), momentum=child.momentum))
    return model


def to_mimo(model: nn.Module, n_members: int) -> nn.Module:
    """MIMO: the first layer takes M stacked inputs (``in x M`` channels or features), the last gives M heads
    (``C x M`` outputs, member ``m`` at ``[m C, (m + 1) C)``); both keep PyTorch's initialisation."""
    layers = parametric_layers(model)
    (p0, n0, first), (p1, n1, last) = layers[0], layers[-1]
    if isinstance(first, nn.Conv2d):
        new_first: nn.Module = nn.Conv2d(first.in_channels * n_members, first.out_channels, first.kernel_size,
                                         first.stride, first.padding, bias=first.bias is not None)
    else:
        new_first = nn.Linear(first.in_features * n_members, first.out_features, bias=first.bias is not None)
    _replace(p0, n0, new_first)
    _replace(p1, n1, nn.Linear(last.in_features, last.out_features * n_members, bias=last.bias is not None))
    return model
