# SPDX-License-Identifier: MIT
"""``ubench compare`` beyond the table: whether two reports are on the same task (the class count, the primary
in-domain split, its size and its sample ids), so that numbers that do not measure the same thing are never put
side by side; the paired comparisons of methods on their shared samples (``paired``), runs of one method grouped
(``--group-by method``), and DEE's interval. The statistics live in ``metrics/paired.py``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["task_difference", "paired_section", "grouped_section", "dee_interval", "strip_samples"]


def _task(report: Mapping[str, Any]) -> dict[str, Any]:
    archive = report["archive"]
    primary = report.get("primary_split")
    split = archive.get("splits", {}).get(primary, {}) if primary is not None else {}
    return {"n_classes": archive.get("n_classes"), "primary": primary, "n_samples": split.get("n_samples"),
            "ids": split.get("sample_ids_sha256")}


def task_difference(report: Mapping[str, Any], baseline: Mapping[str, Any]) -> str | None:
    """The first way ``report`` is on another task than ``baseline``, in words, or None when they match.

    Sample ids are compared only when both archives have them (by their sha256 in the report).
    """
    a, b = _task(report), _task(baseline)
    if a["n_classes"] != b["n_classes"]:
        return f"{a['n_classes']} classes, not {b['n_classes']}"
    if a["primary"] != b["primary"]:
        return f"primary in-domain split {a['primary']!r}, not {b['primary']!r}"
    if a["n_samples"] != b["n_samples"]:
        return f"{a['n_samples']} samples in split {a['primary']!r}, not {b['n_samples']}"
    if a["ids"] is not None and b["ids"] is not None and a["ids"] != b["ids"]:
        return f"other sample ids in split {a['primary']!r}"
    return None


def _samples_or_none(report: Mapping[str, Any]) -> Mapping[str, Any] | None:
    s = report.get("samples")
    return s if s and s.get("splits") else None


def paired_section(reports: Sequence[Mapping[str, Any]], names: Sequence[str], *, level: float, n_replicates: int,
                   seed: int, tpr: float = 0.95, replicates: Sequence[Mapping[str, Any]] | None = None
                   ) -> dict[str, Any]:
    """Paired comparisons of the methods (``metrics/paired.py``): for every comparable key that all of them have,
    the best method and each other's difference to it, Holm-adjusted over the other methods.

    Returns ``{"paired": [...rows...], "best": {key: name}, "tied": {key: [names]}, "notes": [...]}``: ``tied``
    lists the best and every method not distinguishable from it. Reports without ``samples`` (the sandbox was
    asked for none, or their task differs: ``[other task]`` in the name) are left out, with a note.
    """
    from ..metrics.paired import HIGHER_IS_BETTER, paired_comparisons, sample_replicates

    if replicates is not None:  # given (grouped runs): every row takes part
        keep = list(range(len(reports)))
    else:
        keep = [i for i, r in enumerate(reports) if _samples_or_none(r) is not None and not names[i].endswith(
            "[other task]")]
    notes = [f"{names[i]}: left out of the paired comparisons (no per-sample statistics or another task)"
             for i in range(len(reports)) if i not in keep]
    out: dict[str, Any] = {"paired": [], "best": {}, "tied": {}, "notes": notes}
    if len(keep) < 2:
        return out
    reps = list(replicates) if replicates is not None else sample_replicates(
        [reports[i]["samples"] for i in keep], n_replicates=n_replicates, seed=seed, tpr=tpr)
    for key in HIGHER_IS_BETTER:
        # the methods that have the key (a one-member archive has no knowledge score)
        have = [(i, r) for i, r in zip(keep, reps) if key in r and reports[i]["summary"].get(key) is not None]
        if len(have) < 2:
            continue
        values = {names[i]: reports[i]["summary"][key] for i, _ in have}
        best, rows = paired_comparisons(values, {names[i]: r[key] for i, r in have}, metric=key,
                                        higher_is_better=HIGHER_IS_BETTER[key], level=level)
        out["paired"] += rows
        out["best"][key] = best
        out["tied"][key] = [best] + [r["b"] for r in rows if not r["distinguishable"]]
    if len(keep) > 2:
        out["notes"].append(f"paired comparisons: each method against the best of each column; p-values "
                            f"Holm-adjusted over the {len(keep) - 1} comparisons of a column (p_holm)")
    return out


def dee_interval(report: Mapping[str, Any], ensemble_report: Mapping[str, Any]) -> list[float] | None:
    """DEE's interval: the CLL interval (shifted to the CLL that DEE reads) mapped through the reference curve's
    band, its low end through ``mean + std`` (``dee_lower``), its high end through ``mean - std`` (``dee_upper``),
    so that it holds the method's test-sample error and the reference's spread over member orders."""
    from ..metrics.dee import dee_score
    from .dee import _dee_cll, _primary, reference_curve

    iv = ((report.get("intervals") or {}).get("summary") or {}).get("cll")
    cll = report["summary"].get("cll")
    if iv is None or cll is None:
        return None
    dee_cll, _ = _dee_cll(_primary(report, "method"))
    mean, std = reference_curve(ensemble_report)
    lo = dee_score(dee_cll + (iv[0] - cll), mean, std)
    hi = dee_score(dee_cll + (iv[1] - cll), mean, std)
    return [float(lo.lower), float(hi.upper)]


def strip_samples(reports: Sequence[dict[str, Any]]) -> None:
    """Drop every report's ``samples`` (per-sample columns: for the comparison, not for the output)."""
    for r in reports:
        r.pop("samples", None)


def grouped_section(reports: Sequence[Mapping[str, Any]], names: Sequence[str], *, level: float,
                    n_replicates: int, seed: int, tpr: float = 0.95) -> dict[str, Any]:
    """``compare --group-by method``: the archives of one method (its training seeds) as one row.

    Returns ``{"groups": [{method, archives, n_runs, summary: {key: {mean, sd, interval}}}], "paired": ...,
    "best": ..., "tied": ..., "notes": ...}``: per comparable key the mean and sd over runs and the two-level
    bootstrap interval of :func:`ubench.metrics.paired.group_runs` (runs and test samples resampled together;
    Bouthillier et al. 2021), and paired comparisons between the groups on those replicates.
    """
    import numpy as np

    from ..metrics.paired import HIGHER_IS_BETTER, group_runs, sample_replicates

    keep = [i for i, r in enumerate(reports) if _samples_or_none(r) is not None and not names[i].endswith(
        "[other task]")]
    reps = dict(zip(keep, sample_replicates([reports[i]["samples"] for i in keep], n_replicates=n_replicates,
                                            seed=seed, tpr=tpr))) if keep else {}
    by_method: dict[str, list[int]] = {}
    for i in keep:
        by_method.setdefault(str(reports[i]["archive"].get("method")), []).append(i)
    rng = np.random.default_rng([seed, 3])
    groups, group_reps, group_values = [], [], []
    for method, idx in by_method.items():
        summary, combined, means = {}, {}, {}
        for key in HIGHER_IS_BETTER:
            vals = [reports[i]["summary"].get(key) for i in idx]
            if any(v is None for v in vals) or not all(key in reps[i] for i in idx):
                continue
            g = group_runs(vals, [reps[i][key] for i in idx], rng=rng, level=level)
            combined[key], means[key] = g.pop("replicates"), g["mean"]
            summary[key] = {k: g[k] for k in ("mean", "sd", "interval")}
        groups.append({"method": method, "archives": [names[i] for i in idx], "n_runs": len(idx),
                       "summary": summary})
        group_reps.append(combined)
        group_values.append({"summary": means})
    labels = [f"{g['method']} ({g['n_runs']} runs)" for g in groups]
    out = paired_section(group_values, labels, level=level, n_replicates=n_replicates, seed=seed,
                         replicates=group_reps) if len(groups) > 1 else {"paired": [], "best": {}, "tied": {},
                                                                         "notes": []}
    return {"groups": groups, **out}
