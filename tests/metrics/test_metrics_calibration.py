# SPDX-License-Identifier: MIT
"""ECE family, TACE, UCE and reliability bins: edge conventions and hand computations from the papers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracles import entropy
from oracles import hand_bins as _hand_bins
from oracles import hand_error as _hand_error
from oracles import tace as _tace_reference
from oracles import top1 as _top1
from strategies import probs_and_labels, softmax64

from ubench import metrics as M


def _binary(conf, correct):
    """Two-class probs whose top-1 confidence is ``conf`` (>= 0.5) and labels making it (in)correct."""
    conf = np.asarray(conf, dtype=np.float64)
    p = np.stack([conf, 1 - conf], axis=1)
    y = np.where(np.asarray(correct, dtype=bool), 0, 1)
    return p, y


def _normalized_entropy(p):
    return entropy(p) / np.log(p.shape[1])


def _oracles(p, y, n_bins):
    """ECE, MCE, classwise ECE, UCE and classwise UCE from the hand bins."""
    conf, hit = _top1(p, y)
    bins = _hand_bins(conf, hit, n_bins)
    u = _normalized_entropy(p)
    err = 1.0 - hit
    c = p.shape[1]
    cw = sum(_hand_error(p[:, k].astype(np.float64), (y == k).astype(float), n_bins) for k in range(c)) / c
    cw_uce = np.mean([_hand_error(u[y == k], err[y == k], n_bins) for k in np.unique(y)])
    return {"ece": _hand_error(conf, hit, n_bins), "mce": max(abs(h - v) for k, v, h in bins if k),
            "classwise_ece": cw, "uce": _hand_error(u, err, n_bins), "classwise_uce": cw_uce}


def test_ece_hand_computation():
    """Two bins hit: (0.6, 0.667] with acc 1/2 and (0.933, 1] with acc 1: ECE = 2/4*|0.5-0.65| + 2/4*|1-0.95|."""
    p, y = _binary([0.62, 0.66, 0.94, 0.96], [1, 0, 1, 1])
    expected = 0.5 * abs(0.5 - 0.64) + 0.5 * abs(1.0 - 0.95)
    assert M.expected_calibration_error(p, y) == pytest.approx(expected)
    assert M.max_calibration_error(p, y) == pytest.approx(0.14)


def test_bin_edges_lo_open_hi_closed():
    """A confidence exactly on an edge belongs to the bin it closes: 0.5 is in (0.25, 0.5], not (0.5, 0.75]."""
    p, y = _binary([0.5, 0.75, 1.0], [1, 1, 1])
    rb = M.reliability_bins(p, y, n_bins=4)
    assert rb.counts.tolist() == [0, 1, 1, 1]
    np.testing.assert_allclose(rb.edges, [0, 0.25, 0.5, 0.75, 1.0])
    assert rb.mean_confidence.tolist() == [0.0, 0.5, 0.75, 1.0]


def test_confidence_one_in_last_bin_and_zero_in_first():
    """Exactly 1.0 lands in the last bin (no phantom extra bin); values of 0 land in the first (classwise ECE)."""
    p = softmax64(np.array([[200.0, 0.0], [0.0, 200.0]])).astype(np.float32)  # saturates to exactly 1.0
    y = np.array([0, 1])
    rb = M.reliability_bins(p, y)
    assert rb.counts.shape == (15,) and rb.counts[-1] == 2 and rb.counts.sum() == 2
    assert M.expected_calibration_error(p, y) == 0.0
    assert M.classwise_calibration_error(p, y) == 0.0


def test_reliability_bins_equal_hand_bins_and_never_nan():
    """Counts, mean confidence and accuracy per bin equal a loop over the bins; empty bins hold 0.0, never NaN."""
    rng = np.random.default_rng(3)
    p = softmax64(rng.normal(scale=2, size=(300, 5)))
    y = rng.integers(0, 5, 300)
    rb = M.reliability_bins(p, y)
    conf, hit = _top1(p, y)
    k, v, h = map(np.array, zip(*_hand_bins(conf, hit, 15)))
    assert rb.counts.tolist() == k.tolist() and (k == 0).any()  # some bins are empty
    np.testing.assert_allclose(rb.mean_confidence, v, rtol=1e-13, atol=0)
    np.testing.assert_allclose(rb.accuracy, h, rtol=1e-13, atol=0)
    assert not np.isnan(rb.mean_confidence).any() and not np.isnan(rb.accuracy).any()
    assert M.expected_calibration_error(p, y) == pytest.approx(_hand_error(conf, hit, 15), rel=1e-12)
    assert rb.nonempty.tolist() == (k > 0).tolist()


@given(data=probs_and_labels(), n_bins=st.sampled_from([1, 2, 3, 10, 15]))
def test_equal_width_metrics_match_hand_bins(data, n_bins):
    """For any probs and labels: ECE, MCE, classwise ECE (confidence binned) and UCE, classwise UCE (normalized
    entropy binned) equal the same sums over a loop of hand-made (lo, hi] bins, and ECE <= MCE."""
    p, y = data
    expected = _oracles(p, y, n_bins)
    got = {"ece": M.expected_calibration_error(p, y, n_bins=n_bins), "mce": M.max_calibration_error(p, y, n_bins=n_bins),
           "classwise_ece": M.classwise_calibration_error(p, y, n_bins=n_bins)}
    if p.dtype == np.float64:  # float32 entropies (float32 logs) may sit an ulp across an edge from entr's
        got.update(uce=M.uce_error(p, y, n_bins=n_bins), classwise_uce=M.classwise_uce_error(p, y, n_bins=n_bins))
    for name, value in got.items():
        assert value == pytest.approx(expected[name], abs=1e-12), name
    assert got["ece"] <= got["mce"] + 1e-12


def test_fewer_samples_than_bins():
    """One sample, 15 bins: ECE is |acc - conf| of that sample; adaptive ECE and TACE fall back to one bin.

    TACE by hand: class 0 holds 0.7 with label 0 (|0 - 0.7|), class 1 holds 0.3 with label 1 (|1 - 0.3|);
    (0.7 + 0.7) / (N C) = 1.4 / 2."""
    p, y = _binary([0.7], [0])
    assert M.expected_calibration_error(p, y) == pytest.approx(0.7)
    assert M.adaptive_calibration_error(p, y) == pytest.approx(0.7)
    assert M.tace_error(p, y) == pytest.approx(0.7)


def test_tace_hand_example():
    """3 samples, 2 classes, 1 bin, threshold 0.25: by hand from Ashukha et al. Eq. (2) (code normalisation)."""
    p = np.array([[0.9, 0.1], [0.6, 0.4], [0.2, 0.8]])
    y = np.array([0, 0, 1])
    # class 0: values > 0.25 are {0.9, 0.6}, both labelled 0: |1 - 0.75| * 2 / (3 * 2)
    # class 1: values > 0.25 are {0.4, 0.8}, labels {0, 1}: |0.5 - 0.6| * 2 / (3 * 2)
    expected = 0.25 * 2 / 6 + 0.1 * 2 / 6
    assert M.tace_error(p, y, n_bins=1, threshold=0.25) == pytest.approx(expected)
    assert _tace_reference(p, y, 1, 0.25) == pytest.approx(expected)


@pytest.mark.parametrize("n,c,n_bins,seed", [(200, 4, 15, 0), (37, 10, 15, 1), (1000, 3, 7, 2), (10, 5, 15, 3)])
def test_tace_matches_formula_transcription(n, c, n_bins, seed):
    """TACE equals a loop-by-loop transcription of the formula, including classes with fewer points than bins."""
    rng = np.random.default_rng(seed)
    p = softmax64(rng.normal(scale=3, size=(n, c)))
    y = rng.integers(0, c, n)
    assert M.tace_error(p, y, n_bins=n_bins) == pytest.approx(_tace_reference(p, y, n_bins, 1e-3), abs=1e-14)
    assert M.tace_error(p, y, n_bins=n_bins, threshold=0.0) == pytest.approx(
        _tace_reference(p, y, n_bins, 0.0), abs=1e-14)


@pytest.mark.parametrize("block_entries,group_entries", [(7, 5), (64, 40), (1 << 16, 1 << 21)])
def test_tace_gathered_in_blocks_and_class_groups_matches_the_transcription(monkeypatch, block_entries,
                                                                            group_entries):
    """TACE's entries are gathered row block by row block straight into each class's run, a group of classes at
    a time: with blocks of a few rows (some holding no entry above the threshold), a class group per class or
    two, or one block and one group, it equals the formula's transcription and is the same float bit for bit."""
    from ubench.metrics import calibration
    from ubench.metrics.row_ranking import row_blocks

    rng = np.random.default_rng(11)
    n, c = 500, 9
    p = softmax64(rng.normal(scale=4, size=(n, c)))
    y = rng.integers(0, c, n)
    whole = M.tace_error(p, y, n_bins=6)
    monkeypatch.setattr(calibration, "row_blocks", lambda rows, cols: row_blocks(rows, cols, block_entries))
    monkeypatch.setattr(calibration, "_TACE_GROUP_ENTRIES", group_entries)
    groups = calibration._class_groups((p > 1e-3).sum(0), group_entries)
    assert len(groups) == (c if group_entries < n else 1)  # a group per class when the limit is below a column
    got = M.tace_error(p, y, n_bins=6)
    assert got == whole
    assert got == pytest.approx(_tace_reference(p, y, 6, 1e-3), abs=1e-14)


def test_tace_class_with_no_points_above_threshold_adds_zero():
    """A class whose probabilities all lie at or below the threshold contributes 0 (not NaN)."""
    p = np.array([[0.9995, 0.0005], [0.9995, 0.0005]])
    y = np.array([0, 0])
    v = M.tace_error(p, y)
    assert v == pytest.approx(abs(1 - 0.9995) * 2 / 4)


def test_adaptive_ece_equal_mass_hand_example():
    """4 samples, 2 equal-count bins: {0.55 wrong, 0.6 right} and {0.8 right, 0.9 right}."""
    p, y = _binary([0.9, 0.55, 0.8, 0.6], [1, 0, 1, 1])
    expected = (abs(1 - (0.55 + 0.6)) + abs(2 - (0.8 + 0.9))) / 4
    assert M.adaptive_calibration_error(p, y, n_bins=2) == pytest.approx(expected)


def test_uce_hand_example():
    """UCE by Laves et al. Eq. (15)-(17): bins on normalized entropy, error rate against mean uncertainty."""
    p = np.array([[0.5, 0.5], [1.0, 0.0], [0.9, 0.1], [0.9, 0.1]])
    y = np.array([1, 0, 0, 1])
    h = -(0.9 * np.log(0.9) + 0.1 * np.log(0.1)) / np.log(2)  # 0.469 -> bin (0.4667, 0.5333]
    # bins: {1.0 -> err 1 (tie goes to class 0, label 1)}, {0 -> err 0}, {h, h -> err 1/2}
    expected = (abs(1 - 1.0) + abs(0 - 0.0) + 2 * abs(0.5 - h)) / 4
    assert M.uce_error(p, y) == pytest.approx(expected)
    # classwise: class 0 holds samples 1, 2 (errors 0, 0; uncert 0, h); class 1 holds 0, 3 (errors 1, 1; 1, h)
    cls0 = (abs(0 - 0) + abs(0 - h)) / 2
    cls1 = (abs(1 - 1) + abs(1 - h)) / 2
    assert M.classwise_uce_error(p, y) == pytest.approx((cls0 + cls1) / 2)


def test_classwise_uce_averages_over_present_classes_only():
    """A class absent from labels neither counts as 0 nor makes cUCE undefined."""
    p = np.array([[0.7, 0.2, 0.1], [0.6, 0.3, 0.1]])
    y = np.array([0, 0])
    assert M.classwise_uce_error(p, y) == pytest.approx(M.uce_error(p, y))


def test_single_class_present():
    """All labels one class: every calibration metric is defined and equals its hand computation."""
    rng = np.random.default_rng(5)
    p = softmax64(rng.normal(size=(30, 4)))
    y = np.zeros(30, dtype=int)
    expected = _oracles(p, y, 15)
    assert M.expected_calibration_error(p, y) == pytest.approx(expected["ece"], abs=1e-14)
    assert M.max_calibration_error(p, y) == pytest.approx(expected["mce"], abs=1e-14)
    assert M.classwise_calibration_error(p, y) == pytest.approx(expected["classwise_ece"], abs=1e-14)
    assert M.uce_error(p, y) == pytest.approx(expected["uce"], abs=1e-14)
    assert M.classwise_uce_error(p, y) == pytest.approx(expected["uce"], abs=1e-14)  # one class: cUCE = UCE
    assert M.tace_error(p, y) == pytest.approx(_tace_reference(p, y, 15, 1e-3), abs=1e-14)
    conf, hit = _top1(p, y)
    order = np.lexsort((hit, conf))
    size = 30 // 15
    adaptive = sum(abs(hit[order][a:a + size].sum() - conf[order][a:a + size].sum()) for a in range(0, 30, size))
    assert M.adaptive_calibration_error(p, y) == pytest.approx(adaptive / 30, abs=1e-14)


def test_uniform_predictions():
    """Uniform predictions: confidence 1/C everywhere; ECE = |acc - 1/C|, normalized entropy 1, so UCE = |err - 1|."""
    c = 4
    p = np.full((8, c), 1 / c)
    y = np.array([0, 0, 1, 2, 3, 0, 1, 2])  # arg max ties go to class 0: accuracy 3/8
    assert M.expected_calibration_error(p, y) == pytest.approx(abs(3 / 8 - 1 / c))
    assert M.uce_error(p, y) == pytest.approx(abs(5 / 8 - 1.0))


def test_ece_zero_for_perfectly_calibrated_bins():
    """4 bins. (0.5, 0.75] holds ten 0.6 (all right) and ten 0.7 (3 right): mean confidence 0.65 = accuracy
    13/20; (0.75, 1] holds five 0.8 with 4 right. ECE = MCE = 0, yet 15 bins split 0.6 from 0.7 and see the gaps
    (10/25 * |1 - 0.6| + 10/25 * |0.3 - 0.7| = 0.32)."""
    p, y = _binary([0.6] * 10 + [0.7] * 10 + [0.8] * 5, [1] * 10 + [1] * 3 + [0] * 7 + [1] * 4 + [0])
    assert M.expected_calibration_error(p, y, n_bins=4) == pytest.approx(0.0, abs=1e-14)
    assert M.max_calibration_error(p, y, n_bins=4) == pytest.approx(0.0, abs=1e-14)
    assert M.expected_calibration_error(p, y, n_bins=15) == pytest.approx(0.32, abs=1e-14)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_n_bins(bad):
    p, y = _binary([0.7], [0])
    with pytest.raises(ValueError, match="n_bins"):
        M.expected_calibration_error(p, y, n_bins=bad)


@pytest.mark.parametrize("n,n_bins,seed", [(100, 15, 0), (47, 4, 1), (300, 7, 2), (9, 15, 3)])
def test_tace_and_adaptive_ece_with_heavy_ties_match_lexsort_reference(n, n_bins, seed):
    """Rows drawn from 3 templates tie across bin boundaries; the counting kernel equals a (value, hit) lexsort."""
    rng = np.random.default_rng(seed)
    templates = softmax64(rng.normal(scale=2, size=(3, 5)))
    p = templates[rng.integers(0, 3, n)]
    y = rng.integers(0, 5, n)
    assert M.tace_error(p, y, n_bins=n_bins) == pytest.approx(_tace_reference(p, y, n_bins, 1e-3), abs=1e-14)
    conf = p.max(1)
    hits = (p.argmax(1) == y).astype(float)
    order = np.lexsort((hits, conf))
    size = n // n_bins
    bounds = [0, n] if size == 0 else [i * size for i in range(n_bins)] + [n]
    expected = sum(abs(hits[order][a:b].sum() - conf[order][a:b].sum()) for a, b in zip(bounds[:-1], bounds[1:]))
    assert M.adaptive_calibration_error(p, y, n_bins=n_bins) == pytest.approx(expected / n, abs=1e-14)


def _equal_mass_reference(conf, hits, n_bins, layout):
    """Brute force: lexsort by (confidence, hit), cut into equal-count bins (np.array_split for "balanced")."""
    order = np.lexsort((hits, conf))
    n = conf.shape[0]
    if layout == "balanced":
        parts = [p for p in np.array_split(order, n_bins) if p.size]
    else:
        size = n // n_bins
        bounds = [0, n] if size == 0 else [i * size for i in range(n_bins)] + [n]
        parts = [order[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    return sum(abs(hits[p].sum() - conf[p].astype(np.float64).sum()) for p in parts) / n


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["remainder_last", "balanced"])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 400), n_bins=st.integers(1, 20),
       n_templates=st.integers(1, 4))
def test_adaptive_ece_tie_heavy_matches_lexsort_brute_force(dtype, layout, seed, n, n_bins, n_templates):
    """Rows repeat a few templates, so long runs of tied confidences straddle the bin cuts, right and wrong
    mixed; the sorted-key kernel must equal the (value, hit) lexsort definition for both layouts and dtypes."""
    rng = np.random.default_rng(seed)
    templates = softmax64(rng.normal(scale=2, size=(n_templates, 4))).astype(dtype)
    p = templates[rng.integers(0, n_templates, n)]
    y = rng.integers(0, 4, n)
    conf = p.max(1)
    hits = (p.argmax(1) == y).astype(np.float64)
    got = M.adaptive_calibration_error(p, y, n_bins=n_bins, layout=layout)
    assert got == pytest.approx(_equal_mass_reference(conf, hits, n_bins, layout), abs=1e-14)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_equal_count_gaps_sign_handling(dtype):
    """-0.0 ties with +0.0 in the integer-key sort, and negative values take the counting path; both equal the
    lexsort definition."""
    from ubench.metrics.calibration import _equal_count_abs_gaps

    rng = np.random.default_rng(5)
    for values in (np.array([0.0, -0.0, 0.0, -0.0, 0.5, 0.5, 0.25, 0.0], dtype=dtype),
                   rng.choice(np.array([-0.5, -0.0, 0.0, 0.25, 0.75], dtype=dtype), 300)):
        hits = rng.integers(0, 2, values.shape[0]).astype(np.float64)
        for layout in ("remainder_last", "balanced"):
            got = _equal_count_abs_gaps(values, hits, 4, layout) / values.shape[0]
            assert got == pytest.approx(_equal_mass_reference(values, hits, 4, layout), abs=1e-14)


@pytest.mark.parametrize(("counts", "limit", "want"), [
    ([3, 4, 2, 5, 1], 7, [(0, 2), (2, 4), (4, 5)]),   # a group may reach the limit exactly (3 + 4 = 7)
    ([10, 1, 6], 7, [(0, 1), (1, 3)]),                 # one class over the limit is a group of its own
    ([0, 0, 8, 0], 7, [(0, 3), (3, 4)]),               # empty classes join the group before the big one
    ([2, 2, 2, 2], 100, [(0, 4)]),
])
def test_tace_class_groups_by_hand(counts, limit, want):
    """TACE gathers consecutive classes whose entry counts sum to at most the limit."""
    from ubench.metrics.calibration import _class_groups

    assert _class_groups(np.array(counts), limit) == want


def test_tace_with_more_classes_than_a_uint16_holds():
    """70,000 classes, a few entries above the threshold: class 65,540 and class 4 (equal modulo 2**16) are kept
    apart, as the transcription keeps them (class keys narrower than the class count would merge them)."""
    c = 70_000
    p = np.full((3, c), 1e-9)
    p[0, [65_540, 4]] = [0.3, 0.2]
    p[1, [4, 65_540]] = [0.5, 0.1]
    p[2, [70, 65_540]] = [0.4, 0.05]
    p /= p.sum(axis=1, keepdims=True)
    y = np.array([65_540, 4, 70])
    assert M.tace_error(p, y, n_bins=2) == pytest.approx(_tace_reference(p, y, 2, 1e-3), abs=1e-14)
