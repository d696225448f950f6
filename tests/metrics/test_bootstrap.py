# SPDX-License-Identifier: MIT
"""The vectorised bootstrap kernels (``metrics/bootstrap.py``, ``metrics/bootstrap_ranking.py``) against the statistic recomputed on the explicitly
resampled arrays: a replicate with counts w is the multiset in which sample i appears w_i times, so every kernel
must equal ubench's own point metric (itself pinned against scikit-learn elsewhere) on ``np.repeat(x, w)``. All-ones
counts (the first replicate of every check) give the point estimate; ties and duplicated samples are exercised by
discrete scores."""

from __future__ import annotations

import base64
import warnings
import zlib

import numpy as np
import pytest

from ubench.metrics import (
    auroc_score,
    average_precision_score,
    coverage_at_risk,
    expected_calibration_error,
    fpr_at_tpr,
    generalized_risk_coverage_auc,
    risk_at_coverage,
    risk_coverage_auc,
    uce_error,
)
from ubench.metrics import bootstrap
from ubench.metrics.bootstrap import (
    LinearColumns,
    bootstrap_counts,
    count_blocks,
    interval_rng,
    percentile_interval,
    weighted_binned_error,
)
from ubench.metrics import bootstrap_ranking
from ubench.metrics.bootstrap_ranking import _exclusive_cumsum, _last_at_most, _Ranked, weighted_detection, weighted_selective
from ubench.metrics.calibration import _equal_width_bin_index
from ubench.metrics.calibration_debiased import debiased_squared_error, equal_mass_edges
from ubench.metrics.uncertainty import _normalized_entropy


def _counts(n: int, b: int, seed: int) -> np.ndarray:
    """All-ones first, then b bootstrap replicates."""
    return np.vstack([np.ones((1, n)), bootstrap_counts(n, b, interval_rng(seed, 1))])


def _probs(rng, n, c, discrete=False):
    z = rng.normal(0, 2, (n, c))
    if discrete:
        z = np.round(z)  # many tied rows, so tied confidences and entropies
    p = np.exp(z - z.max(1, keepdims=True))
    return p / p.sum(1, keepdims=True)


def test_counts_are_draws_with_replacement_whatever_the_blocks(monkeypatch):
    """Each replicate's counts sum to n; the counts of a replicate do not depend on how the replicates are
    blocked (one draw of 7 equals draws of 3 then 4); the generator depends on the seed and the unit key."""
    full = bootstrap_counts(50, 7, interval_rng(3, 9))
    rng = interval_rng(3, 9)
    parts = np.vstack([bootstrap_counts(50, 3, rng), bootstrap_counts(50, 4, rng)])
    assert np.array_equal(full, parts) and np.all(full.sum(axis=1) == 50)
    assert not np.array_equal(full, bootstrap_counts(50, 7, interval_rng(3, 8)))
    big = bootstrap_counts(5000, 5, interval_rng(0, 0))  # the per-replicate path, drawn DRAW_CELLS at a time
    rng = interval_rng(0, 0)
    assert np.array_equal(big, [np.bincount(rng.integers(0, 5000, 5000), minlength=5000) for _ in range(5)])
    monkeypatch.setattr(bootstrap, "DRAW_CELLS", 2 * 5000)  # two replicates per call: the same counts
    assert np.array_equal(bootstrap_counts(5000, 5, interval_rng(0, 0)), big) and big.dtype == np.int16
    assert list(count_blocks(10, 1 << 20)) == [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10)]


def test_percentile_interval_is_numpy_quantiles_and_none_when_a_replicate_is_undefined():
    v = np.random.default_rng(0).normal(size=1001)
    assert percentile_interval(v, 0.9) == pytest.approx(list(np.quantile(v, [0.05, 0.95])))
    assert percentile_interval(np.r_[v, np.nan], 0.9) is None


@pytest.mark.parametrize("discrete", [False, True])
def test_binned_errors_equal_ece_and_uce_of_the_resampled_set(discrete):
    rng = np.random.default_rng(1)
    p = _probs(rng, 120, 4, discrete)
    y = rng.integers(0, 4, 120)
    w = _counts(120, 6, 0)
    pred = p.argmax(1)
    conf, hit = p.max(1), (pred == y).astype(float)
    u = _normalized_entropy(p)
    ece = weighted_binned_error(_equal_width_bin_index(conf, 10), hit - conf, 10, w)
    uce = weighted_binned_error(_equal_width_bin_index(u, 10), (1 - hit) - u, 10, w)
    for b in range(w.shape[0]):
        idx = np.repeat(np.arange(120), w[b].astype(int))
        assert ece[b] == pytest.approx(expected_calibration_error(p[idx], y[idx], n_bins=10), abs=1e-12)
        assert uce[b] == pytest.approx(uce_error(p[idx], y[idx], n_bins=10), abs=1e-12)


@pytest.mark.parametrize("discrete", [False, True])
def test_weighted_detection_equals_the_ranking_metrics_of_the_resampled_set(discrete):
    """AUROC, AP and FPR@TPR of each replicate equal ubench's functions (the scikit-learn conventions) on the
    multiset; positives and negatives resampled separately (stratified), as for OOD detection."""
    rng = np.random.default_rng(2)
    pos, neg = rng.normal(1, 1, 60), rng.normal(0, 1, 90)
    if discrete:
        pos, neg = np.round(pos * 2) / 2, np.round(neg * 2) / 2
    wp, wn = _counts(60, 8, 1), _counts(90, 8, 2)
    got = weighted_detection(pos, neg, wp, wn, tpr=0.95)
    for b in range(wp.shape[0]):
        s = np.r_[np.repeat(pos, wp[b].astype(int)), np.repeat(neg, wn[b].astype(int))]
        y = np.r_[np.ones(int(wp[b].sum()), int), np.zeros(int(wn[b].sum()), int)]
        assert got["auroc"][b] == pytest.approx(auroc_score(s, y), abs=1e-12)
        assert got["aupr"][b] == pytest.approx(average_precision_score(s, y), abs=1e-12)
        assert got["fpr"][b] == pytest.approx(fpr_at_tpr(s, y, tpr=0.95), abs=1e-12)


@pytest.mark.parametrize(("counts", "dtype"), [
    (bootstrap_counts(5000, 7, interval_rng(0, 1)), np.int32),  # int16 bootstrap counts
    (np.full((1, 3), 1 << 29, dtype=np.int32), np.int64),  # a row reaches 3 * 2**29 >= 2**30: the kernels add two
    (np.full((6, 3), 1 << 27, dtype=np.int32), np.int64),  # rows below 2**30, the block's sum 18 * 2**27 >= 2**31
    (np.full((5, 3), 1 << 27, dtype=np.int32), np.int32),  # the block's sum 15 * 2**27 just below 2**31
    (np.zeros((3, 0), dtype=np.int16), np.int32),  # no samples (e.g. a split without errors): zeros
])
def test_exclusive_cumsum_is_each_rows_running_sum_from_zero(counts, dtype):
    """Each row's running sum from 0, against numpy's row-wise sum in int64; int32 only while neither a row
    (2**30: the kernels add two) nor the block summed as one row (2**31) can overflow."""
    got = _exclusive_cumsum(counts)
    want = np.zeros((counts.shape[0], counts.shape[1] + 1), dtype=np.int64)
    np.cumsum(counts, axis=1, dtype=np.int64, out=want[:, 1:])
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("compare_up_to", [0, 1 << 30])  # search each row / compare every entry
def test_last_at_most_is_the_last_index_not_above_each_rows_bound(monkeypatch, compare_up_to):
    """Against a scan of each row: ties (the last of equal entries), bounds below every entry (-1) and above."""
    monkeypatch.setattr(bootstrap_ranking, "SEARCH_ROW_MIN", compare_up_to)
    rng = np.random.default_rng(0)
    rows = np.cumsum(rng.integers(0, 3, (40, 25)), axis=1).astype(np.int32)
    x = np.r_[rows[:20, 7], rows[20:38, -1] + 1, -1, 0].astype(np.int32)  # on an entry, above all, below all
    want = [max((j for j in range(rows.shape[1]) if rows[b, j] <= x[b]), default=-1) for b in range(rows.shape[0])]
    np.testing.assert_array_equal(_last_at_most(rows, x), want)


def test_weighted_detection_is_undefined_without_positives():
    got = weighted_detection(np.array([1.0]), np.array([0.0, 2.0]), np.zeros((1, 1)), np.ones((1, 2)))
    assert np.isnan(got["auroc"][0]) and percentile_interval(got["auroc"], 0.95) is None


@pytest.mark.parametrize("n_pos, n_neg", [(0, 3), (3, 0), (0, 0)])
def test_weighted_detection_without_positive_or_negative_samples_is_nan(n_pos, n_neg):
    """No positive (or negative) sample at all, not only none drawn: every statistic of every replicate is NaN, as
    documented (the FPR's threshold once indexed the empty positive scores)."""
    rng = np.random.default_rng(0)
    b = 4
    got = weighted_detection(rng.random(n_pos), rng.random(n_neg), np.ones((b, n_pos), np.int16),
                             np.ones((b, n_neg), np.int16), tpr=0.95)
    for key in ("auroc", "aupr", "fpr"):
        assert got[key].shape == (b,) and got[key].dtype == np.float64 and np.isnan(got[key]).all(), key


@pytest.mark.parametrize("discrete", [False, True])
def test_weighted_selective_equals_the_selective_metrics_of_the_resampled_set(discrete):
    """AURC, AUGRC, risk at 80 % coverage and coverage at 5 % risk of each replicate equal ubench's functions
    (expected value over tied uncertainties) on the multiset."""
    rng = np.random.default_rng(3)
    n = 151  # 0.8 n is not an integer: ceil, not floor
    p = _probs(rng, n, 3, discrete)
    y = np.where(rng.random(n) < 0.9, p.argmax(1), rng.integers(0, 3, n))  # about 7 % errors
    u = -p.max(1)
    err = (p.argmax(1) != y).astype(float)
    w = _counts(n, 8, 3)
    got = weighted_selective(err, w, _Ranked.of(u))
    for b in range(w.shape[0]):
        idx = np.repeat(np.arange(n), w[b].astype(int))
        pp, yy = p[idx], y[idx]
        assert got["aurc"][b] == pytest.approx(risk_coverage_auc(pp, yy, uncertainty=u[idx]), abs=1e-12)
        assert got["augrc"][b] == pytest.approx(generalized_risk_coverage_auc(pp, yy, uncertainty=u[idx]), abs=1e-12)
        assert got["risk_at_cov"][b] == pytest.approx(risk_at_coverage(pp, yy, coverage=0.8, uncertainty=u[idx]), abs=1e-12)
        cov = coverage_at_risk(pp, yy, risk=0.05, uncertainty=u[idx])
        assert (np.isnan(got["cov_at_risk"][b]) and cov is None) or got["cov_at_risk"][b] == pytest.approx(cov)


def test_debiased_squared_error_of_weighted_bin_sums_equals_the_resampled_set_with_edges_held():
    """The replicate's debiased squared error from weighted per-bin sums equals the estimator on the multiset with
    the full set's equal-mass edges (what the interval of l2_ce_debiased holds fixed)."""
    rng = np.random.default_rng(4)
    conf = rng.uniform(0.4, 1, 200)
    hit = (rng.random(200) < conf - 0.05).astype(float)
    edges = equal_mass_edges(conf, 10)
    cell = np.searchsorted(edges, conf)
    w = _counts(200, 5, 4)
    k = edges.size
    sums = [np.stack([np.bincount(cell, weights=wb * x, minlength=k) for wb in w]) for x in (np.ones(200), conf, hit)]
    got = debiased_squared_error(*sums)
    for b in range(w.shape[0]):
        idx = np.repeat(np.arange(200), w[b].astype(int))
        n_b = np.bincount(cell[idx], minlength=k)
        ok = n_b >= 2
        cb = np.bincount(cell[idx], weights=conf[idx], minlength=k)[ok] / n_b[ok]
        yb = np.bincount(cell[idx], weights=hit[idx], minlength=k)[ok] / n_b[ok]
        want = np.sum(n_b[ok] * ((cb - yb) ** 2 - yb * (1 - yb) / (n_b[ok] - 1))) / idx.size
        assert got[b] == pytest.approx(want, abs=1e-14)


@pytest.mark.parametrize("seed,discrete", [(5, False), (6, False), (7, True), (8, True)])
def test_misclassification_detection_from_the_selective_sort_equals_weighted_detection(seed, discrete):
    """The errors' detection read off the selective kernel's one cumulative sum equals weighted_detection on the
    errors (positives) and the correct samples (negatives), and the ranking metrics on the multiset; with tied
    uncertainties (discrete: ties among errors, among correct samples and between the two) too."""
    rng = np.random.default_rng(seed)
    n = 300
    u = rng.normal(size=n)
    err = (rng.random(n) < 0.1 + 0.2 * (u > 0.5)).astype(float)
    if discrete:
        u = np.round(u * 3) / 3
    w = _counts(n, 6, seed)
    ranked = _Ranked.of(u)
    assert ranked.tied == discrete
    got = weighted_selective(err, w, ranked, detection_tpr=0.95)
    pos, neg = err > 0, err == 0
    want = weighted_detection(u[pos], u[neg], w[:, pos], w[:, neg], tpr=0.95)
    for key in ("auroc", "aupr", "fpr"):
        assert got[key] == pytest.approx(want[key], abs=1e-12), key
    for b in range(w.shape[0]):
        idx = np.repeat(np.arange(n), w[b].astype(int))
        s, y = u[idx], err[idx].astype(int)
        assert got["auroc"][b] == pytest.approx(auroc_score(s, y), abs=1e-12)
        assert got["aupr"][b] == pytest.approx(average_precision_score(s, y), abs=1e-12)
        assert got["fpr"][b] == pytest.approx(fpr_at_tpr(s, y, tpr=0.95), abs=1e-12)


@pytest.mark.parametrize("threads", [1, 2])
def test_resample_gives_each_split_its_replicates_on_the_same_counts(monkeypatch, threads):
    """``resample`` (each split's linear columns in a product of their own beside the sorted kernels, on one or
    two threads, blocks of 7 replicates) gives each split the values of its own ``replicates`` on the counts drawn
    block by block from the unit's generator: an in-domain split with the protocol's columns, a shift split of the
    same unit and an OOD split of another unit."""
    from interval_model import draw

    from ubench.metrics import bootstrap, intervals
    from ubench.metrics.intervals import LabelledStatistics, OODStatistics, resample
    from ubench.metrics.protocol_bootstrap import cv_influence
    from ubench.metrics.report_sections import split_arrays

    rng = np.random.default_rng(9)
    n, n_ood = 400, 300
    probs, labels, ood = draw(rng, n, n_ood)
    shifted = probs ** 0.5 / (probs ** 0.5).sum(axis=1, keepdims=True)
    in_arrays = split_arrays(probs[None])
    settings = dict(unit="u", bins=15, eps=1e-12, smoothing=0.0)
    stats = {"test": LabelledStatistics(in_arrays, labels, **settings, scores=("total", "confidence"),
                                        protocol=cv_influence(probs[None], labels)),
             "shift": LabelledStatistics(split_arrays(shifted[None]), labels, **settings, full=False),
             "ood": OODStatistics(in_arrays, split_arrays(ood[None]), unit="o", against="u", scores=("total",))}
    monkeypatch.setattr(bootstrap, "BLOCK_CELLS", 7 * n)
    got = resample(stats, {"u": n, "o": n_ood}, n_replicates=20, seed=3, threads=threads)
    rngs = {u: interval_rng(3, intervals._unit_key(u)) for u in ("u", "o")}
    want: dict[str, dict[str, list]] = {name: {} for name in stats}
    for start, stop in count_blocks(20, n):
        w = {"u": bootstrap_counts(n, stop - start, rngs["u"]), "o": bootstrap_counts(n_ood, stop - start, rngs["o"])}
        for name, stat in stats.items():
            for key, v in stat.replicates(w).items():
                want[name].setdefault(key, []).append(v)
    assert len(list(count_blocks(20, n))) == 3
    for name in stats:
        assert sorted(got[name]) == sorted(want[name]), name
        for key, v in want[name].items():
            np.testing.assert_allclose(got[name][key], np.concatenate(v), rtol=1e-12, atol=1e-15, err_msg=key)
    assert "calibrated_ece" in got["test"] and "misclassification_auroc_confidence" in got["test"]
    assert not np.allclose(got["shift"]["ece"], got["test"]["ece"])


def test_one_hot_blocks_are_kept_as_nonzeros_and_written_as_the_dense_columns():
    """``add_cells`` and ``add_one_hot`` keep a one-hot block as its nonzeros (16 bytes per sample and entry, not
    8 per column: at N = 50,000 the report's ~250 cell columns were 100 MB held beside the split's mean) and the
    product's matrix holds exactly the dense columns built by hand, in registration order, beside the plain ones."""
    rng = np.random.default_rng(3)
    n, k = 40, 5
    cells, gaps, x = rng.integers(0, k, n), rng.normal(size=n), rng.normal(size=n)
    other = rng.integers(0, 2 * k, n)
    cols = LinearColumns(n)
    cols.add("x", x)
    cols.add_cells("bins", cells, k, None, gaps)
    cols.add_one_hot("cv", 4 * k, [(other, gaps), (2 * k + cells, None)])
    assert cols.width == 1 + 2 * k + 4 * k
    dense = np.zeros((n, cols.width))
    dense[:, 0] = x
    for i in range(n):  # the hand-built one-hot columns
        dense[i, 1 + cells[i]] = 1.0
        dense[i, 1 + k + cells[i]] = gaps[i]
        dense[i, 1 + 2 * k + other[i]] = gaps[i]
        dense[i, 1 + 4 * k + cells[i]] = 1.0
    np.testing.assert_array_equal(cols.matrix(), dense)
    w = bootstrap_counts(n, 7, np.random.default_rng(0))
    got = cols.apply(w)
    np.testing.assert_allclose(got["bins"], w @ dense[:, 1:1 + 2 * k], rtol=1e-13)
    np.testing.assert_allclose(got["cv"], w @ dense[:, 1 + 2 * k:], rtol=1e-13)
    np.testing.assert_allclose(got["x"], (w @ x) / w.sum(axis=1), rtol=1e-13)
    assert not any(isinstance(b, np.ndarray) and b.shape[1] > 1 for b in cols._cols)  # nothing dense kept


def test_counts_kept_from_one_call_to_the_next_are_drawn_once_and_give_the_same_values(monkeypatch, drawn_counts):
    """``resample(..., counts=cache)`` called a split at a time (as a report resamples its batches) draws a unit
    once, in the first call that needs it, and gives every split the values of resampling it without the cache;
    a cache left incomplete (a call that failed half-way) is drawn again, not read past its end; a unit beyond
    ``KEEP_CELLS`` is not kept."""
    from interval_model import draw

    from ubench.metrics import bootstrap, intervals
    from ubench.metrics.intervals import LabelledStatistics, OODStatistics, resample
    from ubench.metrics.report_sections import split_arrays

    rng = np.random.default_rng(4)
    n, n_ood = 300, 200
    probs, labels, ood = draw(rng, n, n_ood)
    in_arrays = split_arrays(probs[None])
    settings = dict(unit="u", bins=15, eps=1e-12, smoothing=0.0)
    stats = {"test": LabelledStatistics(in_arrays, labels, **settings, scores=("total",)),
             "shift": LabelledStatistics(split_arrays((probs ** 0.5)[None]), labels, **settings, full=False),
             "ood": OODStatistics(in_arrays, split_arrays(ood[None]), unit="o", against="u", scores=("total",))}
    units = {"test": {"u": n}, "shift": {"u": n}, "ood": {"u": n, "o": n_ood}}
    monkeypatch.setattr(bootstrap, "BLOCK_CELLS", 7 * n)
    alone = {name: resample({name: stat}, units[name], n_replicates=20, seed=5, block_n=n)[name]
             for name, stat in stats.items()}
    drawn = drawn_counts
    drawn.clear()  # the draws of the calls above, without the cache
    cache: dict = {}
    for name, stat in stats.items():
        got = resample({name: stat}, units[name], n_replicates=20, seed=5, block_n=n, counts=cache)[name]
        for key, v in alone[name].items():
            np.testing.assert_array_equal(got[key], v, err_msg=f"{name} {key}")
    assert sorted(drawn) == sorted([n] * 3 + [n_ood] * 3)  # 3 blocks of 7, 7, 6 replicates: each unit once
    assert sorted(cache) == ["o", "u"] and all(b.dtype == np.uint8 for b in cache["u"])

    cache["u"].pop()  # incomplete: drawn again, in full
    drawn.clear()
    got = resample({"shift": stats["shift"]}, units["shift"], n_replicates=20, seed=5, block_n=n, counts=cache)
    np.testing.assert_array_equal(got["shift"]["accuracy"], alone["shift"]["accuracy"])
    assert drawn == [n] * 3 and len(cache["u"]) == 3

    monkeypatch.setattr(intervals, "KEEP_CELLS", 20 * n - 1)  # the unit does not fit beside nothing
    cache, drawn[:] = {}, []
    for _ in range(2):
        resample({"shift": stats["shift"]}, units["shift"], n_replicates=20, seed=5, block_n=n, counts=cache)
    assert cache == {} and drawn == [n] * 6  # per call 3 blocks, not kept


def _members(rng, m, n, c):
    """(M, N, C) member probabilities with rounded logits: tied confidences, entropies and votes."""
    z = np.round(rng.normal(0, 1.5, (m, n, c)) + rng.normal(0, 1.5, (1, n, c)))
    p = np.exp(z - z.max(axis=2, keepdims=True))
    return p / p.sum(axis=2, keepdims=True)


def _same(got: float, want) -> bool:
    """A replicate value against a point value: NaN stands for an undefined (None) one."""
    if want is None:
        return bool(np.isnan(got))
    return bool(np.isclose(got, want, rtol=1e-9, atol=1e-12))


@pytest.mark.parametrize("c,scores,reduction", [(2, ("total",), "sum"),
                                                (5, ("total", "knowledge", "confidence"), "mean"),
                                                (6, ("knowledge", "confidence"), "sum")])
def test_labelled_statistics_replicates_are_the_report_sections_of_the_resampled_split(c, scores, reduction):
    """Every replicate of an in-domain split (:class:`LabelledStatistics`, ``full``) and of a shift split equals
    the report's own section (``in_domain_section`` / ``shift_split_section``, whose metrics are pinned against
    scikit-learn elsewhere) of the explicitly resampled split ``np.repeat``: every key, with its report name, and
    no other; all-ones counts first (the point estimate). ``l2_ce_debiased`` holds the full set's equal-mass edges
    (Kumar et al.'s estimator by hand). C = 2 has a UCE, C = 5 no top-5 accuracy, C = 6 one; the detection
    threshold is the default 95 % TPR; the decision cost sees the smoothing."""
    from ubench.metrics.intervals import LabelledStatistics
    from ubench.metrics.report_sections import in_domain_section, shift_split_section, split_arrays

    rng = np.random.default_rng(c)
    n, bins, eps, smoothing = 90, 8, 1e-12, 0.05
    members = _members(rng, 3, n, c)
    labels = rng.integers(0, c, n)
    cost = rng.uniform(0.5, 3.0, (c, c))
    np.fill_diagonal(cost, 0.0)
    arrays = split_arrays(members, smoothing=smoothing)
    settings = dict(unit="u", bins=bins, eps=eps, smoothing=smoothing)
    stat = LabelledStatistics(arrays, labels, **settings, scores=scores, cost=cost, cost_reduction=reduction)
    shift = LabelledStatistics(arrays, labels, **settings, full=False)
    w = _counts(n, 4, c)
    reps, shift_reps = stat.replicates({"u": w}), shift.replicates({"u": w})

    keys = {"accuracy", "nll", "brier", "ece", "uce", "l2_ce_debiased", "mean_total_uncertainty",
            "mean_knowledge_uncertainty", "mean_data_uncertainty", "disagreement", "variation_ratio",
            "decision_cost", "decision_cost_mean", "decision_cost_sum", "augrc", "risk_at_80_cov", "cov_at_5_risk"}
    keys |= {f"aurc_{s}" for s in scores} | {f"misclassification_{k}_{s}" for s in scores
                                             for k in ("auroc", "aupr", "fpr95")}
    keys |= {"top5_accuracy"} if c > 5 else set()
    assert set(reps) == keys
    assert set(shift_reps) == {"accuracy", "nll", "brier", "ece", "mean_total_uncertainty"}
    assert all(v.shape == (5,) for v in reps.values())

    conf = arrays.mean_probs.max(axis=1)
    hit = (arrays.mean_probs.argmax(axis=1) == labels).astype(float)
    cell = np.searchsorted(equal_mass_edges(conf, bins), conf)  # the full set's bins, held
    for b in range(w.shape[0]):
        idx = np.repeat(np.arange(n), w[b].astype(int))
        resampled = split_arrays(members[:, idx], smoothing=smoothing)
        want = in_domain_section(resampled, labels[idx], bins=bins, eps=eps, smoothing=smoothing, tpr=0.95,
                                 cost_matrix=cost, cost_reduction=reduction, scores=scores)
        n_b = np.bincount(cell[idx])
        ok = n_b >= 2
        cb, yb = (np.bincount(cell[idx], weights=x[idx])[ok] / n_b[ok] for x in (conf, hit))
        sq = np.sum(n_b[ok] * ((cb - yb) ** 2 - yb * (1 - yb) / (n_b[ok] - 1))) / idx.size
        want["l2_ce_debiased"] = np.sqrt(max(sq, 0.0))
        if b == 0:
            assert want["l2_ce_debiased"] == pytest.approx(in_domain_section(
                arrays, labels, bins=bins, eps=eps, smoothing=smoothing, tpr=0.95, scores=scores)["l2_ce_debiased"])
        bad = [k for k in sorted(keys) if not _same(reps[k][b], want[k])]
        assert not bad, (b, {k: (reps[k][b], want[k]) for k in bad})
        want = shift_split_section(resampled, labels[idx], bins=bins, eps=eps, smoothing=smoothing)
        bad = [k for k in sorted(shift_reps) if not _same(shift_reps[k][b], want[k])]
        assert not bad, (b, {k: (shift_reps[k][b], want[k]) for k in bad})


@pytest.mark.parametrize("n_errors", [0, 1, 29, 30])
def test_misclassification_detection_replicates_exist_exactly_when_the_split_has_errors_and_hits(n_errors):
    """Misclassification detection has replicates when the split holds at least one error and one correct
    prediction (1 and N - 1 errors included), none otherwise (the report's value is None there)."""
    from ubench.metrics.intervals import LabelledStatistics
    from ubench.metrics.report_sections import misclassification_section, split_arrays

    rng = np.random.default_rng(n_errors)
    n = 30
    members = _members(rng, 2, n, 3)
    arrays = split_arrays(members)
    pred = arrays.mean_probs.argmax(axis=1)
    labels = np.where(np.arange(n) < n_errors, (pred + 1) % 3, pred)
    stat = LabelledStatistics(arrays, labels, unit="u", bins=10, eps=1e-12, smoothing=0.0, scores=("total",))
    reps = stat.replicates({"u": _counts(n, 2, 1)})
    section, _ = misclassification_section(arrays, labels, tpr=0.95, scores=("total",))
    assert ("misclassification_auroc_total" in reps) == (0 < n_errors < n)
    assert (section["misclassification_auroc_total"] is not None) == (0 < n_errors < n)
    if 0 < n_errors < n:
        assert reps["misclassification_auroc_total"][0] == pytest.approx(section["misclassification_auroc_total"])


@pytest.mark.parametrize("tpr", [None, 0.9])
def test_ood_statistics_replicates_are_the_ood_section_of_both_resampled_splits(tpr):
    """An OOD split's replicates equal the report's ``ood_section`` of the in-domain samples resampled with the
    in-domain unit's counts against the OOD samples resampled with their own (stratified), every score, with
    the report's key names; the default TPR is 95 %."""
    from ubench.metrics.intervals import OODStatistics
    from ubench.metrics.report_sections import ood_section, split_arrays

    rng = np.random.default_rng(11)
    n_in, n_ood = 70, 50
    in_members, ood_members = _members(rng, 2, n_in, 4), _members(rng, 2, n_ood, 4) ** 0.5
    ood_members /= ood_members.sum(axis=2, keepdims=True)
    in_arrays, ood_arrays = split_arrays(in_members), split_arrays(ood_members)
    kw = {} if tpr is None else {"tpr": tpr}
    stat = OODStatistics(in_arrays, ood_arrays, unit="o", against="u", **kw)
    wi, wo = _counts(n_in, 3, 1), _counts(n_ood, 3, 2)
    reps = stat.replicates({"u": wi, "o": wo})
    assert set(reps) == {f"ood_{k}_{s}" for k in ("auroc", "aupr", "fpr95") for s in ("total", "knowledge",
                                                                                        "confidence")}
    for b in range(wi.shape[0]):
        ii, io = (np.repeat(np.arange(w.shape[1]), w[b].astype(int)) for w in (wi, wo))
        want = ood_section(split_arrays(in_members[:, ii]), split_arrays(ood_members[:, io]), tpr=tpr or 0.95)
        bad = [k for k in sorted(reps) if not _same(reps[k][b], want[k])]
        assert not bad, (b, {k: (reps[k][b], want[k]) for k in bad})


def test_report_intervals_summary_by_hand():
    """``report_intervals``: each split's keys that have replicates (numbers only, its ``calibrated`` ones
    included), a split without replicates skipped (not the splits after it), the summary's primary-split keys,
    the mean over OOD splits and the median and quartiles over shift splits computed per replicate, each the
    percentile interval (numpy's quantiles at (1 -+ level) / 2) of its replicates."""
    from ubench.metrics.intervals import report_intervals

    rng = np.random.default_rng(2)
    b, level = 400, 0.9
    keys = {"test": ("accuracy", "nll", "brier", "ece", "cll"), "o": ("ood_auroc_total",),
            "s": ("accuracy", "nll", "brier", "ece")}
    reps = {name: {k: rng.normal(i, 1.0, b) for k in keys[name if name == "test" else name[0]]}
            for i, name in enumerate(("test", "s1", "s2", "s3", "o1", "o2"))}
    report = {"primary_split": "test",
              "in_domain": {"test": {"accuracy": 0.9, "nll": 0.3, "label": "x", "flag": True,
                                     "calibrated": {"cll": -0.2}}},
              "shift": {"s0": {"accuracy": 0.5}, "s1": {"accuracy": 0.7, "ece": 0.1}, "s2": {"accuracy": 0.6},
                        "s3": {"accuracy": 0.4}},
              "ood": {"o1": {"ood_auroc_total": 0.8}, "o2": {"ood_auroc_total": 0.7}},
              "summary": {"accuracy": 0.9, "cll": -0.2, "ood_auroc_total": 0.75, "shift_accuracy_median": 0.6,
                          "shift_ece_q25": 0.1, "shift_nll_q75": 0.2, "shift_brier_median": None, "note": "n"}}
    iv = report_intervals(report, reps, level=level, n_replicates=b, seed=7)

    def pi(v):
        return [float(np.quantile(v, (1 - level) / 2)), float(np.quantile(v, (1 + level) / 2))]

    assert (iv["level"], iv["replicates"], iv["seed"]) == (level, b, 7)
    assert sorted(iv["splits"]) == ["o1", "o2", "s1", "s2", "s3", "test"]  # s0 has no replicates
    assert sorted(iv["splits"]["test"]) == ["accuracy", "cll", "nll"]
    assert sorted(iv["splits"]["s1"]) == ["accuracy", "ece"]
    assert iv["splits"]["test"]["nll"] == pytest.approx(pi(reps["test"]["nll"]))
    shift = np.stack([reps[s]["accuracy"] for s in ("s1", "s2", "s3")])
    want = {"accuracy": pi(reps["test"]["accuracy"]), "cll": pi(reps["test"]["cll"]),
            "ood_auroc_total": pi((reps["o1"]["ood_auroc_total"] + reps["o2"]["ood_auroc_total"]) / 2),
            "shift_accuracy_median": pi(np.sort(shift, axis=0)[1]),
            "shift_ece_q25": pi(np.percentile(np.stack([reps[s]["ece"] for s in ("s1", "s2", "s3")]), 25, axis=0)),
            "shift_nll_q75": pi(np.percentile(np.stack([reps[s]["nll"] for s in ("s1", "s2", "s3")]), 75, axis=0))}
    assert sorted(iv["summary"]) == sorted(want)
    for k, v in want.items():
        assert iv["summary"][k] == pytest.approx(v, rel=1e-12), k
    # the quartiles of three values by hand: linear interpolation halfway between the lowest two (and top two)
    srt = np.sort(np.stack([reps[s]["ece"] for s in ("s1", "s2", "s3")]), axis=0)
    assert iv["summary"]["shift_ece_q25"] == pytest.approx(pi((srt[0] + srt[1]) / 2), rel=1e-12)


def test_samples_round_trip_exactly_and_decoding_names_the_bad_column():
    """``encode_samples`` writes little-endian float64 whatever the column's dtype (float32, integers, a
    big-endian array), which ``decode_samples`` reads back exactly; a column that is not base64 (a character
    outside the alphabet, even where dropping it would decode), holds another number of values (or a partial
    one) or a non-finite value is refused naming the column and, for the latter, the first bad index."""
    from ubench.metrics.intervals import decode_samples, encode_samples

    cols = {"a": np.array([0.1, -2.5, 3e-300], np.float32), "b": np.array([1, 2, 70000]),
            "c": np.array([1.5, 2.25, -0.0], dtype=">f8")}
    enc = encode_samples(cols)
    assert enc["c"] == base64.b64encode(np.array([1.5, 2.25, -0.0], "<f8").tobytes()).decode("ascii")
    dec = decode_samples(enc, 3)
    for k, v in cols.items():
        assert dec[k].dtype == np.float64 and np.array_equal(dec[k], v.astype(np.float64)), k
    good = enc["c"]
    with pytest.raises(ValueError, match=r"^where: column 'c' is not base64$"):
        decode_samples({"c": good[:4] + "!" + good[4:]}, 3, "where")
    with pytest.raises(ValueError, match=r"^samples: column 'c' holds 2 values, not 3$"):
        decode_samples({"c": base64.b64encode(base64.b64decode(good)[:20]).decode()}, 3)
    with pytest.raises(ValueError, match=r"^samples: column 'c' holds 3 values, not 4$"):
        decode_samples({"c": good}, 4)
    bad = np.array([1.0, 2.0, np.nan, np.inf, 5.0])
    with pytest.raises(ValueError, match=r"^s: column 'x' has a non-finite value at index 2$"):
        decode_samples(encode_samples({"x": bad}), 5, "s")


def test_resampling_units_by_role_and_sample_ids():
    """In-domain and shift splits are resampled by their sample ids (the same ids: one unit), else by name; an
    OOD split always on its own, by its ids or its name."""
    from ubench.metrics.intervals import _unit_key, resampling_unit

    assert resampling_unit("in_domain", "test", "d1") == resampling_unit("shift", "s", "d1") == "ids:d1"
    assert resampling_unit("shift", "s", None) == "split:s"
    assert resampling_unit("ood", "svhn", "d1") == "ood:d1" and resampling_unit("ood", "svhn", None) == "ood:svhn"
    assert _unit_key("ids:d1") == zlib.crc32(b"ids:d1")


def test_kept_counts_are_bytes_only_below_256():
    """A kept block of counts is stored as uint8 when every count is below 256 (255 included), else as it is
    (256 would wrap to 0); an empty block stays as it is."""
    from ubench.metrics.intervals import _as_bytes

    w = np.array([[0, 255, 3]], np.uint16)
    assert _as_bytes(w).dtype == np.uint8 and np.array_equal(_as_bytes(w), w)
    w[0, 1] = 256
    assert _as_bytes(w).dtype == np.uint16 and np.array_equal(_as_bytes(w), w)
    assert _as_bytes(np.zeros((0, 3), np.uint16)).dtype == np.uint16


@pytest.mark.parametrize("keep,kept", [(lambda n, m: 20 * n, ["u"]), (lambda n, m: 20 * n - 1, ["o"]),
                                       (lambda n, m: 20 * (n + m), ["o", "u"]),
                                       (lambda n, m: 20 * (n + m) - 1, ["u"])])
def test_counts_are_kept_while_they_fit_in_keep_cells(monkeypatch, keep, kept):
    """A unit's counts (B x n cells) are kept when they fit in what ``KEEP_CELLS`` leaves beside those kept
    already, the bound included; units are taken in order, each one's cells taken from the room; a second call
    counts the cells kept by the first."""
    from ubench.metrics import intervals
    from ubench.metrics.intervals import LabelledStatistics, resample
    from ubench.metrics.report_sections import split_arrays

    rng = np.random.default_rng(0)
    n, m = 30, 20
    stats = {}
    for name, unit, size in (("a", "u", n), ("b", "o", m)):
        members = _members(rng, 1, size, 3)
        stats[name] = LabelledStatistics(split_arrays(members), rng.integers(0, 3, size), unit=unit, bins=5,
                                         eps=1e-12, smoothing=0.0, full=False)
    monkeypatch.setattr(intervals, "KEEP_CELLS", keep(n, m))
    cache: dict = {}
    resample(stats, {"u": n, "o": m}, n_replicates=20, seed=1, counts=cache)
    assert sorted(cache) == kept
    if kept == ["u"]:  # the room left beside u: o does not fit in a second call either
        resample({"b": stats["b"]}, {"o": m}, n_replicates=20, seed=1, counts=cache)
        assert sorted(cache) == ["u"]


class _MeanOnly:
    """A statistic with only ``unit`` and ``replicates`` (no linear columns, no jobs): the weighted mean of x."""

    def __init__(self, x, unit):
        self.x, self.unit = x, unit

    def replicates(self, weights):
        w = weights[self.unit]
        return {"mean": (w @ self.x) / w.sum(axis=1)}


@pytest.mark.parametrize("n_replicates", [1, 9])
def test_resample_runs_a_replicates_only_statistic_and_single_row_blocks(monkeypatch, n_replicates):
    """A statistic that only has ``replicates`` runs on whole blocks, one value per replicate (by hand: the mean
    of the multiset), beside the sorted kernels of an in-domain split; a block of one replicate (B = 1, or the
    last of 4 + 4 + 1) gives its one value to every key, the sorted kernels' too."""
    from ubench.metrics import bootstrap
    from ubench.metrics.intervals import LabelledStatistics, resample
    from ubench.metrics.report_sections import split_arrays

    rng = np.random.default_rng(3)
    n = 40
    x = rng.normal(size=n)
    members = _members(rng, 2, n, 3)
    labels = rng.integers(0, 3, n)
    stats = {"m": _MeanOnly(x, "u"), "test": LabelledStatistics(split_arrays(members), labels, unit="u", bins=5,
                                                                 eps=1e-12, smoothing=0.0, scores=("total",))}
    monkeypatch.setattr(bootstrap, "BLOCK_CELLS", 4 * n)
    got = resample(stats, {"u": n}, n_replicates=n_replicates, seed=2, threads=2)
    rng_u = interval_rng(2, zlib.crc32(b"u"))
    w = np.vstack([bootstrap_counts(n, stop - start, rng_u) for start, stop in count_blocks(n_replicates, n)])
    assert w.shape[0] == n_replicates
    want = [np.repeat(x, w[b].astype(int)).mean() for b in range(n_replicates)]
    np.testing.assert_allclose(got["m"]["mean"], want, rtol=1e-12)
    direct = stats["test"].replicates({"u": w})
    assert sorted(got["test"]) == sorted(direct)
    for key, v in direct.items():
        assert got["test"][key].shape == (n_replicates,), key
        np.testing.assert_allclose(got["test"][key], v, rtol=1e-12, err_msg=key)


def test_resample_of_nothing_is_nothing():
    """No statistics and no units, or no replicates: empty results, not an error."""
    from ubench.metrics.intervals import resample

    assert resample({}, {}, n_replicates=5, seed=0) == {}
    assert resample({"m": _MeanOnly(np.ones(3), "u")}, {"u": 3}, n_replicates=0, seed=0) == {"m": {}}


def test_selective_and_detection_kernels_on_small_multisets_at_exact_levels():
    """Small multisets (1 to 7 samples, counts of 0 to 3, tied uncertainties) at levels that land exactly on a
    count: coverage with ceil(c n) = 1 or n, risks equal to an error share (0, 1/4, 1/2, 3/4, 1), TPRs reaching
    the first or the last positive. Every replicate's AURC, AUGRC, risk at coverage, coverage at risk and the
    errors' detection (AUROC, AP, FPR at TPR; NaN without an error or a hit; from the selective sort and from
    ``weighted_detection``'s own) equal ubench's functions on the
    multiset (``np.repeat``), which the selective and ranking tests pin by hand and against scikit-learn; float64
    arrays, and no floating-point warning for the undefined ones."""
    rng = np.random.default_rng(17)
    levels = [(0.1, 0.0, 0.5), (0.25, 0.25, 0.75), (0.5, 0.75, 1.0), (0.8, 0.5, 0.95), (1.0, 1.0, 0.6)]
    for case in range(150):
        n = int(rng.integers(1, 8))
        p = _probs(rng, n, 3, discrete=True)
        y = np.where(rng.random(n) < 0.6, p.argmax(1), (p.argmax(1) + 1) % 3)
        u = -p.max(1)
        err = (p.argmax(1) != y).astype(float)
        w = rng.integers(0, 4, (4, n)).astype(float)
        w[w.sum(axis=1) == 0, 0] = 1.0
        coverage, risk, tpr = levels[case % len(levels)]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no 0/0 warning leaks from the undefined replicates
            got = weighted_selective(err, w, _Ranked.of(u), coverage=coverage, risk=risk, detection_tpr=tpr)
            pos = err > 0  # the same detection from the two samples' own sort (the OOD kernel); default TPR 95 %
            det = (weighted_detection(u[pos], u[~pos], w[:, pos], w[:, ~pos], **({} if tpr == 0.95 else {"tpr": tpr}))
                   if 0 < pos.sum() < n else got)  # (both kinds of sample present, as every OOD split has them)
        assert all(v.dtype == np.float64 and v.shape == (4,) for v in [*got.values(), *det.values()])
        for key in ("auroc", "aupr", "fpr"):
            np.testing.assert_allclose(det[key], got[key], rtol=0, atol=1e-12, err_msg=key)
        for b in range(w.shape[0]):
            idx = np.repeat(np.arange(n), w[b].astype(int))
            pp, yy, uu, ee = p[idx], y[idx], u[idx], err[idx].astype(int)
            where = (case, b, n, coverage, risk, tpr)
            assert got["aurc"][b] == pytest.approx(risk_coverage_auc(pp, yy, uncertainty=uu), abs=1e-12), where
            assert got["augrc"][b] == pytest.approx(generalized_risk_coverage_auc(pp, yy, uncertainty=uu),
                                                    abs=1e-12), where
            assert got["risk_at_cov"][b] == pytest.approx(risk_at_coverage(pp, yy, coverage=coverage, uncertainty=uu),
                                                          abs=1e-12), where
            cov = coverage_at_risk(pp, yy, risk=risk, uncertainty=uu)
            assert (np.isnan(got["cov_at_risk"][b]) and cov is None) or got["cov_at_risk"][b] == pytest.approx(
                cov, abs=1e-12), (where, got["cov_at_risk"][b], cov)
            for key, fn in (("auroc", auroc_score), ("aupr", average_precision_score),
                            ("fpr", lambda s, t: fpr_at_tpr(s, t, tpr=tpr))):
                # undefined (as the report's detection section) unless the multiset holds an error and a hit
                want = fn(uu, ee) if 0 < ee.sum() < ee.size else np.nan
                assert got[key][b] == pytest.approx(want, abs=1e-12, nan_ok=True), (where, key)


@pytest.mark.parametrize("n_pos,n_neg,tie", [(1 << 16, 1 << 15, False), (1 << 15, 1 << 15, False),
                                             ((1 << 15) + 1, 1 << 15, True)])
def test_detection_sums_past_int32_are_exact(n_pos, n_neg, tie):
    """AUROC's rank sum is summed in int32 only while it cannot reach 2^31: with every positive above every
    negative the sum is n_pos n_neg (twice that, less the tied pair, with a tie), so at 2^31 (and past it with a
    tie) an int32 sum would wrap; the AUROC is 1 (by hand: (2 n_pos n_neg - 1) / (2 n_pos n_neg) with the tie)."""
    pos = np.arange(n_pos, dtype=np.float64) + n_neg
    neg = np.arange(n_neg, dtype=np.float64)
    if tie:
        pos[0] = neg[-1]
    got = weighted_detection(pos, neg, np.ones((1, n_pos), np.uint8), np.ones((1, n_neg), np.uint8))
    want = 1.0 - 0.5 / (n_pos * n_neg) if tie else 1.0
    assert got["auroc"][0] == pytest.approx(want, rel=1e-15)


def test_smallest_count_is_the_first_count_reaching_the_tpr_by_brute_force():
    """``_smallest_count``: the smallest k in [1, total] with the float k / total >= tpr (the comparison
    ``ranking.fpr_at_tpr`` makes), found by trying every k, for totals 0 to 400 and TPRs whose product with a
    total rounds up past an integer (0.55 * 100 = 55.00000000000001: k = 55, not 56); at least 1 (total 0
    included)."""
    from ubench.metrics.bootstrap_ranking import _smallest_count

    totals = np.arange(0, 401, dtype=np.float64)
    for tpr in (0.01, 0.07, 0.28, 0.3, 0.55, 0.56, 0.7, 0.9, 0.95, 0.99, 1.0, 1 / 3, 2 / 3):
        got = _smallest_count(totals, tpr)
        want = [next((k for k in range(1, int(t) + 1) if k / t >= tpr), max(int(t), 1)) for t in totals]
        np.testing.assert_array_equal(got, want, err_msg=str(tpr))


def test_kernels_in_row_chunks_give_every_row_once(monkeypatch):
    """With chunks of a few rows (more replicates than samples, so chunking by the wrong axis would drop rows),
    the selective and detection kernels give the values of one unchunked call, row for row."""
    rng = np.random.default_rng(8)
    n, b = 6, 23
    u = np.round(rng.normal(size=n), 1)
    err = np.array([1, 0, 0, 1, 0, 0], float)
    w = bootstrap_counts(n, b, interval_rng(1, 2))
    whole = weighted_selective(err, w, _Ranked.of(u), detection_tpr=0.9)
    whole_det = weighted_detection(u[:2], u[2:], w[:, :2], w[:, 2:], tpr=0.9)
    monkeypatch.setattr(bootstrap_ranking, "CHUNK_CELLS", 2 * n + 1)
    chunked = weighted_selective(err, w, _Ranked.of(u), detection_tpr=0.9)
    chunked_det = weighted_detection(u[:2], u[2:], w[:, :2], w[:, 2:], tpr=0.9)
    for got, want in ((chunked, whole), (chunked_det, whole_det)):
        assert sorted(got) == sorted(want)
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)
