# SPDX-License-Identifier: MIT
"""The debiased L2 calibration error (Kumar et al. 2019) against two independent oracles: a line-by-line
restatement of the authors' code path for continuous outputs (``get_equal_bins`` + ``unbiased_l2_ce`` of
p-lambda/verified_calibration, lists and loops as they wrote them), and a population with a known calibration
error, where the square of the debiased estimate is unbiased and the plug-in and the binned ECE are not."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ubench.metrics import debiased_calibration_error, expected_calibration_error


def _reference(conf, hit, num_bins=15):
    """verified_calibration's top-label path: equal bins by ``split`` of the sorted values, midpoints between
    parts as edges (deduplicated, 1.0 last), ``np.searchsorted`` into them, then per bin (mean conf - mean label)^2
    - ybar (1 - ybar) / (n_b - 1) for bins of 2 or more, weighted by n_b / N; sqrt of the max with 0."""
    sorted_probs = sorted(conf)
    part_size = int(np.ceil(len(sorted_probs) * 1.0 / num_bins))
    parts = [sorted_probs[i:i + part_size] for i in range(0, len(sorted_probs), part_size)]
    bins = []
    for i in range(len(parts) - 1):
        bins.append((parts[i][-1] + parts[i + 1][0]) / 2.0)
    bins.append(1.0)
    bins = sorted(set(bins))
    idx = np.searchsorted(bins, conf)
    total = 0.0
    for b in range(len(bins)):
        sel = idx == b
        n_b = int(sel.sum())
        if n_b < 2:
            continue
        ybar = float(np.mean(hit[sel]))
        err = (float(np.mean(conf[sel])) - ybar) ** 2 - ybar * (1.0 - ybar) / (n_b - 1.0)
        total += n_b / len(conf) * err
    return math.sqrt(max(total, 0.0))


def _two_class(conf):
    return np.stack([conf, 1.0 - conf], axis=1)


@pytest.mark.parametrize("n, n_bins, seed", [(500, 15, 0), (97, 15, 1), (1000, 10, 2), (40, 15, 3)])
def test_equals_the_authors_code_path(n, n_bins, seed):
    rng = np.random.default_rng(seed)
    conf = rng.uniform(0.5, 1.0, n)
    labels = np.where(rng.random(n) < conf - 0.08, 0, 1)  # top class is 0; overconfident by 0.08
    got = debiased_calibration_error(_two_class(conf), labels, n_bins=n_bins)
    assert got == pytest.approx(_reference(conf, (labels == 0).astype(float), n_bins), rel=1e-12, abs=1e-15)


def test_square_is_unbiased_where_ece_is_not():
    """Confidences uniform on [0.5, 1], accuracy = confidence - 0.05 everywhere: the binned top-label L2 error is
    0.05 in the population, so its square is 0.0025. Over 400 test sets of 200 samples the debiased square
    averages 0.0025 within 3 standard errors; the binned ECE averages well above 0.05, and a perfectly calibrated
    model gets debiased squares averaging 0 but an ECE far from 0."""
    rng = np.random.default_rng(7)
    sq, ece, sq0, ece0 = [], [], [], []
    for _ in range(400):
        conf = rng.uniform(0.5, 1.0, 200)
        for gap, out_sq, out_ece in ((0.05, sq, ece), (0.0, sq0, ece0)):
            labels = np.where(rng.random(200) < conf - gap, 0, 1)
            probs = _two_class(conf)
            e = debiased_calibration_error(probs, labels)
            # the square before clipping at 0: recomputed from the reference restatement's parts
            out_sq.append(_signed_square(conf, (labels == 0).astype(float)))
            out_ece.append(expected_calibration_error(probs, labels))
            assert e == pytest.approx(math.sqrt(max(out_sq[-1], 0.0)), abs=1e-12)
    for values, truth in ((sq, 0.05**2), (sq0, 0.0)):
        m, se = np.mean(values), np.std(values, ddof=1) / np.sqrt(len(values))
        assert abs(m - truth) < 3 * se, (m, truth, se)
    assert np.mean(ece) > 0.05 + 0.01 and np.mean(ece0) > 0.02


def _signed_square(conf, hit, num_bins=15):
    sorted_probs = np.sort(conf)
    size = int(np.ceil(conf.size / num_bins))
    starts = np.arange(size, conf.size, size)
    edges = np.unique(np.append((sorted_probs[starts - 1] + sorted_probs[starts]) / 2.0, 1.0))
    idx = np.searchsorted(edges, conf)
    total = 0.0
    for b in range(edges.size):
        sel = idx == b
        if sel.sum() >= 2:
            yb = hit[sel].mean()
            total += sel.sum() / conf.size * ((conf[sel].mean() - yb) ** 2 - yb * (1 - yb) / (sel.sum() - 1))
    return total


def test_fewer_samples_than_bins_and_validation():
    assert debiased_calibration_error(np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]]), np.array([0, 1, 1])) == 0.0
    with pytest.raises(ValueError, match="labels"):
        debiased_calibration_error(np.array([[0.9, 0.1]]), np.array([2]))


def test_a_bin_of_two_samples_counts_and_of_one_does_not():
    """CE^2 by hand from per-bin sums: bins of 2 and 3 samples contribute n_b / N [(c_b - y_b)^2 - y_b (1 - y_b) /
    (n_b - 1)], a bin of 1 sample contributes 0 (but counts in N)."""
    from ubench.metrics.calibration_debiased import debiased_squared_error

    count = np.array([2.0, 1.0, 3.0])
    sum_conf = np.array([1.6, 0.9, 1.5])
    sum_hit = np.array([1.0, 1.0, 3.0])
    want = (2 * ((0.8 - 0.5) ** 2 - 0.5 * 0.5 / 1) + 3 * ((0.5 - 1.0) ** 2 - 0.0)) / 6
    assert debiased_squared_error(count, sum_conf, sum_hit) == pytest.approx(want, rel=1e-14)


def test_equal_mass_edges_are_float64_and_end_at_one():
    """Float32 values (adjacent floats, whose float32 midpoint would round onto one of them): float64 midpoints,
    the last edge exactly 1.0, so every value lies in a bin (lo, hi] of its run."""
    from ubench.metrics.calibration_debiased import equal_mass_edges

    v = np.nextafter(np.float32(0.5), np.float32(1.0)) * np.ones(3, dtype=np.float32)
    values = np.concatenate([np.full(3, 0.5, dtype=np.float32), v])
    edges = equal_mass_edges(values, 2)
    assert edges.dtype == np.float64 and edges[-1] == 1.0
    assert edges[0] == (0.5 + float(v[0])) / 2 and 0.5 < edges[0] < float(v[0])
    np.testing.assert_array_equal(np.searchsorted(edges, values.astype(np.float64), side="left"), [0, 0, 0, 1, 1, 1])
