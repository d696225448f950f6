# SPDX-License-Identifier: MIT
"""Agreement and total variation with HMC (Izmailov et al. 2021) against hand computations and scipy."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.distance import cityblock

from ubench.metrics.agreement import predictive_agreement, total_variation


def _probs(rng, n, c):
    return rng.dirichlet(np.ones(c), size=n)


def test_hand_computed_example():
    p = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [0.3, 0.4, 0.3]])
    q = np.array([[0.5, 0.4, 0.1], [0.6, 0.3, 0.1], [0.2, 0.5, 0.3]])
    assert predictive_agreement(p, q) == pytest.approx(2 / 3)
    # TV per row: 0.2, 0.7, 0.1
    assert total_variation(p, q) == pytest.approx((0.2 + 0.7 + 0.1) / 3)


@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 50), c=st.integers(2, 8), seed=st.integers(0, 2**32 - 1))
def test_total_variation_is_half_the_l1_distance_and_a_metric(n, c, seed):
    rng = np.random.default_rng(seed)
    p, q, r = _probs(rng, n, c), _probs(rng, n, c), _probs(rng, n, c)
    expected = np.mean([0.5 * cityblock(a, b) for a, b in zip(p, q)])
    assert total_variation(p, q) == pytest.approx(expected, abs=1e-12)
    assert total_variation(p, q) == pytest.approx(total_variation(q, p), abs=1e-15)
    assert total_variation(p, p) == 0.0 and 0.0 <= total_variation(p, q) <= 1.0
    assert total_variation(p, r) <= total_variation(p, q) + total_variation(q, r) + 1e-12
    assert predictive_agreement(p, p) == 1.0


def test_disjoint_supports_give_total_variation_one_and_no_agreement():
    p = np.eye(4)
    q = np.roll(np.eye(4), 1, axis=1)
    assert total_variation(p, q) == 1.0 and predictive_agreement(p, q) == 0.0


def test_mismatched_inputs_are_refused():
    with pytest.raises(ValueError, match="classes"):
        total_variation(np.full((2, 3), 1 / 3), np.full((2, 4), 0.25))
    with pytest.raises(ValueError, match="samples"):
        predictive_agreement(np.full((2, 3), 1 / 3), np.full((3, 3), 1 / 3))


@pytest.mark.parametrize(("args", "message"), [
    ((0, 1), "probs must be finite; found nan at index (1, 0)"),
    ((1, 0), "reference_probs must be finite; found nan at index (1, 0)"),
    ((2, 3), "probs has 3 samples but reference_probs has 2"),
])
def test_agreement_errors_name_the_argument(args, message):
    p = np.array([[0.5, 0.5], [0.2, 0.8], [0.9, 0.1]])
    bad = p.copy()
    bad[1, 0] = np.nan
    arrays = [bad, p, p, p[:2]]
    for fn in (predictive_agreement, total_variation):
        with pytest.raises(ValueError) as ei:
            fn(arrays[args[0]], arrays[args[1]])
        assert str(ei.value) == message
