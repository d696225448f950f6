# SPDX-License-Identifier: MIT
"""The split fingerprints of the test sets ubench knows (issue #18 item 1), shipped in ``known_splits.json``.

An archive that claims a known dataset (its split's ``dataset`` attribute, in any common spelling) and holds the
whole of that dataset's test set (same ``n_samples``) should carry the fingerprint computed here: SPEC.md §4.2,
``inputs_sha256`` over the images in sample-id order as float32 in [0, 1] (the producers' loader,
``producers.datasets``). :func:`check_known_splits` compares without any reference: a different fingerprint means
the archive was predicted on other inputs than the dataset's published test set (another version, a preprocessed
copy, the wrong files), which ``ubench score`` notes. Checked: ``in_domain`` splits, and ``ood`` splits whose
dataset has the same image shape as the archive's own dataset (an OOD set fed to a model of another input size is
resized first, so its fingerprint legitimately differs). Subsampled splits (another N) cannot be checked without
the data and are not.

:func:`compute_known_splits` recomputes the file from the dataset files (``ubench fingerprints --data DIR``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..metrics.decision import dataset_key

__all__ = ["KNOWN_SPLITS_FILE", "DATASETS", "canonical_dataset", "load_known_splits", "compute_known_splits",
           "check_known_splits"]

KNOWN_SPLITS_FILE = Path(__file__).with_name("known_splits.json")

#: The datasets fingerprinted, in the order of the file. Those after the first four are computed only when their
#: files are given (CIFAR-10/100, SVHN: not in this project's offline data).
DATASETS = ("digits", "mnist", "fashion-mnist", "notmnist", "cifar10", "cifar100", "svhn")

#: Spellings seen in archives and papers, as ``metrics.decision.dataset_key`` gives them.
_ALIASES = {
    "digits": "digits", "sklearndigits": "digits", "uciddigits": "digits", "optdigits": "digits",
    "mnist": "mnist",
    "fashionmnist": "fashion-mnist", "fmnist": "fashion-mnist", "fashion": "fashion-mnist",
    "notmnist": "notmnist",
    "cifar10": "cifar10",
    "cifar100": "cifar100",
    "svhn": "svhn", "svhncropped": "svhn",
}


def canonical_dataset(name: str | None) -> str | None:
    """The known dataset ``name`` spells (``"Fashion_MNIST"`` -> ``"fashion-mnist"``), or None."""
    if not name:
        return None
    return _ALIASES.get(dataset_key(name))


def load_known_splits(path: str | Path = KNOWN_SPLITS_FILE) -> dict[str, list[dict[str, Any]]]:
    """The shipped fingerprints: dataset -> list of ``{"split", "n_samples", "shape", "inputs_sha256",
    "source"}`` (one dataset may have several: scikit-learn's whole digits data and ubench's test split)."""
    return json.loads(Path(path).read_text(encoding="utf-8"))["datasets"]


def _entry(split: str, images, source: str) -> dict[str, Any]:
    from ..archive_schema.fingerprint import inputs_sha256

    return {"split": split, "n_samples": int(images.shape[0]), "shape": [int(d) for d in images.shape[1:]],
            "inputs_sha256": inputs_sha256(images), "source": source}


def compute_known_splits(data_dirs: Iterable[str | Path] = (), *, datasets: Iterable[str] = DATASETS,
                         ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, str]]:
    """Recompute the fingerprints from the dataset files under ``data_dirs`` (searched as the producers search:
    ``producers.datasets.search_path``). Returns ``(datasets, missing)``: the entries of every dataset whose test
    files were found, and for the others why not."""
    from ..producers.datasets import DataNotFoundError, load_dataset

    dirs = tuple(data_dirs)
    out: dict[str, list[dict[str, Any]]] = {}
    missing: dict[str, str] = {}
    for name in datasets:
        if name == "digits":
            import numpy as np
            from sklearn.datasets import load_digits

            full = (load_digits().images.astype(np.float32) / 16.0)[:, None]
            test = load_dataset("digits", train=False)
            out[name] = [
                _entry("test", test.images, "ubench's digits test split (producers.datasets: seed 0, 1/3 test)"),
                _entry("all", full, "scikit-learn's bundled digits, all 1797 images (load_digits().images / 16)"),
            ]
            continue
        try:
            test = load_dataset(name, train=False, data_dirs=dirs)
        except (DataNotFoundError, OSError) as exc:
            missing[name] = str(exc)
            continue
        out[name] = [_entry("test", test.images, f"{name} test set as producers.datasets loads it (/255)")]
    return out, missing


def check_known_splits(root_dataset: str | None, splits: dict[str, Any],
                       known: dict[str, list[dict[str, Any]]] | None = None) -> tuple[dict[str, str], list[str]]:
    """Compare each split's ``inputs_sha256`` with the shipped fingerprint of the dataset it claims.

    ``splits`` maps names to objects with ``role``, ``dataset``, ``n_samples`` and ``inputs_sha256`` (the archive
    header's ``SplitInfo``). Returns ``(status, notes)``: per checkable split ``"match"``, ``"differs"`` or
    ``"absent"`` (no fingerprint in the archive); a note for every ``differs`` and ``absent``."""
    known = load_known_splits() if known is None else known
    root = canonical_dataset(root_dataset)
    root_shapes = {tuple(e["shape"]) for e in known.get(root or "", [])}
    status: dict[str, str] = {}
    notes: list[str] = []
    for name, s in splits.items():
        ds = canonical_dataset(s.dataset or (root_dataset if s.role == "in_domain" else None))
        if ds is None or s.role == "shift" or ds not in known:
            continue
        entries = [e for e in known[ds] if e["n_samples"] == s.n_samples]
        if s.role == "ood":
            entries = [e for e in entries if tuple(e["shape"]) in root_shapes]
        if not entries:
            continue
        if s.inputs_sha256 is None:
            status[name] = "absent"
            notes.append(f"split {name!r} claims {ds} ({s.n_samples} samples) but has no inputs_sha256: the inputs "
                         "it was predicted on were not checked (SPEC.md section 4.2)")
        elif any(e["inputs_sha256"] == s.inputs_sha256 for e in entries):
            status[name] = "match"
        else:
            status[name] = "differs"
            want = entries[0]
            notes.append(f"split {name!r} claims {ds} ({want['split']}, {s.n_samples} samples) but was predicted on "
                         f"other inputs: inputs_sha256 {s.inputs_sha256[:12]}... differs from the known "
                         f"{want['inputs_sha256'][:12]}... (SPEC.md section 4.2; another version or preprocessing "
                         "of the data?)")
    return status, notes
