# SPDX-License-Identifier: MIT
"""The value rules of format 1.1's additions (SPEC.md §4.3-4.4): per-member logits checked against the
probabilities, and per-split method scores. numpy only; the writer and the validator call the same functions, so
the writer never writes what the reader refuses.
"""

from __future__ import annotations

import numpy as np

from .spec import logit_unit_roundoff, row_sum_tolerance

__all__ = ["softmax64", "logits_tolerance", "logits_problem", "scores_problem"]


def softmax64(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, computed in float64 (the max is subtracted first)."""
    z = np.asarray(logits, dtype=np.float64)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def logits_tolerance(logits: np.ndarray, n_classes: int) -> np.ndarray:
    r"""SPEC.md §4.3: how far ``softmax(logits)`` may be from ``probs``, per row (shape ``logits.shape[:-1]``).

    .. math:: \tau = 10^{-4} + C\,2^{-23} + \operatorname{expm1}\!\big(2\,u \max_c |z_c|\big)

    The first two terms are the row-sum tolerance of the probabilities (§4); the last bounds what rounding the
    logits to their stored precision (unit roundoff ``u``: 2⁻¹¹ for float16, 2⁻²⁴ float32, 2⁻⁵³ float64) does to
    a softmax: each logit moves by at most ``u |z_c|``, the log-normaliser by at most the largest move, so every
    log-probability moves by at most ``2 u max |z|``.
    """
    u = logit_unit_roundoff(logits.dtype)
    z = np.abs(np.asarray(logits, dtype=np.float64)).max(axis=-1)
    return row_sum_tolerance(n_classes) + np.expm1(2.0 * u * z)


def logits_problem(logits: np.ndarray, probs: np.ndarray, *, start: int = 0, member_offset: int = 0
                   ) -> tuple[str, str] | None:
    """The first way an (m, rows, C) block of ``logits`` breaks SPEC.md §4.3 against the same block of ``probs``,
    as ``(check, message)``, or None: every logit finite, and ``|softmax(logits) - probs| <=``
    :func:`logits_tolerance` at every class. The message names member, sample (offset by ``member_offset`` and
    ``start``) and class."""
    bad_value = ~np.isfinite(logits)  # not a float64 sum: finite logits of 1e308 would overflow it
    if bad_value.any():
        m, i, c = np.unravel_index(int(np.argmax(bad_value)), logits.shape)
        return "finite", (f"non-finite logit {logits[m, i, c]} at member {member_offset + m}, sample {start + i}, "
                          f"class {c}")
    diff = np.abs(softmax64(logits) - probs.astype(np.float64))
    worst = diff.max(axis=-1)
    tol = logits_tolerance(logits, logits.shape[-1])
    bad = worst > tol
    if bad.any():
        m, i = np.unravel_index(int(np.argmax(bad)), bad.shape)
        c = int(np.argmax(diff[m, i]))
        return "logits-softmax", (f"softmax of the logits of member {member_offset + m}, sample {start + i} differs "
                                  f"from probs by {worst[m, i]:.3g} at class {c} (tolerance {tol[m, i]:.2g})")
    return None


def scores_problem(values: np.ndarray) -> tuple[str, str] | None:
    """SPEC.md §4.4: every method score is finite; ``("finite", message naming the first bad index)`` or None."""
    bad = ~np.isfinite(values)
    if not bad.any():
        return None
    i = int(np.argmax(bad))
    return "finite", f"non-finite score {values[i]} at sample {i}"
