# SPDX-License-Identifier: MIT
"""Per-sample statistics of a transformed prediction, computed block by block so that the transformed (N, C)
matrix is never held whole (issue #29: a split's mean is the only (N, C) array a report keeps).

Each function reads ``probs[a:b]`` row blocks only and returns (N,) vectors whose every entry equals what the
whole-matrix computation gives for that row, bit for bit (the transforms are row-local).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from .row_ranking import row_blocks
from .temperature_solver import _prep_probs, _softmax_scaled
from .uncertainty import _normalized_entropy

__all__ = ["scaled_top1_entropy"]


def scaled_top1_entropy(probs, temperature: float, *, eps: float
                        ) -> tuple[NDArray[np.float64], NDArray[np.intp], NDArray[np.float64]]:
    r"""(top-1 confidence, top-1 class, normalized entropy) of every row of
    :math:`q = \operatorname{softmax}(\log(p + \varepsilon) / T)`, the ``post`` temperature-scaled prediction of
    ``apply_ensemble_temperature(probs[None], temperature, placement="post", eps=eps)``, without holding q."""
    n, c = probs.shape
    conf, pred, u = np.empty(n), np.empty(n, dtype=np.intp), np.empty(n)
    for a, b in row_blocks(n, c, 1 << 18):
        q = _softmax_scaled(_prep_probs(probs[a:b], eps, with_lse=False)[0], 1.0 / temperature)
        pred[a:b] = np.argmax(q, axis=1)
        conf[a:b] = q[np.arange(b - a), pred[a:b]]
        u[a:b] = _normalized_entropy(q)
    return conf, pred, u
