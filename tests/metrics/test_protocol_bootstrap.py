# SPDX-License-Identifier: MIT
"""The first-order refit of the test-time CV protocol (``metrics/protocol_bootstrap.py``) against the exact refit:
an independent restatement that, in every replicate, refits every fold's temperature on its reweighted half with
scipy's bounded scalar minimiser (on log T, NLL of ``log_softmax(log(p + eps) / T)``) and scores the reweighted
other half. Both placements; the halvings are ``default_rng(seed).permutation`` as the protocol draws them."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize, special

from ubench.metrics import cross_validated_calibration
from ubench.metrics.bootstrap import bootstrap_counts, interval_rng
from ubench.metrics.protocol_bootstrap import PROTOCOL_KEYS, cv_influence

N, C, M, REPEATS = 300, 4, 3, 5


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(11)
    z = rng.normal(0, 2, (N, C))
    pi = special.softmax(z / 1.4, axis=1)
    y = (rng.random(N)[:, None] > np.cumsum(pi, axis=1)).sum(axis=1)
    members = special.softmax(z[None] + rng.normal(0, 0.4, (M, N, C)), axis=2)
    return members, y


def _exact(members, y, w, placement):
    """Protocol metrics of the replicate with counts ``w``, every fold refitted exactly."""
    logp = np.log((members.mean(0)[None] if placement == "post" else members) + 1e-12)
    rng = np.random.default_rng(0)
    perms = [rng.permutation(N) for _ in range(REPEATS)]
    half = N // 2

    def log_q(t, rows):
        lq = special.log_softmax(logp[:, rows] / t, axis=2)
        return special.logsumexp(lq, axis=0) - np.log(lq.shape[0])

    def fit(rows, weights):
        f = lambda u: -(weights[rows] * log_q(np.exp(u), rows)[np.arange(rows.size), y[rows]]).sum()
        return np.exp(optimize.minimize_scalar(f, bounds=(np.log(0.01), np.log(100)), method="bounded",
                                               options={"xatol": 1e-10}).x)

    out = dict.fromkeys(("cll", "calibrated_brier", "temperature"), 0.0)
    for perm in perms:
        for fit_rows, eval_rows in ((perm[:half], perm[half:]), (perm[half:], perm[:half])):
            t = fit(fit_rows, w)
            lq = log_q(t, eval_rows)
            q, we = np.exp(lq), w[eval_rows]
            brier = (q**2).sum(1) - 2 * q[np.arange(eval_rows.size), y[eval_rows]] + 1
            out["cll"] += (we * lq[np.arange(eval_rows.size), y[eval_rows]]).sum() / we.sum() / (2 * REPEATS)
            out["calibrated_brier"] += (we * brier).sum() / we.sum() / (2 * REPEATS)
            out["temperature"] += t / (2 * REPEATS)
    return out


@pytest.mark.parametrize("placement", ["post", "per_member"])
def test_influence_columns_average_to_the_protocol_values(problem, placement):
    members, y = problem
    cv = cross_validated_calibration(members, y, placement=placement)
    inf = cv_influence(members.mean(0)[None] if placement == "post" else members, y, placement=placement)
    for key in PROTOCOL_KEYS:
        assert inf.psi[key].mean() == pytest.approx(getattr(cv, key), rel=1e-12, abs=1e-13), key
    ones = np.ones((1, N))
    assert inf.calibrated_ece(ones, ones @ inf.fold_columns)[0] == pytest.approx(cv.calibrated_ece, rel=1e-12)


@pytest.mark.parametrize("placement", ["post", "per_member"])
def test_first_order_refit_follows_the_exact_refit(problem, placement):
    """Over 16 replicates the first-order values correlate with the exactly refitted ones (r > 0.98) and have
    the same spread (within 12 %), the temperature's included (held fixed, it would have no spread at all)."""
    members, y = problem
    inf = cv_influence(members.mean(0)[None] if placement == "post" else members, y, placement=placement)
    w = bootstrap_counts(N, 16, interval_rng(0, 5))
    exact = [_exact(members, y, wb, placement) for wb in w]
    for key in ("cll", "calibrated_brier", "temperature"):
        lin = w @ inf.psi[key] / N
        e = np.array([d[key] for d in exact])
        assert np.corrcoef(lin, e)[0, 1] > 0.98, key
        assert lin.std() == pytest.approx(e.std(), rel=0.12), key
    assert np.array([d["temperature"] for d in exact]).std() > 0.02
