# SPDX-License-Identifier: MIT
"""Start-up stays light (issue #29 item 5): `ubench --help` imports no numerical library, and scoring the bundled
example imports none of the scipy subpackages the report does not use (scipy.signal alone was 0.6 s of a 0.7 s
`ubench score`). What is checked is which modules a fresh interpreter has imported, not a wall-clock time; the
timings are bench/bench_score.py's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "digits_deep_ensemble.h5"

_RUN = """
import json, sys
from ubench.cli import main
sys.argv = {argv!r}
try:
    main()
except SystemExit:
    pass
sys.stdout.flush()
print("\\nMODULES " + json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))
"""


def _imported(argv: list[str], heavy: tuple[str, ...], tmp_path: Path) -> list[str]:
    code = _RUN.format(argv=["ubench", *argv], heavy=heavy)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("MODULES ")]
    assert line, out.stdout[-2000:] + out.stderr[-2000:]
    return json.loads(line[-1][len("MODULES "):])


def test_help_imports_no_numerical_library(tmp_path):
    heavy = ("numpy", "scipy", "h5py", "ubench.metrics", "ubench.archive_schema", "torch", "jax", "pandas",
             "distributed", "rich")
    assert _imported(["--help"], heavy, tmp_path) == []


def test_score_imports_only_what_the_report_uses(tmp_path):
    heavy = ("scipy.special", "scipy.signal", "scipy.stats", "scipy.optimize", "scipy.interpolate", "torch",
             "jax", "pandas", "sklearn", "distributed", "matplotlib",
             # ubench's own modules that scoring in process never runs: the sandbox (its size parser is
             # ubench.sizes), the commands cli.py imports only when named (cli._LAZY_COMMANDS) and the archive
             # writer (archive_schema.__getattr__); html is imported by scoring.text.html_text when it runs
             "ubench.scoring.sandbox", "ubench.producers", "ubench.serve", "ubench.edge", "ubench.importers",
             "ubench.archive_schema.writer", "html")
    assert _imported(["score", str(EXAMPLE), "--json"], heavy, tmp_path) == []
