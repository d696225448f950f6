# SPDX-License-Identifier: MIT
"""``ubench import npz|npy`` carries OOD and shifted splits (issue #28 item 13): by flag (``--ood KEY[=DATASET]``,
``--shift KEY=KIND:INTENSITY``) or by key name (``ood_<dataset>``, ``shift_<kind>_<intensity>``), with
``<key>_labels``. Oracles: scipy.special.softmax of the logits each split was made from, and the roles written
out by hand."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
from click.testing import CliRunner
from scipy.special import softmax

from ubench.cli import cli

M, C = 3, 6
SIZES = {"test": 120, "ood_svhn": 50, "shift_gaussian_noise_3": 80, "blurred": 70, "noise": 40}


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def data():
    rng = np.random.default_rng(7)
    z = {k: (rng.normal(size=(M, n, C)) * 2).astype(np.float32) for k, n in SIZES.items()}
    y = {k: rng.integers(0, C, n) for k, n in SIZES.items()}
    for k in ("test", "shift_gaussian_noise_3", "blurred"):
        z[k][:, np.arange(SIZES[k]), y[k]] += 2.0
    return z, y


EXPECTED = {  # split -> (role, dataset, shift kind, intensity, has labels)
    "test": ("in_domain", "cifar10", None, None, True),
    "ood_svhn": ("ood", "svhn", None, None, False),
    "shift_gaussian_noise_3": ("shift", "cifar10", "gaussian_noise", 3.0, True),
    "blurred": ("shift", "cifar10", "gaussian_blur", 2.0, True),
    "noise": ("ood", "uniform_noise", None, None, False),
}
FLAGS = ("--shift", "blurred=gaussian_blur:2", "--ood", "noise=uniform_noise")


def check_archive(path, z, y, member_axis=True):
    with h5py.File(path, "r") as f:
        splits = f["splits"]
        assert set(splits) == set(EXPECTED)
        for name, (role, dataset, kind, intensity, labelled) in EXPECTED.items():
            g = splits[name]
            assert (g.attrs["role"], g.attrs["dataset"]) == (role, dataset), name
            assert g.attrs.get("shift_kind") == kind and g.attrs.get("shift_intensity") == intensity, name
            assert ("labels" in g) == labelled, name
            if labelled:
                np.testing.assert_array_equal(g["labels"][()], y[name])
            np.testing.assert_allclose(g["probs"][()], softmax(z[name].astype(np.float64), axis=2), atol=2e-7)
        config = json.loads(f.attrs["config"])
    assert config["split blurred"] == "role shift, kind gaussian_blur, intensity 2 (from --shift)"
    assert config["split ood_svhn"] == "role ood, dataset svhn (from name)"
    return config


def score(path):
    r = run("validate", path)
    assert r.exit_code == 0, r.output
    r = run("score", path, "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert set(report["ood"]) == {"ood_svhn", "noise"} and set(report["shift"]) == {"shift_gaussian_noise_3",
                                                                                      "blurred"}
    return report


def test_one_npz_with_roles_by_name_and_by_flag(tmp_path, data):
    z, y = data
    arrays = {**z, "labels": y["test"], "shift_gaussian_noise_3_labels": y["shift_gaussian_noise_3"],
              "blurred_labels": y["blurred"], "ood_svhn_labels": y["ood_svhn"]}
    np.savez(tmp_path / "p.npz", **arrays)
    out = tmp_path / "a.h5"
    r = run("import", "npz", tmp_path / "p.npz", "--kind", "logits", "--dataset", "cifar10", *FLAGS, "--out", out)
    assert r.exit_code == 0, r.output
    assert "inferred key: test" in r.output and "an OOD split has no labels" in r.output
    config = check_archive(out, z, y)
    assert config["labels shift_gaussian_noise_3"].endswith("p.npz:shift_gaussian_noise_3_labels")
    report = score(out)
    acc = np.mean(softmax(z["blurred"].astype(np.float64), axis=2).mean(0).argmax(1) == y["blurred"])
    assert report["shift"]["blurred"]["accuracy"] == pytest.approx(acc)
    assert report["shift"]["blurred"]["shift_kind"] == "gaussian_blur"


def test_npy_files_name_their_splits_by_stem(tmp_path, data):
    """Per-member in-domain files (N, C) plus one (M, N_k, C) file per split; labels files by stem."""
    z, y = data
    members = []
    for j in range(M):
        np.save(tmp_path / f"m{j}.npy", z["test"][j])
        members.append(tmp_path / f"m{j}.npy")
    others = []
    for k in ("ood_svhn", "shift_gaussian_noise_3", "blurred", "noise"):
        np.save(tmp_path / f"{k}.npy", z[k])
        others.append(tmp_path / f"{k}.npy")
    for k in ("shift_gaussian_noise_3", "blurred"):
        np.save(tmp_path / f"{k}_labels.npy", y[k])
        others.append(tmp_path / f"{k}_labels.npy")
    np.save(tmp_path / "labels.npy", y["test"])
    out = tmp_path / "a.h5"
    r = run("import", "npy", *members, *others, tmp_path / "labels.npy", "--kind", "logits", "--dataset", "cifar10",
            *FLAGS, "--out", out)
    assert r.exit_code == 0, r.output
    config = check_archive(out, z, y)
    assert config["layout"] == "one (N, C) array per member" and config["n_members"] == M
    score(out)


def test_per_member_npz_files_each_hold_every_split(tmp_path, data):
    z, y = data
    paths = []
    for j in range(M):
        np.savez(tmp_path / f"member{j}.npz", **{k: v[j] for k, v in z.items()}, labels=y["test"],
                 shift_gaussian_noise_3_labels=y["shift_gaussian_noise_3"], blurred_labels=y["blurred"])
        paths.append(tmp_path / f"member{j}.npz")
    out = tmp_path / "a.h5"
    r = run("import", "npz", *paths, "--kind", "logits", "--dataset", "cifar10", *FLAGS, "--out", out)
    assert r.exit_code == 0, r.output
    check_archive(out, z, y)


@pytest.mark.parametrize("flags, message", [
    (("--shift", "blurred=gaussian_blur"), "--shift 'blurred=gaussian_blur': expected KEY=KIND:INTENSITY"),
    (("--shift", "blurred=gaussian_blur:inf"), "with a finite INTENSITY"),
    (("--ood", "missing"), "no array 'missing' for --ood"),
    (("--ood", "test", "--ood", "blurred"), "every array is claimed by --ood, --shift or its name"),
    (("--key", "blurred", "--shift", "blurred=blur:1"), "'blurred' is the in-domain array (--key) and also --shift"),
    (("--ood", "blurred", "--shift", "blurred=blur:1"), "'blurred' is already an OOD split"),
])
def test_wrong_role_flags_are_one_line(tmp_path, data, flags, message):
    z, y = data
    np.savez(tmp_path / "p.npz", test=z["test"], blurred=z["blurred"], labels=y["test"])
    r = run("import", "npz", tmp_path / "p.npz", "--kind", "logits", "--dataset", "cifar10", *flags,
            "--out", tmp_path / "a.h5")
    assert r.exit_code == 2 and message in r.output.strip().splitlines()[-1], r.output
    assert not (tmp_path / "a.h5").exists()


def test_a_split_of_another_member_count_or_class_count_is_refused(tmp_path, data):
    z, y = data
    np.savez(tmp_path / "p.npz", test=z["test"], ood_svhn=z["ood_svhn"][:2], labels=y["test"])
    r = run("import", "npz", tmp_path / "p.npz", "--kind", "logits", "--dataset", "x", "--out", tmp_path / "a.h5")
    assert r.exit_code == 2 and "p.npz:ood_svhn: shape (2, 50, 6); the in-domain" in r.output
    assert "3 member(s) of 6 classes" in r.output
    np.savez(tmp_path / "q.npz", test=z["test"], ood_svhn=z["ood_svhn"][..., :5], labels=y["test"])
    r = run("import", "npz", tmp_path / "q.npz", "--kind", "logits", "--dataset", "x", "--out", tmp_path / "a.h5")
    assert r.exit_code == 2 and "with C = 6" in r.output


def test_shift_labels_of_the_wrong_length_are_refused_naming_the_array(tmp_path, data):
    z, y = data
    np.savez(tmp_path / "p.npz", test=z["test"], blurred=z["blurred"], labels=y["test"],
             blurred_labels=y["blurred"][:-1])
    r = run("import", "npz", tmp_path / "p.npz", "--kind", "logits", "--dataset", "x", "--shift",
            "blurred=gaussian_blur:2", "--out", tmp_path / "a.h5")
    assert r.exit_code == 2 and "p.npz:blurred_labels: 69 labels for 70 samples" in r.output, r.output
