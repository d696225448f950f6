# SPDX-License-Identifier: MIT
"""SGD point estimate: one network trained with SGD and momentum, one member (URSABench's SGD baseline)."""

from __future__ import annotations

from .torch_trainer import BASE_DEFAULTS, Method

__all__ = ["SGDPointEstimate"]


class SGDPointEstimate(Method):
    """A single network (M = 1) trained with the Pitfalls appendix B schedule."""

    name = "sgd"
    member_kind = "point"
    shape = "independent"
    defaults = dict(BASE_DEFAULTS)
    default_members = 1
    max_members = 1
    summary = "SGD point estimate (M = 1)"
