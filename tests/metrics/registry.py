# SPDX-License-Identifier: MIT
"""Registry of the metrics core for the generic property tests (STYLE.md section 4).

Each metric is a function of ``(probs, labels)`` returning a float; the sets name the properties it claims. A new
metric joins the sets it claims and inherits their tests in ``test_metrics_properties.py``.
"""

from __future__ import annotations

import numpy as np
from scipy.special import entr

from ubench import metrics as M

# name -> f(probs, labels) -> float
METRICS = {
    "accuracy": M.accuracy_score,
    "nll": M.nll_loss,
    "nll_smoothed": lambda p, y: M.nll_loss(p, y, smoothing=1e-4),
    "brier": M.brier_loss,
    "ece": M.expected_calibration_error,
    "mce": M.max_calibration_error,
    "adaptive_ece": M.adaptive_calibration_error,
    "classwise_ece": M.classwise_calibration_error,
    "tace": M.tace_error,
    "l2_ce_debiased": M.debiased_calibration_error,
    "uce": M.uce_error,
    "classwise_uce": M.classwise_uce_error,
    "aurc": M.risk_coverage_auc,
    "decision_cost_cifar10": lambda p, y: M.decision_cost(
        p, y, M.cost_matrix(p.shape[1], [0], false_negative_cost=1.0, other_error_cost=0.1)
    ).mean,
}

# Value range [lo, hi] for any input.
RANGES = {
    "accuracy": (0.0, 1.0),
    "nll": (0.0, -np.log(1e-12)),
    "nll_smoothed": (0.0, -np.log(1e-4 / 8)),  # p_y >= gamma / C and the strategies draw C <= 8
    "brier": (0.0, 2.0),
    "ece": (0.0, 1.0),
    "mce": (0.0, 1.0),
    "adaptive_ece": (0.0, 1.0),
    "classwise_ece": (0.0, 1.0),
    "tace": (0.0, 1.0),
    "l2_ce_debiased": (0.0, 1.0),
    "uce": (0.0, 1.0),
    "classwise_uce": (0.0, 1.0),
    "aurc": (0.0, 1.0),
    "decision_cost_cifar10": (0.0, 1.0),
}
BOUNDED = set(RANGES)

# Permuting samples changes nothing.
PERMUTATION_INVARIANT = set(METRICS)

# Permuting classes in probs and labels together changes nothing (when the top-1 class is unique; the decision
# cost singles out class 0, so it is not relabelling-invariant).
CLASS_RELABEL_INVARIANT = set(METRICS) - {"decision_cost_cifar10"}

# Repeating the whole data set k times leaves the value unchanged (equal-count bins move, so TACE/adaptive not;
# AURC is a Riemann sum over N coverage levels, so repeating refines its grid; the debiased L2 error subtracts a
# variance that shrinks with the bins' counts).
REPEAT_INVARIANT = set(METRICS) - {"adaptive_ece", "tace", "aurc", "l2_ce_debiased"}

# Value for correct one-hot predictions (smoothed NLL is left out: its optimum depends on C).
ONE_HOT_OPTIMUM = {
    "accuracy": 1.0,
    "nll": 0.0,
    "brier": 0.0,
    "ece": 0.0,
    "mce": 0.0,
    "adaptive_ece": 0.0,
    "classwise_ece": 0.0,
    "tace": 0.0,
    "l2_ce_debiased": 0.0,
    "uce": 0.0,
    "classwise_uce": 0.0,
    "aurc": 0.0,
    "decision_cost_cifar10": 0.0,
}

# float32 and float64 copies of the same probabilities agree to 1e-5 (binned metrics can jump a bin and rounding
# to float32 can tie or reorder confidences that AURC ranks, so not them).
DTYPE_STABLE = {"accuracy", "nll", "nll_smoothed", "brier", "decision_cost_cifar10"}

# Binary ranking metrics: f(scores, labels) -> float.
RANKING = {
    "auroc": M.auroc_score,
    "average_precision": M.average_precision_score,
    "fpr_at_95_tpr": M.fpr_at_tpr,
}

# Per-sample uncertainty scores over probs: name -> (f(probs) -> (N,), an independent float64 oracle). The
# functions clip into their range, so a range check alone would pass for any implementation.
UNCERTAINTY = {
    "predictive_entropy": (M.predictive_entropy, lambda p: entr(p.astype(np.float64)).sum(axis=1)),
    "normalized_entropy": (M.normalized_entropy,
                           lambda p: entr(p.astype(np.float64)).sum(axis=1) / np.log(p.shape[1])),
    "confidence": (M.confidence, lambda p: p.astype(np.float64).max(axis=1)),
}
