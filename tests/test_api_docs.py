# SPDX-License-Identifier: MIT
"""The documented code runs (issue #10 item 8): the README's "Write an archive from your own training loop"
snippets, and examples/notebook.ipynb executed with nbclient."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SECTION = "### Write an archive from your own training loop"


def readme_snippets() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.index("\n## ", start)
    return re.findall(r"```python\n(.*?)```", text[start:end], re.S)


def _run(code: str, cwd: Path) -> str:
    """Run a snippet as a user would (a fresh interpreter in an empty directory); its stdout."""
    res = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                         env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "HOME": str(cwd)})
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_the_section_has_a_torch_and_a_numpy_snippet_of_about_ten_lines():
    snippets = readme_snippets()
    assert len(snippets) == 2
    assert "import torch" in snippets[0] and "import numpy" in snippets[1]
    assert all(len(s.strip().splitlines()) <= 20 for s in snippets)


def _check_archive(path: Path, n_members: int, printed: str) -> None:
    """The snippet wrote a valid archive of n_members on the digits test rows, and the CLL it printed is the one
    ``ubench score --json`` computes from that file in another process."""
    from ubench import read_archive

    archive = read_archive(path)
    assert len(archive.members) == n_members and archive.splits["test"].n_samples == 297
    out = subprocess.run([sys.executable, "-m", "ubench.cli", "score", str(path), "--json"], capture_output=True,
                         text=True, check=True).stdout
    assert float(printed.strip().splitlines()[-1]) == pytest.approx(json.loads(out)["summary"]["cll"], abs=1e-12)


@pytest.mark.torch
def test_readme_torch_snippet_runs(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    printed = _run(readme_snippets()[0], tmp_path)
    _check_archive(tmp_path / "torch_ensemble.h5", 3, printed)


def test_readme_numpy_snippet_runs(tmp_path):
    pytest.importorskip("sklearn")
    printed = _run(readme_snippets()[1], tmp_path)
    _check_archive(tmp_path / "numpy_ensemble.h5", 4, printed)


def test_notebook_executes_and_draws_the_comparison(tmp_path):
    """examples/notebook.ipynb runs top to bottom (nbclient, a fresh kernel in an empty directory, no network),
    prints CLL and DEE per method and draws a figure; its DEE of the deep ensemble against itself is its size."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nb = nbformat.read(ROOT / "examples" / "notebook.ipynb", as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")  # stored clean
    # no cell timeout (timeout=None); the kernel's start-up wait (nbclient needs one) is generous for a loaded host
    nbclient.NotebookClient(nb, timeout=None, startup_timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    texts = [o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {})]
    dee_lines = {ln.split("  ")[0].strip(): ln for t in texts for ln in t.splitlines() if " DEE " in ln}
    assert set(dee_lines) == {"SGD", "MC dropout", "deep ensemble"}
    assert float(dee_lines["deep ensemble"].split("DEE")[1]) == 5.0
    assert dee_lines["SGD"].endswith("DEE < 1")  # worse than one deep-ensemble member, not "1.00"
    assert len(images) == 3  # the comparison, and ubench.plots' DEE and reliability figures
    assert not list(tmp_path.iterdir())  # the notebook writes nothing
    assert np.isfinite(float(dee_lines["MC dropout"].split("CLL")[1].split()[0]))


def test_the_notebooks_first_cell_names_the_extras_it_needs():
    """Every module the notebook imports, and pandas behind ubench.report_frame, is a dependency of ubench or of
    an extra the first cell names with its pip install line (issue #28 item 4: it needed pandas, which no README
    command installed). Oracle: pyproject.toml's dependencies and ubench/extras.py's modules per extra."""
    import ast
    import tomllib

    from ubench.extras import EXTRAS

    nb = json.loads((ROOT / "examples" / "notebook.ipynb").read_text(encoding="utf-8"))
    first = "".join(nb["cells"][0]["source"])
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    modules = {a.name.split(".")[0] for node in ast.walk(ast.parse(code)) if isinstance(node, ast.Import)
               for a in node.names}
    modules |= {node.module.split(".")[0] for node in ast.walk(ast.parse(code))
                if isinstance(node, ast.ImportFrom) and node.module}
    if "report_frame" in code:
        modules.add("pandas")
    base = {re.split(r"[<>=\[]", d)[0] for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "dependencies"]} | {"ubench", "pathlib", "json", "math"}
    named = {e for e in EXTRAS if f".[{e}]" in first or f"ubench[{e}]" in first}
    provided = base | {m for e in named for m in EXTRAS[e]}
    assert modules - provided == set(), f"the first cell does not name the extra of {modules - provided}"
    assert "python3 -m pip install \".[frame]\"" in first
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    where = readme.index("(examples/notebook.ipynb) scores")
    assert "pip install '.[frame]'" in readme[where:where + 300]  # the README says it too

