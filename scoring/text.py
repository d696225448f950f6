# SPDX-License-Identifier: MIT
"""Text from an upload made safe to show: on a terminal, in an HTML page, in a figure.

An archive's strings (method, model, dataset, shift kind, class names, ``/scalability`` keys and values, writer),
the HDF5 object names in findings and the names of uploaded files are untrusted. Shown raw, an ``ESC [2J``
clears the screen, an ``OSC 0;…BEL`` retitles the window (and survives pipes into a pager), a newline in a file
name forges a progress line, a right-to-left override (U+202E) reorders what follows it, and a lone surrogate (an
invalid UTF-8 byte decoded with ``surrogateescape``, as h5py and ``os.fsdecode`` do) makes every UTF-8 write
raise ``UnicodeEncodeError``. :func:`escape_text` is the one function that turns all of these into visible
escapes; every text output of ubench goes through it (``escape_lines`` at the CLI's echo, the table formatters,
the HTML pages via :func:`html_text`, the figures' labels via :func:`shorten`). JSON output is already safe: it
is written with ``ensure_ascii``, so controls and surrogates appear as ``\\uXXXX`` escapes and round-trip.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["escape_text", "escape_lines", "shorten", "html_text", "UNSAFE_CHARACTERS"]

#: What :func:`escape_text` escapes: C0 controls, DEL and C1 controls (category Cc), the bidirectional
#: formatting characters (ALM U+061C, LRM/RLM U+200E-200F, the embeddings and overrides U+202A-202E, the
#: isolates U+2066-2069; the "Trojan Source" set, CVE-2021-42574), the line and paragraph separators
#: (U+2028-2029) and lone surrogates (U+D800-DFFF), which no UTF-8 encoder accepts.
_NON_C0 = "\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ud800-\udfff"
UNSAFE_CHARACTERS = "\x00-\x1f" + _NON_C0

_UNSAFE = re.compile(f"[{UNSAFE_CHARACTERS}]")
_UNSAFE_BUT_NEWLINE = re.compile(f"[\x00-\x09\x0b-\x1f{_NON_C0}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _visible(match: re.Match) -> str:
    ch = match.group()
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def escape_text(value: Any) -> str:
    r"""``str(value)`` with every character of :data:`UNSAFE_CHARACTERS` replaced by a visible escape.

    ``\n``, ``\r`` and ``\t`` become those two characters; other code points up to U+00FF become ``\xNN``
    and the rest ``\uNNNN`` (a byte ``0xff`` that ``surrogateescape`` decoded shows as ``\udcff``). Everything
    else, backslashes included, is kept: the result is for people, and the JSON output is the exact record.

    Examples
    --------
    >>> escape_text("rot\x1b[2J\u202e\n")
    'rot\\x1b[2J\\u202e\\n'
    >>> escape_text(b"m\xff".decode("utf-8", "surrogateescape"))
    'm\\udcff'
    """
    text = value if isinstance(value, str) else str(value)
    return _UNSAFE.sub(_visible, text)


def escape_lines(text: str) -> str:
    """Text ubench formatted itself, its line breaks kept and everything else :func:`escape_text` escapes
    escaped (the last guard before a terminal: a value formatted without escaping still cannot act on it)."""
    return _UNSAFE_BUT_NEWLINE.sub(_visible, text)


def shorten(value: Any, limit: int) -> str:
    """:func:`escape_text` of the first ``limit`` characters of ``str(value)``, with ``...(N more characters)``
    when it was longer: a label or a table cell of bounded size whatever the upload holds."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return escape_text(text)
    return f"{escape_text(text[:limit])}...({len(text) - limit} more characters)"


def html_text(value: Any, limit: int | None = None) -> str:
    """Text for an HTML page or attribute: :func:`escape_text` (or :func:`shorten` with ``limit``), then
    ``html.escape`` with quotes; ``None`` becomes the empty string."""
    if value is None:
        return ""
    import html  # at use: its entity tables are a few ms of every CLI start-up (issue #29)

    return html.escape(escape_text(value) if limit is None else shorten(value, limit), quote=True)
