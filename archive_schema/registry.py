# SPDX-License-Identifier: MIT
"""Readers by archive version, filled at import by ``@register_reader``; nothing registers at run time."""

from __future__ import annotations

from collections.abc import Callable

from .errors import UnsupportedArchiveError
from .spec import ArchiveSpec

__all__ = ["READERS", "register_reader", "reader_for"]

READERS: dict[ArchiveSpec, Callable] = {}


def register_reader(spec: ArchiveSpec) -> Callable[[Callable], Callable]:
    """Register the structural reader of one released version (frozen after release)."""

    def decorate(fn: Callable) -> Callable:
        if spec in READERS:
            raise RuntimeError(f"a reader for {spec} is already registered")
        READERS[spec] = fn
        return fn

    return decorate


def reader_for(found: ArchiveSpec, path: str) -> tuple[Callable, str | None]:
    """The reader for ``found``, and a note when a newer minor version is read by an older reader.

    Same major and a newer minor: read with the newest reader of that major, plus a note. Anything else unknown
    raises ``UnsupportedArchiveError`` naming the file, the version found and the versions this ubench reads.
    """
    if found in READERS:
        return READERS[found], None
    same_format = sorted(s for s in READERS if s.format == found.format)
    known = ", ".join(s.version for s in same_format) or "none"
    try:
        major, minor = found.major, found.minor
    except (ValueError, IndexError):
        raise UnsupportedArchiveError(
            f"{path}: ubench_format_version {found.version!r} is not of the form MAJOR.MINOR; "
            f"this ubench reads {found.format} versions {known}"
        ) from None
    candidates = [s for s in same_format if s.major == major and s.minor < minor]
    if found.format != "prediction-archive" and not same_format:
        raise UnsupportedArchiveError(f"{path}: ubench_format {found.format!r} is not a ubench prediction archive")
    if not candidates:
        raise UnsupportedArchiveError(
            f"{path}: archive format version {found.version} is not supported; this ubench reads versions {known}"
            " — upgrade ubench to read it"
        )
    best = candidates[-1]
    return READERS[best], (
        f"archive version {found.version} is newer than this ubench's {best.version}; read as {best.version}"
        " (fields added since are ignored — upgrade ubench to read them)"
    )
