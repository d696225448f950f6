# SPDX-License-Identifier: MIT
r"""Agreement with a reference posterior (``ubench compare … --reference-posterior hmc.h5``): for each archive, the
agreement and total variation (:mod:`ubench.metrics.agreement`; Izmailov et al. 2021) of its predictive
distribution (the mean over members) with the reference posterior's, on the reference's primary in-domain split.

A reference is only a reference once its chains have converged (issue #30): :func:`convergence_problems` reads the
``/diagnostics`` the sampler wrote (SPEC.md §5.1) and names every quantity whose split-:math:`\hat R` exceeds
:data:`MAX_RHAT` or whose bulk ESS is below :data:`MIN_ESS` (the log-posterior, and the worst probe sample), or
says that the archive has no diagnostics; ``compare`` refuses such a reference unless ``--allow-unconverged``.

The archives are read in this process with the safe reader (value-checked block by block); ``compare`` refuses the
option where it would sandbox (uploads scored against a reference file), so a host never reads strangers' files
here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..archive_schema import open_archive
from ..metrics.agreement import predictive_agreement, total_variation

__all__ = ["MAX_RHAT", "MIN_ESS", "agreement_with", "convergence_problems", "predictive_mean", "reference_diagnostics"]

#: A converged reference: split-R-hat at most this on the log-posterior and on every probe sample ...
MAX_RHAT = 1.05
#: ... and bulk ESS at least this on the log-posterior and on every probe sample.
MIN_ESS = 100.0


class PosteriorMismatchError(ValueError):
    """The archive and the reference posterior do not predict on the same samples."""


def predictive_mean(path: str | Path, split: str | None = None) -> tuple[str, np.ndarray, np.ndarray | None]:
    """``(split, mean over members (N, C) float64, sample ids or None)`` of ``split`` (default: the first in-domain
    split), accumulated block by block."""
    with open_archive(path, check_values=False) as r:
        h = r.header
        if split is None:
            split = next((n for n, s in h.splits.items() if s.role == "in_domain"), None)
            if split is None:
                raise PosteriorMismatchError(f"{path}: no in-domain split to compare predictive distributions on")
        if split not in h.splits:
            raise PosteriorMismatchError(f"{path}: has no split {split!r} (the reference posterior's primary split)")
        s = h.splits[split]
        total = np.zeros((s.n_samples, h.n_classes), dtype=np.float64)
        for start, block in r.iter_checked_probs(split):
            total[start: start + block.shape[1]] += block.sum(axis=0, dtype=np.float64)
        return split, total / h.n_members, r.sample_ids(split)


def agreement_with(path: str | Path, reference: tuple[str, np.ndarray, np.ndarray | None]) -> dict:
    """``{"split", "agreement", "total_variation"}`` of ``path``'s predictive against ``reference``, the reference
    posterior's :func:`predictive_mean` (read once by the caller for all archives)."""
    split, ref, ref_ids = reference
    _, mean, ids = predictive_mean(path, split)
    if mean.shape != ref.shape:
        raise PosteriorMismatchError(f"{path}: split {split!r} has shape {mean.shape}, the reference posterior "
                                     f"{ref.shape}")
    if ref_ids is not None and ids is not None and not np.array_equal(ids, ref_ids):
        first = int(np.argmax(ids != ref_ids))
        raise PosteriorMismatchError(f"{path}: split {split!r} sample_ids differ from the reference posterior's, "
                                     f"first at index {first}")
    return {"split": split, "agreement": predictive_agreement(mean, ref), "total_variation": total_variation(mean, ref)}


def reference_diagnostics(path: str | Path) -> dict | None:
    """The reference posterior's ``/diagnostics`` summary (None when it has none)."""
    with open_archive(path, check_values=False) as r:
        return r.header.diagnostics


def convergence_problems(diagnostics: dict | None) -> list[str]:
    """What keeps a sampler's archive from being a converged reference: one phrase per quantity whose R-hat is
    above :data:`MAX_RHAT` (or NaN) or whose bulk ESS is below :data:`MIN_ESS`; empty when it has converged."""
    if not diagnostics:
        return ["it records no convergence diagnostics (/diagnostics: a sampler's archive has them)"]
    problems = []
    checks = [("log_posterior", "log-posterior", "rhat", "ess_bulk"),
              ("probe", "probe p(label)", "rhat_max", "ess_bulk_min")]
    for key, label, rhat_key, ess_key in checks:
        d = diagnostics.get(key)
        if not isinstance(d, dict):
            why = f" ({diagnostics['note']})" if diagnostics.get("note") else ""
            problems.append(f"no {label} R-hat/ESS{why}")
            continue
        rhat, ess = d.get(rhat_key), d.get(ess_key)
        worst = " (worst sample)" if key == "probe" else ""
        if not (isinstance(rhat, (int, float)) and rhat <= MAX_RHAT):
            problems.append(f"{label} R-hat{worst} {_fmt(rhat)} > {MAX_RHAT}")
        if not (isinstance(ess, (int, float)) and ess >= MIN_ESS):
            problems.append(f"{label} bulk ESS{worst} {_fmt(ess)} < {MIN_ESS:g}")
    return problems


def _fmt(value) -> str:
    return f"{value:.3g}" if isinstance(value, (int, float)) else str(value)
