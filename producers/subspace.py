# SPDX-License-Identifier: MIT
r"""Subspace inference (Izmailov et al. 2019, "Subspace Inference for Bayesian Deep Learning"; URSABench's
"PCA + ESS (SI)", App. D): elliptical slice sampling of the weights in the rank-``rank`` PCA subspace of an SGD
(SWA) trajectory. Members are the samples.

1. **Trajectory.** ``epochs`` epochs of SGD (momentum, weight decay) whose rate stays at ``lr`` for the first half,
   decays linearly to ``swa_lr`` between 50% and 90% and stays there; then ``swa_epochs`` more epochs at ``swa_lr``,
   collecting the weights :math:`w_i` after each into the running mean :math:`\bar w` and keeping the last
   ``max_rank`` deviations :math:`w_i - \bar w_i` from the running mean (as updated with :math:`w_i`) as rows of
   :math:`D`.
2. **Subspace.** With :math:`k` rows held, the thin SVD :math:`D/\sqrt{\max(1, k-1)} = U S V^\top`; the basis is
   :math:`P = S_{:r} V_{:r}^\top` (rows scaled by their singular values, :math:`r = \min(\mathrm{rank}, k)`) and
   the weights are :math:`w(z) = \bar w + P^\top z`.
3. **Sampling.** Prior :math:`z \sim \mathcal N(0, \sigma^2 I)` (``prior_std`` :math:`\sigma`), tempered likelihood
   :math:`\log L(z) = -\tfrac1T \sum_{i=1}^N \mathrm{CE}(f_{w(z)}(x_i), y_i)` over the training set
   (``temperature`` :math:`T`), elliptical slice sampling (:mod:`.ess`) from :math:`z = 0` (the SWA mean); after
   the trajectory, one "epoch" of the producer is one ESS transition, and a member is kept every ``thin`` of them.

Where the paper and URSABench's code (``inference/pca_subspace.py``, ``swa.py``, ``subspaces.py``, ``util.py``)
differ, this follows the code: the defaults are its ``hyperparams/MLP200MNIST/PCASubspaceSampler_BO.json``
(``lr_init`` 0.0439, ``swag_lr`` 0.0017, ``swag_wd`` 4e-4, ``swag_momentum`` 0.536, 50 burn-in epochs, 50 iterates,
rank 20 of at most 20 deviations, ``temperature`` 5000, ``prior_std`` 2, 30 samples), one ESS transition per sample
with no burn-in or thinning, a temperature on the summed training loss and basis rows scaled by their singular
values. URSABench's running mean counts each iterate before averaging it (``num_models_collected`` is incremented
first), so after :math:`K` iterates :math:`\bar w = \sum_i w_i / (K + 1)`, the SWA mean shrunk by :math:`K/(K+1)`,
and the deviations are taken from that running value; ``ursabench_mean`` (default true) keeps this, false gives the
paper's mean :math:`\sum_i w_i / K`. The learning rate changes once per epoch as in URSABench's ``SWA._schedule``
(not per batch). Two departures, neither changing the chain's law: URSABench's ``randomized_svd`` with
``n_components`` equal to the number of rows is an exact SVD up to rounding, computed here from the eigenvectors of
the float64 Gram matrix of the deviations, :func:`pca_subspace`); and the log-likelihood at the current point is
carried between transitions instead of recomputed. The likelihood is evaluated in training mode as URSABench does
(batch-norm layers use batch statistics); members with batch norm get their running statistics recomputed on the
training set (SWAG's ``bn_update``). URSABench's temperature was tuned for MNIST's 60,000 images; on smaller sets
the tempered likelihood is flatter and the samples spread more (``--set temperature=...``).
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from .ess import elliptical_slice
from .swag import bn_update
from .torch_trainer import Method, TrainContext, with_network

__all__ = ["SubspaceESS", "pca_subspace"]


def pca_subspace(deviations: torch.Tensor, rank: int, *, dtype: torch.dtype = torch.float64,
                 chunk: int = 1 << 20) -> torch.Tensor:
    """The basis :math:`S_{:r} V_{:r}^\\top` (``r x P``) of the thin SVD :math:`U S V^\\top` of the ``k x P``
    deviations scaled by :math:`1/\\sqrt{\\max(1, k-1)}` (URSABench ``PCASpace.get_space``).

    Computed as :math:`U_{:r}^\\top D` from the eigenvectors of the ``k x k`` Gram matrix :math:`D D^\\top`
    (accumulated in float64 over column chunks of ``chunk``), so memory beyond the deviations is ``k x k`` plus the
    result, whatever the number of weights; the rows lie in the deviations' row space by construction."""
    k, p = deviations.shape
    scale = 1.0 / math.sqrt(max(1, k - 1))
    gram = torch.zeros(k, k, dtype=torch.float64, device=deviations.device)
    for start in range(0, p, chunk):
        block = deviations[:, start: start + chunk].double()
        gram += block @ block.T
    _, u = torch.linalg.eigh(gram)  # ascending eigenvalues: the last columns are the leading components
    r = max(1, min(int(rank), k))
    u = u[:, -r:].flip(1) * scale
    out = torch.empty(r, p, dtype=dtype, device=deviations.device)
    for start in range(0, p, chunk):
        out[:, start: start + chunk] = (u.T @ deviations[:, start: start + chunk].double()).to(dtype)
    return out


class SubspaceESS(Method):
    """PCA subspace of the SWA trajectory, elliptical slice sampling in it; members are the samples."""

    name = "subspace_ess"
    member_kind = "posterior_sample"
    shape = "trajectory"
    defaults = {
        "epochs": 50,
        "lr": 0.04393735155463219,
        "swa_lr": 0.0017009282018989325,
        "momentum": 0.5357643365859985,
        "weight_decay": 0.00039999998989515007,
        "swa_epochs": 50,
        "rank": 20,
        "max_rank": 20,
        "temperature": 5000.0,
        "prior_std": 2.0,
        "thin": 1,
        "ursabench_mean": True,
    }
    default_members = 30
    summary = "PCA subspace of the SWA trajectory + elliptical slice sampling (subspace inference)"

    def __init__(self, hyper, *, n_members, n_train):
        super().__init__(hyper, n_members=n_members, n_train=n_train)
        self._records: list[dict] = []

    @classmethod
    def check_hyperparameters(cls, hp):
        if int(hp["swa_epochs"]) < 2:
            raise ValueError(f"subspace_ess: swa_epochs must be >= 2 (a subspace needs two iterates); "
                             f"got {hp['swa_epochs']}")
        if not 1 <= int(hp["rank"]) <= int(hp["max_rank"]):
            raise ValueError(f"subspace_ess: need 1 <= rank <= max_rank; got rank={hp['rank']}, "
                             f"max_rank={hp['max_rank']}")
        for key in ("temperature", "prior_std", "lr", "swa_lr"):
            if not hp[key] > 0:
                raise ValueError(f"subspace_ess: {key} must be > 0; got {hp[key]}")
        if int(hp["thin"]) < 1:
            raise ValueError(f"subspace_ess: thin must be >= 1; got {hp['thin']}")

    # -- the schedule --------------------------------------------------------------------------------------------
    @property
    def trajectory_epochs(self) -> int:
        return int(self.hp["epochs"]) + int(self.hp["swa_epochs"])

    def snapshot_epochs(self):
        return [self.trajectory_epochs + (k + 1) * int(self.hp["thin"]) for k in range(self.n_members)]

    def total_epochs(self):
        return self.snapshot_epochs()[-1]

    def schedule(self, t):
        """URSABench ``SWA._schedule`` of the epochs done (``floor(t)``), relative to ``epochs``."""
        u = math.floor(t) / max(int(self.hp["epochs"]), 1)
        lr, swa_lr = self.hp["lr"], self.hp["swa_lr"]
        if u <= 0.5:
            return {"lr": lr}
        if u <= 0.9:
            return {"lr": lr + (swa_lr - lr) * (u - 0.5) / 0.4}
        return {"lr": swa_lr}

    def init_state(self, model):
        d = sum(p.numel() for p in model.parameters())
        device = next(model.parameters()).device
        return {
            "n": 0,
            "mean": torch.zeros(d, dtype=torch.float64, device=device),
            "deviations": torch.zeros(int(self.hp["max_rank"]), d, dtype=torch.float32, device=device),
            "basis": None,
            "z": None,
            "log_likelihood": None,
            "evaluations": 0,
            "members": [],
        }

    # -- the trajectory and the sampler --------------------------------------------------------------------------
    def weights(self, state, z: torch.Tensor) -> torch.Tensor:
        """:math:`\\bar w + P^\\top z` (float64)."""
        return state["mean"] + state["basis"].T.double() @ z.to(state["mean"])

    def _log_likelihood(self, model: nn.Module, ctx: TrainContext, w: torch.Tensor) -> float:
        vector_to_parameters(w.to(next(model.parameters()).dtype), model.parameters())
        model.train()  # as URSABench's log_pdf (batch statistics in batch-norm layers)
        total = torch.zeros((), dtype=torch.float64, device=ctx.device)
        batch = ctx.settings.batch_size
        with torch.no_grad():
            for start in range(0, len(ctx.y_train), batch):
                logits = model(ctx.x_train[start: start + batch])
                total += F.cross_entropy(logits.double(), ctx.y_train[start: start + batch], reduction="sum")
        return -float(total) / float(self.hp["temperature"])

    def run_epoch(self, model, optimizer, state, ctx: TrainContext, *, epoch: int, seed: int):
        if epoch <= self.trajectory_epochs:
            return super().run_epoch(model, optimizer, state, ctx, epoch=epoch, seed=seed)
        if state["basis"] is None:
            raise RuntimeError("subspace_ess: sampling before the subspace was built")
        z = state["z"]
        if state["log_likelihood"] is None:
            state["log_likelihood"] = self._log_likelihood(model, ctx, self.weights(state, z))
        rng = np.random.default_rng(seed)
        prior_sample = rng.normal(0.0, float(self.hp["prior_std"]), size=z.shape[0])

        def log_likelihood(v: np.ndarray) -> float:
            return self._log_likelihood(model, ctx, self.weights(state, torch.from_numpy(v)))

        new_z, ll, n_eval = elliptical_slice(z.cpu().numpy(), log_likelihood, prior_sample=prior_sample,
                                             current_log_likelihood=float(state["log_likelihood"]), rng=rng)
        state["z"] = torch.from_numpy(new_z).to(z)
        state["log_likelihood"] = ll
        state["evaluations"] = n_eval
        with torch.no_grad():
            vector_to_parameters(self.weights(state, state["z"]).to(next(model.parameters()).dtype),
                                 model.parameters())
        return -ll * float(self.hp["temperature"]) / len(ctx.y_train), n_eval

    def on_epoch_end(self, model, state, epoch):
        self._records = state["members"]
        if int(self.hp["epochs"]) < epoch <= self.trajectory_epochs:
            w = parameters_to_vector(model.parameters()).detach().double()
            n = state["n"]
            # URSABench's SWA._collect_model counts the iterate before averaging it: weights n+1 of n+2
            c = n + 1 if self.hp["ursabench_mean"] else n
            state["mean"].mul_(c / (c + 1)).add_(w / (c + 1))
            # the last max_rank deviations from the running mean, a ring buffer (row n mod max_rank)
            state["deviations"][n % state["deviations"].shape[0]] = (w - state["mean"]).float()
            state["n"] = n + 1
            if epoch == self.trajectory_epochs:
                k = min(state["n"], state["deviations"].shape[0])
                # float32 like the deviations (and URSABench's FloatTensor): half the checkpoint of float64
                state["basis"] = pca_subspace(state["deviations"][:k], int(self.hp["rank"]), dtype=torch.float32)
                state["z"] = torch.zeros(state["basis"].shape[0], dtype=torch.float64, device=w.device)
                with torch.no_grad():
                    vector_to_parameters(self.weights(state, state["z"]).float(), model.parameters())
        elif epoch in self.snapshot_epochs():
            z = state["z"]
            state["members"].append({
                "iteration": epoch - self.trajectory_epochs,
                "log_likelihood": state["log_likelihood"],
                "log_posterior": self._log_posterior(state),
                "ess_evaluations": state["evaluations"],
                "subspace_rank": int(z.shape[0]),
                "z_norm": float(torch.linalg.vector_norm(z)),
            })

    def _log_posterior(self, state) -> float:
        """Tempered log-likelihood plus the Gaussian log-prior of ``z`` (up to constants)."""
        z = state["z"]
        return float(state["log_likelihood"]) - float(z @ z) / (2.0 * float(self.hp["prior_std"]) ** 2)

    def log_posterior(self, model, state, ctx):
        return self._log_posterior(state)

    def member_predictor(self, model, state, ctx, seed):
        sampled = copy.deepcopy(model)
        bn_update(sampled, ctx.x_train, batch_size=ctx.settings.predict_batch_size)
        sampled.eval()
        return with_network(lambda x, gen: sampled(x), sampled)

    def member_info(self, index: int, epoch: int) -> dict[str, Any]:
        return dict(self._records[index]) if index < len(self._records) else {}
