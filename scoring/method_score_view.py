# SPDX-License-Identifier: MIT
"""The report's method and logit scores (``method_scores``, issue #31) as one table for the terminal and the HTML
page: per score, its direction, whether the method declared it (method-specific) or ubench derived it from the
logits, and its OOD detection (mean over OOD splits) and rejection numbers on the primary split."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["METHOD_SCORE_NOTE", "method_score_table"]

METHOD_SCORE_NOTE = ("scores beside the softmax: * = method-specific (declared by the method in the archive), the "
                     "others derived from its logits (energy, max logit); OOD numbers are means over the OOD splits")


def method_score_table(report: Mapping[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """``(header, rows)``; no rows when the report has no method scores."""
    header = ["score", "direction", "OOD AUROC", "OOD AUPR", "FPR95", "AURC", "misclass. AUROC"]
    rows = [[name + (" *" if s["method_specific"] else ""), s["direction"], s["ood_auroc"], s["ood_aupr"],
             s["ood_fpr95"], s["aurc"], s["misclassification_auroc"]]
            for name, s in (report.get("method_scores") or {}).items()]
    return header, rows
