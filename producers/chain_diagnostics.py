# SPDX-License-Identifier: MIT
"""The ``/diagnostics`` summary of a sampler's archive (SPEC.md §5.1): split-R-hat and bulk ESS over chains of the
log-posterior of every member and of the predictive probability of the true label on a fixed probe set (the first
``PROBE_SIZE`` samples of the in-domain test split), computed by :mod:`ubench.metrics.diagnostics`. numpy only."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..metrics.diagnostics import chain_diagnostics

__all__ = ["PROBE_SIZE", "diagnostics_summary", "record_chain_diagnostics"]

#: Probe samples whose predictive probabilities are tracked along the chains.
PROBE_SIZE = 100


def diagnostics_summary(infos: list[dict], probe_probs: np.ndarray, probe_labels: np.ndarray, *,
                        split: str) -> dict[str, Any]:
    """R-hat/ESS of ``info["log_posterior"]`` and of ``probe_probs[m, i, probe_labels[i]]`` per probe sample
    (max/median R-hat, min/median ESS over the probe), with members grouped by ``info["chain"]``.

    A value that is not finite is ``None`` (JSON null, which ``compare`` counts as unconverged): split-R-hat is NaN
    when half a chain holds one value (a short chain of rejected proposals), and the archive's summary is strict
    JSON, so a NaN must not cost the run its archive."""
    chains = np.array([int(i.get("chain", 0)) for i in infos])
    labels = list(dict.fromkeys(chains.tolist()))
    draws = min(int(np.sum(chains == c)) for c in labels)
    out: dict[str, Any] = {"chains": len(labels), "draws_per_chain": draws}
    if draws < 4:
        out["note"] = f"R-hat/ESS need at least 4 draws per chain; the chains hold {draws}"
        return out
    lp = [i.get("log_posterior") for i in infos]
    if all(isinstance(v, (int, float)) and np.isfinite(v) for v in lp):
        d = chain_diagnostics(np.array(lp, dtype=np.float64), chains)
        out["log_posterior"] = {"rhat": _finite(d["rhat"]), "ess_bulk": _finite(d["ess_bulk"])}
    p_true = probe_probs[:, np.arange(probe_probs.shape[1]), probe_labels].astype(np.float64)  # (M, P)
    per_sample = [chain_diagnostics(p_true[:, i], chains) for i in range(p_true.shape[1])
                  if np.ptp(p_true[:, i]) > 0]
    if per_sample:
        rhat = np.array([d["rhat"] for d in per_sample])
        ess = np.array([d["ess_bulk"] for d in per_sample])
        out["probe"] = {"split": split, "size": int(p_true.shape[1]), "quantity": "p(label)",
                        "rhat_max": _summary(np.max, rhat), "rhat_median": _summary(np.median, rhat),
                        "ess_bulk_min": _summary(np.min, ess), "ess_bulk_median": _summary(np.median, ess)}
    return out


def _finite(value) -> float | None:
    value = float(value)
    return value if np.isfinite(value) else None


def _summary(fn, values: np.ndarray) -> float | None:
    """``fn`` over the probe samples whose value is finite (None when none is)."""
    values = values[np.isfinite(values)]
    return float(fn(values)) if values.size else None


def record_chain_diagnostics(task: Any, writer: Any) -> None:
    """Write the ``/diagnostics`` summary of a sampler's finished members (all of them, also those an earlier, killed
    process wrote) through ``writer``; the probe is the first in-domain split with labels."""
    split = next((n for n, s in task.splits.items() if s.role == "in_domain" and s.labels is not None), None)
    if split is None:
        return
    rows = min(PROBE_SIZE, len(task.splits[split].labels))
    infos, probs = writer.finished_members(split, rows)
    # With --tta (tta_samples K > 1) a draw has K entries: the chains are its first augmentation's, one per draw.
    first = [k for k, info in enumerate(infos) if info.get("augmentation", 0) == 0]
    infos, probs = [infos[k] for k in first], probs[first]
    writer.set_diagnostics(diagnostics_summary(infos, probs, task.splits[split].labels[:rows], split=split))
