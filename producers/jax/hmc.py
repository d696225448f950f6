# SPDX-License-Identifier: MIT
r"""Full-batch HMC of the MLP with BlackJAX: the same posterior as the torch HMC producer
(:mod:`ubench.producers.hmc`), :math:`\log p(\theta \mid D) = \sum_i \log \mathrm{softmax}(f_\theta(x_i))_{y_i}
- \tfrac{\tau}{2}\lVert\theta\rVert^2`, so the two implementations check each other.

Warm-up is BlackJAX's ``window_adaptation`` (Stan's windowed adaptation of the step size by dual averaging and of a
diagonal inverse mass matrix, target acceptance 0.8) for ``burn_in`` iterations, started from URSABench's tuned step
size; then ``blackjax.hmc`` with the adapted parameters and ``n_leapfrog`` integration steps, or with
``--set sampler=nuts`` ``blackjax.nuts`` (at most ``max_tree_depth`` doublings; its warm-up adapts for NUTS too),
one member every ``thin`` iterations. The chain's state (position, adapted step size and mass matrix, PRNG key,
divergence and leapfrog counts) is checkpointed after warm-up and after every member, so a killed run resumes after
its last written member. :class:`HMCChain` takes any log-density (the tests run it on a softmax regression against
NumPyro); :func:`mlp_chain` builds the producer's.
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

__all__ = ["HMC_DEFAULTS", "HMCChain", "log_posterior", "mlp_chain"]

#: URSABench ``hyperparams/MLP200MNIST/HMC_BO.json`` (step size, L = 40, prior precision 100), as for torch.
HMC_DEFAULTS: dict[str, Any] = {
    "step_size": 0.00020897435024380684,
    "n_leapfrog": 40,
    "prior_precision": 100.0,
    "burn_in": 200,
    "thin": 5,
    "target_accept": 0.8,
    "sampler": "hmc",
    "max_tree_depth": 10,
}


def log_posterior(unravel, x, y, mean, std, prior_precision):
    """The log posterior (up to a constant) of a flat parameter vector."""

    def logdensity(theta):
        logits = mlp_logits(unravel(theta), x, mean, std)
        loglik = -optax.softmax_cross_entropy_with_integer_labels(logits, y).sum()
        return loglik - 0.5 * prior_precision * jnp.sum(theta * theta)

    return logdensity


class HMCChain:
    """One BlackJAX chain of ``logdensity`` from ``theta0`` whose kept states are the members; ``sample(k)`` returns
    member ``k``'s parameters (``unravel`` of the position) and its diagnostics, resuming from the checkpoint in
    ``scratch``. :func:`mlp_chain` builds it for the MLP on a training set."""

    def __init__(self, hp: dict, *, logdensity, theta0, unravel, seed: int, scratch: Path,
                 name: str = "hmc_chain.npz"):
        self.hp = hp
        self.logdensity, self.unravel = logdensity, unravel
        self.path = scratch / name
        self.seed = seed
        self._warm_up_or_resume(theta0)

    def _kernel(self, blackjax, **parameters):
        if self.hp["sampler"] == "nuts":
            return blackjax.nuts(self.logdensity, max_num_doublings=int(self.hp["max_tree_depth"]), **parameters)
        return blackjax.hmc(self.logdensity, num_integration_steps=int(self.hp["n_leapfrog"]), **parameters)

    def _warm_up_or_resume(self, theta0) -> None:
        # Imported here, not with the module: the other JAX methods (sgd, deep_ensemble, sgld, sghmc) need only JAX
        # and optax, and run where BlackJAX is not installed.
        try:
            import blackjax
        except ImportError as exc:
            raise ImportError(f"--framework jax hmc needs BlackJAX: pip install blackjax ({exc})") from exc

        like = {"position": theta0, "step_size": jnp.zeros(()), "inverse_mass": jnp.zeros_like(theta0),
                "key": jax.random.key_data(key_from_seed(0)),
                "divergences": jnp.zeros((), jnp.int32), "leapfrog_total": jnp.zeros((), jnp.int32)}
        saved = load_checkpoint(self.path, like)
        if saved is None:
            extra = ({"max_num_doublings": int(self.hp["max_tree_depth"])} if self.hp["sampler"] == "nuts"
                     else {"num_integration_steps": int(self.hp["n_leapfrog"])})
            warmup = blackjax.window_adaptation(
                blackjax.nuts if self.hp["sampler"] == "nuts" else blackjax.hmc, self.logdensity,
                initial_step_size=float(self.hp["step_size"]),
                target_acceptance_rate=float(self.hp["target_accept"]), **extra,
            )
            key_warm, key_run = jax.random.split(key_from_seed(derive_seed(self.seed, 1)))
            (state, parameters), _ = warmup.run(key_warm, theta0, num_steps=int(self.hp["burn_in"]))
            saved = ({"position": state.position, "step_size": jnp.asarray(parameters["step_size"]),
                      "inverse_mass": jnp.asarray(parameters["inverse_mass_matrix"]),
                      "key": jax.random.key_data(key_run),
                      "divergences": jnp.zeros((), jnp.int32), "leapfrog_total": jnp.zeros((), jnp.int32)}, 0)
            save_checkpoint(self.path, saved[0], 0)
        self.tree, self.members_done = saved
        self.kernel = self._kernel(blackjax, step_size=float(self.tree["step_size"]),
                                   inverse_mass_matrix=self.tree["inverse_mass"])
        thin = int(self.hp["thin"])
        kernel = self.kernel

        @jax.jit
        def window(state, key):
            def one(s, k):
                s, info = kernel.step(k, s)
                steps = getattr(info, "num_integration_steps", int(self.hp["n_leapfrog"]))
                return s, (info.acceptance_rate, info.is_divergent, steps)

            keys = jax.random.split(key, thin)
            state, (acc, div, steps) = jax.lax.scan(one, state, keys)
            return state, acc.mean(), div.sum(), jnp.sum(steps).astype(jnp.int32), steps[-1]

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
        state, accept, divergent, steps, last_steps = self._window(state, sub)
        self.members_done += 1
        self.tree = {**self.tree, "position": state.position, "key": jax.random.key_data(key),
                     "divergences": self.tree["divergences"] + divergent,
                     "leapfrog_total": self.tree["leapfrog_total"] + steps}
        info = {
            "iteration": int(self.hp["burn_in"]) + self.members_done * int(self.hp["thin"]),
            "sampler": self.hp["sampler"],
            "step_size": float(self.tree["step_size"]),
            "n_leapfrog": int(last_steps),
            "trajectory_length": float(self.tree["step_size"]) * int(last_steps),
            "acceptance_rate": float(accept),
            "log_posterior": float(state.logdensity),
            "divergences_total": int(self.tree["divergences"]),
            "leapfrog_total": int(self.tree["leapfrog_total"]),
        }
        return self.unravel(state.position), info


def mlp_chain(hp: dict, *, x, y, n_classes: int, mean: float, std: float, seed: int, scratch: Path,
              name: str = "hmc_chain.npz") -> HMCChain:
    """The chain of the MLP's posterior on ``(x, y)``, started from the torch-like initialisation of ``seed``."""
    params = init_mlp(key_from_seed(derive_seed(seed, 0)), int(np.prod(x.shape[1:])), n_classes)
    theta0, unravel = ravel_pytree(params)
    logdensity = log_posterior(unravel, jnp.asarray(x), jnp.asarray(y), mean, std, float(hp["prior_precision"]))
    return HMCChain(hp, logdensity=logdensity, theta0=theta0, unravel=unravel, seed=seed, scratch=scratch, name=name)
