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
from sklearn.metrics import roc_curve

from ubench.metrics.calibrators import ODIR_GRID
from ubench.metrics.report_sections import (
    RowSums,
    SplitAccumulator,
    SplitArrays,
    calibrated_reliability,
    calibrated_section,
    calibrators_section,
    ood_histograms,
    ood_roc_curves,
    scores_for,
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
