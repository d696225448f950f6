# SPDX-License-Identifier: MIT
"""Which path fits the folds of ``post`` CV temperature scaling, and at what cost (``protocol._post_fold_fits``).

Its docstring states the contract: with at least 256 rows a half, the expansion point is fitted on a strided
sub-sample of about 2,048 rows (every row below 4,096), every fold's 1/T is the certified root of a Taylor model
built from one pass of per-row cumulants, folds left uncertain get at most two more passes at the whole set's
estimated optimum, and only folds still uncertain (or all of them, when the sub-sample's optimum sits at a bound)
are fitted by the exact solver. The numbers alone do not show which path ran: the exact solver gives the same
temperatures, only slower, so a slip that disables the fast path (a sign, a dropped weight, a wrong index) passes
every value test. These tests count the passes and the exact fits with spies that call the real functions, and pin
the temperatures against bounded Brent in scipy (``test_protocol_fast_paths._scipy_cv``), never ubench's solver.
Written for the mutants of ``_post_fold_fits`` that survived ``bench/bench_mutation.py`` (issue #27, item 8).
"""

from __future__ import annotations

import numpy as np
import pytest
from strategies import peaked_logits, softmax64
from test_protocol_fast_paths import _ensemble, _scipy_cv, _separable_set

from ubench.metrics import protocol
from ubench.metrics.protocol import cross_validated_calibration


class _Spy:
    """Counts the cumulant passes, the exact solver's calls (by their tolerance) and the sub-sample's size."""

    def __init__(self, monkeypatch):
        self.passes, self.solves, self.first_rows = 0, [], None
        row_cumulants, minimize, post_eval = protocol._row_cumulants, protocol._minimize_beta, protocol._post_eval

        def counted_cumulants(s, beta, order=5):
            self.passes += 1
            return row_cumulants(s, beta, order)

        def counted_minimize(evaluate, lo, hi, beta0, rtol, polish=False):
            self.solves.append(rtol)
            return minimize(evaluate, lo, hi, beta0, rtol, polish)

        def sized_eval(s, s_y, beta, rows, order=3):
            if self.first_rows is None:
                self.first_rows = s_y.shape[0]
            return post_eval(s, s_y, beta, rows, order)

        monkeypatch.setattr(protocol, "_row_cumulants", counted_cumulants)
        monkeypatch.setattr(protocol, "_minimize_beta", counted_minimize)
        monkeypatch.setattr(protocol, "_post_eval", sized_eval)

    @property
    def exact_fold_fits(self) -> int:
        return sum(r != 1e-3 for r in self.solves)  # the sub-sample's fit is the only one at rtol 1e-3


def _check_against_scipy(mp, y, res, n_repeats, seed):
    ref = _scipy_cv(mp, y, n_repeats, seed)
    np.testing.assert_allclose(res.temperatures, ref[:, 1], rtol=1e-6)
    assert res.cll == pytest.approx(ref[:, 0].mean(), abs=1e-9)


@pytest.mark.parametrize("n, c", [(1200, 5), (2000, 12)])
def test_a_well_behaved_set_is_certified_from_one_pass(monkeypatch, n, c):
    """Every fold's optimum lies within 10 % of the whole set's: one cumulant pass certifies all of them, and the
    exact solver runs once, on the sub-sample (every row here: n < 4,096)."""
    mp, y = _ensemble(n + c, 3, n, c)
    spy = _Spy(monkeypatch)
    res = cross_validated_calibration(mp, y, n_repeats=3, seed=11)
    assert (spy.passes, spy.solves, spy.first_rows) == (1, [1e-3], n)
    _check_against_scipy(mp, y, res, 3, 11)


def test_exactly_256_rows_a_half_take_the_cumulant_path(monkeypatch):
    """The threshold is inclusive: 512 rows (256 a half) go through the shared cumulants."""
    mp, y = _ensemble(3, 2, 512, 4)
    spy = _Spy(monkeypatch)
    res = cross_validated_calibration(mp, y, n_repeats=2, seed=5)
    assert spy.passes >= 1 and spy.solves[0] == 1e-3 and spy.first_rows == 512
    _check_against_scipy(mp, y, res, 2, 5)


def test_below_256_rows_a_half_every_fold_is_fitted_exactly(monkeypatch):
    mp, y = _ensemble(3, 2, 510, 4)
    spy = _Spy(monkeypatch)
    res = cross_validated_calibration(mp, y, n_repeats=2, seed=5)
    assert spy.passes == 0 and spy.exact_fold_fits == 4 and 1e-3 not in spy.solves
    _check_against_scipy(mp, y, res, 2, 5)


@pytest.mark.parametrize("n, stride", [(4095, 1), (4096, 2), (10_000, 4)])
def test_the_expansion_point_is_fitted_on_every_stride_th_row(monkeypatch, n, stride):
    """stride = max(1, n // 2048): the sub-sample holds rows 0, stride, 2 stride, ... (ceil(n / stride) rows)."""
    mp, y = _ensemble(n, 2, n, 3)
    spy = _Spy(monkeypatch)
    cross_validated_calibration(mp, y, n_repeats=1, seed=0)
    assert spy.first_rows == -(-n // stride)


@pytest.mark.parametrize("factor", [0.8, 1.3])
def test_a_start_far_from_the_folds_is_re_expanded_not_refitted(monkeypatch, factor):
    """The sub-sample's optimum moved 20-30 % away: the first pass certifies no fold (each root is further than
    10 % of 1/T), and the second, at the whole set's optimum estimated from the first model's all-rows row,
    certifies all of them: no fold is left to the exact solver (the sub-sample's fit is its only call)."""
    mp, y = _ensemble(1205, 3, 1200, 5)
    spy = _Spy(monkeypatch)
    counted = protocol._minimize_beta

    def far_start(evaluate, lo, hi, beta0, rtol, polish=False):
        beta, nll, hit = counted(evaluate, lo, hi, beta0, rtol, polish)
        return (beta * factor if rtol == 1e-3 else beta), nll, hit

    monkeypatch.setattr(protocol, "_minimize_beta", far_start)
    res = cross_validated_calibration(mp, y, n_repeats=3, seed=11)
    assert (spy.passes, spy.solves) == (2, [1e-3])
    _check_against_scipy(mp, y, res, 3, 11)


def _two_temperature_set(n, c, stride, sharp, flat):
    """Every ``stride``-th row (the sub-sample's rows) scaled by ``sharp``, the others by ``flat``: the folds'
    NLL curves are far from the quadratic a single temperature gives, and the sub-sample's optimum far from theirs."""
    z, y = peaked_logits(1, 1.0, 1.5, 0.0, n, c)
    scale = np.full(n, flat)
    scale[::stride] = sharp
    return softmax64(scale[:, None] * z)[None], y


@pytest.mark.parametrize("n, stride, sharp, flat, passes, exact", [(3000, 2, 2.0, 0.8, 3, (1, 3)),
                                                                    (8192, 4, 4.0, 0.6, 1, (4, 4))],
                         ids=["three passes then exact", "nowhere to re-expand"])
def test_uncertified_folds_go_to_the_exact_solver_after_at_most_three_passes(monkeypatch, n, stride, sharp, flat,
                                                                            passes, exact):
    """Two temperatures in one set. 3,000 rows: three passes certify some of the four folds and stop (the
    docstring's "up to two more passes"); the others are fitted exactly. 8,192 rows, the sub-sample's (every 4th)
    sharp and the rest flat: the expansion point (1/T = 0.38) is so far from the optimum (about 1.05) that the
    first pass certifies no fold and the whole set's quartic model gives no point to re-expand at (its Newton
    iteration leaves the range where the model increases), so the passes stop after one and all four folds are
    fitted exactly. Never a fold left without a temperature."""
    mp, y = _two_temperature_set(n, 4, stride, sharp, flat)
    spy = _Spy(monkeypatch)
    res = cross_validated_calibration(mp, y, n_repeats=2, seed=2)
    assert spy.passes == passes and exact[0] <= spy.exact_fold_fits <= exact[1]
    _check_against_scipy(mp, y, res, 2, 2)


def test_a_sub_sample_at_a_bound_sends_every_fold_to_the_exact_solver(monkeypatch):
    """Separable rows: the sub-sample's NLL falls all the way to T = t_min, so no pass is made (no expansion point
    inside the bounds) and each fold is fitted exactly, at the bound."""
    spy = _Spy(monkeypatch)
    res = cross_validated_calibration(*_separable_set(), n_repeats=2)
    assert spy.passes == 0 and spy.solves[0] == 1e-3 and spy.exact_fold_fits == 4
    assert res.n_hit_bound == 4 and res.temperatures == (0.01,) * 4


@pytest.mark.parametrize("placement", ["post", "per_member"])
@pytest.mark.parametrize("t_min", [0.3, 0.6])
def test_optima_below_t_min_report_t_min_and_the_folds_at_the_bound(placement, t_min):
    """Underconfident predictions whose optimum (T ~ 0.18) lies below t_min: every fold reports t_min exactly and
    counts as at the bound; with the default bounds, none does. t_min = 0.3 puts the optimum within a factor 2 of
    the bound (a range doubled by a slip would hold it), t_min = 0.6 puts the bound's 1/T below 2."""
    z, y = peaked_logits(7, 1.0, 2.0, 0.0, 1200, 5)
    mp = softmax64(0.35 * z)[None]
    free = cross_validated_calibration(mp, y, n_repeats=2, placement=placement)
    assert free.n_hit_bound == 0 and all(0.15 < t < 0.3 for t in free.temperatures)
    res = cross_validated_calibration(mp, y, n_repeats=2, placement=placement, bounds=(t_min, 100.0))
    assert res.n_hit_bound == 4 and res.temperatures == (t_min,) * 4
