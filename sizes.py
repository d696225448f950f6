# SPDX-License-Identifier: MIT
"""Byte counts written as ``4G``, ``512M`` or a plain integer: the one parser behind every ``--memory-limit``-like
option (``cli_options.Size``, the importers, the edge commands) and ``scoring.sandbox``. A module of its own so
that parsing an option's default does not import the sandbox (start-up, issue #29)."""

from __future__ import annotations

__all__ = ["parse_size"]


def parse_size(text: str | int) -> int:
    """Bytes from ``"4G"``, ``"512M"``, ``"800k"`` or a plain integer (powers of 1024)."""
    if isinstance(text, int):
        return text
    s = str(text).strip().upper().removesuffix("IB").removesuffix("B")
    scale = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}.get(s[-1:], 1)
    number = s[:-1] if s[-1:] in "KMGT" and s[-1:] else s
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"size must look like 4G, 512M or 1048576; found {text!r}") from None
    if value <= 0:
        raise ValueError(f"size must be positive; found {text!r}")
    return int(value * scale)
