# SPDX-License-Identifier: MIT
"""Producers with nothing but Fashion-MNIST on the machine (issue #28 item 1): the default OOD sets that are missing
are skipped with a note saying how to add them, and "not found" is worded by what was tried. The default search
path is emptied (``DEFAULT_SEARCH_PATH``), as on a machine with no data beside the clone; Fashion-MNIST is a tiny
IDX copy in a temporary directory. The README's commands themselves run in tests/test_readme_fresh_clone.py."""

from __future__ import annotations

import urllib.error

import pytest
from click.testing import CliRunner
from test_producer_data import _fake_idx_dir

from ubench.producers import datasets
from ubench.producers.datasets import DataNotFoundError, load_dataset
from ubench.producers.task import build_task


@pytest.fixture
def bare_machine(tmp_path, monkeypatch):
    """No data anywhere but what a test writes under ``tmp_path/data``."""
    monkeypatch.setattr(datasets, "DEFAULT_SEARCH_PATH", (tmp_path / "cache",))
    monkeypatch.delenv(datasets.ENV_VAR, raising=False)
    _fake_idx_dir(tmp_path / "data" / "fashion-mnist", n_train=60, n_test=30)
    return tmp_path / "data"


def test_a_default_ood_set_that_is_present_is_used_and_a_named_one_must_be_found(bare_machine):
    task = build_task("fashion-mnist", shift_kinds=(), data_dirs=(bare_machine,))
    assert task.settings["ood_skipped"] == ["mnist", "notmnist"] and len(task.notes) == 2
    _fake_idx_dir(bare_machine / "mnist", n_train=10, n_test=12, seed=1)
    task = build_task("fashion-mnist", shift_kinds=(), data_dirs=(bare_machine,))
    assert "ood_mnist" in task.splits and task.settings["ood_skipped"] == ["notmnist"]
    with pytest.raises(DataNotFoundError, match="notmnist test IDX files"):
        build_task("fashion-mnist", ood=("notmnist",), shift_kinds=(), data_dirs=(bare_machine,))


def test_not_found_is_worded_by_what_was_tried(bare_machine, tmp_path):
    with pytest.raises(DataNotFoundError) as info:
        load_dataset("mnist", train=False, data_dirs=[bare_machine])
    assert "add --download" in str(info.value) and "--data-dir" in str(info.value)
    with pytest.raises(DataNotFoundError) as info:  # torchvision has no notMNIST: --download is no way to get it
        load_dataset("notmnist", train=False, data_dirs=[bare_machine], download=True)
    assert "--download" not in str(info.value) and "MNIST-format IDX copy" in str(info.value)
    with pytest.raises(DataNotFoundError, match="apt-get install dataset-fashion-mnist"):
        load_dataset("fashion-mnist", train=False, data_dirs=[tmp_path / "empty"])


@pytest.mark.torch
def test_a_failed_download_says_so_and_suggests_no_download(bare_machine, tmp_path, monkeypatch):
    """--download was given and torchvision's fetch failed (the network refused; simulated at torchvision's
    download, the one part that needs a network): the error says the download failed, into which directory (the
    first --data-dir, never /usr/share/datasets), and does not suggest --download."""
    torchvision = pytest.importorskip("torchvision")

    def offline(self):
        raise urllib.error.URLError("network is unreachable")

    monkeypatch.setattr(torchvision.datasets.MNIST, "download", offline)
    with pytest.raises(DataNotFoundError) as info:
        load_dataset("mnist", train=False, data_dirs=[bare_machine], download=True)
    message = str(info.value)
    assert f"--download into {bare_machine} failed" in message and "network is unreachable" in message
    assert "add --download" not in message
    from ubench.producers.command import produce

    res = CliRunner().invoke(produce, ["sgd", "--dataset", "mnist", "--out", str(tmp_path / "m.h5"), "--download",
                                       "--data-dir", str(bare_machine), "--no-progress"])
    assert res.exit_code == 2 and "--download into" in res.stderr and "add --download" not in res.stderr
