# SPDX-License-Identifier: MIT
"""README's "Is the difference real?" block is the output of the command it shows, run on the bundled archives
(so the numbers and marks there are generated, never typed). ``python tests/test_readme_intervals.py --write``
rewrites the block from a fresh run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKERS = ("<!-- intervals:compare:start -->", "<!-- intervals:compare:end -->")
COMMAND = ["compare", "examples/digits_deep_ensemble.h5", "examples/digits_mc_dropout.h5", "examples/digits_sgd.h5"]


def compare_output() -> str:
    res = subprocess.run([sys.executable, "-m", "ubench.cli", *COMMAND], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    return res.stdout


def block(output: str) -> str:
    return f"{MARKERS[0]}\n\n```text\n{output.rstrip()}\n```\n\n{MARKERS[1]}"


def readme_block(text: str) -> str:
    start, end = text.index(MARKERS[0]), text.index(MARKERS[1]) + len(MARKERS[1])
    return text[start:end]


def test_readme_compare_block_is_the_commands_output():
    output = compare_output()
    assert "^" in output and "~" in output  # the marks the README explains
    assert readme_block((ROOT / "README.md").read_text(encoding="utf-8")) == block(output)


if __name__ == "__main__":
    if "--write" in sys.argv:
        path = ROOT / "README.md"
        text = path.read_text(encoding="utf-8")
        path.write_text(text.replace(readme_block(text), block(compare_output())), encoding="utf-8")
        print(f"wrote {path}")
