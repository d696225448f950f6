# SPDX-License-Identifier: MIT
r"""SNGP (Liu et al. 2020): spectral-normalised hidden layers and a random-feature Gaussian-process output layer.

Follows uncertainty-baselines' ``baselines/cifar/sngp.py`` with edward2's ``RandomFeatureGaussianProcess`` and its
defaults: hidden layers' weights bounded to spectral norm ``spec_norm_bound`` = 6 (one power iteration per step,
:mod:`~ubench.producers.spectral_norm`); the output layer takes the penultimate features through a fixed random
Gaussian projection to ``gp_input_dim`` = 128 dimensions (Johnson-Lindenstrauss; keras' ``random_normal``, standard
deviation 0.05), a layer norm (``gp_input_normalization``; keras' epsilon 1e-3) or, without it, a division by
:math:`\sqrt{\text{gp\_scale}}` (``gp_scale`` = 2, the RBF length-scale, which edward2 applies only when the layer norm
is off), and ``gp_hidden_dim`` = 1024 orthogonal random Fourier features :math:`\phi(z) = \cos(W z + b)`
(``gp_random_feature_type="orf"``: ``OrthogonalRandomFeatures(stddev=0.05)`` in uncertainty-baselines'
``wide_resnet_sngp.py``, so :math:`W`'s rows have the norms of Gaussian rows of standard deviation
:data:`RANDOM_FEATURE_STDDEV` = 0.05 and :math:`\phi` approximates the RBF kernel
:math:`\exp(-0.05^2 \lVert z - z' \rVert^2 / 2)`, of length-scale 20 on the layer-normed
:math:`\lVert z \rVert \approx \sqrt{128}`; not scaled by :math:`\sqrt{2/D}`: ``scale_random_features=False``),
then a linear map :math:`\beta` without bias to the logits. The posterior precision of :math:`\beta` under the
Gaussian likelihood (``gp_cov_likelihood="gaussian"``) is

.. math:: P = s I + \sum_{i \in \text{last epoch}} \phi_i \phi_i^\top

(``gp_cov_ridge_penalty`` s = 1, ``gp_cov_discount_factor = -1``: reset at the start of each epoch, so the
training features of the last epoch count, as the weights move during it), and a sample's predictive variance is
:math:`v = s\, \phi^\top P^{-1} \phi`. Members predict with the mean-field logits
:math:`\hat z / \sqrt{1 + \lambda v}` (``gp_mean_field_factor`` :math:`\lambda` = 25, the code's CIFAR-10 default;
the paper's probit approximation has :math:`\lambda = \pi / 8`). One
member; the method's score is the variance :math:`v` (direction ``uncertainty``).

For the MLP and LeNet, whose hidden layers have no residual connections, the bound applies to every hidden
Linear and Conv2d; the paper's networks are residual (its toy ResFFN, WRN-28-10).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from .ensemble_layers import parametric_layers
from .spectral_norm import bound_spectral_norms
from .torch_trainer import BASE_DEFAULTS, Method, predict_values, train_epoch, with_network

__all__ = ["RANDOM_FEATURE_STDDEV", "SNGP", "RandomFeatureGP", "orthogonal_random_features"]

#: Standard deviation of the random features' Gaussian rows and of the input projection (uncertainty-baselines'
#: ``make_random_feature_initializer`` and keras' ``random_normal``). With unit rows instead, the kernel's
#: length-scale is 1 where layer-normed features lie ~16 apart: every input gets nearly orthogonal features, the
#: gradient into the hidden layers is 20 times larger, and SGD at lr 0.05 diverges on Fashion-MNIST (chance accuracy).
RANDOM_FEATURE_STDDEV = 0.05


def orthogonal_random_features(n_features: int, dim: int, generator: torch.Generator,
                                stddev: float = 1.0) -> torch.Tensor:
    """edward2's orthogonal random features (``orf``): blocks of ``dim`` orthonormal rows (QR of a Gaussian
    matrix), each row scaled by ``stddev`` times the norm of an independent standard Gaussian vector of ``dim``
    entries, so that every row has the norm distribution of a Gaussian row of that standard deviation;
    (n_features, dim)."""
    blocks = []
    for _ in range(math.ceil(n_features / dim)):
        q, _ = torch.linalg.qr(torch.randn(dim, dim, generator=generator, dtype=torch.float64))
        blocks.append(q.t())
    w = torch.cat(blocks)[:n_features]
    norms = torch.randn(n_features, dim, generator=generator, dtype=torch.float64).norm(dim=1)
    return (stddev * w * norms[:, None]).float()


class _Scale(nn.Module):
    def __init__(self, factor: float):
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor


class RandomFeatureGP(nn.Module):
    """The GP output layer: projection, layer norm (or the length-scale), cos random features, linear logits,
    Laplace precision."""

    def __init__(self, in_features: int, n_classes: int, *, input_dim: int, n_features: int, ridge: float,
                 mean_field: float, normalize: bool, seed: int, length_scale: float = 2.0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        d = in_features if input_dim <= 0 else input_dim
        self.register_buffer("projection", RANDOM_FEATURE_STDDEV * torch.randn(d, in_features, generator=gen)
                             if input_dim > 0 else torch.eye(in_features))
        # edward2 applies the length-scale only to inputs it does not layer-normalise
        self.norm = nn.LayerNorm(d, eps=1e-3) if normalize else _Scale(1.0 / math.sqrt(length_scale))
        self.register_buffer("rff_weight", orthogonal_random_features(n_features, d, gen, RANDOM_FEATURE_STDDEV))
        self.register_buffer("rff_bias", torch.rand(n_features, generator=gen) * 2 * math.pi)
        self.beta = nn.Linear(n_features, n_classes, bias=False)
        self.ridge, self.mean_field = float(ridge), float(mean_field)
        self.register_buffer("precision", self.ridge * torch.eye(n_features, dtype=torch.float64))
        self.accumulate = False
        self.last_variance: torch.Tensor | None = None
        self._covariance: torch.Tensor | None = None

    def features(self, h: torch.Tensor) -> torch.Tensor:
        return torch.cos(self.norm(h @ self.projection.t()) @ self.rff_weight.t() + self.rff_bias)

    def reset_precision(self) -> None:
        self.precision.copy_(self.ridge * torch.eye(self.precision.shape[0], dtype=torch.float64))
        self._covariance = None

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        phi = self.features(h)
        logits = self.beta(phi)
        if self.training:
            if self.accumulate:
                with torch.no_grad():
                    p = phi.detach().double()
                    self.precision += p.t() @ p
            return logits
        if self._covariance is None:
            self._covariance = torch.cholesky_inverse(torch.linalg.cholesky(self.precision))
        p = phi.double()
        self.last_variance = self.ridge * ((p @ self._covariance) * p).sum(dim=1)
        return (logits.double() / torch.sqrt(1.0 + self.mean_field * self.last_variance)[:, None]).to(logits.dtype)


class SNGP(Method):
    """Spectral-normalised network with a random-feature GP output layer; its variance is the method score."""

    name = "sngp"
    member_kind = "point"
    shape = "posterior"
    defaults = {**BASE_DEFAULTS, "spec_norm_bound": 6.0, "spec_norm_iterations": 1, "gp_input_dim": 128,
                "gp_hidden_dim": 1024, "gp_ridge_penalty": 1.0, "gp_mean_field_factor": 25.0,
                "gp_input_normalization": True, "gp_scale": 2.0}
    default_members = 1
    max_members = 1
    writes_scores = True
    exportable = False
    not_exportable_because = "the GP layer's mean-field logits need its posterior covariance"
    summary = "SNGP: spectral norm and a random-feature GP output layer, its variance as score (Liu et al. 2020)"

    @classmethod
    def check_hyperparameters(cls, hp) -> None:
        if (hp["spec_norm_bound"] <= 0 or hp["gp_hidden_dim"] < 1 or hp["gp_ridge_penalty"] <= 0
                or hp["gp_scale"] <= 0):
            raise ValueError("sngp: spec_norm_bound, gp_hidden_dim, gp_ridge_penalty and gp_scale must be positive")

    def prepare_model(self, model: nn.Module) -> nn.Module:
        layers = parametric_layers(model)
        parent, name, last = layers[-1]
        bound_spectral_norms([layer for _, _, layer in layers[:-1]], self.hp["spec_norm_bound"],
                             self.hp["spec_norm_iterations"])
        head = RandomFeatureGP(last.in_features, last.out_features, input_dim=int(self.hp["gp_input_dim"]),
                               n_features=int(self.hp["gp_hidden_dim"]), ridge=self.hp["gp_ridge_penalty"],
                               mean_field=self.hp["gp_mean_field_factor"],
                               normalize=bool(self.hp["gp_input_normalization"]),
                               length_scale=float(self.hp["gp_scale"]),
                               seed=int(torch.randint(0, 2**31 - 1, ()).item()))  # from the model's seed
        if isinstance(parent, nn.Sequential):
            parent[int(name)] = head
        else:
            setattr(parent, name, head)
        return model

    @staticmethod
    def head(model: nn.Module) -> RandomFeatureGP:
        return next(m for m in model.modules() if isinstance(m, RandomFeatureGP))

    def run_epoch(self, model, optimizer, state, ctx, *, epoch, seed):
        gp = self.head(model)
        gp.reset_precision()  # the reference resets it at every epoch's first step
        gp.accumulate = epoch == self.total_epochs()  # only the last epoch's sum is ever used
        try:
            return train_epoch(model, optimizer, self, ctx, epoch=epoch, seed=seed)
        finally:
            gp.accumulate = False

    def member_predictor(self, model, state, ctx, seed):
        model.eval()
        return with_network(lambda x, gen: model(x), model)

    def method_scores(self, model, state, ctx):
        model.eval()
        gp = self.head(model)

        def variance(x):
            model(x)
            return gp.last_variance

        values = predict_values(variance, ctx.task, device=ctx.device, batch_size=ctx.settings.predict_batch_size)
        return {"variance": ({k: np.asarray(v) for k, v in values.items()}, "uncertainty")}
