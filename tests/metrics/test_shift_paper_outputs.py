# SPDX-License-Identifier: MIT
"""The shift paper's outputs and conventions (issue #17 items 1-4).

Oracle: the formulas of Ovadia et al.'s released ``uq_benchmark_2019/metrics_lib.py``
(google-research/google-research), written out below in plain NumPy from that file's definitions (masked
accuracy above a threshold, ``np.argpartition`` top-k, histogram/digitize ECE with centres of mass,
``np.percentile`` quantile edges, ``Σ p² - 2 p_y`` Brier, the TF decomposition's broadcast), never the functions
under test.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from ubench import metrics as m
from ubench.metrics.shift_paper import (binned_calibration_error, confidence_curves, cross_validated_quantile_ece,
                                       quantile_bin_edges, top_k_accuracy, top_k_calibration_error)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "digits_deep_ensemble.h5"


def _problem(seed, n=300, c=8):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(c) * 0.6, size=n)
    y = np.array([rng.choice(c, p=row) for row in p])
    return p, y


# --- the released formulas ---------------------------------------------------------------------------------------

def _released_accuracies_at_confidences(labels, probs, thresholds):
    pred, conf = probs.argmax(-1), probs.max(-1)
    eq = pred == labels
    acc, cnt = [], []
    for t in thresholds:
        mask = conf >= t
        cnt.append(int(mask.sum()))
        acc.append(np.ma.masked_array(eq, mask=~mask).mean())
    return acc, cnt


def _released_top_k(probs, labels, k):
    onehot = np.zeros(probs.shape)
    onehot[np.arange(len(labels)), labels] = 1
    ind = np.argpartition(-probs, k - 1, axis=-1)[:, :k]
    rows = np.arange(len(labels))[:, None]
    return probs[rows, ind], onehot[rows, ind]


def _released_ece(values, truth, bins):
    values = np.where(values == 0, 1e-8, values)
    counts, edges = np.histogram(values, bins=bins, range=[0.0, 1.0])
    idx = np.digitize(values, edges, right=True)
    nb = len(edges) - 1
    total = 0.0
    for i in range(1, nb + 1):
        sel = idx == i
        if counts[i - 1] > 0 and sel.any():
            total += counts[i - 1] / counts.sum() * abs(values[sel].mean() - truth[sel].mean())
    return total


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_confidence_curves_equal_the_released_code(seed):
    p, y = _problem(seed)
    ours = confidence_curves(p, y)
    acc, cnt = _released_accuracies_at_confidences(y, p, ours["thresholds"])
    assert ours["count"] == cnt
    for a, b in zip(ours["accuracy"], acc):
        assert (a is None and b is np.ma.masked) or a == pytest.approx(float(b), abs=1e-12)
    assert ours["thresholds"] == pytest.approx(list(np.arange(20) * 0.05))
    unlabelled = confidence_curves(p)
    assert unlabelled["count"] == cnt and set(unlabelled["accuracy"]) == {None}


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), k=st.integers(1, 5))
def test_top_k_accuracy_and_ece_equal_the_released_code(seed, k):
    p, y = _problem(seed)
    vals, truth = _released_top_k(p, y, k)
    assert top_k_accuracy(p, y, k=k) == pytest.approx(truth.any(axis=-1).mean(), abs=1e-12)
    # continuous probabilities: no value on a bin edge, where the released code is inconsistent (module docstring)
    assert top_k_calibration_error(p, y, k=k) == pytest.approx(_released_ece(vals.ravel(), truth.ravel(), 15),
                                                               abs=1e-12)
    if k == 1:
        assert top_k_calibration_error(p, y, k=1) == pytest.approx(m.expected_calibration_error(p, y), abs=1e-12)


def test_a_confidence_on_a_bin_edge_stays_in_one_bin():
    """0.5 lies exactly on an edge of 4 bins: ubench counts and averages it in (0.25, 0.5]; the released code
    counts it in [0.5, 0.75) (np.histogram) but averages it into (0.25, 0.5] (np.digitize, right=True), so its
    count goes with the other sample's mean: 0.7 instead of (0.5 + 0.7) / 2."""
    v, h = np.array([0.5, 0.7]), np.array([1.0, 0.0])
    ours = binned_calibration_error(v, h, np.linspace(0, 1, 5))
    assert ours == pytest.approx((0.5 + 0.7) / 2)
    assert _released_ece(v, h, 4) == pytest.approx(0.7)


def test_quantile_edges_and_held_out_quantile_ece():
    p, y = _problem(1, n=400)
    edges = quantile_bin_edges(p, n_bins=10)
    ref = np.percentile(p.max(-1), np.linspace(0, 100, 11))
    ref[0], ref[-1] = 0, 1
    np.testing.assert_allclose(edges, ref)
    cv = cross_validated_quantile_ece(p, y, n_bins=10, n_repeats=2, seed=3)
    conf, hit = p.max(-1), (p.argmax(-1) == y).astype(float)
    by_hand = []
    for fit, held in m.cv_splits(400, n_repeats=2, seed=3):
        e = np.percentile(conf[fit], np.linspace(0, 100, 11))
        e[0], e[-1] = 0, 1
        by_hand.append(_released_ece(conf[held], hit[held], e))
    assert cv == pytest.approx(np.mean(by_hand), abs=1e-12)


def test_brier_conventions_against_the_released_code():
    p, y = _problem(2, c=3)
    released = (np.square(p).sum(-1) - 2 * p[np.arange(len(y)), y]).mean()
    assert m.brier_loss(p, y) == pytest.approx(released + 1.0, abs=1e-12)
    # Resolution: textbook (each class's own share) vs the released broadcast (the predicted class's share).
    rng = np.random.default_rng(4)
    y_imb = rng.choice(3, size=3000, p=[0.9, 0.05, 0.05])
    q = rng.dirichlet(np.ones(3), size=3000)
    d = m.brier_decomposition(q, y_imb)
    pred = q.argmax(1)
    conf = np.zeros((3, 3))
    np.add.at(conf, (pred, y_imb), 1)
    w, ybar = conf.sum(1) / conf.sum(), conf.sum(0) / conf.sum()
    cell = conf / conf.sum(1, keepdims=True)
    textbook = np.sum(w * np.sum((cell - ybar[None, :]) ** 2, axis=1))
    broadcast = np.sum(w * np.sum((ybar[:, None] - cell) ** 2, axis=1))
    assert d.resolution == pytest.approx(textbook, abs=1e-12)
    assert abs(broadcast - textbook) > 0.2 * m.brier_loss(q, y_imb)


# --- in the report -----------------------------------------------------------------------------------------------

def _score(*args):
    from ubench.cli import cli

    res = CliRunner().invoke(cli, ["score", str(EXAMPLE), "--json", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_report_carries_the_shift_papers_outputs():
    r = _score()
    for sec in [r["in_domain"]["test"], *r["shift"].values()]:
        cc = sec["confidence_curves"]
        assert len(cc["thresholds"]) == len(cc["count"]) == len(cc["accuracy"]) == 20
        for key in ("top5_accuracy", "top5_ece", "ece_quantile"):
            assert isinstance(sec[key], float)
    shift = next(iter(r["shift"].values()))
    assert sum(shift["entropy_histogram"]["counts"]) == shift["n_samples"]
    assert sum(shift["reliability"]["confidence"]["counts"]) == shift["n_samples"]
    assert set(next(iter(r["ood"].values()))["confidence_curves"]["accuracy"]) == {None}
    vals = [s["accuracy"] for s in r["shift"].values()]
    assert r["summary"]["shift_accuracy_q25"] == pytest.approx(np.percentile(vals, 25))
    assert r["summary"]["shift_accuracy_q75"] == pytest.approx(np.percentile(vals, 75))


def test_shift_temperature_scaling_fits_on_in_domain_and_applies_to_every_shift_split():
    import h5py

    r = _score("--protocol", "shift", "--shift-temperature")
    ts = r["shift_summary"]["temperature"]
    assert ts["fitted_on"] == "test" and ts["fitted_on_kind"] == "test"
    with h5py.File(EXAMPLE, "r") as f:
        mean = f["splits/test/probs"][:].astype(np.float64).mean(0)
        labels = f["splits/test/labels"][:]
        shifted = f["splits/shift_noise_5/probs"][:].astype(np.float64).mean(0)
        shifted_y = f["splits/shift_noise_5/labels"][:]
    t = m.fit_temperature(mean, labels).temperature
    assert ts["temperature"] == pytest.approx(t, rel=1e-9)
    scaled = m.apply_temperature(shifted, t)
    assert r["shift"]["shift_noise_5"]["temperature_scaled"]["nll"] == pytest.approx(m.nll_loss(scaled, shifted_y),
                                                                                     rel=1e-9)
    assert "shift_ts_nll_median" in r["summary"]
    assert any("fitted on the in-domain test split" in n for n in r["notes"])
    assert "temperature_scaled" not in _score("--protocol", "shift")["shift"]["shift_noise_5"]


def _top_k_brute(p, y, k):
    """The k largest probabilities of each row (decreasing; ties to the smaller class index: a stable sort of -p)
    and whether each is the label."""
    order = np.argsort(-p, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(p, order, axis=1), order == y[:, None]


@pytest.mark.parametrize(("c", "k"), [(100, 40), (100, 1), (7, 7), (300, 5)])
def test_top_k_equals_a_stable_sort_also_for_k_beyond_the_column_groups(c, k):
    """top_k_accuracy and top_k_calibration_error against a full stable sort, with ties at the top and k larger
    than the 25 column groups of 100 classes (the cut then is the row's minimum)."""
    from ubench.metrics.shift_paper import binned_calibration_error, top_k_accuracy, top_k_calibration_error

    rng = np.random.default_rng(c + k)
    p = rng.dirichlet(np.full(c, 0.3), 200)
    p[:20, : min(c, 3)] = p[:20, :1]  # ties (rows no longer sum to 1 exactly: renormalise)
    p /= p.sum(axis=1, keepdims=True)
    y = rng.integers(0, c, 200)
    values, hits = _top_k_brute(p, y, k)
    assert top_k_accuracy(p, y, k=k) == hits.any(axis=1).mean()
    want = binned_calibration_error(values, hits, np.linspace(0.0, 1.0, 16))
    assert top_k_calibration_error(p, y, k=k, n_bins=15) == pytest.approx(want, abs=1e-15)


@pytest.mark.parametrize(("k", "n_bins"), [(1, 15), (5, 10), (3, 7)])
def test_the_reports_top_k_scores_equal_the_public_functions(k, n_bins):
    """The report computes top-k accuracy and ECE in one pass (_top_k_scores): the same numbers as
    top_k_accuracy and top_k_calibration_error (each pinned by a hand computation)."""
    from ubench.metrics.shift_paper import _top_k_scores, top_k_accuracy, top_k_calibration_error

    rng = np.random.default_rng(k)
    p = rng.dirichlet(np.full(12, 0.5), 150)
    y = rng.integers(0, 12, 150)
    assert _top_k_scores(p, y, k, n_bins) == (top_k_accuracy(p, y, k=k),
                                              top_k_calibration_error(p, y, k=k, n_bins=n_bins))


def test_quantile_bin_edges_are_percentiles_of_float64_confidences():
    """float32 probabilities: the edges are np.percentile of the float64 top-1 confidences (the same as for their
    float64 copy), the outer two 0 and 1."""
    from ubench.metrics.shift_paper import quantile_bin_edges

    p = np.random.default_rng(0).dirichlet(np.ones(10), 301).astype(np.float32)
    edges = quantile_bin_edges(p, n_bins=7)
    want = np.percentile(p.max(axis=1).astype(np.float64), np.linspace(0.0, 100.0, 8))
    want[0], want[-1] = 0.0, 1.0
    assert edges.dtype == np.float64
    np.testing.assert_array_equal(edges, want)
    np.testing.assert_array_equal(edges, quantile_bin_edges(p.astype(np.float64), n_bins=7))


def test_binned_calibration_error_puts_values_beyond_the_edges_in_the_outer_bins():
    """Values below the first edge count in the first bin and values above the last in the last one (edges that do
    not span the values, e.g. quantile edges of other data): |sum of gaps| per bin, merged, not apart."""
    from ubench.metrics.shift_paper import binned_calibration_error

    v = np.array([0.1, 0.3, 0.6, 0.7, 0.95])
    h = np.array([1.0, 0.0, 1.0, 0.0, 1.0])
    # bins (.., 0.5] and (0.5, ..): gaps 0.9 - 0.3 = 0.6 and 0.4 - 0.7 + 0.05 = -0.25 (0.95 apart: 0.6 + 0.3 + 0.05)
    assert binned_calibration_error(v, h, [0.2, 0.5, 0.8]) == pytest.approx((0.6 + 0.25) / 5, abs=1e-15)
