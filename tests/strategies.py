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


def bin_edges(n_bins: int) -> np.ndarray:
    """The equal-width edges every binned metric of ubench states: ``np.linspace(0, 1, n_bins + 1)``."""
    return np.linspace(0.0, 1.0, n_bins + 1)


def edge_values(n_bins: int, extra=()) -> np.ndarray:
    """Every equal-width edge, the float64 neighbours either side of it, and ``extra`` (a threshold) with its
    neighbours: the values a bin convention (``(lo, hi]`` against ``[lo, hi)``, ``>`` against ``>=``) decides."""
    core = np.concatenate([bin_edges(n_bins), np.asarray(extra, dtype=np.float64)])
    return _with_neighbours(core)


def _with_neighbours(core) -> np.ndarray:
    core = np.asarray(core, dtype=np.float64)
    v = np.concatenate([core, np.nextafter(core, -np.inf), np.nextafter(core, np.inf)])
    return np.unique(v[(v >= 0.0) & (v <= 1.0)])


@st.composite
def edge_rows(draw, pool: np.ndarray, c: int):
    """One probability row of ``c`` entries drawn from ``pool`` and 0, classes shuffled. Half the rows are pairs
    ``(v, 1 - v)`` and zeros (so the top-1 confidence sits on, or a float beside, an edge: ``1 - k/M`` is an edge
    too), the others ``c - 1`` pool values or zeros and the remainder ``1 - sum``."""
    if draw(st.booleans()):
        v = float(pool[draw(st.integers(0, pool.size - 1))])
        row = [v, 1.0 - v] + [0.0] * (c - 2)
    else:
        row = []
        left = 1.0
        for _ in range(c - 1):
            fits = pool[pool <= left]
            v = float(fits[draw(st.integers(0, fits.size - 1))]) if fits.size and draw(st.integers(0, 3)) else 0.0
            row.append(v)
            left -= v
        row.append(max(left, 0.0))
    order = draw(st.permutations(range(c)))
    return np.asarray(row, dtype=np.float64)[list(order)]


@st.composite
def edge_probs_and_labels(draw, n_bins: int, n=st.integers(1, 40), c=st.integers(2, 6),
                          dtype=st.sampled_from([np.float32, np.float64]), extra=()):
    """(probs, labels) whose entries hit the equal-width edges of ``n_bins`` bins: each example picks one to three
    inner edges (or ``extra`` values, e.g. a threshold; now and then 0 and 1 too) and draws entries from them, the float64 neighbours either side
    and 0 (:func:`edge_rows`), so an edge value and its neighbours share classes and bins. Rows repeat a few
    templates (ties that straddle equal-count cuts, right and wrong labels mixed). float32 rows are the float32
    roundings of the same values (which land either side of the float64 edges)."""
    n = draw(n) if isinstance(n, st.SearchStrategy) else n
    c = draw(c) if isinstance(c, st.SearchStrategy) else c
    dt = draw(dtype) if isinstance(dtype, st.SearchStrategy) else dtype
    inner = bin_edges(n_bins)[1:-1].tolist() + [float(x) for x in extra]
    focus = draw(st.lists(st.sampled_from(inner or [0.5]), min_size=1, max_size=3))
    focus += [0.0, 1.0] if draw(st.integers(0, 3)) == 0 else []  # the outer edges now and then
    pool = _with_neighbours(focus + [1.0 - f for f in focus])  # 1 - f: a pair's other entry, on its own grid
    templates = draw(st.lists(edge_rows(pool, c), min_size=2, max_size=6))
    pick = np.arange(n) % len(templates) if draw(st.booleans()) else draw(
        hnp.arrays(np.int64, (n,), elements=st.integers(0, len(templates) - 1)))
    p = np.stack(templates)[pick].astype(dt)
    return p, draw(labels_for(n, c))
