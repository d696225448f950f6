# SPDX-License-Identifier: MIT
r"""Minibatch training in JAX with optax: SGD (one member) and deep ensembles (independent runs).

The optimiser is torch's ``SGD(momentum, weight_decay)`` written with optax, ``add_decayed_weights(wd)`` then
``sgd(schedule, momentum)``: :math:`v \leftarrow \mu v + (g + \lambda\theta)`, :math:`\theta \leftarrow \theta - \eta_t v`,
with the Pitfalls schedule (appendix B eq. 6) evaluated at the fractional epoch of every step, as the torch trainer
does. Every epoch draws its batch order from a seed derived from (run seed, epoch) and ends with an atomic
checkpoint of parameters and optimiser state, so a killed run resumes on the same path.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ...archive_schema.durable import atomic_path
from ..run_record import derive_seed
from .mlp import Params, init_mlp, mlp_logits

__all__ = ["pitfalls_schedule_jax", "train_run", "load_checkpoint", "save_checkpoint", "key_from_seed"]


def key_from_seed(seed: int) -> jax.Array:
    return jax.random.key(int(seed) % (2**32))


def save_checkpoint(path: Path, tree: Any, epoch: int) -> None:
    leaves = jax.tree_util.tree_leaves(tree)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, epoch=np.int64(epoch), **{f"leaf{i:04d}": np.asarray(x) for i, x in enumerate(leaves)})


def load_checkpoint(path: Path, like: Any) -> tuple[Any, int] | None:
    """The tree saved at ``path`` in the structure of ``like`` (a fresh tree of the same shapes), or None."""
    if not path.exists():
        return None
    with np.load(path) as data:
        leaves = [jnp.asarray(data[f"leaf{i:04d}"]) for i in range(len(jax.tree_util.tree_leaves(like)))]
        epoch = int(data["epoch"])
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(like), leaves), epoch


def pitfalls_schedule_jax(hp: dict, steps_per_epoch: int) -> Callable[[jax.Array], jax.Array]:
    """:func:`ubench.producers.schedules.pitfalls_schedule` as a traceable function of optax's step count."""
    epochs, lr = int(hp["epochs"]), float(hp["lr"])

    def schedule(count):
        t = count / steps_per_epoch
        u = t / max(epochs, 1)
        decay = lr * (1.0 - 0.99 * (u - 0.5) / 0.4)
        return jnp.where(u <= 0.5, lr, jnp.where(u < 0.9, decay, lr * 0.01))

    return schedule


def _optimizer(hp: dict, steps_per_epoch: int) -> optax.GradientTransformation:
    schedule = pitfalls_schedule_jax(hp, steps_per_epoch)
    return optax.chain(optax.add_decayed_weights(float(hp["weight_decay"])),
                       optax.sgd(schedule, momentum=float(hp["momentum"])))


@functools.lru_cache(maxsize=8)
def _compiled_step(hp_items: tuple, steps_per_epoch: int, mean: float, std: float):
    """The jit-compiled training step for one configuration, compiled once and shared by every member."""
    opt = _optimizer(dict(hp_items), steps_per_epoch)

    def loss_fn(p, xb, yb):
        return optax.softmax_cross_entropy_with_integer_labels(mlp_logits(p, xb, mean, std), yb).mean()

    @jax.jit
    def step(state, xb, yb):
        p, o = state
        loss, grads = jax.value_and_grad(loss_fn)(p, xb, yb)
        updates, o = opt.update(grads, o, p)
        return (optax.apply_updates(p, updates), o), loss

    return step


def train_run(
    hp: dict,
    *,
    x: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    mean: float,
    std: float,
    seed: int,
    batch_size: int,
    checkpoint: Path,
    on_epoch: Callable[[int, float], None] | None = None,
) -> tuple[Params, int, int]:
    """Train one MLP from the initialisation seeded by ``seed``; returns (params, epochs, steps)."""
    n = len(y)
    steps_per_epoch = math.ceil(n / batch_size)
    params = init_mlp(key_from_seed(derive_seed(seed, 0)), int(np.prod(x.shape[1:])), n_classes)
    opt = _optimizer(hp, steps_per_epoch)
    state = (params, opt.init(params))
    epoch = 0
    saved = load_checkpoint(checkpoint, state)
    if saved is not None:
        state, epoch = saved

    step = _compiled_step(tuple(sorted((k, float(v)) for k, v in hp.items())), steps_per_epoch, float(mean),
                          float(std))
    xs, ys = jnp.asarray(x), jnp.asarray(y)
    total = int(hp["epochs"])
    while epoch < total:
        order = np.random.default_rng(derive_seed(seed, epoch + 1)).permutation(n)
        losses = 0.0
        for b in range(steps_per_epoch):
            index = order[b * batch_size: (b + 1) * batch_size]
            state, loss = step(state, xs[index], ys[index])
            losses += float(loss) * len(index)
        epoch += 1
        if not math.isfinite(losses):
            raise FloatingPointError(f"training loss became {losses / n} in epoch {epoch}; lower the lr")
        save_checkpoint(checkpoint, state, epoch)
        if on_epoch is not None:
            on_epoch(epoch, losses / n)
    return state[0], epoch, epoch * steps_per_epoch
