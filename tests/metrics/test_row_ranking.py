# SPDX-License-Identifier: MIT
"""The partial-ranking kernels of ``metrics/row_ranking.py`` against a full stable sort of every row (the oracle),
and their row blocks by hand."""

from __future__ import annotations

import numpy as np
import pytest

from ubench.metrics.row_ranking import _GROUP_LIMITS, ranked_prefix, row_blocks


@pytest.mark.parametrize(("n_rows", "n_cols", "entries", "want"), [
    (10, 1, 4, [(0, 4), (4, 8), (8, 10)]),          # one column: `entries` rows per block, not entries / 2
    (3, 5, 4, [(0, 1), (1, 2), (2, 3)]),            # wider than a block: one row each, never two
    (7, 2, 6, [(0, 3), (3, 6), (6, 7)]),
    (0, 3, 8, []),
    (5, 0, 4, [(0, 4), (4, 5)]),                    # no columns counts as one
])
def test_row_blocks_by_hand(n_rows, n_cols, entries, want):
    """Blocks of ``max(1, entries // max(1, n_cols))`` consecutive rows covering every row once."""
    assert list(row_blocks(n_rows, n_cols, entries)) == want


def _keep_top(p, counts):
    """The mask of each row's first counts[i] entries of its stable descending ranking (closed upwards)."""
    order = np.argsort(-p, axis=1, kind="stable")
    keep = np.zeros(p.shape, dtype=bool)
    for i, k in enumerate(counts):
        keep[i, order[i, :k]] = True
    return keep


@pytest.mark.parametrize("c", [4, 7, 16, 600])
def test_ranked_prefix_equals_the_full_sort(c):
    """Every row with kept entries lands in exactly one group, the group of its prefix length (limits 4, 16, 64,
    128, 256, 512, then C); its values are the first counts[i] entries of the full descending sort, its padding
    is 0 and its running sums repeat the last sum there; rows that keep nothing (here the last ones, so that the
    counts' length comes from minlength) are in no group but are counted, 0."""
    rng = np.random.default_rng(c)
    k = 40
    p = rng.dirichlet(np.ones(c), size=k)
    p[1] = np.round(p[1], 1)  # ties
    counts = rng.integers(1, c + 1, size=k)
    counts[:6] = np.minimum([1, 4, 5, 16, 17, c], c)  # on and around the group limits
    counts[-3:] = 0
    groups, got_counts = ranked_prefix(p, _keep_top(p, counts))
    np.testing.assert_array_equal(got_counts, counts)
    assert got_counts.shape == (k,)
    limits = [lim for lim in _GROUP_LIMITS if lim < c] + [c]
    seen = []
    full = -np.sort(-p, axis=1)
    for g in groups:
        assert g.values.shape == g.cum.shape == (g.rows.size, int(g.counts.max()))
        lo = max([0] + [lim for lim in limits if lim < g.counts.max()])
        hi = min(lim for lim in limits if lim >= g.counts.max())
        assert np.all((g.counts > lo) & (g.counts <= hi)), (lo, hi, g.counts)
        for j, (row, n) in enumerate(zip(g.rows, g.counts)):
            seen.append(int(row))
            assert n == counts[row]
            np.testing.assert_array_equal(g.values[j, :n], full[row, :n])
            assert np.all(g.values[j, n:] == 0.0)
            np.testing.assert_array_equal(g.cum[j, :n], np.cumsum(full[row, :n]))
            assert np.all(g.cum[j, n:] == g.cum[j, n - 1])
        np.testing.assert_array_equal(g.valid, np.arange(g.values.shape[1])[None, :] < g.counts[:, None])
    assert sorted(seen) == sorted(np.flatnonzero(counts).tolist())
