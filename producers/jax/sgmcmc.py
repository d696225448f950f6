# SPDX-License-Identifier: MIT
r"""SGLD and SGHMC in JAX with the torch producers' parameterisation (:mod:`ubench.producers.sgmcmc`): per
minibatch, with the mean loss :math:`\bar L`, rate :math:`\eta_t`, friction :math:`\alpha` (1 for SGLD), prior std
:math:`\sigma`, :math:`N` training points and temperature :math:`T` (``"1/N"``, the reference code's noise, by
default),

.. math:: v \leftarrow (1 - \alpha) v - \eta_t (\nabla \bar L + \theta / (\sigma^2 N))
          + \sqrt{2 \eta_t \alpha T / N}\, \varepsilon, \qquad \theta \leftarrow \theta + v,

with the rate annealed along a half cosine to :math:`\eta / 2` by the end of sampling, and one member every
``thin_epochs`` after ``burn_in_epochs``. Every epoch ends with an atomic checkpoint; its noise and batch order
come from seeds derived from (run seed, epoch), so a killed chain resumes on the same path.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..run_record import derive_seed
from ..sampler_defaults import cosine_to_half, resolve_temperature
from .mlp import Params, init_mlp, mlp_logits
from .train import key_from_seed, load_checkpoint, save_checkpoint

__all__ = ["sgmcmc_chain", "log_posterior_value"]


@functools.lru_cache(maxsize=8)
def _compiled_step(mean: float, std: float, n_data: int, prior_std: float, friction: float, temperature: float):
    weight_decay = 1.0 / (prior_std ** 2 * n_data)

    def loss_fn(p, xb, yb):
        return optax.softmax_cross_entropy_with_integer_labels(mlp_logits(p, xb, mean, std), yb).mean()

    @jax.jit
    def step(params, velocity, key, xb, yb, lr):
        grads = jax.grad(loss_fn)(params, xb, yb)
        leaves, tree = jax.tree_util.tree_flatten(params)
        keys = jax.random.split(key, len(leaves))
        noise = jax.tree_util.tree_unflatten(
            tree, [jax.random.normal(k, leaf.shape, leaf.dtype) for k, leaf in zip(keys, leaves)])
        scale = jnp.sqrt(2.0 * lr * friction * temperature / n_data)
        velocity = jax.tree_util.tree_map(
            lambda v, g, p, e: (1.0 - friction) * v - lr * (g + weight_decay * p) + scale * e,
            velocity, grads, params, noise)
        return jax.tree_util.tree_map(lambda p, v: p + v, params, velocity), velocity

    return step


def log_posterior_value(params: Params, x: np.ndarray, y: np.ndarray, mean: float, std: float,
                        prior_std: float) -> float:
    """:math:`-\\sum_i \\mathrm{CE}_i - \\lVert\\theta\\rVert^2 / (2\\sigma^2)` on the whole training set."""
    total = 0.0
    for start in range(0, len(y), 1000):
        logits = np.asarray(mlp_logits(params, jnp.asarray(x[start: start + 1000]), mean, std), dtype=np.float64)
        logp = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
        total += float(logp[np.arange(len(logits)), y[start: start + 1000]].sum())
    sq = sum(float(np.sum(np.asarray(w, dtype=np.float64) ** 2)) for w in jax.tree_util.tree_leaves(params))
    return total - sq / (2.0 * prior_std ** 2)


def sgmcmc_chain(hp: dict, *, friction: float, n_members: int, x: np.ndarray, y: np.ndarray, n_classes: int,
                 mean: float, std: float, seed: int, batch_size: int, checkpoint: Path, members_done: int,
                 on_member: Callable[[int, Params, int, int, float], None]) -> None:
    """Run (or resume) one chain, calling ``on_member(k, params, epoch, step, log_posterior)`` at the snapshot epochs
    of members ``k >= members_done``."""
    n = len(y)
    steps_per_epoch = math.ceil(n / batch_size)
    burn, thin = int(hp["burn_in_epochs"]), int(hp["thin_epochs"])
    snapshots = [burn + (k + 1) * thin for k in range(n_members)]
    total = snapshots[-1]
    params = init_mlp(key_from_seed(derive_seed(seed, 0)), int(np.prod(x.shape[1:])), n_classes)
    state = (params, jax.tree_util.tree_map(jnp.zeros_like, params))
    epoch = 0
    saved = load_checkpoint(checkpoint, state)
    if saved is not None:
        state, epoch = saved
    step = _compiled_step(float(mean), float(std), n, float(hp["prior_std"]), float(friction),
                          resolve_temperature(hp["temperature"], n))
    xs, ys = jnp.asarray(x), jnp.asarray(y)
    while epoch < total:
        order = np.random.default_rng(derive_seed(seed, epoch + 1)).permutation(n)
        key = key_from_seed(derive_seed(seed, epoch + 1, 1))
        params, velocity = state
        for b in range(steps_per_epoch):
            index = order[b * batch_size: (b + 1) * batch_size]
            lr = cosine_to_half(epoch + b / steps_per_epoch, float(hp["lr"]), total)
            params, velocity = step(params, velocity, jax.random.fold_in(key, b), xs[index], ys[index], lr)
        state = (params, velocity)
        epoch += 1
        for k in [k for k, e in enumerate(snapshots) if e == epoch and k >= members_done]:
            on_member(k, params, epoch, epoch * steps_per_epoch,
                      log_posterior_value(params, x, y, mean, std, float(hp["prior_std"])))
        save_checkpoint(checkpoint, state, epoch)
