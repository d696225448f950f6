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
