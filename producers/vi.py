# SPDX-License-Identifier: MIT
r"""Mean-field Gaussian variational inference (Bayes by Backprop, Blundell et al. 2015) as in the Pitfalls code
(bayesgroup/pytorch-ensembles ``models/varinf.py``, ``train/cifar/train_vi.py``, ``utils.train_epoch_vi``).

Every ``nn.Linear`` and ``nn.Conv2d`` of the network becomes a layer with weights
:math:`w \sim \mathcal N(\mu, \sigma^2)` (biases stay point estimates, as in the code), trained with the local
reparameterisation trick (Kingma et al. 2015): the pre-activation is sampled per example from
:math:`\mathcal N(x\mu, x^2\sigma^2)`. Per minibatch the loss is

.. math:: \mathrm{CE}_{\text{batch mean}} + \beta_t \, \mathrm{KL}(q \,\|\, p) / N, \qquad
          \mathrm{KL} = \tfrac12 \sum \big(\sigma^2 / v_p - 1 - \log(\sigma^2 / v_p)\big),

with the prior variance :math:`v_p = 1 / (N \cdot \mathrm{wd})`; the prior's mean term :math:`\mu^2 / (2 v_p)` is the
SGD weight decay on the means (as in the code). Means: SGD from ``vi_lr`` = 1e-3 (``train_vi.py``'s ``lr_init``;
Table 2 reports 1e-4 on CIFAR) with the Pitfalls schedule (eq. 6); log-sigmas: Adam at ``lr_vars`` = 0.1 (the
paper's Table 2; the script's argparse default is 0.001 and the repository has no VI launcher, so the reported value
is used). ``log_sigma`` starts uniform in ``[lv_init - 0.1, lv_init]`` with ``lv_init = -5`` (the code's default).
The network is first trained as a plain network for ``epochs`` (Pitfalls Table 2: VI is pretrained), then
``vi_epochs`` of VI follow. KL annealing: :math:`\beta_t` rises linearly from 0 to ``beta`` over
``kl_warmup_epochs`` VI epochs; the code ships ``beta = 1`` with its annealing commented out, so the default is no
warm-up (``kl_warmup_epochs = 0``).

Differences from the code, said here: the code samples with local reparameterisation at test time too (every
example its own weights); ubench's members are posterior draws — one weight sample per member shared by all inputs —
as the issue asks. Flipout is not used: the local reparameterisation trick applies to every layer here (all are
linear or convolutional) and has lower variance.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from .torch_trainer import (BASE_DEFAULTS, Method, TrainContext, derive_seed, pitfalls_schedule, train_epoch,
                            with_network)

__all__ = ["MeanFieldConv2d", "MeanFieldLinear", "OptimizerPair", "VariationalInference", "kl_divergence",
           "sample_weights", "to_mean_field", "vi_epoch"]


class _MeanField(nn.Module):
    """Shared parts: ``weight`` (the mean), ``log_sigma``, optional point ``bias``; ``stochastic`` switches the
    local reparameterisation on (False: the mean network); ``fixed`` holds a sampled weight while set."""

    def _init_sigma(self, lv_init: float, generator: torch.Generator) -> None:
        u = torch.rand(self.weight.shape, generator=generator, dtype=torch.float64)
        self.log_sigma = nn.Parameter((lv_init - 0.1 + 0.1 * u).to(self.weight.dtype))
        self.stochastic = False
        self.fixed: torch.Tensor | None = None

    def _forward(self, x: torch.Tensor, op) -> torch.Tensor:
        if self.fixed is not None:
            return op(x, self.fixed, self.bias)
        mu = op(x, self.weight, self.bias)
        if not self.stochastic:
            return mu
        var = op(x * x, torch.exp(2.0 * self.log_sigma), None)
        return mu + torch.sqrt(var + 1e-8) * torch.randn_like(mu)

    def _apply(self, fn, *args, **kwargs):
        # ``fixed`` is a plain attribute (not a buffer, so that checkpoints and exported weights keep the layer's
        # own names); ``.to()``/``.cpu()``/``.double()`` must move and cast it with the parameters, or a weight draw
        # made on CUDA stays there when ``--save-models`` exports the network from the CPU.
        super()._apply(fn, *args, **kwargs)
        if self.fixed is not None:
            self.fixed = fn(self.fixed)
        return self

    def kl(self, prior_var: float) -> torch.Tensor:
        """:math:`\\tfrac12 \\sum (\\sigma^2/v_p - 1 - \\log(\\sigma^2/v_p))` (the mean term is weight decay)."""
        ratio_log = 2.0 * self.log_sigma.double() - math.log(prior_var)
        return 0.5 * torch.sum(torch.exp(ratio_log) - 1.0 - ratio_log)


class MeanFieldLinear(_MeanField):
    """A linear layer with a factorised Gaussian over its weights."""

    def __init__(self, layer: nn.Linear, lv_init: float, generator: torch.Generator) -> None:
        super().__init__()
        self.weight = nn.Parameter(layer.weight.detach().clone())
        self.bias = None if layer.bias is None else nn.Parameter(layer.bias.detach().clone())
        self._init_sigma(lv_init, generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._forward(x, F.linear)


class MeanFieldConv2d(_MeanField):
    """A 2-D convolution with a factorised Gaussian over its weights."""

    def __init__(self, layer: nn.Conv2d, lv_init: float, generator: torch.Generator) -> None:
        super().__init__()
        self.weight = nn.Parameter(layer.weight.detach().clone())
        self.bias = None if layer.bias is None else nn.Parameter(layer.bias.detach().clone())
        self.conv = dict(stride=layer.stride, padding=layer.padding, dilation=layer.dilation, groups=layer.groups)
        self._init_sigma(lv_init, generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._forward(x, lambda x, w, b: F.conv2d(x, w, b, **self.conv))


def to_mean_field(model: nn.Module, *, lv_init: float, seed: int, only: str | None = None) -> nn.Module:
    """Replace (in place) every ``nn.Linear``/``nn.Conv2d`` of ``model`` — or only the submodule named ``only`` — by
    its mean-field counterpart with the same means; returns ``model``."""
    generator = torch.Generator().manual_seed(seed)
    kinds = {nn.Linear: MeanFieldLinear, nn.Conv2d: MeanFieldConv2d}
    targets = [n for n, m in model.named_modules() if type(m) in kinds and (only is None or n == only)]
    if only is not None and not targets:
        raise ValueError(f"the model has no linear or convolutional layer named {only!r}")
    for name in targets:
        parent, _, child = name.rpartition(".")
        holder = model.get_submodule(parent) if parent else model
        layer = getattr(holder, child)
        setattr(holder, child, kinds[type(layer)](layer, lv_init, generator))
    return model


def mean_field_layers(model: nn.Module) -> list[_MeanField]:
    return [m for m in model.modules() if isinstance(m, _MeanField)]


def kl_divergence(model: nn.Module, prior_var: float) -> torch.Tensor:
    """The KL divergence of all mean-field layers from the prior :math:`\\mathcal N(\\mu, v_p)` (float64)."""
    return sum((m.kl(prior_var) for m in mean_field_layers(model)), torch.zeros((), dtype=torch.float64))


def set_stochastic(model: nn.Module, on: bool) -> None:
    for m in mean_field_layers(model):
        m.stochastic = on


@torch.no_grad()
def sample_weights(model: nn.Module, generator: torch.Generator) -> nn.Module:
    """A copy of ``model`` with one weight sample :math:`\\mu + \\sigma \\varepsilon` fixed in every mean-field layer
    (a posterior draw shared by all inputs), in evaluation mode."""
    sampled = copy.deepcopy(model)
    for m in mean_field_layers(sampled):
        eps = torch.randn(m.weight.shape, generator=generator, dtype=torch.float64).to(m.weight.device)
        m.fixed = (m.weight.double() + torch.exp(m.log_sigma.double()) * eps).to(m.weight.dtype)
    return sampled.eval()


class OptimizerPair:
    """SGD on the means (and every other parameter) and Adam on the log-sigmas, stepped together (the code's
    ``optimizer1``/``optimizer2``); ``param_groups`` are the SGD's, which the learning-rate schedule drives."""

    def __init__(self, sgd: torch.optim.Optimizer, adam: torch.optim.Optimizer) -> None:
        self.sgd, self.adam = sgd, adam
        self.param_groups = sgd.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.sgd.zero_grad(set_to_none=set_to_none)
        self.adam.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        self.sgd.step()
        self.adam.step()

    def state_dict(self) -> dict:
        return {"sgd": self.sgd.state_dict(), "adam": self.adam.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.sgd.load_state_dict(state["sgd"])
        self.adam.load_state_dict(state["adam"])


def make_vi_optimizer(model: nn.Module, hp: dict) -> OptimizerPair:
    means = [p for n, p in model.named_parameters() if not n.endswith("log_sigma")]
    sigmas = [p for n, p in model.named_parameters() if n.endswith("log_sigma")]
    return OptimizerPair(
        torch.optim.SGD(means, lr=hp["lr"], momentum=hp["momentum"], weight_decay=hp["weight_decay"]),
        torch.optim.Adam(sigmas, lr=hp["lr_vars"]),
    )


def vi_epoch(model: nn.Module, optimizer: OptimizerPair, ctx: TrainContext, *, beta: float, prior_var: float,
             lr: float, seed: int, train_mode: bool = True) -> tuple[float, int]:
    """One pass of minibatch VI in a seeded order: loss = batch-mean CE + beta KL / N; returns (mean loss, steps).
    ``train_mode`` False keeps the network (batch norm, dropout) in evaluation mode (last-layer VI)."""
    n = len(ctx.y_train)
    batch_size = ctx.settings.batch_size
    n_batches = math.ceil(n / batch_size)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).to(ctx.device)
    torch.manual_seed(derive_seed(seed, 1))  # the local-reparameterisation noise, reseeded per epoch
    model.train(train_mode)
    set_stochastic(model, True)
    for group in optimizer.param_groups:
        group["lr"] = lr
    total = torch.zeros((), dtype=torch.float64, device=ctx.device)
    for b in range(n_batches):
        index = order[b * batch_size: (b + 1) * batch_size]
        x, y = ctx.x_train[index], ctx.y_train[index]
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y) + beta * kl_divergence(model, prior_var).float() / n
        loss.backward()
        optimizer.step()
        total += loss.detach().double() * len(y)
    set_stochastic(model, False)
    mean_loss = float(total) / n
    if not math.isfinite(mean_loss):
        raise FloatingPointError(f"VI loss became {mean_loss}; lower lr or lr_vars")
    return mean_loss, n_batches


class VariationalInference(Method):
    """Mean-field Gaussian VI on every layer; members are weight draws from the variational posterior."""

    name = "vi"
    member_kind = "posterior_sample"
    shape = "posterior"
    defaults = {**BASE_DEFAULTS, "vi_epochs": 20, "vi_lr": 0.001, "lr_vars": 0.1, "lv_init": -5.0, "beta": 1.0,
                "kl_warmup_epochs": 0}
    default_members = 20
    summary = "mean-field Gaussian variational inference (Bayes by Backprop, local reparameterisation)"
    #: None: every linear/convolutional layer is variational; "last": only the classifier (last-layer SVI).
    variational_layer: str | None = None

    def __init__(self, hyper, *, n_members, n_train):
        super().__init__(hyper, n_members=n_members, n_train=n_train)
        if not self.hp["weight_decay"] > 0:
            raise ValueError(f"{self.name}: weight_decay must be > 0 (the prior variance is 1 / (N weight_decay))")
        if int(self.hp["vi_epochs"]) < 1:
            raise ValueError(f"{self.name}: vi_epochs must be >= 1")

    @property
    def prior_var(self) -> float:
        """:math:`v_p = 1 / (N \\cdot \\mathrm{wd})` (``train_vi.py``)."""
        return 1.0 / (self.n_train * float(self.hp["weight_decay"]))

    def prepare_model(self, model):
        only = self._last_layer_name(model) if self.variational_layer == "last" else None
        return to_mean_field(model, lv_init=float(self.hp["lv_init"]), seed=int(torch.initial_seed()) & 0xFFFFFFFF,
                             only=only)

    @staticmethod
    def _last_layer_name(model: nn.Module) -> str:
        """The name of the network's last linear layer (the classifier), variational or not."""
        return [n for n, m in model.named_modules() if isinstance(m, (nn.Linear, MeanFieldLinear))][-1]

    def total_epochs(self):
        return int(self.hp["epochs"]) + int(self.hp["vi_epochs"])

    def schedule(self, t):
        return {"lr": pitfalls_schedule(t, self.hp["lr"], int(self.hp["epochs"]))}

    def make_optimizer(self, model):
        return make_vi_optimizer(model, self.hp)

    def run_epoch(self, model, optimizer, state, ctx, *, epoch, seed):
        pre = int(self.hp["epochs"])
        if epoch <= pre:  # pretraining the means as a plain network (log-sigmas get no gradient)
            return train_epoch(model, optimizer, self, ctx, epoch=epoch, seed=seed)
        t = epoch - pre
        warm = int(self.hp["kl_warmup_epochs"])
        beta = float(self.hp["beta"]) * (min(1.0, (t - 1) / warm) if warm > 0 else 1.0)
        lr = pitfalls_schedule(t - 1, float(self.hp["vi_lr"]), int(self.hp["vi_epochs"]))
        last = self.variational_layer == "last"
        if last:  # last-layer SVI: the features stay as pretrained (no gradient, batch norm frozen)
            head = self._last_layer_name(model)
            for name, p in model.named_parameters():
                p.requires_grad_(name.startswith(head + "."))
        return vi_epoch(model, optimizer, ctx, beta=beta, prior_var=self.prior_var, lr=lr, seed=seed,
                        train_mode=not last)

    def member_predictor(self, model, state, ctx, seed):
        sampled = sample_weights(model, torch.Generator().manual_seed(seed))
        return with_network(lambda x, gen: sampled(x), sampled)

    def member_info(self, index, epoch):
        return {"prior_var": self.prior_var}
