# SPDX-License-Identifier: MIT
"""The peers' quantities and the post-hoc calibrators in `ubench score` (issue #17 items 5 and 7)."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from ubench import metrics as m
from ubench.cli import cli

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "digits_deep_ensemble.h5"
NEW_KEYS = ("augrc", "cov_at_5_risk", "risk_at_80_cov", "smooth_ece", "disagreement", "variation_ratio",
            "conformal_coverage", "conformal_set_size")


def _score(*args):
    res = CliRunner().invoke(cli, ["score", str(EXAMPLE), "--json", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_score_reports_the_peers_quantities_in_every_split_and_the_summary():
    r = _score("--conformal-method", "thr", "--conformal-alpha", "0.2")
    with h5py.File(EXAMPLE, "r") as f:
        members = f["splits/test/probs"][:]
        labels = f["splits/test/labels"][:]
    mean = members.astype(np.float64).mean(0)
    s = r["summary"]
    for key in NEW_KEYS:
        assert key in s and key in r["in_domain"]["test"]
        for shift in r["shift"].values():
            assert key in shift
    assert s["augrc"] == pytest.approx(m.generalized_risk_coverage_auc(mean, labels), rel=1e-9)
    assert s["smooth_ece"] == pytest.approx(m.smooth_ece(mean, labels), rel=1e-9)
    assert s["disagreement"] == pytest.approx(m.disagreement(members), rel=1e-12)
    cp = m.cross_validated_conformal(mean, labels, method="thr", alpha=0.2)
    assert s["conformal_coverage"] == pytest.approx(cp.coverage, rel=1e-12)
    assert r["protocol"]["conformal_method"] == "thr" and r["protocol"]["conformal_alpha"] == 0.2
    ood = next(iter(r["ood"].values()))
    assert 0 <= ood["disagreement"] <= 1 and 0 <= ood["variation_ratio"] <= 1
    assert "smooth_ece" in r["comparability"]["not_comparable"]


def test_score_calibrators_all_in_json_and_text():
    r = _score("--calibrators", "all")
    cal = r["in_domain"]["test"]["calibrators"]
    assert set(cal) == {"temperature", "vector", "matrix", "dirichlet", "histogram", "isotonic", "bbq"}
    # temperature under the same folds is the calibrated protocol's number
    assert cal["temperature"]["nll"] == pytest.approx(r["in_domain"]["test"]["calibrated"]["calibrated_nll"],
                                                      rel=1e-6)
    # The bundled digits example's halves are near-separable for dirichlet's unpenalised diagonal: some folds stop
    # at the iteration cap, and the report says so (measured: 2 of 10 folds with scipy 1.17's Newton-CG).
    assert cal["temperature"]["unconverged_folds"] == 0 and cal["dirichlet"]["unconverged_folds"] > 0
    assert any(n.startswith("calibrator 'dirichlet': the fit stopped at its iteration cap") for n in r["notes"])
    text = CliRunner().invoke(cli, ["score", str(EXAMPLE), "--calibrator", "isotonic"])
    assert text.exit_code == 0 and "isotonic" in text.stdout and "post-hoc calibrators" in text.stdout


def test_unknown_calibrator_is_a_usage_error():
    res = CliRunner().invoke(cli, ["score", str(EXAMPLE), "--calibrator", "platt"])
    assert res.exit_code == 2 and "unknown calibrator 'platt'" in res.output


def test_bad_odir_is_a_usage_error_and_cv_is_recorded_in_the_protocol():
    res = CliRunner().invoke(cli, ["score", str(EXAMPLE), "--calibrator", "dirichlet", "--odir", "grid"])
    assert res.exit_code == 2 and "odir must be one of ('fixed', 'cv'); found 'grid'" in res.output
    r = _score("--calibrator", "temperature", "--odir", "cv", "--repeats", "1")
    assert r["protocol"]["odir"] == "cv" and "odir" in r["protocol"]["overrides"]
    assert "selected" not in r["in_domain"]["test"]["calibrators"]["temperature"]
    assert _score("--calibrator", "temperature", "--repeats", "1")["protocol"]["odir"] == "fixed"


def test_score_odir_cv_reports_the_selected_strengths():
    """``--odir cv``: dirichlet's λ and μ chosen per fold over the full grid (36 pairs x 5 inner folds per outer
    fold, hence slow), each choice a grid pair, in the JSON; the default run has no ``selected``."""
    from ubench.metrics.calibrators import ODIR_GRID

    r = _score("--calibrator", "dirichlet", "--odir", "cv", "--repeats", "1")
    sel = r["in_domain"]["test"]["calibrators"]["dirichlet"]["selected"]
    assert len(sel) == 2
    for s in sel:
        assert s["lambda"] in ODIR_GRID and s["mu"] in ODIR_GRID and s["inner_nll"] > 0
