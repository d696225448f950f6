# SPDX-License-Identifier: MIT
"""Rejection curve / AURC and the URSABench decision cost: hand computations and presets."""

from __future__ import annotations

import numpy as np
import pytest
import oracles
from hypothesis import assume, given
from strategies import probs_and_labels, softmax64

from ubench import metrics as M


def test_rejection_curve_by_amount():
    """Rejecting the least confident first; the first point is the plain accuracy."""
    p = np.array([[0.9, 0.1], [0.6, 0.4], [0.8, 0.2], [0.55, 0.45]])
    y = np.array([0, 1, 0, 0])
    c = M.rejection_curve(p, y)
    np.testing.assert_allclose(c.rejected_fraction, [0, 0.25, 0.5, 0.75])
    np.testing.assert_allclose(c.accuracy, [0.75, 2 / 3, 1.0, 1.0])
    assert M.risk_coverage_auc(p, y) == pytest.approx(1 - np.mean([0.75, 2 / 3, 1.0, 1.0]))


def test_rejection_ties_give_expected_accuracy():
    """Two tied samples, one right one wrong: rejecting one of them leaves expected accuracy 1/2."""
    p = np.array([[0.7, 0.3], [0.7, 0.3]])
    y = np.array([0, 1])
    np.testing.assert_allclose(M.rejection_curve(p, y).accuracy, [0.5, 0.5])
    np.testing.assert_allclose(M.rejection_curve(p[::-1], y[::-1]).accuracy, [0.5, 0.5])


def test_rejection_depends_only_on_the_ranking_of_the_uncertainty():
    """The curve depends only on the ranking: a monotone transform of the score (and a temperature, which keeps
    the arg max and so which samples are right) changes nothing."""
    rng = np.random.default_rng(0)
    z = rng.normal(scale=2, size=(200, 5))
    y = rng.integers(0, 5, 200)
    p1, p2 = softmax64(z), softmax64(z / 3.0)  # temperature keeps the arg max; entropy ranking may move
    np.testing.assert_allclose(M.rejection_curve(p1, y, uncertainty=M.predictive_entropy(p1)).accuracy,
                               M.rejection_curve(p2, y, uncertainty=np.exp(M.predictive_entropy(p1))).accuracy)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rejection_curve_and_aurc_equal_a_loop(seed):
    """Continuous scores (no ties): the curve's k-th point is the accuracy of the N - k least uncertain samples,
    for the default (1 - confidence) and a given uncertainty; the AURC is 1 - the curve's mean."""
    rng = np.random.default_rng(seed)
    p = softmax64(rng.normal(scale=2, size=(257, 6)))
    y = rng.integers(0, 6, 257)
    correct = p.argmax(axis=1) == y
    for u in (None, rng.normal(size=257)):
        score = -p.max(axis=1) if u is None else u
        order = np.argsort(-score)
        expected = [correct[order][k:].mean() for k in range(257)]
        curve = M.rejection_curve(p, y) if u is None else M.rejection_curve(p, y, uncertainty=u)
        np.testing.assert_allclose(curve.accuracy, expected, rtol=1e-12)
        np.testing.assert_allclose(curve.rejected_fraction, np.arange(257) / 257, rtol=1e-12)
        aurc = M.risk_coverage_auc(p, y) if u is None else M.risk_coverage_auc(p, y, uncertainty=u)
        assert aurc == pytest.approx(oracles.aurc(correct, score), abs=1e-12)


@given(data=probs_and_labels())
def test_oracle_ranking_has_the_smallest_aurc(data):
    """For any input, rejecting the errors first (the oracle ranking) never gives a larger AURC than the
    confidence ranking, and both lie in [0, 1]."""
    p, y = data
    correct = (p.argmax(1) == y)
    oracle = M.risk_coverage_auc(p, y, uncertainty=(~correct).astype(np.float64))
    assert 0.0 <= oracle <= M.risk_coverage_auc(p, y) + 1e-12 <= 1.0 + 1e-12


def test_presets():
    """The four URSABench matrices: critical false negatives, 0.1 elsewhere, zero diagonal."""
    expect = {"mnist": (10, [3, 7], 100.0), "cifar10": (10, [0, 1, 8, 9], 1.0), "cifar100": (100, [58, 69, 85], 1.0),
              "imagenet": (1000, [403, 479, 565, 705, 751, 817, 847, 864, 895], 100.0)}
    for name, (n, crit, fn) in expect.items():
        c = M.cost_matrix_preset(name)
        assert c.shape == (n, n) and np.all(np.diag(c) == 0)
        other = [k for k in range(n) if k not in crit][0]
        assert c[crit[0], other] == fn and c[crit[0], crit[-1]] == fn  # missed critical, even for another critical
        assert c[other, crit[0]] == 0.1  # false positive of a critical class
        assert np.count_nonzero(c == fn) == len(crit) * (n - 1)
    with pytest.raises(ValueError, match="name must be one of"):
        M.cost_matrix_preset("svhn")


def test_decision_cost_hand_example():
    """MNIST preset, 3 samples: a hedged 3 is flagged as 3 even when 5 is more likely, because missing it costs 100."""
    c = M.cost_matrix_preset("mnist")
    p = np.zeros((3, 10))
    p[0, [3, 5]] = [0.01, 0.99]  # risk(5) = 0.01 * 100 = 1.0 > risk(3) = 0.99 * 0.1 = 0.099 -> decide 3
    p[1, [3, 5]] = [0.0, 1.0]  # decide 5
    p[2, 7] = 1.0  # decide 7
    y = np.array([5, 3, 7])
    np.testing.assert_array_equal(M.bayes_decisions(p, c), [3, 5, 7])
    d = M.decision_cost(p, y, c)
    assert (d.total, d.mean, d.n_samples) == pytest.approx((0.1 + 100.0, (0.1 + 100.0) / 3, 3))
    # Central smoothing (gamma = 1e-4) moves every p_c by at most 1e-4: row 1 still decides 5 (risk(5) =
    # 100 (p_3 + p_7) + ... = 0.002 < risk(3) ~ 0.1), so the decisions and the cost stay the same.
    assert M.decision_cost(p, y, c, smoothing=1e-4).total == pytest.approx(d.total)


def test_smoothing_flips_a_decision_near_the_break_even_point():
    """MNIST preset: deciding 5 risks 100 p_3 (a missed 3), deciding 3 risks 0.1 p_5. With p_3 = 0.00099 the
    risks are 0.099 < 0.0999: decide 5. Smoothing (1e-4) lifts p_3 to 0.0009999 and p_7 to 1e-5, so risk(5) =
    100 * 0.0010099 + 0.1 * 8e-6 = 0.10099 > risk(3) = 0.1 * 0.99892 + ...: decide 3 (URSABench smooths
    before deciding)."""
    c = M.cost_matrix_preset("mnist")
    p = np.zeros((1, 10))
    p[0, [3, 5]] = [0.00099, 0.99901]
    assert M.bayes_decisions(p, c).tolist() == [5]
    assert M.bayes_decisions(M.smooth_probs(p, gamma=1e-4), c).tolist() == [3]
    assert M.decision_cost(p, np.array([5]), c).total == 0.0
    assert M.decision_cost(p, np.array([5]), c, smoothing=1e-4).total == pytest.approx(0.1)


@given(data=probs_and_labels())
def test_zero_one_cost_is_error_rate(data):
    """With C = 1 - I, the Bayes decision is the arg max (up to rounding-level near-ties) and the mean cost is
    1 - accuracy."""
    p, y = data
    p64 = p.astype(np.float64)
    top = np.sort(p64, axis=1)
    assume(np.all((top[:, -1] == top[:, -2]) | (top[:, -1] - top[:, -2] > 1e-9)))
    c = 1.0 - np.eye(p.shape[1])
    assert M.decision_cost(p, y, c).mean == pytest.approx(1 - M.accuracy_score(p, y), abs=1e-12)


def test_exact_ties_go_to_lowest_index():
    """Uniform rows: every decision has the same risk up to rounding, and the lowest index wins."""
    for c in (3, 7, 10, 100):
        p = np.full((4, c), 1.0 / c)
        np.testing.assert_array_equal(M.bayes_decisions(p, 1.0 - np.eye(c)), 0)
        np.testing.assert_array_equal(M.bayes_decisions(p.astype(np.float32), 1.0 - np.eye(c)), 0)


def test_tie_tolerance_is_relative_to_the_cost_scale():
    """The tie tolerance C eps max|cost| scales with the costs, so decisions do not depend on the cost unit. Costs
    whose two risks differ by a relative 1e-12 (exactly, in fractions): the smaller risk wins at every scale
    (at 1e-3 they are 5e-16 apart, far above the tolerance 4e-19 and below 2 eps / 1e-3); risks equal in exact
    arithmetic tie at every scale (to the lowest index), and exact ties (uniform rows) still go to the lowest index at 1e6."""
    from fractions import Fraction

    p = np.array([[0.5, 0.5]])
    for scale in (1e-3, 1.0, 1e6):
        a, b = scale, scale * (1 + 1e-12)
        cost = np.array([[0.0, a], [b, 0.0]])
        risk = [Fraction(0.5) * Fraction(b), Fraction(0.5) * Fraction(a)]  # risk of deciding 0, of deciding 1
        assert M.bayes_decisions(p, cost).tolist() == [int(np.argmin(risk))] == [1]
        uniform = np.full((2, 7), 1.0 / 7)
        np.testing.assert_array_equal(M.bayes_decisions(uniform, scale * (1.0 - np.eye(7))), 0)
    # A circulant cost (column h is v rolled by h): every column sums to sum(v), so uniform rows tie exactly, but
    # the float risks of costs up to 1e6 differ by up to 1.2e-10, within 7 eps 1e6 = 1.5e-9: tied, decided 0.
    # Which float risk is lowest follows the BLAS kernels' summation order (the machine's CPU), so the test keeps
    # the costs (of 20 draws) whose plain float argmin is not 0 on the machine at hand (12 where this was written)
    # and asks for several.
    uniform = np.full((1, 7), 1.0 / 7)
    circulants = [np.stack([np.roll(v, h) for h in range(7)], axis=1)
                  for v in (np.random.default_rng(seed).uniform(0.0, 1e6, 7) for seed in range(20))]
    untied = [c for c in circulants if np.argmin(uniform @ c) != 0]
    assert len(untied) >= 3
    for circulant in untied:
        assert M.bayes_decisions(uniform, circulant).tolist() == [0]


def test_bayes_decisions_over_several_row_blocks_equal_the_argmin():
    """1000 classes: blocks of 131 rows (2^17 entries), so 400 rows are 4 blocks; every row's decision is the
    argmin of its risk p @ C (a random cost has no ties), the last block's rows included."""
    rng = np.random.default_rng(2)
    p = rng.dirichlet(np.full(1000, 0.1), size=400)
    cost = rng.random((1000, 1000))
    np.testing.assert_array_equal(M.bayes_decisions(p, cost), np.argmin(p @ cost, axis=1))


@given(data=probs_and_labels())
def test_bayes_decision_minimises_expected_cost(data):
    """For any probs, no other decision has lower expected cost under the model (brute force)."""
    p, _ = data
    c = M.cost_matrix(p.shape[1], [0], false_negative_cost=10.0, other_error_cost=1.0)
    risk = p.astype(np.float64) @ c
    h = M.bayes_decisions(p, c)
    assert np.all(risk[np.arange(len(h)), h] <= risk.min(axis=1) + 1e-12)


def test_bad_cost_matrix():
    p = np.array([[0.5, 0.5]])
    with pytest.raises(ValueError, match="cost_matrix must have shape"):
        M.bayes_decisions(p, np.zeros((3, 3)))
    with pytest.raises(ValueError, match="cost_matrix must be finite"):
        M.bayes_decisions(p, np.array([[0, np.nan], [1, 0]]))
    with pytest.raises(ValueError, match="critical_classes"):
        M.cost_matrix(3, [3], false_negative_cost=1.0, other_error_cost=0.1)


def test_rejection_errors_name_the_uncertainty():
    p = np.array([[0.9, 0.1], [0.8, 0.2], [0.7, 0.3]])
    y = np.array([0, 1, 0])
    for fn in (M.rejection_curve, M.risk_coverage_auc):
        with pytest.raises(ValueError) as ei:
            fn(p, y, uncertainty=[0.1, np.inf, 0.2])
        assert str(ei.value) == "uncertainty must be finite; found inf at index 1"
        with pytest.raises(ValueError) as ei:
            fn(p, y, uncertainty=[0.1, 0.2])
        assert str(ei.value) == "probs has 3 samples but uncertainty has 2"


def test_smoothing_is_deciding_on_the_smoothed_probabilities():
    """smoothing = g decides as the arg min of ((1 - g) p + g / C) @ cost, written out here (a cost matrix whose
    columns sum differently, so the g / C term is not a constant shift), and charges cost[y, decided]."""
    rng = np.random.default_rng(3)
    p = softmax64(rng.normal(size=(300, 5)) * 2)
    y = rng.integers(0, 5, 300)
    cost = rng.uniform(0, 5, size=(5, 5))
    np.fill_diagonal(cost, 0.0)
    for g in (0.0, 0.3, 0.7):
        risk = ((1 - g) * p + g / 5) @ cost
        part = np.sort(risk, axis=1)
        assert (part[:, 1] - part[:, 0] > 1e-9).all()  # no near-ties: the arg min is unambiguous
        want = risk.argmin(axis=1)
        np.testing.assert_array_equal(M.bayes_decisions(p, cost, smoothing=g), want)
        assert M.decision_cost(p, y, cost, smoothing=g).total == pytest.approx(cost[y, want].sum(), rel=1e-12)
    assert not np.array_equal(M.bayes_decisions(p, cost, smoothing=0.7), M.bayes_decisions(p, cost))


def test_cost_matrix_edges_and_dataset_presets():
    """Zero costs are costs (>= 0); dataset names map to presets ignoring case, '-', '_', spaces and dots."""
    np.testing.assert_array_equal(M.cost_matrix(3, [1], false_negative_cost=2.0, other_error_cost=0.0),
                                  [[0, 0, 0], [2, 0, 2], [0, 0, 0]])
    np.testing.assert_array_equal(M.cost_matrix(2, [], false_negative_cost=0.0, other_error_cost=1.0),
                                  [[0, 1], [1, 0]])
    names = {"CIFAR-10": "cifar10", "cifar_10": "cifar10", "Cifar 100": "cifar100", "c.i.f.a.r.100": "cifar100",
             "MNIST": "mnist", "ImageNet": "imagenet", "imagenet-1k": "imagenet", "ILSVRC2012": "imagenet",
             "fashion-mnist": None, "svhn": None}
    from ubench.metrics.decision import cost_preset_for_dataset, dataset_key

    for name, preset in names.items():
        assert cost_preset_for_dataset(name) == preset, name
    assert dataset_key("Tiny-ImageNet 200.v2") == "tinyimagenet200v2"


@pytest.mark.parametrize(("call", "message"), [
    (lambda: M.cost_matrix(1, [], false_negative_cost=1.0, other_error_cost=0.1), "n_classes must be >= 2; found 1"),
    (lambda: M.cost_matrix(3, [[1]], false_negative_cost=1.0, other_error_cost=0.1),
     "critical_classes must be a 1-d sequence of integers; found [[1]]"),
    (lambda: M.cost_matrix(3, [1.5], false_negative_cost=1.0, other_error_cost=0.1),
     "critical_classes must be a 1-d sequence of integers; found [1.5]"),
    (lambda: M.cost_matrix(3, [1], false_negative_cost=np.inf, other_error_cost=0.1),
     "false_negative_cost must be finite and >= 0; found inf"),
    (lambda: M.cost_matrix(3, [1], false_negative_cost=1.0, other_error_cost=-0.1),
     "other_error_cost must be finite and >= 0; found -0.1"),
    (lambda: M.bayes_decisions(np.array([[0.5, 0.5]]), np.array([[0, np.nan], [1, 0]])),
     "cost_matrix must be finite"),
    (lambda: M.bayes_decisions(np.array([[0.5, 0.5]]), [["a", "b"], ["c", "d"]]),
     "cost_matrix must be numeric; found dtype <U1"),
])
def test_decision_errors_say_what_is_wrong(call, message):
    with pytest.raises((ValueError, TypeError)) as ei:
        call()
    assert str(ei.value) == message
