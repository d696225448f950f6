# SPDX-License-Identifier: MIT
"""Whether two archives are on the same task, so that ``ubench compare`` never puts numbers side by side that do not
measure the same thing: the class count, the primary in-domain split, its size and its sample ids.

The task is read from a score report (:func:`report_task`) or, before anything is scored, from the archive's
metadata, labels and sample ids alone (:func:`archive_task`: no prediction is read), so that ``compare`` refuses
archives on another task at once instead of after scoring them all (issue #28 item 8). Differences are worded by
the datasets the splits claim, not only by their sizes.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["task_difference", "report_task", "archive_task", "difference"]


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
