# SPDX-License-Identifier: MIT
"""NLL from logits and the Brier decomposition beyond the small inputs of test_metrics_classification.py: inputs
spanning several row blocks, logits far from zero, classes never predicted, per-sample values and the errors'
wording (what the mutation run of metrics/classification.py found untested; bench/bench_mutation.py)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.special import log_softmax
from strategies import softmax64

from ubench import metrics as M
from ubench.metrics.classification import _BLOCK_ELEMS


def _logits(n, c, seed, scale=3.0):
    rng = np.random.default_rng(seed)
    return rng.normal(scale=scale, size=(n, c)), rng.integers(0, c, n)


def _several_blocks(c: int) -> int:
    """A sample count whose (n, c) input spans three row blocks and a partial fourth."""
    return 3 * (_BLOCK_ELEMS // c) + 7


@pytest.mark.parametrize("c", [3, 10])
def test_nll_from_logits_per_sample_equals_scipy_over_several_blocks(c):
    """Every sample's -log softmax(z)_y (scipy.special.log_softmax), in every row block, and the mean of them."""
    z, y = _logits(_several_blocks(c), c, seed=c)
    got = M.nll_loss_from_logits(z, y, per_sample=True)
    expected = -log_softmax(z, axis=1)[np.arange(len(y)), y]
    assert got.shape == (len(y),) and got.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-13)
    assert M.nll_loss_from_logits(z, y) == pytest.approx(expected.mean(), rel=1e-12)


def test_many_classes_make_blocks_of_a_few_rows():
    """With C = _BLOCK_ELEMS / 4 classes a block holds 4 rows: 15 samples span four blocks (the last partial), so
    every row-blocked loop is exercised on a small input. Per-sample NLL (scipy), Brier (its definition)."""
    c, n = _BLOCK_ELEMS // 4, 15
    z, y = _logits(n, c, seed=5)
    got = M.nll_loss_from_logits(z, y, per_sample=True)  # first: a row left unwritten shows no fresh reference
    np.testing.assert_allclose(got, -log_softmax(z, axis=1)[np.arange(n), y], rtol=1e-12)
    p = softmax64(z)
    onehot = np.zeros((n, c))
    onehot[np.arange(n), y] = 1.0
    np.testing.assert_allclose(M.brier_loss(p, y, per_sample=True), ((p - onehot) ** 2).sum(1), rtol=1e-12)


def test_nll_from_logits_is_shift_invariant_far_from_zero():
    """log softmax(z + a) = log softmax(z): logits around +-700 (where exp overflows unless the row maximum is
    taken off first) give the NLL of the centred logits."""
    z, y = _logits(200, 5, seed=1)
    base = M.nll_loss_from_logits(z, y, per_sample=True)
    for shift in (700.0, -700.0):
        np.testing.assert_allclose(M.nll_loss_from_logits(z + shift, y, per_sample=True), base, rtol=1e-9,
                                   atol=1e-9)


def test_nll_from_logits_of_a_certain_right_answer_is_positive_zero():
    """A true class that takes all the mass has NLL exactly +0.0 (never -0.0, which a report would print)."""
    z = np.array([[0.0, -1000.0, -1000.0], [5.0, -2000.0, 0.0]])
    got = M.nll_loss_from_logits(z, np.array([0, 0]), per_sample=True)
    assert got[0] == 0.0 and not np.signbit(got[0])
    assert got[1] == pytest.approx(np.log1p(np.exp(-5.0)), rel=1e-12)
    mean = M.nll_loss_from_logits(z[:1], np.array([0]))
    assert mean == 0.0 and not np.signbit(mean)


def test_nll_from_logits_errors_name_what_is_wrong():
    z, y = _logits(4, 3, seed=2)
    with pytest.raises(ValueError, match=r"^logits must have at least 2 classes; found 1$"):
        M.nll_loss_from_logits(np.zeros((4, 1)), np.zeros(4, dtype=int))
    with pytest.raises(ValueError, match=r"^logits has 4 samples but labels has 3$"):
        M.nll_loss_from_logits(z, y[:3])


def _brier_terms_by_loop(p, y):
    """reliability, resolution, uncertainty and the within-cell covariance by their definitions over the
    predicted-class cells (Murphy's partition; the Notes of brier_decomposition), a Python loop in float64."""
    n, c = p.shape
    onehot = np.eye(c)[y]
    ybar = onehot.mean(0)
    pred = p.argmax(1)
    rel = res = cov = 0.0
    for k in np.unique(pred):
        rows = pred == k
        cell = onehot[rows].mean(0)
        rel += ((p[rows] - cell) ** 2).sum()
        res += rows.sum() * ((cell - ybar) ** 2).sum()
        cov += ((p[rows] - p[rows].mean(0)) * (onehot[rows] - cell)).sum()
    return rel / n, res / n, 1.0 - (ybar**2).sum(), cov / n


def test_brier_decomposition_over_several_blocks_equals_the_definition():
    """The blocked reliability (sum over blocks of p . ybar_k) over an input of several row blocks."""
    c = 4
    z, y = _logits(_several_blocks(c), c, seed=3, scale=1.0)
    p = softmax64(z)
    d = M.brier_decomposition(p, y)
    rel, res, unc, cov = _brier_terms_by_loop(p, y)
    assert d.reliability == pytest.approx(rel, rel=1e-9)
    assert d.resolution == pytest.approx(res, rel=1e-9)
    assert d.uncertainty == pytest.approx(unc, rel=1e-12)
    assert d.covariance == pytest.approx(cov, rel=1e-9, abs=1e-12)
    assert d.brier == pytest.approx(unc - res + rel - 2 * cov, rel=1e-9)


def test_brier_decomposition_with_a_class_never_predicted_warns_nothing():
    """A class no sample predicts is an empty cell: it weighs nothing, and computing it raises no 0/0
    RuntimeWarning (the terms equal the loop over the non-empty cells)."""
    p = np.array([[0.7, 0.2, 0.1], [0.6, 0.1, 0.3], [0.2, 0.5, 0.3], [0.1, 0.8, 0.1]])  # class 2 never predicted
    y = np.array([0, 2, 1, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        d = M.brier_decomposition(p, y)
    assert (d.reliability, d.resolution, d.uncertainty, d.covariance) == pytest.approx(_brier_terms_by_loop(p, y),
                                                                                        rel=1e-12, abs=1e-15)


def test_the_reports_nll_sees_the_smoothing():
    """The report's core metrics take the NLL of the centrally smoothed p_y, -mean log(eps + (1 - s) p_y + s / C)
    (a hand computation), as nll_loss(smoothing=s) does; the other core metrics ignore the smoothing."""
    from ubench.metrics.report_sections import core_metrics

    p = softmax64(_logits(300, 5, seed=4)[0])
    y = _logits(300, 5, seed=4)[1]
    eps, s = 1e-12, 0.1
    expected = -np.mean(np.log(eps + (1 - s) * p[np.arange(300), y] + s / 5))
    got = core_metrics(p, y, bins=15, eps=eps, smoothing=s)
    assert got["nll"] == pytest.approx(expected, rel=1e-12)
    assert got["nll"] == pytest.approx(M.nll_loss(p, y, eps=eps, smoothing=s), rel=1e-12)
    plain = core_metrics(p, y, bins=15, eps=eps, smoothing=0.0)
    assert plain["nll"] == pytest.approx(M.nll_loss(p, y, eps=eps), rel=1e-12) and plain["nll"] != got["nll"]
    assert {k: v for k, v in got.items() if k != "nll"} == {k: v for k, v in plain.items() if k != "nll"}
