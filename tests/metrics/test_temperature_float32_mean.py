# SPDX-License-Identifier: MIT
"""Temperature scaling where the mutation run of metrics/temperature.py found it untested
(bench/bench_mutation.py): a float32 member stack is averaged in float64 (``post``: the fit and the rescaled
probabilities equal those of its float64 copy, scipy), the documented size of the logit-pass path, and the
checks of temperature, bounds and eps with their wording."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import log_softmax, softmax
from strategies import softmax64

from ubench import metrics as M
from ubench.metrics.temperature import DEFAULT_EPS


def _stack32(seed=0, m=3, n=400, c=6):
    rng = np.random.default_rng(seed)
    p = softmax64(rng.normal(scale=3.0, size=(m, n, c))).astype(np.float32)
    y = p.astype(np.float64).mean(0).argmax(1)
    flip = rng.random(n) < 0.3
    y[flip] = rng.integers(0, c, flip.sum())
    return p, y


def test_post_fit_of_a_float32_stack_is_the_fit_of_its_float64_copy():
    p32, y = _stack32()
    got = M.fit_ensemble_temperature(p32, y)
    assert not got.hit_bound
    mean64 = p32.astype(np.float64).mean(0)
    # the NLL of softmax(log(mean + eps)) at T = 1: the mean renormalised (float32 rows sum to 1 within ~1e-7)
    before = -np.mean(log_softmax(np.log(mean64 + DEFAULT_EPS), axis=1)[np.arange(len(y)), y])
    assert got.nll_before == pytest.approx(before, rel=1e-13)
    want = M.fit_ensemble_temperature(p32.astype(np.float64), y)
    assert (got.temperature, got.nll_before, got.nll_after) == pytest.approx(
        (want.temperature, want.nll_before, want.nll_after), rel=1e-12)


@pytest.mark.parametrize("t", [0.5, 2.5])
def test_post_apply_to_a_float32_stack_rescales_its_float64_mean(t):
    """softmax(log(mean + eps) / T) with the mean taken in float64 (scipy's softmax)."""
    p32, _ = _stack32(seed=1)
    got = M.apply_ensemble_temperature(p32, t)
    want = softmax(np.log(p32.astype(np.float64).mean(0) + DEFAULT_EPS) / t, axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def test_fit_ensemble_temperature_errors_name_the_arguments():
    p32, y = _stack32(n=5)
    with pytest.raises(ValueError, match=r"^member_probs has 5 samples but labels has 4$"):
        M.fit_ensemble_temperature(p32, y[:4])


def test_logit_passes_start_at_16384_rows():
    """The documented size of the large-input path: N >= 16384 rows fit in logit passes (a certified answer on
    this well-conditioned input), one row fewer by Newton on the float64 log-softmax."""
    rng = np.random.default_rng(0)
    z = rng.normal(scale=2.0, size=(16384, 10)).astype(np.float32)
    y = z.argmax(1)
    flip = rng.random(len(y)) < 0.4
    y[flip] = rng.integers(0, 10, flip.sum())
    assert M.fit_temperature_from_logits(z, y).path == "logit_passes"
    assert M.fit_temperature_from_logits(z[:-1], y[:-1]).path == "newton"


def test_temperature_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"^temperature must be a finite positive number; found 0.0$"):
        M.apply_temperature(np.full((2, 2), 0.5), 0.0)
    with pytest.raises(ValueError, match=r"^logits has 3 samples but labels has 2$"):
        M.fit_temperature_from_logits(np.zeros((3, 2)), np.array([0, 1]))


_BOUNDS_MESSAGE = r"^bounds must satisfy 0 < t_min < 1 < t_max \(finite\); found "
_EPS_MESSAGE = r"^eps must be in \(0, 0.01\); found "


@pytest.mark.parametrize("option, message", [
    *[({"bounds": b}, _BOUNDS_MESSAGE) for b in [(0.0, 10.0), (1.0, 5.0), (0.5, 1.0), (-1.0, 2.0), (0.5, np.inf)]],
    *[({"eps": e}, _EPS_MESSAGE) for e in [0.0, 1e-2, 0.5, np.nan]],
])
def test_bounds_must_bracket_1_strictly_and_eps_be_in_0_to_1e_2(option, message):
    p = softmax64(np.random.default_rng(2).normal(size=(20, 3)))
    with pytest.raises(ValueError, match=message):
        M.fit_temperature(p, np.zeros(20, int), **option)


def test_bounds_just_around_1_are_accepted():
    """(0.5, 1.5) brackets 1: an overconfident fit stops at 1.5 and says so."""
    rng = np.random.default_rng(3)
    p = softmax64(rng.normal(scale=4.0, size=(200, 4)))
    y = rng.integers(0, 4, 200)
    fit = M.fit_temperature(p, y, bounds=(0.5, 1.5))
    assert fit.temperature == 1.5 and fit.hit_bound


def test_fit_temperature_errors_name_probs_on_both_paths():
    """The sample-count check, and the value check of a 16384-row input (the fused path's own pass)."""
    rng = np.random.default_rng(4)
    p = softmax64(rng.normal(size=(16384, 5))).astype(np.float32)
    y = rng.integers(0, 5, len(p))
    with pytest.raises(ValueError, match=r"^probs has 3 samples but labels has 2$"):
        M.fit_temperature(p[:3], y[:2])
    p[100, 3] = 1.5
    with pytest.raises(ValueError, match=r"^probs must be probabilities in \[0, 1\]; found 1.5 at index \(100, 3\)"):
        M.fit_temperature(p, y)
