# SPDX-License-Identifier: MIT
"""Test-time cross-validated temperature scaling, CLL and member curves, against independent oracles.

Oracles: (1) numbers computed once with the Pitfalls repository's own code (tests/data/pitfalls_oracle/, README
there); (2) a protocol written here from the formulas with scipy (``scipy.special.log_softmax`` and
``scipy.optimize.minimize_scalar``), never with ubench's temperature or metric functions; (3) closed forms.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import optimize, special
from strategies import softmax64

from ubench.metrics.dee import dee_curve, dee_reference
from ubench.metrics.protocol import CalibratedCV, cross_validated_calibration, cv_splits, member_curves
from ubench.metrics.temperature import apply_ensemble_temperature, fit_ensemble_temperature

ORACLE_DIR = Path(__file__).resolve().parents[1] / "data" / "pitfalls_oracle"
EPS = 1e-12


def _ensemble(seed, m=3, n=200, c=4, noise=0.8, sharp=2.0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    base = rng.normal(size=(n, c))
    base[np.arange(n), y] += 1.2
    mp = softmax64(sharp * (base[None] + noise * rng.normal(size=(m, n, c))))
    return mp, y


def _rule_folds(n, repeats, rng):
    """The documented halving rule, restated: ``rng.permutation(n)``, A = first n // 2 entries; (A, B), (B, A)."""
    out = []
    for _ in range(repeats):
        perm = rng.permutation(n)
        a, b = np.sort(perm[: n // 2]), np.sort(perm[n // 2:])
        out += [(a, b), (b, a)]
    return out


def _log_scaled(mp, t, placement):
    """log of the temperature-scaled prediction (N, C) of members (M, N, C), from the formulas with scipy only:
    post scales the log of the member mean, per_member scales every member and averages the probabilities."""
    if placement == "post":
        return special.log_softmax(np.log(mp.mean(axis=0) + EPS) / t, axis=-1)
    logs = special.log_softmax(np.log(mp + EPS) / t, axis=-1)
    return special.logsumexp(logs, axis=0) - np.log(mp.shape[0])


def _scipy_fit(mp, y, placement, bounds=(0.01, 100.0)):
    """argmin_T NLL by bounded Brent on log T in [log t_min, log t_max] (tight tolerance)."""

    def nll(log_t):
        return -np.mean(_log_scaled(mp, np.exp(log_t), placement)[np.arange(len(y)), y])

    lo, hi = np.log(bounds[0]), np.log(bounds[1])
    res = optimize.minimize_scalar(nll, bounds=(lo, hi), method="bounded", options={"xatol": 1e-10})
    # Bounded Brent never evaluates the bounds themselves: on a separable fold the NLL falls towards T -> 0 and is
    # flat to rounding near the bound, so Brent stops at, e.g., T = 0.0127. The constrained argmin is then the bound.
    for bound in (lo, hi):
        if nll(bound) <= res.fun:
            return float(np.exp(bound))
    return float(np.exp(res.x))


def _ece(probs, y, n_bins=15):
    conf, pred = probs.max(axis=1), probs.argmax(axis=1)
    edges = np.linspace(0, 1, n_bins + 1)
    total = 0.0
    for lo, hi in zip(edges[:-1], edges[1:]):
        sel = (conf > lo) & (conf <= hi)
        if sel.any():
            total += sel.mean() * abs(conf[sel].mean() - np.mean(pred[sel] == y[sel]))
    return total


def _brier(probs, y):
    return float(np.mean(np.sum((probs - np.eye(probs.shape[1])[y]) ** 2, axis=1)))


def _scipy_protocol(mp, y, placement, n_repeats, seed):
    """Per fold: [held-out CLL, T, NLL before, acc before, Brier before/after, ECE before/after]."""
    mean = mp.mean(axis=0)
    rows = []
    for a, b in _rule_folds(len(y), n_repeats, np.random.default_rng(seed)):
        t = _scipy_fit(mp[:, a], y[a], placement)
        q = np.exp(_log_scaled(mp[:, b], t, placement))
        rows.append([np.mean(np.log(q[np.arange(len(b)), y[b]])), t,
                     -np.mean(np.log(EPS + mean[b, y[b]])), np.mean(mean[b].argmax(1) == y[b]),
                     _brier(mean[b], y[b]), _brier(q, y[b]), _ece(mean[b], y[b]), _ece(q, y[b])])
    return np.array(rows)


def _oracle():
    data = np.load(ORACLE_DIR / "members.npz")
    probs = {k: special.softmax(data[f"{k}_logits"].astype(np.float64), axis=2) for k in ("deep_ensemble", "method")}
    return probs, data, json.loads((ORACLE_DIR / "oracle.json").read_text())


# ---------------------------------------------------------------------------------------------------------------
# against the Pitfalls repository's own code


def test_fold_temperatures_and_cll_match_the_pitfalls_code_on_the_same_folds():
    """ts() (Nelder-Mead) and get_ll(apply_t()) on ubench's folds (seed 0): T to NM's tolerance, CLL to 1e-5."""
    probs, data, ref = _oracle()
    y = data["labels"]
    res = cross_validated_calibration(probs["deep_ensemble"], y, n_repeats=5, seed=0)
    fit_sets = [a for a, _ in cv_splits(len(y), n_repeats=5, seed=0)]
    np.testing.assert_array_equal(np.stack(fit_sets), data["ubench_rule_fit"])  # the same folds as the oracle's
    # Nelder-Mead stops when the simplex is within xatol=1e-4 and fatol=1e-4 (scipy's defaults: the code's
    # 'xtol' is ignored): its T lies within a few 1e-3 of the optimum; the NLL is flat there (error ~ dT^2).
    np.testing.assert_allclose(res.temperatures, ref["ubench_rule_folds"]["temperatures"], atol=5e-3)
    assert res.cll == pytest.approx(ref["ubench_rule_folds"]["cll_mean"], abs=1e-5)  # torch float32 log_softmax


def test_metrics_kfold_cll_on_its_own_folds():
    """metrics_kfold(temp_scale=True)'s 'll' on its own KFold(2, shuffle) halves (recorded) equals ubench's
    temperature fit and held-out log-likelihood on those halves; ubench's seeded halvings land within the spread."""
    probs, data, ref = _oracle()
    y, mp = data["labels"], probs["deep_ensemble"]
    clls = []
    for fit in data["kfold_fit"]:
        held = np.setdiff1d(np.arange(len(y)), fit)
        t = fit_ensemble_temperature(mp[:, fit], y[fit]).temperature
        q = apply_ensemble_temperature(mp[:, held], t)
        clls.append(np.mean(np.log(q[np.arange(len(held)), y[held]])))
    assert np.mean(clls) == pytest.approx(ref["metrics_kfold"]["ll"], abs=1e-5)
    spread = np.std(ref["ubench_rule_folds"]["cll"])  # fold-to-fold spread of the held-out CLL
    assert abs(cross_validated_calibration(mp, y).cll - ref["metrics_kfold"]["ll"]) < 3 * spread


def test_dee_curve_equals_the_pitfalls_notebook_dee_on_its_reference():
    """The notebook's dee() (run on the repository's own reference and method curves) equals ubench's dee_curve."""
    _, _, ref = _oracle()
    r = ref["dee_reference"]
    curve = dee_curve(ref["method_curve"]["cll"], r["cll_mean"], r["cll_std"])
    np.testing.assert_allclose(curve.dee, ref["dee"]["dee"], rtol=1e-12)
    # the notebook adds mean +- std in the float32 of its log (torch); ubench adds in float64
    np.testing.assert_allclose(curve.lower, ref["dee"]["lower"], rtol=1e-6)
    np.testing.assert_allclose(curve.upper, ref["dee"]["upper"], rtol=1e-6)


def test_dee_reference_reproduces_the_pitfalls_bands():
    """ubench's reference (5 orders, halvings redrawn per order) against the code's 5 tries: the means agree within
    the code's band, the std at k = K is not 0 and has the code's size, and the method's DEE lies in the band."""
    probs, data, ref = _oracle()
    y = data["labels"]
    r = ref["dee_reference"]
    ours = dee_reference(probs["deep_ensemble"], y, n_orders=5, n_repeats=5, seed=0)
    mean, std = np.array(r["cll_mean"]), np.array(r["cll_std"])
    assert np.all(np.abs(ours.cll_mean - mean) <= 2 * np.maximum(std, ours.cll_std))
    assert ours.cll_std[-1] > 0.2 * std[-1]  # halving noise: 0 when one halving is kept across orders
    assert ours.cll_std[-1] < 5 * std[-1]
    # the code's method curve scored against ubench's reference: within one band width of the code's DEE
    ours_dee = dee_curve(ref["method_curve"]["cll"], ours.cll_mean, ours.cll_std)
    code = {k: np.array(v) for k, v in ref["dee"].items()}
    assert np.all(np.abs(ours_dee.dee - code["dee"]) <= code["upper"] - code["lower"])
    assert np.all((ours_dee.lower <= code["upper"]) & (ours_dee.upper >= code["lower"]))  # the bands overlap


# ---------------------------------------------------------------------------------------------------------------
# against the protocol written from the formulas with scipy


@pytest.mark.parametrize("placement", ["post", "per_member"])
def test_every_number_matches_the_scipy_protocol(placement):
    mp, y = _ensemble(0)
    res = cross_validated_calibration(mp, y, placement=placement, n_repeats=3, seed=7)
    ref = _scipy_protocol(mp, y, placement, 3, 7)
    np.testing.assert_allclose(res.temperatures, ref[:, 1], rtol=1e-6)
    assert res.cll == pytest.approx(ref[:, 0].mean(), abs=1e-9)
    assert res.nll_after == pytest.approx(-ref[:, 0].mean(), abs=1e-9)
    assert res.temperature_mean == pytest.approx(ref[:, 1].mean(), rel=1e-6)
    assert res.temperature_std == pytest.approx(ref[:, 1].std(), rel=1e-4, abs=1e-9)
    assert res.nll_before == pytest.approx(ref[:, 2].mean(), abs=1e-12)
    assert res.accuracy == pytest.approx(ref[:, 3].mean(), abs=1e-12)
    assert res.brier_before == pytest.approx(ref[:, 4].mean(), abs=1e-12)
    assert res.brier_after == pytest.approx(ref[:, 5].mean(), abs=1e-7)
    assert res.ece_before == pytest.approx(ref[:, 6].mean(), abs=1e-12)
    assert res.ece_after == pytest.approx(ref[:, 7].mean(), abs=1e-7)
    if placement == "post":
        assert res.accuracy_after == res.accuracy


def test_cv_splits_follow_the_documented_rule():
    splits = cv_splits(11, n_repeats=5, seed=3)
    expected = _rule_folds(11, 5, np.random.default_rng(3))
    assert len(splits) == 10
    for (a, b), (ea, eb) in zip(splits, expected):
        np.testing.assert_array_equal(a, ea)
        np.testing.assert_array_equal(b, eb)
    assert not np.array_equal(cv_splits(11, n_repeats=5, seed=4)[0][0], splits[0][0])


def test_hand_built_cll():
    """Identical rows [0.9, 0.1], labels 0,0,0,1: T* has a closed form on each fit half, the CLL by hand."""
    p = np.tile([0.9, 0.1], (8, 1))[None]
    y = np.array([0, 0, 0, 1] * 2)
    res = cross_validated_calibration(p, y, n_repeats=2, seed=0)
    expected = []
    for a, b in _rule_folds(8, 2, np.random.default_rng(0)):
        f = np.mean(y[a] == 0)  # optimum: q0 = f, i.e. 9 ** (1 / T) = f / (1 - f)
        if 0.5 < f < 1:
            t = np.log(9.0) / np.log(f / (1 - f))
        else:
            t = 100.0 if f <= 0.5 else 0.01
        q0 = 9.0 ** (1 / t) / (9.0 ** (1 / t) + 1)
        fb = np.mean(y[b] == 0)
        expected.append(fb * np.log(q0) + (1 - fb) * np.log(1 - q0))
    assert res.cll == pytest.approx(np.mean(expected), abs=1e-9)


def test_settings_and_dict_keys():
    mp, y = _ensemble(1, m=2, n=60)
    res = cross_validated_calibration(mp, y, seed=5)
    d = res.to_dict()
    assert (d["n_folds"], d["n_repeats"], d["seed"], d["placement"], d["eps"]) == (2, 5, 5, "post", 1e-12)
    assert len(d["temperatures"]) == 10 and isinstance(res, CalibratedCV)
    assert cross_validated_calibration(mp, y, seed=5) == res  # seeded: the same halvings, the same numbers


def test_separable_folds_report_bounds_never_nan():
    """Every label is the argmax: the NLL falls as T -> 0, so every fold's T is the lower bound."""
    p = softmax64(np.array([[2.0, 0.0, 0.0], [0.0, 3.0, 0.0], [0.0, 0.0, 1.0]] * 4))[None]
    res = cross_validated_calibration(p, np.array([0, 1, 2] * 4))
    assert res.n_hit_bound == 10
    assert all(t == 0.01 for t in res.temperatures)
    assert np.isfinite(list(v for v in res.to_dict().values() if isinstance(v, float))).all()


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 3), st.integers(4, 40), st.integers(2, 5), st.floats(0.2, 4.0))
@example(4, 1, 4, 4, 3.0)  # two separable folds: the optimum is the bound T = 0.01, where Brent stops short
def test_cll_matches_the_scipy_protocol_for_any_ensemble(seed, m, n, c, sharp):
    """For seeded continuous ensembles (no ties: the NLL is strictly convex in 1/T), the CLL equals the scipy
    protocol's whenever no fold's optimum lies at a bound; with one member, post equals per_member."""
    rng = np.random.default_rng(seed)
    mp = softmax64(sharp * rng.normal(size=(m, n, c)))
    y = rng.integers(0, c, n)
    res = cross_validated_calibration(mp, y, n_repeats=2)
    ref = _scipy_protocol(mp, y, "post", 2, 0)
    if np.all((ref[:, 1] > 0.0101) & (ref[:, 1] < 99.0)):  # at a bound Brent stops near, not at, it
        assert res.cll == pytest.approx(ref[:, 0].mean(), abs=1e-6)
        np.testing.assert_allclose(res.temperatures, ref[:, 1], rtol=1e-5)
    if m == 1:
        other = cross_validated_calibration(mp, y, n_repeats=2, placement="per_member")
        assert other.cll == pytest.approx(res.cll, abs=1e-7)


# ---------------------------------------------------------------------------------------------------------------
# member curves


def test_member_curves_redraw_halvings_per_order():
    """Order r's prefixes all use halvings r*R .. r*R + R - 1 of default_rng(seed): each point equals the scipy
    protocol on those halvings; order 0's full ensemble equals cross_validated_calibration(seed); std at K > 0."""
    mp, y = _ensemble(2, m=4, n=120)
    curves = member_curves(mp, y, n_orders=3, seed=1, n_repeats=2)
    stream = np.random.default_rng(1)
    for r, order in enumerate(curves.orders):
        assert sorted(order.tolist()) == [0, 1, 2, 3]
        folds = _rule_folds(len(y), 2, stream)
        for k in range(1, 5):
            prefix = mp[order[:k]]
            clls = []
            for a, b in folds:
                t = _scipy_fit(prefix[:, a], y[a], "post")
                clls.append(np.mean(_log_scaled(prefix[:, b], t, "post")[np.arange(len(b)), y[b]]))
            assert curves.cll[r, k - 1] == pytest.approx(np.mean(clls), abs=1e-8)
            assert curves.accuracy[r, k - 1] == pytest.approx(np.mean(prefix.mean(0).argmax(1) == y))
            assert curves.brier[r, k - 1] == pytest.approx(_brier(prefix.mean(0), y), abs=1e-12)
    assert curves.cll[0, -1] == pytest.approx(cross_validated_calibration(mp, y, n_repeats=2, seed=1).cll, abs=1e-9)
    assert curves.cll_std[-1] > 1e-4
    assert curves.cll_std == pytest.approx(np.std(curves.cll, axis=0, ddof=1))  # pandas' std, as the notebook
    d = curves.to_dict()
    assert d["n_members"] == [1, 2, 3, 4] and d["n_orders"] == 3 and d["seed"] == 1


def test_member_curves_one_member_and_per_member():
    mp, y = _ensemble(3, m=2, n=60)
    a = member_curves(mp[:1], y, n_orders=1, n_repeats=1)
    assert a.cll.shape == (1, 1) and np.all(a.cll_std == 0)  # one order: no spread (pandas would say NaN)
    b = member_curves(mp, y, n_orders=2, n_repeats=1, placement="per_member")
    stream = np.random.default_rng(0)
    for r, order in enumerate(b.orders):
        folds = _rule_folds(len(y), 1, stream)
        clls = []
        for fa, fb in folds:
            t = _scipy_fit(mp[:, fa], y[fa], "per_member")
            clls.append(np.mean(_log_scaled(mp[:, fb], t, "per_member")[np.arange(len(fb)), y[fb]]))
        assert b.cll[r, -1] == pytest.approx(np.mean(clls), abs=1e-8)


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
