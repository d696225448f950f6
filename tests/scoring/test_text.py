# SPDX-License-Identifier: MIT
"""scoring/text.py against Unicode's own tables (unicodedata): every code point, and strings from hypothesis."""

from __future__ import annotations

import html
import os
import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from ubench.scoring.text import escape_lines, escape_text, html_text, shorten

#: Bidirectional classes of the embedding, override and isolate controls (U+202A-202E, U+2066-2069).
BIDI_CONTROLS = {"LRE", "RLE", "PDF", "LRO", "RLO", "LRI", "RLI", "FSI", "PDI"}


def _unsafe(c: str) -> bool:
    """The oracle: what may not reach a terminal or a page raw (control, surrogate, line/paragraph separator,
    bidi control; the implicit marks LRM, RLM and ALM as the Trojan Source paper lists them)."""
    return (unicodedata.category(c) in ("Cc", "Cs", "Zl", "Zp") or unicodedata.bidirectional(c) in BIDI_CONTROLS
            or c in "\u200e\u200f\u061c")


def test_every_code_point_is_kept_or_escaped_as_unicode_says():
    """For every code point: an unsafe one becomes a visible escape made of printable ASCII that names it
    (``\\xNN`` up to U+00FF, ``\\uNNNN`` above; ``\\n``, ``\\r``, ``\\t``); every other one is kept as it is."""
    for cp in range(0x110000):
        c = chr(cp)
        out = escape_text(c)
        if _unsafe(c):
            named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(c)
            expected = named or (f"\\x{cp:02x}" if cp <= 0xFF else f"\\u{cp:04x}")
            assert out == expected, (hex(cp), out)
        else:
            assert out == c, hex(cp)


def test_worked_example_of_a_terminal_attack():
    """Clear screen, window title, a forged line, a right-to-left override, a C1 CSI and an undecodable byte."""
    attack = "x\x1b[2J\x1b]0;t\x07\r\nforged\u202e\x9b1m" + b"\xff".decode("utf-8", "surrogateescape")
    assert escape_text(attack) == "x\\x1b[2J\\x1b]0;t\\x07\\r\\nforged\\u202e\\x9b1m\\udcff"
    assert escape_lines("a\x1b\nb\r") == "a\\x1b\nb\\r"
    assert escape_text(os.fsdecode(b"up\xff\n.h5")) == "up\\udcff\\n.h5"  # a file name, as os.scandir gives it


@given(st.text())
def test_escaped_text_is_safe_and_encodes_strictly(s):
    """For any string: no unsafe character is left, the result encodes as strict UTF-8, and escaping it again
    changes nothing (the escapes are printable ASCII)."""
    out = escape_text(s)
    assert not any(_unsafe(c) for c in out)
    out.encode("utf-8")
    assert escape_text(out) == out


@given(st.text(), st.integers(min_value=0, max_value=50))
def test_shorten_bounds_the_text_and_counts_the_rest(s, limit):
    """For any string and limit: at most ``limit`` source characters are shown, and the rest is counted."""
    out = shorten(s, limit)
    if len(s) <= limit:
        assert out == escape_text(s)
    else:
        assert out == f"{escape_text(s[:limit])}...({len(s) - limit} more characters)"


@given(st.text())
def test_html_text_is_html_escaped_after_escaping(s):
    """For any string: ``html.unescape`` gives back :func:`escape_text`'s result, with no markup character left."""
    out = html_text(s)
    assert not any(c in out for c in "<>\"'") and html.unescape(out) == escape_text(s)
    assert html_text(None) == ""
