# SPDX-License-Identifier: MIT
"""The last-layer methods of Ovadia et al. (2019, section 3 "LL"): approximate Bayesian inference for the
classifier's parameters only (Riquelme et al. 2018), on top of an ordinary network.

* ``ll_svi`` (LL SVI): the network is trained as usual for ``epochs``; then its last linear layer becomes a
  mean-field Gaussian layer (:mod:`.vi`: local reparameterisation, the Pitfalls code's prior and initial variance)
  trained by SVI for ``vi_epochs`` with every other parameter frozen and batch norm in evaluation mode. Members are
  draws of the last layer's weights; the features are shared by all members.
* ``ll_dropout`` (LL Dropout): Bernoulli dropout only on the activations entering the last layer, trained with it
  and kept on at test time; members are dropout masks on that layer's input. The rate 0.1 is the one rate the paper
  states (its text model, appendix A.4; the image models' rates were tuned, not reported).
"""

from __future__ import annotations

from torch import nn

from .mc_dropout import MCDropout
from .torch_trainer import BASE_DEFAULTS
from .vi import VariationalInference

__all__ = ["LastLayerDropout", "LastLayerSVI", "insert_dropout", "last_linear_name"]


def last_linear_name(model: nn.Module) -> str:
    """The module name of the network's last ``nn.Linear`` (its classifier)."""
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    if not names:
        raise ValueError("the model has no linear layer")
    return names[-1]


class LastLayerSVI(VariationalInference):
    """Mean-field SVI on the last layer of a pretrained network; members are last-layer weight draws."""

    name = "ll_svi"
    summary = "last-layer mean-field SVI on a trained network (Ovadia et al. 2019)"
    variational_layer = "last"


class LastLayerDropout(MCDropout):
    """Dropout only before the last layer, trained with it and sampled at test time."""

    name = "ll_dropout"
    dropout = "none"  # the network is built plain; prepare_model puts the one dropout layer in
    defaults = {**BASE_DEFAULTS, "dropout_rate": 0.1}
    summary = "last-layer MC dropout (Ovadia et al. 2019)"

    def __init__(self, hyper, *, n_members, n_train):
        super().__init__(hyper, n_members=n_members, n_train=n_train)
        if not 0.0 < self.hp["dropout_rate"] < 1.0:
            raise ValueError(f"ll_dropout: dropout_rate must be in (0, 1); got {self.hp['dropout_rate']}")

    def prepare_model(self, model):
        return insert_dropout(model, last_linear_name(model), float(self.hp["dropout_rate"]))


def insert_dropout(model: nn.Module, name: str, p: float) -> nn.Module:
    """Put ``nn.Dropout(p)`` in front of the submodule ``name`` (in place; it becomes ``Sequential(dropout,
    layer)``); returns ``model``. ``ll_dropout``'s network, also rebuilt by ``ubench latency --backend torch``."""
    parent, _, child = name.rpartition(".")
    holder = model.get_submodule(parent) if parent else model
    setattr(holder, child, nn.Sequential(nn.Dropout(p), getattr(holder, child)))
    return model
