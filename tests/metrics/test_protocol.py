# SPDX-License-Identifier: MIT
"""Test-time cross-validated temperature scaling, CLL and member curves."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize, special
from strategies import labels_for, member_stacks, softmax64

from ubench.metrics.calibration import expected_calibration_error
from ubench.metrics.classification import accuracy_score, brier_loss
from ubench.metrics.protocol import CalibratedCV, cross_validated_calibration, cv_splits, member_curves
from ubench.metrics.temperature import DEFAULT_EPS, apply_ensemble_temperature, fit_ensemble_temperature


def _ensemble(seed, m=3, n=200, c=4, noise=0.8, sharp=2.0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    base = rng.normal(size=(n, c))
    base[np.arange(n), y] += 1.2
    mp = softmax64(sharp * (base[None] + noise * rng.normal(size=(m, n, c))))
    return mp, y


def _reference_cv(mp, y, placement, n_repeats, seed, n_bins=15):
    """Brute-force protocol with the public functions: fit on one half, score the other, average."""
    mean = mp.mean(axis=0)
    out = []
    for a, b in cv_splits(len(y), n_repeats=n_repeats, seed=seed):
        fit = fit_ensemble_temperature(mp[:, a], y[a], placement=placement)
        q = apply_ensemble_temperature(mp[:, b], fit.temperature, placement=placement)
        out.append([
            float(np.mean(np.log(q[np.arange(len(b)), y[b]]))), fit.temperature,
            float(-np.mean(np.log(DEFAULT_EPS + mean[b, y[b]]))),
            accuracy_score(mean[b], y[b]), brier_loss(mean[b], y[b]), brier_loss(q, y[b]),
            expected_calibration_error(mean[b], y[b], n_bins=n_bins), expected_calibration_error(q, y[b], n_bins=n_bins),
        ])
    return np.array(out)


def test_cv_splits_are_seeded_disjoint_halves():
    splits = cv_splits(11, n_repeats=5, seed=3)
    assert len(splits) == 10
    for (a, b), (b2, a2) in zip(splits[::2], splits[1::2]):
        assert np.array_equal(a, a2) and np.array_equal(b, b2)
        assert len(a) == 5 and len(b) == 6
        assert sorted(np.concatenate([a, b]).tolist()) == list(range(11))
    again = cv_splits(11, n_repeats=5, seed=3)
    assert all(np.array_equal(x[0], y[0]) for x, y in zip(splits, again))
    other = cv_splits(11, n_repeats=5, seed=4)
    assert not all(np.array_equal(x[0], y[0]) for x, y in zip(splits, other))


@pytest.mark.parametrize("placement", ["post", "per_member"])
def test_matches_brute_force_protocol(placement):
    """Every reported number equals the fold-by-fold protocol run through the public functions."""
    mp, y = _ensemble(0)
    res = cross_validated_calibration(mp, y, placement=placement, n_repeats=3, seed=7)
    ref = _reference_cv(mp, y, placement, 3, 7)
    assert res.cll == pytest.approx(ref[:, 0].mean(), abs=1e-9)
    assert res.nll_after == pytest.approx(-ref[:, 0].mean(), abs=1e-9)
    np.testing.assert_allclose(res.temperatures, ref[:, 1], rtol=1e-6)
    assert res.temperature_mean == pytest.approx(ref[:, 1].mean(), rel=1e-6)
    assert res.temperature_std == pytest.approx(ref[:, 1].std(), rel=1e-4, abs=1e-9)
    assert res.nll_before == pytest.approx(ref[:, 2].mean(), abs=1e-12)
    assert res.accuracy == pytest.approx(ref[:, 3].mean(), abs=1e-12)
    assert res.brier_before == pytest.approx(ref[:, 4].mean(), abs=1e-12)
    assert res.brier_after == pytest.approx(ref[:, 5].mean(), abs=1e-8)
    assert res.ece_before == pytest.approx(ref[:, 6].mean(), abs=1e-12)
    assert res.ece_after == pytest.approx(ref[:, 7].mean(), abs=1e-8)
    if placement == "post":
        assert res.accuracy_after == res.accuracy


def test_hand_built_cll():
    """Identical rows [0.9, 0.1] with labels 0,0,0,1 on every half: T* from the fit half, CLL by hand."""
    p = np.tile([0.9, 0.1], (8, 1))[None]
    y = np.array([0, 0, 0, 1] * 2)
    res = cross_validated_calibration(p, y, n_repeats=2, seed=0)
    expected = []
    for a, b in cv_splits(8, n_repeats=2, seed=0):
        f = np.mean(y[a] == 0)
        if 0 < f < 1 and f != 0.5:
            t = np.log(9.0) / np.log(f / (1 - f)) if f > 0.5 else 100.0
        else:
            t = 100.0 if f == 0.5 else 0.01
        q0 = 9.0 ** (1 / t) / (9.0 ** (1 / t) + 1)
        fb = np.mean(y[b] == 0)
        expected.append(fb * np.log(q0) + (1 - fb) * np.log(1 - q0))
    assert res.cll == pytest.approx(np.mean(expected), abs=1e-9)


def test_settings_and_dict_keys():
    mp, y = _ensemble(1, m=2, n=60)
    res = cross_validated_calibration(mp, y, seed=5)
    d = res.to_dict()
    for key in ("cll", "temperature_mean", "temperature_std", "nll_before", "nll_after", "accuracy", "brier_before",
                "brier_after", "ece_before", "ece_after", "n_folds", "n_repeats", "seed", "placement", "eps"):
        assert key in d
    assert (d["n_folds"], d["n_repeats"], d["seed"], d["placement"], d["eps"]) == (2, 5, 5, "post", 1e-12)
    assert len(d["temperatures"]) == 10
    assert isinstance(res, CalibratedCV)
    assert cross_validated_calibration(mp, y, seed=5) == res  # deterministic


def test_separable_folds_report_bounds_never_nan():
    """Every label is the argmax: every fold's T hits the lower bound; nothing is NaN."""
    p = softmax64(np.array([[2.0, 0.0, 0.0], [0.0, 3.0, 0.0], [0.0, 0.0, 1.0]] * 4))[None]
    res = cross_validated_calibration(p, np.array([0, 1, 2] * 4))
    assert res.n_hit_bound == 10
    assert all(t == 0.01 for t in res.temperatures)
    assert np.isfinite(list(v for v in res.to_dict().values() if isinstance(v, float))).all()


@settings(max_examples=15)
@given(member_stacks(m=st.integers(1, 3), n=st.integers(2, 24), c=st.integers(2, 4)), st.data())
def test_cv_properties(mp, data):
    """For any ensemble, CLL <= 0, metrics lie in range, and post equals per_member for one member."""
    y = data.draw(labels_for(mp.shape[1], mp.shape[2]))
    res = cross_validated_calibration(mp, y, n_repeats=2)
    assert res.cll <= 0 and res.nll_before >= 0
    assert 0 <= res.accuracy <= 1 and 0 <= res.ece_after <= 1 and 0 <= res.brier_after <= 2
    assert all(0.01 <= t <= 100 for t in res.temperatures)
    if mp.shape[0] == 1:
        other = cross_validated_calibration(mp, y, n_repeats=2, placement="per_member")
        assert other.cll == pytest.approx(res.cll, abs=1e-7)


def test_member_curves_full_prefix_equals_cv_and_nesting():
    """The k = M point of every order is the full ensemble: its CLL equals cross_validated_calibration's."""
    mp, y = _ensemble(2, m=4, n=120)
    curves = member_curves(mp, y, n_orders=3, seed=1, n_repeats=2)
    full = cross_validated_calibration(mp, y, n_repeats=2, seed=1)
    np.testing.assert_allclose(curves.cll[:, -1], full.cll, atol=1e-9)
    assert curves.cll_std[-1] == pytest.approx(0.0, abs=1e-9)
    for r, order in enumerate(curves.orders):
        assert sorted(order.tolist()) == [0, 1, 2, 3]
        for k in range(1, 5):
            prefix = mp[order[:k]]
            assert curves.accuracy[r, k - 1] == pytest.approx(accuracy_score(prefix.mean(0), y))
            assert curves.brier[r, k - 1] == pytest.approx(brier_loss(prefix.mean(0), y), abs=1e-12)
            assert curves.cll[r, k - 1] == pytest.approx(
                cross_validated_calibration(prefix, y, n_repeats=2, seed=1).cll, abs=1e-9)
    d = curves.to_dict()
    assert d["n_members"] == [1, 2, 3, 4] and d["n_orders"] == 3 and d["seed"] == 1


def test_member_curves_one_member_and_per_member():
    mp, y = _ensemble(3, m=2, n=60)
    a = member_curves(mp[:1], y, n_orders=2, n_repeats=1)
    assert a.cll.shape == (2, 1) and np.all(a.cll_std == 0)
    b = member_curves(mp, y, n_orders=2, n_repeats=1, placement="per_member")
    ref = cross_validated_calibration(mp, y, n_repeats=1, placement="per_member")
    np.testing.assert_allclose(b.cll[:, -1], ref.cll, atol=1e-8)


_MP = np.full((2, 4, 2), 0.5)
_Y = np.array([0, 1, 0, 1])


@pytest.mark.parametrize(
    ("call", "exc", "name"),
    [
        (lambda: cross_validated_calibration(_MP[0], _Y), ValueError, "member_probs"),
        (lambda: cross_validated_calibration(_MP, np.array([0, 1, 0, 2])), ValueError, "labels"),
        (lambda: cross_validated_calibration(_MP[:, :1], _Y[:1]), ValueError, "labels"),
        (lambda: cross_validated_calibration(_MP, _Y, n_repeats=0), ValueError, "n_repeats"),
        (lambda: cross_validated_calibration(_MP, _Y, seed=-1), ValueError, "seed"),
        (lambda: cross_validated_calibration(_MP, _Y, placement="x"), ValueError, "placement"),
        (lambda: cross_validated_calibration(_MP, _Y, n_bins=0), ValueError, "n_bins"),
        (lambda: cross_validated_calibration(_MP * 2, _Y), ValueError, "member_probs"),
        (lambda: member_curves(_MP, _Y, n_orders=0), ValueError, "n_orders"),
        (lambda: member_curves(np.full((2, 4, 2), np.nan), _Y), ValueError, "member_probs"),
    ],
)
def test_errors_name_the_argument(call, exc, name):
    with pytest.raises(exc, match=name):
        call()
