# SPDX-License-Identifier: MIT
"""Bad input: every public function raises the right exception type with a message naming the argument."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ubench import metrics as M

P = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4]])
Y = np.array([0, 1, 2])
COST = 1.0 - np.eye(3)

# name -> f(probs, labels): every public function that takes probs and labels.
PROBS_LABELS = {
    "accuracy_score": M.accuracy_score,
    "nll_loss": M.nll_loss,
    "brier_loss": M.brier_loss,
    "brier_decomposition": M.brier_decomposition,
    "expected_calibration_error": M.expected_calibration_error,
    "max_calibration_error": M.max_calibration_error,
    "adaptive_calibration_error": M.adaptive_calibration_error,
    "classwise_calibration_error": M.classwise_calibration_error,
    "tace_error": M.tace_error,
    "reliability_bins": M.reliability_bins,
    "uce_error": M.uce_error,
    "classwise_uce_error": M.classwise_uce_error,
    "rejection_curve": M.rejection_curve,
    "risk_coverage_auc": M.risk_coverage_auc,
    "decision_cost": lambda p, y: M.decision_cost(p, y, COST),
    "misclassification_scores": lambda p, y: M.misclassification_scores(np.asarray(p)[None], y),
}
PROBS_ONLY = {
    "predictive_entropy": M.predictive_entropy,
    "normalized_entropy": M.normalized_entropy,
    "confidence": M.confidence,
    "bayes_decisions": lambda p: M.bayes_decisions(p, COST),
    "smooth_probs": lambda p: M.smooth_probs(p, gamma=0.1),
    "expected_entropy": lambda p: M.expected_entropy(np.asarray(p)[None]),
    "mutual_information": lambda p: M.mutual_information(np.asarray(p)[None]),
    "ensemble_mean_probs": lambda p: M.ensemble_mean_probs(np.asarray(p)[None]),
}
ALL_PROBS = {**{k: (lambda f: lambda p: f(p, Y))(f) for k, f in PROBS_LABELS.items()}, **PROBS_ONLY}

BAD_PROBS = {
    "nan": (np.where(np.eye(3, dtype=bool)[0], np.nan, P), ValueError, "finite"),
    "logits": (np.log(P) * 3, ValueError, "were logits passed as probabilities"),
    "off simplex": (P * 0.9, ValueError, "rows must sum to 1"),
    "int dtype": (np.eye(3, dtype=np.int64), TypeError, "float32 or float64"),
    "wrong ndim": (P[0], ValueError, "shape"),
    "empty": (np.zeros((0, 3)), ValueError, "empty"),
}


@pytest.mark.parametrize("case", sorted(BAD_PROBS))
@pytest.mark.parametrize("name", sorted(ALL_PROBS))
def test_bad_probs(name, case):
    """Each public function rejects NaN, logits, rows off the simplex, wrong dtype/ndim and empty input."""
    bad, exc, what = BAD_PROBS[case]
    if name in {"expected_entropy", "mutual_information", "ensemble_mean_probs", "misclassification_scores"} and \
            case == "wrong ndim":
        bad = P[None, None]  # the [None] wrapper would turn (3,) into a valid-looking (1, 3)
    with pytest.raises(exc, match=what) as info:
        ALL_PROBS[name](bad)
    assert "probs" in str(info.value)


@pytest.mark.parametrize("name", sorted(PROBS_LABELS))
def test_bad_labels(name):
    """Labels out of range, of float dtype, or of the wrong length are rejected, naming labels."""
    f = PROBS_LABELS[name]
    with pytest.raises(ValueError, match=r"labels must be in \[0, 3\); found 3 at index 2"):
        f(P, np.array([0, 1, 3]))
    with pytest.raises(ValueError, match=r"labels must be in \[0, 3\); found -1 at index 0"):
        f(P, np.array([-1, 1, 2]))
    with pytest.raises(TypeError, match="labels must have an integer dtype"):
        f(P, Y.astype(float))
    with pytest.raises(ValueError, match="probs has 3 samples but labels has 2"):
        f(P, Y[:2])


RANKING = {"auroc_score": M.auroc_score, "average_precision_score": M.average_precision_score,
           "fpr_at_tpr": M.fpr_at_tpr, "detection_scores": M.detection_scores}


@pytest.mark.parametrize("name", sorted(RANKING))
def test_bad_scores(name):
    f = RANKING[name]
    s, y = np.array([0.1, 0.5, 0.9]), np.array([0, 1, 1])
    with pytest.raises(ValueError, match="scores must be finite"):
        f(np.array([0.1, np.inf, 0.9]), y)
    with pytest.raises(ValueError, match="labels must be in \\[0, 2\\)"):
        f(s, np.array([0, 2, 1]))
    with pytest.raises(ValueError, match="scores has 3 samples but labels has 2"):
        f(s, y[:2])
    with pytest.raises(ValueError, match="scores must have shape"):
        f(s[None], y)


@pytest.mark.parametrize("kw,msg", [({"eps": -1.0}, "eps"), ({"smoothing": 1.0}, "smoothing"),
                                    ({"smoothing": -0.1}, "smoothing")])
def test_bad_options(kw, msg):
    with pytest.raises(ValueError, match=msg):
        M.nll_loss(P, Y, **kw)


def test_bad_tpr_and_threshold():
    with pytest.raises(ValueError, match="tpr"):
        M.fpr_at_tpr(np.array([0.1, 0.9]), np.array([0, 1]), tpr=0.0)
    with pytest.raises(ValueError, match="threshold"):
        M.tace_error(P, Y, threshold=1.0)
    with pytest.raises(ValueError, match="probs has 3 samples but uncertainty has 2"):
        M.rejection_curve(P, Y, uncertainty=np.array([0.1, 0.2]))


def test_inputs_are_not_mutated():
    p, y = P.copy(), np.array([0, 1, 0])  # one error, so misclassification detection is defined
    y0 = y.copy()
    for f in PROBS_LABELS.values():
        f(p, y)
    for f in PROBS_ONLY.values():
        f(p)
    np.testing.assert_array_equal(p, P)
    np.testing.assert_array_equal(y, y0)


def test_import_leaves_heavy_frameworks_out():
    """Importing ubench.metrics pulls in neither torch, jax nor h5py."""
    code = ("import sys, ubench.metrics; bad = [m for m in ('torch', 'jax', 'h5py') if m in sys.modules];"
            "print(','.join(bad)); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, f"imported: {r.stdout} {r.stderr}"


@given(
    c=st.integers(2, 300),
    n=st.integers(1, 50),
    offsets=st.lists(st.floats(-3e-4, 3e-4), min_size=1, max_size=50),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 2**32 - 1),
)
def test_fast_simplex_screen_agrees_with_float64_reference(c, n, offsets, dtype, seed):
    """For rows summing to 1 + offset around the tolerance, the BLAS screen finds the same first bad row as the
    plain float64 row sums (the validation pass is fast but its answer is unchanged)."""
    from ubench.metrics._validation import _first_bad_simplex_row_nonneg, first_bad_simplex_row, simplex_tolerance

    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(c), size=n)
    tol = simplex_tolerance(c)
    scale = 1.0 + np.resize(np.asarray(offsets), n) * (tol / 1e-4)
    p = (p * scale[:, None]).astype(dtype)
    assert _first_bad_simplex_row_nonneg(p, tol) == first_bad_simplex_row(p, tol)
    assert _first_bad_simplex_row_nonneg(p[None], tol) == first_bad_simplex_row(p[None], tol)
