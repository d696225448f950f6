# SPDX-License-Identifier: MIT
r"""Laplace approximations around a trained network: KFAC (Ritter et al. 2018) as in the Pitfalls code
(bayesgroup/pytorch-ensembles ``kfacl/laplace.py``, ``ens/ens-kfacl.py``), its last-layer variant, and a diagonal one.

The network is trained as usual for ``epochs``; one more pass over the training set (batch norm in evaluation mode)
builds the curvature of the cross-entropy, and then the noise scale :math:`s` is chosen on the validation split
(Pitfalls appendix B and Table 3: "the optimal noise scale ... on a hold-out validation set"): the grid
:math:`10^{\mathrm{linspace}(-2, 1, 25)}` of ``ens-kfacl.py`` (``gs_low``, ``gs_high``, ``gs_num``), each scale scored
by the validation NLL of a ``search_members``-sample ensemble; ``scale`` > 0 skips the search. Members are weight
samples :math:`\theta^* + s\,\delta`; the validation split comes out of the training set (``--val-fraction``, 0.1 by
default: 5000 of CIFAR's 50000 as in swa_gaussian's validation runs), never the test split. Here ubench follows the
paper's text, not its code: ``ens-kfacl.py --scale_search`` scores the grid on its test loader.

KFAC (``kfac_laplace``; ``ll_laplace``: the last linear layer only). For every linear and convolutional layer, the
summed Kronecker factors of the empirical Fisher (:mod:`.laplace_curvature`), damped as the code does with
:math:`\epsilon` = ``weight_decay`` :math:`\times N` (the code's "weight decay scaled by the size of the dataset"),
give the precision :math:`(X_d \otimes G_d)/L` of each layer (:mod:`.laplace_posterior`, ``structure=kfac``), and a
weight sample is :math:`\theta^* + s\,\delta`. Where the code differs from the paper of Ritter et al., ubench
follows the code and says so: the sums are not divided by N (the scale search absorbs it), :math:`\pi` is the trace
ratio itself, not its square root. One thing the code gets wrong ubench does not copy by default: the code samples
:math:`L_G^{-1} Z L_X^{-\top}`, whose covariance is not the inverse of that precision; ``covariance=textbook`` (the
default) samples :math:`L_G^{-\top} Z L_X^{-1}`, whose covariance is, and ``--set covariance=pitfalls`` keeps the
code's draw for reproducing the paper (the measured difference is in :mod:`.laplace_posterior`). Batch-norm
parameters are not perturbed (the code's ``use_batch_norm=False``).

laplace-torch (0.3; Daxberger et al. 2021, "Laplace Redux") is the field's library. Its ``KronLaplace`` keeps each
bias as a separate block instead of appending it to the input, divides the input factor by N and adds the prior
precision to the eigenvalues of the Kronecker product instead of the code's pi-corrected damping of each factor; its
default curvature is the GGN, and it chooses the prior precision by the Laplace marginal likelihood. The producers
offer its formulation beside the code's, and the tests check them against laplace-torch itself
(``tests/producers/test_laplace_parity.py``):

* ``--set structure=kron`` (linear layers) or ``structure=full`` (``ll_laplace`` only: the exact last-layer matrix);
* ``--set hessian=ggn`` (:math:`\sum_n J_n^\top \Lambda_n J_n`) instead of the empirical Fisher ``ef``;
* ``--set prior=marglik``: the prior precision :math:`\delta` maximising the Laplace marginal likelihood (scale 1
  unless ``scale`` is set; no validation split needed) instead of the validation ``search`` of the noise scale at
  :math:`\delta = \epsilon`. ``ll_laplace --set structure=kron hessian=ggn prior=marglik`` is laplace-torch's
  recommended last-layer Laplace with its nn-MC predictive.

Diagonal (``diag_laplace``): precision :math:`\sum_n (\nabla_\theta \ell_n)^2 + \epsilon` per parameter (per-example
gradients, every parameter including batch-norm affine ones) and :math:`\delta = s\, z / \sqrt{\text{precision}}`.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from .laplace_curvature import HESSIANS, kfac_factors, last_layer_curvature, last_layer_inputs
from .laplace_posterior import (COVARIANCES, STRUCTURES, full_posterior, kfac_posterior, kron_eigen, kron_posterior,
                                noise, optimise_prior_precision)
from .last_layer import last_linear_name
from .torch_trainer import (BASE_DEFAULTS, Method, TrainContext, derive_seed, pitfalls_schedule, train_epoch,
                            with_network)

__all__ = ["DiagonalLaplace", "KFACLaplace", "LastLayerLaplace", "kfac_factors", "scale_grid"]

PRIORS = ("search", "marglik")


def scale_grid(low: float, high: float, num: int) -> np.ndarray:
    """``10 ** linspace(low, high, num)`` (``ens-kfacl.py``'s grid)."""
    return 10.0 ** np.linspace(low, high, int(num))


class _Laplace(Method):
    """The shared training, curvature pass, scale search and sampling."""

    member_kind = "posterior_sample"
    shape = "posterior"
    defaults = {**BASE_DEFAULTS, "scale": 0.0, "scale_low": -2.0, "scale_high": 1.0, "scale_num": 25,
                "search_members": 10}
    default_members = 20
    default_val_fraction = 0.1
    needs_validation = True

    def __init__(self, hyper, *, n_members, n_train):
        super().__init__(hyper, n_members=n_members, n_train=n_train)
        if self.hp["scale"] < 0 or int(self.hp["scale_num"]) < 1 or int(self.hp["search_members"]) < 1:
            raise ValueError(f"{self.name}: need scale >= 0 (0: search), scale_num >= 1 and search_members >= 1")
        if not self.hp["weight_decay"] > 0:
            raise ValueError(f"{self.name}: weight_decay must be > 0 (the prior precision is N weight_decay)")

    @property
    def eps(self) -> float:
        return float(self.hp["weight_decay"]) * self.n_train

    def total_epochs(self):
        return int(self.hp["epochs"]) + 1

    def schedule(self, t):
        return {"lr": pitfalls_schedule(t, self.hp["lr"], int(self.hp["epochs"]))}

    def searches(self) -> bool:
        """Whether the noise scale is chosen on the validation split (else it is fixed or 1 under marglik)."""
        return not self.hp["scale"] > 0 and self.hp.get("prior", "search") == "search"

    def run_epoch(self, model, optimizer, state, ctx: TrainContext, *, epoch, seed):
        if self.searches() and (ctx.task.val is None or len(ctx.task.val) == 0):
            raise ValueError(f"{self.name} searches its noise scale on a validation split; set --val-fraction > 0")
        if epoch <= int(self.hp["epochs"]):
            return train_epoch(model, optimizer, self, ctx, epoch=epoch, seed=seed)
        steps = math.ceil(len(ctx.y_train) / ctx.settings.batch_size)
        state["posterior"] = self.fit(model, ctx)
        if not self.searches():
            state["search"], state["scale"] = [], float(self.hp["scale"]) or 1.0
            marglik = state["posterior"].get("log_marginal_likelihood")
            return (-marglik / len(ctx.y_train) if marglik is not None else math.nan), steps
        state["search"] = self.search_scale(model, state["posterior"], ctx, seed=seed)
        state["scale"] = min(state["search"], key=lambda r: r[1])[0]
        return float(min(r[1] for r in state["search"])), steps

    # -- to be provided ------------------------------------------------------------------------------------------
    def fit(self, model: nn.Module, ctx: TrainContext) -> dict:
        raise NotImplementedError

    def perturb(self, model: nn.Module, posterior: dict, scale: float, generator: torch.Generator) -> None:
        raise NotImplementedError

    # -- the rest ------------------------------------------------------------------------------------------------
    def sample_model(self, model: nn.Module, posterior: dict, scale: float, seed: int) -> nn.Module:
        """A copy of ``model`` with one posterior weight sample at noise scale ``scale``, in evaluation mode."""
        sampled = copy.deepcopy(model).eval()
        with torch.no_grad():
            self.perturb(sampled, posterior, scale, torch.Generator().manual_seed(seed))
        return sampled

    @torch.no_grad()
    def search_scale(self, model, posterior, ctx: TrainContext, *, seed: int) -> list[list[float]]:
        """``[(scale, validation NLL of the search_members-sample ensemble)]`` over the grid (or the fixed scale)."""
        x = torch.from_numpy(ctx.task.val.images).to(ctx.device)
        y = torch.from_numpy(ctx.task.val.labels).to(ctx.device)
        grid = [float(self.hp["scale"])] if self.hp["scale"] > 0 else scale_grid(
            self.hp["scale_low"], self.hp["scale_high"], self.hp["scale_num"]).tolist()
        out = []
        for scale in grid:
            probs = torch.zeros(len(y), ctx.task.n_classes, dtype=torch.float64, device=ctx.device)
            for k in range(int(self.hp["search_members"])):
                sampled = self.sample_model(model, posterior, scale, derive_seed(seed, k))
                for start in range(0, len(x), ctx.settings.predict_batch_size):
                    sl = slice(start, start + ctx.settings.predict_batch_size)
                    probs[sl] += torch.softmax(sampled(x[sl]).double(), dim=1)
            probs /= int(self.hp["search_members"])
            nll = float(-torch.log(probs[torch.arange(len(y)), y].clamp_min(1e-300)).mean())
            out.append([scale, nll if math.isfinite(nll) else math.inf])
        return out

    def member_predictor(self, model, state, ctx, seed):
        self._scale = float(state["scale"])
        self._prior_precision = state["posterior"].get("prior_precision")
        sampled = self.sample_model(model, state["posterior"], state["scale"], seed)
        return with_network(lambda x, gen: sampled(x), sampled)

    def member_info(self, index, epoch):
        info = {"scale": self._scale}
        if isinstance(self._prior_precision, float):
            info["prior_precision"] = self._prior_precision
        return info


class KFACLaplace(_Laplace):
    """KFAC-Laplace on every linear and convolutional layer (or laplace-torch's ``kron`` on linear layers)."""

    name = "kfac_laplace"
    summary = "KFAC-Laplace with the noise scale searched on a validation split (Pitfalls code)"
    defaults = {**_Laplace.defaults, "structure": "kfac", "hessian": "ef", "covariance": "textbook",
                "prior": "search"}
    last_layer_only = False

    @classmethod
    def check_hyperparameters(cls, hp):
        choices = {"structure": STRUCTURES if cls.last_layer_only else STRUCTURES[:2], "hessian": HESSIANS,
                   "covariance": COVARIANCES, "prior": PRIORS}
        for key, allowed in choices.items():
            if hp[key] not in allowed:
                full = " (full is for ll_laplace: the last layer's matrix)" if hp[key] == "full" else ""
                raise ValueError(f"{cls.name}: {key} must be one of {', '.join(allowed)}; got {hp[key]!r}{full}")
        if hp["covariance"] == "pitfalls" and hp["structure"] != "kfac":
            raise ValueError(f"{cls.name}: covariance=pitfalls is the Pitfalls code's draw of its kfac factors; "
                             f"structure {hp['structure']!r} samples its exact inverse")
        if hp["prior"] == "marglik" and hp["structure"] == "kfac":
            raise ValueError(f"{cls.name}: prior=marglik needs structure=kron or full (laplace-torch's precision); "
                             "the Pitfalls code's kfac factors are not divided by N and are damped factor by factor")

    def fit(self, model, ctx):
        """``{"layers": {name: posterior}, "prior_precision", "log_marginal_likelihood"}``."""
        only = last_linear_name(model) if self.last_layer_only else None
        structure, hessian = self.hp["structure"], self.hp["hessian"]
        x, y, batch = ctx.x_train, ctx.y_train, ctx.settings.batch_size
        modules = dict(model.named_modules())
        if structure == "full":
            layer = modules[only]
            feats, logits = last_layer_inputs(model, layer, x, batch_size=batch)
            curvature = last_layer_curvature(feats, logits, y, hessian=hessian)
            # the eigenvalues only for the marginal likelihood (its log-determinant at every delta)
            eigens = {only: torch.linalg.eigvalsh(curvature) if self.hp["prior"] == "marglik" else None}
        else:
            factors = kfac_factors(model, x, y, batch_size=batch, only=only, hessian=hessian)
            eigens = {n: kron_eigen(f, len(y)) for n, f in factors.items()} if structure == "kron" else {}
        delta, marglik = self.eps, None
        if self.hp["prior"] == "marglik":
            params = [p.detach().double() for n in eigens for p in (modules[n].weight, modules[n].bias)
                      if p is not None]
            log_lik = -_summed_cross_entropy(model, x, y, batch_size=batch)
            delta, marglik = optimise_prior_precision(log_lik, float(sum((p * p).sum() for p in params)),
                                                      sum(p.numel() for p in params), list(eigens.values()))
        if structure == "kfac":
            layers = {n: kfac_posterior(f, delta, covariance=self.hp["covariance"]) for n, f in factors.items()}
        elif structure == "kron":
            layers = {n: kron_posterior(e, delta) for n, e in eigens.items()}
        else:
            w = modules[only].weight
            layers = {only: full_posterior(curvature, delta, shape=(w.shape[0], w.shape[1] + 1))}
        return {"layers": layers, "prior_precision": delta, "log_marginal_likelihood": marglik}

    def perturb(self, model, posterior, scale, generator):
        modules = dict(model.named_modules())
        for name, layer in posterior["layers"].items():
            mod = modules[name]
            dw, db = noise(layer, generator)
            if db is None and mod.bias is not None:
                dw, db = dw[:, :-1], dw[:, -1]
            mod.weight.add_(scale * dw.reshape(mod.weight.shape))
            if db is not None:
                mod.bias.add_(scale * db)


@torch.no_grad()
def _summed_cross_entropy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, batch_size: int) -> float:
    """:math:`-\\log p(D \\mid \\theta^*)`: the cross-entropy summed over the training set, in evaluation mode."""
    was_training = model.training
    model.eval()
    try:
        return float(sum(F.cross_entropy(model(x[i: i + batch_size]).double(), y[i: i + batch_size],
                                         reduction="sum") for i in range(0, len(x), batch_size)))
    finally:
        model.train(was_training)


class LastLayerLaplace(KFACLaplace):
    """KFAC-Laplace on the last linear layer only (the rest of the network is the trained point estimate)."""

    name = "ll_laplace"
    summary = "last-layer KFAC-Laplace with the noise scale searched on a validation split (or laplace-torch's)"
    last_layer_only = True


class DiagonalLaplace(_Laplace):
    """Diagonal Laplace with the empirical Fisher from per-example gradients."""

    name = "diag_laplace"
    summary = "diagonal Laplace with the noise scale searched on a validation split"

    def fit(self, model, ctx):
        model.eval()
        params = {n: p.detach() for n, p in model.named_parameters()}
        buffers = {n: b.detach() for n, b in model.named_buffers()}

        def loss(p, x, y):
            return F.cross_entropy(functional_call(model, {**p, **buffers}, (x[None],)), y[None])

        per_example = vmap(grad(loss), in_dims=(None, 0, 0))
        fisher = {n: torch.zeros_like(p, dtype=torch.float64) for n, p in params.items()}
        for start in range(0, len(ctx.y_train), ctx.settings.batch_size):
            sl = slice(start, start + ctx.settings.batch_size)
            grads = per_example(params, ctx.x_train[sl], ctx.y_train[sl])
            for n, g in grads.items():
                fisher[n] += (g.double() ** 2).sum(0)
        return {n: (1.0 / torch.sqrt(f + self.eps)).float() for n, f in fisher.items()}

    def perturb(self, model, posterior, scale, generator):
        for n, p in model.named_parameters():
            z = torch.randn(p.shape, generator=generator).to(p.device)
            p.add_(scale * posterior[n] * z)
