# SPDX-License-Identifier: MIT
"""URSABench's MLP D-200-200-C in ``jax.numpy``, initialised like ``torch.nn.Linear`` (weights and biases uniform
in :math:`\\pm 1/\\sqrt{\\text{fan\\_in}}`), normalising its input with the training set's mean and std like the
torch model, so the two frameworks train the same network from the same distribution of starting points."""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["init_mlp", "mlp_logits", "n_parameters"]

Params = list[tuple[jax.Array, jax.Array]]


def init_mlp(key: jax.Array, n_inputs: int, n_classes: int, hidden: tuple[int, ...] = (200, 200)) -> Params:
    """Parameters ``[(W, b), ...]`` with ``W`` of shape (fan_in, fan_out)."""
    sizes = (n_inputs, *hidden, n_classes)
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        key, kw, kb = jax.random.split(key, 3)
        bound = 1.0 / jnp.sqrt(fan_in)
        params.append((jax.random.uniform(kw, (fan_in, fan_out), minval=-bound, maxval=bound),
                       jax.random.uniform(kb, (fan_out,), minval=-bound, maxval=bound)))
    return params


def mlp_logits(params: Params, x: jax.Array, mean: float, std: float) -> jax.Array:
    """Logits of images ``x`` (n, channels, height, width) in [0, 1]."""
    h = ((x - mean) / std).reshape(x.shape[0], -1)
    for w, b in params[:-1]:
        h = jax.nn.relu(h @ w + b)
    w, b = params[-1]
    return h @ w + b


def n_parameters(params: Params) -> int:
    return int(sum(w.size + b.size for w, b in params))
