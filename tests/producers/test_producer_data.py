# SPDX-License-Identifier: MIT
"""Data, shift and OOD splits of the producers (numpy/scipy only; no torch)."""

import gzip
import pickle

import numpy as np
import pytest

from ubench.producers.datasets import DataNotFoundError, load_dataset, read_idx, resize_images
from ubench.producers.shifts import (
    Shift,
    apply_shift,
    default_shifts,
    is_identity,
    gaussian_blur,
    gaussian_noise,
    rotate,
    translate,
    uniform_noise_images,
)
from ubench.producers.task import build_task


def _digits_images(n=50):
    return load_dataset("digits", train=False).images[:n]


def _write_idx(path, array, *, compress=True):
    codes = {np.dtype(np.uint8): 0x08, np.dtype(np.int32): 0x0C}
    header = bytes([0, 0, codes[array.dtype], array.ndim]) + b"".join(d.to_bytes(4, "big") for d in array.shape)
    body = header + array.astype(array.dtype.newbyteorder(">")).tobytes()
    (gzip.open if compress else open)(path, "wb").write(body)


def _fake_idx_dir(root, *, n_train=40, n_test=20, size=28, seed=0):
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    for stem, n in (("train", n_train), ("t10k", n_test)):
        _write_idx(root / f"{stem}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, size, size), dtype=np.uint8))
        _write_idx(root / f"{stem}-labels-idx1-ubyte.gz", (np.arange(n) % 10).astype(np.uint8))
    return root


def test_rotation_by_zero_is_identity_and_by_90_is_rot90():
    """For any images, rotating by 0 degrees changes nothing and by 90 degrees is numpy's rot90 (counter-clockwise)."""
    x = _digits_images()
    np.testing.assert_allclose(rotate(x, 0.0), x, atol=1e-5)
    np.testing.assert_allclose(rotate(x, 90.0), np.rot90(x, k=1, axes=(2, 3)), atol=1e-4)
    assert rotate(x, 45.0).min() >= 0.0 and rotate(x, 45.0).max() <= 1.0


def test_translation_is_cyclic():
    """Translating by the width is the identity; translations compose additively; pixel (r, c) moves to (r, c+p)."""
    x = _digits_images()
    w = x.shape[-1]
    np.testing.assert_array_equal(translate(x, w), x)
    np.testing.assert_array_equal(translate(translate(x, 3), 2), translate(x, 5))
    np.testing.assert_array_equal(translate(x, 2)[..., 2:], x[..., :-2])
    np.testing.assert_array_equal(translate(x, 2)[..., :2], x[..., -2:])
    assert np.sort(translate(x, 3), axis=None).tolist() == np.sort(x, axis=None).tolist()


@pytest.mark.parametrize("corrupt", [
    lambda x, s: gaussian_noise(x, s, seed=0),
    gaussian_blur,
    lambda x, s: rotate(x, 15.0 * s),
])
def test_higher_intensity_corrupts_more(corrupt):
    """The mean absolute change of the images grows strictly with the severity."""
    x = _digits_images(200)
    change = [float(np.abs(corrupt(x, s) - x).mean()) for s in (1, 2, 3, 4, 5)]
    assert all(a < b for a, b in zip(change, change[1:])), change


def test_noise_is_seeded_and_inputs_are_not_mutated():
    x = _digits_images()
    before = x.copy()
    np.testing.assert_array_equal(gaussian_noise(x, 3, seed=7), gaussian_noise(x, 3, seed=7))
    assert not np.array_equal(gaussian_noise(x, 3, seed=7), gaussian_noise(x, 3, seed=8))
    for shift in default_shifts(8):
        apply_shift(x, shift, seed=0)
    np.testing.assert_array_equal(x, before)


def test_default_grid_is_the_shift_papers():
    grid = default_shifts(28)
    rot = [s.intensity for s in grid if s.kind == "rotate"]
    tr = [s.intensity for s in grid if s.kind == "translate"]
    assert rot == [15.0 * k for k in range(1, 13)] and tr == [2.0 * k for k in range(1, 14)]  # 28 = identity
    assert [s.intensity for s in grid if s.kind == "noise"] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert Shift("rotate", 15.0).split_name == "shift_rotate_15"
    with pytest.raises(ValueError, match="unknown shift kinds"):
        default_shifts(28, ("zoom",))


@pytest.mark.parametrize("width", [8, 28, 32])
def test_no_default_shift_is_the_identity(width):
    """For every default shift of images of any width, the shifted images differ from the clean ones (a cyclic
    translation by the width was the clean test set counted as the most shifted split; issue #28 item 6)."""
    x = np.random.default_rng(0).random((3, 1, width, width), dtype=np.float32)
    shifts = default_shifts(width)
    for shift in shifts:
        assert not np.array_equal(apply_shift(x, shift, seed=0), x), shift
    assert max(s.intensity for s in shifts if s.kind == "translate") == width - 2
    assert is_identity(Shift("translate", width), width) and is_identity(Shift("rotate", 360.0), width)
    assert not is_identity(Shift("translate", width // 2), width)


def test_idx_round_trip_gz_and_raw(tmp_path):
    a = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    _write_idx(tmp_path / "a.gz", a)
    _write_idx(tmp_path / "a.raw", a, compress=False)
    np.testing.assert_array_equal(read_idx(tmp_path / "a.gz"), a)
    np.testing.assert_array_equal(read_idx(tmp_path / "a.raw"), a)
    (tmp_path / "bad").write_bytes(b"\x01\x02\x08\x01\x00\x00\x00\x01\x00")
    with pytest.raises(ValueError, match="magic"):
        read_idx(tmp_path / "bad")


def test_idx_datasets_resolve_from_user_dir_env_and_idx_prefix(tmp_path, monkeypatch):
    """A dataset is found in a user-given directory, in $UBENCH_DATA, and via idx:DIR, under its folder names."""
    _fake_idx_dir(tmp_path / "mine" / "fashion-mnist", n_test=20)
    monkeypatch.setenv("UBENCH_DATA", "")
    train = load_dataset("fashion-mnist", train=True, data_dirs=[tmp_path / "mine"])
    assert train.images.shape == (40, 1, 28, 28) and train.images.dtype == np.float32
    assert 0.0 <= train.images.min() and train.images.max() <= 1.0
    assert train.class_names[0] == "T-shirt/top"
    monkeypatch.setenv("UBENCH_DATA", str(tmp_path / "mine"))
    assert len(load_dataset("fashion-mnist", train=False)) == 20
    direct = load_dataset(f"idx:{tmp_path / 'mine' / 'fashion-mnist'}", train=False)
    np.testing.assert_array_equal(direct.images, load_dataset("fashion-mnist", train=False).images)


def test_missing_data_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv("UBENCH_DATA", "")
    monkeypatch.setattr("ubench.producers.datasets.DEFAULT_SEARCH_PATH", ())
    with pytest.raises(DataNotFoundError, match="--data-dir"):
        load_dataset("kmnist", train=True, data_dirs=[tmp_path])


def test_build_task_digits_splits():
    task = build_task("digits", shift_kinds=("rotate", "translate"), shift_samples=60)
    assert task.splits["test"].role == "in_domain" and task.n_classes == 10
    assert task.splits["ood_uniform"].role == "ood" and task.splits["ood_uniform"].labels is None
    rot = task.splits["shift_rotate_30"]
    assert (rot.role, rot.shift_kind, rot.shift_intensity, len(rot.images)) == ("shift", "rotate", 30.0, 60)
    test = task.splits["test"]
    pos = np.searchsorted(test.sample_ids, rot.sample_ids)
    np.testing.assert_array_equal(test.labels[pos], rot.labels)
    np.testing.assert_array_equal(task.splits["shift_translate_6"].images, np.roll(test.images[pos], 6, axis=3))
    assert "shift_translate_8" not in task.splits  # 8 pixels on 8 x 8 = a full cycle = the clean test set
    assert not set(task.train.sample_ids) & set(test.sample_ids)
    noise = task.splits["ood_uniform"].images
    assert noise.shape[1:] == (1, 8, 8) and 0.0 <= noise.min() and noise.max() <= 1.0


def test_ood_sets_are_resized_to_the_in_domain_shape(tmp_path, monkeypatch):
    monkeypatch.setenv("UBENCH_DATA", "")
    _fake_idx_dir(tmp_path / "mnist")
    task = build_task("digits", ood=("mnist", "uniform"), shift_kinds=(), data_dirs=(tmp_path,))
    assert task.splits["ood_mnist"].images.shape == (20, 1, 8, 8)
    assert resize_images(np.ones((2, 1, 28, 28), np.float32), 3, 32, 32).shape == (2, 3, 32, 32)


def test_shared_ood_copies_are_found_by_the_default_search_path():
    try:
        mnist = load_dataset("mnist", train=False)
        notmnist = load_dataset("notmnist", train=False)
    except DataNotFoundError:
        pytest.skip("the shared MNIST/notMNIST test copies are not on this machine")
    assert mnist.images.shape == notmnist.images.shape == (10000, 1, 28, 28)


def write_fake_cifar10_and_svhn(root, *, n=12, seed=0):
    """Tiny CIFAR-10 and SVHN copies in the on-disk formats torchvision reads (python pickles, .mat)."""
    from scipy.io import savemat

    rng = np.random.default_rng(seed)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), b"labels": list(range(n))[:n]}
        batch[b"labels"] = [i % 10 for i in range(n)]
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": [b"x"] * 10}, f)
    savemat(root / "test_32x32.mat", {"X": rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8),
                                      "y": (np.arange(n) % 10 + 1).reshape(-1, 1)})


def test_cifar10_with_svhn_ood_from_fake_copies(tmp_path):
    write_fake_cifar10_and_svhn(tmp_path)
    task = build_task("cifar10", shift_kinds=("rotate",), data_dirs=(tmp_path,))
    assert task.train.images.shape == (60, 3, 32, 32) and len(task.splits["test"].images) == 12
    assert task.splits["ood_svhn"].images.shape == (12, 3, 32, 32)
    assert set(task.splits["test"].labels) <= set(range(10))
