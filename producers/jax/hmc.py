# SPDX-License-Identifier: MIT
r"""Full-batch HMC of the MLP with BlackJAX: the same posterior as the torch HMC producer
(:mod:`ubench.producers.hmc`), :math:`\log p(\theta \mid D) = \sum_i \log \mathrm{softmax}(f_\theta(x_i))_{y_i}
- \tfrac{\tau}{2}\lVert\theta\rVert^2`, so the two implementations check each other.

Warm-up is BlackJAX's ``window_adaptation`` (Stan's windowed adaptation of the step size by dual averaging and of a
diagonal inverse mass matrix, target acceptance 0.8) for ``burn_in`` iterations, started from URSABench's tuned step
size; then ``blackjax.hmc`` with the adapted parameters and ``n_leapfrog`` integration steps, one member every
``thin`` iterations. The chain's state (position, adapted step size and mass matrix, PRNG key) is checkpointed after
warm-up and after every member, so a killed run resumes after its last written member.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from ..run_record import derive_seed
from .mlp import init_mlp, mlp_logits
from .train import key_from_seed, load_checkpoint, save_checkpoint

__all__ = ["HMC_DEFAULTS", "log_posterior", "HMCChain"]

#: URSABench ``hyperparams/MLP200MNIST/HMC_BO.json`` (step size, L = 40, prior precision 100), as for torch.
HMC_DEFAULTS: dict[str, Any] = {
    "step_size": 0.00020897435024380684,
    "n_leapfrog": 40,
    "prior_precision": 100.0,
    "burn_in": 200,
    "thin": 5,
    "target_accept": 0.8,
}


def log_posterior(unravel, x, y, mean, std, prior_precision):
    """The log posterior (up to a constant) of a flat parameter vector."""

    def logdensity(theta):
        logits = mlp_logits(unravel(theta), x, mean, std)
        loglik = -optax.softmax_cross_entropy_with_integer_labels(logits, y).sum()
        return loglik - 0.5 * prior_precision * jnp.sum(theta * theta)

    return logdensity


class HMCChain:
    """One BlackJAX chain whose kept states are the members; ``sample(k)`` returns member ``k``'s parameters and
    its diagnostics, resuming from the checkpoint in ``scratch``."""

    def __init__(self, hp: dict, *, x, y, n_classes: int, mean: float, std: float, seed: int, scratch: Path,
                 name: str = "hmc_chain.npz"):
        self.hp = hp
        params = init_mlp(key_from_seed(derive_seed(seed, 0)), int(np.prod(x.shape[1:])), n_classes)
        theta0, self.unravel = ravel_pytree(params)
        self.logdensity = log_posterior(self.unravel, jnp.asarray(x), jnp.asarray(y), mean, std,
                                        float(hp["prior_precision"]))
        self.path = scratch / name
        self.seed = seed
        self._warm_up_or_resume(theta0)

    def _warm_up_or_resume(self, theta0) -> None:
        # Imported here, not with the module: the other JAX methods (sgd, deep_ensemble, sgld, sghmc) need only JAX
        # and optax, and run where BlackJAX is not installed.
        try:
            import blackjax
        except ImportError as exc:
            raise ImportError(f"--framework jax hmc needs BlackJAX: pip install blackjax ({exc})") from exc

        like = {"position": theta0, "step_size": jnp.zeros(()), "inverse_mass": jnp.zeros_like(theta0),
                "key": jax.random.key_data(key_from_seed(0)),
                "divergences": jnp.zeros((), jnp.int32)}
        saved = load_checkpoint(self.path, like)
        if saved is None:
            warmup = blackjax.window_adaptation(
                blackjax.hmc, self.logdensity, initial_step_size=float(self.hp["step_size"]),
                target_acceptance_rate=float(self.hp["target_accept"]),
                num_integration_steps=int(self.hp["n_leapfrog"]),
            )
            key_warm, key_run = jax.random.split(key_from_seed(derive_seed(self.seed, 1)))
            (state, parameters), _ = warmup.run(key_warm, theta0, num_steps=int(self.hp["burn_in"]))
            saved = ({"position": state.position, "step_size": jnp.asarray(parameters["step_size"]),
                      "inverse_mass": jnp.asarray(parameters["inverse_mass_matrix"]),
                      "key": jax.random.key_data(key_run),
                      "divergences": jnp.zeros((), jnp.int32)}, 0)
            save_checkpoint(self.path, saved[0], 0)
        self.tree, self.members_done = saved
        self.kernel = blackjax.hmc(self.logdensity, step_size=float(self.tree["step_size"]),
                                   inverse_mass_matrix=self.tree["inverse_mass"],
                                   num_integration_steps=int(self.hp["n_leapfrog"]))
        thin = int(self.hp["thin"])
        kernel = self.kernel

        @jax.jit
        def window(state, key):
            def one(carry, k):
                s, _ = carry
                s, info = kernel.step(k, s)
                return (s, info.acceptance_rate), (info.acceptance_rate, info.is_divergent)

            keys = jax.random.split(key, thin)
            (state, _), (acc, div) = jax.lax.scan(one, (state, jnp.zeros(())), keys)
            return state, acc.mean(), div.sum()

        self._window = window

    def commit(self) -> None:
        """Checkpoint the chain at its last member (call once that member is written)."""
        save_checkpoint(self.path, self.tree, self.members_done)

    def sample(self, member: int) -> tuple[Any, dict]:
        """Advance the chain to member ``member`` and return its parameters and info. Members the checkpoint is
        behind on (written, but killed before :meth:`commit`) are recomputed on the same path and dropped."""
        if member < self.members_done:
            raise ValueError(f"HMC chain is at member {self.members_done}; asked for {member}")
        while self.members_done < member:
            self._advance()
        return self._advance()

    def _advance(self) -> tuple[Any, dict]:
        state = self.kernel.init(self.tree["position"])
        key = jax.random.wrap_key_data(self.tree["key"])
        key, sub = jax.random.split(key)
        state, accept, divergent = self._window(state, sub)
        self.members_done += 1
        self.tree = {**self.tree, "position": state.position, "key": jax.random.key_data(key),
                     "divergences": self.tree["divergences"] + divergent}
        info = {
            "iteration": int(self.hp["burn_in"]) + self.members_done * int(self.hp["thin"]),
            "step_size": float(self.tree["step_size"]),
            "n_leapfrog": int(self.hp["n_leapfrog"]),
            "trajectory_length": float(self.tree["step_size"]) * int(self.hp["n_leapfrog"]),
            "acceptance_rate": float(accept),
            "log_posterior": float(state.logdensity),
            "divergences_total": int(self.tree["divergences"]),
        }
        return self.unravel(state.position), info
