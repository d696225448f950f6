# SPDX-License-Identifier: MIT
"""Temperature scaling and vector scaling: closed forms, a scipy cross-check, properties, errors."""

from __future__ import annotations

import numpy as np
import oracles
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import optimize, special
from strategies import labels_for, member_stacks, peaked_logits, probs_and_labels, softmax64

from ubench.metrics.temperature import (
    DEFAULT_EPS,
    TemperatureFit,
    apply_ensemble_temperature,
    apply_temperature,
    fit_ensemble_temperature,
    fit_temperature,
    fit_temperature_from_logits,
)
from ubench.metrics.vector_scaling import apply_vector_scaling, fit_vector_scaling


def _nll_at(probs, labels, t, eps=DEFAULT_EPS):
    """Independent NLL of softmax(log(p + eps) / t), via scipy."""
    z = np.log(np.asarray(probs, dtype=np.float64) + eps) / t
    return float(np.mean(special.logsumexp(z, axis=1) - z[np.arange(len(labels)), labels]))


def _nll_per_member(member_probs, labels, t, eps=DEFAULT_EPS):
    q = special.softmax(np.log(np.asarray(member_probs, dtype=np.float64) + eps) / t, axis=-1).mean(axis=0)
    return float(-np.mean(np.log(q[np.arange(len(labels)), labels])))


def _random_problem(seed, n=400, c=6, sharpness=2.5):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    z = rng.normal(size=(n, c))
    z[np.arange(n), y] += 1.0
    return softmax64(sharpness * z), y


# --- closed forms ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n_right", "n_wrong"), [(2, 1), (3, 1), (5, 2)])
def test_identical_rows_closed_form(n_right, n_wrong):
    """Identical rows [0.9, 0.1]: the fit matches the label frequencies, T = log 9 / log(right / wrong)."""
    p = np.tile([0.9, 0.1], (n_right + n_wrong, 1))
    y = np.array([0] * n_right + [1] * n_wrong)
    fit = fit_temperature(p, y)
    assert fit.temperature == pytest.approx(np.log(9.0) / np.log(n_right / n_wrong), rel=1e-6)
    assert not fit.hit_bound
    f = n_right / (n_right + n_wrong)
    assert fit.nll_after == pytest.approx(-(f * np.log(f) + (1 - f) * np.log(1 - f)), abs=1e-9)


def test_mostly_wrong_rows_hit_upper_bound():
    """Identical rows, the argmax mostly wrong: the optimum would be a negative T, so T = t_max, hit_bound."""
    p = np.tile([0.9, 0.1], (4, 1))
    fit = fit_temperature(p, np.array([0, 1, 1, 1]))
    assert fit.hit_bound and fit.temperature == 100.0
    assert fit.nll_after < fit.nll_before


def test_two_samples_one_right_one_wrong_hits_upper_bound():
    """Two samples, one right, one wrong with the same confidence: the NLL falls as T -> inf; T = t_max."""
    p = np.array([[0.8, 0.2], [0.8, 0.2]])
    fit = fit_temperature(p, np.array([0, 1]), bounds=(0.1, 10.0))
    assert fit.hit_bound and fit.temperature == 10.0
    assert fit.nll_after < fit.nll_before
    assert fit.nll_after == pytest.approx(_nll_at(p, np.array([0, 1]), 10.0), abs=1e-12)


def test_separable_fold_hits_lower_bound():
    """Every label is the argmax: the NLL keeps falling as T -> 0, so T = t_min and hit_bound is set."""
    p = np.array([[0.8, 0.2], [0.3, 0.7], [0.6, 0.4], [0.34, 0.33 + 0.33]])
    y = np.argmax(p, axis=1)
    fit = fit_temperature(p, y)
    assert fit.hit_bound and fit.temperature == 0.01
    assert np.isfinite(fit.nll_after) and 0.0 <= fit.nll_after < fit.nll_before


@pytest.mark.parametrize("t_min", [0.3, 0.6])
@pytest.mark.parametrize("placement", ["post", "per_member"])
def test_an_optimum_below_t_min_is_reported_at_t_min(placement, t_min):
    """Underconfident predictions (T* ~ 0.18, found with the default bounds): with t_min above the optimum the fit
    reports t_min exactly and hit_bound, whatever t_min's 1/T (3.3 or 1.7: the side of the bound is chosen by
    1/T > 1, never by a larger threshold)."""
    z, y = peaked_logits(7, 1.0, 2.0, 0.0, 400, 5)
    p = softmax64(0.35 * z)
    members = np.stack([p, softmax64(0.33 * z)])

    def fit(**bounds):
        if placement == "per_member":
            return fit_ensemble_temperature(members, y, placement="per_member", **bounds)
        return fit_temperature(p, y, **bounds)

    free = fit()
    assert 0.1 < free.temperature < 0.3 and not free.hit_bound
    at = fit(bounds=(t_min, 100.0))
    assert (at.temperature, at.hit_bound) == (t_min, True)


def test_uniform_probs_keep_t_one():
    """Uniform rows: every T gives log C, the fit stays at T = 1 and reports no bound."""
    fit = fit_temperature(np.full((5, 3), 1 / 3), np.array([0, 1, 2, 0, 1]))
    assert isinstance(fit, TemperatureFit)
    assert fit.temperature == 1.0 and not fit.hit_bound
    assert fit.nll_after == pytest.approx(np.log(3.0), abs=1e-12)
    assert fit.to_dict() == {"temperature": 1.0, "nll_before": fit.nll_before, "nll_after": fit.nll_after,
                             "hit_bound": False, "path": "newton"}


def test_calibrated_binary_model_keeps_t_near_one():
    """Labels drawn from the model's own probabilities: T* is within sampling error of 1."""
    rng = np.random.default_rng(3)
    p1 = rng.uniform(0.05, 0.95, 40_000)
    y = (rng.uniform(size=p1.size) < p1).astype(np.int64)
    fit = fit_temperature(np.stack([1 - p1, p1], axis=1), y)
    assert abs(fit.temperature - 1.0) < 0.05


# --- reference cross-checks -----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("sharpness", [0.5, 2.5, 8.0])
def test_matches_scipy_bounded_minimisation(seed, sharpness):
    """The fit agrees with scipy's bounded scalar minimisation of the same objective over log T."""
    p, y = _random_problem(seed, sharpness=sharpness)
    fit = fit_temperature(p, y)
    res = optimize.minimize_scalar(
        lambda lt: _nll_at(p, y, np.exp(lt)), bounds=(np.log(0.01), np.log(100.0)), method="bounded",
        options={"xatol": 1e-10},
    )
    assert fit.temperature == pytest.approx(np.exp(res.x), rel=1e-5)
    assert fit.nll_after == pytest.approx(_nll_at(p, y, fit.temperature), abs=1e-12)
    assert fit.nll_after <= res.fun + 1e-12
    assert fit.nll_before == pytest.approx(_nll_at(p, y, 1.0), abs=1e-12)


@pytest.mark.parametrize("placement", ["post", "per_member"])
def test_ensemble_fit_matches_scipy(placement):
    """Both placements agree with a brute-force scalar minimisation of their own objective."""
    rng = np.random.default_rng(5)
    m, n, c = 4, 300, 5
    y = rng.integers(0, c, n)
    z = rng.normal(size=(m, n, c)) * 3
    z[:, np.arange(n), y] += 1.5
    mp = softmax64(z)
    if placement == "post":
        objective = lambda t: _nll_at(mp.mean(axis=0), y, t)  # noqa: E731
    else:
        objective = lambda t: _nll_per_member(mp, y, t)  # noqa: E731
    fit = fit_ensemble_temperature(mp, y, placement=placement)
    res = optimize.minimize_scalar(lambda lt: objective(np.exp(lt)), bounds=(-4, 4), method="bounded",
                                   options={"xatol": 1e-10})
    assert fit.temperature == pytest.approx(np.exp(res.x), rel=1e-5)
    assert fit.nll_after == pytest.approx(objective(fit.temperature), abs=1e-12)
    assert fit.nll_before == pytest.approx(objective(1.0), abs=1e-12)


def test_logits_and_probs_agree():
    """softmax(z) fitted from probs and z fitted from logits give the same temperature (eps is negligible)."""
    rng = np.random.default_rng(7)
    z = 3 * rng.normal(size=(500, 10))
    y = rng.integers(0, 10, 500)
    a, b = fit_temperature(softmax64(z), y), fit_temperature_from_logits(z, y)
    assert a.temperature == pytest.approx(b.temperature, rel=1e-7)
    assert a.nll_after == pytest.approx(b.nll_after, abs=1e-9)


def test_warm_started_large_fit_equals_plain_fit():
    """A fit on N >= 16384 rows (warm-started from a sub-sample) lands on the same optimum as scipy."""
    rng = np.random.default_rng(11)
    n, c = 20_000, 4
    y = rng.integers(0, c, n)
    z = rng.normal(size=(n, c))
    z[np.arange(n), y] += 1.0
    z *= 3.0
    fit = fit_temperature_from_logits(z, y)

    def nll(lt):
        zz = z / np.exp(lt)
        return float(np.mean(special.logsumexp(zz, axis=1) - zz[np.arange(n), y]))

    res = optimize.minimize_scalar(nll, bounds=(-3, 3), method="bounded", options={"xatol": 1e-10})
    assert fit.temperature == pytest.approx(np.exp(res.x), rel=1e-6)


# --- properties -----------------------------------------------------------------------------------------------


@given(probs_and_labels(n=st.integers(2, 40), c=st.integers(2, 6)))
def test_fit_never_raises_nll_on_its_split(pl):
    """For any probs and labels, the fitted T has NLL <= the NLL at T = 1 on the fit data, and nothing is NaN."""
    p, y = pl
    fit = fit_temperature(p, y)
    assert 0.01 <= fit.temperature <= 100.0
    assert np.isfinite([fit.temperature, fit.nll_before, fit.nll_after]).all()
    assert fit.nll_after <= fit.nll_before
    assert _nll_at(p, y, fit.temperature) <= _nll_at(p, y, 1.0) + 1e-9
    if not fit.hit_bound:  # an interior stationary point: no better nearby temperature
        for f in (0.999, 1.001):
            assert _nll_at(p, y, fit.temperature) <= _nll_at(p, y, fit.temperature * f) + 1e-9


@given(probs_and_labels(n=st.integers(2, 30), c=st.integers(2, 5)), st.randoms(use_true_random=False))
def test_fit_is_permutation_invariant(pl, rnd):
    """Permuting samples, or classes in probs and labels together, leaves the fitted temperature unchanged."""
    p, y = pl
    fit = fit_temperature(p, y)
    rows = list(range(len(y)))
    rnd.shuffle(rows)
    cols = list(range(p.shape[1]))
    rnd.shuffle(cols)
    inv = np.argsort(cols)
    fit2 = fit_temperature(p[rows][:, cols], inv[y[rows]])
    assert fit2.temperature == pytest.approx(fit.temperature, rel=1e-5)
    assert fit2.nll_after == pytest.approx(fit.nll_after, abs=1e-9)


def _nll64(p, y, t):
    return oracles.temperature_nll(np.log(np.asarray(p, dtype=np.float64)), y, t)


def _assert_same_optimum(p, y, t1, t2):
    oracles.assert_same_temperature_optimum(np.log(np.asarray(p, dtype=np.float64)), y, t1, t2)


def test_one_member_placements_agree_on_a_flat_optimum():
    """Hypothesis's case: a 0.49999997/0.5 row makes the NLL flat near T = 0.111 (post 0.11097655, per_member
    0.11097668, scipy's bounded Brent 0.11097639; the NLL at all three equal to 1e-16). Any two T's 1e-3 apart are
    not the same optimum: the helper must fail then."""
    mp = np.array([[[0.8807971, 0.11920292], [0.49999997, 0.5]]], dtype=np.float32)
    y = np.array([0, 0])
    a = fit_ensemble_temperature(mp, y, placement="post")
    b = fit_ensemble_temperature(mp, y, placement="per_member")
    _assert_same_optimum(mp[0], y, a.temperature, b.temperature)
    r = optimize.minimize_scalar(lambda lt: _nll64(mp[0], y, np.exp(lt)), bounds=(np.log(0.01), np.log(100.0)),
                                 method="bounded", options={"xatol": 1e-12})
    _assert_same_optimum(mp[0], y, a.temperature, float(np.exp(r.x)))
    with pytest.raises(AssertionError):
        _assert_same_optimum(mp[0], y, a.temperature, a.temperature * 1.001)


@given(member_stacks(m=st.just(1), n=st.integers(2, 25), c=st.integers(2, 5)), st.data())
def test_post_equals_per_member_for_one_member(mp, data):
    """For a one-member ensemble the two placements are the same fit, and both equal fit_temperature."""
    y = data.draw(labels_for(mp.shape[1], mp.shape[2]))
    a = fit_ensemble_temperature(mp, y, placement="post")
    b = fit_ensemble_temperature(mp, y, placement="per_member")
    c = fit_temperature(mp[0], y)
    _assert_same_optimum(mp[0], y, a.temperature, b.temperature)
    assert a.nll_after == pytest.approx(b.nll_after, abs=1e-10)
    assert a.temperature == pytest.approx(c.temperature, rel=1e-9)
    np.testing.assert_allclose(
        apply_ensemble_temperature(mp, 1.7, placement="post"),
        apply_ensemble_temperature(mp, 1.7, placement="per_member"), atol=1e-12,
    )


@given(member_stacks(m=st.integers(1, 4), n=st.integers(2, 20), c=st.integers(2, 5)), st.data())
def test_per_member_fit_never_raises_nll(mp, data):
    """For any member stack, the per-member fit's NLL is <= its NLL at T = 1."""
    y = data.draw(labels_for(mp.shape[1], mp.shape[2]))
    fit = fit_ensemble_temperature(mp, y, placement="per_member")
    assert np.isfinite([fit.temperature, fit.nll_after]).all()
    assert fit.nll_after <= fit.nll_before
    assert fit.nll_after == pytest.approx(_nll_per_member(mp, y, fit.temperature), abs=1e-9)


def test_float32_and_float64_agree():
    """float32 and float64 copies of the same probabilities give temperatures within 1e-5."""
    p, y = _random_problem(13, n=2000, c=10)
    a = fit_temperature(p, y)
    b = fit_temperature(p.astype(np.float32), y)
    assert b.temperature == pytest.approx(a.temperature, rel=1e-5)
    assert b.nll_after == pytest.approx(a.nll_after, abs=1e-5)


@given(probs_and_labels(n=st.integers(1, 20), c=st.integers(2, 6)), st.floats(0.05, 20.0))
def test_apply_temperature_keeps_simplex_and_argmax(pl, t):
    """For any probs and T, the scaled rows are on the simplex and (T = 1 aside) keep the argmax of log(p+eps)."""
    p, _ = pl
    q = apply_temperature(p, t)
    assert q.dtype == np.float64
    np.testing.assert_allclose(q.sum(axis=1), 1.0, atol=1e-12)
    s = np.log(p.astype(np.float64) + DEFAULT_EPS)
    np.testing.assert_allclose(q, special.softmax(s / t, axis=1), atol=1e-12)


def test_apply_temperature_identity_and_example():
    p = np.array([[0.9, 0.1], [0.25, 0.75]])
    np.testing.assert_allclose(apply_temperature(p, 1.0), p, atol=1e-11)
    np.testing.assert_allclose(apply_temperature(p, 2.0)[0], [0.75, 0.25])


# --- vector scaling -------------------------------------------------------------------------------------------


@given(probs_and_labels(n=st.integers(1, 20), c=st.integers(2, 6)), st.floats(0.05, 20.0))
def test_vector_scaling_with_equal_temperatures_is_temperature_scaling(pl, t):
    """For any probs, vector scaling with every T_c = T equals temperature scaling with T."""
    p, _ = pl
    np.testing.assert_allclose(apply_vector_scaling(p, np.full(p.shape[1], t)), apply_temperature(p, t), atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_vector_scaling_is_at_least_as_good_as_temperature_scaling(seed):
    """Vector scaling contains temperature scaling, so its fitted NLL is no higher; and it is a stationary point."""
    p, y = _random_problem(seed, n=600, c=5)
    ts = fit_temperature(p, y)
    vs = fit_vector_scaling(p, y)
    assert vs.nll_after <= ts.nll_after + 1e-9
    assert vs.nll_before == pytest.approx(ts.nll_before, abs=1e-12)
    q = apply_vector_scaling(p, vs.temperatures)
    assert vs.nll_after == pytest.approx(float(-np.mean(np.log(q[np.arange(len(y)), y]))), abs=1e-10)
    for c in range(p.shape[1]):  # no single-class nudge improves it
        for f in (0.99, 1.01):
            t2 = vs.temperatures.copy()
            t2[c] *= f
            q2 = apply_vector_scaling(p, t2)
            assert -np.mean(np.log(q2[np.arange(len(y)), y])) >= vs.nll_after - 1e-9


def test_vector_scaling_recovers_per_class_temperatures():
    """Labels sampled from softmax(L / T_true) with per-class T_true: the fit recovers T_true roughly."""
    rng = np.random.default_rng(2)
    n, c = 20_000, 3
    t_true = np.array([0.5, 1.0, 2.0])
    s = np.log(softmax64(2.0 * rng.normal(size=(n, c))))
    s -= s.max(axis=1, keepdims=True)
    q = softmax64(s / t_true)
    y = (rng.uniform(size=(n, 1)) > np.cumsum(q, axis=1)).sum(axis=1)
    vs = fit_vector_scaling(np.exp(s) / np.exp(s).sum(axis=1, keepdims=True), y)
    np.testing.assert_allclose(vs.temperatures, t_true, rtol=0.1)
    assert vs.to_dict()["temperatures"] == [float(t) for t in vs.temperatures]


# --- errors ---------------------------------------------------------------------------------------------------

_P = np.array([[0.7, 0.3], [0.4, 0.6]])
_Y = np.array([0, 1])


@pytest.mark.parametrize(
    ("call", "exc", "name"),
    [
        (lambda: fit_temperature(np.array([[np.nan, 1.0], [0.5, 0.5]]), _Y), ValueError, "probs"),
        (lambda: fit_temperature(_P[0], _Y), ValueError, "probs"),
        (lambda: fit_temperature(_P, np.array([0, 2])), ValueError, "labels"),
        (lambda: fit_temperature(np.array([[0.7, 0.2], [0.4, 0.6]]), _Y), ValueError, "probs"),
        (lambda: fit_temperature(np.array([[3.0, -1.0], [0.4, 0.6]]), _Y), ValueError, "probs"),
        (lambda: fit_temperature(_P.astype(np.int64), _Y), TypeError, "probs"),
        (lambda: fit_temperature(_P, _Y.astype(float)), TypeError, "labels"),
        (lambda: fit_temperature(_P, np.array([0, 1, 1])), ValueError, "labels"),
        (lambda: fit_temperature(_P, _Y, eps=0.0), ValueError, "eps"),
        (lambda: fit_temperature(_P, _Y, bounds=(2.0, 3.0)), ValueError, "bounds"),
        (lambda: fit_temperature(_P, _Y, bounds=5.0), ValueError, "bounds"),
        (lambda: fit_temperature_from_logits(np.array([[np.inf, 0.0], [0.0, 1.0]]), _Y), ValueError, "logits"),
        (lambda: fit_ensemble_temperature(_P, _Y), ValueError, "member_probs"),
        (lambda: fit_ensemble_temperature(_P[None], _Y, placement="pre"), ValueError, "placement"),
        (lambda: apply_temperature(_P, 0.0), ValueError, "temperature"),
        (lambda: apply_temperature(_P, np.nan), ValueError, "temperature"),
        (lambda: apply_vector_scaling(_P, np.array([1.0])), ValueError, "temperatures"),
        (lambda: apply_vector_scaling(_P, np.array([1.0, -1.0])), ValueError, "temperatures"),
        (lambda: fit_vector_scaling(_P, np.array([0, 5])), ValueError, "labels"),
    ],
)
def test_errors_name_the_argument(call, exc, name):
    with pytest.raises(exc, match=name):
        call()


def test_logits_fit_checks_labels_and_bounds_before_scanning_the_values():
    """fit_temperature_from_logits validates shapes, labels and bounds first and scans the logits' values last
    (its fast path finds a non-finite entry on its own): with both a non-finite logit and a bad argument, the
    message names the argument; with only the logit, the logit."""
    from ubench.metrics.temperature import fit_temperature_from_logits

    z = np.zeros((5, 3))
    z[3, 1] = np.inf
    y = np.zeros(5, dtype=int)
    for kwargs, labels, message in ((dict(), y[:4], "logits has 5 samples but labels has 4"),
                                    (dict(), np.array([0, 1, 2, 3, 0]), "labels must be in [0, 3); found 3 at index 3"),
                                    (dict(bounds=(2.0, 3.0)), y, "bounds must satisfy 0 < t_min < 1 < t_max"),
                                    (dict(), y, "logits must be finite; found inf at index (3, 1)")):
        with pytest.raises(ValueError) as ei:
            fit_temperature_from_logits(z, labels, **kwargs)
        assert str(ei.value).startswith(message)
