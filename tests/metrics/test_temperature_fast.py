# SPDX-License-Identifier: MIT
"""The large-input logits fit (one scalar shift, float32 exponentials, Taylor-certified root) on adversarial
inputs, against an independent float64 bracketing minimisation of the same NLL (scipy ``minimize_scalar``), and
its fused validation: a non-finite logit anywhere gives the same error as the plain finiteness check."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize, special
from strategies import peaked_logits

from ubench.metrics import temperature_solver as S
from ubench.metrics.temperature import fit_temperature_from_logits

N, C = 20_000, 20
BOUNDS = (0.01, 100.0)


def _nll(z: np.ndarray, y: np.ndarray, t: float) -> float:
    u = z.astype(np.float64) / t
    return float(np.mean(special.logsumexp(u, axis=1) - u[np.arange(len(y)), y]))


def _oracle(z: np.ndarray, y: np.ndarray, bounds=BOUNDS) -> tuple[float, float]:
    """(T, NLL at T): scipy's bounded (Brent) search on log(1/T) over ``bounds``, float64, tight tolerance."""
    res = optimize.minimize_scalar(lambda lb: _nll(z, y, np.exp(-lb)), bounds=(-np.log(bounds[1]), -np.log(bounds[0])),
                                   method="bounded", options={"xatol": 1e-11})
    return float(np.exp(-res.x)), float(res.fun)


def _problem(seed, scale, peak, flip, n=N, c=C):
    return peaked_logits(seed, scale, peak, flip, n, c)


def _t_large():
    return _problem(1, 3.0, 0.4, 0.0)  # labels barely informative: T* in the tens


def _t_small():
    z, y = _problem(2, 1.0, 3.0, 0.1)
    return 0.03 * z, y  # underconfident: T* near 0.03, the exponents beta * s in the tens


def _one_class_dominant():
    z, y = _problem(3, 2.0, 4.0, 0.1)
    rng = np.random.default_rng(30)
    z[:, 0] += 12.0  # class 0 tops every row...
    y = np.where(rng.random(N) < 0.9, 0, y)  # ...and is the label of 90 % of them
    return z, y


def _ties():
    z, y = _problem(4, 1.5, 3.0, 0.2)
    z[: N // 3] = 0.7  # a third of the rows: all classes tied (uniform at every T)
    z[N // 3: N // 2, 1] = z[N // 3: N // 2, 0] = z[N // 3: N // 2].max(axis=1) + 1.0  # two-way tie at the top
    return z, y


def _row_offsets():
    z, y = _problem(5, 2.0, 5.0, 0.1)
    return z + np.random.default_rng(50).normal(0.0, 300.0, (N, 1)), y  # rows hundreds apart: no shared shift


def _float32_large_offset():
    z, y = _problem(6, 2.0, 5.0, 0.1)
    return (z + 1.0e4).astype(np.float32), y  # one shift serves every row; s = x - c is exact near c


CASES = {"T large": _t_large, "T small": _t_small, "one class dominant": _one_class_dominant, "ties": _ties,
         "row offsets": _row_offsets, "float32 offset 1e4": _float32_large_offset}


@pytest.mark.parametrize("case", list(CASES))
def test_adversarial_inputs_match_the_bracketing_oracle(case):
    z, y = CASES[case]()
    fit = fit_temperature_from_logits(z, y, bounds=BOUNDS)
    t_ref, nll_ref = _oracle(z, y)
    assert not fit.hit_bound
    assert fit.temperature == pytest.approx(t_ref, rel=1e-6)
    assert fit.nll_after == pytest.approx(nll_ref, abs=1e-7 * max(1.0, nll_ref))
    assert fit.nll_before == pytest.approx(_nll(z, y, 1.0), rel=1e-6)
    assert fit.nll_after <= fit.nll_before


def test_adversarial_regimes_are_what_they_say():
    """The fixtures reach the regimes their names claim (else the test above would not cover them)."""
    assert _oracle(*_t_large())[0] > 10.0
    assert _oracle(*_t_small())[0] < 0.2


def test_uninformative_labels_hit_the_upper_bound():
    rng = np.random.default_rng(7)
    z, y = rng.normal(size=(N, C)) * 3.0, rng.integers(0, C, N)  # labels independent of the logits
    t_ref, nll_ref = _oracle(z, y)
    fit = fit_temperature_from_logits(z, y, bounds=BOUNDS)
    assert t_ref == pytest.approx(BOUNDS[1], rel=1e-3)
    assert fit.hit_bound and fit.temperature == BOUNDS[1]
    assert fit.nll_after == pytest.approx(_nll(z, y, BOUNDS[1]), abs=1e-9)


@pytest.mark.parametrize("right", [True, False])
def test_one_sample(right):
    """N = 1 (the small-input solver): a right top-1 sharpens to the lower bound, a wrong one flattens to the
    upper (the NLL is monotone in T with its infimum at the end); the oracle finds no lower NLL (it stops where
    the NLL is flat to rounding: about 3e-16 at T = 0.04 for the right one)."""
    z = np.array([[2.0, 0.5, -1.0]])
    y = np.array([0 if right else 2])
    fit = fit_temperature_from_logits(z, y, bounds=BOUNDS)
    _, nll_ref = _oracle(z, y)
    assert fit.hit_bound and fit.temperature == (BOUNDS[0] if right else BOUNDS[1])
    assert fit.nll_after == pytest.approx(_nll(z, y, fit.temperature), abs=1e-12)
    assert fit.nll_after <= nll_ref + 1e-12


def test_one_sample_all_tied_keeps_t_one():
    fit = fit_temperature_from_logits(np.zeros((1, 4)), np.array([2]))
    assert fit.temperature == 1.0 and fit.nll_after == pytest.approx(np.log(4.0), abs=1e-12)


def test_the_fast_path_certifies_the_bench_like_problem_in_one_pass(monkeypatch):
    """On a well-posed large problem the answer comes from the fast path's first pass (no float64 solve)."""
    z, y = _problem(8, 3.6, 7.2, 0.0, n=4 * S._WARM_START_ROWS, c=50)
    z = z.astype(np.float32)
    passes = []
    real = S._shifted_pass
    monkeypatch.setattr(S, "_shifted_pass", lambda x, *a: passes.append(x.shape[0]) or real(x, *a))
    fit = S._fit_logits_fast(z, y, BOUNDS)
    assert fit is not None and passes.count(z.shape[0]) == 1
    assert fit.temperature == pytest.approx(_oracle(z, y)[0], rel=1e-6)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("at_label", [True, False])
def test_non_finite_logit_in_a_large_input_names_its_index(bad, at_label):
    z, y = _problem(9, 2.0, 4.0, 0.1)
    z = z.astype(np.float32)
    i = 12_345
    j = int(y[i]) if at_label else (int(y[i]) + 1) % C
    z[i, j] = bad
    with pytest.raises(ValueError, match=rf"logits must be finite; found {bad} at index \({i}, {j}\)"):
        fit_temperature_from_logits(z, y)
