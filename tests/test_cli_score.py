# SPDX-License-Identifier: MIT
"""ubench score / reference / compare through CliRunner, and one real subprocess per exit code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent / "scoring"))
from scoring_archives import build_archive, member_predictions, write_plain_archive  # noqa: E402

from ubench.cli import cli  # noqa: E402
from ubench.metrics import accuracy_score, ensemble_mean_probs, nll_loss  # noqa: E402


@pytest.fixture
def run(tmp_path):
    return build_archive(tmp_path / "run.h5")


def _ubench(*args):
    return subprocess.run([sys.executable, "-m", "ubench.cli", *map(str, args)], capture_output=True, text=True)


def test_score_json(run):
    path, data = run
    res = CliRunner().invoke(cli, ["score", str(path), "--json", "--placement", "none", "--bins", "10"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    mean = ensemble_mean_probs(data["probs"]["test"])
    assert report["summary"]["accuracy"] == accuracy_score(mean, data["labels"])
    assert report["summary"]["nll"] == pytest.approx(nll_loss(mean, data["labels"]), rel=1e-12)
    assert report["protocol"]["bins"] == 10 and report["protocol"]["overrides"] == ["placement", "bins"]
    assert report["archive"]["path"] == str(path)


def test_score_table_and_html(tmp_path):
    shifts = ((("blur", 1.0), 1.5), (("blur", 2.0), 0.8), (("noise", 1.0), 1.2), (("noise", 2.0), 0.6))
    path, _ = build_archive(tmp_path / "run.h5", shifts=shifts)
    html = tmp_path / "r.html"
    res = CliRunner().invoke(cli, ["score", str(path), "--protocol", "shift", "--html", str(html)])
    assert res.exit_code == 0, res.output
    assert "in-domain split test" in res.stdout and "OOD detection" in res.stdout and "quartiles" in res.stdout
    text = html.read_text()
    assert text.count("<svg") >= 4 and "<script" not in text and "src=" not in text
    assert "protocol shift: no TS, seed 0, 15 bins, smoothing 0" in text


def test_score_cost_options(run, tmp_path):
    path, _ = run
    np.save(tmp_path / "cost.npy", 1.0 - np.eye(5))
    res = CliRunner().invoke(cli, ["score", str(path), "--json", "--protocol", "ursabench",
                                   "--cost-matrix", str(tmp_path / "cost.npy")])
    assert res.exit_code == 0, res.output
    sec = json.loads(res.stdout)["in_domain"]["test"]
    assert sec["decision_cost_sum"] == pytest.approx(sec["decision_cost"])
    res = CliRunner().invoke(cli, ["score", str(path), "--cost-preset", "mnist"])
    assert res.exit_code == 1 and "cannot be scored" in res.stderr and "Traceback" not in res.output
    res = CliRunner().invoke(cli, ["score", str(path), "--protocol", "nope"])
    assert res.exit_code == 2


def test_reference_command_and_mismatch(run, tmp_path):
    path, _ = run
    ref = tmp_path / "ref.h5"
    res = CliRunner().invoke(cli, ["reference", str(path), "--out", str(ref)])
    assert res.exit_code == 0 and ref.exists()
    res = CliRunner().invoke(cli, ["score", str(path), "--reference", str(ref), "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["labels"]["source"] == "reference"
    other, _ = build_archive(tmp_path / "other.h5", n=100)
    res = CliRunner().invoke(cli, ["score", str(other), "--reference", str(ref)])
    assert res.exit_code == 1
    assert "split 'test': N differs (archive 100, reference 120)" in res.stderr


def test_compare(run, tmp_path):
    path, _ = run
    other, _ = build_archive(tmp_path / "other.h5", seed=5)
    res = CliRunner().invoke(cli, ["compare", str(path), str(other), "--protocol", "shift"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].startswith("method") and "acc*" in lines[0] and " NLL " in lines[0]
    assert lines[2].startswith("deep_ensemble (run.h5)") and lines[3].startswith("deep_ensemble (other.h5)")
    res = CliRunner().invoke(cli, ["compare", str(path), str(other), "--json", "--protocol", "shift"])
    d = json.loads(res.stdout)
    assert len(d["reports"]) == 2 and d["protocol"]["name"] == "shift"


def test_subprocess_exit_0(run):
    path, data = run
    res = _ubench("score", path, "--json", "--protocol", "shift")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["summary"]["accuracy"] == accuracy_score(ensemble_mean_probs(data["probs"]["test"]),
                                                            data["labels"])
    assert res.stderr == ""  # no progress bars with --json / off a terminal


def test_subprocess_exit_1_invalid_archive(tmp_path):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 20)
    p = member_predictions(rng, 20, 3, y, 2, 1.0)
    p[0, 3] = 0.9
    path = write_plain_archive(tmp_path / "bad.h5", {"test": p}, {"test": y}, {"test": "in_domain"}, 3)
    res = _ubench("score", path, "--json")
    assert res.returncode == 1 and res.stdout == ""
    assert "row-sum" in res.stderr and "member 0, sample 3" in res.stderr and "Traceback" not in res.stderr


def test_subprocess_exit_1_reference_mismatch(run, tmp_path):
    path, _ = run
    ref = tmp_path / "ref.h5"
    assert _ubench("reference", path, "--out", ref).returncode == 0
    shifted, _ = build_archive(tmp_path / "ids.h5", ids_offset=7)
    res = _ubench("score", shifted, "--reference", ref, "--json")
    assert res.returncode == 1 and res.stdout == ""
    assert "sample ids differ first at index 0 (archive 7, reference 0" in res.stderr


def test_subprocess_exit_2_unreadable(tmp_path):
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"definitely not HDF5")
    res = _ubench("score", junk, "--json")
    assert res.returncode == 2 and res.stdout == "" and "Traceback" not in res.stderr
    res = _ubench("score", tmp_path / "missing.h5")
    assert res.returncode == 2 and "Traceback" not in res.stderr
