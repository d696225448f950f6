# SPDX-License-Identifier: MIT
"""JAX producers (the ``jax`` extra): the MLP in plain ``jax.numpy``, trained with optax, sampled with BlackJAX, and
written through the same :class:`~ubench.archive_schema.ArchiveWriter` as the torch producers (``framework = "jax"``).

Nothing outside this package imports it. The MLP is plain ``jax.numpy`` rather than Flax: a list of ``(W, b)``
arrays is the whole model, it flattens with ``jax.flatten_util.ravel_pytree`` for HMC without a module system in
between, and it adds no dependency beyond JAX, optax and BlackJAX.
"""

from .run import JAX_METHODS, produce_archive_jax

__all__ = ["JAX_METHODS", "produce_archive_jax"]
