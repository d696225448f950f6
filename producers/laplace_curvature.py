# SPDX-License-Identifier: MIT
r"""The curvature of the cross-entropy that the Laplace producers (:mod:`.laplace`) build their precision from.

Two curvatures, as laplace-torch names them (``hessian`` = ``"ef"`` or ``"ggn"``):

* the *empirical Fisher* (the Pitfalls code's): per-example gradients :math:`g_n` of the loss at the true label;
* the *generalised Gauss-Newton* :math:`\sum_n J_n^\top \Lambda_n J_n` with :math:`\Lambda_n = \mathrm{diag}(p_n)
  - p_n p_n^\top` the Hessian of the cross-entropy in the logits (the true Fisher of the categorical likelihood). Its
  Kronecker factors back-propagate the :math:`C` columns of a square root :math:`S_n = \mathrm{diag}(\sqrt{p_n}) -
  p_n \sqrt{p_n}^\top` (:math:`S_n S_n^\top = \Lambda_n`) instead of one gradient, as curvlinops' "type-2" KFAC.

Kronecker factors (:func:`kfac_factors`): for every linear and convolutional layer, inputs :math:`a` (a 1 appended
for the bias; unfolded patches for a convolution, :math:`L` locations) and output gradients :math:`g`,
:math:`X = \sum_n a_n a_n^\top` and :math:`G = \sum_n g_n g_n^\top`, summed (not averaged) over the data.

The full last-layer curvature (:func:`last_layer_curvature`) is exact: with :math:`\tilde a = (a, 1)` the input of
the last linear layer and its parameters ordered row by row as :math:`[W \mid b]`,
:math:`H = \sum_n \Lambda_n \otimes \tilde a_n \tilde a_n^\top` (GGN) or :math:`\sum_n \tilde g_n \tilde g_n^\top`
with :math:`\tilde g_n = (p_n - e_{y_n}) \otimes \tilde a_n` (empirical Fisher).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["HESSIANS", "kfac_factors", "last_layer_curvature", "last_layer_inputs", "softmax_hessian_sqrt"]

HESSIANS = ("ef", "ggn")


def softmax_hessian_sqrt(probs: torch.Tensor) -> torch.Tensor:
    """:math:`S_n = \\mathrm{diag}(\\sqrt{p_n}) - p_n \\sqrt{p_n}^\\top` (N, C, C), with :math:`S_n S_n^\\top =
    \\mathrm{diag}(p_n) - p_n p_n^\\top`, the cross-entropy's Hessian in the logits."""
    root = probs.sqrt()
    return torch.diag_embed(root) - probs[:, :, None] * root[:, None, :]


def _kfac_layers(model: nn.Module, only: str | None) -> list[tuple[str, nn.Module]]:
    return [(n, m) for n, m in model.named_modules()
            if isinstance(m, (nn.Linear, nn.Conv2d)) and (only is None or n == only)]


def kfac_factors(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, batch_size: int,
                 only: str | None = None, hessian: str = "ef") -> dict[str, dict]:
    """``{layer: {"xxt", "ggt", "locations", "bias"}}``: the summed input and output-gradient second moments over
    ``(x, y)`` (float64), computed in evaluation mode batch by batch; ``hessian`` is ``"ef"`` (the empirical Fisher,
    the true labels' gradients) or ``"ggn"`` (the :math:`C` columns of :func:`softmax_hessian_sqrt` per example)."""
    if hessian not in HESSIANS:
        raise ValueError(f"hessian must be one of {', '.join(HESSIANS)}; got {hessian!r}")
    layers = _kfac_layers(model, only)
    saved: dict[str, dict] = {}
    out = {name: {"xxt": None, "ggt": None, "locations": 1, "bias": mod.bias is not None} for name, mod in layers}
    handles = []
    for name, mod in layers:
        def hook(m, inputs, output, name=name):
            saved[name] = {"x": inputs[0].detach()}
            output.register_hook(lambda g: saved[name].__setitem__("gy", g.detach()))

        handles.append(mod.register_forward_hook(hook))

    def accumulate_inputs():
        for name, mod in layers:
            a = saved[name]["x"].double()
            if isinstance(mod, nn.Conv2d):
                a = F.unfold(a, mod.kernel_size, dilation=mod.dilation, padding=mod.padding, stride=mod.stride)
                a = a.permute(1, 0, 2).reshape(a.shape[1], -1)
            else:
                a = a.t()
            if mod.bias is not None:
                a = torch.cat([a, torch.ones_like(a[:1])])
            xxt = a @ a.t()
            out[name]["xxt"] = xxt if out[name]["xxt"] is None else out[name]["xxt"] + xxt

    def accumulate_gradients(scale: float):
        for name, mod in layers:
            gy = saved[name]["gy"].double() * scale
            if isinstance(mod, nn.Conv2d):
                out[name]["locations"] = gy.shape[2] * gy.shape[3]
                gy = gy.permute(1, 0, 2, 3).reshape(gy.shape[1], -1)
            else:
                gy = gy.t()
            ggt = gy @ gy.t()
            out[name]["ggt"] = ggt if out[name]["ggt"] is None else out[name]["ggt"] + ggt

    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(x), batch_size):
            xb, yb = x[start: start + batch_size], y[start: start + batch_size]
            model.zero_grad(set_to_none=True)
            logits = model(xb)
            accumulate_inputs()
            if hessian == "ef":
                F.cross_entropy(logits, yb).backward()
                accumulate_gradients(len(xb))  # the mean's gradient times the batch: per-example gradients
            else:
                roots = softmax_hessian_sqrt(torch.softmax(logits.detach().double(), dim=1)).to(logits.dtype)
                for c in range(roots.shape[2]):
                    (logits * roots[:, :, c]).sum().backward(retain_graph=c < roots.shape[2] - 1)
                    accumulate_gradients(1.0)
    finally:
        for h in handles:
            h.remove()
        model.zero_grad(set_to_none=True)
        model.train(was_training)
    return out


@torch.no_grad()
def last_layer_inputs(model: nn.Module, layer: nn.Linear, x: torch.Tensor, *, batch_size: int
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """The inputs of ``layer`` (N, in) and the logits (N, C) of ``x`` in evaluation mode, float64."""
    feats, logits = [], []
    handle = layer.register_forward_hook(lambda m, inputs, output: feats.append(inputs[0].detach().double()))
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(x), batch_size):
            logits.append(model(x[start: start + batch_size]).double())
    finally:
        handle.remove()
        model.train(was_training)
    return torch.cat(feats), torch.cat(logits)


def last_layer_curvature(features: torch.Tensor, logits: torch.Tensor, labels: torch.Tensor, *,
                         hessian: str) -> torch.Tensor:
    """The exact curvature of the summed cross-entropy in the last linear layer's parameters :math:`[W \\mid b]`
    flattened row by row (``C (in + 1)`` square, float64), from its inputs ``features`` (N, in) and ``logits``."""
    if hessian not in HESSIANS:
        raise ValueError(f"hessian must be one of {', '.join(HESSIANS)}; got {hessian!r}")
    n, c = logits.shape
    a = torch.cat([features.double(), torch.ones(n, 1, dtype=torch.float64, device=features.device)], dim=1)
    d = a.shape[1]
    probs = torch.softmax(logits.double(), dim=1)
    if hessian == "ef":
        residual = probs.clone()
        residual[torch.arange(n), labels] -= 1.0
        grads = (residual[:, :, None] * a[:, None, :]).reshape(n, c * d)
        return grads.t() @ grads
    lam = torch.diag_embed(probs) - probs[:, :, None] * probs[:, None, :]
    h = torch.zeros(c, d, c, d, dtype=torch.float64, device=features.device)
    for o in range(c):
        for p in range(o, c):
            block = (a * lam[:, o, p, None]).t() @ a
            h[o, :, p, :] = block
            h[p, :, o, :] = block
    return h.reshape(c * d, c * d)
