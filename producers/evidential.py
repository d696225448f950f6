# SPDX-License-Identifier: MIT
r"""Evidential deep learning (Sensoy, Kaplan & Kandemir 2018): the network outputs Dirichlet evidence, one member.

Follows the authors' TensorFlow code (the notebook at muratsensoy.github.io/uncertainty.html, ported to PyTorch in
dougbrion/pytorch-classification-uncertainty): evidence :math:`e = \mathrm{ReLU}(f(x))`, :math:`\alpha = e + 1`,
:math:`S = \sum_k \alpha_k`, the predictive distribution :math:`\hat p = \alpha / S` (stored as the member's
probabilities; its logits are :math:`\log\alpha`, whose softmax is :math:`\hat p`), and the loss of eq. (5)

.. math:: \sum_k (y_k - \hat p_k)^2 + \frac{\hat p_k (1 - \hat p_k)}{S + 1}
          + \lambda_t\, \mathrm{KL}\big(\mathrm{Dir}(\tilde\alpha)\,\|\,\mathrm{Dir}(\mathbf 1)\big),
          \quad \tilde\alpha = y + (1 - y) \circ \alpha,\ \lambda_t = \min(1, t / 10)

with :math:`t` the epochs done (the code's ``global_step / (10 n_batches)``), Adam (learning rate 1e-3) and an L2
penalty of 0.005 (Adam's coupled weight decay; the code adds ``0.005 * l2_loss``). ubench applies its usual
learning-rate schedule on top. ``loss_type`` ``log`` and ``digamma`` are the paper's eqs. (3) and (4); ``evidence``
``exp`` and ``softplus`` the code's other evidence functions. With ReLU evidence a sample whose outputs are all
negative has no evidence and no gradient from the data term: on the 1,300 digits (about 200 steps) a quarter of the
test samples ended there and accuracy was 0.67 (``softplus`` without weight decay: 0.90), so short runs on small
data should try ``--set evidence=softplus``. On Fashion-MNIST (MLP, 20 epochs, the defaults) 23% of the test samples
had no evidence (vacuity 1, uniform prediction), accuracy was 0.73 overall and 0.91 on the others; without weight
decay the share was the same (10,000 training images, 10 epochs: 36% either way), with the notebook's batch of 1,000
it fell to 24%: the ReLU evidence, not a default of ubench's.

The method's score is the vacuity :math:`u = K / S` (direction ``uncertainty``), the paper's uncertainty mass.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .torch_trainer import Method, predict_values, with_network

__all__ = ["Evidential", "evidential_loss"]

LOSS_TYPES = ("mse", "log", "digamma")
#: Evidence functions of the reference code (the notebook's ``relu_evidence``, ``exp_evidence`` (logits clipped to
#: [-10, 10]) and ``softplus_evidence``); ReLU is its default.
EVIDENCE = {"relu": F.relu, "exp": lambda z: torch.exp(torch.clamp(z, -10, 10)), "softplus": F.softplus}


def evidential_loss(outputs: torch.Tensor, y: torch.Tensor, annealing: float, loss_type: str = "mse"
                    ) -> torch.Tensor:
    """The batch mean of Sensoy et al.'s loss (eq. 5, 3 or 4) plus ``annealing`` times the KL term."""
    alpha = F.relu(outputs) + 1.0
    s = alpha.sum(dim=1, keepdim=True)
    onehot = F.one_hot(y, outputs.shape[1]).to(outputs.dtype)
    if loss_type == "mse":
        p = alpha / s
        data = ((onehot - p) ** 2 + p * (1 - p) / (s + 1)).sum(dim=1)
    elif loss_type == "log":
        data = (onehot * (torch.log(s) - torch.log(alpha))).sum(dim=1)
    else:
        data = (onehot * (torch.digamma(s) - torch.digamma(alpha))).sum(dim=1)
    tilde = onehot + (1 - onehot) * alpha
    s_tilde = tilde.sum(dim=1)
    k = outputs.shape[1]
    kl = (torch.lgamma(s_tilde) - torch.lgamma(torch.tensor(float(k), dtype=outputs.dtype))
          - torch.lgamma(tilde).sum(dim=1)
          + ((tilde - 1) * (torch.digamma(tilde) - torch.digamma(s_tilde)[:, None])).sum(dim=1))
    return (data + annealing * kl).mean()


class Evidential(Method):
    """One network with Dirichlet outputs; its vacuity K / S is the archive's method score."""

    name = "evidential"
    member_kind = "point"
    shape = "posterior"
    defaults = {"epochs": 20, "lr": 1e-3, "weight_decay": 5e-3, "annealing_epochs": 10.0, "loss_type": "mse",
                "evidence": "relu"}
    default_members = 1
    max_members = 1
    writes_scores = True
    exportable = False
    not_exportable_because = "its probabilities are alpha / S of the network's evidence, not a softmax of its output"
    summary = "evidential deep learning: Dirichlet evidence, vacuity K/S as its score (Sensoy et al. 2018)"

    @classmethod
    def check_hyperparameters(cls, hp) -> None:
        if hp["loss_type"] not in LOSS_TYPES:
            raise ValueError(f"evidential: loss_type must be one of {LOSS_TYPES}; got {hp['loss_type']!r}")
        if hp["evidence"] not in EVIDENCE:
            raise ValueError(f"evidential: evidence must be one of {tuple(EVIDENCE)}; got {hp['evidence']!r}")
        if hp["annealing_epochs"] <= 0:
            raise ValueError(f"evidential: annealing_epochs must be > 0; got {hp['annealing_epochs']}")

    def make_optimizer(self, model):
        return torch.optim.Adam(model.parameters(), lr=self.hp["lr"], weight_decay=self.hp["weight_decay"])

    def evidence(self, outputs: torch.Tensor) -> torch.Tensor:
        return EVIDENCE[self.hp["evidence"]](outputs)

    def loss(self, outputs, y, t):
        # evidential_loss takes the ReLU of what it is given: the identity on evidence, which is non-negative
        return evidential_loss(self.evidence(outputs), y, min(1.0, t / float(self.hp["annealing_epochs"])),
                               self.hp["loss_type"])

    def member_predictor(self, model, state, ctx, seed):
        model.eval()
        return with_network(lambda x, gen: torch.log(self.evidence(model(x)) + 1.0), model)

    def method_scores(self, model, state, ctx):
        model.eval()
        k = ctx.task.n_classes

        def vacuity(x):
            return k / (self.evidence(model(x).double()) + 1.0).sum(dim=1)

        values = predict_values(vacuity, ctx.task, device=ctx.device, batch_size=ctx.settings.predict_batch_size)
        return {"vacuity": (values, "uncertainty")}
