# SPDX-License-Identifier: MIT
r"""The producers' networks: URSABench's MLP (784-200-200-C), the shift paper's LeNet-style CNN, and ResNet-20.

Each model takes float images (n, channels, height, width) in [0, 1], normalises them with the training set's
mean and std, and returns logits. ``dropout`` is ``"none"``, ``"bernoulli"`` (MC dropout, Gal & Ghahramani 2016) or
``"gaussian"`` (MC Gaussian dropout, Laves et al. 2020, eqs. 6-9: the next layer's output is sampled from
N(W x, p / (1 - p) W^2 x^2) by the reparameterisation trick). Placement follows the papers: after each hidden layer
of the MLP (URSABench appendix D), before each fully connected layer of the CNN (shift paper, appendix A), and before
the final linear layer of ResNet-20 (URSABench appendix D, CIFAR).

The Pitfalls paper's CIFAR networks (bayesgroup/pytorch-ensembles ``models/``; sizes by name, see
:mod:`~ubench.producers.model_names`) follow that code, with three differences that keep them usable on any image
size: inputs are normalised with the training set's scalar mean and std (the code uses fixed per-channel CIFAR
constants), the final average pooling is adaptive (the code's ``AvgPool2d(8)``, identical on 32x32 inputs), and the
first convolution takes the task's channel count.

* PreResNet (``preresnet<depth>``): pre-activation blocks (BN, ReLU, conv), basic below depth 44 and bottleneck
  from 44 on, 16/32/64 base widths, 1x1 convolutional shortcuts without BN, a final BN and ReLU; convolutions
  initialised :math:`\mathcal N(0, 2 / (k^2 C_{out}))`, BN to (1, 0). Dropout (not in pytorch-ensembles; as in
  swa_gaussian's ``PreResNet*Drop``) goes before every convolution of a block.
* VGG with BN (``vgg16bn``): torchvision's configuration, a 512-512-C classifier with ``Dropout`` before each of its
  first two linear layers, convolutions initialised :math:`\mathcal N(0, 2 / (k^2 C_{out}))` with zero bias. The
  code always trains those two dropouts at p = 0.5 (torchvision's default), so ``dropout="none"`` keeps them at 0.5
  in training (off at test time) and a dropout method replaces the rate with its ``dropout_rate``.
* WideResNet (``wrn<depth>_<widen>``): BN-ReLU-conv blocks with biased convolutions, the stride on the second
  convolution, dropout between the two convolutions of a block (``WideResNet28x10do``: p = 0.3 there), and a final
  BN whose momentum is 0.9 (the code's value: PyTorch's momentum weighs the new batch, so the running statistics
  follow the last batches closely). The code defines a Xavier ``conv_init`` but never applies it: the layers keep
  PyTorch's default initialisation, and so do they here.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .model_names import check_input_size, parse_model_name

__all__ = [
    "MODELS",
    "FAMILIES",
    "PreResNet",
    "VGGBN",
    "WideResNet",
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
        if not self.training or self.p == 0.0:
            return F.linear(x, self.weight, self.bias)
        return self.sampled(x)

    def sampled(self, x: torch.Tensor) -> torch.Tensor:
        """One draw of the output, whatever the mode (``--save-models`` exports this)."""
        mu = F.linear(x, self.weight, self.bias)
        var = F.linear(x * x, self.weight * self.weight) * (self.p / (1.0 - self.p))
        return mu + var.clamp_min(0.0).sqrt() * torch.randn_like(mu)


class GaussianDropoutConv2d(nn.Conv2d):
    """The convolutional counterpart of :class:`GaussianDropoutLinear` (Laves et al. 2020, figure 3)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, p: float, **kwargs) -> None:
        super().__init__(in_channels, out_channels, kernel_size, **kwargs)
        self.p = float(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return self._conv_forward(x, self.weight, self.bias)
        return self.sampled(x)

    def sampled(self, x: torch.Tensor) -> torch.Tensor:
        """One draw of the output, whatever the mode (``--save-models`` exports this)."""
        mu = self._conv_forward(x, self.weight, self.bias)
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


def _dropout_conv(in_channels: int, out_channels: int, kernel_size: int, dropout: str, p: float,
                  **kwargs) -> nn.Module:
    """A convolution preceded by the requested dropout (Gaussian dropout: sampled at the convolution's output)."""
    if dropout == "gaussian":
        return GaussianDropoutConv2d(in_channels, out_channels, kernel_size, p, **kwargs)
    conv = nn.Conv2d(in_channels, out_channels, kernel_size, **kwargs)
    return nn.Sequential(nn.Dropout(p), conv) if dropout == "bernoulli" else conv


def _he_normal_fan_out(model: nn.Module) -> None:
    """pytorch-ensembles' convolution init, N(0, 2 / (k_h k_w C_out)), with zero biases; BN weights 1, biases 0."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            m.weight.data.normal_(0.0, math.sqrt(2.0 / (m.kernel_size[0] * m.kernel_size[1] * m.out_channels)))
            if m.bias is not None:
                m.bias.data.zero_()
        elif isinstance(m, nn.BatchNorm2d):
            m.weight.data.fill_(1.0)
            m.bias.data.zero_()


class _PreActBasic(nn.Module):
    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int, dropout: str, p: float) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = _dropout_conv(in_planes, planes, 3, dropout, p, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv2 = _dropout_conv(planes, planes, 3, dropout, p, padding=1, bias=False)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Conv2d(in_planes, planes, 1, stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv1(F.relu(self.bn1(x)))
        out = self.conv2(F.relu(self.bn2(out)))
        return out + self.shortcut(x)


class _PreActBottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_planes: int, planes: int, stride: int, dropout: str, p: float) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = _dropout_conv(in_planes, planes, 1, dropout, p, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv2 = _dropout_conv(planes, planes, 3, dropout, p, stride=stride, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes)
        self.conv3 = _dropout_conv(planes, planes * 4, 1, dropout, p, bias=False)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_planes != planes * 4:
            self.shortcut = nn.Conv2d(in_planes, planes * 4, 1, stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv1(F.relu(self.bn1(x)))
        out = self.conv2(F.relu(self.bn2(out)))
        out = self.conv3(F.relu(self.bn3(out)))
        return out + self.shortcut(x)


class PreResNet(nn.Module):
    """Pre-activation ResNet of depth 6n+2 (basic blocks) or 9n+2 (bottlenecks, depth >= 44), pytorch-ensembles'
    ``PreResNet110`` / ``PreResNet164`` and swa_gaussian's ``PreResNet*Drop``."""

    def __init__(self, input_shape, n_classes, *, mean, std, dropout="none", p=0.0, depth=20) -> None:
        super().__init__()
        block = _PreActBottleneck if depth >= 44 else _PreActBasic
        n = (depth - 2) // (9 if depth >= 44 else 6)
        self.normalize = _Normalize(mean, std)
        self.conv1 = nn.Conv2d(input_shape[0], 16, 3, padding=1, bias=False)
        layers, planes = [], 16
        for stage, width in enumerate((16, 32, 64)):
            for i in range(n):
                layers.append(block(planes, width, 2 if stage > 0 and i == 0 else 1, dropout, p))
                planes = width * block.expansion
        self.layers = nn.Sequential(*layers)
        self.bn = nn.BatchNorm2d(planes)
        self.fc = nn.Linear(planes, n_classes)
        _he_normal_fan_out(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn(self.layers(self.conv1(self.normalize(x)))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(out, 1), 1))


_VGG_CONFIG = {
    16: (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"),
    19: (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"),
}


class VGGBN(nn.Module):
    """VGG-16/19 with batch norm and pytorch-ensembles' 512-512-C classifier (``VGG16BN``); needs images of at least
    32x32 (five 2x2 max-poolings)."""

    def __init__(self, input_shape, n_classes, *, mean, std, dropout="none", p=0.0, depth=16) -> None:
        super().__init__()
        c, h, w = input_shape
        check_input_size(f"vgg{depth}bn", h, w)
        self.normalize = _Normalize(mean, std)
        layers: list[nn.Module] = []
        for v in _VGG_CONFIG[depth]:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(c, v, 3, padding=1), nn.BatchNorm2d(v), nn.ReLU(inplace=True)]
                c = v
        self.features = nn.Sequential(*layers)
        # The code's classifier always has Dropout() (p = 0.5) before its first two linear layers.
        kind, rate = ("bernoulli", 0.5) if dropout == "none" else (dropout, p)
        self.classifier = nn.Sequential(
            _dropout_linear(512, 512, kind, rate), nn.ReLU(True), _dropout_linear(512, 512, kind, rate),
            nn.ReLU(True), nn.Linear(512, n_classes),
        )
        _he_normal_fan_out(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.features(self.normalize(x))
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(out, 1), 1))


class _WideBasic(nn.Module):
    def __init__(self, in_planes: int, planes: int, stride: int, dropout: str, p: float) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = nn.Conv2d(in_planes, planes, 3, padding=1, bias=True)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv2 = _dropout_conv(planes, planes, 3, dropout, p, stride=stride, padding=1, bias=True)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Conv2d(in_planes, planes, 1, stride, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv1(F.relu(self.bn1(x)))
        out = self.conv2(F.relu(self.bn2(out)))
        return out + self.shortcut(x)


class WideResNet(nn.Module):
    """WideResNet-depth-widen (Zagoruyko & Komodakis 2016) as in pytorch-ensembles' ``WideResNet28x10``."""

    def __init__(self, input_shape, n_classes, *, mean, std, dropout="none", p=0.0, depth=28, widen=10) -> None:
        super().__init__()
        n = (depth - 4) // 6
        widths = (16 * widen, 32 * widen, 64 * widen)
        self.normalize = _Normalize(mean, std)
        self.conv1 = nn.Conv2d(input_shape[0], 16, 3, padding=1, bias=True)
        layers, planes = [], 16
        for stage, width in enumerate(widths):
            for i in range(n):
                layers.append(_WideBasic(planes, width, 2 if stage > 0 and i == 0 else 1, dropout, p))
                planes = width
        self.layers = nn.Sequential(*layers)
        self.bn = nn.BatchNorm2d(planes, momentum=0.9)
        self.linear = nn.Linear(planes, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn(self.layers(self.conv1(self.normalize(x)))))
        return self.linear(torch.flatten(F.adaptive_avg_pool2d(out, 1), 1))


MODELS = {"mlp": MLP, "lenet": LeNet, "resnet20": ResNet20}
#: The sized families of :func:`~ubench.producers.model_names.parse_model_name`.
FAMILIES = {"preresnet": PreResNet, "vgg_bn": VGGBN, "wrn": WideResNet}


def build_model(name: str, input_shape, n_classes: int, *, mean: float, std: float, dropout: str = "none",
                p: float = 0.0) -> nn.Module:
    """Instantiate a model of :data:`MODELS` or a sized family of :data:`FAMILIES` by name (``preresnet110``,
    ``vgg16bn``, ``wrn28_10``), initialised from torch's global generator: seed it first."""
    spec = parse_model_name(name)
    if dropout not in DROPOUT_KINDS:
        raise ValueError(f"dropout must be one of {DROPOUT_KINDS}; got {dropout!r}")
    if dropout != "none" and not 0.0 < p < 1.0:
        raise ValueError(f"dropout rate p must be in (0, 1); got {p}")
    common = dict(mean=mean, std=std, dropout=dropout, p=p)
    if spec.family in MODELS:
        return MODELS[spec.family](tuple(input_shape), n_classes, **common)
    sizes = {"depth": spec.depth, **({"widen": spec.widen} if spec.family == "wrn" else {})}
    return FAMILIES[spec.family](tuple(input_shape), n_classes, **common, **sizes)


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
