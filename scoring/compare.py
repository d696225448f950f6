# SPDX-License-Identifier: MIT
"""Whether two reports are on the same task, so that ``ubench compare`` never puts numbers side by side that do not
measure the same thing: the class count, the primary in-domain split, its size and its sample ids."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["task_difference"]


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
