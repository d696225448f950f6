# SPDX-License-Identifier: MIT
"""A plain-dict description of an open archive (``ubench inspect``), always valid strict JSON."""

from __future__ import annotations

import math
import os
from dataclasses import asdict
from typing import Any

import numpy as np

from .reader import ArchiveReader

__all__ = ["describe_archive", "json_safe"]


def json_safe(value: Any) -> Any:
    """``value`` with everything strict JSON (RFC 8259) cannot hold replaced, so ``json.dumps(..., allow_nan=False)``
    never fails on what a valid archive may carry (``config`` and ``/members/info`` are parsed by Python's
    ``json``, which reads ``NaN``, ``Infinity`` and ``1e999``; ``/scalability`` holds any HDF5 attribute).

    - a non-finite float becomes the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"`` (JavaScript's spelling;
      a string, not null, so a reader can tell it from a missing value);
    - ``bytes`` (an opaque attribute) becomes a string: UTF-8 where it decodes, ``\\xNN`` escapes elsewhere;
    - a complex number becomes ``[real, imag]``;
    - a NumPy array or scalar becomes the list or Python value it holds (converted the same way);
    - mapping keys become strings; anything else unknown (an HDF5 reference) becomes its ``repr``.
    """
    if isinstance(value, (str, bool, int)) or value is None:
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="backslashreplace")
    if isinstance(value, complex):
        return [json_safe(value.real), json_safe(value.imag)]
    if isinstance(value, np.ndarray):
        return json_safe(value.tolist())
    if isinstance(value, np.generic):
        return json_safe(value.item())
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return repr(value)


def describe_archive(reader: ArchiveReader) -> dict[str, Any]:
    """Metadata, splits (role, shape, dtype, bytes stored) and members of an open archive, as strict-JSON-safe
    values (see :func:`json_safe`)."""
    h = reader.header
    splits = []
    for name, s in h.splits.items():
        ds = reader.dataset(name)
        splits.append({**asdict(s), "shape": list(ds.shape), "dtype": str(ds.dtype),
                       "stored_bytes": int(ds.id.get_storage_size()), "declared_bytes": int(ds.nbytes)})
    return json_safe({
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
        "diagnostics": h.diagnostics,
        "description": h.description,
        "splits": splits,
        "members": [asdict(m) for m in h.members],
        "notes": [str(f) for f in reader.findings],
    })
