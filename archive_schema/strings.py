# SPDX-License-Identifier: MIT
"""Archive strings: decoded strictly as UTF-8 and read within byte budgets (issue #16 items 1 and 3).

h5py decodes variable-length UTF-8 strings with ``surrogateescape``, so an invalid byte arrives as a lone
surrogate (``'\\udcff'``) that passes every check and crashes whoever later encodes it (the leaderboard page, the
HTML report). Fixed-length strings and link names arrive as bytes. :func:`utf8_problem` treats both alike: the
text must be exactly the strict UTF-8 decoding of the stored bytes.

A variable-length string dataset stores 16-byte references into a heap, and every element may reference the same
heap object: 2,000 elements of an 8 MB file decode to gigabytes. Its size is known only by reading, so
:func:`read_strings` reads such a dataset one element at a time and stops at the first element over the
per-string cap or when the running total leaves the per-dataset or per-file budget; a fixed-length dataset is
judged by its declared size before anything is read.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .blocks import read_all
from .safe_h5py import h5py

__all__ = ["utf8_problem", "decode_name", "text_bytes", "read_strings", "charge_metadata"]


def utf8_problem(value: str | bytes) -> str | None:
    """None when ``value`` is valid UTF-8 text, else a phrase naming the first bad byte and its byte offset."""
    if isinstance(value, (bytes, np.bytes_)):
        try:
            bytes(value).decode("utf-8")
            return None
        except UnicodeDecodeError as exc:
            return f"byte 0x{exc.object[exc.start]:02x} at byte offset {exc.start} is not valid UTF-8"
    try:
        value.encode("utf-8")
        return None
    except UnicodeEncodeError as exc:
        offset = len(value[: exc.start].encode("utf-8", "surrogateescape"))
        bad = value[exc.start].encode("utf-8", "surrogateescape")
        shown = f"byte 0x{bad[0]:02x}" if len(bad) == 1 else f"character U+{ord(value[exc.start]):04X}"
        return f"{shown} at byte offset {offset} is not valid UTF-8"


def decode_name(raw: bytes) -> str:
    """A link or attribute name for messages: strict UTF-8 when valid, else with ``\\xNN`` escapes."""
    return raw.decode("utf-8", "backslashreplace")


def text_bytes(value: Any) -> int:
    """Decoded size of an attribute value: UTF-8 bytes of text, array bytes plus the bytes of object elements."""
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogateescape"))
    if isinstance(value, (bytes, np.bytes_)):
        return len(value)
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "O":
            return value.nbytes + sum(text_bytes(v) for v in value.flat)
        return value.nbytes
    return int(np.asarray(value).nbytes)


def charge_metadata(scan, where: str, what: str, size: int) -> bool:
    """Add ``size`` decoded bytes to the file's metadata budget; False (with a finding) once it is exceeded."""
    limit = scan.limits.max_metadata_bytes
    if scan.metadata_bytes + size > limit:
        scan.add(where, "metadata-budget",
                 f"{what} ({size} bytes) would bring the file's attributes and strings to "
                 f"{scan.metadata_bytes + size} bytes; at most {limit} are read")
        return False
    scan.metadata_bytes += size
    return True


def read_strings(scan, ds: h5py.Dataset, path: str, item_bytes: int) -> list[str] | None:
    """A 1-D string dataset as a list of str, or None with a finding: not a string type, one string over
    ``item_bytes``, the dataset over ``limits.max_string_dataset_bytes`` or the file over
    ``limits.max_metadata_bytes`` (all in decoded UTF-8 bytes), or a string that is not valid UTF-8 (the
    finding names the index and the byte offset)."""
    info = h5py.check_string_dtype(ds.dtype)
    if info is None:
        scan.add(path, "dtype", f"must be a string dataset; found dtype {ds.dtype}")
        return None
    limit = scan.limits.max_string_dataset_bytes
    n = ds.shape[0]
    if info.length is not None:  # fixed-length: everything is known before reading
        if info.length > item_bytes:
            scan.add(path, "string-length", f"fixed-length strings of {info.length} bytes; at most {item_bytes}")
            return None
        declared = n * info.length
        if declared > limit:
            scan.add(path, "string-budget", f"{n} strings of {info.length} bytes declare {declared} bytes; "
                     f"a string dataset may hold at most {limit}")
            return None
        if not charge_metadata(scan, path, "the dataset", declared):
            return None
        raw = list(read_all(ds, scan.limits))
    else:
        raw, total = [], 0
        for i in range(n):
            value = ds[i]  # one element at a time: its size is known only once it is read
            size = len(value) if isinstance(value, bytes) else len(str(value).encode("utf-8", "surrogateescape"))
            if size > item_bytes:
                scan.add(path, "string-length", f"string at index {i} is {size} bytes; at most {item_bytes}")
                return None
            total += size
            if total > limit:
                scan.add(path, "string-budget", f"strings up to index {i} decode to {total} bytes; a string "
                         f"dataset may hold at most {limit}")
                return None
            if not charge_metadata(scan, path, f"string at index {i}", size):
                return None
            raw.append(value)
    out = []
    for i, value in enumerate(raw):
        problem = utf8_problem(value)
        if problem is not None:
            scan.add(path, "encoding", f"string at index {i}: {problem}")
            return None
        out.append(bytes(value).decode("utf-8") if isinstance(value, (bytes, np.bytes_)) else str(value))
    return out
