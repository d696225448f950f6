# SPDX-License-Identifier: MIT
"""Deep ensembles (Lakshminarayanan et al. 2017): M networks from independent initialisations and data orders.

As in Pitfalls (appendix B), members are trained with plain SGD on the usual loss, without adversarial training.
"""

from __future__ import annotations

from .torch_trainer import BASE_DEFAULTS, Method

__all__ = ["DeepEnsemble"]


class DeepEnsemble(Method):
    """Each member is a full training run seeded ``(seed, member)``."""

    name = "deep_ensemble"
    member_kind = "independent"
    shape = "independent"
    defaults = dict(BASE_DEFAULTS)
    default_members = 5
    summary = "deep ensemble of M independently initialised networks"
