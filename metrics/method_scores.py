# SPDX-License-Identifier: MIT
r"""Uncertainty scores that are not functions of the softmax: a method's own scores and those of its logits.

A method may declare per-sample scores (format 1.1, SPEC.md §4.4: SNGP's variance, DDU's feature density,
evidential vacuity, a post-hoc detector's output), each with a direction; an archive with logits (§4.3) also gets
the two logit scores of the OOD literature, computed on the members' mean logits
:math:`\bar z = \frac1M \sum_m z_m` as torch-uncertainty's ``EnergyCriterion`` and ``MaxLogitCriterion`` do:

.. math:: E(x) = -\log \sum_c e^{\bar z_c} \quad\text{(Liu et al. 2020; higher = more OOD)}, \qquad
          \mathrm{MaxLogit}(x) = \max_c \bar z_c \quad\text{(Hendrycks et al. 2022; higher = more in-domain)}.

(For one member this is the papers' definition; for an ensemble, averaging logits first is torch-uncertainty's
choice, which ubench follows so that its numbers match the peer's.)

Every score is turned into an uncertainty (higher = more uncertain: a ``confidence`` score is negated) and scored
like the softmax-derived ones: OOD detection against the primary in-domain split (AUROC, AUPR, FPR at 95 % TPR,
positive = OOD), misclassification detection and the accuracy-rejection curve on labelled in-domain splits.
Pure numpy/scipy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._validation import UndefinedMetricError
from .classification import _predictions
from .ranking import _check_tpr, _detection_scores
from .rejection import _rejection_curve

__all__ = ["MethodScore", "LOGIT_SCORES", "LogitScoreAccumulator", "logit_scores", "method_scores_in_domain",
           "method_scores_ood", "method_scores_summary"]

#: The scores derived from logits: name -> direction of the stored value.
LOGIT_SCORES = {"energy": "uncertainty", "max_logit": "confidence"}


@dataclass(frozen=True)
class MethodScore:
    """One per-sample score of a split: ``values`` (N,) float64 as declared, its ``direction`` (``uncertainty``
    or ``confidence``) and whether it is ``method_specific`` (declared by the method) or derived from logits."""

    values: NDArray[np.float64]
    direction: str
    method_specific: bool = True

    @property
    def uncertainty(self) -> NDArray[np.float64]:
        """Higher = more uncertain: the values, negated for a ``confidence`` score."""
        return self.values if self.direction == "uncertainty" else -self.values


def logit_scores(member_logits: NDArray) -> dict[str, NDArray[np.float64]]:
    """``energy`` and ``max_logit`` (N,) of (M, N, C) member logits, from their float64 mean over members."""
    mean = np.asarray(member_logits, dtype=np.float64).mean(axis=0)
    from scipy.special import logsumexp  # at use: scipy.special costs `ubench score` start-up (issue #29)

    return {"energy": -logsumexp(mean, axis=1), "max_logit": mean.max(axis=1)}


class LogitScoreAccumulator:
    """:func:`logit_scores` of a split streamed in blocks ``(start, (M, rows, C))``: memory is two (N,) arrays."""

    def __init__(self, n_samples: int):
        self._out = {name: np.empty(int(n_samples), dtype=np.float64) for name in LOGIT_SCORES}

    def add(self, start: int, block: NDArray) -> None:
        for name, values in logit_scores(block).items():
            self._out[name][start:start + values.shape[0]] = values

    def result(self) -> dict[str, MethodScore]:
        return {name: MethodScore(v, LOGIT_SCORES[name], method_specific=False) for name, v in self._out.items()}


def _described(score: MethodScore) -> dict[str, Any]:
    return {"direction": score.direction, "method_specific": score.method_specific}


def method_scores_in_domain(mean_probs: NDArray, labels: NDArray, scores: Mapping[str, MethodScore], *,
                            tpr: float = 0.95, points: int = 101) -> tuple[dict[str, Any], list[str]]:
    """Per score on a labelled in-domain split: ``misclassification_{auroc,aupr,fpr95}`` (positive = top-1 error
    of ``mean_probs``; ``None`` when every prediction is right or every one wrong), ``aurc`` (area under the
    risk-coverage curve, rejecting the most uncertain first: ``1 - mean accuracy`` over the curve, as
    ``aurc_<score>`` of the softmax scores) and ``rejection_curve`` (``rejected_fraction``, ``accuracy`` at
    ``points`` evenly spaced fractions in [0, 1)). Returns the section and its notes."""
    tpr = _check_tpr(tpr)  # above 1 the FPR's index would wrap round
    n = labels.shape[0]
    errors = (_predictions(mean_probs) != labels).astype(np.int8)
    idx = np.unique(np.minimum(n - 1, np.round(np.linspace(0.0, 1.0, points, endpoint=False) * n).astype(int)))
    out: dict[str, Any] = {}
    notes: list[str] = []
    for name, score in scores.items():
        u = score.uncertainty
        sec = _described(score)
        try:
            d = _detection_scores(u, errors, tpr)
            sec.update(misclassification_auroc=d.auroc, misclassification_aupr=d.average_precision,
                       misclassification_fpr95=d.fpr_at_tpr)
        except UndefinedMetricError as exc:
            sec.update(misclassification_auroc=None, misclassification_aupr=None, misclassification_fpr95=None)
            if not notes:
                notes.append(f"misclassification detection by method scores undefined: {exc}")
        curve = _rejection_curve(mean_probs, labels, u)
        sec["aurc"] = float(1.0 - curve.accuracy.mean())
        sec["rejection_curve"] = {"rejected_fraction": [float(v) for v in curve.rejected_fraction[idx]],
                                  "accuracy": [float(v) for v in curve.accuracy[idx]]}
        out[name] = sec
    return out, notes


def method_scores_ood(in_domain: Mapping[str, MethodScore], ood: Mapping[str, MethodScore], *,
                      tpr: float = 0.95) -> dict[str, Any]:
    """Per score present in both splits: ``ood_{auroc,aupr,fpr95}`` of OOD detection (positive = OOD) by the
    score as an uncertainty, the in-domain split's samples the negatives."""
    tpr = _check_tpr(tpr)
    out: dict[str, Any] = {}
    for name, score in ood.items():
        if name not in in_domain:
            continue
        neg, pos = in_domain[name].uncertainty, score.uncertainty
        y = np.concatenate([np.zeros(neg.shape[0], np.int8), np.ones(pos.shape[0], np.int8)])
        d = _detection_scores(np.concatenate([neg, pos]), y, tpr)
        out[name] = {**_described(score), "ood_auroc": d.auroc, "ood_aupr": d.average_precision,
                     "ood_fpr95": d.fpr_at_tpr}
    return out


def method_scores_summary(in_domain: Mapping[str, Any] | None, ood: Mapping[str, Mapping[str, Any]]
                          ) -> dict[str, Any]:
    """The report's ``method_scores``: per score, its direction and kind, the primary split's ``aurc`` and
    ``misclassification_auroc`` (``None`` without one), and the mean over OOD splits of ``ood_{auroc,aupr,fpr95}``
    (``None`` without OOD splits)."""
    names = list(in_domain or {}) + [n for sec in ood.values() for n in sec if n not in (in_domain or {})]
    out: dict[str, Any] = {}
    for name in dict.fromkeys(names):
        first = (in_domain or {}).get(name) or next(sec[name] for sec in ood.values() if name in sec)
        row = _described_dict(first)
        row["aurc"] = (in_domain or {}).get(name, {}).get("aurc")
        row["misclassification_auroc"] = (in_domain or {}).get(name, {}).get("misclassification_auroc")
        for key in ("ood_auroc", "ood_aupr", "ood_fpr95"):
            vals = [sec[name][key] for sec in ood.values() if name in sec]
            row[key] = float(np.mean(vals)) if vals else None
        out[name] = row
    return out


def _described_dict(sec: Mapping[str, Any]) -> dict[str, Any]:
    return {"direction": sec["direction"], "method_specific": sec["method_specific"]}
