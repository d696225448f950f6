# SPDX-License-Identifier: MIT
"""bench/render.py: the README's Performance table and bench/RESULTS.md are generated from bench/results/*.json."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _render():
    spec = importlib.util.spec_from_file_location("bench_render", ROOT / "bench" / "render.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _doc(script, rows, summary, date="2026-11-23T19:00:00+00:00"):
    return {"script": script, "date": date,
            "machine": {"cpu": "Test CPU 9000", "cores": 2, "memory_gib": 24.0, "python": "3.11.7",
                        "numpy": "2.4.6", "scipy": "1.17", "torch": "2.14.1"},
            "load": {"before": [3.25, 1.0, 0.5], "after": [4.5, 1.0, 0.5], "note": "shared"},
            "settings": {"repeat": 3}, "rows": rows, "summary": summary}


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "bench" / "results").mkdir(parents=True)
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    results = tmp_path / "bench" / "results"
    (results / "bench_protocol.json").write_text(json.dumps(_doc(
        "bench_protocol.py", [{"benchmark": "DEE sweep", "ubench_best_s": 12.3456, "ratio_median": 13.28}],
        [{"what": "DEE sweep", "workload": "K=50", "result": "12.3 s: **13.3x**, max |d| 0", "target": ">= 10x",
          "met": True}])))
    return tmp_path


def test_committed_readme_and_results_match_the_committed_json():
    """A hand edit of the README's Performance table or of RESULTS.md fails here: re-run bench/render.py."""
    assert _render().main(["--check", "--root", str(ROOT)]) == 0


def test_rows_come_from_the_json_with_machine_load_and_date(tree):
    render = _render()
    assert render.main(["--root", str(tree)]) == 0
    readme = (tree / "README.md").read_text()
    perf = readme[readme.index(render.PERF[0]):readme.index(render.PERF[1])]
    row = next(line for line in perf.splitlines() if line.startswith("| DEE sweep"))
    assert "12.3 s: **13.3x**, max \\|d\\| 0 |" in row and "| met |" in row  # a '|' cannot split the row
    assert "2026-11-23" in row and "load 3.25 before, 4.5 after" in row and "Test CPU 9000" in row
    assert "no results file: run `python bench/bench_score.py" in perf  # absent JSON: said, not invented
    results_md = (tree / "bench" / "RESULTS.md").read_text()
    assert "| benchmark | ubench_best_s | ratio_median |" in results_md and "| DEE sweep | 12.35 | 13.28 |" in results_md
    assert render.main(["--check", "--root", str(tree)]) == 0


def test_a_hand_edit_is_detected(tree):
    render = _render()
    render.main(["--root", str(tree)])
    readme = tree / "README.md"
    readme.write_text(readme.read_text().replace("**13.3x**", "**30x**"))
    assert render.main(["--check", "--root", str(tree)]) == 1
    results_md = tree / "bench" / "RESULTS.md"
    render.main(["--root", str(tree)])
    results_md.write_text(results_md.read_text() + "\nA stale paragraph.\n")
    assert render.main(["--check", "--root", str(tree)]) == 1


def test_fashion_mnist_table_rendered_only_when_its_json_exists(tree):
    render = _render()
    before = (tree / "README.md").read_text()
    fashion = before[before.index(render.FASHION[0]):before.index(render.FASHION[1])]
    render.main(["--root", str(tree)])
    after = (tree / "README.md").read_text()
    assert fashion in after  # no JSON: left as it is
    row = {"method": "SGD", "members": 1, "accuracy": 0.9015, "nll": 0.295, "cll": -0.279, "dee": 1.06,
           "ood_auroc_mnist": 0.8169, "ood_auroc_notmnist": 0.7051, "minutes": 7.5}
    (tree / "bench" / "results" / "reproduce_fashion_mnist.json").write_text(
        json.dumps(_doc("reproduce_fashion_mnist.py", [row], [])))
    render.main(["--root", str(tree)])
    after = (tree / "README.md").read_text()
    table = after[after.index(render.FASHION[0]):after.index(render.FASHION[1])]
    assert "| SGD | 1 | 0.9015 | 0.295 | -0.279 | 1.06 | 0.8169 | 0.7051 | - | - | - | 7.5 |" in table
    assert "load 3.25 before" in table and fashion not in after
    # issue #31: a single model with its own score gets the own-score columns
    row = dict(row, method="DDU", own_score="log_density", ood_auroc_own_mnist=0.9876, ood_auroc_own_notmnist=0.9)
    (tree / "bench" / "results" / "reproduce_fashion_mnist.json").write_text(
        json.dumps(_doc("reproduce_fashion_mnist.py", [row], [])))
    render.main(["--root", str(tree)])
    assert "| DDU | 1 | 0.9015 | 0.295 | -0.279 | 1.06 | 0.8169 | 0.7051 | log_density | 0.9876 | 0.9 | 7.5 |" in (
        tree / "README.md").read_text()


def _results_module():
    spec = importlib.util.spec_from_file_location("bench_results", ROOT / "bench" / "_results.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_script_names_its_second_json_and_the_gpu_is_rendered(tree):
    """``bench_hmc.py --device cuda`` writes bench_hmc_cuda.json (script still bench_hmc.py); its rows name the
    script and the JSON, and a recorded GPU appears beside the machine. Before that JSON exists its row says so."""
    render = _render()
    assert "bench_hmc_cuda" in render.SCRIPTS
    render.main(["--root", str(tree)])
    readme = (tree / "README.md").read_text()
    assert ("| `bench_hmc.py`, `bench_hmc_cuda.json` | - | no results file: run "
            "`python bench/bench_hmc.py --device cuda") in readme
    rec = _results_module().Recorder("/x/bench/bench_hmc.py", name="bench_hmc_cuda", note="lent GPU machine")
    path = rec.write([{"what": "HMC", "seconds": 1.5}],
                     [{"what": "torch HMC (CUDA)", "workload": "digits", "result": "3x", "target": ">= 2x",
                       "met": True}], out_dir=tree / "bench" / "results")
    assert path.name == "bench_hmc_cuda.json"
    doc = json.loads(path.read_text())
    assert doc["script"] == "bench_hmc.py" and doc["load"]["note"] == "lent GPU machine"
    doc["machine"].update(gpu="NVIDIA H200", cuda="13.0")
    path.write_text(json.dumps(doc))
    render.main(["--root", str(tree)])
    perf = (tree / "README.md").read_text()
    row = next(line for line in perf.splitlines() if line.startswith("| torch HMC (CUDA)"))
    assert "(`bench_hmc.py`, `bench_hmc_cuda.json`)" in row and "GPU NVIDIA H200, CUDA 13.0" in row
    results_md = (tree / "bench" / "RESULTS.md").read_text()
    assert "## `bench_hmc.py`, `bench_hmc_cuda.json`" in results_md and "GPU NVIDIA H200, CUDA 13.0" in results_md
    assert render.main(["--check", "--root", str(tree)]) == 0
