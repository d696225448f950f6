# SPDX-License-Identifier: MIT
"""Hypothesis strategies shared by the tests.

Probabilities are the float64 softmax of bounded logits (|z| <= 30), then cast: never normalised raw floats.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

LOGIT_BOUND = 30.0


def softmax64(z: np.ndarray) -> np.ndarray:
    z = np.asarray(z, dtype=np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def _logits(shape):
    return hnp.arrays(
        np.float64, shape, elements=st.floats(-LOGIT_BOUND, LOGIT_BOUND, allow_nan=False, allow_infinity=False)
    )


@st.composite
def prob_matrices(draw, n=st.integers(1, 40), c=st.integers(2, 8), dtype=st.sampled_from([np.float32, np.float64])):
    """(N, C) probability rows; ``n``/``c`` may be ints or strategies."""
    n = draw(n) if isinstance(n, st.SearchStrategy) else n
    c = draw(c) if isinstance(c, st.SearchStrategy) else c
    dt = draw(dtype) if isinstance(dtype, st.SearchStrategy) else dtype
    return softmax64(draw(_logits((n, c)))).astype(dt)


@st.composite
def member_stacks(draw, m=st.integers(1, 5), n=st.integers(1, 30), c=st.integers(2, 6),
                  dtype=st.sampled_from([np.float32, np.float64])):
    """(M, N, C) stacks of probability rows."""
    m = draw(m) if isinstance(m, st.SearchStrategy) else m
    n = draw(n) if isinstance(n, st.SearchStrategy) else n
    c = draw(c) if isinstance(c, st.SearchStrategy) else c
    dt = draw(dtype) if isinstance(dtype, st.SearchStrategy) else dtype
    return softmax64(draw(_logits((m, n, c)))).astype(dt)


def labels_for(n: int, c: int):
    """(N,) int64 labels in [0, C)."""
    return hnp.arrays(np.int64, (n,), elements=st.integers(0, c - 1))


@st.composite
def probs_and_labels(draw, n=st.integers(1, 40), c=st.integers(2, 8), dtype=st.sampled_from([np.float32, np.float64])):
    p = draw(prob_matrices(n=n, c=c, dtype=dtype))
    y = draw(labels_for(p.shape[0], p.shape[1]))
    return p, y


def peaked_logits(seed: int, scale: float, peak: float, flip: float, n: int, c: int):
    """(z, y): Gaussian logits (std ``scale``) with ``peak`` added at the label, or, for a share ``flip`` of rows, at a
    random class: a temperature-fit problem whose optimum moves with scale, peak and flip."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    z = rng.normal(size=(n, c)) * scale
    shown = np.where(rng.random(n) < flip, rng.integers(0, c, n), y)
    z[np.arange(n), shown] += peak
    return z, y
