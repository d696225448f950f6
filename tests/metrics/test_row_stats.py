# SPDX-License-Identifier: MIT
"""scaled_top1_entropy against the whole-matrix computation it stands for: the ``post`` temperature-scaled
prediction of ``apply_ensemble_temperature`` (public, computed whole here), its top-1 confidence and class, and
its normalized entropy."""

from __future__ import annotations

import numpy as np

from ubench import metrics as M
from ubench.metrics.row_stats import scaled_top1_entropy


def test_scaled_top1_entropy_equals_the_whole_matrix_computation():
    """Several row blocks (N x C > 2**18 entries) and more rows than classes, at a temperature that changes the
    answer (T = 2.5 flattens q: the confidences drop)."""
    rng = np.random.default_rng(0)
    z = rng.normal(scale=3.0, size=(3000, 100))
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    conf, pred, u = scaled_top1_entropy(p, 2.5, eps=1e-12)
    q = M.apply_ensemble_temperature(p[None], 2.5, placement="post", eps=1e-12)
    np.testing.assert_array_equal(pred, q.argmax(axis=1))
    np.testing.assert_allclose(conf, q.max(axis=1), rtol=1e-13)
    np.testing.assert_allclose(u, M.normalized_entropy(q), rtol=1e-12, atol=1e-15)
    assert (conf < p.max(axis=1)).mean() > 0.9
