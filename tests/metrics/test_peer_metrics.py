# SPDX-License-Identifier: MIT
"""The newest peers' metrics (issue #17 item 5): AUGRC, coverage at risk, risk at coverage, smooth ECE,
disagreement, variation ratio and cross-validated split-conformal sets.

Each is pinned twice: against the reference implementation's numbers, computed once with torch-uncertainty 0.13.0
and relplot 1.0.3 (``tests/data/peer_oracle/make_oracle.py``, command in its docstring and the README there), and
against a brute-force computation from the definition written out here.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ubench import metrics as m
from ubench.metrics.conformal import conformal_quantile, conformal_scores

ORACLE = Path(__file__).parent.parent / "data" / "peer_oracle"


@pytest.fixture(scope="module")
def oracle():
    d = np.load(ORACLE / "inputs.npz")
    return d["members"], d["labels"], d["sharp"], json.loads((ORACLE / "values.json").read_text())


# --- against the reference implementations ------------------------------------------------------------------

@pytest.mark.parametrize("which", ["mean", "sharp"])
def test_selective_metrics_equal_torch_uncertainty(oracle, which):
    members, labels, sharp, v = oracle
    p, ref = (members.mean(0) if which == "mean" else sharp), v[which]
    # torch-uncertainty builds the coverage grid in float32: agreement to ~1e-7 relative.
    assert m.generalized_risk_coverage_auc(p, labels, integration="trapezoid") == pytest.approx(ref["augrc"], rel=1e-6)
    assert m.risk_coverage_auc(p, labels, integration="trapezoid") == pytest.approx(ref["aurc"], rel=1e-6)
    assert m.coverage_at_risk(p, labels, risk=0.05) == pytest.approx(ref["cov_at_5_risk"], rel=1e-7)
    assert m.risk_at_coverage(p, labels, coverage=0.8) == pytest.approx(ref["risk_at_80_cov"], rel=1e-12)
    # The default (right Riemann) AURC differs by O(1/N): the size issue #17 item 6 reports.
    riemann = m.risk_coverage_auc(p, labels)
    assert 0 < abs(riemann - ref["aurc"]) / ref["aurc"] < 5.0 / labels.shape[0]


@pytest.mark.parametrize("which", ["mean", "sharp"])
def test_smooth_ece_equals_relplot(oracle, which):
    members, labels, sharp, v = oracle
    p = members.mean(0) if which == "mean" else sharp
    assert m.smooth_ece(p, labels) == pytest.approx(v[which]["smooth_ece"], rel=1e-12)
    assert m.smooth_ece_at(p, labels, sigma=0.05) == pytest.approx(v[which]["smooth_ece_sigma_0.05"], rel=1e-12)


def test_diversity_equals_torch_uncertainty(oracle):
    members, labels, _, v = oracle
    assert m.disagreement(members) == pytest.approx(v["mean"]["disagreement"], rel=1e-6)
    # torch-uncertainty's default (probabilistic) variation ratio is one minus the ensemble confidence ...
    assert 1 - members.mean(0).max(-1).mean() == pytest.approx(v["mean"]["variation_ratio_probabilistic"], rel=1e-12)
    # ... and its vote form compares votes with the mean's top class; ubench's takes the modal vote (Gal 2016).
    votes = members.argmax(-1)
    vs_mean = 1 - (votes == members.mean(0).argmax(-1)[None]).mean(0).mean()
    assert vs_mean == pytest.approx(v["mean"]["variation_ratio_votes"], rel=1e-6)
    modal = 1 - np.array([np.bincount(votes[:, i]).max() for i in range(votes.shape[1])]).mean() / members.shape[0]
    assert m.variation_ratio(members) == pytest.approx(modal, rel=1e-12)
    assert m.variation_ratio(members) <= vs_mean


# --- against the definitions ----------------------------------------------------------------------------------

def _distinct_conf_problem(seed: int, n: int, c: int):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(c) * 0.7, size=n)
    y = rng.integers(0, c, size=n)
    assert np.unique(p.max(-1)).size == n
    return p, y


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(2, 60), c=st.integers(2, 6))
def test_selective_metrics_from_definitions(seed, n, c):
    p, y = _distinct_conf_problem(seed, n, c)
    order = np.argsort(-p.max(-1))
    wrong = (p.argmax(-1) != y)[order].astype(float)
    errors_k = np.cumsum(wrong)  # errors among the k most confident, k = 1..n
    risk = errors_k / np.arange(1, n + 1)
    assert m.generalized_risk_coverage_auc(p, y) == pytest.approx(errors_k.sum() / n**2, abs=1e-12)
    assert m.risk_coverage_auc(p, y) == pytest.approx(risk.mean(), abs=1e-12)
    for r in (0.0, 0.05, 0.3):
        ok = [k for k in range(1, n + 1) if risk[k - 1] <= r + 1e-15]
        got = m.coverage_at_risk(p, y, risk=r)
        assert got == (max(ok) / n if ok else None)
    for cov in (0.1, 0.5, 0.8, 1.0):
        assert m.risk_at_coverage(p, y, coverage=cov) == pytest.approx(risk[max(1, math.ceil(n * cov)) - 1])


def test_augrc_ties_are_order_free():
    p = np.array([[0.7, 0.3]] * 4 + [[0.9, 0.1]])
    y = np.array([0, 1, 0, 1, 0])
    perm = np.array([3, 1, 4, 0, 2])
    a = m.generalized_risk_coverage_auc(p, y)
    assert a == m.generalized_risk_coverage_auc(p[perm], y[perm])
    # k = 1: the 0.9 sample (right); k = 2..5: expected errors (k-1) * 2/4 among the tied four.
    assert a == pytest.approx(sum((k - 1) * 0.5 for k in range(1, 6)) / 25)


def test_smooth_ece_zero_for_calibrated_and_grows_with_miscalibration():
    rng = np.random.default_rng(1)
    conf = rng.uniform(0.5, 1.0, size=20000)
    hit = rng.random(20000) < conf
    p = np.stack([conf, 1 - conf], -1)
    y = np.where(hit, 0, 1)
    calibrated = m.smooth_ece(p, y)
    over = np.clip(conf + 0.15, 0, 1)
    worse = m.smooth_ece(np.stack([over, 1 - over], -1), y)
    assert calibrated < 0.02 and worse > 0.1


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n_members=st.integers(2, 6), n=st.integers(1, 20), c=st.integers(2, 5))
def test_disagreement_is_the_share_of_disagreeing_pairs(seed, n_members, n, c):
    rng = np.random.default_rng(seed)
    mp = rng.dirichlet(np.ones(c), size=(n_members, n))
    votes = mp.argmax(-1)
    pairs = list(itertools.combinations(range(n_members), 2))
    brute = np.mean([np.mean([votes[a, i] != votes[b, i] for a, b in pairs]) for i in range(n)])
    assert m.disagreement(mp) == pytest.approx(brute, abs=1e-12)


def test_diversity_needs_two_members():
    for metric in (m.disagreement, m.variation_ratio):
        with pytest.raises(m.UndefinedMetricError) as ei:
            metric(np.full((1, 3, 2), 0.5))
        assert str(ei.value) == "disagreement needs at least 2 members"


# --- conformal -------------------------------------------------------------------------------------------------

def test_conformal_quantile_is_the_finite_sample_order_statistic():
    s = np.array([0.5, 0.1, 0.9, 0.3])  # sorted 0.1 0.3 0.5 0.9
    assert conformal_quantile(s, 0.4) == 0.5  # ceil(5 * 0.6) = 3rd smallest
    assert conformal_quantile(s, 0.1) == float("inf")  # ceil(5 * 0.9) = 5 > 4


def test_aps_and_raps_scores_by_hand():
    p = np.array([[0.5, 0.2, 0.3]])
    close = np.testing.assert_allclose
    close(conformal_scores(p, "thr"), [[0.5, 0.8, 0.7]], atol=1e-15)
    close(conformal_scores(p, "aps"), [[0.5, 1.0, 0.8]], atol=1e-15)
    # ranks 1, 3, 2; penalty 0.1 * (rank - 1)+
    close(conformal_scores(p, "raps"), [[0.5, 1.2, 0.9]], atol=1e-15)
    close(conformal_scores(p, "aps", noise=np.array([0.5])), [[0.25, 0.9, 0.65]], atol=1e-15)


@pytest.mark.parametrize("method", ["thr", "aps", "raps"])
def test_conformal_coverage_guarantee(method):
    """Exchangeable, calibrated data: mean held-out coverage within [1-α, 1-α+1/(n_cal+1)] up to Monte Carlo
    error (sd of a fold's coverage ≈ sqrt(α(1-α)/n)), over many independent problems."""
    alpha, n, covs = 0.1, 400, []
    for seed in range(30):
        rng = np.random.default_rng(seed)
        p = rng.dirichlet(np.ones(8) * 0.5, size=n)
        y = np.array([rng.choice(8, p=row) for row in p])
        r = m.cross_validated_conformal(p, y, method=method, alpha=alpha, seed=seed, randomized=True)
        covs.append(r.coverage)
        assert len(r.coverages) == 10 and 1 <= r.set_size <= 8
    mean = float(np.mean(covs))
    se = math.sqrt(alpha * (1 - alpha) / (n / 2)) / math.sqrt(30)
    assert 1 - alpha - 3 * se <= mean <= 1 - alpha + 1 / (n / 2 + 1) + 3 * se


def test_conformal_sets_shrink_with_a_sharper_model(oracle):
    members, labels, sharp, _ = oracle
    blurred = m.cross_validated_conformal(members.mean(0), labels, method="aps", alpha=0.1)
    sharper = m.cross_validated_conformal(sharp, labels, method="aps", alpha=0.1)
    assert sharper.set_size < blurred.set_size


# --- in the report ---------------------------------------------------------------------------------------------

def test_report_section_equals_the_public_functions(oracle):
    from ubench.metrics.report_sections import SplitAccumulator, peer_section, split_arrays

    members, labels, _, _ = oracle
    arrays = split_arrays(members)
    sec = peer_section(arrays, labels, conformal_method="raps", conformal_alpha=0.2, repeats=3, seed=7)
    p = members.mean(0)
    assert sec["augrc"] == pytest.approx(m.generalized_risk_coverage_auc(p, labels), rel=1e-12)
    assert sec["cov_at_5_risk"] == m.coverage_at_risk(p, labels)
    assert sec["risk_at_80_cov"] == m.risk_at_coverage(p, labels)
    assert sec["smooth_ece"] == pytest.approx(m.smooth_ece(p, labels), rel=1e-12)
    assert sec["disagreement"] == pytest.approx(m.disagreement(members), rel=1e-12)
    assert sec["variation_ratio"] == pytest.approx(m.variation_ratio(members), rel=1e-12)
    cp = m.cross_validated_conformal(p, labels, method="raps", alpha=0.2, n_repeats=3, seed=7)
    assert (sec["conformal_coverage"], sec["conformal_set_size"]) == (cp.coverage, cp.set_size)
    # The member-at-a-time path (memory N x C whatever M) gives the same vote diversity.
    acc = SplitAccumulator(*members.shape, dtype=members.dtype)
    for start in range(0, members.shape[1], 250):
        for j in range(members.shape[0]):
            acc.add_member_rows(start, j, members[j, start : start + 250])
    streamed = acc.result()
    np.testing.assert_array_equal(streamed.disagreement, arrays.disagreement)
    np.testing.assert_array_equal(streamed.variation_ratio, arrays.variation_ratio)
    assert split_arrays(members[:1]).disagreement is None


# --- selective metrics by hand ------------------------------------------------------------------------------

def test_selective_metrics_by_hand_with_and_without_an_uncertainty():
    """Four samples, confidences 0.9 > 0.8 > 0.7 > 0.6, the most confident one wrong. Ranked by confidence the
    risks at k = 1..4 are 1, 1/2, 1/3, 1/4; ranked by the given uncertainty (that sample rejected first) 0, 0, 0,
    1/4. AUGRC = sum_k #errors(k) / N^2; the trapezoid rule is (sum - (first + last) / 2) / (N - 1) over
    k/N risk(k)."""
    p = np.array([[0.9, 0.1], [0.8, 0.2], [0.7, 0.3], [0.6, 0.4]])
    y = np.array([1, 0, 0, 0])
    u = np.array([0.9, 0.1, 0.2, 0.3])
    assert m.coverage_at_risk(p, y, risk=0.2) is None
    assert m.coverage_at_risk(p, y, risk=0.2, uncertainty=u) == 0.75
    assert m.risk_at_coverage(p, y, coverage=0.5) == 0.5
    assert m.risk_at_coverage(p, y, coverage=0.5, uncertainty=u) == 0.0
    assert m.generalized_risk_coverage_auc(p, y) == 4 / 16
    assert m.generalized_risk_coverage_auc(p, y, uncertainty=u) == 1 / 16
    assert m.generalized_risk_coverage_auc(p, y, uncertainty=u, integration="trapezoid") == \
        pytest.approx((0.25 - 0.125) / 3, rel=1e-15)
    y = np.array([0, 1, 0, 0])  # k/N risk(k) = 0, 1/4, 1/4, 1/4
    assert m.generalized_risk_coverage_auc(p, y, integration="trapezoid") == pytest.approx(0.625 / 3, rel=1e-15)
    assert m.generalized_risk_coverage_auc(p[:2], y[:2], integration="trapezoid") == 0.25  # (0 + 1/2) / 2
    assert np.isnan(m.generalized_risk_coverage_auc(p[:1], y[:1], integration="trapezoid"))


@pytest.mark.parametrize(("call", "message"), [
    (lambda p, y: m.risk_at_coverage(p, y, coverage=1.5), "coverage must lie in [0, 1], got 1.5"),
    (lambda p, y: m.coverage_at_risk(p, y, risk=-0.1), "risk must lie in [0, 1], got -0.1"),
    (lambda p, y: m.coverage_at_risk(p, y, risk=1.01), "risk must lie in [0, 1], got 1.01"),
    (lambda p, y: m.generalized_risk_coverage_auc(p, y, integration="simpson"),
     "integration must be one of ('riemann', 'trapezoid'), got 'simpson'"),
    (lambda p, y: m.coverage_at_risk(p, y, uncertainty=[0.1, 0.2]), "probs has 4 samples but uncertainty has 2"),
    (lambda p, y: m.risk_at_coverage(p, y, uncertainty=[0.1, np.nan, 0.2, 0.3]),
     "uncertainty must be finite; found nan at index 1"),
])
def test_selective_errors_say_what_is_wrong(call, message):
    p = np.array([[0.9, 0.1], [0.8, 0.2], [0.7, 0.3], [0.6, 0.4]])
    with pytest.raises(ValueError) as ei:
        call(p, np.array([1, 0, 0, 0]))
    assert str(ei.value) == message


def _smece_sigma_by_definition(f, y, sigma):
    """smECE_sigma as the module docstring describes relplot's discretisation, written out with a direct (not
    FFT) convolution and explicit loops: residuals f - y and unit weights split linearly between the two grid
    nodes around f on max(2000, round(20/sigma)) // 2 + 1 nodes, reflected at 0 and 1, convolved with the
    Gaussian density of width sigma sampled at the node offsets, interpolated onto max(200, round(10/sigma))
    evenly spaced points, density offset by 1e-4."""
    points = max(2000, round(20 / sigma)) // 2 + 1
    grids = np.zeros((2, points))
    for fi, ri in zip(f, f - y, strict=True):
        pos = fi * (points - 1)
        lo = min(int(pos), points - 2)
        for g, w in ((0, ri), (1, 1.0)):
            grids[g, lo] += (1.0 - (pos - lo)) * w
            grids[g, lo + 1] += (pos - lo) * w
    offsets = np.linspace(0.0, 1.0, points) - 0.5
    kernel = np.exp(-offsets**2 / (2 * sigma**2)) / (np.sqrt(2 * np.pi) * sigma)
    smoothed = []
    for g in grids:
        ext = np.concatenate([g[::-1][:-1], g, g[::-1][1:]])
        full = np.convolve(ext, kernel, mode="valid")  # length 2 points - 1, centred on the middle copy
        smoothed.append(full[points // 2: points // 2 + points])
    at = np.linspace(0.0, 1.0, max(round(10 / sigma), 200))
    nodes = np.linspace(0.0, 1.0, points)
    r, d = (np.interp(at, nodes, s) for s in smoothed)
    d = d + 1e-4
    return float(np.sum(np.abs(r / d) * d) / np.sum(d))


@pytest.mark.parametrize("sigma", [0.05, 0.004])
def test_smooth_ece_at_equals_the_definition_at_the_ends_of_the_unit_interval(sigma):
    """Confidences in the first and last grid cells (top-1 of 3000 near-uniform classes below 1/1000, and near 1)
    and a bandwidth below 0.01 (a finer grid): smooth_ece_at equals the discretisation written out here."""
    rng = np.random.default_rng(4)
    flat = rng.dirichlet(np.full(3000, 50.0), 40)  # top-1 about 1/2400: inside the first cell (1/1000)
    sharp = np.full((40, 3000), 1e-9)
    sharp[:, 0] = 1.0 - 2999e-9
    p = np.concatenate([flat, sharp])
    y = rng.integers(0, 3000, 80)
    y[40:60] = 0
    f, hit = p.max(axis=1), (p.argmax(axis=1) == y).astype(float)
    assert f[:40].max() < 1e-3 and f[40:].min() > 1 - 1e-3
    assert m.smooth_ece_at(p, y, sigma=sigma) == pytest.approx(_smece_sigma_by_definition(f, hit, sigma), rel=1e-9)


def test_smooth_ece_is_ten_bisection_steps_on_the_unit_interval():
    """sigma* = the upper end after ten halvings of (0, 1] keeping smECE_sigma >= sigma on the lower side (relplot's
    search, written out with the definition above), and smooth_ece = smECE at sigma*; datasets whose last step
    moves the upper end (a search one step coarser ends elsewhere)."""
    rng = np.random.default_rng(5)
    moved_hi = 0
    for _ in range(4):
        n = 300
        conf = rng.uniform(0.3, 1.0, n)
        hit = (rng.random(n) < np.clip(conf + rng.uniform(-0.3, 0.1), 0, 1)).astype(float)
        p = np.stack([conf, 1 - conf], -1)
        y = np.where(hit == 1, p.argmax(axis=1), 1 - p.argmax(axis=1))
        f, correct = p.max(axis=1), (p.argmax(axis=1) == y).astype(float)
        hi, lo = 1.0, 0.0
        for step in range(10):
            mid = (hi + lo) / 2
            if mid < _smece_sigma_by_definition(f, correct, mid):
                lo = mid
            else:
                hi = mid
                moved_hi += step == 9
        want = _smece_sigma_by_definition(f, correct, hi)
        assert m.smooth_ece(p, y) == pytest.approx(want, rel=1e-9)
    assert moved_hi >= 1
