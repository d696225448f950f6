# SPDX-License-Identifier: MIT
"""The contract of ``metrics/protocol.py`` that its numbers alone do not pin: the settings every result records
and the dicts the report writes, the defaults, the edges (2 samples, 1 order, 1 member, folds at a bound) and the
error messages. Written to kill the mutants that survived ``bench/bench_mutation.py`` on protocol.py (issue #27,
item 8).

Oracles: the protocol restated with scipy (``test_protocol.py``'s ``_scipy_fit``, ``_log_scaled`` and
``_rule_folds``: bounded Brent on log T, never ubench's solver), closed forms worked by hand in each test, and the
docstrings' stated contract (field names, seeds, messages).
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from strategies import softmax64
from test_protocol import _ensemble, _log_scaled, _rule_folds, _scipy_fit

from ubench.metrics import protocol
from ubench.metrics.protocol import _calibrated_cv, cross_validated_calibration, member_curves

EPS = 1e-12
# CalibratedCV's fields in the order its docstring lists them: the report's ``calibrated`` keys, then the settings
CV_KEYS = ("cll", "temperature", "temperature_std", "cv_nll_before", "calibrated_nll", "accuracy",
           "calibrated_accuracy", "cv_brier_before", "calibrated_brier", "cv_ece_before", "calibrated_ece",
           "n_hit_bound", "temperatures", "n_folds", "n_repeats", "seed", "placement", "eps", "n_bins", "bounds")
CURVE_KEYS = ("n_members", "cll_mean", "cll_std", "accuracy_mean", "accuracy_std", "brier_mean", "brier_std",
              "orders", "n_orders", "n_repeats", "seed", "placement", "eps")


def _exact(message: str) -> str:
    return "^" + re.escape(message) + "$"


def _log_q(row, label, t, eps=EPS):
    """log softmax(log(p + eps) / T) at the label of one row, by hand (logsumexp written out)."""
    z = [math.log(p + eps) / t for p in row]
    top = max(z)
    return z[label] - top - math.log(sum(math.exp(v - top) for v in z))


def _sample_std(column):
    """Sample standard deviation (ddof = 1), by hand."""
    mean = sum(column) / len(column)
    return math.sqrt(sum((v - mean) ** 2 for v in column) / (len(column) - 1))


def _scipy_cll(members, y, folds, placement, bounds=(0.01, 100.0)):
    """(held-out CLL averaged over ``folds``, fold temperatures) of the protocol restated with scipy."""
    clls, temps = [], []
    for a, b in folds:
        t = _scipy_fit(members[:, a], y[a], placement, bounds)
        clls.append(np.mean(_log_scaled(members[:, b], t, placement)[np.arange(len(b)), y[b]]))
        temps.append(t)
    return float(np.mean(clls)), np.array(temps)


# ---------------------------------------------------------------------------------------------------------------
# cross_validated_calibration: settings, dict, edges


def test_the_dict_holds_every_field_and_the_settings_as_given():
    """``to_dict`` has exactly the documented keys; tuples become lists (JSON); n_bins and bounds are recorded and
    the bounds are the ones the folds were fitted in (separable rows: every fold at t_min, which is reported)."""
    p = softmax64(np.array([[2.0, 0.0, 0.0], [0.0, 3.0, 0.0], [0.0, 0.0, 1.0]] * 4))[None]
    res = cross_validated_calibration(p, np.array([0, 1, 2] * 4), n_repeats=2, seed=3, n_bins=7, bounds=(0.5, 3.0))
    d = res.to_dict()
    assert tuple(d) == CV_KEYS
    assert d["temperatures"] == [0.5] * 4 and d["n_hit_bound"] == 4
    assert d["bounds"] == [0.5, 3.0] and d["n_bins"] == 7
    assert (d["n_folds"], d["n_repeats"], d["seed"], d["placement"], d["eps"]) == (2, 2, 3, "post", EPS)
    assert json.loads(json.dumps(d)) == d  # plain JSON types only
    assert all(d[k] == getattr(res, k) for k in CV_KEYS if k not in ("temperatures", "bounds"))


def test_two_samples_are_enough_and_match_the_hand_computation():
    """N = 2, one class each way: a half is one row. Row 0 (label = argmax) is fitted by T -> t_min, row 1 (label
    != argmax, 2 classes) by T -> t_max; each scores the other, so every halving gives the same two folds."""
    rows, y = [[0.8, 0.2], [0.3, 0.7]], np.array([0, 0])
    lo, hi = 0.5, 4.0
    for placement in ("post", "per_member"):
        res = cross_validated_calibration(np.array([rows]), y, placement=placement, n_repeats=3, bounds=(lo, hi))
        cll = 0.5 * (_log_q(rows[1], 0, lo) + _log_q(rows[0], 0, hi))
        assert res.cll == pytest.approx(cll, abs=1e-12)
        assert sorted(res.temperatures) == [lo] * 3 + [hi] * 3 and res.n_hit_bound == 6
        assert res.cv_nll_before == pytest.approx(-0.5 * (math.log(0.3 + EPS) + math.log(0.8 + EPS)), abs=1e-15)
        assert res.accuracy == res.calibrated_accuracy == 0.5
    curves = member_curves(np.array([rows]), y, n_orders=2, n_repeats=1, bounds=(lo, hi))
    np.testing.assert_allclose(curves.cll, [[cll], [cll]], atol=1e-12)


def test_eps_floors_the_uncalibrated_nll():
    """``cv_nll_before`` = mean over folds of -mean log(p_y + eps) on the held-out half; with N even the two
    halves of a halving have equal size, so it is the mean over all rows whatever the halvings."""
    p = np.array([[[1.0, 0.0], [0.0, 1.0], [0.5, 0.5], [0.9, 0.1], [0.2, 0.8], [0.6, 0.4]]])
    y = np.array([1, 0, 0, 0, 1, 1])  # two labels have probability 0
    for eps in (1e-3, 1e-12):
        res = cross_validated_calibration(p, y, n_repeats=2, eps=eps)
        expected = -sum(math.log(p[0, i, y[i]] + eps) for i in range(6)) / 6
        assert res.cv_nll_before == pytest.approx(expected, rel=1e-12)
        assert res.eps == eps


def test_the_report_entry_refuses_a_single_sample():
    """The report's calibrated section calls ``_calibrated_cv`` on a split's mean without ``_check_inputs``: it
    refuses fewer than 2 samples itself, with the count."""
    with pytest.raises(ValueError, match=_exact("labels must have at least 2 samples to be halved; found 1")):
        _calibrated_cv(None, np.array([[0.5, 0.5]]), np.array([0]), placement="post", n_repeats=1, seed=0,
                       eps=EPS, n_bins=15)


_MP = np.full((2, 4, 2), 0.5)
_Y = np.array([0, 1, 0, 1])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: cross_validated_calibration(_MP, _Y[:3]), "member_probs has 4 samples but labels has 3"),
        (lambda: member_curves(_MP, _Y[:3]), "member_probs has 4 samples but labels has 3"),
        (lambda: cross_validated_calibration(_MP[:, :1], _Y[:1]),
         "labels must have at least 2 samples to be halved; found 1"),
        (lambda: cross_validated_calibration(_MP, _Y, n_repeats=0), "n_repeats must be an integer >= 1; found 0"),
        (lambda: member_curves(_MP, _Y, n_repeats=0), "n_repeats must be an integer >= 1; found 0"),
        (lambda: member_curves(_MP, _Y, n_orders=0), "n_orders must be an integer >= 1; found 0"),
    ],
)
def test_error_messages_in_full(call, message):
    with pytest.raises(ValueError, match=_exact(message)):
        call()


def test_one_repeat_is_allowed():
    """n_repeats >= 1 (the minimum is 1, not 2): one halving gives two folds."""
    p = np.tile([0.9, 0.1], (4, 1))[None]
    res = cross_validated_calibration(p, np.array([0, 0, 0, 1]), n_repeats=1, seed=0)
    assert res.n_repeats == 1 and len(res.temperatures) == 2


def test_post_scores_every_halving_in_the_one_multi_pass(monkeypatch):
    """``post`` scores all halvings in one ``_scaled_row_scores_multi`` pass (module docstring): the one-halving
    pass must not run again per halving."""

    def refuse(*_args, **_kwargs):
        raise AssertionError("a halving was re-scored in its own pass")

    mp, y = _ensemble(4, m=2, n=40)
    want = cross_validated_calibration(mp, y, n_repeats=2)
    monkeypatch.setattr(protocol, "_scaled_row_scores", refuse)
    assert cross_validated_calibration(mp, y, n_repeats=2) == want


# ---------------------------------------------------------------------------------------------------------------
# per_member: the fold fits at and near the bounds


def test_per_member_optima_inside_the_bounds_near_t_max():
    """Overconfident members: every fold's optimum lies in (t_max / 2, t_max); the fits find them, none at a bound."""
    mp, y = _ensemble(5, m=2, n=40, c=3, sharp=3.0)
    bounds = (0.5, 2.5)
    res = cross_validated_calibration(mp, y, placement="per_member", n_repeats=2, seed=0, bounds=bounds)
    cll, temps = _scipy_cll(mp, y, _rule_folds(40, 2, np.random.default_rng(0)), "per_member", bounds)
    assert np.all((temps > 1.3) & (temps < 2.4))  # the premise
    np.testing.assert_allclose(res.temperatures, temps, rtol=1e-6)
    assert res.cll == pytest.approx(cll, abs=1e-9)
    assert res.n_hit_bound == 0


def test_per_member_optima_below_t_min_report_t_min():
    """Under-confident members: every fold's optimum lies in (t_min / 2, t_min) with t_min in (0.5, 1); each fold
    is then fitted at t_min exactly (not at t_max, not below t_min) and counted at a bound."""
    mp, y = _ensemble(5, m=2, n=40, c=3, sharp=0.9)
    folds = _rule_folds(40, 2, np.random.default_rng(0))
    _, free = _scipy_cll(mp, y, folds, "per_member", (0.01, 100.0))
    assert np.all((free > 0.36) & (free < 0.69))  # the premise: (0.35, 0.7)
    res = cross_validated_calibration(mp, y, placement="per_member", n_repeats=2, seed=0, bounds=(0.7, 100.0))
    assert res.temperatures == (0.7,) * 4 and res.n_hit_bound == 4
    cll, temps = _scipy_cll(mp, y, folds, "per_member", (0.7, 100.0))
    np.testing.assert_allclose(temps, 0.7, rtol=1e-12)
    assert res.cll == pytest.approx(cll, abs=1e-12)


@pytest.mark.parametrize(("labels", "t"), [("argmax", 0.01), ("argmin", 100.0)])
def test_per_member_counts_every_fold_at_a_bound(labels, t):
    """Labels at every member's argmax: the NLL falls as T -> 0 on every half (t_min); at every member's argmin
    (2 classes): it falls as T grows (t_max). All 2R folds are counted, and a free fit counts none."""
    gap = np.random.default_rng(6).uniform(0.5, 3.0, size=(3, 30))
    mp = softmax64(np.stack([gap, np.zeros_like(gap)], axis=-1))  # class 0 is every member's argmax
    y = np.zeros(30, int) if labels == "argmax" else np.ones(30, int)
    res = cross_validated_calibration(mp, y, placement="per_member", n_repeats=3)
    assert res.temperatures == (t,) * 6 and res.n_hit_bound == 6
    mp, y = _ensemble(7, m=2, n=40)
    assert cross_validated_calibration(mp, y, placement="per_member", n_repeats=3).n_hit_bound == 0


# ---------------------------------------------------------------------------------------------------------------
# member_curves: defaults, orders, prefixes, std, dict


def test_member_curves_defaults_are_five_orders_of_five_halvings():
    """Defaults n_orders = 5, n_repeats = 5, seed 0: order r's points use halvings 5r .. 5r + 4 of default_rng(0)."""
    mp, y = _ensemble(8, m=2, n=16, c=2)
    curves = member_curves(mp, y)
    assert curves.cll.shape == curves.accuracy.shape == curves.brier.shape == (5, 2)
    assert (curves.n_orders, curves.n_repeats, curves.seed, curves.placement, curves.eps) == (5, 5, 0, "post", EPS)
    stream = np.random.default_rng(0)
    for r in range(2):  # orders 0 and 1: the second proves the stream advanced by exactly 5 halvings
        folds = _rule_folds(16, 5, stream)
        assert curves.cll[r, -1] == pytest.approx(_scipy_cll(mp, y, folds, "post")[0], abs=1e-8)


def test_member_curves_orders_come_from_seed_and_one():
    """Orders are ``default_rng([seed, 1]).permutation(M)``, drawn one after the other."""
    mp, y = _ensemble(9, m=4, n=20)
    curves = member_curves(mp, y, n_orders=3, n_repeats=1, seed=4)
    rng = np.random.default_rng([4, 1])
    np.testing.assert_array_equal(curves.orders, [rng.permutation(4) for _ in range(3)])
    assert curves.orders.dtype == np.int64 and curves.n_members.dtype == np.int64


def test_per_member_prefix_k_uses_exactly_its_first_k_members():
    """per_member CLL at prefix size k is the scipy protocol on members order[:k] (one member: plain T-scaling)."""
    mp, y = _ensemble(10, m=3, n=40, c=3)
    curves = member_curves(mp, y, n_orders=2, n_repeats=1, seed=2, placement="per_member")
    stream = np.random.default_rng(2)
    for r, order in enumerate(curves.orders):
        folds = _rule_folds(40, 1, stream)
        for k in range(1, 4):
            assert curves.cll[r, k - 1] == pytest.approx(_scipy_cll(mp[order[:k]], y, folds, "per_member")[0],
                                                         abs=1e-8)


def test_post_member_curves_never_build_the_members_logs(monkeypatch):
    """``post`` works on each prefix's mean: the (M, N, C) float64 log-probabilities of the members (per_member's
    problem) are never built."""
    seen = []
    real = protocol._ts_problem

    def spy(probs, labels, eps):
        seen.append(probs.ndim)
        return real(probs, labels, eps)

    monkeypatch.setattr(protocol, "_ts_problem", spy)
    mp, y = _ensemble(11, m=3, n=20)
    member_curves(mp, y, n_orders=1, n_repeats=1)
    assert seen and set(seen) == {2}


@pytest.mark.parametrize("n_orders", [1, 2, 3])
def test_std_over_orders_is_the_sample_std_and_zero_for_one_order(n_orders):
    """``*_std`` is the ddof = 1 std over orders, of shape (M,); one order gives zeros of shape (M,). One member:
    the orders differ only in their halvings, so the CLL still spreads."""
    mp, y = _ensemble(12, m=3, n=24)
    for members in (mp, mp[:1]):
        curves = member_curves(members, y, n_orders=n_orders, n_repeats=1)
        m = members.shape[0]
        for name in ("cll", "accuracy", "brier"):
            std, values = getattr(curves, f"{name}_std"), getattr(curves, name)
            assert std.shape == (m,)
            want = [0.0] * m if n_orders == 1 else [_sample_std(values[:, k].tolist()) for k in range(m)]
            np.testing.assert_allclose(std, want, rtol=1e-12, atol=0)
        if n_orders > 1:
            assert np.all(curves.cll_std > 0)


def test_member_curves_dict_holds_every_key_with_its_value():
    """``to_dict``: exactly the documented keys; means and ddof = 1 stds over the orders (two orders: |a - b| / sqrt
    2, by hand), the orders, and the settings as given."""
    mp, y = _ensemble(13, m=3, n=30)
    curves = member_curves(mp, y, n_orders=2, n_repeats=1, seed=4, placement="per_member", eps=1e-6)
    d = curves.to_dict()
    assert tuple(d) == CURVE_KEYS
    assert json.loads(json.dumps(d)) == d
    for name in ("cll", "accuracy", "brier"):
        x = getattr(curves, name).tolist()
        assert d[f"{name}_mean"] == pytest.approx([(a + b) / 2 for a, b in zip(*x)], abs=1e-15)
        assert d[f"{name}_std"] == pytest.approx([abs(a - b) / math.sqrt(2) for a, b in zip(*x)], abs=1e-15)
    rng = np.random.default_rng([4, 1])
    assert d["orders"] == [rng.permutation(3).tolist() for _ in range(2)]
    assert d["n_members"] == [1, 2, 3]
    assert (d["n_orders"], d["n_repeats"], d["seed"], d["placement"], d["eps"]) == (2, 1, 4, "per_member", 1e-6)
    assert (curves.n_repeats, curves.placement, curves.eps) == (1, "per_member", 1e-6)


def test_per_member_full_ensemble_point_equals_cross_validated_calibration():
    """member_curves' docstring: order 0's full-ensemble point *equals* cross_validated_calibration's cll with the
    same seed; for per_member too, whose fold fits chain their warm starts (each fold starts at the previous
    fold's 1/T) in both. Equal to rounding, far below the ~1e-10 a different start leaves in the fitted T."""
    mp, y = _ensemble(1, m=3, n=60)
    curves = member_curves(mp, y, n_orders=1, n_repeats=3, seed=1, placement="per_member")
    res = cross_validated_calibration(mp, y, n_repeats=3, seed=1, placement="per_member")
    assert curves.cll[0, -1] == pytest.approx(res.cll, rel=1e-14, abs=0)


def test_cv_splits_defaults_are_five_halvings_of_seed_zero():
    """``cv_splits(n)`` is ten folds: five permutations from ``default_rng(0)``, each halved (first n // 2 entries
    form A) and used both ways, halves sorted (the docstring's rule restated with numpy)."""
    n = 11
    rng = np.random.default_rng(0)
    expected = []
    for _ in range(5):
        perm = rng.permutation(n)
        a, b = np.sort(perm[: n // 2]), np.sort(perm[n // 2:])
        expected += [(a, b), (b, a)]
    got = protocol.cv_splits(n)
    assert len(got) == 10
    for (ga, gb), (ea, eb) in zip(got, expected):
        assert np.array_equal(ga, ea) and np.array_equal(gb, eb)


@pytest.mark.parametrize("kwargs,message", [
    ({"n_samples": 1}, "n_samples must be an integer >= 2; found 1"),
    ({"n_samples": 4, "n_repeats": 0}, "n_repeats must be an integer >= 1; found 0"),
    ({"n_samples": 4, "n_repeats": True}, "n_repeats must be an integer >= 1; found True"),
    ({"n_samples": 4.0}, "n_samples must be an integer >= 2; found 4.0"),
    ({"n_samples": 4, "seed": -1}, "seed must be an integer >= 0; found -1"),
])
def test_cv_splits_refuses_by_name(kwargs, message):
    """A bool is not an integer here (True would be one repeat), nor is a float, and each message names its
    argument."""
    n = kwargs.pop("n_samples")
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        protocol.cv_splits(n, **kwargs)
