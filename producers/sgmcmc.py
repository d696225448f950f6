# SPDX-License-Identifier: MIT
"""Stochastic-gradient MCMC: the sampler step shared by SGLD, SGHMC and their cyclical variants.

The parameterisation is that of the cyclical SG-MCMC code (ruqizhang/csgmcmc ``cifar_csghmc.py``) which URSABench
follows (``URSABench/inference/optim_sghmc.py``): with the mean loss :math:`\\bar L` over a batch, rate ``lr``,
friction :math:`\\alpha` (URSABench's ``alpha``, one minus its momentum), ``N`` training points and temperature
``T``,

.. math::
    v \\leftarrow (1 - \\alpha) v - \\mathrm{lr} \\, (\\nabla \\bar L + \\lambda \\theta)
          + \\sqrt{2 \\, \\mathrm{lr} \\, \\alpha \\, T / N} \\; \\varepsilon, \\qquad \\theta \\leftarrow \\theta + v

SGHMC for :math:`\\alpha < 1`; :math:`\\alpha = 1` is SGLD (no momentum). The Gaussian prior of standard deviation
``prior_std`` enters as the weight decay :math:`\\lambda = 1 / (\\sigma^2 N)`. ``T = 1`` targets the Bayes posterior
:math:`\\propto p(\\mathcal D \\mid \\theta) \\, p(\\theta)`; the reference code runs at ``T = 1/N``: csgmcmc's
``--temperature`` defaults to ``1/datasize`` and URSABench injects noise of standard deviation
:math:`\\sqrt{2 \\alpha \\, \\mathrm{lr}} / N`, which is the formula above at ``T = 1/N`` (URSABench since its
commit 724e973 "Bug fix"; its first commit added the noise out of place, that is not at all). So the ``temperature``
hyperparameter defaults to ``"1/N"`` (the reference code's noise); a number sets ``T`` itself (``1`` for the Bayes
posterior, :math:`\\sqrt N` times more noise than the papers used).
"""

from __future__ import annotations

import math

import torch

from .sampler_defaults import REFERENCE_TEMPERATURE, resolve_temperature
from .torch_trainer import Method

__all__ = ["SGMCMC", "SGMCMCMethod", "REFERENCE_TEMPERATURE", "resolve_temperature"]

class SGMCMC(torch.optim.Optimizer):
    """The SGHMC/SGLD update above; param groups carry ``lr``, ``friction``, ``weight_decay``, ``n_data``,
    ``temperature`` (``T``, a number) and ``noise`` (False during cyclical exploration, which is then SGD with
    momentum)."""

    def __init__(self, params, *, lr, friction, weight_decay, n_data, temperature):
        if not 0.0 < friction <= 1.0:
            raise ValueError(f"friction must be in (0, 1]; got {friction}")
        defaults = dict(lr=lr, friction=friction, weight_decay=weight_decay, n_data=n_data,
                        temperature=temperature, noise=True)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            lr, alpha = group["lr"], group["friction"]
            noise_std = math.sqrt(2.0 * lr * alpha * group["temperature"] / group["n_data"])
            for p in group["params"]:
                if p.grad is None:
                    continue
                d_p = p.grad.add(p, alpha=group["weight_decay"])
                if alpha < 1.0:
                    state = self.state[p]
                    if "momentum_buffer" not in state:
                        state["momentum_buffer"] = torch.zeros_like(p)
                    v = state["momentum_buffer"]
                    v.mul_(1.0 - alpha).add_(d_p, alpha=-lr)
                else:
                    v = d_p.mul_(-lr)
                if group["noise"]:
                    v.add_(torch.randn_like(p), alpha=noise_std)
                p.add_(v)


class SGMCMCMethod(Method):
    """A sampler whose members are the weights at given epochs of one chain. Subclasses set ``schedule``,
    ``snapshot_epochs`` and the defaults (``lr``, ``prior_std``, ``temperature``, and ``friction`` unless SGLD)."""

    member_kind = "posterior_sample"
    shape = "trajectory"
    default_members = 20

    @classmethod
    def check_hyperparameters(cls, hp):
        resolve_temperature(hp["temperature"], 1)

    def friction(self) -> float:
        return float(self.hp.get("friction", 1.0))

    def temperature(self) -> float:
        """``T`` of the update (``1/N`` by default)."""
        return resolve_temperature(self.hp["temperature"], self.n_train)

    def make_optimizer(self, model):
        return SGMCMC(
            model.parameters(),
            lr=self.hp["lr"],
            friction=self.friction(),
            weight_decay=1.0 / (self.hp["prior_std"] ** 2 * self.n_train),
            n_data=self.n_train,
            temperature=self.temperature(),
        )

    def member_info(self, index, epoch):
        return {"temperature": self.temperature()}

    def total_epochs(self):
        return self.snapshot_epochs()[-1]

    @torch.no_grad()
    def log_posterior(self, model, state, ctx):
        """:math:`-\\sum_i \\mathrm{CE}_i - \\lVert\\theta\\rVert^2 / (2 \\sigma^2)` on the whole training set
        (evaluation mode), accumulated in float64: the target at temperature 1, tracked by the chain diagnostics."""
        model.eval()
        total = 0.0
        for start in range(0, len(ctx.y_train), 1000):
            logits = model(ctx.x_train[start: start + 1000]).double()
            total += float(torch.nn.functional.cross_entropy(logits, ctx.y_train[start: start + 1000],
                                                             reduction="sum"))
        sq = sum(float(torch.sum(p.double() ** 2)) for p in model.parameters())
        model.train()
        return -total - sq / (2.0 * float(self.hp["prior_std"]) ** 2)
