# SPDX-License-Identifier: MIT
"""The per-row kernels of the temperature solver against scipy, in one block and in several (issue #27 item 8:
mutants that changed a block's bounds, a cumulant's order or the Brier term's normalisation survived).

``_row_cumulants`` gives log Z and the cumulants of ``s`` under softmax(beta s) per row; ``_scaled_row_scores``
(and its several-temperature form) log Z and sum_c q**2 for q = softmax(b_i s_i) at a temperature per row. The
oracle is ``scipy.special`` on the whole array at once. The kernels walk the rows in blocks of
``_ROW_STAT_BLOCK_ENTRIES`` entries; a small value makes a 53-row array several blocks with a shorter last one.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special

from ubench.metrics import temperature_solver
from ubench.metrics.temperature import fit_temperature_from_logits
from ubench.metrics.temperature_solver import (ShiftedLogs, _root_from_cumulants, _row_cumulants, _scaled_row_scores,
                                              _scaled_row_scores_multi)

N, C = 53, 7


@pytest.fixture(params=["one block", "blocks of 4 rows"])
def blocks(request, monkeypatch):
    if request.param != "one block":
        monkeypatch.setattr(temperature_solver, "_ROW_STAT_BLOCK_ENTRIES", 4 * C + 3)
    return request.param


def _shifted_logs(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    s = np.log(special.softmax(3 * rng.normal(size=(N, C)), axis=1) + 1e-12)
    return s - s.max(axis=1, keepdims=True)


def _cumulants(s: np.ndarray, beta: float) -> list[np.ndarray]:
    """log Z, the mean and the cumulants 2..5 of s under p = softmax(beta s), from the central moments."""
    p = special.softmax(beta * s, axis=1)
    mean = (p * s).sum(axis=1)
    mu = [(p * (s - mean[:, None]) ** k).sum(axis=1) for k in range(6)]
    return [special.logsumexp(beta * s, axis=1), mean, mu[2], mu[3], mu[4] - 3 * mu[2] ** 2,
            mu[5] - 10 * mu[3] * mu[2]]


@pytest.mark.parametrize("order", [2, 3, 4, 5, None])
def test_row_cumulants_of_every_order(blocks, order):
    s, beta = _shifted_logs(1), 0.8
    got = _row_cumulants(s, beta) if order is None else _row_cumulants(s, beta, order)
    k = 5 if order is None else order  # the default order is the 5th cumulant
    assert got.shape == (k + 1, N)
    expected = _cumulants(s, beta)
    for j in range(k + 1):
        np.testing.assert_allclose(got[j], expected[j], rtol=1e-9, atol=1e-10, err_msg=f"cumulant {j}")


def _scores(s: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    z = b[:, None] * s
    return special.logsumexp(z, axis=1), (special.softmax(z, axis=1) ** 2).sum(axis=1)


def test_scaled_row_scores_at_a_temperature_per_row(blocks):
    s = _shifted_logs(2)
    b = np.random.default_rng(3).uniform(0.3, 3.0, N)
    log_z, sq = _scaled_row_scores(s, b)
    want_z, want_sq = _scores(s, b)
    np.testing.assert_allclose(log_z, want_z, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(sq, want_sq, rtol=1e-12)
    assert np.all((1.0 / C <= sq + 1e-15) & (sq <= 1.0 + 1e-15))  # sum q**2 of a distribution over C classes


def test_scaled_row_scores_at_several_temperatures_equal_one_at_a_time(blocks):
    s = _shifted_logs(4)
    b = np.random.default_rng(5).uniform(0.3, 3.0, (3, N))
    log_z, sq = _scaled_row_scores_multi(s, b)
    assert log_z.shape == sq.shape == (3, N)
    for r in range(3):
        want_z, want_sq = _scores(s, b[r])
        np.testing.assert_allclose(log_z[r], want_z, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(sq[r], want_sq, rtol=1e-12)
        one_z, one_sq = _scaled_row_scores(s, b[r])  # the docstring's promise: bit for bit
        assert np.array_equal(log_z[r], one_z) and np.array_equal(sq[r], one_sq)


@pytest.mark.parametrize("order", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("chunk", [8, 1 << 13])  # 53 rows: seven chunks with a shorter last one, or one chunk
def test_mean_cumulants_of_every_order_from_raw_row_sums(order, chunk):
    """``_mean_cumulants(mom)``: the means over rows of log mom[0], of the cumulants 1..order of s under
    p = softmax(beta s) and of r2 = mom[2] / mom[0], from the raw sums mom[k] = sum_c exp(beta s) s**k. Oracle:
    each row's cumulants from its central moments (scipy's softmax), averaged with NumPy."""
    s, beta = _shifted_logs(6), 1.3
    e = np.exp(beta * s)
    mom = np.stack([(e * s**k).sum(axis=1) for k in range(order + 1)])
    g, mean_log_z, mean_r2 = temperature_solver._mean_cumulants(mom, rows=chunk)
    want = _cumulants(s, beta)
    assert g.shape == (order,)
    np.testing.assert_allclose(g, [want[k].mean() for k in range(1, order + 1)], rtol=1e-9, atol=1e-12)
    assert mean_log_z == pytest.approx(want[0].mean(), rel=1e-12)
    if order >= 2:
        assert mean_r2 == pytest.approx(np.mean(mom[2] / mom[0]), rel=1e-12)


@pytest.mark.parametrize("beta", [0.7, np.array([0.5, 1.0, 2.0, 4.0])])
def test_softmax_scaled_on_a_member_stack_with_a_class_never_on_top(beta):
    """softmax(beta s) on the last axis of (M, N, C) ``s`` (rows of max 0), beta a scalar or one per class, where
    the last class tops no row: a max over another axis than the classes would move that class's probability."""
    rng = np.random.default_rng(8)
    z = rng.normal(size=(2, 6, 4))
    z[..., 3] -= 6.0
    s = np.log(special.softmax(z, axis=-1))
    s -= s.max(axis=-1, keepdims=True)
    got = temperature_solver._softmax_scaled(s, beta)
    np.testing.assert_allclose(got, special.softmax(beta * s, axis=-1), rtol=1e-12, atol=0)


def test_logits_whose_row_range_overflows_are_refused_by_name():
    """Finite logits whose difference within a row is not (1e308 - (-1e308)): the shifted row holds -inf while its
    log-sum-exp stays finite (exp(-inf) = 0), so only the row-range check sees it."""
    logits = np.array([[1e308, -1e308], [0.0, 1.0], [2.0, 0.5]])
    with pytest.raises(ValueError, match=r"^logits differences within a row overflow float64; found a row range "
                                         r"above 1\.8e308$"):
        fit_temperature_from_logits(logits, np.array([0, 1, 0]))


class _Rows:
    """A mean that is not an array, as a split re-read from its archive is: rows by slice or by ``take_rows``."""

    def __init__(self, probs):
        self.probs, self.shape, self.taken = probs, probs.shape, []

    def __getitem__(self, rows):
        assert isinstance(rows, slice) and rows.step in (None, 1), rows  # contiguous slices only
        return self.probs[rows]

    def take_rows(self, rows):
        self.taken.append(np.asarray(rows).copy())
        return self.probs[rows]


@pytest.mark.parametrize("source", ["array", "rows"])
@pytest.mark.parametrize("cache_bytes", [0, 2**30])  # computed per request, or once whole and sliced
def test_shifted_logs_are_log_p_plus_eps_minus_the_row_max_at_any_rows(source, cache_bytes):
    """``s[a:b]``, ``s[::k]`` and ``s[rows]`` of :class:`ShiftedLogs` are log(p + eps) minus its row max at those
    rows, with the same float64 bits as the whole matrix computed at once by numpy."""
    rng = np.random.default_rng(6)
    p = special.softmax(2 * rng.normal(size=(N, C)), axis=1).astype(np.float32)
    p[4] = 0.0  # a row of zeros: log(eps) everywhere, max 0 after the shift
    p[4, 2] = 1.0
    eps = 1e-6
    whole = np.log(p.astype(np.float64) + eps)
    whole -= whole.max(axis=1, keepdims=True)
    mean = p if source == "array" else _Rows(p)
    s = ShiftedLogs(mean, eps, cache_bytes=cache_bytes)
    assert s.shape == (N, C) and s.ndim == 2
    rows = np.array([50, 3, 4, 4, 17])
    for key in (slice(5, 29), slice(0, N, 7), slice(None), rows):
        got = s[key]
        assert got.dtype == np.float64
        assert np.array_equal(got, whole[key]), key
    if source == "rows":  # a strided slice and an index array are gathered through take_rows
        assert [t.tolist() for t in mean.taken] == [list(range(0, N, 7)), rows.tolist()]


# _root_from_cumulants(g, beta0, lo, hi, rtol): the root beta0 + h of the model m(h) = sum_k g[k] h**k / k!,
# certified when |h| <= 0.1 beta0, |m(h)| <= tol, |g[-1] h**K / K!| <= tol (tol = rtol * beta * g[1]) and
# lo < beta < hi; with rtol None an estimate whenever it ends inside the bounds. Each case's answer follows from
# that rule by hand: the models are chosen so their roots are exact binary fractions or known (cubic case A).
_H = 0.05
_A = [-(10 * _H + 1.0 * _H**2 / 2 + 0.048 * _H**3 / 6), 10.0, 1.0, 0.048]  # root 0.05; last term 1.0e-6 at it
ROOT_CASES = {
    # the last term (1e-6) is within rtol * beta * g1 = 2.05e-6, not within rtol * beta / g1 or rtol / beta * g1
    "certified cubic": (_A, 2.0, 0.01, 100.0, 1e-7, 2.05),
    "a step of 0.15 <= 0.1 beta0": ([-0.15, 1.0, 0.0, 0.0], 2.0, 0.01, 100.0, 1e-7, 2.15),
    "a step of exactly 0.1 beta0": ([-0.25, 1.0, 0.0, 0.0], 2.5, 0.01, 100.0, 1e-7, 2.75),
    "a step above 0.1 beta0": ([-0.21, 1.0, 0.0, 0.0], 2.0, 0.01, 100.0, 1e-7, None),
    "an exact root certifies at rtol 0": ([-0.125, 1.0, 0.0, 0.0], 2.0, 0.01, 100.0, 0.0, 2.125),
    "certified at the upper bound": ([-0.125, 1.0, 0.0, 0.0], 2.0, 0.01, 2.125, 1e-7, None),
    "certified at the lower bound": ([0.125, 1.0, 0.0, 0.0], 2.25, 2.125, 100.0, 1e-7, None),
    "an estimate however far": ([-0.5, 1.0, 0.0, 0.0], 2.0, 0.01, 100.0, None, 2.5),
    "an estimate at the upper bound": ([-0.5, 1.0, 0.0, 0.0], 2.0, 0.01, 2.5, None, None),
    "an estimate at the lower bound": ([0.5, 1.0, 0.0, 0.0], 3.0, 2.5, 100.0, None, None),
    "an estimate beyond a bound": ([-0.5, 1.0, 0.0, 0.0], 2.0, 0.01, 2.4, None, None),
    "a flat model (g1 = 0)": ([0.1, 0.0, 1.0, 0.0], 2.0, 0.01, 100.0, None, None),
    "a decreasing model": ([0.1, -1.0, 0.0, 0.0], 2.0, 0.01, 100.0, None, None),
    "a non-finite cumulant": ([-0.1, 1.0, np.inf, 0.0], 2.0, 0.01, 100.0, None, None),
}


@pytest.mark.parametrize("case", sorted(ROOT_CASES))
def test_root_from_cumulants_certifies_by_its_stated_rule(case):
    g, beta0, lo, hi, rtol, expected = ROOT_CASES[case]
    got = _root_from_cumulants(np.array(g), beta0, lo, hi, rtol)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected, rel=1e-13, abs=0)


def test_the_certified_cubic_root_is_numpys():
    """Case A's root against numpy's polynomial roots (its real root nearest 0)."""
    g = _A
    roots = np.roots([g[3] / 6, g[2] / 2, g[1], g[0]])
    h = min((r.real for r in roots if abs(r.imag) < 1e-12), key=abs)
    assert h == pytest.approx(_H, rel=1e-12)
