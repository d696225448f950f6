# SPDX-License-Identifier: MIT
"""Documented defaults and error messages of the shift-paper metrics, the chain diagnostics and the smooth ECE,
by hand: a default is the value the docstring names (the call without it equals the call with it, and differs
from a neighbouring value), and each refusal says what is wrong."""

from __future__ import annotations

import numpy as np
import pytest

from ubench.metrics.diagnostics import bulk_ess, chain_diagnostics, split_rhat
from ubench.metrics.shift_paper import (
    cross_validated_quantile_ece,
    quantile_bin_edges,
    top_k_accuracy,
    top_k_calibration_error,
)
from ubench.metrics.smooth_calibration import smooth_ece_at


def _probs(seed=0, n=300, c=12):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(c, 0.3), size=n)
    y = np.array([rng.choice(c, p=row) for row in p])
    y[: n // 3] = rng.integers(0, c, n // 3)  # some miscalibration
    return p, y


def test_shift_paper_defaults():
    """top-k: k = 5 (and 15 bins); quantile bins: 15; cross-validated quantile ECE: 15 bins, 5 repeats, seed 0."""
    p, y = _probs()
    assert top_k_accuracy(p, y) == top_k_accuracy(p, y, k=5) != top_k_accuracy(p, y, k=6)
    assert top_k_calibration_error(p, y) == top_k_calibration_error(p, y, k=5, n_bins=15)
    assert top_k_calibration_error(p, y) not in (top_k_calibration_error(p, y, k=6),
                                                 top_k_calibration_error(p, y, n_bins=16),
                                                 top_k_calibration_error(p, y, n_bins=14))
    np.testing.assert_array_equal(quantile_bin_edges(p), quantile_bin_edges(p, n_bins=15))
    assert quantile_bin_edges(p).shape == (16,)
    want = cross_validated_quantile_ece(p, y, n_bins=15, n_repeats=5, seed=0)
    assert cross_validated_quantile_ece(p, y) == want
    assert want not in (cross_validated_quantile_ece(p, y, n_bins=16), cross_validated_quantile_ece(p, y, n_repeats=6),
                        cross_validated_quantile_ece(p, y, seed=1))
    with pytest.raises(ValueError) as ei:
        top_k_accuracy(p, y, k=13)
    assert str(ei.value) == "k must lie in [1, n_classes = 12], got 13"
    assert top_k_accuracy(p, y, k=12) == 1.0  # k = C is allowed


@pytest.mark.parametrize(("draws", "message"), [
    (np.zeros((2, 3)), "draws needs at least 4 draws per chain; got 3"),
    (np.zeros(8), "draws must be (chains, draws); got shape (8,)"),
    (np.r_[np.zeros(7), np.nan].reshape(2, 4), "draws must be finite"),
])
def test_chain_diagnostics_refusals(draws, message):
    for f in (split_rhat, bulk_ess):
        with pytest.raises(ValueError) as ei:
            f(draws)
        assert str(ei.value) == message


def test_chain_diagnostics_edges():
    """4 draws per chain are enough; constant draws give NaN R-hat and ESS; the result's keys; values and chains of
    different shapes are refused, naming both."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 4))
    assert np.isfinite(split_rhat(x)) and np.isfinite(bulk_ess(x))
    assert np.isnan(split_rhat(np.ones((2, 8)))) and np.isnan(bulk_ess(np.ones((2, 8))))
    out = chain_diagnostics(rng.normal(size=40), np.repeat([0, 1], 20))
    assert set(out) == {"rhat", "ess_bulk", "chains", "draws_per_chain"} and out["draws_per_chain"] == 20
    with pytest.raises(ValueError) as ei:
        chain_diagnostics(np.zeros(6), np.zeros(5))
    assert str(ei.value) == "values and chains must be 1-D of equal length; got (6,) and (5,)"


@pytest.mark.parametrize("sigma", [0.0, -0.1, 1.5, float("nan")])
def test_smooth_ece_at_refuses_a_bandwidth_outside_0_1(sigma):
    p, y = _probs(c=3)
    with pytest.raises(ValueError) as ei:
        smooth_ece_at(p, y, sigma=sigma)
    assert str(ei.value) == f"sigma must lie in (0, 1], got {sigma!r}"
    assert np.isfinite(smooth_ece_at(p, y, sigma=1.0))


def test_split_rhat_tail_at_small_scale_and_constant_halves():
    """Chains of equal means and scales 0.01 vs 0.1: the folded (tail) R-hat, large, decides even though the
    folded draws span less than 1; half-chains that are each constant (zero within-chain variance) give NaN."""
    import warnings

    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 1000)) * np.array([0.01, 0.01, 0.1, 0.1])[:, None]
    assert split_rhat(x) > 1.3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's "All-NaN axis" of the bulk/tail maximum
        assert np.isnan(split_rhat(np.array([[0.0, 0.0, 1.0, 1.0], [2.0, 2.0, 3.0, 3.0]])))


@pytest.mark.parametrize(("c", "k"), [(100, 5), (100, 1), (7, 7), (40, 3)])
def test_top_k_equals_a_stable_sort_of_every_row(c, k):
    """The (N, k) top-k values and label hits equal a stable descending sort of each whole row (ties by class
    index), on rows with many ties (probabilities rounded to 2 decimals), labels tied with smaller and larger
    classes, and 3,000 rows (two row blocks at 100 classes)."""
    from ubench.metrics.shift_paper import _top_k

    rng = np.random.default_rng(c + k)
    p = np.round(rng.dirichlet(np.full(c, 0.5), size=3000), 2)
    p[:, 0] += 1.0 - p.sum(axis=1)  # rows still sum to 1 (class 0 absorbs the rounding)
    p = np.abs(p)
    p /= p.sum(axis=1, keepdims=True)
    y = rng.integers(0, c, 3000)
    y[:200] = np.argsort(-p[:200], axis=1, kind="stable")[:, min(k, c - 1)]  # labels just outside (or at) the top k
    order = np.argsort(-p, axis=1, kind="stable")[:, :k]
    values, hits = _top_k(p, y, k)
    np.testing.assert_array_equal(values, np.take_along_axis(p, order, axis=1))
    np.testing.assert_array_equal(hits, order == y[:, None])
