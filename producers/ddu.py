# SPDX-License-Identifier: MIT
r"""DDU, deep deterministic uncertainty (Mukhoti et al. 2023): a spectral-normalised network trained with
cross-entropy, then a Gaussian discriminant analysis of its penultimate features; the feature density is the
method's score.

Follows the authors' code (omegafragger/DDU: ``utils/gmm_utils.py``, ``train.py``, ``evaluate.py``): hidden layers
bounded to spectral norm ``coeff`` = 3 (:mod:`~ubench.producers.spectral_norm`); after training, the features
:math:`z` (the input of the last linear layer) of the whole training set are computed in evaluation mode, and per
class :math:`c` the mean :math:`\mu_c` and covariance :math:`\Sigma_c = \frac{1}{n_c - 1} \sum (z - \mu_c)(z -
\mu_c)^\top` are fitted in float64 (``gmm_fit``); the smallest jitter of ``0, tiny, 1e-308, 1e-307, …, 1e-1`` that
makes every :math:`\Sigma_c + jI` positive definite is added (``JITTERS``). A sample's score is

.. math:: \log q(z) = \log \sum_c \mathcal N(z; \mu_c, \Sigma_c + jI)

(``logsumexp`` of the per-class log densities, without class weights, as the code's ``gmm_evaluate``), direction
``confidence``. The member's probabilities are the network's softmax, as in the paper (aleatoric uncertainty from
the softmax entropy, epistemic from the density).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .ensemble_layers import parametric_layers
from .spectral_norm import bound_spectral_norms
from .torch_trainer import BASE_DEFAULTS, Method, predict_values, with_network

__all__ = ["DDU", "fit_gda", "gda_log_density", "JITTERS"]

#: The code's jitters, in the order tried.
JITTERS = (0.0, float(np.finfo(np.float64).tiny), *(10.0**e for e in range(-308, 0)))


def fit_gda(features: torch.Tensor, labels: torch.Tensor, n_classes: int
            ) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Class means (C, D), Cholesky factors of the jittered class covariances (C, D, D) and the jitter, float64."""
    z = features.double()
    counts = torch.bincount(labels, minlength=n_classes)
    if (counts < 2).any():
        c = int(torch.nonzero(counts < 2)[0])
        raise ValueError(f"ddu: class {c} has {int(counts[c])} training sample(s); a class covariance needs 2")
    means = torch.stack([z[labels == c].mean(dim=0) for c in range(n_classes)])
    covs = []
    for c in range(n_classes):
        centred = z[labels == c] - means[c]
        covs.append(centred.t() @ centred / (centred.shape[0] - 1))
    covs = torch.stack(covs)
    eye = torch.eye(z.shape[1], dtype=torch.float64)
    for jitter in JITTERS:
        chol, info = torch.linalg.cholesky_ex(covs + jitter * eye)
        if not info.any() and torch.isfinite(chol).all():
            return means, chol, jitter
    raise ValueError("ddu: no jitter up to 0.1 makes the class covariances positive definite")


def gda_log_density(features: torch.Tensor, means: torch.Tensor, chol: torch.Tensor) -> torch.Tensor:
    """``log sum_c N(z; mu_c, L_c L_c^T)`` per row of ``features`` (N,), float64."""
    z = features.double()
    d = z.shape[1]
    diff = z[None, :, :] - means[:, None, :]  # (C, N, D)
    solved = torch.linalg.solve_triangular(chol, diff.transpose(1, 2), upper=False)  # (C, D, N)
    maha = (solved ** 2).sum(dim=1)  # (C, N)
    logdet = 2.0 * torch.log(torch.diagonal(chol, dim1=1, dim2=2)).sum(dim=1)  # (C,)
    logp = -0.5 * (maha + logdet[:, None] + d * np.log(2.0 * np.pi))
    return torch.logsumexp(logp, dim=0)


class DDU(Method):
    """Softmax of a spectral-normalised network, and the GDA density of its features as the method score."""

    name = "ddu"
    member_kind = "point"
    shape = "posterior"
    defaults = {**BASE_DEFAULTS, "spectral_norm_coeff": 3.0, "spectral_norm_iterations": 1}
    default_members = 1
    max_members = 1
    writes_scores = True
    exportable = False
    not_exportable_because = "its score, the feature density, is fitted outside the network"
    summary = "DDU: spectral norm, then the GDA density of the features as score (Mukhoti et al. 2023)"

    @classmethod
    def check_hyperparameters(cls, hp) -> None:
        if hp["spectral_norm_coeff"] <= 0:
            raise ValueError(f"ddu: spectral_norm_coeff must be > 0; got {hp['spectral_norm_coeff']}")

    def prepare_model(self, model: nn.Module) -> nn.Module:
        layers = parametric_layers(model)
        bound_spectral_norms([layer for _, _, layer in layers[:-1]], self.hp["spectral_norm_coeff"],
                             self.hp["spectral_norm_iterations"])
        return model

    def member_predictor(self, model, state, ctx, seed):
        model.eval()
        return with_network(lambda x, gen: model(x), model)

    @staticmethod
    def features(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """The input of the network's last linear layer for ``x`` (evaluation mode)."""
        last = parametric_layers(model)[-1][2]
        seen: list[torch.Tensor] = []
        handle = last.register_forward_pre_hook(lambda m, inputs: seen.append(inputs[0].detach()))
        try:
            model(x)
        finally:
            handle.remove()
        return seen[0]

    def method_scores(self, model, state, ctx):
        model.eval()
        batch = ctx.settings.predict_batch_size
        with torch.no_grad():
            z = torch.cat([self.features(model, ctx.x_train[i: i + batch]) for i in range(0, len(ctx.x_train), batch)])
        means, chol, _ = fit_gda(z.cpu(), ctx.y_train.cpu(), ctx.task.n_classes)
        means, chol = means.to(ctx.device), chol.to(ctx.device)
        values = predict_values(lambda x: gda_log_density(self.features(model, x), means, chol), ctx.task,
                                device=ctx.device, batch_size=batch)
        return {"log_density": (values, "confidence")}
