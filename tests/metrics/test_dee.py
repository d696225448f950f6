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
    assert s.lower_beyond is False and s.lower == pytest.approx(4.6)
    assert s.to_dict()["beyond_reference"] is True
    s = dee_score(-0.1, _MEAN, _STD)  # above mean(5) + std = -0.15 too: every bound beyond
    assert (s.beyond_reference, s.lower_beyond, s.upper_beyond) == (True, True, True)
    assert all(type(v) is bool for k, v in s.to_dict().items() if k.endswith(("beyond", "below", "reference")))


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
    # every field, with each flag set somewhere: -1.1 is below all three curves, -0.97 below mean + std only,
    # -0.1 beyond all three, -0.17 beyond mean and mean - std
    flagged = np.array([-1.1, -0.97, -0.75, -0.17, -0.1])
    fc = dee_curve(flagged, _MEAN, _STD)
    fields = [f for f in fc.to_dict() if f != "n_members"]
    for f in fields:
        got = getattr(fc, f)
        assert got.shape == flagged.shape, f
        assert got.tolist() == [getattr(dee_score(v, _MEAN, _STD), f) for v in flagged], f
    assert all(getattr(fc, f).any() for f in fields if f.endswith(("beyond", "below", "reference")))
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


def test_one_point_curve_and_float32_references():
    """A one-point method curve is a curve; float32 reference curves are read as float64 (a float32 interpolation
    would be off by ~1e-7): the crossing equals the hand interpolation on the float64 values of the float32
    inputs."""
    c = dee_curve([-0.75], _MEAN, _STD)
    assert c.dee.tolist() == [1.5] and c.n_members.tolist() == [1]
    mean32, std32 = _MEAN.astype(np.float32), _STD.astype(np.float32)
    lo, hi = float(mean32[2]), float(mean32[3])
    s = dee_score(-0.32, mean32, std32)
    assert s.dee == pytest.approx(3 + (-0.32 - lo) / (hi - lo), rel=1e-15)
    lo, hi = float(mean32[1]) + float(std32[1]), float(mean32[2]) + float(std32[2])
    assert s.lower == pytest.approx(2 + (-0.32 - lo) / (hi - lo), rel=1e-15)
    lo, hi = float(mean32[2]) - float(std32[2]), float(mean32[3]) - float(std32[3])
    assert s.upper == pytest.approx(3 + (-0.32 - lo) / (hi - lo), rel=1e-15)


def test_dee_reference_is_member_curves_after_calibration():
    """dee_reference is member_curves with placement "post", every option passed through and its defaults
    (5 orders, seed 0, 5 halvings) the same; each option given here changes the curve (checked)."""
    rng = np.random.default_rng(1)
    n, c, k = 60, 3, 3
    y = rng.integers(0, c, n)
    mp = softmax64(2.0 * (rng.normal(size=(k, n, c)) + 2.0 * np.eye(c)[y]))
    mp[:, :5] = np.eye(c)[(y[:5] + 1) % c]  # confidently wrong rows: eps decides their log-likelihood
    opts = dict(n_orders=2, seed=3, n_repeats=2, eps=1e-3, bounds=(0.9, 1.1))
    ref = dee_reference(mp, y, **opts)
    np.testing.assert_array_equal(ref.cll_mean, member_curves(mp, y, placement="post", **opts).cll_mean)
    for key, default in (("n_orders", 5), ("seed", 0), ("n_repeats", 5), ("eps", 1e-12), ("bounds", (1e-2, 1e2))):
        other = member_curves(mp, y, placement="post", **{**opts, key: default})
        assert not np.array_equal(other.cll_mean, ref.cll_mean) or not np.array_equal(other.cll_std, ref.cll_std), key
    np.testing.assert_array_equal(dee_reference(mp, y).cll_std,
                                  member_curves(mp, y, n_orders=5, seed=0, placement="post", n_repeats=5).cll_std)


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


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: dee_score(-1.0, [-1.0, -0.5, np.inf], _STD[:3]),
         "reference_cll_mean must be finite; found inf at index 2"),
        (lambda: dee_score(-1.0, _MEAN[:3], [0.1, np.nan, 0.1]),
         "reference_cll_std must be finite; found nan at index 1"),
        (lambda: dee_score(-1.0, _MEAN, [0.0, 0.1, 0.0, -0.2, 0.1]),
         "reference_cll_std must be >= 0; found -0.2 at index 3"),
        (lambda: dee_curve([-0.5, -0.4, np.nan], _MEAN, _STD), "method_cll must be finite; found nan at index 2"),
    ],
)
def test_errors_say_what_and_where(call, message):
    """The whole message: which argument, the bad value and the first bad index (not the first good one)."""
    with pytest.raises(ValueError) as ei:
        call()
    assert str(ei.value) == message
