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

KFAC (``kfac_laplace``; ``ll_laplace``: the last linear layer only). For every linear and convolutional layer, with
inputs :math:`a` (a 1 appended for the bias; unfolded patches for a convolution, :math:`L` locations) and
per-example output gradients :math:`g` of the *empirical* Fisher (the true labels),

.. math:: X = \sum_n a_n a_n^\top, \quad G = \sum_n g_n g_n^\top, \quad
          \pi = \frac{\mathrm{tr}(X)\,\dim G}{\mathrm{tr}(G)\,\dim X}, \quad
          X + \sqrt{\epsilon L \pi}\, I = L_X L_X^\top, \quad G + \sqrt{\epsilon L / \pi}\, I = L_G L_G^\top,

and a weight sample is :math:`\delta = s\, \sqrt{L}\; L_G^{-1} Z L_X^{-\top}`, :math:`Z` standard normal,
:math:`\epsilon` = ``weight_decay`` :math:`\times N` (the code's "weight decay scaled by the size of the dataset").
Where the code differs from the paper of Ritter et al., ubench follows the code and says so: the sums are not
divided by N (the scale search absorbs it), :math:`\pi` is the trace ratio itself, not its square root, and the
sample uses the inverse Cholesky factors as written (:math:`L^{-1} Z L^{-\top}`, whose covariance is
:math:`L^{-1}L^{-\top}`, not :math:`(LL^\top)^{-1}`). Batch-norm parameters are not perturbed (the code's
``use_batch_norm=False``).

laplace-torch (0.3, ``KronLaplace`` with an empirical-Fisher backend) is the maintained library; measured on a small
MLP (``tests/producers/test_vi_laplace_last_layer.py``), its weight factors are exactly these sums divided by N
(relative residual 6e-8 with the Curvlinops and ASDL backends), but it keeps each bias as a separate Kronecker block
instead of appending it to the input, adds the prior precision to the eigenvalues of the Kronecker product instead of
the code's pi-corrected damping of each factor, and samples with the exact inverse. Its KFAC is therefore not the
formulation that made the Pitfalls numbers (Table 3's scales do not carry over), and ubench computes the code's own.

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

from .last_layer import last_linear_name
from .torch_trainer import (BASE_DEFAULTS, Method, TrainContext, derive_seed, pitfalls_schedule, train_epoch,
                            with_network)

__all__ = ["DiagonalLaplace", "KFACLaplace", "LastLayerLaplace", "kfac_factors", "scale_grid"]


def scale_grid(low: float, high: float, num: int) -> np.ndarray:
    """``10 ** linspace(low, high, num)`` (``ens-kfacl.py``'s grid)."""
    return 10.0 ** np.linspace(low, high, int(num))


def _kfac_layers(model: nn.Module, only: str | None) -> list[tuple[str, nn.Module]]:
    return [(n, m) for n, m in model.named_modules()
            if isinstance(m, (nn.Linear, nn.Conv2d)) and (only is None or n == only)]


def kfac_factors(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, batch_size: int,
                 only: str | None = None) -> dict[str, dict]:
    """``{layer: {"xxt", "ggt", "locations"}}``: the summed input and output-gradient second moments of the
    empirical Fisher over ``(x, y)`` (float64), computed in evaluation mode batch by batch."""
    layers = _kfac_layers(model, only)
    saved: dict[str, dict] = {}
    out = {name: {"xxt": None, "ggt": None, "locations": 1} for name, _ in layers}
    handles = []
    for name, mod in layers:
        def hook(m, inputs, output, name=name):
            saved[name] = {"x": inputs[0].detach()}
            output.register_hook(lambda g: saved[name].__setitem__("gy", g.detach()))

        handles.append(mod.register_forward_hook(hook))
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(x), batch_size):
            xb, yb = x[start: start + batch_size], y[start: start + batch_size]
            model.zero_grad(set_to_none=True)
            F.cross_entropy(model(xb), yb).backward()
            for name, mod in layers:
                a, gy = saved[name]["x"].double(), saved[name]["gy"].double() * len(xb)  # per-example gradients
                if isinstance(mod, nn.Conv2d):
                    a = F.unfold(a, mod.kernel_size, dilation=mod.dilation, padding=mod.padding, stride=mod.stride)
                    a = a.permute(1, 0, 2).reshape(a.shape[1], -1)
                    out[name]["locations"] = gy.shape[2] * gy.shape[3]
                    gy = gy.permute(1, 0, 2, 3).reshape(gy.shape[1], -1)
                else:
                    a, gy = a.t(), gy.t()
                if mod.bias is not None:
                    a = torch.cat([a, torch.ones_like(a[:1])])
                xxt, ggt = a @ a.t(), gy @ gy.t()
                out[name]["xxt"] = xxt if out[name]["xxt"] is None else out[name]["xxt"] + xxt
                out[name]["ggt"] = ggt if out[name]["ggt"] is None else out[name]["ggt"] + ggt
    finally:
        for h in handles:
            h.remove()
        model.zero_grad(set_to_none=True)
        model.train(was_training)
    return out


def kfac_sampling_factors(factors: dict[str, dict], eps: float) -> dict[str, dict]:
    """The inverse Cholesky factors :math:`L_G^{-1}`, :math:`L_X^{-1}` with the code's pi-corrected damping."""
    out = {}
    for name, f in factors.items():
        xxt, ggt, loc = f["xxt"], f["ggt"], f["locations"]
        pi = float(torch.trace(xxt) * ggt.shape[0] / (torch.trace(ggt) * xxt.shape[0]))
        damp = eps * loc
        lx = torch.linalg.cholesky(xxt + math.sqrt(damp * pi) * torch.eye(len(xxt), dtype=xxt.dtype, device=xxt.device))
        lg = torch.linalg.cholesky(ggt + math.sqrt(damp / pi) * torch.eye(len(ggt), dtype=ggt.dtype, device=ggt.device))
        eye_x = torch.eye(len(lx), dtype=lx.dtype, device=lx.device)
        eye_g = torch.eye(len(lg), dtype=lg.dtype, device=lg.device)
        out[name] = {
            "ix": torch.linalg.solve_triangular(lx, eye_x, upper=False).float(),
            "ig": torch.linalg.solve_triangular(lg, eye_g, upper=False).float(),
            "locations": loc,
            "pi": pi,
        }
    return out


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

    def run_epoch(self, model, optimizer, state, ctx: TrainContext, *, epoch, seed):
        if ctx.task.val is None or len(ctx.task.val) == 0:
            raise ValueError(f"{self.name} searches its noise scale on a validation split; set --val-fraction > 0")
        if epoch <= int(self.hp["epochs"]):
            return train_epoch(model, optimizer, self, ctx, epoch=epoch, seed=seed)
        state["posterior"] = self.fit(model, ctx)
        state["search"] = self.search_scale(model, state["posterior"], ctx, seed=seed)
        state["scale"] = float(self.hp["scale"]) or min(state["search"], key=lambda r: r[1])[0]
        return float(min(r[1] for r in state["search"])), math.ceil(len(ctx.y_train) / ctx.settings.batch_size)

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
        sampled = self.sample_model(model, state["posterior"], state["scale"], seed)
        return with_network(lambda x, gen: sampled(x), sampled)

    def member_info(self, index, epoch):
        return {"scale": self._scale}


class KFACLaplace(_Laplace):
    """KFAC-Laplace on every linear and convolutional layer."""

    name = "kfac_laplace"
    summary = "KFAC-Laplace with the noise scale searched on a validation split (Pitfalls code)"
    last_layer_only = False

    def fit(self, model, ctx):
        only = last_linear_name(model) if self.last_layer_only else None
        factors = kfac_factors(model, ctx.x_train, ctx.y_train, batch_size=ctx.settings.batch_size, only=only)
        return kfac_sampling_factors(factors, self.eps)

    def perturb(self, model, posterior, scale, generator):
        modules = dict(model.named_modules())
        for name, f in posterior.items():
            mod = modules[name]
            ig, ix = f["ig"], f["ix"]
            z = torch.randn(len(ig), len(ix), generator=generator).to(ig.device)
            delta = (ig @ z @ ix.t()) * (scale * math.sqrt(f["locations"]))
            if mod.bias is not None:
                mod.bias.add_(delta[:, -1])
                delta = delta[:, :-1]
            mod.weight.add_(delta.reshape(mod.weight.shape))


class LastLayerLaplace(KFACLaplace):
    """KFAC-Laplace on the last linear layer only (the rest of the network is the trained point estimate)."""

    name = "ll_laplace"
    summary = "last-layer KFAC-Laplace with the noise scale searched on a validation split"
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
