# SPDX-License-Identifier: MIT
"""A plain-dict description of an open archive (``ubench inspect``)."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

from .reader import ArchiveReader

__all__ = ["describe_archive"]


def describe_archive(reader: ArchiveReader) -> dict[str, Any]:
    """Metadata, splits (role, shape, dtype, bytes stored) and members of an open archive."""
    h = reader.header
    splits = []
    for name, s in h.splits.items():
        ds = reader.dataset(name)
        splits.append({**asdict(s), "shape": list(ds.shape), "dtype": str(ds.dtype),
                       "stored_bytes": int(ds.id.get_storage_size()), "declared_bytes": int(ds.nbytes)})
    return {
        "path": h.path,
        "file_bytes": os.path.getsize(h.path),
        "format_version": h.format_version,
        "method": h.method,
        "model": h.model,
        "dataset": h.dataset,
        "n_classes": h.n_classes,
        "n_members": h.n_members,
        "class_names": list(h.class_names) if h.class_names else None,
        "provenance": dict(h.provenance),
        "config": h.config,
        "scalability": h.scalability,
        "description": h.description,
        "splits": splits,
        "members": [asdict(m) for m in h.members],
        "notes": [str(f) for f in reader.findings],
    }
