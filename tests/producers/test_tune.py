# SPDX-License-Identifier: MIT
"""``ubench tune`` (Optuna on the validation split) and ``ubench produce --config``."""

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
optuna = pytest.importorskip("optuna")

from click.testing import CliRunner  # noqa: E402

from ubench.archive_schema.safe_h5py import h5py  # noqa: E402
from ubench.producers import datasets as datasets_module  # noqa: E402
from ubench.producers.command import produce  # noqa: E402
from ubench.producers.datasets import load_dataset  # noqa: E402
from ubench.producers.registry import load_method  # noqa: E402
from ubench.producers.search_spaces import PRESETS, SearchSpaceError, check_space, grid_of, load_space  # noqa: E402
from ubench.producers.task import build_task, build_validation_task  # noqa: E402
from ubench.producers.torch_trainer import RunSettings  # noqa: E402
from ubench.producers.tune import StudySpec, open_study, optimize  # noqa: E402
from ubench.producers.tune_command import tune  # noqa: E402

torch.set_num_threads(1)
TINY = ["--epochs", "1", "--members", "1", "--train-samples", "400", "--threads", "1"]


def _write_idx(path, array):
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(d.to_bytes(4, "big") for d in array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def _digits_as_idx(root, *, poison_test=False):
    """scikit-learn's digits (train/test as ubench splits them) written as IDX files; ``poison_test`` replaces the
    test labels by a shifted copy and the test images by their negatives."""
    root.mkdir(parents=True, exist_ok=True)
    for stem, train in (("train", True), ("t10k", False)):
        data = load_dataset("digits", train=train)
        images = np.round(data.images[:, 0] * 255).astype(np.uint8)
        labels = data.labels.astype(np.uint8)
        if poison_test and not train:
            images, labels = 255 - images, ((labels + 3) % 10).astype(np.uint8)
        _write_idx(root / f"{stem}-images-idx3-ubyte.gz", images)
        _write_idx(root / f"{stem}-labels-idx1-ubyte.gz", labels)
    return root


def _tune(args):
    result = CliRunner().invoke(tune, args, catch_exceptions=False)
    return result


def _trial_values(storage, name):
    study = optuna.load_study(study_name=name, storage=storage)
    return [(t.number, t.state.name, t.params, t.value) for t in study.trials]


def test_validation_task_is_the_producers_split_and_holds_no_test_data():
    """The tuning task trains on exactly build_task's training set, with build_task's validation split as its only
    prediction split and the same normalisation."""
    full = build_task("digits", shift_kinds=(), train_samples=500, val_fraction=0.2)
    tuning = build_validation_task("digits", train_samples=500, val_fraction=0.2)
    assert list(tuning.splits) == ["val"]
    np.testing.assert_array_equal(tuning.train.sample_ids, full.train.sample_ids)
    np.testing.assert_array_equal(tuning.splits["val"].sample_ids, full.val.sample_ids)
    np.testing.assert_array_equal(tuning.splits["val"].labels, full.val.labels)
    assert (tuning.mean, tuning.std, tuning.n_classes) == (full.mean, full.std, full.n_classes)
    assert not set(tuning.splits["val"].sample_ids) & set(tuning.train.sample_ids)


def test_tuning_never_reads_the_test_split(tmp_path, monkeypatch):
    """Poisoned test images and labels leave every trial's value unchanged, and the test files are never opened."""
    runs = {}
    for poison in (False, True):
        data = _digits_as_idx(tmp_path / f"data{int(poison)}", poison_test=poison)
        storage = f"sqlite:///{tmp_path / f'study{int(poison)}.db'}"
        result = _tune(["sgd", "--dataset", f"idx:{data}", "--trials", "3", "--sampler", "random", "--storage",
                        storage, "--study-name", "s", "--out", str(tmp_path / f"best{int(poison)}.json"), *TINY])
        assert result.exit_code == 0, result.output
        runs[poison] = _trial_values(storage, "s")
    assert runs[False] == runs[True]
    assert [state for _, state, _, _ in runs[False]] == ["COMPLETE"] * 3

    opened = []
    original = datasets_module.load_dataset

    def recording(name, *, train, **kwargs):
        opened.append(train)
        return original(name, train=train, **kwargs)

    monkeypatch.setattr(datasets_module, "load_dataset", recording)
    monkeypatch.setattr("ubench.producers.task.load_dataset", recording)
    result = _tune(["sgd", "--trials", "1", "--sampler", "random", "--out", str(tmp_path / "b.json"), *TINY])
    assert result.exit_code == 0, result.output
    assert opened and all(opened)  # only training files were read


def test_best_json_is_the_best_trial_and_produce_config_reproduces_its_run(tmp_path):
    """best.json holds the best complete trial's hyperparameters and the study's run settings; produce --config
    records exactly them in the archive, flags override the file and --set overrides its hyperparameters."""
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    best_path = tmp_path / "best.json"
    result = _tune(["sgd", "--trials", "4", "--sampler", "random", "--storage", storage, "--out", str(best_path),
                    "--val-fraction", "0.2", *TINY])
    assert result.exit_code == 0, result.output
    best = json.loads(best_path.read_text())
    study = optuna.load_study(study_name="sgd-digits-mlp", storage=storage)
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    winner = min(complete, key=lambda t: t.value)
    assert best["study"]["best_trial"] == winner.number and best["study"]["best_value"] == winner.value
    assert {k: best["hyperparameters"][k] for k in winner.params} == winner.params
    assert best["hyperparameters"]["epochs"] == 1 and best["val_fraction"] == 0.2 and best["train_samples"] == 400
    default = [t for t in complete if t.user_attrs.get("default")]
    assert default[0].params == {"lr": 0.05, "weight_decay": 5e-4}  # the method's defaults, trial 0
    assert best["study"]["default_value"] == default[0].value

    out = tmp_path / "run.h5"
    common = ["sgd", "--config", str(best_path), "--shifts", "none", "--test-samples", "50", "--no-progress",
              "--threads", "1"]
    result = CliRunner().invoke(produce, [*common, "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    with h5py.File(out, "r") as f:
        config = json.loads(f.attrs["config"])
    assert config["hyperparameters"] == best["hyperparameters"]
    assert config["data"]["val_fraction"] == 0.2 and config["data"]["train_samples"] == 320
    assert config["seed"] == 0 and config["members"] == 1

    out2 = tmp_path / "run2.h5"
    result = CliRunner().invoke(produce, [*common, "--out", str(out2), "--val-fraction", "0.1", "--set", "lr=0.01",
                                          "--epochs", "2"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    with h5py.File(out2, "r") as f:
        config = json.loads(f.attrs["config"])
    assert config["data"]["val_fraction"] == 0.1
    assert config["hyperparameters"]["lr"] == 0.01 and config["hyperparameters"]["epochs"] == 2
    assert config["hyperparameters"]["weight_decay"] == best["hyperparameters"]["weight_decay"]


@pytest.mark.parametrize("content, message", [
    ({"method": "sgd", "learning_rate": 0.1}, "unknown key 'learning_rate'"),
    ({"method": "mc_dropout"}, "configuration of 'mc_dropout', not 'sgd'"),
    ({"hyperparameters": {"dropout_rate": 0.1}}, "dropout_rate"),
    ({"hyperparameters": [1, 2]}, "'hyperparameters' must be an object"),
    ({"members": "many"}, "members"),
    ("[1, 2]", "must hold a JSON object"),
    ("{not json", "is not JSON"),
])
def test_produce_config_errors_name_the_problem(tmp_path, content, message):
    """A bad --config file is a usage error (exit 2, no traceback) naming the key or value."""
    path = tmp_path / "c.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    result = CliRunner().invoke(produce, ["sgd", "--config", str(path), "--out", str(tmp_path / "x.h5")])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "x.h5").exists()


def test_median_pruner_stops_a_bad_trial_by_epoch():
    """After five good trials, a trial whose lr barely moves the weights is stopped by the median pruner at its
    first reported epoch; complete trials report one value per epoch."""
    task = build_validation_task("digits", train_samples=400, val_fraction=0.2)
    space = {"lr": {"type": "categorical", "choices": [0.1, 1e-7]}}
    spec = StudySpec(method="sgd", dataset="digits", model="mlp", members=1, seed=0, batch_size=128,
                     val_fraction=0.2, train_samples=400, data_seed=0, objective="nll", space_name="test",
                     space=space, fixed={"epochs": 3})
    study = open_study(spec, storage=None, study_name="p", defaults=load_method("sgd").defaults,
                       enqueue_default=False)
    for lr in [0.1] * 5 + [1e-7]:
        study.enqueue_trial({"lr": lr})
    settings = RunSettings(model="mlp", members=1, seed=0)
    optimize(spec, task, settings, storage=None, study_name="p", n_trials=6, study=study)
    states = [t.state.name for t in study.trials]
    assert states == ["COMPLETE"] * 5 + ["PRUNED"]
    assert all(sorted(t.intermediate_values) == [1, 2, 3] for t in study.trials[:5])
    assert sorted(study.trials[5].intermediate_values) == [1]
    # The last epoch's report scores the model the trial's value scores (one deterministic member; the members'
    # predictions are float32, as in an archive).
    for t in study.trials[:5]:
        assert t.intermediate_values[3] == pytest.approx(t.value, rel=1e-6)


def test_cll_objective_is_maximised_and_is_a_log_likelihood(tmp_path):
    """--objective cll makes a maximising study whose values are log-likelihoods (<= 0), recorded in best.json."""
    out = tmp_path / "best.json"
    result = _tune(["sgd", "--objective", "cll", "--trials", "2", "--sampler", "random", "--out", str(out), *TINY])
    assert result.exit_code == 0, result.output
    best = json.loads(out.read_text())["study"]
    assert best["direction"] == "maximize" and best["objective"] == "cll"
    assert best["best_value"] <= 0 and best["best_value"] >= best["default_value"]


def test_a_stored_study_refuses_other_settings(tmp_path):
    """Resuming a study with another objective (or any other defining setting) is a usage error naming it."""
    storage = f"sqlite:///{tmp_path / 's.db'}"
    args = ["sgd", "--trials", "1", "--sampler", "random", "--storage", storage, "--out", str(tmp_path / "b.json"),
            *TINY]
    assert _tune(args).exit_code == 0
    result = CliRunner().invoke(tune, [*args, "--objective", "cll"])
    assert result.exit_code == 2 and "objective='nll'" in result.output and "Traceback" not in result.output


def test_search_spaces_presets_and_errors(tmp_path):
    """Every preset names real hyperparameters of its method, holds the method's defaults and URSABench's tuned
    MLP-200/MNIST values inside its ranges, and has a grid; bad custom spaces are errors naming the entry."""
    ursabench = {"sgd": {"lr": 0.1, "weight_decay": 0.00030405964935198426},
                 "mc_dropout": {"lr": 0.08323124796152115, "momentum": 0.9040795087814331, "dropout_rate": 0.2},
                 "sgld": {"lr": 0.09999999403953552, "prior_std": 0.1664159595966339},
                 "sghmc": {"lr": 0.03134895861148834, "prior_std": 0.14046818017959595,
                           "friction": 0.10199674218893051}}
    for method, space in PRESETS.items():
        defaults = load_method(method).defaults
        check_space(space, defaults, method=method)
        grid_of(space)
        for name, spec in space.items():
            for value in (defaults[name], ursabench.get(method, {}).get(name, defaults[name])):
                assert spec["low"] <= value <= spec["high"], (method, name, value)
    defaults = load_method("sgd").defaults
    for space, message in [
        ({"learning_rate": {"type": "float", "low": 0.1, "high": 1}}, "'learning_rate': sgd has no such"),
        ({"lr": {"type": "float", "low": 1, "high": 0.1}}, "'lr': needs low < high"),
        ({"lr": {"type": "float", "low": 0, "high": 1, "log": True}}, "'lr': a log scale needs low > 0"),
        ({"lr": {"type": "uniform", "low": 0, "high": 1}}, "'lr': needs \"type\""),
        ({"lr": {"type": "float", "low": 0.1, "high": 1, "step": 2}}, "'lr': unknown key 'step'"),
        ({}, "non-empty"),
    ]:
        with pytest.raises(SearchSpaceError, match=message):
            check_space(space, defaults, method="sgd")
    with pytest.raises(SearchSpaceError, match="needs a \"grid\" list"):
        grid_of({"lr": {"type": "float", "low": 0.01, "high": 1.0}})
    path = tmp_path / "space.json"
    path.write_text(json.dumps({"lr": {"type": "float", "low": 0.01, "high": 0.5, "log": True}}))
    assert load_space(str(path), "sgd", defaults)[1]["lr"]["high"] == 0.5
    result = CliRunner().invoke(tune, ["hmc", "--trials", "1", "--out", str(tmp_path / "b.json")])
    assert result.exit_code == 2 and "no preset search space for hmc" in result.output


def test_sigkilled_study_resumes_with_its_finished_trials(tmp_path):
    """A real `ubench tune` process killed with SIGKILL mid-study; the same command again keeps the finished trials
    (numbers, parameters, values), marks the trial the kill interrupted failed once its heartbeat is stale and runs
    its parameters again, and runs until the study holds N finished trials."""
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    n = 6
    cmd = [sys.executable, "-m", "ubench.cli", "tune", "sgd", "--trials", str(n), "--sampler", "random",
           "--storage", storage, "--study-name", "k", "--out", str(tmp_path / "best.json"), "--epochs", "3",
           "--heartbeat", "1",
           "--members", "1", "--train-samples", "400", "--threads", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    # The kill follows the second finished trial's report line (printed by a callback after the trial is stored), not a
    # poll of the database: a poll can be slow enough under load for the whole study to finish between two looks.
    seen, reports = [], 0
    while reports < 2:
        line = proc.stderr.readline()
        if not line:
            proc.wait()
            pytest.fail(f"tune exited before two trials finished ({proc.returncode}): {''.join(seen)[-2000:]}")
        seen.append(line)
        reports += bool(re.match(r"trial \d+ (complete|pruned) ", line))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (tmp_path / "best.json").exists()
    before = [t for t in _trial_values(storage, "k") if t[1] in ("COMPLETE", "PRUNED")]
    assert 2 <= len(before) < n
    interrupted = [t for t in _trial_values(storage, "k") if t[1] == "RUNNING"]
    time.sleep(2.5)  # past the grace period (2 heartbeats) of the killed trial

    rerun = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    after = _trial_values(storage, "k")
    finished_after = [t for t in after if t[1] in ("COMPLETE", "PRUNED")]
    assert len(finished_after) == n
    assert all(t in after for t in before)  # kept as they were
    for number, _, params, _ in interrupted:
        assert after[number][1] == "FAIL"
        assert any(t[2] == params and t[1] in ("COMPLETE", "PRUNED") for t in after[number + 1:])  # run again
    assert f"{len(before)} of {n} trials finished" in rerun.stderr
    assert json.loads((tmp_path / "best.json").read_text())["study"]["n_complete"] + \
        json.loads((tmp_path / "best.json").read_text())["study"]["n_pruned"] == n


@pytest.mark.parametrize("args, message", [
    (["--storage", "foo://bar"], "cannot open 'foo://bar'"),
    (["--storage", "sqlite:////nonexistent-dir/s.db"], "cannot open 'sqlite:////nonexistent-dir/s.db'"),
    (["--dataset", "nope"], "unknown dataset 'nope'"),
    (["--jobs", "2"], "--jobs above 1 needs --storage"),
    (["--set", "lr=0.1"], "lr is both fixed"),
    (["--sampler", "grid", "--space", "SPACE"], "needs a \"grid\" list"),
    (["--set", "nope=1"], "sgd has no hyperparameter 'nope'"),
])
def test_tune_usage_errors_name_the_problem(tmp_path, args, message):
    """Bad tune arguments are usage errors (exit 2, no traceback) naming the option or value, before any trial."""
    space = tmp_path / "space.json"
    space.write_text(json.dumps({"lr": {"type": "float", "low": 0.01, "high": 1.0}}))
    args = [str(space) if a == "SPACE" else a for a in args]
    result = CliRunner().invoke(tune, ["sgd", "--trials", "1", "--out", str(tmp_path / "b.json"), *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "b.json").exists()
    missing = CliRunner().invoke(tune, ["sgd", "--trials", "1", "--out", str(tmp_path / "no" / "b.json")])
    assert missing.exit_code == 2 and "does not exist" in missing.output
