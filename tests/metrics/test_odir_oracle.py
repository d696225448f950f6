# SPDX-License-Identifier: MIT
"""The Dirichlet calibrator's ODIR objective against Kull et al.'s own code (issue #27 item 3).

Oracle: ``dirichletcal``'s objective numbers, computed once (``tests/data/odir_oracle``, README there) at strengths
large enough that the normalisation matters (λ = 10 and 1000): the penalty is λ / (C(C-1)) times the squared
off-diagonal weights plus μ / C times the squared intercepts. A fit that normalised by another count (C², C(C+1),
N) optimises another objective, and its weights score worse than dirichletcal's optimum under Kull et al.'s.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.special import log_softmax

from ubench.metrics.calibrators import fit_calibrator

ORACLE = Path(__file__).parent.parent / "data" / "odir_oracle"


@pytest.fixture(scope="module")
def oracle():
    d = np.load(ORACLE / "inputs.npz")
    return d["probs"], d["labels"], json.loads((ORACLE / "values.json").read_text())


def _kull_objective(wb, x, y, lam_n, mu_n):
    """Mean NLL of softmax(x W^T + b) plus lam_n * sum of squared off-diagonal W plus mu_n * sum of squared b,
    for (W | b) of shape (C, C + 1): Kull et al.'s ODIR objective with already normalised strengths. As in
    dirichletcal, the outputs are clipped to [eps, 1 - eps] (float64's eps) before the log; ubench's fit does not
    clip, which is the same objective wherever no label probability falls below 2.2e-16 (checked at the fits)."""
    wb = np.asarray(wb, dtype=np.float64)
    w, b = wb[:, :-1], wb[:, -1]
    eps = np.finfo(np.float64).eps
    q = np.clip(np.exp(log_softmax(x @ w.T + b, axis=1)), eps, 1.0 - eps)
    off = w * (1.0 - np.eye(w.shape[0]))
    return -np.log(q[np.arange(len(y)), y]).mean() + lam_n * np.sum(off**2) + mu_n * np.sum(b**2)


def test_the_transcription_equals_dirichletcals_objective(oracle):
    """The normalised strengths are λ / (C(C-1)) and μ / C, and the transcription above gives dirichletcal's
    objective at every stored point to 1e-12: it is a faithful stand-in for their objective below."""
    p, y, ref = oracle
    c = p.shape[1]
    x = np.log(p + ref["eps"])
    for fit in ref["fits"]:
        assert fit["lambda_normalised"] == pytest.approx(fit["lambda"] / (c * (c - 1)), rel=1e-15)
        assert fit["mu_normalised"] == pytest.approx(fit["mu"] / c, rel=1e-15)
        for point, value in zip(ref["points"], fit["objective_at_points"]):
            assert _kull_objective(point, x, y, fit["lambda_normalised"], fit["mu_normalised"]) == pytest.approx(
                value, rel=1e-12)
        assert _kull_objective(fit["weights"], x, y, fit["lambda_normalised"], fit["mu_normalised"]) == \
            pytest.approx(fit["objective_at_fit"], rel=1e-12)


@pytest.mark.parametrize("index", [0, 1])
def test_dirichlet_fit_reaches_dirichletcals_optimum(oracle, index):
    """ubench's dirichlet fit, scored by Kull et al.'s objective, reaches dirichletcal's optimum (to 1e-9; neither
    is lower than the other by more) and lands on the same weights (to 1e-4)."""
    p, y, ref = oracle
    fit = ref["fits"][index]
    cal = fit_calibrator("dirichlet", p, y, odir_lambda=fit["lambda"], odir_mu=fit["mu"], eps=ref["eps"])
    ours = np.hstack([cal.params["weight"], cal.params["bias"][:, None]])
    value = _kull_objective(ours, np.log(p + ref["eps"]), y, fit["lambda_normalised"], fit["mu_normalised"])
    assert value == pytest.approx(fit["objective_at_fit"], abs=1e-9)
    np.testing.assert_allclose(ours, np.array(fit["weights"]), atol=1e-4)
    assert cal.params["converged"]
    q = cal.apply(p)
    assert q[np.arange(len(y)), y].min() > 1e-10  # the clip of dirichletcal's objective is inactive here
