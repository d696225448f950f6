# SPDX-License-Identifier: MIT
"""Every binned quantity on data that hits its bin edges (issue #27 item 1).

Random floats almost never land on an edge, so a bin convention can flip unnoticed. Here the probabilities sit
exactly on the equal-width edges ``np.linspace(0, 1, M + 1)``, a float step beside them, on the TACE threshold,
and tie across rows (``strategies.edge_probs_and_labels``); each quantity is compared with a hand computation of
the convention its docstring states: bins ``(lo, hi]`` with 0 in the first bin (ECE, MCE, reliability bins,
classwise ECE, UCE, classwise UCE, the histogram calibrator's fit *and* apply, BBQ's bins, the shift paper's
binned ECE), TACE keeping only probabilities strictly above its threshold, equal-count bins ordered by (value,
hit), and the confidence curves counting confidences ``>=`` each threshold.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracles import entropy, hand_bins, hand_error, tace, top1
from strategies import bin_edges, edge_probs_and_labels

from ubench import metrics as M
from ubench.metrics.calibrators import OVR_EPS, fit_calibrator
from ubench.metrics.shift_paper import binned_calibration_error, confidence_curves, top_k_calibration_error

N_BINS = st.sampled_from([1, 2, 3, 4, 5, 10, 15])


def _in_bin(values, lo, hi, first):
    """(lo, hi], and lo itself for the first bin: the stated convention, written out."""
    return ((values > lo) & (values <= hi)) | ((values == lo) if first else False)


@given(data=st.data(), n_bins=N_BINS)
def test_equal_width_metrics_on_the_edges(data, n_bins):
    """For probabilities on, and a float step beside, every edge: ECE, MCE, the reliability bins, classwise ECE
    and (float64) UCE and classwise UCE equal the loops over hand-made ``(lo, hi]`` bins."""
    p, y = data.draw(edge_probs_and_labels(n_bins))
    conf, hit = top1(p, y)
    bins = hand_bins(conf, hit, n_bins)
    rb = M.reliability_bins(p, y, n_bins=n_bins)
    assert rb.counts.tolist() == [k for k, _, _ in bins]
    np.testing.assert_allclose(rb.mean_confidence, [v for _, v, _ in bins], rtol=1e-14, atol=0)
    np.testing.assert_allclose(rb.accuracy, [h for _, _, h in bins], rtol=1e-14, atol=0)
    assert M.expected_calibration_error(p, y, n_bins=n_bins) == pytest.approx(hand_error(conf, hit, n_bins),
                                                                             abs=1e-14)
    assert M.max_calibration_error(p, y, n_bins=n_bins) == pytest.approx(
        max(abs(h - v) for k, v, h in bins if k), abs=1e-14)
    c = p.shape[1]
    cw = sum(hand_error(p[:, k].astype(np.float64), (y == k).astype(float), n_bins) for k in range(c)) / c
    assert M.classwise_calibration_error(p, y, n_bins=n_bins) == pytest.approx(cw, abs=1e-14)
    if p.dtype == np.float64:
        u = entropy(p) / np.log(c)
        err = 1.0 - hit
        assert M.uce_error(p, y, n_bins=n_bins) == pytest.approx(hand_error(u, err, n_bins), abs=1e-14)
        cw_uce = np.mean([hand_error(u[y == k], err[y == k], n_bins) for k in np.unique(y)])
        assert M.classwise_uce_error(p, y, n_bins=n_bins) == pytest.approx(cw_uce, abs=1e-14)


def test_classwise_ece_edge_values_by_hand():
    """Three classes (with two, (lo, hi] and [lo, hi) give the same classwise ECE: class 1 mirrors class 0), four
    bins. Class 0 holds 0.25 (label 2) in [0, 0.25], 0.5 (label 0) and 0.5 - ulp (label 1) in (0.25, 0.5]; class
    1 holds 0.25 and 0 in the first bin, 0.5 (its label) in the second; class 2 holds 0.25 and d = 2^-54 in the
    first, 0.75 (its label) in the third."""
    below = np.nextafter(0.5, 0.0)
    d = 1.0 - 0.5 - below
    p = np.array([[0.5, 0.25, 0.25], [below, 0.5, d], [0.25, 0.0, 0.75]])
    y = np.array([0, 1, 2])
    cls0 = abs(0 - 0.25) + abs(1 - (0.5 + below))
    cls1 = abs(0 - (0.25 + 0.0)) + abs(1 - 0.5)
    cls2 = abs(0 - (0.25 + d)) + abs(1 - 0.75)
    assert M.classwise_calibration_error(p, y, n_bins=4) == pytest.approx((cls0 + cls1 + cls2) / 9, abs=1e-15)


def test_edge_values_by_hand():
    """Four bins, confidences on the edges 0.5, 0.75, 1 and one float above 0.5: (0.25, 0.5] holds 0.5 only."""
    conf = np.array([0.5, np.nextafter(0.5, 1.0), 0.75, 1.0])
    p = np.stack([conf, 1.0 - conf], axis=1)
    y = np.array([1, 0, 0, 0])  # 0.5 ties: argmax picks class 0, so the first row is wrong
    rb = M.reliability_bins(p, y, n_bins=4)
    assert rb.counts.tolist() == [0, 1, 2, 1]
    assert rb.accuracy.tolist() == [0.0, 0.0, 1.0, 1.0]
    # classwise: class 1 holds 0.5, 0.5-ulp, 0.25, 0 -> bins 1, 1, 0, 0 (0 joins the first bin)
    cls1 = (abs(0 - 0.25) + abs(1 - 0.5 - (1 - np.nextafter(0.5, 1.0)))) / 4
    cls0 = (abs(0 - 0.5) + abs(2 - np.nextafter(0.5, 1.0) - 0.75) + abs(1 - 1.0)) / 4
    assert M.classwise_calibration_error(p, y, n_bins=4) == pytest.approx((cls0 + cls1) / 2, abs=1e-15)


@given(data=st.data(), n_bins=N_BINS, threshold=st.sampled_from([1e-3, 0.0, 0.25, 0.5]))
def test_tace_and_adaptive_ece_on_the_edges_and_the_threshold(data, n_bins, threshold):
    """With probabilities exactly on the threshold (and a float either side) and tied across rows: TACE equals the
    loop transcription (values strictly above the threshold, sorted by (value, hit), equal-count runs, the last
    takes the remainder), and the equal-mass ECE equals a (value, hit) lexsort cut into the same runs."""
    p, y = data.draw(edge_probs_and_labels(n_bins, extra=(threshold,)))
    assert M.tace_error(p, y, n_bins=n_bins, threshold=threshold) == pytest.approx(
        tace(p, y, n_bins, threshold), abs=1e-14)
    conf, hit = top1(p, y)
    order = np.lexsort((hit, conf))
    size = len(y) // n_bins
    cuts = [0, len(y)] if size == 0 else [i * size for i in range(n_bins)] + [len(y)]
    expected = sum(abs(hit[order][a:b].sum() - conf[order][a:b].sum()) for a, b in zip(cuts[:-1], cuts[1:]))
    assert M.adaptive_calibration_error(p, y, n_bins=n_bins) == pytest.approx(expected / len(y), abs=1e-14)


def test_tace_drops_probabilities_equal_to_the_threshold_by_hand():
    """threshold 0.25, one bin: class 1's 0.25 is dropped (not > 0.25), its 0.75 kept (label 1: |1 - 0.75|);
    class 0 keeps 0.75 (label 0) and 0.75 (label 1): |1/2 - 0.75| * 2. TACE = (0.25 + 0.5) / (N C)."""
    p = np.array([[0.75, 0.25], [0.25, 0.75]])
    y = np.array([0, 1])
    # class 0 holds 0.75 (right) and 0.25 (dropped); class 1 holds 0.25 (dropped) and 0.75 (right)
    assert M.tace_error(p, y, n_bins=1, threshold=0.25) == pytest.approx((0.25 + 0.25) / 4, abs=1e-15)
    # one float below the threshold keeps both values of each class
    both = (abs(1 - (0.75 + 0.25)) + abs(1 - (0.25 + 0.75))) / 4
    assert M.tace_error(p, y, n_bins=1, threshold=np.nextafter(0.25, 0.0)) == pytest.approx(both, abs=1e-15)


def _hand_histogram(train_p, train_y, test_p, n_bins):
    """The histogram calibrator by hand: per class, the share of positives among the training values in each
    ``(lo, hi]`` bin (the bin centre when empty), looked up with the same bins, then renormalised as
    torch-uncertainty does (divide by the row sum + 1e-12, clip to [1e-6, 1 - 1e-6], divide by the sum)."""
    e = bin_edges(n_bins)
    n, c = test_p.shape
    q = np.empty((n, c))
    for k in range(c):
        values = np.empty(n_bins)
        for b in range(n_bins):
            inside = _in_bin(train_p[:, k].astype(np.float64), e[b], e[b + 1], b == 0)
            values[b] = np.mean(train_y[inside] == k) if inside.any() else 0.5 * (e[b] + e[b + 1])
        for i in range(n):
            x = float(test_p[i, k])
            b = next(b for b in range(n_bins) if _in_bin(np.array([x]), e[b], e[b + 1], b == 0)[0])
            q[i, k] = values[b]
    q = np.clip(q / (q.sum(axis=1, keepdims=True) + 1e-12), OVR_EPS, 1 - OVR_EPS)
    return q / q.sum(axis=1, keepdims=True)


@given(data=st.data(), n_bins=st.sampled_from([2, 3, 4, 5, 10]))
def test_histogram_calibrator_fits_and_applies_with_the_same_bins(data, n_bins):
    """Fitted on probabilities on the edges and applied to others on the edges: every output equals the hand
    computation, so the fit and the lookup agree on which bin an edge value belongs to."""
    train_p, train_y = data.draw(edge_probs_and_labels(n_bins, c=st.just(3), dtype=st.just(np.float64)))
    test_p, _ = data.draw(edge_probs_and_labels(n_bins, c=st.just(3), dtype=st.just(np.float64)))
    cal = fit_calibrator("histogram", train_p, train_y, histogram_bins=n_bins)
    np.testing.assert_allclose(cal.apply(test_p), _hand_histogram(train_p, train_y, test_p, n_bins),
                               rtol=1e-13, atol=0)
    np.testing.assert_allclose(cal.apply(train_p), _hand_histogram(train_p, train_y, train_p, n_bins),
                               rtol=1e-13, atol=0)


def test_histogram_calibrator_edge_values_by_hand():
    """Two bins: the training values 0.5 (label 0) and 1.0 (label 0), 0.5 (label 1): class 0's (0, 0.5] holds the
    two 0.5 rows (one positive), (0.5, 1] the 1.0 row. A test value of 0.5 gets 1/2, one a float above gets 1."""
    p = np.array([[0.5, 0.5], [1.0, 0.0], [0.5, 0.5]])
    y = np.array([0, 0, 1])
    values = fit_calibrator("histogram", p, y, histogram_bins=2).params["values"]
    assert values[0].tolist() == [0.5, 1.0]
    assert values[1].tolist() == [1 / 3, 0.75]  # class 1: (0, 0.5] holds 0.5, 0.0, 0.5 (one positive); empty (0.5, 1]
    cal = fit_calibrator("histogram", p, y, histogram_bins=2)
    above = np.nextafter(0.5, 1.0)
    q = cal.apply(np.array([[0.5, 0.5], [above, 1.0 - above]]))
    np.testing.assert_allclose(q, [[0.5 / (0.5 + 1 / 3), (1 / 3) / (0.5 + 1 / 3)], [1 / (1 + 1 / 3), (1 / 3) / (1 + 1 / 3)]],
                               rtol=1e-11)


@given(data=st.data())
def test_bbq_bins_are_lo_open_hi_closed_in_fit_and_apply(data):
    """BBQ's equal-frequency edges sit on data values (quantiles of tied data): with ``bbq_estimate="frequency"``
    each model's bin value is the share of positives among the training values in ``(lo, hi]`` (empty: the
    midpoint), and applying it to the training data looks each value up in the same bin."""
    p, y = data.draw(edge_probs_and_labels(4, n=st.integers(8, 40), c=st.just(2), dtype=st.just(np.float64)))
    cal = fit_calibrator("bbq", p, y, bbq_estimate="frequency", bbq_max_bins=5)
    q = np.zeros(p.shape)
    for k, (models, weights) in enumerate(cal.params["models"]):
        x = p[:, k]
        for (edges, value), w in zip(models, weights):
            nb = len(edges) - 1
            hand = np.empty(nb)
            for b in range(nb):
                inside = _in_bin(x, edges[b], edges[b + 1], b == 0)
                hand[b] = np.mean(y[inside] == k) if inside.any() else 0.5 * (edges[b] + edges[b + 1])
            np.testing.assert_allclose(value, hand, rtol=1e-13, atol=0)
            idx = [next((b for b in range(nb) if _in_bin(np.array([v]), edges[b], edges[b + 1], b == 0)[0]), nb - 1)
                   for v in x]
            q[:, k] += w * hand[idx]
    q = np.clip(q / (q.sum(axis=1, keepdims=True) + 1e-12), OVR_EPS, 1 - OVR_EPS)
    np.testing.assert_allclose(cal.apply(p), q / q.sum(axis=1, keepdims=True), rtol=1e-12, atol=0)


@given(data=st.data(), n_bins=N_BINS)
def test_shift_paper_binned_ece_and_confidence_curves_on_the_edges(data, n_bins):
    """The shift paper's outputs on edge data: the top-1 ECE of ``top_k_calibration_error(k=1)`` (where no row
    ties at the top) and ``binned_calibration_error`` over the equal-width edges equal the hand ``(lo, hi]`` bins; the confidence
    curves count confidences ``>=`` each threshold (thresholds on the edges themselves)."""
    p, y = data.draw(edge_probs_and_labels(n_bins))
    conf, hit = top1(p, y)
    expected = hand_error(conf, hit, n_bins)
    top2 = np.sort(p, axis=1)[:, -2:]
    if not (top2[:, 0] == top2[:, 1]).any():  # top-k breaks ties by np.argpartition (the released code), not argmax
        assert top_k_calibration_error(p, y, k=1, n_bins=n_bins) == pytest.approx(expected, abs=1e-14)
    assert binned_calibration_error(conf, hit, bin_edges(n_bins)) == pytest.approx(expected, abs=1e-14)
    t = bin_edges(n_bins)
    curves = confidence_curves(p, y, thresholds=t)
    assert curves["count"] == [int((conf >= x).sum()) for x in t]
    assert curves["accuracy"] == [float(hit[conf >= x].mean()) if (conf >= x).any() else None for x in t]


def test_binned_ece_with_data_on_uneven_edges_by_hand():
    """Edges (0, 0.3, 0.6, 1): values 0.3 (hit) and 0.6 (miss) close their bins; 0.6 + ulp opens the last."""
    v = np.array([0.3, 0.6, np.nextafter(0.6, 1.0), 0.0])
    h = np.array([1.0, 0.0, 1.0, 0.0])
    # bins: {0.3, 0.0} (0 joins the first), {0.6}, {0.6 + ulp}
    expected = (abs(1 - 0.3) + abs(0 - 0.6) + abs(1 - np.nextafter(0.6, 1.0))) / 4
    assert binned_calibration_error(v, h, [0.0, 0.3, 0.6, 1.0]) == pytest.approx(expected, abs=1e-15)


def test_tace_compares_float32_probabilities_on_their_exact_value():
    """float32(1e-3) is 1.00000005e-3, strictly above the threshold 1e-3: kept (as every bin edge, the value is
    compared in float64; a float32 comparison would round the threshold to the same float and drop it)."""
    p = np.array([[1e-3, 1 - 1e-3]], dtype=np.float32)
    v0, v1 = (float(x) for x in p[0])
    assert v0 > 1e-3
    # class 0 keeps v0 (label 1: |0 - v0|), class 1 keeps v1 (label 1: |1 - v1|); one bin each, N C = 2
    assert M.tace_error(p, np.array([1]), n_bins=1) == pytest.approx((v0 + (1 - v1)) / 2, abs=1e-15)


@pytest.mark.parametrize("layout", ["remainder_last", "balanced"])
@given(values=st.lists(st.sampled_from([-0.5, -0.25, -0.0, 0.0, 0.25, 0.5, 0.75]), min_size=1, max_size=60),
       data=st.data(), n_bins=st.integers(1, 12))
def test_equal_count_counting_kernel_with_ties_at_every_cut(values, data, n_bins, layout):
    """The counting kernel (taken for negative values): runs of tied values straddle the equal-count cuts, hits
    and misses mixed; the per-bin gaps equal a (value, hit) lexsort cut into the same runs (misses first)."""
    from ubench.metrics.calibration import _equal_count_abs_gaps

    v = np.array(values + [-1.0])  # one negative value: the counting path
    hits = np.array(data.draw(st.lists(st.booleans(), min_size=v.size, max_size=v.size)), dtype=np.float64)
    order = np.lexsort((hits, v))
    n = v.size
    if layout == "balanced":
        parts = [p for p in np.array_split(order, n_bins) if p.size]
    else:
        size = n // n_bins
        cuts = [0, n] if size == 0 else [i * size for i in range(n_bins)] + [n]
        parts = [order[a:b] for a, b in zip(cuts[:-1], cuts[1:])]
    expected = sum(abs(hits[p].sum() - v[p].sum()) for p in parts)
    assert _equal_count_abs_gaps(v, hits, n_bins, layout) == pytest.approx(expected, abs=1e-12)


def test_classwise_ece_over_several_row_blocks():
    """Classwise ECE accumulates its bins over row blocks (2^17 entries each): on 40,000 x 8 rows (three blocks)
    it equals the hand bins over all rows at once."""
    rng = np.random.default_rng(11)
    z = rng.normal(scale=2.0, size=(40_000, 8))
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    y = rng.integers(0, 8, 40_000)
    cw = sum(hand_error(p[:, k], (y == k).astype(float), 10) for k in range(8)) / 8
    assert M.classwise_calibration_error(p, y, n_bins=10) == pytest.approx(cw, abs=1e-13)


def test_uce_and_its_error_messages_use_the_arguments_given():
    """n_bins reaches UCE and classwise UCE (two bins split normalized entropies 0.47 and 0.88 that 15 keep apart
    too, so one bin is the telling case), and a bad probs argument is named in ECE's message."""
    p = np.array([[0.9, 0.1], [0.3, 0.7], [0.1, 0.9], [0.7, 0.3]])
    y = np.array([0, 0, 1, 1])  # each class: right at entropy 0.47, wrong at 0.88
    u = entropy(p) / np.log(2)
    err = (p.argmax(1) != y).astype(float)
    for n_bins in (1, 2, 15):
        assert M.uce_error(p, y, n_bins=n_bins) == pytest.approx(hand_error(u, err, n_bins), abs=1e-15)
        cw = np.mean([hand_error(u[y == k], err[y == k], n_bins) for k in (0, 1)])
        assert M.classwise_uce_error(p, y, n_bins=n_bins) == pytest.approx(cw, abs=1e-15)
    for f in (M.uce_error, M.classwise_uce_error):
        assert f(p, y, n_bins=1) != pytest.approx(f(p, y, n_bins=15), abs=1e-6)
    with pytest.raises(ValueError, match=r"^probs rows must sum to 1"):
        M.expected_calibration_error(np.array([[0.5, 0.6]]), np.array([0]))


def test_adaptive_ece_refuses_an_unknown_layout_and_names_bad_probs():
    p, y = np.array([[0.75, 0.25]]), np.array([0])
    with pytest.raises(ValueError, match=r"^layout must be one of \('remainder_last', 'balanced'\), got 'even'$"):
        M.adaptive_calibration_error(p, y, layout="even")
    with pytest.raises(ValueError, match=r"^probs rows must sum to 1"):
        M.adaptive_calibration_error(np.array([[0.5, 0.6]]), y)
