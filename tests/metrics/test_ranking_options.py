# SPDX-License-Identifier: MIT
"""Misclassification and OOD detection with their options set (``tpr``, ``smoothing``) and at their defaults,
against scikit-learn's ROC curve, AUROC and AP on scores computed here with scipy; and the errors' wording (what
the mutation run of metrics/ranking.py found untested; bench/bench_mutation.py)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import entropy
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve
from strategies import softmax64

from ubench import metrics as M
from ubench.metrics import UndefinedMetricError


def _fpr_at(scores, labels, tpr):
    """FPR at the first (highest) ROC threshold whose TPR (positives above it / positives, a float division)
    reaches ``tpr`` (scikit-learn's full curve)."""
    fpr, tprs, _ = roc_curve(labels, scores, drop_intermediate=False)
    return fpr[np.argmax(tprs >= tpr)]


def _members(m, n, c, seed, scale=2.0):
    rng = np.random.default_rng(seed)
    return softmax64(rng.normal(scale=scale, size=(m, n, c)))


def _uncertainty_scores(mp, gamma):
    """entropy, -confidence and mutual information of (1 - gamma) p + gamma / C (scipy's entropy)."""
    q = (1 - gamma) * mp + gamma / mp.shape[-1]
    mean = q.mean(0)
    total = entropy(mean, axis=1)
    return {"entropy": total, "confidence": -mean.max(1),
            "mutual_information": total - entropy(q, axis=2).mean(0)}


def _assert_scores(got, scores, labels, tpr):
    assert got.auroc == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    assert got.average_precision == pytest.approx(average_precision_score(labels, scores), abs=1e-12)
    assert got.fpr_at_tpr == pytest.approx(_fpr_at(scores, labels, tpr), abs=1e-12)
    assert got.tpr == tpr
    assert (got.n_positive, got.n_negative) == (int(labels.sum()), int((labels == 0).sum()))


@pytest.mark.parametrize("tpr", [0.5, 0.8, 1.0])
def test_detection_scores_at_any_tpr(tpr):
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 12, 300).astype(np.float64)  # ties between positives and negatives
    labels = (rng.random(300) < 0.3 + 0.04 * scores).astype(int)
    _assert_scores(M.detection_scores(scores, labels, tpr=tpr), scores, labels, tpr)


@pytest.mark.parametrize("gamma, tpr", [(0.0, 0.95), (0.2, 0.8)])
def test_misclassification_scores_with_smoothing_and_tpr(gamma, tpr):
    """Positive = top-1 error of the (unsmoothed) mean; the scores are those of the smoothed members."""
    mp, y = _members(4, 400, 5, seed=1), np.random.default_rng(2).integers(0, 5, 400)
    got = M.misclassification_scores(mp, y, smoothing=gamma, tpr=tpr)
    errors = (mp.mean(0).argmax(1) != y).astype(int)
    want = _uncertainty_scores(mp, gamma)
    assert set(got) == set(want)
    for k, s in want.items():
        _assert_scores(got[k], s, errors, tpr)


@pytest.mark.parametrize("kwargs", [{}, {"smoothing": 0.2, "tpr": 0.8}])
def test_ood_detection_scores_at_the_defaults_and_with_options(kwargs):
    """Positive = OOD: the in-domain scores labelled 0, the OOD ones 1 (defaults: no smoothing, TPR 0.95)."""
    ind, ood = _members(3, 200, 4, seed=3, scale=3.0), _members(3, 150, 4, seed=4, scale=1.0)
    gamma, tpr = kwargs.get("smoothing", 0.0), kwargs.get("tpr", 0.95)
    got = M.ood_detection_scores(ind, ood, **kwargs)
    labels = np.r_[np.zeros(200, int), np.ones(150, int)]
    s_in, s_ood = _uncertainty_scores(ind, gamma), _uncertainty_scores(ood, gamma)
    assert set(got) == set(s_in)
    for k in s_in:
        _assert_scores(got[k], np.r_[s_in[k], s_ood[k]], labels, tpr)


def test_ood_detection_errors_name_the_argument():
    ind = np.full((2, 3, 2), 0.5)
    bad = ind.copy()
    bad[0, 1] = [1.5, -0.5]
    for args, name in (((bad, ind), "in_member_probs"), ((ind, bad), "ood_member_probs")):
        with pytest.raises(ValueError, match=rf"^{name} must be probabilities in \[0, 1\]; found 1.5 at index"):
            M.ood_detection_scores(*args)
    with pytest.raises(ValueError, match=r"^in_member_probs and ood_member_probs must have the same members and "
                                         r"classes; found shapes \(2, 3, 2\) and \(3, 3, 2\)$"):
        M.ood_detection_scores(ind, np.full((3, 3, 2), 0.5))


@pytest.mark.parametrize("metric, name", [(M.auroc_score, "AUROC"), (M.fpr_at_tpr, "FPR at TPR"),
                                          (M.detection_scores, "detection AUROC"),
                                          (M.average_precision_score, "average precision")])
def test_a_metric_of_one_class_says_which_is_missing(metric, name):
    s = np.array([0.1, 0.2, 0.3])
    with pytest.raises(UndefinedMetricError, match=rf"^{name} is undefined: labels contain no positive \(1\) samples$"):
        metric(s, np.zeros(3, int))
    if metric is not M.average_precision_score:  # AP is defined without negatives
        with pytest.raises(UndefinedMetricError,
                           match=rf"^{name} is undefined: labels contain no negative \(0\) samples$"):
            metric(s, np.ones(3, int))


@pytest.mark.parametrize("tpr", [0.0, 1.0000001, 1.5, -0.5])
def test_tpr_outside_0_to_1_is_refused(tpr):
    s, y = np.array([0.1, 0.2, 0.3]), np.array([0, 1, 1])
    for metric in (M.fpr_at_tpr, M.detection_scores):
        with pytest.raises(ValueError, match=rf"^tpr must be in \(0, 1\]; found {tpr!r}$"):
            metric(s, y, tpr=tpr)


def test_fpr_at_every_tpr_that_is_a_fraction_of_the_positives():
    """TPR = j / n_pos exactly (and a hair either side): where tpr * n_pos rounds across an integer, the threshold
    is still the highest one whose TPR reaches tpr (scikit-learn's curve)."""
    rng = np.random.default_rng(7)
    for n_pos in range(1, 41):
        scores = rng.permutation(2 * n_pos + 5).astype(np.float64)
        labels = np.zeros(scores.size, int)
        labels[rng.choice(scores.size, n_pos, replace=False)] = 1
        for j in range(1, n_pos + 1):
            for tpr in (j / n_pos, np.nextafter(j / n_pos, 0), np.nextafter(j / n_pos, 2)):
                if 0 < tpr <= 1:
                    assert M.fpr_at_tpr(scores, labels, tpr=tpr) == _fpr_at(scores, labels, tpr), (n_pos, j, tpr)
