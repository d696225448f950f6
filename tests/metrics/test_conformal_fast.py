# SPDX-License-Identifier: MIT
"""Cross-validated conformal sets without sorting whole rows (issue #29 item 1).

``cross_validated_conformal`` ranks only the classes at or above each label (its score) and a prefix of each
row (its sets). Pinned twice: against the full-sort computation it replaced (``conformal_scores`` +
``conformal_quantile`` + ``conformal_sets`` over every fold, written out here), to the last bit, on data with
ties, exact zeros, one-hot rows and thresholds at 1 or beyond; and against MAPIE 1.x's APS and RAPS conformity
scores, quantile and prediction sets on the same data (its uniform draws reproduced from its random state).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ubench.metrics.conformal import (
    _set_sizes,
    _true_scores,
    conformal_quantile,
    conformal_scores,
    conformal_sets,
    cross_validated_conformal,
)
from ubench.metrics.protocol import cv_splits


def full_sort_conformal(probs, labels, *, method, alpha, n_repeats, seed, randomized, **raps):
    """The implementation before issue #29: every (sample, class) score, every fold's sets counted whole."""
    n = labels.shape[0]
    noise = np.random.default_rng(seed).random(n) if randomized else None
    scores = conformal_scores(probs, method, noise=noise, **raps)
    true = scores[np.arange(n), labels]
    coverages, sizes, thresholds = [], [], []
    for fit, held in cv_splits(n, n_repeats=n_repeats, seed=seed):
        q = conformal_quantile(true[fit], alpha)
        coverages.append(float(np.mean(true[held] <= q)))
        sizes.append(float(conformal_sets(scores[held], q).sum(axis=-1, dtype=np.float64).mean()))
        thresholds.append(q)
    return coverages, sizes, thresholds


def _problem(kind: int, n: int, c: int, seed: int):
    rng = np.random.default_rng(seed)
    if kind == 0:  # smooth Dirichlet rows, sharp to flat
        p = rng.dirichlet(np.full(c, rng.choice([0.05, 0.5, 3.0])), size=n)
    elif kind == 1:  # a coarse grid: many exact ties, the label often among them
        g = rng.integers(0, 4, size=(n, c)).astype(float)
        g[np.arange(n), rng.integers(0, c, n)] += 1
        p = g / g.sum(axis=1, keepdims=True)
    elif kind == 2:  # one-hot rows: every other class exactly 0
        p = np.zeros((n, c))
        p[np.arange(n), rng.integers(0, c, n)] = 1.0
    else:  # peaked softmax rows with a long tail
        z = rng.normal(size=(n, c)) * 4
        p = np.exp(z - z.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
    return p, rng.integers(0, c, n)


@settings(max_examples=60, deadline=None)
@given(kind=st.integers(0, 3), n=st.integers(2, 120), c=st.integers(2, 40), seed=st.integers(0, 2**16),
       method=st.sampled_from(["thr", "aps", "raps"]), alpha=st.sampled_from([0.01, 0.1, 0.5, 0.9]),
       randomized=st.booleans())
@example(kind=3, n=138, c=20, seed=1, method="aps", alpha=0.1, randomized=True)  # thresholds just below 1
@example(kind=1, n=60, c=5, seed=3, method="aps", alpha=0.1, randomized=False)  # ties at the label
def test_equals_the_full_sort_to_the_last_bit(kind, n, c, seed, method, alpha, randomized):
    """For any rows, labels and settings, coverage, set size and threshold of every fold equal the full-sort
    computation exactly (the running sums are the same additions in the same order)."""
    p, y = _problem(kind, n, c, seed)
    r = cross_validated_conformal(p, y, method=method, alpha=alpha, n_repeats=3, seed=seed, randomized=randomized)
    cov, size, thr = full_sort_conformal(p, y, method=method, alpha=alpha, n_repeats=3, seed=seed,
                                         randomized=randomized)
    assert list(r.coverages) == cov
    assert list(r.set_sizes) == size
    assert list(r.thresholds) == thr


@pytest.mark.parametrize("method", ["aps", "raps"])
def test_long_prefixes_and_the_whole_row_fallback(method):
    """Flat rows over many classes need long prefixes (every cut-off, then whole rows): still exact."""
    rng = np.random.default_rng(0)
    n, c = 120, 600
    z = rng.normal(size=(n, c)) * 0.3
    y = rng.integers(0, c, n)
    z[np.arange(n), y] += rng.normal(2.0, 2.0, n)
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    noise = rng.random(n)
    for q_level in (0.3, 0.9, 0.999999, 1.5):  # 1.5: beyond every APS score (RAPS scores go higher)
        q = np.full((n, 2), q_level)
        q[::3, 1] = np.inf
        want = np.stack([conformal_sets(conformal_scores(p, method, noise=noise), t).sum(axis=1)
                         for t in (q_level, np.inf)], axis=1).astype(float)
        want[:, 1] = np.where(np.isinf(q[:, 1]), c, want[:, 0])
        np.testing.assert_array_equal(_set_sizes(p, q, method, noise, 0.1, 1), want)
    np.testing.assert_array_equal(_true_scores(p, y, method, noise, 0.1, 1),
                                  conformal_scores(p, method, noise=noise)[np.arange(n), y])


def _full(p, y, **kw):
    """cross_validated_conformal's (coverages, set sizes, thresholds) in the full-sort's form."""
    r = cross_validated_conformal(p, y, **kw)
    return list(r.coverages), list(r.set_sizes), list(r.thresholds)


@pytest.mark.parametrize(("penalty", "kreg", "alpha"), [(0.05, 0, 0.2), (0.05, 3, 0.05), (0.02, 6, 0.1)])
def test_raps_penalty_and_kreg_equal_the_full_sort(penalty, kreg, alpha):
    """RAPS with other regularisation than the default (k_reg 0: the top class pays too; k_reg > 1: several
    classes free, so a prefix's bound on the next class must not add a penalty it does not pay, nor skip one it
    does): still exact on peaked rows with labels drawn from them, whose sets often end in a short prefix's tail.
    Each option is seen to reach the result (it differs from the default's)."""
    p, _ = _problem(3, 300, 25, 5)
    u = np.random.default_rng(9).random(300)
    y = np.minimum((p.cumsum(axis=1) < u[:, None]).sum(axis=1), 24)  # y ~ p: mostly top-ranked labels
    kw = dict(method="raps", alpha=alpha, n_repeats=2, seed=1, randomized=True)
    want = full_sort_conformal(p, y, **kw, penalty=penalty, kreg=kreg)
    assert _full(p, y, **kw, penalty=penalty, kreg=kreg) == want
    assert want != full_sort_conformal(p, y, **kw)
    assert max(want[1]) > 1


@pytest.mark.parametrize("method", ["thr", "aps"])
def test_several_row_blocks(method):
    """More entries than one row block (2**18): every block's scores and sets are computed."""
    p, y = _problem(3, 2700, 100, 2)
    kw = dict(method=method, alpha=0.1, n_repeats=1, seed=0, randomized=True)
    assert _full(p, y, **kw) == full_sort_conformal(p, y, **kw)


def test_float32_probs_are_scored_in_float64():
    """float32 probabilities give exactly the results of their float64 values (scores, sums and thresholds in
    float64: 1 - p or a running sum in float32 would move the thresholds)."""
    p, y = _problem(0, 400, 12, 3)
    p32 = p.astype(np.float32)
    p32 /= p32.sum(axis=1, keepdims=True)
    for method in ("thr", "aps", "raps"):
        assert cross_validated_conformal(p32, y, method=method, n_repeats=2) == \
            cross_validated_conformal(p32.astype(np.float64), y, method=method, n_repeats=2)
        s = conformal_scores(p32, method)
        assert s.dtype == np.float64
        np.testing.assert_array_equal(s, conformal_scores(p32.astype(np.float64), method))
    # 1 - p in float32 rounds 1 - 0.1f = 0.8999999985 down to 0.89999998, below a threshold 1 - (the next float32
    # after 0.1) = 0.8999999911 that the exact score exceeds: the class must stay out of the THR set
    p = np.array([[0.1, 0.9], [0.5, 0.5]], dtype=np.float32)
    q = np.full((2, 1), 1.0 - float(np.nextafter(np.float32(0.1), np.float32(1))))
    assert np.float32(1) - p[0, 0] <= q[0, 0] < 1.0 - float(p[0, 0])
    np.testing.assert_array_equal(_set_sizes(p, q, "thr", None, 0.1, 1)[:, 0],
                                  conformal_sets(conformal_scores(p, "thr"), q).sum(axis=1))


def test_defaults_and_the_result_fields():
    """The documented defaults (APS, alpha 0.1, 5 repeats, seed 0, randomised, lambda 0.1, k_reg 1), and the
    result names its method and level."""
    p, y = _problem(0, 80, 6, 4)
    r = cross_validated_conformal(p, y)
    assert r == cross_validated_conformal(p, y, method="aps", alpha=0.1, n_repeats=5, seed=0, randomized=True,
                                          penalty=0.1, kreg=1)
    assert (r.method, r.alpha, len(r.thresholds)) == ("aps", 0.1, 10)
    r = cross_validated_conformal(p, y, method="raps", alpha=0.25, n_repeats=1)
    assert (r.method, r.alpha) == ("raps", 0.25)


def test_label_tied_with_a_later_class():
    """Ties rank by class index: in (0.5, 0.25, 0.25) label 1 has rank 2 and APS score 0.5 + 0.25 = 0.75 (label 2
    would be 1.0), also in a block whose other rows have no tie at their label."""
    p = np.array([[0.5, 0.25, 0.25]] * 40 + [[0.7, 0.2, 0.1]] * 40)
    y = np.array([1] * 40 + [0] * 40)
    scores = _true_scores(p, y, "aps", None, 0.1, 1)
    np.testing.assert_array_equal(scores, [0.75] * 40 + [0.7] * 40)
    r = cross_validated_conformal(p[:40], y[:40], method="aps", randomized=False, n_repeats=1)
    assert r.thresholds == (0.75, 0.75)


def test_conformal_quantile_by_hand():
    """The ceil((n + 1)(1 - alpha))-th smallest score: n = 9, alpha = 0.1 -> the 9th (the largest, still finite);
    n = 8 -> the 9th of 8: inf; n = 19 -> the 18th."""
    assert conformal_quantile(np.arange(9.0)[::-1], 0.1) == 8.0
    assert conformal_quantile(np.arange(8.0), 0.1) == float("inf")
    assert conformal_quantile(np.arange(19.0), 0.1) == 17.0
    assert conformal_quantile([3, 1, 2], 0.5) == 2.0


def test_thresholds_on_a_score_and_at_the_shortcut_margin():
    """Edges of the set-size shortcuts, against conformal_sets on every score: a threshold equal to the top
    class's randomised score counts it (score <= q), and a threshold exactly one margin below the top
    probability (q + 1e-9 == p_max in float64, where the shortcut for rows whose top class alone decides stops)."""
    from ubench.metrics.conformal import _PREFIX_MARGIN

    p, _ = _problem(3, 200, 10, 6)
    noise = np.random.default_rng(0).random(200)
    scores = conformal_scores(p, "aps", noise=noise)
    top = p.max(axis=1)
    q = scores[np.arange(200), p.argmax(axis=1)][:, None]  # the top class's own score
    want = conformal_sets(scores, q).sum(axis=1)
    assert (want >= 1).all()
    np.testing.assert_array_equal(_set_sizes(p, q, "aps", noise, 0.1, 1)[:, 0], want)
    q = top - _PREFIX_MARGIN
    for _ in range(4):  # nudge onto q + margin == top where rounding allows
        q = np.where(q + _PREFIX_MARGIN < top, np.nextafter(q, 2), np.where(q + _PREFIX_MARGIN > top,
                                                                             np.nextafter(q, -1), q))
    on_edge = q + _PREFIX_MARGIN == top
    assert on_edge.sum() > 100
    plain = conformal_scores(p, "aps")
    want = conformal_sets(plain, q[:, None]).sum(axis=1)
    np.testing.assert_array_equal(_set_sizes(p, q[:, None], "aps", None, 0.1, 1)[:, 0], want)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda p, y: cross_validated_conformal(p, y, alpha=0.0), "alpha must lie in (0, 1), got 0.0"),
        (lambda p, y: cross_validated_conformal(p, y, alpha=1), "alpha must lie in (0, 1), got 1"),
        (lambda p, y: cross_validated_conformal(p, y, alpha=1.5), "alpha must lie in (0, 1), got 1.5"),
        (lambda p, y: cross_validated_conformal(p, y, alpha=float("nan")), "alpha must lie in (0, 1), got nan"),
        (lambda p, y: cross_validated_conformal(p, y, method="lac"),
         "method must be one of ('thr', 'aps', 'raps'), got 'lac'"),
        (lambda p, y: conformal_scores(p, "APS"), "method must be one of ('thr', 'aps', 'raps'), got 'APS'"),
    ],
)
def test_errors_say_what_is_wrong(call, message):
    p, y = _problem(0, 20, 3, 0)
    with pytest.raises(ValueError) as ei:
        call(p, y)
    assert str(ei.value) == message


class _RowsOnly:
    """A matrix that can only be read in row slices (as a split re-read from its archive is)."""

    def __init__(self, a):
        self._a, self.shape, self.dtype = a, a.shape, a.dtype

    def __getitem__(self, key):
        if not isinstance(key, slice):
            raise TypeError("rows only")
        return self._a[key]


def test_reads_only_row_blocks():
    p, y = _problem(3, 500, 30, 1)
    from ubench.metrics.conformal import _cross_validated_conformal

    for method in ("thr", "aps", "raps"):
        a = _cross_validated_conformal(_RowsOnly(p), y, method=method, alpha=0.1, n_repeats=2, seed=0)
        b = cross_validated_conformal(p, y, method=method, alpha=0.1, n_repeats=2, seed=0)
        assert a == b


# --- MAPIE ----------------------------------------------------------------------------------------------------

def _mapie_score(method: str, seed: int):
    from mapie.conformity_scores import sets as mapie_sets  # the test extra installs MAPIE (pyproject.toml)

    score = mapie_sets.APSConformityScore() if method == "aps" else mapie_sets.RAPSConformityScore()
    score.random_state = seed
    score.classes = None
    return score


def _continuous(n, c, seed):
    """Tie-free rows (MAPIE breaks ties by reversed class index, ubench by class index)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, c)) * 2.5
    y = rng.integers(0, c, n)
    z[np.arange(n), y] += rng.normal(2.0, 1.5, n)
    p = np.exp(z - z.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True), y


@pytest.mark.parametrize("seed", [0, 1])
def test_aps_randomized_equals_mapie(seed):
    """MAPIE's APS: calibration scores (cumulative mass to the label minus u p_y, u from its RandomState), the
    finite-sample quantile, and randomized prediction sets (the last class kept when u' >= V) equal ubench's
    with the same u and u'."""
    from mapie.utils import _compute_classification_quantile

    n_cal, n_test, c, alpha = 400, 300, 12, 0.1
    p, y = _continuous(n_cal + n_test, c, seed)
    p_cal, y_cal, p_test = p[:n_cal], y[:n_cal], p[n_cal:]
    score = _mapie_score("aps", seed)
    score.classes = np.arange(c)
    mapie_cal = score.get_conformity_scores(y_cal, p_cal, y_enc=y_cal).ravel()
    u_cal = np.random.RandomState(seed).uniform(size=n_cal)
    ours_cal = _true_scores(p_cal, y_cal, "aps", u_cal, 0.1, 1)
    np.testing.assert_allclose(ours_cal, mapie_cal, rtol=0, atol=1e-12)
    q_mapie = float(_compute_classification_quantile(mapie_cal[:, None], np.array([alpha]))[0])
    assert conformal_quantile(ours_cal, alpha) == pytest.approx(q_mapie, abs=1e-12)
    score.quantiles_ = np.array([q_mapie])
    sets = score.get_prediction_sets(p_test[:, :, None], mapie_cal[:, None], np.array([alpha]), "prefit",
                                     include_last_label="randomized")[:, :, 0]
    u_test = np.random.RandomState(seed).uniform(size=n_test)
    ours = _set_sizes(p_test, np.full((n_test, 1), q_mapie), "aps", u_test, 0.1, 1)[:, 0]
    np.testing.assert_array_equal(ours, sets.sum(axis=1))


@pytest.mark.parametrize("method", ["aps", "raps"])
def test_deterministic_sets_equal_mapie(method):
    """Without the uniform term (``randomized=False``): ubench's set {c: running sum (+ RAPS penalty) <= q} is
    MAPIE's ``include_last_label=False`` set, which adds the top class when that set would be empty."""
    n, c, lam, k_reg = 500, 15, 0.1, 1
    p, y = _continuous(n, c, 7)
    score = _mapie_score(method, 0)
    score.classes = np.arange(c)
    cum, rank = score.get_true_label_cumsum_proba(y, p, np.arange(c))
    cal = cum[:, 0] + (lam * np.maximum(rank - k_reg, 0) if method == "raps" else 0.0)
    np.testing.assert_allclose(_true_scores(p, y, method, None, lam, k_reg), cal, rtol=0, atol=1e-12)
    if method == "raps":
        score.lambda_star, score.k_star = lam, k_reg
    for q in (0.5, 0.8, 0.95):
        score.quantiles_ = np.array([q])
        kwargs = {"lambda_star": lam, "k_star": k_reg} if method == "raps" else {}
        sets = score.get_prediction_sets(p[:, :, None], cal[:, None], np.array([0.1]), "prefit",
                                         include_last_label=False, **kwargs)[:, :, 0]
        ours = _set_sizes(p, np.full((n, 1), q), method, None, lam, k_reg)[:, 0]
        np.testing.assert_array_equal(np.maximum(ours, 1), sets.sum(axis=1))
