# SPDX-License-Identifier: MIT
"""``ubench import openood`` and ``ubench import calarena`` (issue #31) on files built from their documented
layouts: OpenOOD's ``np.savez(scores/<dataset>, pred=, conf=, label=)`` (OOD labels -1) and CalArena's
``{dataset}/{model}/{probas_cal, labels_cal, probas_test, labels_test}``. Oracles: scikit-learn's AUROC of the
files' own conf, and the files' own probabilities value for value. Hostile files fail with one line naming the
file, key (or HDF5 path) and first bad index, exit code 2, and leave nothing behind."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
from click.testing import CliRunner
from scipy.special import softmax
from sklearn.metrics import roc_auc_score

from ubench.archive_schema import read_archive
from ubench.cli import cli


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _openood(tmp_path, n=120, c=10, seed=0):
    """cifar10.npz (ID: labels 0..9), svhn.npz and tin.npz (OOD: labels -1), as OpenOOD's evaluator saves them."""
    rng = np.random.default_rng(seed)
    d = tmp_path / "scores"
    d.mkdir()
    y = rng.integers(0, c, n)
    pred = np.where(rng.random(n) < 0.8, y, rng.integers(0, c, n))
    np.savez(d / "cifar10", pred=pred, conf=rng.normal(1.0, 1.0, n).astype(np.float32), label=y)
    for name, m in (("svhn", 70), ("tin", 50)):
        np.savez(d / name, pred=rng.integers(0, c, m), conf=rng.normal(0.0, 1.0, m).astype(np.float32),
                 label=-np.ones(m, dtype=np.int64))
    return d


def test_openood_scores_become_a_method_score(tmp_path):
    d = _openood(tmp_path)
    out = tmp_path / "a.h5"
    r = run("import", "openood", d / "cifar10.npz", d / "svhn.npz", d / "tin.npz", "--method", "msp", "--out", out)
    assert r.exit_code == 0, r.output
    a = read_archive(out)
    assert a.format_version == "1.1" and a.method == "msp" and a.dataset == "cifar10" and a.n_members == 1
    assert {n: s.role for n, s in a.splits.items()} == {"cifar10": "in_domain", "svhn": "ood", "tin": "ood"}
    assert a.splits["svhn"].scores == {"msp": "confidence"}
    src = {k: np.load(d / f"{k}.npz") for k in ("cifar10", "svhn", "tin")}
    np.testing.assert_array_equal(a.scores["tin"]["msp"], src["tin"]["conf"].astype(np.float64))
    np.testing.assert_array_equal(a.probs["cifar10"][0].argmax(1), src["cifar10"]["pred"])
    r = run("score", out, "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["summary"]["accuracy"] == pytest.approx((src["cifar10"]["pred"] == src["cifar10"]["label"]).mean())
    for ood in ("svhn", "tin"):  # positive = OOD, the score negated (conf: higher = in-distribution)
        y = np.r_[np.zeros(120), np.ones(len(src[ood]["conf"]))]
        want = roc_auc_score(y, -np.r_[src["cifar10"]["conf"], src[ood]["conf"]])
        assert report["ood"][ood]["method_scores"]["msp"]["ood_auroc"] == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("break_it, message", [
    (lambda d: np.savez(d / "tin", pred=np.zeros(5, int), conf=np.r_[1.0, 2.0, np.nan, 0, 0], label=-np.ones(5, int)),
     "tin.npz:conf: non-finite score nan at sample 2"),
    (lambda d: np.savez(d / "tin", pred=np.zeros(4, int), conf=np.zeros(4), label=np.r_[-1, -1, 3, -1]),
     "tin.npz:label: OpenOOD labels an OOD set -1 throughout"),
    (lambda d: np.savez(d / "tin", pred=np.zeros(4, int), conf=np.zeros(4)), "no array 'label'"),
    (lambda d: np.savez(d / "tin", pred=np.zeros(4, int), conf=np.zeros(3), label=-np.ones(4, int)),
     "tin.npz:conf: expected shape (4,)"),
    (lambda d: np.savez(d / "tin", pred=np.zeros(4), conf=np.zeros(4), label=-np.ones(4, int)),
     "tin.npz:pred: expected integer values"),
    (lambda d: np.savez(d / "tin", pred=np.array([0, 1, None, 2], dtype=object), conf=np.zeros(4),
                        label=-np.ones(4, int)), "object arrays (pickles) are refused"),
])
def test_openood_hostile_files_fail_with_one_line(tmp_path, break_it, message):
    d = _openood(tmp_path)
    break_it(d)
    out = tmp_path / "a.h5"
    r = run("import", "openood", d / "cifar10.npz", d / "svhn.npz", d / "tin.npz", "--out", out)
    assert r.exit_code == 2 and message in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output
    assert not out.exists() and not (tmp_path / "a.h5.partial").exists()


def _calarena(path, models=("resnet50", "vit"), n=(40, 60), c=5, seed=0):
    rng = np.random.default_rng(seed)
    truth = {}
    with h5py.File(path, "w") as f:
        for model in models:
            g = f.create_group(f"cifar10/{model}")
            for split, m in zip(("cal", "test"), n):
                y = rng.integers(0, c, m)
                p = softmax(rng.normal(size=(m, c)) * 2 + 2 * np.eye(c)[y], axis=1).astype(np.float32)
                g[f"probas_{split}"], g[f"labels_{split}"] = p, y
                truth[(model, split)] = (p, y)
    return truth


def test_calarena_imports_every_model_with_its_calibration_and_test_split(tmp_path):
    src = tmp_path / "calarena.h5"
    truth = _calarena(src)
    r = run("import", "calarena", src, "--dataset", "cifar10", "--out", tmp_path / "out")
    assert r.exit_code == 0, r.output
    for model in ("resnet50", "vit"):
        a = read_archive(tmp_path / "out" / f"{model}.h5")
        assert a.model == model and a.format_version == "1.0" and list(a.splits) == ["test", "val"]
        for ours, theirs in (("test", "test"), ("val", "cal")):
            np.testing.assert_array_equal(a.probs[ours][0], truth[(model, theirs)][0])
            np.testing.assert_array_equal(a.labels[ours], truth[(model, theirs)][1])
    r = run("score", tmp_path / "out" / "vit.h5", "--json")
    report = json.loads(r.stdout)
    p, y = truth[("vit", "test")]
    assert report["primary_split"] == "test"
    assert report["summary"]["accuracy"] == pytest.approx((p.argmax(1) == y).mean())


def test_calarena_refuses_links_out_and_bad_rows(tmp_path):
    """An external link where a split's probabilities belong is refused before anything is read (HDF5 path in
    the message); rows that do not sum to 1 name the split and row."""
    src = tmp_path / "calarena.h5"
    _calarena(src, models=("resnet50",))
    target = tmp_path / "elsewhere.h5"
    with h5py.File(target, "w") as f:
        f["p"] = np.full((60, 5), 0.2, np.float32)
    with h5py.File(src, "r+") as f:
        del f["cifar10/resnet50/probas_test"]
        f["cifar10/resnet50/probas_test"] = h5py.ExternalLink(str(target), "/p")
    r = run("import", "calarena", src, "--dataset", "cifar10", "--model", "resnet50", "--out", tmp_path / "a.h5")
    assert r.exit_code == 2 and "/cifar10/resnet50/probas_test" in r.output and "external" in r.output, r.output
    src2 = tmp_path / "c2.h5"
    _calarena(src2, models=("resnet50",))
    with h5py.File(src2, "r+") as f:
        p = f["cifar10/resnet50/probas_cal"][()]
        p[17] *= 1.5
        f["cifar10/resnet50/probas_cal"][...] = p
    r = run("import", "calarena", src2, "--dataset", "cifar10", "--model", "resnet50", "--out", tmp_path / "b.h5")
    assert r.exit_code == 2 and "probas_cal: rows do not sum to 1: row 17" in r.output, r.output
    assert not (tmp_path / "b.h5").exists()
    r = run("import", "calarena", src2, "--dataset", "imagenet", "--out", tmp_path / "c.h5")
    assert r.exit_code == 2 and "--dataset" in r.output and "cifar10" in r.output
