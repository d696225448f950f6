# SPDX-License-Identifier: MIT
"""Entropy/MI decomposition against ``scipy.special.entr`` and closed forms; ensembles; ranking metrics against
scikit-learn and the Mann-Whitney U statistic."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracles import detection as _sk_detection
from oracles import entropy as _entropy
from scipy.special import rel_entr
from scipy.stats import mannwhitneyu
from sklearn import metrics as skm
from strategies import member_stacks, prob_matrices

from ubench import metrics as M


def _tol(dtype):
    """float32 input is logged in float32 (relative error ~6e-8 per term, summed over <= 8 classes)."""
    return 2e-6 if dtype == np.float32 else 1e-12


@given(mp=member_stacks())
def test_decomposition_matches_entr(mp):
    """For any member stack: total = H(mean), data = mean_m H(p_m) (H from scipy.special.entr in float64), and
    knowledge = mean_m KL(p_m || mean) (scipy.special.rel_entr: a different formula for the same quantity)."""
    p64 = mp.astype(np.float64)
    mean = p64.mean(axis=0)
    total, data = _entropy(mean), _entropy(p64).mean(axis=0)
    kl = rel_entr(p64, mean).sum(axis=2).mean(axis=0)
    tol = _tol(mp.dtype)
    d = M.uncertainty_decomposition(mp)
    np.testing.assert_allclose(d.total, total, rtol=0, atol=tol)
    np.testing.assert_allclose(d.data, data, rtol=0, atol=tol)
    np.testing.assert_allclose(d.knowledge, kl, rtol=0, atol=2 * tol)
    np.testing.assert_allclose(M.mutual_information(mp), kl, rtol=0, atol=2 * tol)
    np.testing.assert_allclose(M.expected_entropy(mp), data, rtol=0, atol=tol)


@given(p=prob_matrices())
def test_entropy_normalized_entropy_and_confidence_match_oracles(p):
    """For any probs: H = entr(p).sum (nats), normalized H = H / log C, confidence = max_c p."""
    h = _entropy(p)
    np.testing.assert_allclose(M.predictive_entropy(p), h, rtol=0, atol=_tol(p.dtype))
    np.testing.assert_allclose(M.normalized_entropy(p), h / np.log(p.shape[1]), rtol=0, atol=_tol(p.dtype))
    np.testing.assert_array_equal(M.confidence(p), p.max(axis=1).astype(np.float64))


def test_decomposition_closed_forms():
    """Worked by hand. Two confident members that disagree on 2 classes: total log 2, data H(0.9, 0.1) =
    -(0.9 log 0.9 + 0.1 log 0.1) = 0.325083, knowledge the rest. Two members on 3 classes with zeros: mean
    (1/4, 1/2, 1/4) has H = 1.5 log 2, each member log 2, so knowledge 0.5 log 2."""
    mp = np.array([[[0.9, 0.1], [0.5, 0.5]], [[0.1, 0.9], [0.5, 0.5]]])
    d = M.uncertainty_decomposition(mp)
    h09 = 0.9 * np.log(1 / 0.9) + 0.1 * np.log(10.0)
    np.testing.assert_allclose(d.total, [np.log(2), np.log(2)], rtol=1e-14)
    np.testing.assert_allclose(d.data, [h09, np.log(2)], rtol=1e-14)
    np.testing.assert_allclose(d.knowledge, [np.log(2) - h09, 0.0], rtol=1e-13, atol=1e-15)
    assert round(h09, 6) == 0.325083
    mp = np.array([[[0.5, 0.5, 0.0]], [[0.0, 0.5, 0.5]]])
    for dtype in (np.float32, np.float64):
        d = M.uncertainty_decomposition(mp.astype(dtype))
        np.testing.assert_allclose((d.total[0], d.data[0], d.knowledge[0]),
                                   (1.5 * np.log(2), np.log(2), 0.5 * np.log(2)), rtol=1e-6 if dtype == np.float32
                                   else 1e-14)


@given(p=prob_matrices(), m=st.integers(1, 4))
def test_identical_members_equal_single_member(p, m):
    """An ensemble of identical members has the member's probabilities and entropy, and zero MI up to the
    rounding of the float64 mean (M = 3: (p + p + p) / 3 can differ from p in the last bit, MI ~2e-16)."""
    mp = np.stack([p] * m)
    np.testing.assert_allclose(M.ensemble_mean_probs(mp), p.astype(np.float64), rtol=1e-15, atol=1e-300)
    d = M.uncertainty_decomposition(mp)
    assert np.all(d.knowledge <= 1e-13)
    np.testing.assert_allclose(d.total, _entropy(p), rtol=0, atol=_tol(p.dtype))
    np.testing.assert_allclose(d.data, _entropy(p), rtol=0, atol=_tol(p.dtype))


def test_entropy_known_values():
    """Uniform rows have entropy log C (normalized 1); one-hot rows 0 (0 log 0 = 0)."""
    p = np.array([[0.25] * 4, [1.0, 0, 0, 0]])
    np.testing.assert_allclose(M.predictive_entropy(p), [np.log(4), 0.0])
    assert not np.signbit(M.predictive_entropy(p)).any()  # +0.0, never -0.0, for one-hot rows
    np.testing.assert_allclose(M.normalized_entropy(p), [1.0, 0.0])
    np.testing.assert_allclose(M.confidence(p), [0.25, 1.0])
    mp = np.stack([np.eye(2), np.eye(2)[::-1]])  # two confident members that disagree
    np.testing.assert_allclose(M.mutual_information(mp), [np.log(2)] * 2)


@pytest.mark.parametrize("c", [2, 100])
def test_float32_entropy_matches_float64_oracle(c):
    """float32 input (float32 logs, float64 sums) agrees with entr on the float64 values to 2e-6 nats, for
    sharp and flat rows alike."""
    rng = np.random.default_rng(0)
    z = rng.normal(scale=4, size=(500, c))
    p = np.exp(z - z.max(1, keepdims=True))
    p = (p / p.sum(1, keepdims=True)).astype(np.float32)
    np.testing.assert_allclose(M.predictive_entropy(p), _entropy(p), rtol=0, atol=2e-6)


def _plogp_in_precision(p):
    """-sum_c p log p as the module docstring states it: each p log p rounded in p's own dtype (log and product),
    0 log 0 = 0, and the row sum exact (math.fsum of the terms in float64): float32 input gives float32 terms."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(p > 0, p * np.log(p), p.dtype.type(0))
    return np.array([-math.fsum(row) for row in t.astype(np.float64).reshape(-1, p.shape[-1])]).reshape(p.shape[:-1])


def _float32_probs(rng, shape):
    z = rng.normal(scale=3, size=shape)
    p = np.exp(z - z.max(-1, keepdims=True))
    p[..., ::5, 1] = 0.0  # exact zeros in some rows (0 log 0 = 0)
    return (p / p.sum(-1, keepdims=True)).astype(np.float32)


def test_float32_logs_and_float64_sums():
    """The documented precision: float32 input is logged (and multiplied) in float32, every sum is float64. Pinned
    to 1e-13 against the terms rounded in float32 and summed exactly; a float64 log (or a float32 product or sum)
    moves the result by ~1e-8, which the first assertion shows this input can see. The decomposition logs the
    float64 ensemble mean rounded to the members' dtype."""
    rng = np.random.default_rng(11)
    p = _float32_probs(rng, (400, 37))
    h = M.predictive_entropy(p)
    assert np.abs(h - _entropy(p)).max() > 1e-9  # float32 terms differ from float64 ones here
    np.testing.assert_allclose(h, _plogp_in_precision(p), rtol=1e-13, atol=0)
    np.testing.assert_allclose(M.normalized_entropy(p), _plogp_in_precision(p) / np.log(37), rtol=1e-13, atol=0)
    members = _float32_probs(rng, (3, 400, 37))
    mean = np.add.reduce(members, axis=0, dtype=np.float64) / 3  # the float64 mean, summed in member order
    terms = _plogp_in_precision(members)  # (M, N)
    data = np.array([math.fsum(col) for col in terms.T]) / 3
    total = _plogp_in_precision(mean.astype(np.float32))
    d = M.uncertainty_decomposition(members)
    np.testing.assert_allclose(d.data, data, rtol=1e-13, atol=0)
    np.testing.assert_allclose(M.expected_entropy(members), data, rtol=1e-13, atol=0)
    np.testing.assert_allclose(d.total, total, rtol=1e-13, atol=0)
    np.testing.assert_allclose(d.knowledge, np.maximum(total - data, 0), rtol=1e-9, atol=1e-15)


def test_zeros_raise_no_floating_point_warnings():
    """0 log 0 = 0 is the convention, not an accident: rows with exact zeros (one-hot rows, -0.0) emit no
    'divide by zero' or 'invalid value' RuntimeWarning from any of the entropy functions."""
    p = np.array([[1.0, 0.0, 0.0], [0.5, -0.0, 0.5], [0.2, 0.3, 0.5]])
    members = np.stack([p, p[::-1], np.eye(3)])
    for dtype in (np.float32, np.float64):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            h = M.predictive_entropy(p.astype(dtype))
            M.normalized_entropy(p.astype(dtype))
            M.expected_entropy(members.astype(dtype))
            M.mutual_information(members.astype(dtype))
            d = M.uncertainty_decomposition(members.astype(dtype))
        np.testing.assert_allclose(h, [0.0, np.log(2), _entropy(p[2])], rtol=1e-6)
        np.testing.assert_allclose(d.data, _entropy(members).mean(0), rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_uniform_rows_stay_within_log_c(dtype):
    """Uniform rows have entropy log C, and the result never exceeds log C (normalized: 1), although their rounded
    terms sum above it for some C (float32: 49 of these 63, from C = 2; float64: C = 5, 13, 19, 26, even summed
    exactly: counted here, so the clip is exercised)."""
    cs = np.arange(2, 65)
    above = 0
    for c in cs:
        p = np.full((2, c), 1 / c, dtype=dtype)
        above += _plogp_in_precision(p)[0] > np.log(c)
        h, u = M.predictive_entropy(p), M.normalized_entropy(p)
        d = M.uncertainty_decomposition(np.stack([p, p]))
        for v in (h, d.total, d.data):
            assert (v <= np.log(c)).all(), c
            np.testing.assert_allclose(v, np.log(c), rtol=2e-7)
        assert (u <= 1.0).all() and np.allclose(u, 1.0, rtol=2e-7), c
    assert above >= (40 if dtype == np.float32 else 4)


def test_mutual_information_is_never_negative():
    """MI >= 0 (Jensen), also where the rounding of identical float64 members' mean puts H(mean) below their mean
    entropy (about a third of these rows, asserted): those rows give exactly 0, the others total - data."""
    rng = np.random.default_rng(0)
    z = rng.normal(size=(300, 5))
    p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    members = np.stack([p] * 3)
    d = M.uncertainty_decomposition(members)
    assert (d.total < d.data).sum() > 10
    assert (d.knowledge >= 0).all() and (M.mutual_information(members) >= 0).all()
    np.testing.assert_array_equal(d.knowledge, np.maximum(d.total - d.data, 0.0))
    assert d.knowledge.max() < 1e-15


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
    assert d.auroc == pytest.approx(skm.roc_auc_score(y, s), abs=1e-12)
    assert d.average_precision == pytest.approx(skm.average_precision_score(y, s), abs=1e-12)
    assert d.fpr_at_tpr == pytest.approx(fpr[np.searchsorted(tpr, 0.95 - 1e-12)], abs=1e-12)
    assert (d.n_positive, d.n_negative) == ((y == 1).sum(), (y == 0).sum())


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


def _oracle_scores(mp, gamma=0.0):
    """Entropy of the mean, -max of the mean, and MI as mean KL(member || mean), after central smoothing."""
    p = mp.astype(np.float64) * (1 - gamma) + gamma / mp.shape[2]
    mean = p.mean(axis=0)
    return {"entropy": _entropy(mean), "confidence": -mean.max(axis=1),
            "mutual_information": rel_entr(p, mean).sum(axis=2).mean(axis=0)}


def _close(r, expected):
    assert (r.auroc, r.average_precision, r.fpr_at_tpr) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("smoothing", [0.0, 1e-4])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_misclassification_and_ood_scores_match_sklearn_on_independent_scores(seed, smoothing):
    """Misclassification (positive = top-1 error of the mean) and OOD (positive = OOD) detection with entropy,
    confidence and MI equal scikit-learn on scores computed here from entr/rel_entr (continuous data: no ties)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(1, 300, 6)) + rng.normal(scale=1.5, size=(4, 300, 6))
    mp = np.exp(z) / np.exp(z).sum(axis=2, keepdims=True)
    y = rng.integers(0, 6, 300)
    errors = (mp.mean(axis=0).argmax(axis=1) != y).astype(int)
    res = M.misclassification_scores(mp, y, smoothing=smoothing)
    for name, score in _oracle_scores(mp, smoothing).items():
        _close(res[name], _sk_detection(score, errors))
    assert res["entropy"].n_positive == errors.sum() and res["entropy"].n_negative == 300 - errors.sum()
    zo = rng.normal(scale=2.0, size=(4, 200, 6))
    ood = np.exp(zo) / np.exp(zo).sum(axis=2, keepdims=True)
    r = M.ood_detection_scores(mp, ood, smoothing=smoothing)
    s_in, s_ood = _oracle_scores(mp, smoothing), _oracle_scores(ood, smoothing)
    for name in s_in:
        _close(r[name], _sk_detection(np.concatenate([s_in[name], s_ood[name]]), np.r_[np.zeros(300), np.ones(200)]))


def test_misclassification_and_ood_detection_worked_example():
    """Positive = error / OOD; a single model's MI is 0 everywhere, so its AUROC is 0.5 (all ties)."""
    p = np.array([[[0.95, 0.05], [0.6, 0.4], [0.55, 0.45], [0.1, 0.9]]])
    y = np.array([0, 1, 0, 1])  # errors: sample 1 only, whose entropy is the second highest of four
    res = M.misclassification_scores(p, y)
    assert res["entropy"].auroc == pytest.approx(2 / 3)  # the error outranks 2 of the 3 correct samples
    assert res["confidence"].auroc == pytest.approx(2 / 3)
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


def test_weights_and_smoothing_edges():
    """A zero weight drops a member; gamma = 0 leaves the probabilities as they are (in float64)."""
    mp = np.array([[[0.5, 0.5]], [[0.2, 0.8]]])
    np.testing.assert_array_equal(M.ensemble_mean_probs(mp, weights=[1, 0]), [[0.5, 0.5]])
    s = M.smooth_probs(mp.astype(np.float32), gamma=0.0)
    assert s.dtype == np.float64
    np.testing.assert_array_equal(s, mp.astype(np.float32).astype(np.float64))


@pytest.mark.parametrize(("call", "message"), [
    (lambda mp: M.ensemble_mean_probs(mp, weights=[0.5]),
     "weights must have shape (2,) to match member_probs; found shape (1,)"),
    (lambda mp: M.ensemble_mean_probs(mp, weights=[1.5, -0.5]),
     "weights must be finite and non-negative; found [ 1.5 -0.5]"),
    (lambda mp: M.ensemble_mean_probs(mp, weights=[np.nan, 1.0]),
     "weights must be finite and non-negative; found [nan  1.]"),
    (lambda mp: M.smooth_probs(np.where(mp == 0.2, np.nan, mp), gamma=0.1),
     "probs must be finite; found nan at index (1, 0, 0)"),
])
def test_ensemble_errors_say_what_is_wrong(call, message):
    mp = np.array([[[0.5, 0.5]], [[0.2, 0.8]]])
    with pytest.raises(ValueError) as ei:
        call(mp)
    assert str(ei.value) == message
