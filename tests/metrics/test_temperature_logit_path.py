# SPDX-License-Identifier: MIT
"""Which path fits a large logits set (``temperature_solver._fit_logits_fast``), and that it certifies before it
answers.

Its docstring's contract: a start fitted on a strided sub-sample, then passes over the logits whose Taylor model
of dNLL/dbeta gives the answer only once ``_root_from_cumulants`` certifies it to 1e-7; an uncertified root only
centres the next pass; an optimum at or beyond a bound is left to the float64 solver, which reports the bound.
The answers are pinned against scipy's bounded Brent search in float64 (``test_temperature_fast._oracle``), and
the passes counted with a spy that calls the real kernel. Written for the mutants of ``_fit_logits_fast`` that
survived ``bench/bench_mutation.py`` (issue #27, item 8): an uncertified first root returned as the answer, and a
search interval twice too wide or too narrow, pass every value test where the start is already good.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_temperature_fast import _oracle, _problem

from ubench.metrics import temperature_solver as S
from ubench.metrics.temperature import fit_temperature_from_logits

N = 4 * S._WARM_START_ROWS


def _count_passes(monkeypatch):
    passes = []
    real = S._shifted_pass
    monkeypatch.setattr(S, "_shifted_pass", lambda x, *a: passes.append(x.shape[0]) or real(x, *a))
    return passes


@pytest.mark.parametrize("factor", [0.7, 1.3])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_far_start_takes_a_second_pass_and_returns_the_certified_root(monkeypatch, factor, dtype):
    """The start 30 % off: the first pass's root is further than 10 % from it, so it is not certified and only
    centres a second pass, whose certified root is the answer (to 1e-6 of scipy's optimum; the first root alone
    is off by more)."""
    z, y = _problem(8, 3.6, 7.2, 0.0, n=N, c=50)
    z = z.astype(dtype)
    real_start = S._start_from_subsample
    monkeypatch.setattr(S, "_start_from_subsample",
                        lambda x, labels, lo, hi: (lambda b, c: (b * factor, c))(*real_start(x, labels, lo, hi)))
    passes = _count_passes(monkeypatch)
    fit = S._fit_logits_fast(z, y, (0.01, 100.0))
    t_ref, nll_ref = _oracle(z.astype(np.float64), y, (0.01, 100.0))
    assert fit is not None and fit.path == "logit_passes" and passes.count(N) == 2
    assert fit.temperature == pytest.approx(t_ref, rel=1e-6)
    assert fit.nll_after == pytest.approx(nll_ref, rel=1e-6)


def test_an_optimum_within_the_bounds_near_t_max_is_the_fast_paths():
    """T* about 22 (labels barely informative) with t_max = 40: inside the interval, above t_max / 2, so the fast
    path answers (a search interval halved at its top would send it to the float64 solver, which says "newton")."""
    z, y = _problem(1, 3.0, 0.4, 0.0, n=N, c=20)
    t_ref, _ = _oracle(z, y, (0.01, 40.0))
    assert 20.0 < t_ref < 40.0
    fit = fit_temperature_from_logits(z, y, bounds=(0.01, 40.0))
    assert fit.path == "logit_passes" and fit.hit_bound is False
    assert fit.temperature == pytest.approx(t_ref, rel=1e-6)


def test_an_optimum_below_t_min_is_reported_at_t_min_by_the_float64_solver():
    """T* about 0.017 with t_min = 0.03 (below the bound, above half of it): the optimum lies beyond the bound, so
    the fast path declines and the float64 solver reports t_min exactly, at the bound."""
    z, y = _problem(2, 1.0, 3.0, 0.1, n=N, c=20)
    z = 0.03 * z
    t_free, _ = _oracle(z, y, (0.01, 100.0))
    assert 0.015 < t_free < 0.03
    fit = fit_temperature_from_logits(z, y, bounds=(0.03, 100.0))
    assert (fit.temperature, fit.hit_bound, fit.path) == (0.03, True, "newton")
