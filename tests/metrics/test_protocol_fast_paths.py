# SPDX-License-Identifier: MIT
"""The fast paths of test-time CV temperature scaling (``post``), against independent oracles.

``cross_validated_calibration`` fits the folds of sets with at least 256 rows per half from shared per-row
cumulants (a Taylor model of each fold's gradient, certified or refitted exactly) and scores each halving in
one pass; the member stack is validated and averaged in one read. Oracles: the protocol restated with scipy
(``scipy.special.log_softmax`` and bounded Brent, as in ``test_protocol.py``), closed forms of a two-point
softmax, and NumPy's own float64 mean and ``check_member_probs``.
"""

from __future__ import annotations

import numpy as np
import oracles
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import optimize, special
from strategies import softmax64

from ubench.metrics import _validation, protocol
from ubench.metrics._validation import check_member_probs, check_member_probs_mean
from ubench.metrics.protocol import cross_validated_calibration
from ubench.metrics.temperature_solver import _root_from_cumulants, _row_cumulants

EPS = 1e-12


def _scipy_cv(mp, y, n_repeats, seed, fit_rows=None):
    """Per fold: [held-out CLL, T, Brier after, ECE after, conf-free accuracy after] from the formulas (scipy);
    each fold's fitting rows are appended to ``fit_rows`` when given."""
    log_mean = np.log(mp.mean(axis=0) + EPS)
    rng = np.random.default_rng(seed)
    n = len(y)
    out = []
    for _ in range(n_repeats):
        perm = rng.permutation(n)
        a, b = np.sort(perm[: n // 2]), np.sort(perm[n // 2:])
        for fit, ev in ((a, b), (b, a)):
            if fit_rows is not None:
                fit_rows.append(fit)

            def nll(log_t, rows=fit):
                return -np.mean(special.log_softmax(log_mean[rows] / np.exp(log_t), axis=1)[np.arange(len(rows)),
                                                                                            y[rows]])
            t = float(np.exp(optimize.minimize_scalar(nll, bounds=(np.log(0.01), np.log(100.0)), method="bounded",
                                                      options={"xatol": 1e-11}).x))
            q = special.softmax(log_mean[ev] / t, axis=1)
            brier = np.mean(np.sum((q - np.eye(q.shape[1])[y[ev]]) ** 2, axis=1))
            conf, hit = q.max(axis=1), (q.argmax(axis=1) == y[ev])
            edges = np.linspace(0, 1, 16)
            ece = sum(np.mean((conf > lo) & (conf <= hi)) * abs(conf[(conf > lo) & (conf <= hi)].mean()
                                                                  - hit[(conf > lo) & (conf <= hi)].mean())
                      for lo, hi in zip(edges[:-1], edges[1:]) if np.any((conf > lo) & (conf <= hi)))
            out.append([np.mean(np.log(q[np.arange(len(ev)), y[ev]])), t, brier, ece])
    return np.array(out)


def _ensemble(seed, m, n, c, sharp=2.0, noise=0.8):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    base = rng.normal(size=(n, c))
    base[np.arange(n), y] += 1.2
    return softmax64(sharp * (base[None] + noise * rng.normal(size=(m, n, c)))), y


@pytest.mark.parametrize("n, c", [(1200, 5), (3000, 20), (520, 3)])
def test_cumulant_fold_fits_match_the_scipy_protocol(n, c):
    """Sets large enough for the shared per-row statistics (>= 256 rows a half; 520 rows: folds far apart)."""
    mp, y = _ensemble(n + c, 3, n, c)
    res = cross_validated_calibration(mp, y, n_repeats=3, seed=11)
    ref = _scipy_cv(mp, y, 3, 11)
    np.testing.assert_allclose(res.temperatures, ref[:, 1], rtol=1e-6)
    assert res.cll == pytest.approx(ref[:, 0].mean(), abs=1e-9)
    assert res.calibrated_brier == pytest.approx(ref[:, 2].mean(), abs=1e-9)
    assert res.calibrated_ece == pytest.approx(ref[:, 3].mean(), abs=1e-7)  # ECE moves with T (bins): as test_protocol
    assert res.n_hit_bound == 0


def test_a_start_far_from_the_optimum_still_gives_the_exact_fits(monkeypatch):
    """The expansion point comes from a sub-sample; start it 40 % off (every model uncertain at first): the
    re-expansion or the exact solver must still find every fold's optimum."""
    mp, y = _ensemble(5, 2, 1500, 6)
    ref = _scipy_cv(mp, y, 2, 3)
    real = protocol._minimize_beta
    calls = []

    def far_start(evaluate, lo, hi, beta0, rtol, polish=False):
        beta, nll, hit = real(evaluate, lo, hi, beta0, rtol, polish)
        calls.append(rtol)
        return (beta * 1.4 if rtol == 1e-3 else beta), nll, hit  # only the sub-sample start is 1e-3

    monkeypatch.setattr(protocol, "_minimize_beta", far_start)
    res = cross_validated_calibration(mp, y, n_repeats=2, seed=3)
    assert 1e-3 in calls  # the sub-sample start ran (the cumulant path was taken)
    np.testing.assert_allclose(res.temperatures, ref[:, 1], rtol=1e-6)
    assert res.cll == pytest.approx(ref[:, 0].mean(), abs=1e-9)


def _separable_set():
    """(member stack (1, 600, 3), labels): every label the argmax, by more than the logits' whole range."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 600)
    z = rng.normal(size=(600, 3))
    z[np.arange(600), y] += 3.0 + np.abs(z).max()
    return softmax64(z)[None], y


def test_separable_large_set_reports_the_bound():
    """Every label the argmax on 600 rows: each fold's NLL falls as T -> 0 (no root), so every fold reports the
    lower bound exactly, through the exact solver, never a NaN."""
    res = cross_validated_calibration(*_separable_set(), n_repeats=2)
    assert res.n_hit_bound == 4 and all(t == 0.01 for t in res.temperatures)
    assert np.isfinite(res.cll)


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(512, 1400), st.integers(2, 6), st.floats(0.3, 4.0))
@example(seed=141, n=695, c=3, sharp=1.75)  # random labels: T = 66.07355 vs scipy's 66.07348, the same NLL
def test_cll_matches_scipy_on_sets_that_take_the_fast_path(seed, n, c, sharp):
    rng = np.random.default_rng(seed)
    mp = softmax64(sharp * rng.normal(size=(2, n, c)))
    y = rng.integers(0, c, n)
    res = cross_validated_calibration(mp, y, n_repeats=2)
    fits = []
    ref = _scipy_cv(mp, y, 2, 0, fits)
    if np.all((ref[:, 1] > 0.0101) & (ref[:, 1] < 99.0)):  # at a bound Brent stops near, not at, it
        log_mean = np.log(mp.mean(axis=0) + EPS)
        for t, t_ref, rows in zip(res.temperatures, ref[:, 1], fits):  # flat optima (T ~ 66) agree by their NLL
            oracles.assert_same_temperature_optimum(log_mean[rows], y[rows], t, t_ref)
        assert res.cll == pytest.approx(ref[:, 0].mean(), abs=1e-8)
        assert res.calibrated_brier == pytest.approx(ref[:, 2].mean(), abs=1e-8)


def test_root_from_cumulants_against_a_two_point_closed_form():
    """Two classes, s = (0, -d): the mean gradient at beta is d * sigmoid(-beta d) - mean(-s_y), and its root
    is beta* = log((1 - f) / f) / d for a fraction f of rows labelled with the second class (closed form).
    Near the root the certified model returns it to 1e-9; 50 % away it declines (None)."""
    d, f, n = 2.0, 0.2, 1000
    s = np.tile([0.0, -d], (n, 1))
    s_y = np.where(np.arange(n) < f * n, -d, 0.0)
    beta_star = np.log((1 - f) / f) / d
    for start, certified in ((beta_star * 1.02, True), (beta_star * 1.5, False)):
        kap = _row_cumulants(s, start, 5)
        kap[1] -= s_y
        beta = _root_from_cumulants(kap[1:].mean(axis=1), start, 0.01, 100.0, 1e-7)
        if certified:
            assert beta == pytest.approx(beta_star, rel=1e-9)
        else:
            assert beta is None


def test_row_cumulants_against_scipy_moments():
    """log Z and cumulants 1..5 of s under softmax(beta s), per row, against a direct float64 computation."""
    rng = np.random.default_rng(1)
    s = np.log(softmax64(3 * rng.normal(size=(50, 7))) + EPS)
    s -= s.max(axis=1, keepdims=True)
    beta = 0.7
    got = _row_cumulants(s, beta, 5)
    p = special.softmax(beta * s, axis=1)
    mean = (p * s).sum(1)
    mu = [((p * (s - mean[:, None]) ** k).sum(1)) for k in range(6)]
    expected = [special.logsumexp(beta * s, axis=1), mean, mu[2], mu[3], mu[4] - 3 * mu[2] ** 2,
                mu[5] - 10 * mu[3] * mu[2]]
    for k in range(6):
        np.testing.assert_allclose(got[k], expected[k], rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("block_elems", [None, 64])  # one block; blocks of 12 rows (the error in a later block)
def test_one_read_mean_equals_numpy_and_checks_like_the_reference(monkeypatch, block_elems):
    if block_elems is not None:
        monkeypatch.setattr(_validation, "_MEAN_BLOCK_ELEMS", block_elems)
    mp, _ = _ensemble(2, 4, 700, 5)
    mp32 = mp.astype(np.float32)
    arr, mean = check_member_probs_mean(mp32)
    assert arr is mp32
    np.testing.assert_array_equal(mean, np.add.reduce(mp32, axis=0, dtype=np.float64) / 4)
    out_of_range = np.array([1.25, -0.25, 0.0, 0.0, 0.0], np.float32)  # sums to 1: only the range check sees it
    for bad, value in (((2, 650, 1), -0.1), ((3, 5, 0), np.nan), ((1, 300, 2), 0.9), ((2, 650), out_of_range)):
        broken = mp32.copy()
        broken[bad] = value
        with pytest.raises(ValueError) as ref_err:
            check_member_probs(broken)
        with pytest.raises(ValueError) as got_err:
            check_member_probs_mean(broken)
        assert str(got_err.value) == str(ref_err.value)
        assert str(bad[0]) in str(got_err.value)
