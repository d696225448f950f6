# SPDX-License-Identifier: MIT
"""The one-pass temperature fit on large inputs (N >= 4 x the warm-start rows; float32 arithmetic for float32
input) agrees with an independent float64 minimisation of the same objective, across calibration regimes; its
reported NLLs equal the float64 NLL at T = 1 and at the fitted T; and ``TemperatureFit.path`` says which solver
ran (each regime's path is pinned, so a fast path that silently stops certifying fails here)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize, special
from oracles import temperature_nll
from strategies import peaked_logits

from ubench.metrics import temperature as T
from ubench.metrics.temperature import fit_temperature, fit_temperature_from_logits

N, C = 20_000, 50


def _reference_temperature(s: np.ndarray, labels: np.ndarray) -> float:
    """argmin_T of mean(logsumexp(s / T) - s_y / T) by scipy's bounded scalar search on log(1/T), float64."""
    rows = np.arange(len(labels))

    def nll(log_beta):
        t = s * np.exp(log_beta)
        return float(np.mean(special.logsumexp(t, axis=1) - t[rows, labels]))

    res = optimize.minimize_scalar(nll, bounds=(np.log(0.01), np.log(100.0)), method="bounded",
                                   options={"xatol": 1e-11})
    return float(np.exp(-res.x))


def _data(scale: float, peak: float, flip: float, seed: int):
    return peaked_logits(seed, scale, peak, flip, N, C)


REGIMES = [(1.0, 4.0, 0.1), (5.0, 8.0, 0.02), (10.0, 20.0, 0.005), (0.3, 1.0, 0.3), (3.0, 12.0, 0.05)]
#: Which solver the probability fit of each regime ends in (the one-pass path certifies its answer only on the
#: milder regimes; on the three sharper ones float32 probabilities near 0 leave the cubic model short of 1e-7).
PROBS_PATH = {1.0: "newton", 5.0: "newton", 10.0: "newton", 0.3: "one_pass", 3.0: "one_pass"}
#: Relative agreement of the reported NLLs with the float64 NLL: float32 row sums (measured <= 1e-7), float64.
NLL_RTOL = {np.dtype(np.float32): 3e-7, np.dtype(np.float64): 1e-11}


def _assert_nlls(fit, log_probs, labels, rtol):
    """nll_before and nll_after equal the float64 NLL of softmax(log_probs / T) at T = 1 and at the fitted T."""
    assert fit.nll_before == pytest.approx(temperature_nll(log_probs, labels, 1.0), rel=rtol, abs=0)
    assert fit.nll_after == pytest.approx(temperature_nll(log_probs, labels, fit.temperature), rel=rtol, abs=0)


def test_inputs_are_large_enough_for_the_fused_path():
    assert N >= 4 * T._WARM_START_ROWS


@pytest.mark.parametrize("scale,peak,flip", REGIMES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_logits_fit_matches_float64_reference(scale, peak, flip, dtype):
    z, y = _data(scale, peak, flip, seed=int(scale * 10))
    z = z.astype(dtype)
    fit = fit_temperature_from_logits(z, y)
    ref = _reference_temperature(z.astype(np.float64), y)
    assert fit.path == "logit_passes"
    assert fit.temperature == pytest.approx(ref, rel=1e-6)
    assert fit.hit_bound is False and fit.nll_after <= fit.nll_before
    _assert_nlls(fit, z.astype(np.float64), y, NLL_RTOL[z.dtype])


@pytest.mark.parametrize("scale,peak,flip", REGIMES)
def test_fused_probs_fit_matches_float64_reference_of_the_eps_objective(scale, peak, flip):
    z, y = _data(scale, peak, flip, seed=7 + int(scale * 10))
    p = special.softmax(z, axis=1).astype(np.float32)
    p /= p.sum(axis=1, keepdims=True)
    fit = fit_temperature(p, y, eps=1e-12)
    log_probs = np.log(p.astype(np.float64) + 1e-12)
    ref = _reference_temperature(log_probs, y)
    assert fit.path == PROBS_PATH[scale]
    assert fit.temperature == pytest.approx(ref, rel=1e-6)
    assert fit.nll_after <= fit.nll_before and fit.hit_bound is False  # an interior optimum, on either path
    _assert_nlls(fit, log_probs, y, NLL_RTOL[p.dtype])


def test_the_probability_one_pass_starts_at_4_warm_starts():
    """fit_temperature's one-pass path runs from exactly N = 4 x 4096 rows (it certifies there on the 0.3 regime's
    float32 probabilities), one row fewer goes to Newton; both agree with the float64 reference."""
    z, y = _data(0.3, 1.0, 0.3, seed=10)
    p = special.softmax(z, axis=1).astype(np.float32)
    p /= p.sum(axis=1, keepdims=True)
    n = 4 * T._WARM_START_ROWS
    for rows, path in ((n, "one_pass"), (n - 1, "newton")):
        fit = fit_temperature(p[:rows], y[:rows], eps=1e-12)
        assert fit.path == path
        ref = _reference_temperature(np.log(p[:rows].astype(np.float64) + 1e-12), y[:rows])
        assert fit.temperature == pytest.approx(ref, rel=1e-6)


def test_large_separable_data_falls_back_to_the_full_solver_and_reports_the_bound():
    """Every label is the clear top class: the NLL keeps falling as T -> 0, the one-pass fit cannot certify an
    interior optimum, and the full solver returns the lower bound with hit_bound set (never NaN)."""
    rng = np.random.default_rng(3)
    y = rng.integers(0, C, N)
    z = rng.normal(size=(N, C)).astype(np.float32)
    z[np.arange(N), y] += 30.0
    fit = fit_temperature_from_logits(z, y)
    assert fit.hit_bound and fit.temperature == pytest.approx(0.01) and fit.path == "newton"
    assert np.isfinite(fit.nll_after) and fit.nll_after <= fit.nll_before
    _assert_nlls(fit, z.astype(np.float64), y, NLL_RTOL[z.dtype])


def test_small_inputs_take_the_newton_path():
    """Below 4 x the warm-start rows neither fast path runs; the float64 solver's NLLs are exact to 1e-12."""
    z, y = _data(1.0, 4.0, 0.1, seed=1)
    z = z[: 4 * T._WARM_START_ROWS - 1]
    y = y[: z.shape[0]]
    fit = fit_temperature_from_logits(z, y)
    assert fit.path == "newton"
    _assert_nlls(fit, z, y, 1e-12)
    p = special.softmax(z, axis=1)
    fit = fit_temperature(p, y)
    assert fit.path == "newton"
    _assert_nlls(fit, np.log(p + 1e-12), y, 1e-12)
