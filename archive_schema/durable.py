# SPDX-License-Identifier: MIT
"""Durable, atomic file replacement: write under a temporary name in the target's directory, fsync, rename."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path", "fsync_dir"]


def fsync_dir(directory: Path) -> None:
    """Make a rename or creation inside ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; on success fsync it and rename it over ``target``.

    On an exception the temporary file is removed and ``target`` is untouched, so a reader sees either the old
    file or the complete new one, never a half-written one.
    """
    target = Path(target)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
        fsync_dir(target.parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
