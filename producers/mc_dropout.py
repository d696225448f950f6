# SPDX-License-Identifier: MIT
"""MC dropout (Gal & Ghahramani 2016): train with Bernoulli dropout, keep it on at test time; each member is one
forward pass with fresh masks. The rate 0.04 after both hidden layers is URSABench's MNIST-MLP setting (appendix D).
"""

from __future__ import annotations

from .models import set_mc_dropout
from .torch_trainer import BASE_DEFAULTS, Method, with_network

__all__ = ["MCDropout"]


class MCDropout(Method):
    """Members are dropout samples of one trained network; batch norm stays in evaluation mode."""

    name = "mc_dropout"
    member_kind = "mc_sample"
    shape = "posterior"
    dropout = "bernoulli"
    test_time_dropout = True
    defaults = {**BASE_DEFAULTS, "dropout_rate": 0.04}
    default_members = 20
    summary = "MC dropout (Bernoulli masks at test time)"

    def member_predictor(self, model, state, ctx, seed):
        model.eval()
        set_mc_dropout(model, True)
        # predict_splits reseeds the global generator per member and split, so each member has its own masks.
        return with_network(lambda x, gen: model(x), model)
