# SPDX-License-Identifier: MIT
"""Paired comparisons, rank intervals and grouped runs (``metrics/paired.py``) against independent oracles:
DeLong's variance for an AUROC interval, McNemar's exact test and the paired-proportion (Wald) interval for an
accuracy difference, Holm's adjustment by hand, and exact answers on boards whose order is certain."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from ubench.metrics.intervals import encode_samples
from ubench.metrics.paired import (
    bootstrap_p_value,
    group_runs,
    holm,
    paired_comparisons,
    rank_intervals,
    replicate_ranks,
    sample_replicates,
)


def _samples(n, columns, *, ood=None, scores=()):
    splits = {"test": {"role": "in_domain", "unit": "ids:test", "n": n, "columns": encode_samples(columns)}}
    if ood is not None:
        splits["far"] = {"role": "ood", "unit": "ood:far", "n": len(next(iter(ood.values()))),
                         "columns": encode_samples(ood)}
    return {"encoding": "base64-float64-le", "seed": 0, "primary": "test", "scores": list(scores), "splits": splits}


def _delong_interval(pos, neg, level=0.95):
    """DeLong et al. (1988): AUROC and its normal interval from the structural components."""
    psi = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])
    auc = psi.mean()
    v10, v01 = psi.mean(axis=1), psi.mean(axis=0)
    se = np.sqrt(v10.var(ddof=1) / pos.size + v01.var(ddof=1) / neg.size)
    z = stats.norm.ppf((1 + level) / 2)
    return auc, auc - z * se, auc + z * se


def test_ood_auroc_interval_agrees_with_delong():
    """The stratified percentile interval of the OOD AUROC and DeLong's normal interval have endpoints within a
    tenth of the interval's width of each other (300 in-domain, 200 OOD samples, 2000 replicates)."""
    rng = np.random.default_rng(0)
    s_in, s_ood = rng.normal(0, 1, 300), rng.normal(0.9, 1.3, 200)
    samples = _samples(300, {"accuracy": np.ones(300), "score_total": s_in}, ood={"score_total": s_ood},
                       scores=("total",))
    reps = sample_replicates([samples], n_replicates=2000, seed=1, keys=("ood_auroc_total",))[0]
    lo, hi = np.quantile(reps["ood_auroc_total"], [0.025, 0.975])
    auc, d_lo, d_hi = _delong_interval(s_ood, s_in)
    width = d_hi - d_lo
    assert abs(lo - d_lo) < 0.1 * width and abs(hi - d_hi) < 0.1 * width, (lo, hi, d_lo, d_hi)
    assert lo < auc < hi


@pytest.mark.parametrize("right_only_a, right_only_b", [(30, 15), (40, 22), (25, 20)])
def test_paired_accuracy_difference_agrees_with_mcnemar(right_only_a, right_only_b):
    """On 500 samples where A alone is right on ``right_only_a`` and B alone on ``right_only_b``: the bootstrap
    p-value of the accuracy difference is within 0.3 x McNemar's exact p (+ 0.01) of it, and the difference's
    interval within a tenth of its width of the paired-proportion Wald interval."""
    n = 500
    a, b = np.ones(n), np.ones(n)
    a[:right_only_b] = 0
    b[right_only_b:right_only_b + right_only_a] = 0
    a[-40:], b[-40:] = 0, 0  # both wrong on 40
    reps = sample_replicates([_samples(n, {"accuracy": a}), _samples(n, {"accuracy": b})], n_replicates=4000,
                             seed=2, keys=("accuracy",))
    _, rows = paired_comparisons({"A": a.mean(), "B": b.mean()}, {"A": reps[0]["accuracy"], "B": reps[1]["accuracy"]},
                                 metric="accuracy", higher_is_better=True)
    row = rows[0]
    p_exact = stats.binomtest(right_only_a, right_only_a + right_only_b, 0.5).pvalue
    assert abs(row["p"] - p_exact) <= 0.3 * p_exact + 0.01, (row["p"], p_exact)
    d = (right_only_a - right_only_b) / n
    se = np.sqrt((right_only_a + right_only_b) - (right_only_a - right_only_b) ** 2 / n) / n
    lo, hi = d - 1.96 * se, d + 1.96 * se
    assert row["difference"] == pytest.approx(d)
    assert abs(row["interval"][0] - lo) < 0.1 * (hi - lo) and abs(row["interval"][1] - hi) < 0.1 * (hi - lo)


def test_identical_methods_differ_by_exactly_zero_with_p_one():
    rng = np.random.default_rng(3)
    cols = {"accuracy": (rng.random(200) < 0.8).astype(float), "cll": -rng.random(200)}
    s = _samples(200, cols)
    reps = sample_replicates([s, s], n_replicates=500, seed=0, keys=("accuracy", "cll"))
    for key in ("accuracy", "cll"):
        v = float(cols[key].mean())
        _, rows = paired_comparisons({"x": v, "y": v}, {"x": reps[0][key], "y": reps[1][key]}, metric=key,
                                     higher_is_better=True)
        assert rows[0]["difference"] == 0.0 and rows[0]["interval"] == [0.0, 0.0] and rows[0]["p"] == 1.0
        assert not rows[0]["distinguishable"]


def test_bootstrap_p_value_and_holm_by_hand():
    assert bootstrap_p_value(np.r_[np.full(98, 1.0), -1.0, 0.0]) == pytest.approx(2 * 3 / 101)
    assert bootstrap_p_value(np.full(50, 2.0)) == pytest.approx(2 / 51)
    # m = 4: sorted 0.01, 0.02, 0.03, 0.5 -> 0.04, 0.06, 0.06, 0.5 (monotone), back in input order
    assert holm([0.03, 0.5, 0.01, 0.02]) == pytest.approx([0.06, 0.5, 0.04, 0.06])
    # step-down monotonicity: 2 x 0.01 = 0.02 is carried to the larger p-value whose own product is 0.011
    assert holm([0.011, 0.01]) == pytest.approx([0.02, 0.02])


def test_holm_decides_which_methods_are_distinguishable_from_the_best():
    """Three challengers whose raw p-values are 2/201, 8/201 and 30/201 (replicate differences built to give
    them): Holm multiplies by 3, 2, 1, so only the first stays below 0.05."""
    b = 200
    base = np.zeros(b)

    def diffs(k):  # k replicates at or below 0 -> p = 2 (1 + k) / (b + 1)
        return np.r_[np.full(k, -0.1), np.full(b - k, 0.1)]

    reps = {"best": base, "a": base - diffs(0), "c": base - diffs(3), "d": base - diffs(14)}
    values = {"best": 1.0, "a": 0.9, "c": 0.95, "d": 0.97}
    best, rows = paired_comparisons(values, reps, metric="accuracy", higher_is_better=True)
    by = {r["b"]: r for r in rows}
    assert best == "best"
    assert [by[k]["p"] for k in "acd"] == pytest.approx([2 / 201, 8 / 201, 30 / 201])
    assert [by[k]["p_holm"] for k in "acd"] == pytest.approx([6 / 201, 16 / 201, 30 / 201])
    assert [by[k]["distinguishable"] for k in "acd"] == [True, False, False]


def test_ood_splits_are_their_own_resampling_units():
    """Stratified resampling: an OOD split never shares the in-domain split's counts, even with equal sample ids;
    shift splits with the in-domain ids do (the same images, corrupted)."""
    from ubench.metrics.intervals import resampling_unit

    assert resampling_unit("ood", "far", "abc") != resampling_unit("in_domain", "test", "abc")
    assert resampling_unit("shift", "blur_1", "abc") == resampling_unit("in_domain", "test", "abc")
    assert resampling_unit("shift", "blur_1", None) != resampling_unit("in_domain", "test", None)


def test_lower_is_better_picks_the_smallest_value():
    best, rows = paired_comparisons({"a": 0.3, "b": 0.2}, {"a": np.full(10, 0.3), "b": np.full(10, 0.2)},
                                    metric="calibrated_brier", higher_is_better=False)
    assert best == "b" and rows[0]["difference"] == pytest.approx(-0.1)


def test_rank_intervals_are_exact_when_the_order_is_certain_and_wide_for_ties():
    """Rows 0.1 apart with replicate noise 0.001 have rank intervals [k, k]; two rows with the same replicates
    share rank 1 and are tied with the leader; the point order decides ``rank``."""
    rng = np.random.default_rng(5)
    noise = rng.normal(0, 0.001, 400)
    values = {"a": 0.9, "b": 0.8, "c": 0.7}
    out = rank_intervals(values, {k: v + noise for k, v in values.items()}, higher_is_better=True)
    assert [out[k]["rank_interval"] for k in "abc"] == [[1, 1], [2, 2], [3, 3]]
    assert not any(out[k]["tied_with_leader"] for k in "abc")
    same = rng.normal(0, 0.01, 400)
    out = rank_intervals({"x": 0.5, "y": 0.5, "z": 0.2}, {"x": 0.5 + same, "y": 0.5 + same, "z": 0.2 + same},
                         higher_is_better=False)
    assert out["z"]["rank"] == 1 and out["z"]["rank_interval"] == [1, 1]
    assert out["x"]["rank_interval"] == [2, 2] and out["y"]["rank_interval"] == [2, 2]
    close = rank_intervals({"x": 0.50, "y": 0.49}, {"x": 0.50 + rng.normal(0, .02, 400),
                                                    "y": 0.49 + rng.normal(0, .02, 400)}, higher_is_better=True)
    assert close["x"]["rank_interval"] == [1, 2] and close["y"]["tied_with_leader"]


def test_replicate_ranks_equal_the_pairwise_definition():
    """The sorted ranking equals its definition computed over every pair of rows (1 + the rows better by more than
    rounding): exact ties, ties within rounding (1e-13 apart) and at its edge (0 and 1e-12), negative and large values, one row."""
    rng = np.random.default_rng(8)
    base = rng.choice([-3e6, -2.5, -1.0, 0.0, 1e-12, 0.3, 0.3 + 1e-13, 7.0, 1e9], size=(60, 1))
    reps = base + rng.choice([0.0, 0.0, 0.0, 1e-13, 0.5], size=(60, 40)) * rng.choice([1, -1], size=(60, 40))
    reps[:5] = reps[5:10]  # rows identical in every replicate
    tol = 1e-12 * np.maximum(1.0, np.abs(reps))
    want = 1 + np.sum(reps[None, :, :] > (reps + tol)[:, None, :], axis=1)  # (rows, B): row i against every j
    assert np.array_equal(replicate_ranks(reps), want.T)
    assert np.array_equal(replicate_ranks(reps[:1]), np.ones((40, 1)))
    with pytest.raises(ValueError, match="finite"):
        replicate_ranks(np.array([[0.0, np.nan]]))


def test_grouped_runs_hold_run_to_run_and_test_sample_variance():
    """With identical runs the group's interval is the test-sample interval of one run; runs that differ widen it
    by about their spread; mean and sd are over the runs (ddof=1)."""
    rng = np.random.default_rng(6)
    one = 0.8 + rng.normal(0, 0.01, 2000)
    g = group_runs([0.8, 0.8, 0.8], [one, one, one], rng=np.random.default_rng(0))
    assert g["mean"] == pytest.approx(0.8) and g["sd"] == pytest.approx(0.0, abs=1e-15)
    assert g["interval"] == pytest.approx(list(np.quantile(one, [0.025, 0.975])))
    runs = [0.76, 0.80, 0.84]
    g = group_runs(runs, [one - 0.8 + r for r in runs], rng=np.random.default_rng(0))
    assert g["sd"] == pytest.approx(np.std(runs, ddof=1))
    width = g["interval"][1] - g["interval"][0]
    assert width > 2 * (np.quantile(one, 0.975) - np.quantile(one, 0.025))


# --- by hand: p-values, Holm, rounding, rank intervals, grouped runs ---------------------------------------------

def test_p_value_holm_and_rounding_edges_by_hand():
    """p = min(1, 2 min(1 + #{d <= 0}, 1 + #{d >= 0}) / (B + 1)): 9 negative and 1 positive difference give
    2 * 2 / 11. Holm caps at 1 and rounds to 15 digits (7 x 0.1 is 0.7000000000000001 in floats)."""
    assert bootstrap_p_value(np.array([-1.0] * 9 + [0.5])) == pytest.approx(4 / 11, rel=1e-15)
    assert holm([0.6, 0.7]) == [1.0, 1.0]
    assert holm([0.1] + [0.9] * 6)[0] == 0.7


def _comparison(a, b, d, n=39, **kw):
    """paired_comparisons of two methods with point values a, b and constant replicate difference d (B = n)."""
    reps = {"x": np.full(n, a + d), "y": np.full(n, a)}
    _, rows = paired_comparisons({"x": a, "y": b}, reps, metric="m", **kw)
    return rows[0]


def test_paired_comparison_rounding_scale_ties_and_the_level_edge():
    """Replicate differences within 1e-12 x max(1, |a|, |b|) are rounding (p = 1); larger ones are not. With
    B = 3 replicates all favouring the best, p = 2 / 4 = 0.5 exactly: not distinguishable at level 0.5
    (p_holm < 1 - level is required). Tied point values go to the first method listed."""
    assert _comparison(0.02, 0.01, 5e-13, higher_is_better=True)["p"] == 1.0  # scale 1, not 0.02
    assert _comparison(0.02, 0.01, 1.5e-12, higher_is_better=True)["p"] == 0.05  # above 1e-12, below 2e-12
    assert _comparison(100.0, 0.5, 5e-11, higher_is_better=True)["p"] == 1.0  # scale |a| = 100
    assert _comparison(0.5, 100.0, 5e-11, higher_is_better=False)["p"] == 1.0  # scale |b| = 100
    row = _comparison(0.02, 0.01, 0.01, n=3, higher_is_better=True, level=0.5)
    assert {k: row[k] for k in ("a", "b", "metric", "p", "p_holm", "distinguishable")} == \
        {"a": "x", "b": "y", "metric": "m", "p": 0.5, "p_holm": 0.5, "distinguishable": False}
    best, _ = paired_comparisons({"x": 0.3, "y": 0.3}, {"x": np.zeros(9), "y": np.zeros(9)}, metric="m",
                                 higher_is_better=True)
    assert best == "x"


def test_rank_intervals_by_hand():
    """Two methods over B = 100 replicates, b beating a in k of them; linear quantiles at positions
    q (B - 1). k = 5: b's sorted ranks are 1 x 5, 2 x 95, so the 2.5 % quantile (position 2.475) is 1 and the
    97.5 % one 2: [1, 2] for both, b tied with the leader. k = 2: position 2.475 falls on a 2 for b and 96.525 on a
    1 for a: [1, 1] and [2, 2], not tied. The leader is found wherever it is listed."""
    for k, want in ((5, ([1, 2], [1, 2], True)), (2, ([1, 1], [2, 2], False))):
        b = np.zeros(100)
        b[:k] = 2.0
        r = rank_intervals({"b": 0.0, "a": 1.0}, {"b": b, "a": np.ones(100)}, higher_is_better=True)
        assert (r["a"]["rank_interval"], r["b"]["rank_interval"], r["b"]["tied_with_leader"]) == want
        assert (r["a"]["rank"], r["b"]["rank"], r["a"]["tied_with_leader"]) == (1, 2, False)
    assert replicate_ranks(np.array([[1.0, 2.0], [2.0, 1.0]])).dtype == np.int32
    with pytest.raises(ValueError) as ei:
        replicate_ranks(np.array([[1.0, np.nan]]))
    assert str(ei.value) == "replicate values must be finite to be ranked"


def test_group_runs_by_hand():
    """One run: sd 0 (not NaN), its replicates unchanged; two runs: sd = |x1 - x2| / sqrt(2) (ddof = 1)."""
    rng = np.random.default_rng(0)
    one = group_runs([0.7], [np.array([0.6, 0.8])], rng=rng)
    assert (one["n_runs"], one["mean"], one["sd"]) == (1, 0.7, 0.0)
    np.testing.assert_array_equal(one["replicates"], [0.6, 0.8])
    two = group_runs([0.7, 0.9], [np.full(50, 0.7), np.full(50, 0.9)], rng=rng)
    assert two["n_runs"] == 2 and two["sd"] == pytest.approx(0.2 / np.sqrt(2), rel=1e-15)
    assert set(np.round(two["replicates"], 12)) <= {0.7, 0.8, 0.9}


def test_shift_median_and_ood_detection_replicates_on_constant_columns():
    """Columns constant within a split give every replicate the same value whatever the counts: the shift key is
    the median over the shift splits that have an accuracy column (0.2, 0.9, 0.5 -> 0.5; a split without one is
    skipped), and OOD scores that separate perfectly give AUROC 1, AUPR 1 and FPR at 95 % TPR 0 in every
    replicate, under the report's key names."""
    n = 6
    splits = {"test": {"role": "in_domain", "unit": "ids:test", "n": n,
                       "columns": encode_samples({"accuracy": np.full(n, 0.75), "score_total": np.full(n, 0.1)})},
              "far": {"role": "ood", "unit": "ood:far", "n": 4,
                      "columns": encode_samples({"score_total": np.full(4, 0.9)})}}
    for j, acc in enumerate((0.2, 0.9, 0.5)):
        splits[f"s{j}"] = {"role": "shift", "unit": "ids:test", "n": n,
                           "columns": encode_samples({"accuracy": np.full(n, acc)})}
    splits["s_none"] = {"role": "shift", "unit": "ids:test", "n": n, "columns": encode_samples({"cll": np.zeros(n)})}
    samples = {"encoding": "base64-float64-le", "seed": 0, "primary": "test", "scores": ["total"], "splits": splits}
    (reps,) = sample_replicates([samples], n_replicates=7, seed=3)
    assert set(reps) == {"accuracy", "shift_accuracy_median", "ood_auroc_total", "ood_aupr_total", "ood_fpr95_total"}
    want = {"accuracy": 0.75, "shift_accuracy_median": 0.5, "ood_auroc_total": 1.0, "ood_aupr_total": 1.0,
            "ood_fpr95_total": 0.0}
    for key, value in want.items():
        assert reps[key].shape == (7,), key
        np.testing.assert_allclose(reps[key], value, rtol=1e-12, atol=1e-15, err_msg=key)
    (only,) = sample_replicates([samples], n_replicates=7, seed=3, keys=("accuracy",))
    assert set(only) == {"accuracy"}


# --- sample_replicates against counts drawn here and scikit-learn's weighted detection metrics --------------------

def _counts(seed, unit, n, b):
    """The documented draws of unit ``unit``: ``rng.integers(0, n, (B, n))`` of ``default_rng([seed, 2,
    crc32(unit)])``, counted per replicate (written here from the docstrings, not with ``metrics/bootstrap.py``)."""
    import zlib

    idx = np.random.default_rng([seed, 2, zlib.crc32(unit.encode())]).integers(0, n, (b, n))
    return np.stack([np.bincount(row, minlength=n) for row in idx]).astype(np.float64)


def test_sample_replicates_equal_weighted_means_and_sklearn_detection():
    """Each replicate b is the multiset in which sample i appears counts[b, i] times: the linear keys are the
    count-weighted means of their columns (calibrated_brier too), and the OOD keys are scikit-learn's
    ``roc_auc_score``, ``average_precision_score`` and the FPR of ``roc_curve`` at the first TPR >= ``tpr`` with
    those counts as sample weights (OOD positive). At tpr = 0.8 (passed) and at the default, 0.95."""
    from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

    rng = np.random.default_rng(5)
    n, n_ood, b, seed = 40, 25, 30, 11
    cols = {"accuracy": (rng.random(n) < 0.7).astype(float), "cll": -rng.random(n),
            "calibrated_brier": rng.random(n), "score_total": rng.normal(0, 1, n)}
    samples = _samples(n, cols, ood={"score_total": rng.normal(0.8, 1, n_ood)}, scores=("total",))
    ood = np.frombuffer(__import__("base64").b64decode(samples["splits"]["far"]["columns"]["score_total"]))
    w_in, w_ood = _counts(seed, "ids:test", n, b), _counts(seed, "ood:far", n_ood, b)
    y = np.r_[np.ones(n_ood), np.zeros(n)]
    s = np.r_[ood, cols["score_total"]]
    for tpr, kw in ((0.8, {"tpr": 0.8}), (0.95, {})):
        (reps,) = sample_replicates([samples], n_replicates=b, seed=seed, **kw)
        for key in ("accuracy", "cll", "calibrated_brier"):
            np.testing.assert_allclose(reps[key], w_in @ cols[key] / n, rtol=1e-13, err_msg=key)
        for r in range(b):
            w = np.r_[w_ood[r], w_in[r]]
            fpr, tp, _ = roc_curve(y, s, sample_weight=w, drop_intermediate=False)
            assert reps["ood_auroc_total"][r] == pytest.approx(roc_auc_score(y, s, sample_weight=w), rel=1e-12)
            assert reps["ood_aupr_total"][r] == pytest.approx(average_precision_score(y, s, sample_weight=w),
                                                               rel=1e-12)
            assert reps["ood_fpr95_total"][r] == pytest.approx(fpr[np.argmax(tp >= tpr)], rel=1e-12), (tpr, r)


def test_sample_replicates_in_several_count_blocks():
    """Past ``BLOCK_CELLS`` weights the replicates are drawn in blocks (5000 samples: 419 replicates a block); the
    blocks together are the B replicates of one draw, so 450 replicates are 450 weighted means."""
    rng = np.random.default_rng(6)
    n, b = 5000, 450
    acc = (rng.random(n) < 0.6).astype(float)
    (reps,) = sample_replicates([_samples(n, {"accuracy": acc})], n_replicates=b, seed=3, keys=("accuracy",))
    assert reps["accuracy"].shape == (b,)
    np.testing.assert_allclose(reps["accuracy"], _counts(3, "ids:test", n, b) @ acc / n, rtol=1e-13)


def test_sample_replicates_read_only_what_the_keys_need():
    """Splits the keys do not need are neither decoded nor resampled: an OOD split and a shift split with
    unreadable columns leave the accuracy replicates as they are without them; a needed split's bad column is
    a ValueError naming the split. No ``scores`` entry means no detection task; a score column missing from an
    OOD split leaves that key out. Reports that disagree on a unit's size are refused, naming the unit; no
    reports give no replicates."""
    rng = np.random.default_rng(7)
    n = 30
    acc = (rng.random(n) < 0.7).astype(float)
    clean = _samples(n, {"accuracy": acc, "score_total": rng.random(n)})
    want = sample_replicates([clean], n_replicates=9, seed=1, keys=("accuracy",))[0]["accuracy"]
    messy = {**clean, "scores": ["total"], "splits": {
        **clean["splits"],
        "far": {"role": "ood", "unit": "ood:far", "n": 4, "columns": {"score_total": "not base64!"}},
        "blur": {"role": "shift", "unit": "ids:test", "n": n, "columns": {"accuracy": "not base64!"}}}}
    (got,) = sample_replicates([messy], n_replicates=9, seed=1, keys=("accuracy",))
    assert set(got) == {"accuracy"}
    np.testing.assert_array_equal(got["accuracy"], want)
    with pytest.raises(ValueError) as ei:
        sample_replicates([messy], n_replicates=9, seed=1, keys=("accuracy", "ood_auroc_total"))
    assert str(ei.value) == "samples.splits['far']: column 'score_total' is not base64"

    ood = _samples(n, {"accuracy": acc, "score_total": rng.random(n), "score_knowledge": rng.random(n)},
                   ood={"score_total": rng.random(5)}, scores=("total", "knowledge"))
    (both,) = sample_replicates([ood], n_replicates=9, seed=1)
    assert set(both) == {"accuracy", "ood_auroc_total", "ood_aupr_total", "ood_fpr95_total"}
    del ood["scores"]
    (none,) = sample_replicates([ood], n_replicates=9, seed=1)
    assert set(none) == {"accuracy"}
    np.testing.assert_array_equal(none["accuracy"], both["accuracy"])

    with pytest.raises(ValueError) as ei:
        sample_replicates([_samples(n, {"accuracy": acc}), _samples(n + 1, {"accuracy": np.r_[acc, 1.0]})],
                          n_replicates=9, seed=1)
    assert str(ei.value) == ("resampling unit 'ids:test' has 31 samples in one report and 30 in another: the "
                             "reports are not on the same samples")
    assert sample_replicates([], n_replicates=9, seed=1) == []


def test_evaluate_returns_only_report_keys():
    """The per-shift-split means (``shift:j``) only feed the median: no internal key leaves ``_evaluate``."""
    from ubench.metrics.paired import PAIRED_KEYS, _evaluate, _plan

    n = 6
    samples = _samples(n, {"accuracy": np.full(n, 0.5)})
    samples["splits"]["s0"] = {"role": "shift", "unit": "ids:test", "n": n,
                               "columns": encode_samples({"accuracy": np.full(n, 0.25)})}
    plan = _plan(samples, 0.95)
    w = {"ids:test": np.ones((2, n))}
    out = _evaluate(plan, w, {"accuracy": np.full(2, 0.5), "shift:0": np.full(2, 0.25)})
    assert set(out) == {"accuracy", "shift_accuracy_median"} and set(out) <= set(PAIRED_KEYS)


def test_rounding_threshold_and_rank_ties_at_their_edges():
    """A replicate difference of exactly 1e-12 x scale is rounding (``<=``), p = 1. Replicate values 6e-13 apart
    below 1 share a rank (the tie margin is 1e-12 x max(1, |r|) on the values as given, not scaled by the sign of
    the direction), for higher and lower is better. A method whose interval's low end equals the leader's high
    end is tied with it (``lo <= hi``): b ties a in 5 of 100 replicates, so b's interval is [1, 2] and a's [1, 1]."""
    row = _comparison(0.0, -0.01, 1e-12, higher_is_better=True)
    assert row["p"] == 1.0 and row["interval"] == [0.0, 0.0]
    for hib in (True, False):
        near = rank_intervals({"x": 0.5, "y": 0.5}, {"x": np.full(50, 0.5 + 6e-13), "y": np.full(50, 0.5)},
                              higher_is_better=hib)
        assert near["x"]["rank_interval"] == near["y"]["rank_interval"] == [1, 1], hib
    b = np.zeros(100)
    b[:5] = 1.0
    r = rank_intervals({"a": 1.0, "b": 0.0}, {"a": np.ones(100), "b": b}, higher_is_better=True)
    assert r["a"]["rank_interval"] == [1, 1] and r["b"]["rank_interval"] == [1, 2]
    assert r["b"]["tied_with_leader"] and not r["a"]["tied_with_leader"]
