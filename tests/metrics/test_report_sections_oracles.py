# SPDX-License-Identifier: MIT
"""The numbers of the report's sections (``metrics/report_sections.py``) against oracles written here from the
formulas in their docstrings, with plain numpy (per-bin loops), scipy and scikit-learn, never the report's own
kernels: the calibrated reliability diagram (both placements, smoothing on and off, a confidence on a bin edge,
bins holding one sample), the member-at-a-time accumulator (smoothing, row ranges after the first, the row-sum
record, the kept members), the OOD histograms (shared edges, values on edges, a constant score) and ROC curves
(scikit-learn's ``roc_curve``), the calibrated protocol's settings (``eps``, bins, per-member placement) and the
calibrators section's options (ODIR by inner CV, two samples). Issue #27 item 8: these kill the mutants of
report_sections.py that survived the metrics tests."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from scipy.special import entr, log_softmax, softmax
from sklearn.metrics import average_precision_score, roc_auc_score, roc_curve

from ubench.metrics.calibrators import ODIR_GRID, cross_validated_calibrators
from ubench.metrics.conformal import cross_validated_conformal
from ubench.metrics.decision import cost_matrix_preset
from ubench.metrics.report_sections import (
    RowSums,
    SplitAccumulator,
    SplitArrays,
    calibrated_reliability,
    calibrated_section,
    calibrators_section,
    core_metrics,
    decision_section,
    entropy_histogram,
    in_domain_section,
    ood_histograms,
    ood_section,
    ood_roc_curves,
    scores_for,
    shift_split_section,
    split_arrays,
)

T_BOUNDS = (0.01, 100.0)  # the protocol's temperature search interval (cross_validated_calibration's default)


def _members(m=3, n=240, c=4, seed=0, zeros=True):
    """(M, N, C) float64 members, overconfident, with exact zeros (so ``eps`` matters) and the last 6 rows uniform
    in every member (so every scaled prediction of them has confidence exactly 1/C: on a bin edge)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    z = rng.normal(0, 2.5, (1, n, c)) + rng.normal(0, 1.2, (m, n, c))
    z[:, np.arange(n), y] += 1.0
    p = softmax(z, axis=2)
    if zeros:
        p[:, ::7, -1] = 0.0
        p /= p.sum(axis=2, keepdims=True)
    p[:, -6:] = 1.0 / c
    return p, y


def _smoothed(p, s):
    return (1 - s) * p + s / p.shape[-1] if s else p


def _bin_of(v, edges):
    """Bin of each value for equal-width bins (lo, hi], written as a loop over the bins; 0 goes to bin 0."""
    out = np.full(v.shape, -1)
    for b in range(edges.size - 1):
        out[(v > edges[b]) & (v <= edges[b + 1])] = b
    out[v <= edges[0]] = 0
    assert (out >= 0).all()
    return out


def _binned_means(v, w, edges):
    """(count, mean of v, mean of w) per bin (lo, hi] of v; an empty bin holds 0."""
    idx = _bin_of(v, edges)
    nb = edges.size - 1
    counts = np.array([np.count_nonzero(idx == b) for b in range(nb)])
    mv = np.array([v[idx == b].mean() if counts[b] else 0.0 for b in range(nb)])
    mw = np.array([w[idx == b].mean() if counts[b] else 0.0 for b in range(nb)])
    return counts, mv, mw


def _ece(q, y, bins):
    conf, hit = q.max(axis=1), (q.argmax(axis=1) == y).astype(float)
    counts, mc, acc = _binned_means(conf, hit, np.linspace(0, 1, bins + 1))
    return float((counts * np.abs(acc - mc)).sum() / y.size)


def _scaled(members, t, eps, placement):
    """``post``: softmax(log(mean + eps) / T); ``per_member``: the mean of softmax(log(p_m + eps) / T)."""
    if placement == "post":
        return softmax(np.log(members.mean(axis=0) + eps) / t, axis=1)
    return softmax(np.log(members + eps) / t, axis=2).mean(axis=0)


def _reliability_oracle(q, y, bins):
    edges = np.linspace(0, 1, bins + 1)
    conf, pred = q.max(axis=1), q.argmax(axis=1)
    counts, mean_conf, acc = _binned_means(conf, (pred == y).astype(float), edges)
    u = np.minimum(entr(q).sum(axis=1) / np.log(q.shape[1]), 1.0)
    ucounts, mean_u, err = _binned_means(u, (pred != y).astype(float), edges)
    return {"edges": edges, "confidence": {"counts": counts, "mean_confidence": mean_conf, "accuracy": acc},
            "uncertainty": {"counts": ucounts, "mean_uncertainty": mean_u, "error": err}}


def _assert_reliability(got, want):
    np.testing.assert_array_equal(got["edges"], want["edges"])
    for part, keys in (("confidence", ("mean_confidence", "accuracy")), ("uncertainty", ("mean_uncertainty", "error"))):
        assert got[part]["counts"] == want[part]["counts"].tolist(), part
        for k in keys:
            np.testing.assert_allclose(got[part][k], want[part][k], rtol=1e-10, atol=1e-12, err_msg=f"{part} {k}")


# --- calibrated reliability --------------------------------------------------------------------------------------

@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("placement", ["post", "per_member"])
def test_calibrated_reliability_by_hand(placement, smoothing):
    """The "after" reliability diagram is that of the split's (smoothed) prediction scaled by T as the placement
    says, binned (lo, hi]: the uniform rows' confidence 1/4 is the edge of bins 3 and 4 of 16 and goes to bin 3;
    their normalized entropy 1 is in the last bin. ``post`` ignores the kept members."""
    members, y = _members(seed=8)  # a seed whose diagrams have a one-sample bin in all four cases
    t, eps, bins = 1.7, 1e-3, 16
    arrays = split_arrays(members, keep_members=True)
    got = calibrated_reliability(arrays, y, temperature=t, placement=placement, bins=bins, eps=eps,
                                 smoothing=smoothing)
    q = _scaled(_smoothed(members, smoothing), t, eps, placement)
    want = _reliability_oracle(q, y, bins)
    _assert_reliability(got, want)
    # the data exercise what the slips would change: a one-sample bin, empty bins, errors and hits, the edge
    assert 1 in want["confidence"]["counts"] and 0 in want["confidence"]["counts"]
    assert want["confidence"]["counts"][3] >= 6 and np.all(q[-6:].max(axis=1) == 0.25)
    assert 0 < want["confidence"]["accuracy"].max() and want["uncertainty"]["error"].max() > 0
    # and the scaling and the placement matter on these data: the other placement, T = 1 or no smoothing differ
    for other in (_scaled(_smoothed(members, smoothing), t, eps, {"post": "per_member"}.get(placement, "post")),
                  _scaled(_smoothed(members, smoothing), 1.0, eps, placement),
                  _scaled(_smoothed(members, 0.3 - smoothing), t, eps, placement),
                  _scaled(_smoothed(members, smoothing), t, 1e-12, placement)):
        assert not np.allclose(_reliability_oracle(other, y, bins)["confidence"]["mean_confidence"],
                               want["confidence"]["mean_confidence"], rtol=1e-6)


def test_calibrated_reliability_per_member_without_the_members_is_post():
    """Per-member placement on a split whose members were not kept falls back to the scaled mean."""
    members, y = _members(seed=1)
    got = calibrated_reliability(split_arrays(members), y, temperature=0.6, placement="per_member", bins=10,
                                 eps=1e-3, smoothing=0.1)
    _assert_reliability(got, _reliability_oracle(_scaled(_smoothed(members, 0.1), 0.6, 1e-3, "post"), y, 10))


# --- the accumulator ---------------------------------------------------------------------------------------------

def _uncertainties_oracle(members, s):
    """total = H(mean of smoothed members), data = mean H(smoothed member), knowledge = total - data (>= 0),
    neg_confidence = -max of the smoothed mean; entropies in nats with 0 log 0 = 0."""
    sm = _smoothed(members, s)
    mean_s = sm.mean(axis=0)
    total = entr(mean_s).sum(axis=1)
    data = entr(sm).sum(axis=2).mean(axis=0)
    return {"total": total, "data": data, "knowledge": np.maximum(total - data, 0.0),
            "neg_confidence": -mean_s.max(axis=1)}


@pytest.mark.parametrize("smoothing", [0.0, 0.15])
@pytest.mark.parametrize("path", ["whole", "member_rows"])
def test_accumulator_by_hand(path, smoothing):
    """Both ways of feeding a split (the whole stack; one member's row range at a time, ranges after the first
    included) give the unsmoothed mean of the renormalised members, the uncertainties of the smoothed members, the
    kept members and the row-sum record of the one row off the simplex (member 2, sample 37, sum 1.001)."""
    members, _ = _members(m=3, n=60, c=5, seed=3)
    members[2, 37] *= 1.001
    fixed = members / members.sum(axis=2, keepdims=True)
    if path == "whole":
        got = split_arrays(members, smoothing=smoothing, keep_members=True)
    else:
        acc = SplitAccumulator(*members.shape, smoothing=smoothing, keep_members=True, dtype=np.float64)
        for start in range(0, 60, 25):
            for j in range(3):
                acc.add_member_rows(start, j, members[j, start:start + 25])
        got = acc.result()
    np.testing.assert_allclose(got.mean_probs, fixed.mean(axis=0), rtol=1e-14, atol=1e-16)
    np.testing.assert_allclose(got.member_probs, fixed, rtol=1e-15, atol=0)
    for name, want in _uncertainties_oracle(fixed, smoothing).items():
        np.testing.assert_allclose(getattr(got, name), want, rtol=1e-12, atol=1e-14, err_msg=name)
    assert got.row_sums.member == 2 and got.row_sums.sample == 37 and got.row_sums.n_renormalised == 1
    assert got.row_sums.max_deviation == pytest.approx(1e-3, rel=1e-9)
    votes = fixed.argmax(axis=2)
    agree = np.mean([votes[a] == votes[b] for a in range(3) for b in range(3) if a != b], axis=0)
    np.testing.assert_allclose(got.disagreement, 1 - agree, rtol=1e-12)
    if smoothing:  # smoothing moves every uncertainty on these data
        plain = _uncertainties_oracle(fixed, 0.0)
        assert all(not np.allclose(getattr(got, k), plain[k], rtol=1e-6) for k in ("total", "data", "neg_confidence"))


def test_scores_for_and_scores_only():
    """One member: no knowledge score (its mutual information is 0); two or more: all three. ``scores_only``
    drops the (N, C) arrays and keeps the (N,) ones."""
    assert scores_for(1) == ("total", "confidence")
    assert scores_for(2) == scores_for(5) == ("total", "knowledge", "confidence")
    members, _ = _members(m=2, n=20, seed=4)
    full = split_arrays(members, keep_members=True)
    light = full.scores_only()
    assert full.mean_probs is not None and full.member_probs is not None
    assert light.mean_probs is None and light.member_probs is None
    for name in ("total", "data", "knowledge", "neg_confidence", "disagreement", "variation_ratio"):
        assert getattr(light, name) is getattr(full, name)
    assert light.row_sums == full.row_sums


# --- OOD histograms and ROC curves -------------------------------------------------------------------------------

def _scores(total, knowledge, neg_confidence):
    """A split's arrays from its scores alone (an unlabelled / OOD split as the OOD sections see it)."""
    total, knowledge, neg_confidence = (np.asarray(a, dtype=np.float64) for a in (total, knowledge, neg_confidence))
    return SplitArrays(mean_probs=None, total=total, data=total - knowledge, knowledge=knowledge,
                       neg_confidence=neg_confidence)


def _hist_by_hand(v, edges):
    """Counts in [e_b, e_b+1), the last bin closed: a loop over the bins."""
    nb = edges.size - 1
    return [int(np.count_nonzero((v >= edges[b]) & ((v < edges[b + 1]) if b < nb - 1 else (v <= edges[b + 1]))))
            for b in range(nb)]


def test_ood_histograms_by_hand():
    """Per score, shared equal-width edges from the smallest to the largest value of both splits, counts in
    [lo, hi) with the last bin closed: integer scores fall on the edges (0..6 in 6 bins); a score constant over
    both splits gets the edges [v, v + 1e-12] and every count in its first bin; only the scores asked for."""
    rng = np.random.default_rng(9)
    ind = _scores(total=[0, 1, 1, 2, 6, 3], knowledge=np.full(6, 0.25), neg_confidence=rng.uniform(-1, -0.4, 6))
    ood = _scores(total=[6, 5, 5, 4, 2], knowledge=np.full(5, 0.25), neg_confidence=rng.uniform(-0.8, -0.2, 5))
    got = ood_histograms(ind, ood, n_bins=6)
    assert list(got) == ["total", "knowledge", "confidence"]
    t = got["total"]
    assert t["edges"] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert t["in_domain"] == [1, 2, 1, 1, 0, 1] and t["ood"] == [0, 0, 1, 0, 1, 3]
    k = got["knowledge"]
    np.testing.assert_array_equal(k["edges"], np.linspace(0.25, 0.25 + 1e-12, 7))
    assert k["in_domain"] == [6, 0, 0, 0, 0, 0] and k["ood"] == [5, 0, 0, 0, 0, 0]
    c = got["confidence"]
    both = np.r_[ind.neg_confidence, ood.neg_confidence]
    edges = np.linspace(both.min(), both.max(), 7)
    np.testing.assert_array_equal(c["edges"], edges)
    assert c["in_domain"] == _hist_by_hand(ind.neg_confidence, edges)
    assert c["ood"] == _hist_by_hand(ood.neg_confidence, edges)
    default = ood_histograms(ind, ood, scores=("confidence",))
    assert list(default) == ["confidence"] and len(default["confidence"]["edges"]) == 31
    assert sum(default["confidence"]["in_domain"]) == 6 and sum(default["confidence"]["ood"]) == 5


def _roc_oracle(grid, y, s):
    """TPR at each grid FPR from scikit-learn's ROC points (``drop_intermediate=False``): at a point's FPR the
    highest TPR there, between points the straight line from the last point before to the first after."""
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    out = []
    for g in grid:
        at = np.isclose(fpr, g, rtol=0, atol=1e-12)
        if at.any():
            out.append(tpr[at].max())
            continue
        left, right = np.flatnonzero(fpr < g)[-1], np.flatnonzero(fpr > g)[0]
        out.append(tpr[left] + (g - fpr[left]) / (fpr[right] - fpr[left]) * (tpr[right] - tpr[left]))
    return np.array(out)


def test_ood_roc_curves_against_sklearn():
    """Per score the ROC of OOD detection (positive = OOD, higher = more uncertain) read at ``points`` evenly
    spaced FPRs: 7 in-domain samples (FPR steps of 1/7, mostly between grid points) and tied scores across the
    splits; the default grid has 101 points."""
    rng = np.random.default_rng(11)
    ind = _scores(total=rng.integers(0, 6, 7), knowledge=rng.uniform(0, 1, 7), neg_confidence=rng.uniform(-1, 0, 7))
    ood = _scores(total=rng.integers(2, 8, 9), knowledge=rng.uniform(0.3, 1.3, 9),
                  neg_confidence=rng.uniform(-0.7, 0, 9))
    y = np.r_[np.zeros(7), np.ones(9)]
    got = ood_roc_curves(ind, ood, points=11)
    assert list(got) == ["total", "knowledge", "confidence"]
    for name, field in (("total", "total"), ("knowledge", "knowledge"), ("confidence", "neg_confidence")):
        s = np.r_[getattr(ind, field), getattr(ood, field)]
        assert got[name]["fpr"] == pytest.approx(np.linspace(0, 1, 11).tolist(), abs=0)
        np.testing.assert_allclose(got[name]["tpr"], _roc_oracle(np.linspace(0, 1, 11), y, s), rtol=0, atol=1e-12,
                                   err_msg=name)
    assert len(np.unique(np.r_[ind.total, ood.total])) < 16  # ties
    default = ood_roc_curves(ind, ood, scores=("total",))
    assert list(default) == ["total"] and len(default["total"]["fpr"]) == 101
    np.testing.assert_allclose(default["total"]["tpr"], _roc_oracle(np.linspace(0, 1, 101), y, np.r_[ind.total,
                               ood.total]), rtol=0, atol=1e-12)


# --- the calibrated protocol and the calibrators -----------------------------------------------------------------

def _halvings(n, repeats, seed):
    """The protocol's folds (fit, held-out): repeat r halves ``default_rng(seed)``'s r-th permutation, first half
    A, rest B; folds (A, B) then (B, A)."""
    rng = np.random.default_rng(seed)
    for _ in range(repeats):
        perm = rng.permutation(n)
        a, b = perm[: n // 2], perm[n // 2:]
        yield a, b
        yield b, a


def _fit_t(members, y, eps, placement):
    """argmin over T in the protocol's bounds of the NLL of the scaled prediction (scipy's bounded Brent)."""
    def nll(t):
        return -np.log(_scaled(members, t, eps, placement)[np.arange(y.size), y]).mean()
    return minimize_scalar(nll, bounds=T_BOUNDS, method="bounded", options={"xatol": 1e-11}).x


def _brier(q, y):
    return ((q - np.eye(q.shape[1])[y]) ** 2).sum(axis=1).mean()


def _calibrated_oracle(members, y, placement, repeats, seed, eps, bins):
    """Test-time CV temperature scaling restated: per fold T fitted on one half, the other half scored before
    (the mean; NLL -log(p_y + eps)) and after (the scaled prediction; CLL = mean log q_y); means over folds."""
    rows, temps = [], []
    mean = members.mean(axis=0)
    for fit, held in _halvings(y.size, repeats, seed):
        t = _fit_t(members[:, fit], y[fit], eps, placement)
        q, p, yh = _scaled(members[:, held], t, eps, placement), mean[held], y[held]
        temps.append(t)
        rows.append([np.log(q[np.arange(yh.size), yh]).mean(), -np.log(p[np.arange(yh.size), yh] + eps).mean(),
                     _brier(p, yh), _brier(q, yh), _ece(p, yh, bins), _ece(q, yh, bins),
                     (p.argmax(axis=1) == yh).mean(), (q.argmax(axis=1) == yh).mean()])
    m = np.mean(rows, axis=0)
    return {"cll": m[0], "calibrated_nll": -m[0], "cv_nll_before": m[1], "cv_brier_before": m[2],
            "calibrated_brier": m[3], "cv_ece_before": m[4], "calibrated_ece": m[5], "calibrated_accuracy": m[7],
            "temperatures": temps, "temperature": np.mean(temps), "temperature_std": np.std(temps)}


@pytest.mark.parametrize("placement", ["post", "per_member"])
def test_calibrated_section_by_scipy(placement):
    """The calibrated protocol of the section with its settings handed on (smoothing 0.1, eps 1e-3 on members with
    exact zeros, 5 bins, 2 repeats, seed 4) against a scipy restatement; then the settings it records."""
    members, y = _members(n=200, c=4, seed=6)
    arrays = split_arrays(members, keep_members=True)
    got = calibrated_section(arrays, y, placement=placement, repeats=2, seed=4, bins=5, eps=1e-3, smoothing=0.1)
    want = _calibrated_oracle(_smoothed(members, 0.1), y, placement, 2, 4, 1e-3, 5)
    np.testing.assert_allclose(got["temperatures"], want["temperatures"], rtol=2e-6)
    for key in ("temperature", "cll", "calibrated_nll", "cv_nll_before", "cv_brier_before", "calibrated_brier",
                "calibrated_accuracy"):
        assert got[key] == pytest.approx(want[key], rel=1e-6), key
    assert got["temperature_std"] == pytest.approx(want["temperature_std"], rel=1e-4, abs=1e-9)
    for key in ("cv_ece_before", "calibrated_ece"):  # 5 bins: 15 (the default) gives other values here
        assert got[key] == pytest.approx(want[key], abs=1e-7), key
        assert abs(want[key] - _calibrated_oracle(_smoothed(members, 0.1), y, placement, 2, 4, 1e-3, 15)[key]) > 1e-3
    assert {k: got[k] for k in ("placement", "folds", "repeats", "seed", "n_hit_bound")} == {
        "placement": placement, "folds": 2, "repeats": 2, "seed": 4, "n_hit_bound": 0}
    assert set(got) == {"cll", "temperature", "temperature_std", "temperatures", "n_hit_bound", "calibrated_accuracy",
                        "calibrated_nll", "calibrated_brier", "calibrated_ece", "cv_nll_before", "cv_brier_before",
                        "cv_ece_before", "placement", "folds", "repeats", "seed"}
    # eps matters on these data (the slip of dropping it for the default 1e-12 would show)
    assert abs(_fit_t(_smoothed(members, 0.1), y, 1e-12, placement) - _fit_t(_smoothed(members, 0.1), y, 1e-3,
                                                                               placement)) > 1e-3 or placement == "post"


def _ovr_renormalised(q):
    """The one-vs-rest calibrators' rows (calibrators.py, torch-uncertainty's): divide by the row sum + 1e-12,
    clip to [1e-6, 1 - 1e-6], divide by the row sum again."""
    q = np.clip(q / (q.sum(axis=1, keepdims=True) + 1e-12), 1e-6, 1 - 1e-6)
    return q / q.sum(axis=1, keepdims=True)


def _histogram_map(p_fit, y_fit, p, bins=15):
    """Per class the share of positives among the fitting rows in p's bin (lo, hi]; an empty bin its centre."""
    edges = np.linspace(0, 1, bins + 1)
    q = np.empty_like(p)
    for k in range(p.shape[1]):
        fit_bin, bin_ = _bin_of(p_fit[:, k], edges), _bin_of(p[:, k], edges)
        for b in range(bins):
            inside = fit_bin == b
            q[bin_ == b, k] = (y_fit[inside] == k).mean() if inside.any() else (edges[b] + edges[b + 1]) / 2
    return _ovr_renormalised(q)


def _isotonic_map(p_fit, y_fit, p):
    from sklearn.isotonic import IsotonicRegression

    return _ovr_renormalised(np.stack([
        IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(p_fit[:, k], y_fit == k).predict(p[:, k])
        for k in range(p.shape[1])], axis=1))


def _calibrator_oracle(probs, y, fit_apply, repeats, seed, eps, bins):
    """Means over the protocol's folds of the held-out NLL -log(q_y + eps), Brier and top-1 ECE (lo, hi]."""
    rows = []
    for fit, held in _halvings(y.size, repeats, seed):
        q, yh = fit_apply(probs[fit], y[fit], probs[held]), y[held]
        rows.append([-np.log(q[np.arange(yh.size), yh] + eps).mean(), _brier(q, yh), _ece(q, yh, bins)])
    return dict(zip(("nll", "brier", "ece"), np.mean(rows, axis=0)))


def _temperature_map(eps):
    return lambda p_fit, y_fit, p: _scaled(p[None], _fit_t(p_fit[None], y_fit, eps, "post"), eps, "post")


def test_calibrators_section_by_hand():
    """Temperature scaling, histogram binning and isotonic regression of the smoothed mean, each fitted on one
    half and scored on the other, against restatements (scipy, a per-bin loop, scikit-learn's isotonic regression);
    every calibrator named is reported, unconverged folds counted, ``selected`` only with ``odir="cv"``."""
    members, y = _members(n=120, c=3, seed=7)
    probs, eps = _smoothed(members, 0.1).mean(axis=0), 1e-3
    names = ("temperature", "vector", "matrix", "dirichlet", "histogram", "isotonic", "bbq")
    got = calibrators_section(split_arrays(members), y, names=names, repeats=2, seed=2, bins=6, eps=eps,
                              smoothing=0.1)
    assert list(got) == list(names)
    for name, fit_apply in (("temperature", _temperature_map(eps)), ("histogram", _histogram_map),
                            ("isotonic", _isotonic_map)):
        want = _calibrator_oracle(probs, y, fit_apply, 2, 2, eps, 6)
        for key in ("nll", "brier", "ece"):
            assert got[name][key] == pytest.approx(want[key], rel=1e-6, abs=1e-9), (name, key)
    for name in names:
        assert set(got[name]) == {"nll", "brier", "ece", "unconverged_folds"}
        assert 0 <= got[name]["unconverged_folds"] <= 4
        assert np.isfinite([got[name][k] for k in ("nll", "brier", "ece")]).all()


def test_calibrators_section_odir_by_inner_cv_and_two_samples():
    """``odir="cv"`` makes ``dirichlet`` choose (λ, μ) on Kull et al.'s grid in every fold (``selected``, one dict
    per fold; other calibrators unchanged); two samples are enough (one per half), one is not."""
    members, y = _members(n=60, c=3, seed=2)
    arrays = split_arrays(members)
    kw = dict(names=("temperature", "dirichlet"), repeats=1, seed=0, bins=5, eps=1e-3, smoothing=0.1)
    fixed, cv = calibrators_section(arrays, y, **kw), calibrators_section(arrays, y, odir="cv", **kw)
    assert "selected" not in fixed["dirichlet"] and "selected" not in cv["temperature"]
    assert cv["temperature"] == fixed["temperature"]
    sel = cv["dirichlet"]["selected"]
    assert len(sel) == 2 and all(set(d) == {"lambda", "mu", "inner_nll"} for d in sel)
    assert all(d["lambda"] in ODIR_GRID and d["mu"] in ODIR_GRID and np.isfinite(d["inner_nll"]) for d in sel)
    assert cv["dirichlet"]["nll"] != fixed["dirichlet"]["nll"]
    # the count is the library's per-fold record (one of the two refits stops at its iteration cap with
    # numpy 2.4 / scipy 1.17 here; not asserted, as the iteration count may move with the BLAS)
    lib = cross_validated_calibrators(_smoothed(members, 0.1).mean(axis=0), y, ("dirichlet",), n_repeats=1, seed=0,
                                      eps=1e-3, n_bins=5, odir_lambda="cv")["dirichlet"]
    assert cv["dirichlet"]["unconverged_folds"] == sum(not f["converged"] for f in lib.folds)
    two = calibrators_section(split_arrays(members[:, :2]), y[:2], **kw)
    assert two is not None and set(two) == {"temperature", "dirichlet"}
    want = _calibrator_oracle(_smoothed(members[:, :2], 0.1).mean(axis=0), y[:2], _temperature_map(1e-3), 1, 0,
                              1e-3, 5)
    assert two["temperature"]["nll"] == pytest.approx(want["nll"], rel=1e-6)
    assert calibrators_section(split_arrays(members[:, :1]), y[:1], **kw) is None


def test_ood_roc_curve_ends_by_hand():
    """The ends of the curve, where sampled data rarely go: the most uncertain sample in-domain (the curve leaves
    (0, 0) along the FPR axis), ties across the splits (diagonal steps), and the least uncertain sample OOD (a
    vertical run at FPR 1, whose top is 1). Points (0, 0) (.2, 0) (.2, .2) (.6, .4) (.6, .6) (.8, .6) (1, .8) (1, 1)."""
    ind = _scores(total=[0.9, 0.5, 0.5, 0.3, 0.1], knowledge=np.zeros(5), neg_confidence=np.zeros(5))
    ood = _scores(total=[0.8, 0.5, 0.4, 0.1, 0.05], knowledge=np.zeros(5), neg_confidence=np.zeros(5))
    got = ood_roc_curves(ind, ood, points=11, scores=("total",))["total"]
    want = [0.0, 0.0, 0.2, 0.25, 0.3, 0.35, 0.6, 0.6, 0.6, 0.7, 1.0]
    np.testing.assert_allclose(got["tpr"], want, rtol=0, atol=1e-12)
    y = np.r_[np.zeros(5), np.ones(5)]
    np.testing.assert_allclose(got["tpr"], _roc_oracle(np.linspace(0, 1, 11), y, np.r_[ind.total, ood.total]),
                               rtol=0, atol=1e-12)


def _detection_oracle(y, s, tpr):
    """(AUROC, AP, FPR at the first ROC point whose TPR reaches ``tpr``) from scikit-learn."""
    fpr, tp, _ = roc_curve(y, s, drop_intermediate=False)
    return roc_auc_score(y, s), average_precision_score(y, s), fpr[np.flatnonzero(tp >= tpr - 1e-12)[0]]


@pytest.mark.parametrize("n_members", [1, 3])
def test_ood_section_against_sklearn(n_members):
    """OOD detection (positive = OOD) of each score against scikit-learn, at TPR 0.8; with one member the
    knowledge score is not defined (its three keys are ``None``)."""
    ind_m, _ = _members(m=n_members, n=50, c=4, seed=12, zeros=False)
    ood_m = softmax(np.random.default_rng(13).normal(0, 1.0, (n_members, 30, 4)), axis=2)
    ind, ood = split_arrays(ind_m), split_arrays(ood_m)
    got = ood_section(ind, ood, tpr=0.8, scores=scores_for(n_members))
    y = np.r_[np.zeros(50), np.ones(30)]
    assert len(got) == 9
    for name, field in (("total", "total"), ("knowledge", "knowledge"), ("confidence", "neg_confidence")):
        keys = [f"ood_{k}_{name}" for k in ("auroc", "aupr", "fpr95")]
        if name not in scores_for(n_members):
            assert [got[k] for k in keys] == [None, None, None]
            continue
        want = _detection_oracle(y, np.r_[getattr(ind, field), getattr(ood, field)], 0.8)
        assert [got[k] for k in keys] == pytest.approx(list(want), rel=1e-12), name


# --- a labelled split's sections ---------------------------------------------------------------------------------

def _rejection_oracle(correct, u):
    """Accuracy of the k = N - r least uncertain samples, r = 0..N-1; the ties at the k-th uncertainty count with
    their mean accuracy (a uniformly random choice among them, ``rejection_curve``'s convention)."""
    out = []
    for r in range(u.size):
        k = u.size - r
        t = np.sort(u)[k - 1]
        below, tie = u < t, u == t
        out.append((correct[below].sum() + (k - below.sum()) * correct[tie].mean()) / k)
    return np.array(out)


def test_in_domain_section_by_hand():
    """A labelled in-domain split (3 members, 10 classes, smoothing 0.05, 7 bins, TPR 0.8, URSABench's MNIST cost
    matrix, the knowledge score left out): misclassification detection (scikit-learn), the mean uncertainties,
    accuracy-rejection curves at 101 evenly spaced rejected fractions, the reliability diagram of the unsmoothed
    mean, the Bayes-decision cost of the smoothed mean, top-5 accuracy; no notes. The defaults are the signature's."""
    members, y = _members(m=3, n=150, c=10, seed=14, zeros=False)
    s, n = 0.05, 150
    arrays = split_arrays(members, smoothing=s)
    kw = dict(bins=7, eps=1e-6, smoothing=s, tpr=0.8)
    got = in_domain_section(arrays, y, cost_preset="mnist", scores=("total", "confidence"), repeats=2, seed=3, **kw)
    mean = members.mean(axis=0)
    correct = mean.argmax(axis=1) == y
    u = _uncertainties_oracle(members, s)
    assert got["n_samples"] == n and got["notes"] == []
    for key, field in (("total", "total"), ("knowledge", None), ("confidence", "neg_confidence")):
        mis = [got[f"misclassification_{k}_{key}"] for k in ("auroc", "aupr", "fpr95")]
        if field is None:
            assert mis == [None, None, None] and got[f"aurc_{key}"] is None and key not in got["rejection_curves"]
            continue
        assert mis == pytest.approx(list(_detection_oracle(~correct, u[field], 0.8)), rel=1e-12), key
        acc = _rejection_oracle(correct, u[field])
        assert got[f"aurc_{key}"] == pytest.approx(1 - acc.mean(), rel=1e-12)
        r = np.unique(np.minimum(n - 1, np.round(np.arange(101) / 101 * n).astype(int)))
        curve = got["rejection_curves"][key]
        assert curve["rejected_fraction"] == pytest.approx((r / n).tolist(), abs=0)
        assert curve["accuracy"] == pytest.approx(acc[r].tolist(), rel=1e-12)
    for key in ("total", "knowledge", "data"):
        assert got[f"mean_{key}_uncertainty"] == pytest.approx(u[key].mean(), rel=1e-12)
    _assert_reliability(got["reliability"], _reliability_oracle(mean, y, 7))
    cost = cost_matrix_preset("mnist")
    ps = _smoothed(mean, s)
    # decide argmin_d sum_c p_c cost[c, d], risks within C eps64 max|cost| of the least tied to the lowest d (the
    # uniform rows); pay cost[y, d]
    risk = ps @ cost
    tied = risk <= risk.min(axis=1, keepdims=True) + 10 * np.finfo(float).eps * np.abs(cost).max()
    paid = cost[y, tied.argmax(axis=1)]
    assert (got["decision_cost"], got["decision_cost_sum"], got["decision_cost_mean"]) == pytest.approx(
        (paid.mean(), paid.sum(), paid.mean()), rel=1e-12)
    assert got["cost_reduction"] == "mean" and got["cost_preset"] == "mnist"
    top5 = np.argsort(-mean, axis=1)[:, :5]
    assert got["top5_accuracy"] == pytest.approx(np.mean([y[i] in top5[i] for i in range(n)]), rel=1e-12)
    assert got["top5_ece"] is not None and got["ece_quantile"] is not None
    assert got["conformal_coverage"] is not None and got["disagreement"] is not None
    summed = in_domain_section(arrays, y, cost_preset="mnist", cost_reduction="sum", **kw)
    assert summed["decision_cost"] == pytest.approx(paid.sum(), rel=1e-12) and summed["cost_reduction"] == "sum"
    explicit = dict(cost_preset=None, cost_matrix=None, cost_reduction="mean", scores=("total", "knowledge",
                    "confidence"), conformal_method="aps", conformal_alpha=0.1, repeats=5, seed=0)
    assert in_domain_section(arrays, y, **kw) == in_domain_section(arrays, y, **kw, **explicit)


def test_in_domain_section_notes_when_every_prediction_is_right():
    """Misclassification detection is undefined without errors: ``None`` and one note saying so."""
    members, _ = _members(m=2, n=40, c=3, seed=15, zeros=False)
    y = members.mean(axis=0).argmax(axis=1)
    got = in_domain_section(split_arrays(members), y, bins=5, eps=1e-6, smoothing=0.0, tpr=0.95, repeats=1)
    assert got["misclassification_auroc_total"] is None and got["misclassification_fpr95_confidence"] is None
    assert len(got["notes"]) == 1 and got["notes"][0].startswith("misclassification detection undefined")


@pytest.mark.parametrize("n", [1, 2, 60])
def test_shift_split_section_by_hand(n):
    """A shifted split (one member, 5 classes): the entropy histogram of the total uncertainty (30 equal bins of
    [0, log 5], uniform rows in the last), top-5 scores ``None`` with 5 classes, the CV quantities (quantile ECE,
    conformal) from 2 samples on, one member's diversity ``None``."""
    members, y = _members(m=1, n=60, c=5, seed=16, zeros=False)
    members, y = members[:, -n:], y[-n:]
    got = shift_split_section(split_arrays(members), y, bins=6, eps=1e-6, smoothing=0.0, repeats=2, seed=1,
                              conformal_method="thr", conformal_alpha=0.25)
    total = entr(members[0]).sum(axis=1)
    edges = np.linspace(0, np.log(5), 31)
    assert got["entropy_histogram"]["edges"] == pytest.approx(edges.tolist(), rel=1e-15)
    assert got["entropy_histogram"]["counts"] == _hist_by_hand(np.clip(total, 0, np.log(5)), edges)
    assert got["entropy_histogram"]["counts"][-1] >= 1
    assert got["n_samples"] == n and got["mean_total_uncertainty"] == pytest.approx(total.mean(), rel=1e-12)
    assert got["top5_accuracy"] is None and got["top5_ece"] is None
    assert got["disagreement"] is None and got["variation_ratio"] is None
    assert (got["ece_quantile"] is None) == (n < 2)
    assert (got["conformal_coverage"] is None) == (got["conformal_set_size"] is None) == (n < 2)
    _assert_reliability(got["reliability"], _reliability_oracle(members[0], y, 6))
    assert got["accuracy"] == pytest.approx((members[0].argmax(axis=1) == y).mean(), rel=1e-12)
    conf, hit = members[0].max(axis=1), members[0].argmax(axis=1) == y
    curves = got["confidence_curves"]
    for t, count, acc in zip(curves["thresholds"], curves["count"], curves["accuracy"]):
        above = conf >= t  # the samples at or above each confidence threshold, and their accuracy
        assert count == above.sum() and acc == (pytest.approx(hit[above].mean(), rel=1e-12) if above.any() else None)
    if n >= 2:
        want = cross_validated_conformal(members[0], y, method="thr", alpha=0.25, n_repeats=2, seed=1)
        assert (got["conformal_coverage"], got["conformal_set_size"]) == (want.coverage, want.set_size)
    if n == 60:  # the defaults are the signature's
        kw = dict(bins=6, eps=1e-6, smoothing=0.0)
        assert shift_split_section(split_arrays(members), y, **kw) == shift_split_section(
            split_arrays(members), y, conformal_method="aps", conformal_alpha=0.1, repeats=5, seed=0, **kw)


def _tace_oracle(p, y, bins, threshold=1e-3):
    """Per class the probabilities above the threshold sorted by (value, hit), cut into ``bins`` bins of
    n_c // bins (the last takes the remainder; one bin when n_c < bins); sum of |hits - values| over the bins,
    over N C (the Pitfalls code's normalisation)."""
    total = 0.0
    for c in range(p.shape[1]):
        keep = p[:, c] > threshold
        v, h = p[keep, c], (y[keep] == c).astype(float)
        order = np.lexsort((h, v))
        v, h = v[order], h[order]
        size = v.size // bins
        cuts = [0] if size == 0 else [b * size for b in range(bins)]
        for a, b in zip(cuts, cuts[1:] + [v.size]):
            total += abs(h[a:b].sum() - v[a:b].sum())
    return total / (p.shape[0] * p.shape[1])


def test_core_metrics_tace_and_ece_by_hand():
    """The split's TACE and ECE use the protocol's bins (4 here; the default 15 gives another TACE)."""
    members, y = _members(m=1, n=200, c=4, seed=17, zeros=False)
    p = members[0, :-6]
    y = y[:-6]
    got = core_metrics(p, y, bins=4, eps=1e-6, smoothing=0.0)
    assert got["tace"] == pytest.approx(_tace_oracle(p, y, 4), rel=1e-12)
    assert got["ece"] == pytest.approx(_ece(p, y, 4), rel=1e-12)
    assert abs(_tace_oracle(p, y, 4) - _tace_oracle(p, y, 15)) > 1e-3
    assert got["accuracy"] == pytest.approx((p.argmax(axis=1) == y).mean(), rel=1e-12)
    assert got["brier"] == pytest.approx(_brier(p, y), rel=1e-12)


def test_decision_section_with_a_given_matrix_by_hand():
    """A given cost matrix (indexed [true, decided]) instead of a preset: the Bayes decisions of the smoothed
    probabilities and their cost, summed (URSABench) or averaged; ``cost_preset`` is ``None``; neither: no section."""
    p = np.array([[0.7, 0.2, 0.1], [0.2, 0.5, 0.3], [0.05, 0.15, 0.8], [0.4, 0.35, 0.25]])
    y = np.array([0, 2, 2, 1])
    cost = [[0, 1, 1], [9, 0, 1], [1, 1, 0]]
    s = 0.3
    ps = (1 - s) * p + s / 3
    decided = (ps @ np.array(cost, float)).argmin(axis=1)  # no ties on these rows
    paid = np.array(cost, float)[y, decided]
    got = decision_section(p, y, cost_preset=None, cost_matrix=cost, smoothing=s, reduction="sum")
    assert got == {"decision_cost": pytest.approx(paid.sum()), "decision_cost_sum": pytest.approx(paid.sum()),
                   "decision_cost_mean": pytest.approx(paid.mean()), "cost_reduction": "sum", "cost_preset": None}
    assert decided.tolist() != p.argmax(axis=1).tolist()  # the costs, not the argmax, decide here
    assert decision_section(p, y, cost_preset=None, cost_matrix=None, smoothing=s, reduction="sum") is None


def test_in_domain_section_hands_on_the_conformal_settings():
    """The named conformal method and level reach the split-conformal numbers (as the library function computes
    them on the split's mean), and the rejection curves sit under ``rejection_curves`` only."""
    members, y = _members(m=2, n=80, c=4, seed=18, zeros=False)
    got = in_domain_section(split_arrays(members), y, bins=5, eps=1e-6, smoothing=0.0, tpr=0.95,
                            conformal_method="thr", conformal_alpha=0.25, repeats=2, seed=5)
    want = cross_validated_conformal(members.mean(axis=0), y, method="thr", alpha=0.25, n_repeats=2, seed=5)
    assert (got["conformal_coverage"], got["conformal_set_size"]) == (want.coverage, want.set_size)
    aps = cross_validated_conformal(members.mean(axis=0), y, method="aps", alpha=0.25, n_repeats=2, seed=5)
    assert aps.set_size != want.set_size
    assert "curves" not in got and set(got["rejection_curves"]) == {"total", "knowledge", "confidence"}


def test_entropy_histogram_counts_totals_rounded_past_the_range():
    """30 equal bins of [0, log C]; a total rounded a hair below 0 or past log C still counts (first, last bin)."""
    c = 4
    total = np.array([-1e-17, 0.0, 0.5, np.log(c) / 2, np.log(c), np.log(c) + 1e-12])
    got = entropy_histogram(_scores(total=total, knowledge=np.zeros(6), neg_confidence=np.zeros(6)), c)
    edges = np.linspace(0, np.log(c), 31)
    assert got["edges"] == pytest.approx(edges.tolist(), rel=1e-15)
    assert got["counts"] == _hist_by_hand(np.clip(total, 0, np.log(c)), edges)
    assert got["counts"][0] == 2 and got["counts"][-1] == 2 and sum(got["counts"]) == 6


def test_accumulator_without_the_mean_and_with_two_bad_rows():
    """Without ``keep_mean`` the means of the row ranges go through a scratch block (``mean_probs`` None, the same
    uncertainties); the row-sum record keeps the largest deviation over all blocks (member 0, sample 50, 2e-3,
    after member 1, sample 3, 1e-3) and counts both; float32 members are kept in float32."""
    members, _ = _members(m=2, n=70, c=3, seed=19, zeros=False)
    members = members.astype(np.float32)
    members[1, 3] *= np.float32(1.001)
    members[0, 50] *= np.float32(1.002)
    fixed = members.astype(np.float64) / members.sum(axis=2, keepdims=True, dtype=np.float64)
    acc = SplitAccumulator(*members.shape, smoothing=0.1, keep_mean=False)
    for start, stop in ((0, 10), (10, 40), (40, 70)):  # a larger block after a smaller one: the scratch grows
        acc.add(start, members[:, start:stop])
    got = acc.result()
    assert got.mean_probs is None and got.member_probs is None
    for name, want in _uncertainties_oracle(fixed, 0.1).items():
        np.testing.assert_allclose(getattr(got, name), want, rtol=2e-6, atol=1e-7, err_msg=name)
    assert (got.row_sums.member, got.row_sums.sample, got.row_sums.n_renormalised) == (0, 50, 2)
    assert got.row_sums.max_deviation == pytest.approx(2e-3, rel=1e-4)
    kept = split_arrays(members, keep_members=True).member_probs
    assert kept.dtype == np.float32
    np.testing.assert_allclose(kept, fixed, rtol=1e-6)


@pytest.mark.parametrize("path", ["whole", "member_rows"])
def test_two_members_have_their_votes_and_ranges_go_through_the_scratch(path):
    """Two members are enough for the vote diversity: disagreement is 1 where their top-1 classes differ, else 0,
    and the variation ratio 1 - (modal count) / 2 is 1/2 or 0. Without ``keep_mean`` the row ranges' means go
    through a scratch block sized by the first range (25 rows), which must serve a shorter last one (20 rows)."""
    members, _ = _members(m=2, n=70, c=3, seed=21, zeros=False)
    acc = SplitAccumulator(*members.shape, keep_mean=False)
    for start, stop in ((0, 25), (25, 50), (50, 70)):
        if path == "whole":
            acc.add(start, members[:, start:stop])
        else:
            for j in range(2):
                acc.add_member_rows(start, j, members[j, start:stop])
    got = acc.result()
    differ = (members[0].argmax(axis=1) != members[1].argmax(axis=1)).astype(float)
    assert 0 < differ.sum() < 70  # both cases occur
    np.testing.assert_array_equal(got.disagreement, differ)
    np.testing.assert_array_equal(got.variation_ratio, differ / 2)
    for name, want in _uncertainties_oracle(members, 0.0).items():
        np.testing.assert_allclose(getattr(got, name), want, rtol=1e-12, atol=1e-14, err_msg=name)
