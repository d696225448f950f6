# SPDX-License-Identifier: MIT
"""``ubench import pitfalls``: the outputs of the Pitfalls code (Ashukha et al. 2020, bayesgroup/pytorch-ensembles).

That code writes two kinds of files, both log-softmax output (``torch.nn.functional.log_softmax``, float32):

* per-member predictions of ``train/cifar/train.py``: ``np.savez(<fname>.npz, test_preds=(N, C) log-probs,
  test_targets=(N,) int64)``, one file per trained network -> one member each (kind ``independent``);
* the ensemble caches of ``ens/ens-<method>.py``: ``.megacache/logits_<DATASET>-<MODEL>-<method>-<n>-<try>.npy``,
  an (N, C) float32 array holding ``logsumexp_k log p_k - log n``, the log of the *mean* of n members'
  probabilities (despite the ``logits`` in the name), with the labels in ``.megacache/<DATASET>-targets.npy``.
  Only the mean was saved, so such an archive has M = 1 (kind ``point``, ``info.ensemble_size = n``); metrics
  that need members (disagreement, mutual information) are not available from it;
* the snapshot-ensemble caches of ``utils/snapshot_utils.py``: ``np.savez(ens_preds_<k>_members.npz,
  test_preds=<mean probabilities of k members>, test_targets=...)``, probabilities (not log-probabilities), one
  archive with M = 1 likewise.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from ..archive_schema import SplitSpec
from .npz import NpzStream, npz_keys, open_npy, read_npz_labels, stream_rows
from .plan import DEFAULT_MAX_BYTES, ImportFailure, ImportPlan, Member, check_declared, check_labels, load_labels

__all__ = ["plan_pitfalls", "CACHE_NAME", "DATASETS"]

#: ``logits_%s-%s-%s-%s-%s.npy`` % (dataset, model, method, n_members, try) as ``ens/ens-*.py`` names it.
CACHE_NAME = re.compile(r"^logits_(?P<dataset>[^-]+)-(?P<model>[^-]+)-(?P<method>.+)-(?P<n>\d+)-(?P<try>\d+)\.npy$")
#: ``ens_preds_%d_members.npz`` of utils/snapshot_utils.py (mean probabilities of k members).
SNAPSHOT_NAME = re.compile(r"^ens_preds_(?P<n>\d+)_members\.npz$")
#: the code's --dataset values and ubench's benchmark ids (SPEC.md §4.1).
DATASETS = {"CIFAR10": "cifar10", "CIFAR100": "cifar100", "ImageNet": "imagenet"}


def plan_pitfalls(sources: list[Path], *, dataset: str | None = None, method: str | None = None,
                  model: str | None = None, labels: Path | None = None,
                  max_bytes: int = DEFAULT_MAX_BYTES) -> ImportPlan:
    """Plan the import of one ensemble cache or of a list of per-member ``.npz`` files (module docstring); the
    archive the files declare is checked against ``max_bytes`` before labels or values are read."""
    sources = [Path(p) for p in sources]
    if not sources:
        raise ImportFailure("give the Pitfalls files to import")
    caches = [p for p in sources if CACHE_NAME.match(p.name)]
    if caches:
        if len(sources) != 1:
            raise ImportFailure(f"{caches[0]}: an ensemble cache is one archive; import caches one at a time "
                                "(each holds the mean of n members, so they cannot be members of one archive)")
        return _plan_cache(sources[0], dataset, method, model, labels, max_bytes)
    snaps = [p for p in sources if SNAPSHOT_NAME.match(p.name)]
    if snaps:
        if len(sources) != 1:
            raise ImportFailure(f"{snaps[0]}: a snapshot-ensemble cache is one archive; import caches one at a time")
        plan = _plan_members(sources, dataset, method or "snapshot_ensemble", model, labels, max_bytes)
        n = int(SNAPSHOT_NAME.match(sources[0].name)["n"])
        plan.stored_kind = "probs"
        plan.config.update(stored_kind="probs", member_kind="point", ensemble_size=n,
                           layout="snapshot_utils.py ensemble cache (mean probabilities of k members)")
        plan.notes.append(f"{sources[0].name} holds only the mean of {n} members: M = 1")
        plan.members = [Member(m.arrays, m.where, kind="point", info={**m.info, "ensemble_size": n})
                        for m in plan.members]
        return plan
    bad = [p for p in sources if p.suffix != ".npz"]
    if bad:
        raise ImportFailure(f"{bad[0]}: expected train.py's per-member .npz (test_preds, test_targets) or an "
                            "ensemble cache named logits_<DATASET>-<MODEL>-<method>-<n>-<try>.npy")
    return _plan_members(sources, dataset, method, model, labels, max_bytes)


def _plan_cache(path: Path, dataset, method, model, labels, max_bytes) -> ImportPlan:
    g = CACHE_NAME.match(path.name).groupdict()
    arr = open_npy(path)
    if arr.ndim != 2:
        raise ImportFailure(f"{path}: expected an (N, C) array; found shape {arr.shape}")
    n, c = arr.shape
    check_declared(str(path), 1, {"test": n}, c, 4, max_bytes)
    dataset = dataset or DATASETS.get(g["dataset"], g["dataset"].lower())
    targets = labels or path.with_name(f"{g['dataset']}-targets.npy")
    if not Path(targets).exists():
        raise ImportFailure(f"{path}: labels not found at {targets} (the code's .megacache/<DATASET>-targets.npy); "
                            "pass --labels")
    y = check_labels(load_labels(targets, n=n), c, n, str(targets))
    config: dict[str, Any] = {
        "import_format": "pitfalls", "sources": [str(path)], "stored_kind": "log-probs",
        "layout": "ensemble cache (log of the mean of n members' probabilities)",
        "dataset": dataset, "model": model or g["model"], "method": method or g["method"],
        "ensemble_size": int(g["n"]), "try": int(g["try"]), "labels": str(targets), "n_members": 1,
        "member_kind": "point", "split": f"test (role in_domain, dataset {dataset})",
    }
    notes = [f"{path.name} holds only the mean of {g['n']} members (the Pitfalls code saves no per-member "
             "predictions in its caches): M = 1; member-based metrics are unavailable"]
    member = Member({"test": lambda: arr}, {"test": str(path)}, kind="point",
                    info={"ensemble_size": int(g["n"]), "try": int(g["try"]), "source": path.name})
    return ImportPlan(method=config["method"], model=config["model"], dataset=dataset, n_classes=c,
                      splits={"test": SplitSpec(role="in_domain", dataset=dataset, labels=y)}, members=[member],
                      stored_kind="log-probs", config=config, notes=notes, n_members=1)


def _plan_members(paths: list[Path], dataset, method, model, labels, max_bytes) -> ImportPlan:
    if dataset is None:
        raise ImportFailure("per-member .npz files do not name their dataset; pass --dataset (e.g. cifar10)")
    heads = []
    for p in paths:
        s = NpzStream(p, "test_preds") if _has(p, "test_preds") else None
        if s is None:
            raise ImportFailure(f"{p}: no array 'test_preds' (train.py saves test_preds and test_targets)")
        heads.append(s.shape)
        s.close()
    for p, shape in zip(paths, heads):
        if len(shape) != 2 or shape != heads[0]:
            raise ImportFailure(f"{p}:test_preds: expected (N, C) like {paths[0]}'s {heads[0]}; found {shape}")
    n, c = heads[0]
    check_declared(f"{paths[0]}:test_preds", len(paths), {"test": n}, c, 4, max_bytes)
    if labels is not None:
        y = check_labels(load_labels(labels, n=n), c, n, str(labels))
        labels_from = str(labels)
    else:
        y = _targets(paths[0], n)
        check_labels(y, c, n, f"{paths[0]}:test_targets")
        for p in paths[1:]:
            other = _targets(p, n)
            if len(other) != n or not np.array_equal(other, y):
                i = int(np.argmax(other != y)) if len(other) == n else min(n, len(other))
                raise ImportFailure(f"{p}:test_targets differ from {paths[0]}'s at index {i}: "
                                    "the members did not predict the same test set in the same order")
        labels_from = f"{paths[0]}:test_targets"
    config = {"import_format": "pitfalls", "sources": [str(p) for p in paths], "stored_kind": "log-probs",
              "layout": "train.py per-member .npz (test_preds log-softmax, test_targets)", "dataset": dataset,
              "model": model or "unknown", "method": method or "deep_ensemble", "labels": labels_from,
              "n_members": len(paths), "member_kind": "independent",
              "split": f"test (role in_domain, dataset {dataset})"}
    members = (Member({"test": (lambda p=p: stream_rows(p, "test_preds"))}, {"test": f"{p}:test_preds"},
                      info={"source": p.name}) for p in paths)
    return ImportPlan(method=config["method"], model=config["model"], dataset=dataset, n_classes=c,
                      splits={"test": SplitSpec(role="in_domain", dataset=dataset, labels=y)}, members=members,
                      stored_kind="log-probs", config=config, n_members=len(paths))


def _targets(path: Path, n: int) -> np.ndarray:
    if not _has(path, "test_targets"):
        raise ImportFailure(f"{path}: no array 'test_targets' (train.py saves test_preds and test_targets)")
    return read_npz_labels(path, "test_targets", n)


def _has(path: Path, key: str) -> bool:
    return key in npz_keys(path)
