# SPDX-License-Identifier: MIT
"""R-hat and ESS against ArviZ (the field's reference implementation) and against closed forms."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ubench.metrics.diagnostics import bulk_ess, chain_diagnostics, split_rhat

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)
    arviz = pytest.importorskip("arviz")


def _ar1(rng, chains, n, rho, offsets=0.0):
    x = np.empty((chains, n))
    x[:, 0] = rng.normal(size=chains)
    for t in range(1, n):
        x[:, t] = rho * x[:, t - 1] + np.sqrt(1 - rho * rho) * rng.normal(size=chains)
    return x + offsets


@settings(max_examples=60, deadline=None)
@given(chains=st.integers(2, 5), n=st.integers(8, 300), rho=st.floats(-0.5, 0.98), shift=st.floats(0, 2),
       seed=st.integers(0, 2**32 - 1), ties=st.booleans())
def test_rhat_and_ess_equal_arviz(chains, n, rho, shift, seed, ties):
    rng = np.random.default_rng(seed)
    x = _ar1(rng, chains, n, rho, offsets=shift * np.arange(chains)[:, None])
    if ties:
        x = np.round(x, 1)
    if np.ptp(x) == 0:
        return
    expected_rhat = float(arviz.rhat(x, method="rank"))
    expected_ess = float(arviz.ess(x, method="bulk"))
    np.testing.assert_allclose(split_rhat(x), expected_rhat, rtol=1e-10, equal_nan=True)
    np.testing.assert_allclose(bulk_ess(x), expected_ess, rtol=1e-10, equal_nan=True)


def test_ess_of_an_ar1_chain_matches_its_integrated_autocorrelation_time():
    """For AR(1) with coefficient rho, tau = (1 + rho) / (1 - rho): ESS ~ S (1 - rho) / (1 + rho)."""
    rng = np.random.default_rng(0)
    for rho in (0.0, 0.5, 0.9):
        x = _ar1(rng, 4, 20000, rho)
        expected = x.size * (1 - rho) / (1 + rho)
        assert abs(bulk_ess(x) / expected - 1) < 0.1, (rho, bulk_ess(x), expected)


def test_rhat_flags_chains_that_disagree_and_passes_chains_that_agree():
    rng = np.random.default_rng(1)
    assert split_rhat(_ar1(rng, 4, 2000, 0.3)) < 1.01
    assert split_rhat(_ar1(rng, 4, 2000, 0.3, offsets=np.arange(4)[:, None])) > 1.5
    # A trend inside one chain is caught by the split, even with a single chain.
    assert split_rhat(np.linspace(0, 5, 400)[None, :] + rng.normal(size=(1, 400))) > 1.2
    # A difference in scale only is caught by the folded draws.
    scales = np.array([1.0, 1.0, 1.0, 4.0])[:, None]
    assert split_rhat(rng.normal(size=(4, 2000)) * scales) > 1.05


def test_chain_diagnostics_groups_by_chain_label():
    rng = np.random.default_rng(2)
    x = _ar1(rng, 3, 50, 0.5)
    labels = np.repeat([7, 3, 5], 50)
    out = chain_diagnostics(x.ravel(), labels)
    assert out["chains"] == 3 and out["draws_per_chain"] == 50
    np.testing.assert_allclose(out["rhat"], float(arviz.rhat(x, method="rank")), rtol=1e-10)
    with pytest.raises(ValueError, match="at least 4 draws"):
        chain_diagnostics(np.arange(6.0), np.repeat([0, 1], 3))


def test_a_single_chain_equals_arviz():
    """One chain: its two halves are the m = 2 sequences, and the between-sequence variance enters var+ as for
    several chains (ArviZ's ess does the same for one chain; its rhat returns NaN there, so R-hat is pinned by
    the classic formula on the rank-normalised halves, written out here)."""
    from scipy import special, stats

    rng = np.random.default_rng(5)
    x = _ar1(rng, 1, 300, 0.6) + np.linspace(0.0, 1.0, 300)  # a trend: the halves' means differ
    np.testing.assert_allclose(bulk_ess(x), float(arviz.ess(x, method="bulk")), rtol=1e-10)
    halves = np.stack([x[0, :150], x[0, 150:]])

    def rhat(s):
        z = special.ndtri((stats.rankdata(s).reshape(s.shape) - 0.375) / (s.size + 0.25))
        n, w, b = z.shape[1], z.var(axis=1, ddof=1).mean(), z.mean(axis=1).var(ddof=1)
        return np.sqrt(((n - 1) / n * w + b) / w)

    expected = max(rhat(halves), rhat(np.abs(halves - np.median(halves))))
    assert split_rhat(x) == pytest.approx(expected, rel=1e-12) and expected > 1.05


@pytest.mark.parametrize("dtype", [bool, np.int8, np.int64, np.float32])
def test_draws_of_any_real_dtype_are_read_as_float64(dtype):
    """0/1 indicators (bool, a range of exactly 1), small integers and float32 draws give the numbers of their
    float64 copies (ArviZ's on those): nothing is computed in the input's dtype (bool cannot even be subtracted)."""
    rng = np.random.default_rng(6)
    x = (rng.random((3, 40)) < 0.3) if dtype is bool else rng.integers(-5, 5, (3, 40)).astype(dtype)
    as64 = x.astype(np.float64)
    np.testing.assert_allclose(split_rhat(x), float(arviz.rhat(as64, method="rank")), rtol=1e-10)
    np.testing.assert_allclose(bulk_ess(x), float(arviz.ess(as64, method="bulk")), rtol=1e-10)
    out = chain_diagnostics(x.ravel(), np.repeat([0, 1, 2], 40))
    assert out["rhat"] == split_rhat(as64) and out["ess_bulk"] == bulk_ess(as64)


def test_rhat_when_the_folded_draws_are_constant():
    """Draws of +-1 around a median of 0 fold to a constant: the tail R-hat is undefined and the bulk one is
    reported (ArviZ gives the same)."""
    x = np.array([[-1.0, 1.0, -1.0, 1.0, 1.0, -1.0], [1.0, -1.0, 1.0, 1.0, -1.0, -1.0]])
    assert np.ptp(np.abs(x - np.median(x))) == 0.0
    np.testing.assert_allclose(split_rhat(x), float(arviz.rhat(x, method="rank")), rtol=1e-12)
    assert np.isfinite(split_rhat(x))
