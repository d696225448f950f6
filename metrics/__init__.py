# SPDX-License-Identifier: MIT
"""ubench.metrics: framework-agnostic NumPy/SciPy metrics over ``probs`` (N, C), ``member_probs`` (M, N, C) and
integer ``labels`` (N,). The public surface is the explicit list of re-exports below."""

from ._validation import UndefinedMetricError
from .calibration import (
    ReliabilityBins,
    adaptive_calibration_error,
    classwise_calibration_error,
    classwise_uce_error,
    expected_calibration_error,
    max_calibration_error,
    reliability_bins,
    tace_error,
    uce_error,
)
from .calibration_debiased import debiased_calibration_error
from .classification import (
    BrierDecomposition,
    accuracy_score,
    brier_decomposition,
    brier_loss,
    nll_loss,
    nll_loss_from_logits,
)
from .decision import COST_PRESETS, DecisionCost, bayes_decisions, cost_matrix, cost_matrix_preset, decision_cost
from .ensemble import ensemble_mean_probs, smooth_probs
from .ranking import (
    DetectionScores,
    auroc_score,
    average_precision_score,
    detection_scores,
    fpr_at_tpr,
    misclassification_scores,
    ood_detection_scores,
)
from .rejection import RejectionCurve, rejection_curve, risk_coverage_auc
from .selective import coverage_at_risk, generalized_risk_coverage_auc, risk_at_coverage
from .smooth_calibration import smooth_ece, smooth_ece_at
from .diversity import disagreement, variation_ratio
from .shift_paper import confidence_curves, cross_validated_quantile_ece, top_k_accuracy, top_k_calibration_error
from .uncertainty import (
    UncertaintyDecomposition,
    confidence,
    expected_entropy,
    mutual_information,
    normalized_entropy,
    predictive_entropy,
    uncertainty_decomposition,
)

from .dee import DeeCurve, DeeScore, dee_curve, dee_reference, dee_score
from .protocol import CalibratedCV, MemberCurves, cross_validated_calibration, cv_splits, member_curves
from .shift import ShiftSummary, shift_summary
from .temperature import (
    TemperatureFit,
    apply_ensemble_temperature,
    apply_temperature,
    fit_ensemble_temperature,
    fit_temperature,
    fit_temperature_from_logits,
)
from .vector_scaling import VectorScalingFit, apply_vector_scaling, fit_vector_scaling
from .conformal import ConformalResult, cross_validated_conformal
__all__ = [
    "UndefinedMetricError",
    # classification
    "accuracy_score",
    "nll_loss",
    "nll_loss_from_logits",
    "brier_loss",
    "brier_decomposition",
    "BrierDecomposition",
    # calibration
    "expected_calibration_error",
    "max_calibration_error",
    "adaptive_calibration_error",
    "classwise_calibration_error",
    "tace_error",
    "debiased_calibration_error",
    "reliability_bins",
    "ReliabilityBins",
    "uce_error",
    "classwise_uce_error",
    # uncertainty
    "predictive_entropy",
    "expected_entropy",
    "mutual_information",
    "normalized_entropy",
    "confidence",
    "uncertainty_decomposition",
    "UncertaintyDecomposition",
    # ranking and detection
    "auroc_score",
    "average_precision_score",
    "fpr_at_tpr",
    "detection_scores",
    "DetectionScores",
    "misclassification_scores",
    "ood_detection_scores",
    # selective prediction
    "rejection_curve",
    "RejectionCurve",
    "risk_coverage_auc",
    # selective classification (Traub et al. 2024; torch-uncertainty names)
    "generalized_risk_coverage_auc",
    "coverage_at_risk",
    "risk_at_coverage",
    # smooth calibration, diversity, conformal
    "smooth_ece",
    "smooth_ece_at",
    "disagreement",
    "variation_ratio",
    "cross_validated_conformal",
    "ConformalResult",
    # the shift paper's outputs (Ovadia et al. 2019's released metrics_lib)
    "confidence_curves",
    "top_k_accuracy",
    "top_k_calibration_error",
    "cross_validated_quantile_ece",
    # decisions
    "bayes_decisions",
    "decision_cost",
    "DecisionCost",
    "cost_matrix",
    "cost_matrix_preset",
    "COST_PRESETS",
    # ensembles
    "ensemble_mean_probs",
    "smooth_probs",
    # temperature scaling and the calibrated protocol
    "fit_temperature",
    "fit_temperature_from_logits",
    "fit_ensemble_temperature",
    "apply_temperature",
    "apply_ensemble_temperature",
    "TemperatureFit",
    "fit_vector_scaling",
    "apply_vector_scaling",
    "VectorScalingFit",
    "cross_validated_calibration",
    "cv_splits",
    "CalibratedCV",
    "member_curves",
    "MemberCurves",
    "dee_score",
    "dee_curve",
    "dee_reference",
    "DeeScore",
    "DeeCurve",
    "shift_summary",
    "ShiftSummary",
]
