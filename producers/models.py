# SPDX-License-Identifier: MIT
"""The producers' networks: URSABench's MLP (784-200-200-C), the shift paper's LeNet-style CNN, and ResNet-20.

Each model takes float images (n, channels, height, width) in [0, 1], normalises them with the training set's
mean and std, and returns logits. ``dropout`` is ``"none"``, ``"bernoulli"`` (MC dropout, Gal & Ghahramani 2016) or
``"gaussian"`` (MC Gaussian dropout, Laves et al. 2020, eqs. 6-9: the next layer's output is sampled from
N(W x, p / (1 - p) W^2 x^2) by the reparameterisation trick). Placement follows the papers: after each hidden layer
of the MLP (URSABench appendix D), before each fully connected layer of the CNN (shift paper, appendix A), and before
the final linear layer of ResNet-20 (URSABench appendix D, CIFAR).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "MODELS",
    "DROPOUT_KINDS",
    "GaussianDropoutLinear",
    "GaussianDropoutConv2d",
    "build_model",
    "set_mc_dropout",
    "count_parameters",
]

DROPOUT_KINDS = ("none", "bernoulli", "gaussian")


class GaussianDropoutLinear(nn.Linear):
    """A linear layer whose input carries Gaussian dropout of rate ``p``, sampled at the output (local
    reparameterisation). Deterministic (the mean) unless the module is in training mode."""

    def __init__(self, in_features: int, out_features: int, p: float) -> None:
        super().__init__(in_features, out_features)
        self.p = float(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mu = F.linear(x, self.weight, self.bias)
        if not self.training or self.p == 0.0:
            return mu
        var = F.linear(x * x, self.weight * self.weight) * (self.p / (1.0 - self.p))
        return mu + var.clamp_min(0.0).sqrt() * torch.randn_like(mu)


class GaussianDropoutConv2d(nn.Conv2d):
    """The convolutional counterpart of :class:`GaussianDropoutLinear` (Laves et al. 2020, figure 3)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, p: float, **kwargs) -> None:
        super().__init__(in_channels, out_channels, kernel_size, **kwargs)
        self.p = float(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mu = self._conv_forward(x, self.weight, self.bias)
        if not self.training or self.p == 0.0:
            return mu
        var = self._conv_forward(x * x, self.weight * self.weight, None) * (self.p / (1.0 - self.p))
        return mu + var.clamp_min(0.0).sqrt() * torch.randn_like(mu)


def _dropout_linear(in_features: int, out_features: int, dropout: str, p: float) -> nn.Module:
    """A linear layer preceded by the requested dropout."""
    if dropout == "gaussian":
        return GaussianDropoutLinear(in_features, out_features, p)
    layer = nn.Linear(in_features, out_features)
    return nn.Sequential(nn.Dropout(p), layer) if dropout == "bernoulli" else layer


class _Normalize(nn.Module):
    def __init__(self, mean: float, std: float) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(float(mean)))
        self.register_buffer("std", torch.tensor(float(std)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std


class MLP(nn.Module):
    """D-200-200-C with ReLU (URSABench's small-scale model)."""

    def __init__(self, input_shape, n_classes, *, mean, std, dropout="none", p=0.0, hidden=(200, 200)) -> None:
        super().__init__()
        c, h, w = input_shape
        self.normalize = _Normalize(mean, std)
        layers: list[nn.Module] = [nn.Flatten()]
        width = c * h * w
        for i, size in enumerate(hidden):
            layers.append(_dropout_linear(width, size, dropout, p) if i > 0 else nn.Linear(width, size))
            layers.append(nn.ReLU())
            width = size
        layers.append(_dropout_linear(width, n_classes, dropout, p))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(self.normalize(x))


class LeNet(nn.Module):
    """Two 3x3 convolutions (32, 64 filters), max-pooling, a 128-unit hidden layer (the shift paper's MNIST CNN)."""

    def __init__(self, input_shape, n_classes, *, mean, std, dropout="none", p=0.0) -> None:
        super().__init__()
        c, h, w = input_shape
        self.normalize = _Normalize(mean, std)
        self.features = nn.Sequential(
            nn.Conv2d(c, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten()
        )
        flat = 64 * ((h - 4) // 2) * ((w - 4) // 2)
        self.classifier = nn.Sequential(
            _dropout_linear(flat, 128, dropout, p), nn.ReLU(), _dropout_linear(128, n_classes, dropout, p)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(self.normalize(x)))


class _BasicBlock(nn.Module):
    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet20(nn.Module):
    """ResNet-20 for 32x32 inputs (He et al. 2016, section 4.2): 3 stages of 3 basic blocks, 16/32/64 filters."""

    def __init__(self, input_shape, n_classes, *, mean, std, dropout="none", p=0.0) -> None:
        super().__init__()
        c = input_shape[0]
        self.normalize = _Normalize(mean, std)
        self.stem = nn.Sequential(nn.Conv2d(c, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        blocks, planes = [], 16
        for stage, width in enumerate((16, 32, 64)):
            for i in range(3):
                blocks.append(_BasicBlock(planes, width, 2 if stage > 0 and i == 0 else 1))
                planes = width
        self.blocks = nn.Sequential(*blocks)
        self.head = _dropout_linear(64, n_classes, dropout, p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.blocks(self.stem(self.normalize(x)))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(out, 1), 1))


MODELS = {"mlp": MLP, "lenet": LeNet, "resnet20": ResNet20}


def build_model(name: str, input_shape, n_classes: int, *, mean: float, std: float, dropout: str = "none",
                p: float = 0.0) -> nn.Module:
    """Instantiate a model of :data:`MODELS` (initialised from torch's global generator: seed it first)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; known: {sorted(MODELS)}")
    if dropout not in DROPOUT_KINDS:
        raise ValueError(f"dropout must be one of {DROPOUT_KINDS}; got {dropout!r}")
    if dropout != "none" and not 0.0 < p < 1.0:
        raise ValueError(f"dropout rate p must be in (0, 1); got {p}")
    return MODELS[name](tuple(input_shape), n_classes, mean=mean, std=std, dropout=dropout, p=p)


def set_mc_dropout(model: nn.Module, active: bool) -> int:
    """Put only the dropout layers in training mode (``active``) or evaluation mode; batch-norm layers keep
    their mode. Returns the number of dropout layers found."""
    found = 0
    for module in model.modules():
        if isinstance(module, (nn.Dropout, GaussianDropoutLinear, GaussianDropoutConv2d)):
            module.train(active)
            found += 1
    return found


def count_parameters(model: nn.Module) -> int:
    """The number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
