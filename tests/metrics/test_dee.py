# SPDX-License-Identifier: MIT
"""Deep Ensemble Equivalent on hand-built reference curves, properties and a real reference sweep."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import softmax64

from ubench.metrics.dee import dee_curve, dee_reference, dee_score
from ubench.metrics.protocol import member_curves

# A reference whose CLL_mean(k) is known exactly: -1/k, std 0.05 everywhere.
_K = np.arange(1, 6)
_MEAN = -1.0 / _K
_STD = np.full(5, 0.05)


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        (-1.2, 1.0),  # below CLL(1): 1, flagged below_reference (reads "< 1")
        (-1.0, 1.0),
        (-0.75, 1.5),  # halfway between -1 (k=1) and -0.5 (k=2)
        (-0.5, 2.0),
        (-0.3, 3 + (-0.3 + 1 / 3) / (-0.25 + 1 / 3)),
        (-0.2, 5.0),
    ],
)
def test_dee_by_hand(level, expected):
    s = dee_score(level, _MEAN, _STD)
    assert s.dee == pytest.approx(expected, rel=1e-12)
    assert not s.beyond_reference
    assert s.below_reference == (level < -1.0)


def test_below_one_member_is_flagged_for_the_value_and_each_bound():
    """A CLL under the reference's first point is worse than one member: flagged, with each bound flagged against
    its own curve (mean + std for the lower bound, mean - std for the upper); at CLL(1) exactly it is 1, unflagged
    (issue #28 item 5: it was reported as 1 with bounds [1, 1], 'as good as one member')."""
    s = dee_score(-1.02, _MEAN, _STD)  # below mean(1) = -1 and mean(1) + std = -0.95, above mean(1) - std = -1.05
    assert (s.below_reference, s.lower_below, s.upper_below) == (True, True, False)
    assert s.upper == pytest.approx(1 + (-1.02 + 1.05) / 0.5)
    s = dee_score(-1.1, _MEAN, _STD)
    assert (s.below_reference, s.lower_below, s.upper_below) == (True, True, True)
    s = dee_score(-0.97, _MEAN, _STD)
    assert (s.below_reference, s.lower_below, s.upper_below) == (False, True, False)
    assert not dee_score(-1.0, _MEAN, _STD).below_reference
    assert dee_curve([-1.1, -1.0, -0.5], _MEAN, _STD).below_reference.tolist() == [True, False, False]


def test_bounds_by_hand():
    """Lower bound from mean + std, upper from mean - std (Eq. 5), each interpolated."""
    s = dee_score(-0.75, _MEAN, _STD)
    # mean + std: -0.95, -0.45 -> crossing at 1 + (-0.75 + 0.95) / 0.5 = 1.4
    assert s.lower == pytest.approx(1.4)
    # mean - std: -1.05, -0.55 -> 1 + (-0.75 + 1.05) / 0.5 = 1.6
    assert s.upper == pytest.approx(1.6)


def test_beyond_reference_is_flagged_not_silently_capped():
    """A value above every reference point reads K with a flag; the optimistic bound may still cross."""
    s = dee_score(-0.17, _MEAN, _STD)
    assert s.beyond_reference and s.dee == 5.0
    assert s.upper_beyond and s.upper == 5.0
    assert not s.lower_beyond and s.lower == pytest.approx(4.6)
    assert s.to_dict()["beyond_reference"] is True


def test_non_monotone_reference_takes_the_first_crossing():
    """min k: the first size whose (interpolated) CLL reaches the level, even if a later one dips."""
    s = dee_score(-0.5, [-1.0, -0.4, -0.6, -0.3], [0.0] * 4)
    assert s.dee == pytest.approx(1 + 0.5 / 0.6)


def test_curve_points_are_searched_independently():
    """Each point of dee_curve equals dee_score of that value alone, whatever the order of the points."""
    values = np.array([-0.3, -1.1, -0.75, -0.1, -0.5])
    c = dee_curve(values, _MEAN, _STD)
    for i, v in enumerate(values):
        s = dee_score(v, _MEAN, _STD)
        assert (c.dee[i], c.lower[i], c.upper[i], c.beyond_reference[i]) == (s.dee, s.lower, s.upper,
                                                                             s.beyond_reference)
    rev = dee_curve(values[::-1], _MEAN, _STD)
    np.testing.assert_array_equal(rev.dee[::-1], c.dee)
    assert c.n_members.tolist() == [1, 2, 3, 4, 5]
    assert c.to_dict()["beyond_reference"] == [False, False, False, True, False]


@given(
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=8),
    st.floats(-3.0, 0.5),
    st.floats(0.0, 0.3),
)
def test_dee_properties(steps, level, spread):
    """For a non-decreasing reference: 1 <= lower <= dee <= upper <= K, DEE monotone in the level,
    and the reference's own points map back to their sizes."""
    mean = -2.0 + np.cumsum(steps)
    std = np.full(mean.size, spread)
    s = dee_score(level, mean, std)
    assert 1.0 <= s.lower <= s.dee + 1e-12 <= s.upper + 2e-12 <= mean.size + 2e-12
    assert (s.below_reference, s.lower_below, s.upper_below) == (level < mean[0], level < mean[0] + spread,
                                                                 level < mean[0] - spread)
    assert dee_score(level + 0.1, mean, std).dee >= s.dee
    for k in range(mean.size):
        if k == 0 or mean[k] > mean[k - 1]:
            assert dee_score(mean[k], mean, std).dee == pytest.approx(min(k + 1, _first_k(mean, mean[k])))


def _first_k(mean, level):
    return int(np.argmax(mean >= level)) + 1


def test_reference_sweep_on_a_real_ensemble():
    """A reference from independently perturbed members: more members give higher CLL; one member is DEE 1."""
    rng = np.random.default_rng(0)
    n, c, k = 300, 5, 6
    y = rng.integers(0, c, n)
    base = rng.normal(size=(n, c))
    base[np.arange(n), y] += 1.0
    mp = softmax64(2.0 * (base[None] + 1.2 * rng.normal(size=(k, n, c))))
    ref = dee_reference(mp, y, n_orders=3, n_repeats=2)
    assert ref.cll_mean[-1] > ref.cll_mean[0]
    assert ref.cll_std[-1] > 0  # every order holds all members, but draws its own halvings (the Pitfalls tries)
    single = member_curves(mp[:1], y, n_orders=1, n_repeats=2).cll_mean[0]
    assert dee_score(min(single, ref.cll_mean[0]), ref.cll_mean, ref.cll_std).dee == 1.0
    curve = dee_curve(ref.cll_mean, ref.cll_mean, ref.cll_std)
    assert curve.dee[0] == 1.0 and curve.dee[-1] <= k and not curve.beyond_reference.any()


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: dee_score(np.nan, _MEAN, _STD), "cll"),
        (lambda: dee_score(-1.0, _MEAN, _STD[:3]), "reference_cll_std"),
        (lambda: dee_score(-1.0, _MEAN[None], _STD), "reference_cll_mean"),
        (lambda: dee_score(-1.0, [], []), "reference_cll_mean"),
        (lambda: dee_score(-1.0, _MEAN, -_STD), "reference_cll_std"),
        (lambda: dee_score(-1.0, [np.inf] * 5, _STD), "reference_cll_mean"),
        (lambda: dee_curve([[-1.0]], _MEAN, _STD), "method_cll"),
        (lambda: dee_curve([np.nan], _MEAN, _STD), "method_cll"),
    ],
)
def test_errors_name_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()
