# SPDX-License-Identifier: MIT
"""A producer run killed (SIGKILL) or failing part-way resumes without retraining finished members."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ubench.archive_schema import ArchiveError, read_archive  # noqa: E402
from ubench.archive_schema.safe_h5py import h5py  # noqa: E402
from ubench.producers import member_loop, torch_trainer  # noqa: E402
from ubench.producers.archive_run import produce_archive  # noqa: E402
from ubench.producers.task import build_task  # noqa: E402
from ubench.producers.torch_trainer import RunSettings  # noqa: E402

torch.set_num_threads(1)

SCRIPT = """
import torch
torch.set_num_threads(1)
from ubench.producers.archive_run import produce_archive
from ubench.producers.task import build_task
from ubench.producers.torch_trainer import RunSettings
task = build_task("digits", shift_kinds=("rotate",), shift_samples=50)
produce_archive("deep_ensemble", task, {out!r}, hyper={{"epochs": 20}}, threads=1,
                settings=RunSettings(model="mlp", members=4, seed=3, batch_size=64))
"""


def _member_probs(path):
    with h5py.File(path, "r") as f:
        return {name: f[f"probs/{name}"][()] for name in f["probs"]}


def _count_calls(monkeypatch, name, module=member_loop):
    calls = []
    original = getattr(module, name)

    def counting(*args, **kwargs):
        calls.append(kwargs.get("epoch", kwargs.get("run_index")))
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counting)
    return calls


def test_sigkill_after_member_1_then_rerun_trains_only_the_rest(tmp_path, monkeypatch):
    """A real process killed with SIGKILL once member 1 is durable; the same run started again keeps members
    0..k-1 byte for byte and trains only the missing ones."""
    out = tmp_path / "ens.h5"
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(SCRIPT.format(out=str(out)))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    members_dir = tmp_path / "ens.h5.partial" / "members"
    while not (members_dir / "000001.h5").exists():
        if proc.poll() is not None:
            pytest.fail(f"producer exited early ({proc.returncode}): {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not out.exists()
    finished = sorted(p.name for p in members_dir.iterdir() if p.name.endswith(".h5"))
    assert 2 <= len(finished) < 4, finished
    kept = [_member_probs(members_dir / name) for name in finished]

    runs = _count_calls(monkeypatch, "_train_run")
    task = build_task("digits", shift_kinds=("rotate",), shift_samples=50)
    path = produce_archive("deep_ensemble", task, out, hyper={"epochs": 20}, threads=1,
                           settings=RunSettings(model="mlp", members=4, seed=3, batch_size=64))
    assert runs == list(range(len(finished), 4))  # only the missing members were trained
    a = read_archive(path)
    assert len(a.members) == 4 and not (tmp_path / "ens.h5.partial").exists()
    for k, probs in enumerate(kept):
        for name, p in probs.items():
            np.testing.assert_array_equal(a.probs[name][k], p)


@pytest.fixture(scope="module")
def task():
    return build_task("digits", shift_kinds=("translate",), train_samples=300, test_samples=100, shift_samples=30)


def _produce(task, out, method, hyper, members=3):
    return produce_archive(method, task, out, hyper=hyper, threads=1,
                           settings=RunSettings(model="mlp", members=members, seed=0, batch_size=64))


class _Crash(Exception):
    pass


def test_trajectory_resumes_from_its_epoch_checkpoint(task, tmp_path, monkeypatch):
    """SGLD interrupted inside its chain continues from the last epoch checkpoint and ends exactly where an
    uninterrupted chain ends."""
    hyper = {"burn_in_epochs": 2, "thin_epochs": 1}
    reference = read_archive(_produce(task, tmp_path / "ref.h5", "sgld", hyper))
    original = torch_trainer.train_epoch  # what Method.run_epoch runs for minibatch methods

    def crash_in_epoch_5(*args, epoch, **kwargs):
        if epoch == 5:
            raise _Crash
        return original(*args, epoch=epoch, **kwargs)

    monkeypatch.setattr(torch_trainer, "train_epoch", crash_in_epoch_5)
    with pytest.raises(_Crash):
        _produce(task, tmp_path / "run.h5", "sgld", hyper)
    assert len(list((tmp_path / "run.h5.partial" / "members").glob("*.h5"))) == 2  # epochs 3 and 4
    monkeypatch.setattr(torch_trainer, "train_epoch", original)
    epochs = _count_calls(monkeypatch, "train_epoch", torch_trainer)
    resumed = read_archive(_produce(task, tmp_path / "run.h5", "sgld", hyper))
    assert epochs == [5]
    np.testing.assert_array_equal(resumed.probs["test"], reference.probs["test"])
    assert [m.epoch for m in resumed.members] == [3, 4, 5]


def test_posterior_method_does_not_retrain_after_a_failure_between_members(task, tmp_path, monkeypatch):
    hyper = {"epochs": 2, "dropout_rate": 0.3}
    reference = read_archive(_produce(task, tmp_path / "ref.h5", "mc_dropout", hyper))
    from ubench.archive_schema import ArchiveWriter

    original = ArchiveWriter.add_member

    def add_then_fail(self, *args, **kwargs):
        if self.n_members == 1:
            raise _Crash
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ArchiveWriter, "add_member", add_then_fail)
    with pytest.raises(_Crash):
        _produce(task, tmp_path / "run.h5", "mc_dropout", hyper)
    monkeypatch.setattr(ArchiveWriter, "add_member", original)
    epochs = _count_calls(monkeypatch, "train_epoch", torch_trainer)
    resumed = read_archive(_produce(task, tmp_path / "run.h5", "mc_dropout", hyper))
    assert epochs == []
    np.testing.assert_array_equal(resumed.probs["test"], reference.probs["test"])


def test_a_partial_run_of_another_configuration_is_refused(task, tmp_path, monkeypatch):
    def fail(*args, **kwargs):
        raise _Crash

    monkeypatch.setattr(member_loop, "predict_splits", fail)
    with pytest.raises(_Crash):
        _produce(task, tmp_path / "run.h5", "deep_ensemble", {"epochs": 1}, members=2)
    monkeypatch.undo()
    with pytest.raises(ArchiveError, match="different configuration"):
        _produce(task, tmp_path / "run.h5", "deep_ensemble", {"epochs": 2}, members=2)
    with pytest.raises(ArchiveError, match="already exists"):
        _produce(task, tmp_path / "ref.h5", "sgd", {"epochs": 1}, members=1)
        _produce(task, tmp_path / "ref.h5", "sgd", {"epochs": 1}, members=1)
