# SPDX-License-Identifier: MIT
"""Entropy/MI decomposition, ensembles, and ranking metrics against scikit-learn and the Mann-Whitney U statistic."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import mannwhitneyu
from sklearn import metrics as skm
from strategies import member_stacks, prob_matrices

from ubench import metrics as M


@given(mp=member_stacks())
def test_total_equals_data_plus_knowledge(mp):
    """For any member stack, total = data + knowledge per sample, knowledge >= 0, all within [0, log C]."""
    d = M.uncertainty_decomposition(mp)
    tol = 1e-6 if mp.dtype == np.float32 else 1e-12
    np.testing.assert_allclose(d.total, d.data + d.knowledge, atol=tol)
    assert np.all(d.knowledge >= 0)
    assert np.all(d.total <= np.log(mp.shape[2]) + 1e-12)
    np.testing.assert_array_equal(M.mutual_information(mp), d.knowledge)
    np.testing.assert_array_equal(M.expected_entropy(mp), d.data)


@given(p=prob_matrices(), m=st.integers(1, 4))
def test_identical_members_equal_single_member(p, m):
    """An ensemble of identical members equals the member (to an ulp) and has zero mutual information."""
    mp = np.stack([p] * m)
    np.testing.assert_allclose(M.ensemble_mean_probs(mp), p.astype(np.float64), rtol=1e-15, atol=1e-300)
    d = M.uncertainty_decomposition(mp)
    assert np.all(d.knowledge <= 1e-12)
    np.testing.assert_allclose(d.total, M.predictive_entropy(p), atol=1e-12)


def test_entropy_known_values():
    """Uniform rows have entropy log C (normalized 1); one-hot rows 0 (0 log 0 = 0)."""
    p = np.array([[0.25] * 4, [1.0, 0, 0, 0]])
    np.testing.assert_allclose(M.predictive_entropy(p), [np.log(4), 0.0])
    assert not np.signbit(M.predictive_entropy(p)).any()  # +0.0, never -0.0, for one-hot rows
    np.testing.assert_allclose(M.normalized_entropy(p), [1.0, 0.0])
    np.testing.assert_allclose(M.confidence(p), [0.25, 1.0])
    mp = np.stack([np.eye(2), np.eye(2)[::-1]])  # two confident members that disagree
    np.testing.assert_allclose(M.mutual_information(mp), [np.log(2)] * 2)


def test_float32_float64_entropy_agree():
    """float32 logs with float64 sums agree with float64 to 1e-6."""
    rng = np.random.default_rng(0)
    z = rng.normal(scale=4, size=(500, 100))
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    np.testing.assert_allclose(M.predictive_entropy(p.astype(np.float32)), M.predictive_entropy(p), atol=2e-6)


def test_weighted_ensemble_and_smoothing():
    mp = np.array([[[1.0, 0.0]], [[0.0, 1.0]]])
    np.testing.assert_allclose(M.ensemble_mean_probs(mp, weights=[0.25, 0.75]), [[0.25, 0.75]])
    s = M.smooth_probs(mp, gamma=0.1)
    np.testing.assert_allclose(s[0], [[0.95, 0.05]])
    with pytest.raises(ValueError, match="weights"):
        M.ensemble_mean_probs(mp, weights=[0.5, 0.6])
    with pytest.raises(ValueError, match="gamma"):
        M.smooth_probs(mp, gamma=1.0)


@st.composite
def scored(draw):
    n = draw(st.integers(2, 80))
    s = np.round(draw(prob_matrices(n=n, c=2, dtype=st.just(np.float64)))[:, 0], draw(st.integers(0, 4)))
    y = np.array(draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)))
    return s, y


@given(data=scored())
def test_ranking_matches_sklearn_and_mann_whitney(data):
    """For any scores with ties, AUROC = roc_auc_score = U / (n+ n-), AP = average_precision_score, and
    FPR@95 = the roc_curve point."""
    s, y = data
    if y.min() == y.max():
        with pytest.raises(M.UndefinedMetricError):
            M.auroc_score(s, y)
        return
    auc = M.auroc_score(s, y)
    assert auc == pytest.approx(skm.roc_auc_score(y, s), abs=1e-12)
    u = mannwhitneyu(s[y == 1], s[y == 0]).statistic
    assert auc == pytest.approx(u / ((y == 1).sum() * (y == 0).sum()), abs=1e-12)
    assert M.auroc_score(s, 1 - y) == pytest.approx(1 - auc, abs=1e-12)
    assert M.average_precision_score(s, y) == pytest.approx(skm.average_precision_score(y, s), abs=1e-12)
    fpr, tpr, _ = skm.roc_curve(y, s, drop_intermediate=False)
    for target in (0.95, 0.5, 1.0):
        assert M.fpr_at_tpr(s, y, tpr=target) == pytest.approx(fpr[np.searchsorted(tpr, target - 1e-12)], abs=1e-12)
    d = M.detection_scores(s, y)
    assert (d.auroc, d.average_precision) == (auc, M.average_precision_score(s, y))


def test_auroc_ties_count_half():
    assert M.auroc_score(np.array([0.5, 0.5]), np.array([0, 1])) == 0.5
    assert M.auroc_score(np.array([0.1, 0.4, 0.4, 0.8]), np.array([0, 0, 1, 1])) == 0.875
    assert M.auroc_score(np.array([0.0, 1.0]), np.array([False, True])) == 1.0


def test_fpr_at_tpr_exact_fraction():
    """0.95 * 20 rounds to 19.000000000000004 in floating point; the threshold still needs only 19 positives."""
    s = np.concatenate([np.arange(20) + 100.0, [118.5]])  # one negative between the 19th and 20th positive
    y = np.array([1] * 20 + [0])
    assert M.fpr_at_tpr(s, y) == 1.0  # 19/20 positives reached only at 101, below the negative at 118.5
    s2 = np.concatenate([np.arange(20) + 100.0, [100.5]])
    assert M.fpr_at_tpr(s2, y) == 0.0


def test_misclassification_and_ood_detection():
    """Positive = error / OOD; a single model's MI is uninformative (AUROC 0.5)."""
    p = np.array([[[0.95, 0.05], [0.6, 0.4], [0.55, 0.45], [0.1, 0.9]]])
    y = np.array([0, 1, 0, 1])  # errors: sample 1 only
    res = M.misclassification_scores(p, y)
    assert res["entropy"].auroc == pytest.approx(skm.roc_auc_score([0, 1, 0, 0], M.predictive_entropy(p[0])))
    assert res["confidence"].n_positive == 1 and res["confidence"].n_negative == 3
    assert res["mutual_information"].auroc == 0.5
    ood = np.array([[[0.5, 0.5], [0.52, 0.48]]])
    r = M.ood_detection_scores(p, ood, smoothing=1e-4)
    assert r["entropy"].auroc == 1.0 and r["confidence"].auroc == 1.0
    with pytest.raises(ValueError, match="same members and classes"):
        M.ood_detection_scores(p, np.ones((1, 2, 3)) / 3)


@pytest.mark.parametrize("c", [3, 37, 100, 1000])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_identical_rows_give_identical_values_wherever_they_sit(dtype, c):
    """Per-sample values do not depend on a row's position (ties between identical samples stay ties)."""
    rng = np.random.default_rng(0)
    row = rng.dirichlet(np.ones(c)).astype(dtype)
    p = np.tile(row, (3001, 1))
    mp = np.stack([p, np.roll(p, 1, axis=1)])
    d = M.uncertainty_decomposition(mp)
    for v in (d.total, d.data, d.knowledge):
        assert np.all(v == v[0])
    for f in (M.predictive_entropy, M.normalized_entropy, M.confidence):
        v = f(p)
        assert np.all(v == v[0]), f.__name__
    b = M.brier_loss(p, np.zeros(3001, dtype=int), per_sample=True)
    assert np.all(b == b[0])


def test_ranking_across_chunk_boundaries_matches_sklearn():
    """More positives than one counting chunk (2**16), with heavy ties: still equal to scikit-learn."""
    rng = np.random.default_rng(7)
    y = rng.integers(0, 2, 150_000)
    s = np.round(rng.normal(size=y.size) + 0.5 * y, 2).astype(np.float32)
    assert M.auroc_score(s, y) == pytest.approx(skm.roc_auc_score(y, s), abs=1e-12)
    assert M.average_precision_score(s, y) == pytest.approx(skm.average_precision_score(y, s), abs=1e-12)
