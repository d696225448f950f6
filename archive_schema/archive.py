# SPDX-License-Identifier: MIT
"""In-memory views of an archive: what the writer takes (``SplitSpec``) and what every reader returns
(``ArchiveHeader`` for metadata, ``PredictionArchive`` for metadata plus arrays)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .spec import ROLES

__all__ = ["SplitSpec", "SplitInfo", "MemberInfo", "ArchiveHeader", "PredictionArchive"]


@dataclass(frozen=True)
class SplitInfo:
    """Metadata of one split: its role, source dataset, size and (for shifts) kind and intensity."""

    name: str
    role: str
    dataset: str
    n_samples: int
    shift_kind: str | None = None
    shift_intensity: float | None = None
    has_labels: bool = False
    has_sample_ids: bool = False
    #: sha256 of the split's inputs in the ``ubench-inputs/1`` encoding (SPEC.md §4.2), when the writer gave it.
    inputs_sha256: str | None = None
    #: Format 1.1 (SPEC.md §4.3): the split stores per-member logits beside its probabilities.
    has_logits: bool = False
    #: Format 1.1 (SPEC.md §4.4): method score name -> direction (``uncertainty`` or ``confidence``).
    scores: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SplitSpec:
    """What a producer declares about a split before writing members (see ``ArchiveWriter``).

    ``labels`` and ``sample_ids`` are optional int arrays of shape (n_samples,); ``n_samples`` is needed only
    when neither is given.
    """

    role: str
    dataset: str
    labels: ArrayLike | None = None
    sample_ids: ArrayLike | None = None
    n_samples: int | None = None
    shift_kind: str | None = None
    shift_intensity: float | None = None
    #: ``archive_schema.fingerprint.inputs_sha256`` of the split's inputs (optional, SPEC.md §4.2).
    inputs_sha256: str | None = None

    def resolved_n_samples(self, name: str) -> int:
        sizes = {len(np.asarray(a)) for a in (self.labels, self.sample_ids) if a is not None}
        if self.n_samples is not None:
            sizes.add(int(self.n_samples))
        if len(sizes) != 1:
            raise ValueError(
                f"split {name!r}: give n_samples or labels/sample_ids of one length; found sizes {sorted(sizes)}"
            )
        return sizes.pop()

    def check(self, name: str) -> None:
        if self.role not in ROLES:
            raise ValueError(f"split {name!r}: role must be one of {ROLES}; found {self.role!r}")
        if (self.role == "shift") != (self.shift_kind is not None and self.shift_intensity is not None):
            raise ValueError(
                f"split {name!r}: shift_kind and shift_intensity are required for role 'shift' and only for it"
            )


@dataclass(frozen=True)
class MemberInfo:
    """How one member was obtained. ``epoch``/``step`` are -1 when unknown; ``info`` is free JSON metadata."""

    seed: int
    epoch: int = -1
    step: int = -1
    kind: str = "independent"
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ArchiveHeader:
    """Everything in an archive except the arrays."""

    path: str
    format_version: str
    method: str
    model: str
    dataset: str
    n_classes: int
    n_members: int
    splits: dict[str, SplitInfo]
    members: tuple[MemberInfo, ...]
    class_names: tuple[str, ...] | None = None
    provenance: dict[str, str] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    scalability: dict[str, Any] | None = None
    diagnostics: dict[str, Any] | None = None
    description: str = ""
    notes: tuple[str, ...] = ()

    def splits_with_role(self, role: str) -> list[str]:
        return [name for name, s in self.splits.items() if s.role == role]


@dataclass(frozen=True, eq=False)
class PredictionArchive:
    """A whole archive in memory: the header plus, per split, ``probs`` (M, N, C) and optional labels/ids, and
    (format 1.1) optional ``logits`` (M, N, C) and method ``scores`` (name -> (N,))."""

    header: ArchiveHeader
    probs: dict[str, NDArray[np.floating]]
    labels: dict[str, NDArray[np.int64] | None]
    sample_ids: dict[str, NDArray[np.int64] | None]
    logits: dict[str, NDArray[np.floating] | None] = field(default_factory=dict)
    scores: dict[str, dict[str, NDArray[np.floating]]] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        # Header fields and methods read through (``archive.method``, ``archive.splits_with_role``).
        if name != "header" and hasattr(ArchiveHeader, name) or name in {f.name for f in fields(ArchiveHeader)}:
            return getattr(self.header, name)
        raise AttributeError(name)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PredictionArchive):
            return NotImplemented

        def same(a: dict, b: dict) -> bool:
            return a.keys() == b.keys() and all(
                (a[k] is None and b[k] is None)
                or (a[k] is not None and b[k] is not None and a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]))
                for k in a
            )

        def present(d: dict) -> dict:  # a split without logits or scores: absent, None or {} alike
            return {k: v for k, v in d.items() if v is not None and (not isinstance(v, dict) or v)}

        strip = {"path", "notes"}
        ha = {f.name: getattr(self.header, f.name) for f in fields(ArchiveHeader) if f.name not in strip}
        hb = {f.name: getattr(other.header, f.name) for f in fields(ArchiveHeader) if f.name not in strip}
        ha["provenance"] = {k: v for k, v in ha["provenance"].items() if k != "created"}
        hb["provenance"] = {k: v for k, v in hb["provenance"].items() if k != "created"}
        return (
            ha == hb
            and same(self.probs, other.probs)
            and same(self.labels, other.labels)
            and same(self.sample_ids, other.sample_ids)
            and same(present(self.logits), present(other.logits))
            and present(self.scores).keys() == present(other.scores).keys()
            and all(same(self.scores[k], other.scores[k]) for k in present(self.scores))
        )

    __hash__ = None  # type: ignore[assignment]
