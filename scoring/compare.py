# SPDX-License-Identifier: MIT
"""``ubench compare`` beyond the table.

* Whether two archives are on the same task, so that numbers that do not measure the same thing are never put side
  by side: the class count, the primary in-domain split, its size and its sample ids. The task is read from a score
  report (:func:`report_task`) or, before anything is scored, from the archive's metadata, labels and sample ids
  alone (:func:`archive_task`: no prediction is read), so that ``compare`` refuses archives on another task at once
  instead of after scoring them all. Differences are worded by the datasets the splits claim, not only by sizes.
* The paired comparisons of methods on their shared samples (``paired``), runs of one method grouped
  (``--group-by method``), and DEE's interval. The statistics live in ``metrics/paired.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["task_difference", "report_task", "archive_task", "difference", "paired_section", "grouped_section",
           "dee_interval", "strip_samples"]


def report_task(report: Mapping[str, Any]) -> dict[str, Any]:
    """The task of a score report: ``dataset`` (the primary split's, else the archive's), ``n_classes``,
    ``primary``, ``n_samples``, ``ids`` (the sha256 of the primary split's sample ids, or None); and ``method``,
    for messages."""
    archive = report["archive"]
    primary = report.get("primary_split")
    split = archive.get("splits", {}).get(primary, {}) if primary is not None else {}
    return {"method": archive.get("method"), "dataset": split.get("dataset") or archive.get("dataset"),
            "n_classes": archive.get("n_classes"), "primary": primary, "n_samples": split.get("n_samples"),
            "ids": split.get("sample_ids_sha256")}


def archive_task(path: str | Path, *, primary: str | None = None) -> dict[str, Any]:
    """The task of an archive as :func:`report_task` gives it for its report, read without scoring: the header,
    the labels of the in-domain splits (which decide the primary split, as ``score`` decides it) and the primary
    split's sample ids. ``primary`` is a reference's primary split (the reference decides it then).

    Raises what :func:`~ubench.archive_schema.open_archive` raises for an unreadable or invalid archive.
    """
    from ..archive_schema import open_archive
    from ..metrics.report import primary_split
    from .score import _ids_digest

    with open_archive(path, check_values=False) as reader:
        h = reader.header
        if primary is None:
            in_domain = h.splits_with_role("in_domain")
            primary = primary_split(in_domain, {s for s in in_domain if h.splits[s].has_labels})
        split = h.splits.get(primary) if primary is not None else None
        ids = reader.sample_ids(primary) if split is not None else None
        return {"method": h.method, "dataset": (split.dataset if split is not None else None) or h.dataset,
                "n_classes": h.n_classes,
                "primary": primary, "n_samples": None if split is None else split.n_samples,
                "ids": _ids_digest(ids)}


def _of(task: Mapping[str, Any]) -> str:
    return f"{task['dataset']!r}" if task.get("dataset") else "an unnamed dataset"


def difference(a: Mapping[str, Any], b: Mapping[str, Any]) -> str | None:
    """The first way task ``a`` differs from task ``b`` (:func:`report_task`, :func:`archive_task`), in words that
    name both datasets, or None when they match. Sample ids are compared only when both have them."""
    same_data = a.get("dataset") == b.get("dataset")
    if a["n_classes"] != b["n_classes"]:
        return f"{a['n_classes']} classes ({_of(a)}), not {b['n_classes']} ({_of(b)})"
    if a["primary"] != b["primary"]:
        return f"primary in-domain split {a['primary']!r} of {_of(a)}, not {b['primary']!r} of {_of(b)}"
    if a["n_samples"] != b["n_samples"]:
        if same_data:
            return f"{a['n_samples']} samples of {_of(a)} in split {a['primary']!r}, not {b['n_samples']}"
        return (f"dataset {_of(a)} ({a['n_samples']} samples in split {a['primary']!r}), not {_of(b)} "
                f"({b['n_samples']} samples)")
    if a["ids"] is not None and b["ids"] is not None and a["ids"] != b["ids"]:
        return (f"other sample ids in split {a['primary']!r} of {_of(a)}"
                + ("" if same_data else f" (the other archive's split is of {_of(b)})"))
    return None


def task_difference(report: Mapping[str, Any], baseline: Mapping[str, Any]) -> str | None:
    """The first way ``report`` is on another task than ``baseline``, in words, or None when they match
    (:func:`difference` of their :func:`report_task`)."""
    return difference(report_task(report), report_task(baseline))


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
