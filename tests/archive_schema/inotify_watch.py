# SPDX-License-Identifier: MIT
"""A Linux inotify watcher through ctypes: proves that validating an archive opens no file outside it.

``FileWatch(paths)`` adds an ``IN_OPEN | IN_ACCESS`` watch on each path (a file, or a directory: then any file in
it counts) and ``events()`` drains the queue without blocking. Used as a context manager.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct
from pathlib import Path

IN_ACCESS = 0x00000001
IN_OPEN = 0x00000020
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then `len` bytes of name

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.inotify_init1.argtypes = [ctypes.c_int]
_libc.inotify_init1.restype = ctypes.c_int
_libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
_libc.inotify_add_watch.restype = ctypes.c_int


class FileWatch:
    """Record every open or read of ``paths`` from the moment of construction."""

    def __init__(self, paths):
        self.fd = _libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.watches: dict[int, Path] = {}
        for p in paths:
            wd = _libc.inotify_add_watch(self.fd, os.fsencode(p), IN_OPEN | IN_ACCESS)
            if wd < 0:
                err = ctypes.get_errno()
                os.close(self.fd)
                raise OSError(err, f"inotify_add_watch failed for {p}")
            self.watches[wd] = Path(p)

    def events(self) -> list[tuple[Path, int, str]]:
        """Drain pending events: ``(watched path, mask, name inside a watched directory or '')``."""
        out = []
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                return out
            except OSError as exc:  # pragma: no cover - EAGAIN spelled differently
                if exc.errno == errno.EAGAIN:
                    return out
                raise
            pos = 0
            while pos < len(buf):
                wd, mask, _cookie, length = _EVENT.unpack_from(buf, pos)
                name = buf[pos + _EVENT.size : pos + _EVENT.size + length].rstrip(b"\0").decode()
                out.append((self.watches.get(wd, Path("?")), mask, name))
                pos += _EVENT.size + length

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> FileWatch:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
