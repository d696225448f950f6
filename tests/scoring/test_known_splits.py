# SPDX-License-Identifier: MIT
"""The shipped fingerprints of the known test sets (scoring/known_splits.json, issue #18 item 1) and the note
``ubench score`` gives without a reference.

Oracle: each fingerprint is recomputed here from the dataset files with the four lines of NumPy in SPEC.md §4.2 and
an IDX reader written from the IDX format (magic, big-endian sizes, uint8 pixels), not with ubench's loader or
``inputs_sha256``. digits always runs (scikit-learn's bundled data); MNIST and notMNIST need the project's offline
data (``../shared/data``), Fashion-MNIST Debian's ``dataset-fashion-mnist``; each skips with the reason otherwise.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ubench.archive_schema import ArchiveWriter, SplitSpec
from ubench.scoring.known_splits import canonical_dataset, check_known_splits, load_known_splits
from ubench.scoring.score import score_archive

REPO = Path(__file__).resolve().parents[2]
SHARED = [Path("/work/shared/data"), REPO.parent / "shared" / "data"]


def spec_sha256(inputs) -> str:
    """SPEC.md §4.2, as written there."""
    x = np.ascontiguousarray(inputs, dtype="<f4")
    h = hashlib.sha256(f"ubench-inputs/1\n{','.join(map(str, x.shape))}\n".encode("ascii"))
    h.update(x.tobytes())
    return h.hexdigest()


def read_idx_images(path: Path) -> np.ndarray:
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    assert raw[:4] == b"\x00\x00\x08\x03", "IDX magic of a 3-d uint8 array"
    n, h, w = (int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(3))
    return np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(n, 1, h, w)


def _find(*candidates: Path) -> Path:
    for p in candidates:
        if p.is_file():
            return p
    pytest.skip(f"test images not present (looked for {', '.join(map(str, candidates))})")


SHIPPED = load_known_splits()


def _shipped(dataset: str, split: str = "test") -> dict:
    return next(e for e in SHIPPED[dataset] if e["split"] == split)


def test_digits_fingerprints_equal_a_recomputation():
    from sklearn.datasets import load_digits

    images = (load_digits().images / 16.0)[:, None]  # float64 here: the encoding casts to float32
    everything = _shipped("digits", "all")
    assert everything["n_samples"] == 1797 and everything["inputs_sha256"] == spec_sha256(images)
    # ubench's own digits test split: a seed-0 permutation of the 1797 images, its first third, in id order
    ids = np.sort(np.random.default_rng(0).permutation(1797)[: 1797 // 3])
    test = _shipped("digits")
    assert test["n_samples"] == 599 and test["shape"] == [1, 8, 8]
    assert test["inputs_sha256"] == spec_sha256(images[ids])


@pytest.mark.parametrize("dataset, relative", [
    ("mnist", "mnist-test/t10k-images-idx3-ubyte.gz"),
    ("notmnist", "notmnist-test/t10k-images-idx3-ubyte.gz"),
    ("fashion-mnist", None),
])
def test_idx_fingerprints_equal_a_recomputation(dataset, relative):
    if relative is None:
        path = _find(Path("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"))
    else:
        path = _find(*(d / relative for d in SHARED))
    images = read_idx_images(path)
    entry = _shipped(dataset)
    assert entry["n_samples"] == len(images) == 10000 and entry["shape"] == [1, 28, 28]
    assert entry["inputs_sha256"] == spec_sha256(images.astype(np.float64) / 255.0)


def test_fingerprints_command_recomputes_the_shipped_file(tmp_path):
    out = tmp_path / "known.json"
    data = [a for d in SHARED if d.is_dir() for a in ("--data", str(d))][:2]
    r = subprocess.run([sys.executable, "-m", "ubench.cli", "fingerprints", "--out", str(out), *data],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    found = json.loads(out.read_text())["datasets"]
    assert found["digits"] == SHIPPED["digits"]
    for name, entries in found.items():  # whatever this machine has (MNIST etc.) equals what ships
        assert entries == SHIPPED[name], name
    assert "cifar10: not computed" in r.stderr  # absent files are said, not fatal
    check = subprocess.run([sys.executable, "-m", "ubench.cli", "fingerprints", "--check", *data],
                           capture_output=True, text=True, cwd=tmp_path)
    assert check.returncode == 0 and "digits: matches" in check.stdout


@pytest.mark.parametrize("spelling, expected", [("Fashion_MNIST", "fashion-mnist"), ("FashionMNIST", "fashion-mnist"),
                                                ("fmnist", "fashion-mnist"), ("MNIST", "mnist"),
                                                ("CIFAR-10", "cifar10"), ("notMNIST", "notmnist"),
                                                ("kmnist", None), ("", None)])
def test_common_spellings(spelling, expected):
    assert canonical_dataset(spelling) == expected


def _digits_archive(path: Path, dataset: str, fingerprint: str | None, n: int = 599) -> Path:
    rng = np.random.default_rng(1)
    y = rng.integers(0, 10, n)
    specs = {"test": SplitSpec(role="in_domain", dataset=dataset, labels=y, sample_ids=np.arange(n),
                               inputs_sha256=fingerprint)}
    w = ArchiveWriter(path, method="sgd", model="mlp", dataset=dataset, n_classes=10, splits=specs)
    for j in range(2):
        p = rng.dirichlet(np.ones(10), n).astype(np.float32)
        w.add_member({"test": p / p.sum(1, keepdims=True)}, seed=j)
    w.finalize()
    return path


def _digits_test_split() -> np.ndarray:
    from sklearn.datasets import load_digits

    ids = np.sort(np.random.default_rng(0).permutation(1797)[: 1797 // 3])
    return (load_digits().images / 16.0)[:, None][ids]


def test_score_notes_a_split_predicted_on_other_inputs(tmp_path):
    other = _digits_test_split()[::-1]  # the right images in the wrong order: other inputs per sample id
    report = score_archive(_digits_archive(tmp_path / "a.h5", "Digits", spec_sha256(other)))
    assert report["archive"]["splits"]["test"]["known_inputs"] == "differs"
    assert any("split 'test' claims digits" in n and "other inputs" in n for n in report["notes"])


def test_score_is_silent_on_a_matching_split_and_says_when_there_is_none(tmp_path):
    right = score_archive(_digits_archive(tmp_path / "a.h5", "digits", spec_sha256(_digits_test_split())))
    assert right["archive"]["splits"]["test"]["known_inputs"] == "match"
    assert not any("claims digits" in n for n in right["notes"])
    absent = score_archive(_digits_archive(tmp_path / "b.h5", "digits", None))
    assert absent["archive"]["splits"]["test"]["known_inputs"] == "absent"
    assert any("has no inputs_sha256" in n for n in absent["notes"])
    # a subsample (another N) and an unknown dataset cannot be checked: nothing said, null in the JSON
    for path, ds, n in ((tmp_path / "c.h5", "digits", 300), (tmp_path / "d.h5", "toy", 599)):
        r = score_archive(_digits_archive(path, ds, "0" * 64, n=n))
        assert r["archive"]["splits"]["test"]["known_inputs"] is None
        assert not any("inputs_sha256" in note for note in r["notes"])


def test_score_json_carries_the_note(tmp_path):
    path = _digits_archive(tmp_path / "a.h5", "digits", "0" * 64)
    r = subprocess.run([sys.executable, "-m", "ubench.cli", "score", str(path), "--json"], capture_output=True,
                       text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["archive"]["splits"]["test"]["inputs_sha256"] == "0" * 64
    assert any("other inputs" in n for n in report["notes"])


def test_ood_split_checked_only_where_it_was_not_resized():
    from types import SimpleNamespace as S

    mnist = _shipped("mnist")
    ood = S(role="ood", dataset="mnist", n_samples=10000, inputs_sha256="1" * 64)
    # Fashion-MNIST model (28x28 like MNIST): the OOD set is fed as is, so its fingerprint must be MNIST's
    status, notes = check_known_splits("fashion-mnist", {"ood_mnist": ood}, SHIPPED)
    assert status == {"ood_mnist": "differs"} and len(notes) == 1
    status, _ = check_known_splits("fashion-mnist", {"ood_mnist": S(**{**vars(ood),
                                                                       "inputs_sha256": mnist["inputs_sha256"]})},
                                   SHIPPED)
    assert status == {"ood_mnist": "match"}
    # a digits (8x8) model sees MNIST resized: another fingerprint legitimately, so not checked
    assert check_known_splits("digits", {"ood_mnist": ood}, SHIPPED) == ({}, [])


def test_cifar_fingerprint_computed_when_its_files_are_given(tmp_path):
    import pickle

    from ubench.scoring.known_splits import compute_known_splits

    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, (7, 3 * 32 * 32), dtype=np.uint8)  # CIFAR's rows: 1024 red, green, blue bytes
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    with open(folder / "test_batch", "wb") as f:
        pickle.dump({b"data": data, b"labels": list(range(7))}, f)
    found, missing = compute_known_splits([tmp_path], datasets=["cifar10", "svhn"])
    assert found["cifar10"][0]["n_samples"] == 7 and found["cifar10"][0]["shape"] == [3, 32, 32]
    assert found["cifar10"][0]["inputs_sha256"] == spec_sha256(data.reshape(7, 3, 32, 32) / 255.0)
    assert "svhn" in missing and "svhn" not in found
