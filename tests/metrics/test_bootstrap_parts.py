# SPDX-License-Identifier: MIT
"""The bootstrap's building blocks (``metrics/bootstrap.py``) one by one, against loops written here: the
weighted-mean columns and their one-hot blocks, the per-cell partition, the replicate blocks, the count dtype,
percentile intervals of edge inputs."""

from __future__ import annotations

import numpy as np
import pytest

from ubench.metrics.bootstrap import (
    BLOCK_CELLS,
    LinearColumns,
    Partition,
    bootstrap_counts,
    count_blocks,
    count_dtype,
    percentile_interval,
    weighted_binned_error,
)


def _weights(rng, b, n):
    return rng.integers(0, 4, (b, n)).astype(np.float64) + 0.5


def test_linear_columns_apply_equals_weighted_sums_by_hand():
    """A mean column gives sum_i w_i x_i / sum_i w_i per replicate, a block and a one-hot block their raw
    weighted sums (per cell, per value: None = of the weights); columns added after an apply enter the next one;
    a column is read back as float64 and registering a name twice is refused."""
    rng = np.random.default_rng(0)
    n, n_cells = 9, 3
    x, y = rng.normal(size=n), rng.integers(0, 5, n)  # an integer column is stored as float64
    block = rng.normal(size=(n, 2))
    cells = rng.integers(0, n_cells, n).astype(np.int8)  # a narrow dtype: j * n_cells + cell must not wrap
    v = rng.normal(size=n)
    cols = LinearColumns(n)
    cols.add("x", x)
    cols.add("y", y)
    cols.add_block("block", block)
    cols.add_cells("cells", cells, 200, None, v)  # 200 cells per value: offsets up to 399 (> int8)
    assert "x" in cols and "y" in cols and "block" in cols and "z" not in cols
    assert cols.column("y").dtype == np.float64 and cols.column("y").tolist() == y.tolist()
    np.testing.assert_array_equal(cols.column("x"), x)
    w = _weights(rng, 4, n)
    out = cols.apply(w)
    assert set(out) == {"x", "y", "block", "cells"}
    np.testing.assert_allclose(out["x"], [(wb * x).sum() / wb.sum() for wb in w], rtol=1e-13)
    np.testing.assert_allclose(out["y"], [(wb * y).sum() / wb.sum() for wb in w], rtol=1e-13)
    np.testing.assert_allclose(out["block"], w @ block, rtol=1e-13)
    want = np.zeros((4, 400))
    for b in range(4):
        for i in range(n):
            want[b, int(cells[i])] += w[b, i]
            want[b, 200 + int(cells[i])] += w[b, i] * v[i]
    np.testing.assert_allclose(out["cells"], want, rtol=1e-13, atol=1e-15)
    z = rng.normal(size=n)
    cols.add("z", z)  # after an apply: the stacked matrix is rebuilt
    np.testing.assert_allclose(cols.apply(w)["z"], [(wb * z).sum() / wb.sum() for wb in w], rtol=1e-13)
    with pytest.raises(ValueError) as ei:
        cols.add_block("x", block)
    assert str(ei.value) == "column 'x' registered twice"
    assert LinearColumns(n).apply(w) == {}


def test_partition_sums_per_cell_with_and_without_values():
    """(B, n_cells) per-cell sums of w (values None) and of w * v, cells without samples 0; integer weights (the
    bootstrap's int16 counts) are summed in float64, so a cell's total past 2**15 does not wrap; no samples at
    all give zeros."""
    rng = np.random.default_rng(1)
    n, n_cells = 400, 5
    cell = rng.choice([0, 2, 4], n)
    counts = np.full((3, n), 300, dtype=np.int16)  # a cell holds ~133 samples: its sum ~40,000 > 2**15
    v = rng.normal(size=n)
    part = Partition.of(cell, n_cells)
    want_w = np.stack([[counts[b][cell == k].astype(np.float64).sum() for k in range(n_cells)] for b in range(3)])
    want_v = np.stack([[(counts[b][cell == k] * v[cell == k]).sum() for k in range(n_cells)] for b in range(3)])
    assert want_w.max() > 2**15
    np.testing.assert_array_equal(part.sums(counts), want_w)
    np.testing.assert_allclose(part.sums(counts, v), want_v, rtol=1e-12)
    np.testing.assert_allclose(part.sums(counts, v, gathered=counts[:, part.order]), want_v, rtol=1e-12)
    empty = Partition.of(np.zeros(0, dtype=np.intp), 3)
    np.testing.assert_array_equal(empty.sums(np.ones((2, 0))), np.zeros((2, 3)))


def test_weighted_binned_error_by_hand_with_counts_and_float32_gaps():
    """sum_k |sum_{i in k} w_i g_i| / sum_i w_i in float64, also for int16 counts and float32 gaps (whose
    products must not be rounded to float32)."""
    rng = np.random.default_rng(2)
    n, n_bins = 300, 7
    bins = rng.integers(0, n_bins, n)
    gaps = (rng.random(n) - 0.5).astype(np.float32) / 3
    w = rng.integers(0, 5, (4, n)).astype(np.int16)
    g64 = gaps.astype(np.float64)
    want = [sum(abs((w[b][bins == k] * g64[bins == k]).sum()) for k in range(n_bins)) / w[b].sum()
            for b in range(4)]
    np.testing.assert_allclose(weighted_binned_error(bins, gaps, n_bins, w), want, rtol=1e-13)


@pytest.mark.parametrize(("b", "n"), [(5, 1), (BLOCK_CELLS + 5, 1), (3, BLOCK_CELLS + 1), (1000, 10_000), (7, 0)])
def test_count_blocks_cover_the_replicates_with_as_many_rows_as_fit(b, n):
    """Consecutive (start, stop) blocks covering [0, B), each of max(1, BLOCK_CELLS // max(n, 1)) rows (the
    last one shorter): at least one replicate even when one replicate exceeds the budget."""
    blocks = list(count_blocks(b, n))
    rows = max(1, BLOCK_CELLS // max(n, 1))
    assert blocks[0][0] == 0 and blocks[-1][1] == b
    assert all(s1 == e0 for (_, e0), (s1, _) in zip(blocks, blocks[1:], strict=False))
    assert [e - s for s, e in blocks[:-1]] == [rows] * (len(blocks) - 1) and 0 < blocks[-1][1] - blocks[-1][0] <= rows


def test_count_dtype_is_the_smallest_that_holds_n():
    """A replicate's count of one sample is at most n: int16 while n fits it (n < 2**15), int32 from 2**15 on."""
    assert [count_dtype(n) for n in (1, 2**15 - 1, 2**15, 2**16, 2**20)] == [np.int16] * 2 + [np.int32] * 3
    assert np.iinfo(count_dtype(2**15 - 1)).max >= 2**15 - 1 and np.iinfo(np.int16).max < 2**15
    for n in (10, 5000):  # both counting paths return that dtype, each replicate's counts summing to n
        counts = bootstrap_counts(n, 3, np.random.default_rng(n))
        assert counts.dtype == count_dtype(n) and counts.sum(axis=1).tolist() == [n] * 3


def test_percentile_interval_of_edge_inputs():
    """One replicate: [v, v]; none or a NaN: None; 0/1 (bool) or integer replicates: the quantiles of their
    float64 values (numpy's linear rule)."""
    assert percentile_interval(np.array([0.3]), 0.95) == [0.3, 0.3]
    assert percentile_interval(np.array([]), 0.95) is None
    assert percentile_interval(np.array([0.1, np.nan]), 0.95) is None
    hits = np.arange(40) % 4 == 0
    assert percentile_interval(hits, 0.9) == pytest.approx(list(np.quantile(hits.astype(float), [0.05, 0.95])))
    assert percentile_interval(np.arange(11, dtype=np.int8), 0.8) == pytest.approx([1.0, 9.0])
