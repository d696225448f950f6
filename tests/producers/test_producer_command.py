# SPDX-License-Identifier: MIT
"""``ubench produce`` (the click command object) and the producers' import hygiene."""

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from ubench.producers.command import produce


def test_importing_the_producers_package_and_command_does_not_import_torch():
    code = ("import sys, ubench.producers, ubench.producers.command, ubench.producers.registry, "
            "ubench.producers.task; print(json.dumps(sorted(m for m in ('torch', 'torchvision') if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_help_has_an_example_and_defaults():
    result = CliRunner().invoke(produce, ["--help"])
    assert result.exit_code == 0
    assert "ubench produce deep_ensemble --dataset fashion-mnist" in result.output
    assert "default: 128" in result.output and "csghmc" in result.output


def test_produce_writes_an_archive_and_prints_its_path(tmp_path):
    pytest.importorskip("torch")
    from ubench.archive_schema import read_archive

    out = tmp_path / "run.h5"
    result = CliRunner().invoke(produce, [
        "mc_dropout", "--out", str(out), "--members", "2", "--epochs", "1", "--set", "dropout_rate=0.25",
        "--shifts", "translate,noise", "--shift-samples", "20", "--train-samples", "200", "--threads", "1",
        "--no-progress",
    ])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == str(out)
    a = read_archive(out)
    assert a.config["hyperparameters"]["dropout_rate"] == 0.25 and len(a.members) == 2
    assert {s.shift_kind for s in a.splits.values() if s.role == "shift"} == {"translate", "noise"}
    again = CliRunner().invoke(produce, ["sgd", "--out", str(out), "--epochs", "1", "--train-samples", "50"])
    assert again.exit_code == 1 and "already exists" in again.output


@pytest.mark.parametrize("args, message", [
    (["sse", "--epochs", "3"], "has no 'epochs'"),
    (["swag", "--set", "rank"], "KEY=VALUE"),
    (["swag", "--set", "bogus=1"], "no hyperparameter 'bogus'"),
    (["sgd", "--members", "2"], "allows 1 to 1"),
    (["sgd", "--shifts", "zoom"], "unknown shift families"),
    (["sgd", "--dataset", "kmnist", "--data-dir", "."], "not found"),
    (["sgld", "--set", "temperature=hot"], "hyperparameter 'temperature' must be '1/N' or a positive"),
    (["tta", "--set", "crop_fraction=0.7"], "crop_fraction must be in [0, 0.5)"),
    (["swag", "--set", "rank=1"], "rank must be at least 2"),
    (["csgld", "--set", "samples_per_cycle=6"], "samples_per_cycle <="),
])
def test_usage_errors_exit_2(tmp_path, monkeypatch, args, message):
    pytest.importorskip("torch")
    monkeypatch.setenv("UBENCH_DATA", "")
    monkeypatch.setattr("ubench.producers.datasets.DEFAULT_SEARCH_PATH", ())
    result = CliRunner().invoke(produce, [*args, "--out", str(tmp_path / "x.h5")])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not (tmp_path / "x.h5.partial").exists()


def test_an_unknown_dataset_is_reported_as_the_dataset_not_as_val_fraction(tmp_path):
    pytest.importorskip("torch")
    result = CliRunner().invoke(produce, ["sgd", "--dataset", "nope", "--out", str(tmp_path / "x.h5")])
    assert result.exit_code == 2, result.output
    assert "unknown dataset 'nope'" in result.output
    assert "--val-fraction" not in result.output



@pytest.mark.parametrize("method, rate", [("mc_dropout", "0"), ("gaussian_dropout", "1"), ("swag_dropout", "-0.1")])
def test_a_dropout_rate_outside_0_1_is_a_usage_error_not_a_traceback(tmp_path, method, rate):
    """Issue #13 item 5: build_model's ValueError used to escape from the training loop."""
    pytest.importorskip("torch")
    result = CliRunner().invoke(produce, [method, "--dataset", "digits", "--set", f"dropout_rate={rate}", "--out",
                                          str(tmp_path / "x.h5"), "--no-progress"])
    assert result.exit_code == 2, result.output
    assert "dropout_rate must be in (0, 1)" in result.output and result.exception.__class__ is SystemExit
    assert not (tmp_path / "x.h5.partial").exists()
