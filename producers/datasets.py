# SPDX-License-Identifier: MIT
"""Image data for the producers: IDX files, scikit-learn's digits, CIFAR/SVHN files, and torchvision datasets.

Everything here is numpy (and scipy for reading SVHN's ``.mat``); torch is not imported. Images are float32
arrays of shape (n, channels, height, width) with values in [0, 1]; labels are int64. Nothing downloads unless the
caller passes ``download=True`` (which needs torchvision and a network).

Where files are looked for, in order: the directories the caller names, the directories in the environment variable
``UBENCH_DATA`` (``os.pathsep``-separated), then :data:`DEFAULT_SEARCH_PATH` (``/usr/share/datasets``, the
``shared/data`` folder beside the repository, ``~/.cache/ubench/data``). Inside each directory a dataset is looked
for under each of its known folder names (``fashion-mnist``, torchvision's ``FashionMNIST/raw``, ...) and in the
directory itself. ``download=True`` fetches a missing dataset with torchvision into the first directory the caller
or ``UBENCH_DATA`` names, else ``~/.cache/ubench/data``. Where the files come from, per dataset, is in
:func:`where_to_get`, which every "not found" message quotes.
"""

from __future__ import annotations

import gzip
import os
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "DEFAULT_SEARCH_PATH",
    "CACHE_DIR",
    "DataNotFoundError",
    "ImageSet",
    "DATASETS",
    "search_path",
    "where_to_get",
    "read_idx",
    "load_dataset",
    "resize_images",
]

_REPO_ROOT = Path(__file__).resolve().parents[1]
#: Where ``download=True`` writes when the caller names no directory.
CACHE_DIR = Path.home() / ".cache" / "ubench" / "data"
DEFAULT_SEARCH_PATH: tuple[Path, ...] = (
    Path("/usr/share/datasets"),
    _REPO_ROOT.parent / "shared" / "data",
    CACHE_DIR,
)
ENV_VAR = "UBENCH_DATA"


class DataNotFoundError(FileNotFoundError):
    """A dataset's files are in none of the searched directories."""


@dataclass(frozen=True)
class ImageSet:
    """One split of an image dataset.

    ``images`` float32 (n, channels, height, width) in [0, 1]; ``labels`` int64 (n,); ``sample_ids`` int64 (n,), the
    index of each image in the file it came from.
    """

    images: NDArray[np.float32]
    labels: NDArray[np.int64]
    sample_ids: NDArray[np.int64]
    class_names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.images.ndim != 4:
            raise ValueError(f"images must have shape (n, channels, height, width); got {self.images.shape}")
        if not (len(self.images) == len(self.labels) == len(self.sample_ids)):
            raise ValueError(
                f"images, labels and sample_ids must have equal length; got {len(self.images)}, "
                f"{len(self.labels)}, {len(self.sample_ids)}"
            )

    def __len__(self) -> int:
        return len(self.labels)

    def take(self, index: NDArray[np.int64]) -> "ImageSet":
        """The subset at ``index`` (sample ids kept)."""
        return ImageSet(self.images[index], self.labels[index], self.sample_ids[index], self.class_names)


@dataclass(frozen=True)
class _Source:
    """Where and how a named dataset is stored."""

    kind: str  # "idx", "digits", "cifar", "svhn"
    folders: tuple[str, ...] = ()
    class_names: tuple[str, ...] | None = None
    torchvision_name: str | None = None
    cifar_folder: str = ""
    source: str = ""  # where the files come from besides torchvision, for the "not found" messages


_FASHION_CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)
_CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")

DATASETS: dict[str, _Source] = {
    "digits": _Source("digits", class_names=tuple(str(d) for d in range(10))),
    "fashion-mnist": _Source(
        "idx", ("fashion-mnist", "fashion_mnist", "FashionMNIST/raw"), _FASHION_CLASSES, "FashionMNIST",
        source="Debian's package puts them in /usr/share/datasets/fashion-mnist: apt-get install dataset-fashion-mnist",
    ),
    "mnist": _Source("idx", ("mnist", "mnist-test", "MNIST/raw"), tuple(str(d) for d in range(10)), "MNIST"),
    "notmnist": _Source("idx", ("notmnist", "notmnist-test", "notMNIST"), tuple("ABCDEFGHIJ"),
                        source="no package or torchvision class has it: put an MNIST-format IDX copy of its letters "
                               "A-J (t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz) in DIR/notmnist and pass "
                               "--data-dir DIR"),
    "kmnist": _Source("idx", ("kmnist", "KMNIST/raw"), None, "KMNIST"),
    "cifar10": _Source("cifar", ("",), _CIFAR10_CLASSES, "CIFAR10", "cifar-10-batches-py"),
    "cifar100": _Source("cifar", ("",), None, "CIFAR100", "cifar-100-python"),
    "svhn": _Source("svhn", ("", "svhn", "SVHN"), tuple(str(d) for d in range(10)), "SVHN"),
}


def _user_dirs(data_dirs: tuple | list = ()) -> list[Path]:
    env = [p for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p]
    return [Path(p).expanduser() for p in (*data_dirs, *env)]


def search_path(data_dirs: tuple[str | os.PathLike, ...] | list = ()) -> list[Path]:
    """The directories searched for data, in order: ``data_dirs``, ``$UBENCH_DATA``, the default search path."""
    return _user_dirs(data_dirs) + list(DEFAULT_SEARCH_PATH)


def where_to_get(name: str, *, download: bool = False) -> str:
    """How to add dataset ``name`` that was not found, worded by what was tried: ``--data-dir``/``$UBENCH_DATA``
    always; ``--download`` only where torchvision can fetch the dataset and it was not asked for already; the
    dataset's own source (Debian's package for Fashion-MNIST, an IDX copy for notMNIST)."""
    source = DATASETS.get(name)
    ways = [f"pass --data-dir DIR or set {ENV_VAR}"]
    if source is not None and source.torchvision_name is not None and not download:
        ways.append("add --download to fetch it with torchvision (needs a network)")
    if source is not None and source.source:
        ways.append(source.source)
    elif source is not None and source.torchvision_name is None and download:
        ways.append(f"torchvision cannot download {name}")
    return "; ".join(ways)


def read_idx(path: str | os.PathLike) -> NDArray:
    """Read one IDX file (optionally gzip-compressed) into an array of its stored dtype and shape."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"{path} is not an IDX file (bad magic number)")
    dtypes = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
    if raw[2] not in dtypes:
        raise ValueError(f"{path}: unknown IDX element type 0x{raw[2]:02x}")
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    data = np.frombuffer(raw, dtype=dtypes[raw[2]], offset=4 + 4 * ndim)
    if data.size != int(np.prod(shape)):
        raise ValueError(f"{path}: header says shape {shape} but the file holds {data.size} elements")
    return data.reshape(shape).astype(dtypes[raw[2]][1:], copy=False)


def _find_file(dirs: list[Path], folders: tuple[str, ...], names: tuple[str, ...]) -> Path | None:
    for d in dirs:
        for folder in (*folders, ""):
            for name in names:
                candidate = d / folder / name if folder else d / name
                if candidate.is_file():
                    return candidate
    return None


def _idx_names(train: bool, what: str) -> tuple[str, ...]:
    stem = ("train" if train else "t10k") + ("-images-idx3-ubyte" if what == "images" else "-labels-idx1-ubyte")
    return (stem + ".gz", stem, stem.replace("-idx", ".idx") + ".gz", stem.replace("-idx", ".idx"))


def _load_idx_dataset(name: str, source: _Source, train: bool, dirs: list[Path]) -> ImageSet:
    images_path = _find_file(dirs, source.folders, _idx_names(train, "images"))
    labels_path = _find_file(dirs, source.folders, _idx_names(train, "labels"))
    if images_path is None or labels_path is None or images_path.parent != labels_path.parent:
        split = "train" if train else "test"
        raise DataNotFoundError(
            f"{name} {split} IDX files ({_idx_names(train, 'images')[0]}, {_idx_names(train, 'labels')[0]}) not "
            f"found under {[str(d) for d in dirs]} (folders tried: {list(source.folders)})"
        )
    images = read_idx(images_path)
    labels = read_idx(labels_path).astype(np.int64)
    if images.ndim == 3:
        images = images[:, None]
    return ImageSet(
        (images.astype(np.float32) / 255.0), labels, np.arange(len(labels), dtype=np.int64), source.class_names
    )


def _load_digits(train: bool) -> ImageSet:
    # A fixed split (seed 0, 1/3 test) so that every run of every method sees the same test set.
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = (bunch.images.astype(np.float32) / 16.0)[:, None]
    labels = bunch.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(labels))
    n_test = len(labels) // 3
    index = np.sort(order[n_test:] if train else order[:n_test])
    return ImageSet(images[index], labels[index], index.astype(np.int64), DATASETS["digits"].class_names)


def _load_cifar(name: str, source: _Source, train: bool, dirs: list[Path]) -> ImageSet:
    folder = next((d / source.cifar_folder for d in dirs if (d / source.cifar_folder).is_dir()), None)
    if folder is None:
        raise DataNotFoundError(f"{name}: folder {source.cifar_folder!r} not found under {[str(d) for d in dirs]}")
    if name == "cifar10":
        files = [f"data_batch_{i}" for i in range(1, 6)] if train else ["test_batch"]
        label_key = b"labels"
    else:
        files = ["train"] if train else ["test"]
        label_key = b"fine_labels"
    images, labels = [], []
    for file in files:
        with open(folder / file, "rb") as f:
            batch = pickle.load(f, encoding="bytes")
        images.append(np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        labels.append(np.asarray(batch[label_key], dtype=np.int64))
    y = np.concatenate(labels)
    return ImageSet(
        np.concatenate(images).astype(np.float32) / 255.0, y, np.arange(len(y), dtype=np.int64), source.class_names
    )


def _load_svhn(name: str, source: _Source, train: bool, dirs: list[Path]) -> ImageSet:
    from scipy.io import loadmat

    file = "train_32x32.mat" if train else "test_32x32.mat"
    path = _find_file(dirs, source.folders, (file,))
    if path is None:
        raise DataNotFoundError(f"{name}: {file} not found under {[str(d) for d in dirs]}")
    mat = loadmat(path)
    images = np.transpose(mat["X"], (3, 2, 0, 1)).astype(np.float32) / 255.0
    # SVHN stores the digit 0 as label 10.
    labels = mat["y"].astype(np.int64).reshape(-1) % 10
    return ImageSet(images, labels, np.arange(len(labels), dtype=np.int64), source.class_names)


def _load_torchvision(class_name: str, train: bool, dirs: list[Path], download: bool) -> ImageSet:
    """A torchvision dataset read from (or, with ``download``, fetched into) ``dirs[0]``, the cache when empty."""
    import torchvision

    cls = getattr(torchvision.datasets, class_name, None)
    if cls is None:
        raise ValueError(f"torchvision.datasets has no dataset {class_name!r}")
    root = dirs[0] if dirs else CACHE_DIR
    if class_name == "SVHN":
        ds = cls(str(root), split="train" if train else "test", download=download)
        data, targets = np.asarray(ds.data), np.asarray(ds.labels)
    else:
        ds = cls(str(root), train=train, download=download)
        data, targets = np.asarray(ds.data), np.asarray(ds.targets)
    if data.ndim == 3:
        data = data[:, None]
    elif data.shape[-1] in (1, 3):  # channels-last (CIFAR)
        data = np.transpose(data, (0, 3, 1, 2))
    classes = getattr(ds, "classes", None)
    return ImageSet(
        data.astype(np.float32) / 255.0,
        targets.astype(np.int64),
        np.arange(len(targets), dtype=np.int64),
        tuple(str(c) for c in classes) if classes else None,
    )


def load_dataset(
    name: str, *, train: bool, data_dirs: tuple | list = (), download: bool = False
) -> ImageSet:
    """Load the train or test split of a dataset.

    Parameters
    ----------
    name : str
        A key of :data:`DATASETS`; ``idx:DIR`` for the standard IDX files (``train-images-idx3-ubyte[.gz]``,
        ``t10k-...``) in ``DIR``; or ``torchvision:ClassName`` for any torchvision dataset with the
        ``(root, train=, download=)`` signature, read from the first data directory.
    train : bool
        The training split (else the test split).
    data_dirs : sequence of paths
        Directories searched before ``$UBENCH_DATA`` and the default search path.
    download : bool, default=False
        Download with torchvision into the first data directory when the files are missing.

    Raises
    ------
    DataNotFoundError
        The files are in none of the searched directories (and ``download`` is false).
    """
    dirs = search_path(data_dirs)
    # where --download writes: a directory the user named, else the cache (never /usr/share/datasets)
    download_dirs = _user_dirs(data_dirs) or [CACHE_DIR]
    if name.startswith("idx:"):
        directory = Path(name[4:]).expanduser()
        return _load_idx_dataset(name, _Source("idx", ("",)), train, [directory])
    if name.startswith("torchvision:"):
        return _load_torchvision(name.split(":", 1)[1], train, download_dirs if download else dirs, download)
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; known: {sorted(DATASETS)}, idx:DIR, torchvision:ClassName")
    source = DATASETS[name]
    loaders = {"idx": _load_idx_dataset, "cifar": _load_cifar, "svhn": _load_svhn}
    if source.kind == "digits":
        return _load_digits(train)
    try:
        return loaders[source.kind](name, source, train, dirs)
    except DataNotFoundError as exc:
        if not download or source.torchvision_name is None:
            raise DataNotFoundError(f"{exc}; {where_to_get(name, download=download)}") from None
        not_found = str(exc)
    try:
        return _load_torchvision(source.torchvision_name, train, download_dirs, download=True)
    except (OSError, RuntimeError) as exc:  # no network, a refused or truncated download
        raise DataNotFoundError(f"{not_found}, and --download into {download_dirs[0]} failed: {exc}; "
                                f"{where_to_get(name, download=True)}") from None


def resize_images(images: NDArray[np.float32], channels: int, height: int, width: int) -> NDArray[np.float32]:
    """Bring images to another shape: grey to colour by repeating the channel (colour to grey by averaging), and
    bilinear resampling of each image to (height, width). Used to feed an OOD set to a model of another input size."""
    from scipy.ndimage import zoom

    if images.shape[1] != channels:
        if images.shape[1] == 1:
            images = np.repeat(images, channels, axis=1)
        elif channels == 1:
            images = images.mean(axis=1, keepdims=True)
        else:
            raise ValueError(f"cannot map {images.shape[1]} channels to {channels}")
    h, w = images.shape[2:]
    if (h, w) != (height, width):
        images = zoom(images, (1, 1, height / h, width / w), order=1, grid_mode=True, mode="grid-constant")
    return np.clip(images, 0.0, 1.0).astype(np.float32)
