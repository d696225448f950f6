# SPDX-License-Identifier: MIT
"""What a terminal may be shown of an upload: the check the CLI escaping tests share (unicodedata is the oracle)."""

from __future__ import annotations

import unicodedata

#: unicodedata's bidirectional classes of the embedding, override and isolate controls.
BIDI_CONTROLS = {"LRE", "RLE", "PDF", "LRO", "RLO", "LRI", "RLI", "FSI", "PDI"}


def assert_no_raw_controls(data: bytes, what: str) -> str:
    """``data`` is strict UTF-8 (no surrogate leaked), holds no control character but the line feed, no bidi
    control, no line separator, and no line that an upload forged; returns the text."""
    text = data.decode("utf-8")
    bad = sorted({f"U+{ord(c):04X}" for c in text if c != "\n" and (
        unicodedata.category(c) in ("Cc", "Cs", "Zl", "Zp") or unicodedata.bidirectional(c) in BIDI_CONTROLS)})
    assert not bad, f"{what}: raw control characters {bad}"
    assert not any(line.startswith("forged line") for line in text.splitlines()), f"{what}: a forged line"
    return text
