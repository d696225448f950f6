# SPDX-License-Identifier: MIT
"""Vector scaling (``metrics/vector_scaling.py``) against an independent float64 minimisation of its objective
(scipy's Nelder-Mead on the NLL written here from the docstring), its bounds and ``hit_bound`` by hand, and its
errors' messages."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize, special

from ubench.metrics.vector_scaling import apply_vector_scaling, fit_vector_scaling


def _data(seed=0, n=400, c=3):
    """Labels drawn from softmax(z) while the stored probabilities are softmax(z * [2, 1, 0.5]): each class needs
    its own temperature (about 2, 1 and 0.5)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0.0, 1.5, (n, c))
    y = np.array([rng.choice(c, p=row) for row in special.softmax(z, axis=1)])
    return special.softmax(z * np.array([2.0, 1.0, 0.5])[:c], axis=1), y


def _nll(temperatures, probs, labels, eps=1e-12):
    """Mean NLL of softmax(L / T), L = log(p + eps) minus its row max (the docstring's objective)."""
    logp = np.log(probs + eps)
    z = (logp - logp.max(axis=1, keepdims=True)) / temperatures
    return float(np.mean(special.logsumexp(z, axis=1) - z[np.arange(len(labels)), labels]))


def test_fit_equals_an_independent_minimisation():
    """The fitted temperatures minimise the NLL to 1e-6 relative (Nelder-Mead over log T, tight tolerances),
    nll_before is the NLL at T = 1 and nll_after at the fit, and no temperature is at a bound."""
    p, y = _data()
    fit = fit_vector_scaling(p, y)
    ref = optimize.minimize(lambda lt: _nll(np.exp(lt), p, y), np.zeros(3), method="Nelder-Mead",
                            options={"xatol": 1e-10, "fatol": 1e-14, "maxiter": 20_000, "maxfev": 40_000})
    np.testing.assert_allclose(fit.temperatures, np.exp(ref.x), rtol=1e-5)
    assert fit.nll_after == pytest.approx(_nll(fit.temperatures, p, y), rel=1e-12)
    assert fit.nll_before == pytest.approx(_nll(np.ones(3), p, y), rel=1e-12)
    assert fit.nll_after <= ref.fun + 1e-12
    assert fit.hit_bound is False
    np.testing.assert_allclose(apply_vector_scaling(p, fit.temperatures),
                               special.softmax((np.log(p + 1e-12) - np.log(p + 1e-12).max(1, keepdims=True))
                                               / fit.temperatures, axis=1), rtol=1e-12)


def test_bounds_and_hit_bound():
    """Inside narrow bounds (0.9, 1.1) exactly the classes whose free temperature (near 2, 1, 0.5) lies outside
    them sit on a bound (|log T - log bound| <= 1e-6) and hit_bound is True (a bool); within (0.2, 5) and (0.9, 50),
    where every log T is interior but some within 1 of a bound, the fit is the free one and hit_bound False."""
    p, y = _data()
    free = fit_vector_scaling(p, y).temperatures
    narrow = fit_vector_scaling(p, y, bounds=(0.9, 1.1))
    assert narrow.hit_bound is True
    assert np.all((narrow.temperatures >= 0.9 * (1 - 1e-9)) & (narrow.temperatures <= 1.1 * (1 + 1e-9)))
    at = np.isclose(np.log(narrow.temperatures), np.log([1.1, 0.9]).reshape(2, 1), rtol=0, atol=1e-6).any(axis=0)
    assert at.tolist() == [f < 0.9 or f > 1.1 for f in free]
    for bounds in ((0.2, 5.0), (0.9, 50.0)):  # every class interior, some log T within 1 of the lower / upper
        wide = fit_vector_scaling(p, y, bounds=bounds)
        np.testing.assert_allclose(wide.temperatures, free, rtol=1e-6)
        assert wide.hit_bound is False
    rng = np.random.default_rng(1)  # underconfident probabilities: every T < 1 (log T within |log bound| of it)
    z = rng.normal(0.0, 2.0, (400, 3))
    y_sharp = np.array([rng.choice(3, p=row) for row in special.softmax(z, axis=1)])
    under = fit_vector_scaling(special.softmax(0.4 * z, axis=1), y_sharp, bounds=(0.2, 5.0))
    assert np.all(under.temperatures < 0.9) and under.hit_bound is False


@pytest.mark.parametrize(("temperatures", "message"), [
    ([1.0, np.nan, 1.0], "temperatures must be finite and positive; found nan at index 1"),
    ([1.0, 2.0, 0.0], "temperatures must be finite and positive; found 0.0 at index 2"),
    ([-1.0, 2.0, 1.0], "temperatures must be finite and positive; found -1.0 at index 0"),
    ([1.0, 2.0], "temperatures must be a real array of shape (3,); found dtype float64, shape (2,)"),
    (["a", "b", "c"], "temperatures must be a real array of shape (3,); found dtype <U1, shape (3,)"),
])
def test_apply_refuses_bad_temperatures(temperatures, message):
    with pytest.raises(ValueError) as ei:
        apply_vector_scaling(np.full((2, 3), 1 / 3), np.asarray(temperatures))
    assert str(ei.value) == message
    assert apply_vector_scaling(np.full((2, 3), 1 / 3), np.array([1, 2, 3])).dtype == np.float64  # integers


def test_fit_refuses_mismatched_samples():
    with pytest.raises(ValueError) as ei:
        fit_vector_scaling(np.full((4, 3), 1 / 3), np.zeros(3, dtype=int))
    assert str(ei.value) == "probs has 4 samples but labels has 3"


def test_gradient_equals_finite_differences_away_from_the_start():
    """The analytic gradient in log(1/T_c) against central differences of the NLL written from the docstring, at
    points where every 1/T_c differs from 1 (at the start, 1/T = 1, a gradient in 1/T and one in log(1/T) agree,
    so a slip in the chain rule shows only away from it)."""
    from ubench.metrics.temperature_solver import _prep_probs
    from ubench.metrics.vector_scaling import _vector_nll_grad

    p, y = _data(seed=4, n=200)
    s = _prep_probs(p, 1e-12)[0]
    for log_beta in (np.array([0.7, -0.4, 1.3]), np.array([-1.5, 0.2, 0.9])):
        nll, grad = _vector_nll_grad(log_beta, s, y)
        assert nll == pytest.approx(_nll(np.exp(-log_beta), p, y), rel=1e-12)
        h = 1e-6
        numeric = [(_nll(np.exp(-(log_beta + h * e)), p, y) - _nll(np.exp(-(log_beta - h * e)), p, y)) / (2 * h)
                   for e in np.eye(3)]
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("side", ["upper", "lower"])
def test_hit_bound_means_within_1e_6_of_a_bound_in_log_t(side):
    """hit_bound is |log T_c - log bound| <= 1e-6, absolute (the fit's convention): a bound placed 5e-7 beyond the
    free optimum (interior, so the fit is the free one) counts as hit, one 3e-6 beyond does not. Overconfident
    probabilities (every T > 1) put the upper bound to the test, underconfident ones (every T < 1) the lower."""
    rng = np.random.default_rng(3)
    z = rng.normal(0.0, 1.5, (600, 3))
    y = np.array([rng.choice(3, p=row) for row in special.softmax(z, axis=1)])
    p = special.softmax(z * (np.array([3.0, 0.4, 1.0]) if side == "upper" else 0.4), axis=1)
    free = fit_vector_scaling(p, y).temperatures
    assert np.all(free > 1.5) if side == "upper" else np.all(free < 0.5)  # |log bound| > 0.4
    for gap, hit in ((5e-7, True), (3e-6, False)):
        bounds = (0.01, free.max() * np.exp(gap)) if side == "upper" else (free.min() * np.exp(-gap), 100.0)
        fit = fit_vector_scaling(p, y, bounds=bounds)
        np.testing.assert_allclose(fit.temperatures, free, rtol=1e-8)
        assert fit.hit_bound is hit, (side, gap)
