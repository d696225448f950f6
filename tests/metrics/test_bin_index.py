# SPDX-License-Identifier: MIT
"""The arithmetic equal-width bin index equals a search against the linspace edges, on and around every edge."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ubench.metrics.calibration import _bin_edges, _equal_width_bin_index


def _by_search(values, n_bins):
    return np.clip(np.searchsorted(_bin_edges(n_bins), values, side="left") - 1, 0, n_bins - 1)


@pytest.mark.parametrize("n_bins", [1, 2, 3, 7, 10, 15, 20, 100, 1000])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_edges_and_their_neighbours(n_bins, dtype):
    """Every edge, the next float above and below it, 0 and 1: bins are (lo, hi], 0 in the first, 1 in the last."""
    e = _bin_edges(n_bins)
    v = np.concatenate([e, np.nextafter(e, 2.0), np.clip(np.nextafter(e, -1.0), 0.0, None)]).astype(dtype)
    assert np.array_equal(_equal_width_bin_index(v, n_bins), _by_search(v, n_bins))


@given(st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=1, max_size=200), st.integers(1, 50),
       st.sampled_from([np.float32, np.float64]))
def test_any_confidences(values, n_bins, dtype):
    """For any values in [0, 1] and any bin count, the index equals searchsorted's."""
    v = np.asarray(values, dtype=dtype)
    assert np.array_equal(_equal_width_bin_index(v, n_bins), _by_search(v, n_bins))
