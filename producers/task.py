# SPDX-License-Identifier: MIT
"""A producer's task: the training set and every split it predicts on (in-domain test, OOD sets, shifted copies).

numpy only. The OOD sets are brought to the in-domain image shape (:func:`~ubench.producers.datasets.resize_images`);
the shifted splits are the (optionally subsampled) test set under each :class:`~ubench.producers.shifts.Shift`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from .datasets import DataNotFoundError, ImageSet, load_dataset, resize_images
from .shifts import BLUR_SIGMAS, NOISE_STDS, SHIFT_KINDS, apply_shift, default_shifts, uniform_noise_images

__all__ = ["DEFAULT_OOD", "SplitData", "Task", "build_task", "build_validation_task", "training_split"]

# The natural OOD pairings: Fashion-MNIST against MNIST and notMNIST (the data README), CIFAR against SVHN.
DEFAULT_OOD: dict[str, tuple[str, ...]] = {
    "digits": ("uniform",),
    "fashion-mnist": ("mnist", "notmnist", "uniform"),
    "mnist": ("fashion-mnist", "notmnist", "uniform"),
    "kmnist": ("mnist", "uniform"),
    "cifar10": ("svhn", "uniform"),
    "cifar100": ("svhn", "uniform"),
}


@dataclass(frozen=True)
class SplitData:
    """Images of one split and what the archive records about it."""

    role: str  # "in_domain", "ood", "shift"
    dataset: str
    images: NDArray[np.float32]
    labels: NDArray[np.int64] | None
    sample_ids: NDArray[np.int64]
    shift_kind: str | None = None
    shift_intensity: float | None = None


@dataclass(frozen=True)
class Task:
    """Training data plus named prediction splits; ``mean``/``std`` are the training set's pixel statistics the
    model normalises with. ``val`` is the validation split held out of the training set (None when
    ``val_fraction`` is 0): methods that tune on it (Laplace's noise scale) never see the test split. ``notes``:
    what the command tells the user about the splits (a default OOD set skipped, and how to add it)."""

    dataset: str
    train: ImageSet
    splits: dict[str, SplitData]
    n_classes: int
    class_names: tuple[str, ...] | None
    mean: float
    std: float
    settings: dict = field(default_factory=dict)
    val: ImageSet | None = None
    notes: tuple[str, ...] = ()  # what the user should know about how the splits were built (skipped OOD sets)

    @property
    def input_shape(self) -> tuple[int, int, int]:
        return tuple(self.train.images.shape[1:])  # type: ignore[return-value]


def _subsample(n_total: int, n: int | None, seed: int) -> NDArray[np.int64]:
    if n is None or n >= n_total:
        return np.arange(n_total, dtype=np.int64)
    return np.sort(np.random.default_rng(seed).choice(n_total, size=n, replace=False)).astype(np.int64)


def _ood_split(name: str, shape: tuple, n_test: int, ood_samples: int | None, seed: int, data_dirs: tuple,
               download: bool) -> SplitData:
    """The OOD split ``name`` (``"uniform"``: noise images), brought to the in-domain image ``shape``."""
    if name == "uniform":
        n = ood_samples or n_test
        return SplitData("ood", "uniform-noise", uniform_noise_images(n, shape, seed=seed), None,
                         np.arange(n, dtype=np.int64))
    other = load_dataset(name, train=False, data_dirs=data_dirs, download=download)
    other = other.take(_subsample(len(other), ood_samples, seed))
    return SplitData("ood", name, resize_images(other.images, *shape), None, other.sample_ids)


def training_split(
    dataset: str,
    *,
    train_samples: int | None = None,
    data_dirs: tuple = (),
    download: bool = False,
    data_seed: int = 0,
    val_fraction: float = 0.0,
) -> tuple[ImageSet, ImageSet | None]:
    """The training set and the validation split held out of it, ``(train, val)`` (``val`` is None when
    ``val_fraction`` rounds to no sample). Reads only the dataset's training files, never its test files; the
    arguments mean what they mean in :func:`build_task`, which calls this."""
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1); got {val_fraction}")
    train = load_dataset(dataset, train=True, data_dirs=data_dirs, download=download)
    train = train.take(_subsample(len(train), train_samples, data_seed))
    val = None
    n_val = int(round(val_fraction * len(train)))
    if n_val > 0:
        if n_val >= len(train):
            raise ValueError(f"val_fraction {val_fraction} leaves no training samples out of {len(train)}")
        order = np.random.default_rng(data_seed + 3).permutation(len(train))
        val = train.take(np.sort(order[:n_val]))
        train = train.take(np.sort(order[n_val:]))
    return train, val


def build_validation_task(
    dataset: str,
    *,
    train_samples: int | None = None,
    data_dirs: tuple = (),
    download: bool = False,
    data_seed: int = 0,
    val_fraction: float = 0.1,
) -> Task:
    """The task hyperparameter tuning runs on: :func:`build_task`'s training set (same subset, same validation
    split, same normalisation) with the validation split as its only prediction split, named ``"val"``. The test
    files are never opened, so no tuning decision can depend on the test split."""
    train, val = training_split(dataset, train_samples=train_samples, data_dirs=data_dirs, download=download,
                                data_seed=data_seed, val_fraction=val_fraction)
    if val is None:
        raise ValueError(f"val_fraction {val_fraction} holds out no sample of {len(train)}; tuning needs a "
                         f"validation split")
    n_classes = len(train.class_names) if train.class_names else int(max(train.labels.max(), val.labels.max())) + 1
    mean = float(train.images.mean(dtype=np.float64))
    std = float(train.images.std(dtype=np.float64)) or 1.0
    splits = {"val": SplitData("in_domain", dataset, val.images, val.labels, val.sample_ids)}
    settings = {"dataset": dataset, "train_samples": len(train), "data_seed": data_seed,
                "val_fraction": val_fraction, "val_samples": len(val), "normalize_mean": mean, "normalize_std": std}
    return Task(dataset, train, splits, n_classes, train.class_names, mean, std, settings, val)


def build_task(
    dataset: str,
    *,
    ood: tuple[str, ...] | None = None,
    shift_kinds: tuple[str, ...] = SHIFT_KINDS,
    train_samples: int | None = None,
    test_samples: int | None = None,
    shift_samples: int | None = None,
    ood_samples: int | None = None,
    data_dirs: tuple = (),
    download: bool = False,
    data_seed: int = 0,
    val_fraction: float = 0.0,
    progress: Callable[[int, int], None] | None = None,
) -> Task:
    """Load ``dataset`` and build its splits.

    Parameters
    ----------
    dataset : str
        A name :func:`~ubench.producers.datasets.load_dataset` knows.
    ood : tuple of str, optional
        OOD dataset names, or ``"uniform"`` for uniform noise; default :data:`DEFAULT_OOD` for the dataset (uniform
        noise only for an unknown one). A default OOD set whose files are not found (nor downloaded) is skipped,
        named in ``settings["ood_skipped"]`` (recorded in the archive) and in ``notes`` (saying how to add it), so
        that the defaults work with only the in-domain data present; an OOD set named here must be found.
    shift_kinds : tuple of str
        Which shift families to add (``()`` for none).
    train_samples, test_samples, shift_samples, ood_samples : int, optional
        Random subsets (seeded by ``data_seed``) for quick runs; ``shift_samples`` subsamples the test set that the
        shifts are applied to. ``None`` keeps everything.
    data_seed : int
        Seed of the subsets and of the noise (uniform OOD, Gaussian-noise shift); fixed by default so that every
        method of a benchmark sees the same splits.
    val_fraction : float
        Fraction of the (subsampled) training set held out as ``task.val`` (a random subset seeded by
        ``data_seed``; the rest is ``task.train``). It comes out of the training set, never the test set.
    progress : called as ``progress(done, total)`` after each split is built (the training and test sets count as
        the first), so that a command can show the data preparation, which takes minutes on big grids.
    """
    oods = ood if ood is not None else DEFAULT_OOD.get(dataset, ("uniform",))
    train, val = training_split(dataset, train_samples=train_samples, data_dirs=data_dirs, download=download,
                                data_seed=data_seed, val_fraction=val_fraction)
    test = load_dataset(dataset, train=False, data_dirs=data_dirs, download=download)
    test = test.take(_subsample(len(test), test_samples, data_seed + 1))
    n_classes = int(max(train.labels.max(), test.labels.max())) + 1
    shape = train.images.shape[1:]
    splits: dict[str, SplitData] = {
        "test": SplitData("in_domain", dataset, test.images, test.labels, test.sample_ids)
    }
    shifts = default_shifts(shape[-1], tuple(shift_kinds))
    total = 1 + len(oods) + len(shifts)
    if progress is not None:
        progress(1, total)  # the training and test sets
    skipped: list[str] = []
    notes: list[str] = []
    for i, name in enumerate(oods):
        try:
            split = _ood_split(name, shape, len(test), ood_samples, data_seed + 100 + i, data_dirs, download)
        except DataNotFoundError as exc:
            if ood is not None:  # asked for by name: its absence is an error
                raise
            skipped.append(name)
            notes.append(f"the default OOD set {name} was skipped: {exc}")
        else:
            splits["ood_uniform" if name == "uniform" else f"ood_{name.replace('-', '_')}"] = split
        if progress is not None:
            progress(2 + i, total)
    shifted = test.take(_subsample(len(test), shift_samples, data_seed + 2))
    for j, shift in enumerate(shifts):
        images = apply_shift(shifted.images, shift, seed=data_seed + 200 + j)
        splits[shift.split_name] = SplitData(
            "shift", dataset, images, shifted.labels, shifted.sample_ids, shift.kind, shift.intensity
        )
        if progress is not None:
            progress(2 + len(oods) + j, total)
    mean = float(train.images.mean(dtype=np.float64))
    std = float(train.images.std(dtype=np.float64)) or 1.0
    settings = {
        "dataset": dataset,
        "ood": [s.dataset for s in splits.values() if s.role == "ood"],
        "ood_skipped": skipped,
        "shift_kinds": list(shift_kinds),
        "train_samples": len(train),
        "test_samples": len(test),
        "shift_samples": len(shifted),
        "ood_samples": ood_samples,
        "data_seed": data_seed,
        "val_fraction": val_fraction,
        "val_samples": 0 if val is None else len(val),
        "normalize_mean": mean,
        "normalize_std": std,
        "noise_stds": list(NOISE_STDS),
        "blur_sigmas": list(BLUR_SIGMAS),
    }
    return Task(dataset, train, splits, n_classes, train.class_names or test.class_names, mean, std, settings, val,
                tuple(notes))

