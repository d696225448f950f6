# SPDX-License-Identifier: MIT
"""Accuracy, NLL, Brier and the Brier decomposition: worked examples and scikit-learn cross-checks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy.special import logsumexp
from sklearn import metrics as skm
from strategies import prob_matrices, probs_and_labels, softmax64

from ubench import metrics as M


def _random(n, c, seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    p = softmax64(rng.normal(scale=3.0, size=(n, c))).astype(dtype)
    return p, rng.integers(0, c, n)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n,c,seed", [(50, 2, 0), (400, 10, 1), (1000, 37, 2)])
def test_against_sklearn(n, c, seed, dtype):
    """NLL, Brier and accuracy equal scikit-learn's log_loss, brier_score_loss and accuracy_score."""
    p, y = _random(n, c, seed, dtype)
    p64 = p.astype(np.float64)
    assert M.nll_loss(p, y) == pytest.approx(skm.log_loss(y, p64 / p64.sum(1, keepdims=True), labels=range(c)),
                                              rel=1e-6)
    # scikit-learn halves the binary Brier score (range [0, 1]); ubench sums over both classes.
    sk_brier = skm.brier_score_loss(y, p64[:, 1], pos_label=1) * 2 if c == 2 else skm.brier_score_loss(
        y, p64, labels=range(c))
    # float32 rows sum to 1 only within ~1e-7, which the binary (p1-only) form does not see.
    assert M.brier_loss(p, y) == pytest.approx(sk_brier, rel=1e-6 if dtype == np.float32 else 1e-9, abs=1e-12)
    assert M.accuracy_score(p, y) == skm.accuracy_score(y, p.argmax(1))


def test_worked_examples():
    """Hand-computed values."""
    p = np.array([[0.5, 0.5], [0.25, 0.75], [1.0, 0.0]])
    y = np.array([0, 1, 1])
    assert M.accuracy_score(p, y) == pytest.approx(2 / 3)  # the tie [0.5, 0.5] goes to class 0
    assert M.nll_loss(p, y, per_sample=True) == pytest.approx([np.log(2), -np.log(0.75), -np.log(1e-12)])
    assert M.nll_loss(p, y, eps=0.5, per_sample=True)[2] == pytest.approx(np.log(2))
    assert M.brier_loss(p, y, per_sample=True) == pytest.approx([0.5, 0.125, 2.0])
    assert M.brier_loss(np.array([[0.0, 1.0]]), np.array([0])) == 2.0  # the top of the [0, 2] range


def test_nll_smoothing_formula():
    """smoothing=g scores (1 - g) p_y + g / C, with the eps floor added inside the log."""
    p = np.array([[1.0, 0.0, 0.0]])
    g = 1e-4
    assert M.nll_loss(p, np.array([1]), smoothing=g) == -np.log(1e-12 + g / 3)


@given(data=probs_and_labels(), g=st.sampled_from([1e-4, 0.01, 0.5]))
def test_smoothed_nll_equals_formula(data, g):
    """For any probs and labels: mean of -log(eps + (1 - g) p_y + g / C), computed here in float64."""
    p, y = data
    p_y = p.astype(np.float64)[np.arange(len(y)), y]
    expected = np.mean(-np.log(1e-12 + (1 - g) * p_y + g / p.shape[1]))
    assert M.nll_loss(p, y, smoothing=g) == pytest.approx(expected, rel=1e-12)


@st.composite
def logits_and_labels(draw):
    n, c = draw(st.integers(1, 30)), draw(st.integers(2, 8))
    z = draw(hnp.arrays(np.float64, (n, c), elements=st.floats(-50, 50)))
    y = draw(hnp.arrays(np.int64, (n,), elements=st.integers(0, c - 1)))
    return z, y


@given(data=logits_and_labels())
def test_nll_from_logits_equals_logsumexp(data):
    """For any logits: NLL = mean(logsumexp(z_i) - z_{i, y_i}) (scipy.special.logsumexp), no eps floor."""
    z, y = data
    expected = np.mean(logsumexp(z, axis=1) - z[np.arange(len(y)), y])
    assert M.nll_loss_from_logits(z, y) == pytest.approx(expected, rel=1e-12, abs=1e-12)


@given(data=probs_and_labels(dtype=st.just(np.float64)))
def test_nll_from_logits_is_the_eps_zero_limit(data):
    """nll_loss_from_logits(log p) equals nll_loss(p, eps=0) for strictly positive p (the documented limit)."""
    p, y = data
    assert M.nll_loss_from_logits(np.log(p), y) == pytest.approx(M.nll_loss(p, y, eps=0.0), rel=1e-9, abs=1e-12)


def test_float32_softmax_saturating_to_one():
    """A float32 softmax that saturates to exactly 1.0 has NLL 0 when right and -log(1e-12) when wrong."""
    p = softmax64(np.array([[200.0, 0.0, 0.0]])).astype(np.float32)
    assert p[0, 0] == 1.0 and p[0, 1] == 0.0
    assert M.nll_loss(p, np.array([0])) == pytest.approx(0.0, abs=1e-11)
    assert M.nll_loss(p, np.array([1])) == pytest.approx(-np.log(1e-12))
    assert M.brier_loss(p, np.array([1])) == 2.0


def _brier_decomposition_reference(p, y):
    """The decomposition's terms by their definitions (Notes of brier_decomposition), a loop over the cells
    k = arg max p_i: UNC = 1 - |ybar|^2, RES = sum_k w_k |ybar_k - ybar|^2, REL = mean_i |p_i - ybar_k(i)|^2,
    COV = mean_i (p_i - pbar_k(i)) . (e_y_i - ybar_k(i)); BS = mean_i |p_i - e_y_i|^2."""
    p = p.astype(np.float64)
    n, c = p.shape
    onehot = np.eye(c)[y]
    ybar = onehot.mean(axis=0)
    cells = p.argmax(axis=1)
    res = rel = cov = 0.0
    for k in np.unique(cells):
        inside = cells == k
        ybar_k, pbar_k = onehot[inside].mean(axis=0), p[inside].mean(axis=0)
        res += inside.mean() * ((ybar_k - ybar) ** 2).sum()
        rel += ((p[inside] - ybar_k) ** 2).sum() / n
        cov += ((p[inside] - pbar_k) * (onehot[inside] - ybar_k)).sum() / n
    return {"uncertainty": 1 - (ybar**2).sum(), "resolution": res, "reliability": rel, "covariance": cov,
            "brier": ((p - onehot) ** 2).sum(axis=1).mean()}


@given(data=probs_and_labels(n=st.integers(1, 60)))
def test_brier_decomposition_terms_match_definitions(data):
    """For any probs and labels, every term equals its definition computed cell by cell, and UNC - RES + REL -
    2 COV equals the Brier score."""
    p, y = data
    d = M.brier_decomposition(p, y)
    ref = _brier_decomposition_reference(p, y)
    for name, value in ref.items():
        assert getattr(d, name) == pytest.approx(value, abs=1e-9), name
    assert d.uncertainty - d.resolution + d.reliability - 2 * d.covariance == pytest.approx(ref["brier"], abs=1e-9)


@given(c=st.integers(2, 6), n_per=st.integers(1, 30), seed=st.integers(0, 2**32 - 1))
def test_brier_decomposition_three_terms_exact_for_cellwise_constant_forecasts(c, n_per, seed):
    """When every prediction in a predicted-class cell is the same, BS = UNC - RES + REL exactly (COV = 0)."""
    rng = np.random.default_rng(seed)
    forecasts = softmax64(rng.uniform(size=(c, c)) + 5 * np.eye(c))  # row k predicts class k
    cells = rng.integers(0, c, c * n_per)
    p = forecasts[cells]
    y = rng.integers(0, c, p.shape[0])
    d = M.brier_decomposition(p, y)
    assert d.covariance == pytest.approx(0.0, abs=1e-12)
    assert d.uncertainty - d.resolution + d.reliability == pytest.approx(M.brier_loss(p, y), abs=1e-12)


def test_brier_decomposition_sums_within_o_c_over_n_for_calibrated_constant_forecasts():
    """Calibrated cell-constant forecasts: REL ~ O(C/N), and UNC - RES + REL equals BS."""
    rng = np.random.default_rng(0)
    c, n = 5, 20000
    forecasts = softmax64(rng.uniform(size=(c, c)) + 3 * np.eye(c))  # row k predicts class k
    cells = rng.integers(0, c, n)
    p = forecasts[cells]
    y = np.array([rng.choice(c, p=f) for f in p])
    d = M.brier_decomposition(p, y)
    assert d.reliability < 5 * c / n
    assert d.uncertainty - d.resolution + d.reliability == pytest.approx(d.brier, abs=1e-12)


def test_brier_decomposition_worked_example():
    """Two cells: predicted 0 holds labels {0, 1}; predicted 1 holds {1}."""
    p = np.array([[0.8, 0.2], [0.8, 0.2], [0.3, 0.7]])
    y = np.array([0, 1, 1])
    d = M.brier_decomposition(p, y)
    ybar = np.array([1 / 3, 2 / 3])
    assert d.uncertainty == pytest.approx(1 - (ybar**2).sum())
    cell0, cell1 = np.array([0.5, 0.5]), np.array([0.0, 1.0])
    assert d.resolution == pytest.approx(2 / 3 * ((cell0 - ybar) ** 2).sum() + 1 / 3 * ((cell1 - ybar) ** 2).sum())
    assert d.reliability == pytest.approx((2 * ((p[0] - cell0) ** 2).sum() + ((p[2] - cell1) ** 2).sum()) / 3)


@given(data=probs_and_labels(n=st.integers(2, 40)), cut=st.floats(0.01, 0.99))
def test_blockwise_equals_one_shot(data, cut):
    """For the per-sample means (NLL, Brier, accuracy), the count-weighted mean over two blocks is the one-shot value."""
    p, y = data
    k = max(1, min(len(y) - 1, int(cut * len(y))))
    for f in (M.nll_loss, M.brier_loss, M.accuracy_score):
        blocks = (k * f(p[:k], y[:k]) + (len(y) - k) * f(p[k:], y[k:])) / len(y)
        assert blocks == pytest.approx(f(p, y), abs=1e-12)
