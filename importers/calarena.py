# SPDX-License-Identifier: MIT
"""``ubench import calarena``: CalArena's published HDF5 of predictions, one archive per (dataset, model).

Layout (CalArena's release): ``{dataset}/{model}/{probas_cal, labels_cal, probas_test, labels_test}``: the
softmax outputs (N, C) and integer labels (N,) of a calibration split and of a test split. Each becomes an
in-domain split of an archive with one member: ``test`` (the primary split, first in name order) and ``val``
(the calibration split: a validation-named split, which ``score`` uses as such, e.g. for the shift temperature).

The file is untrusted: before any value is read it passes the archive reader's container and storage checks
(``archive_schema.scan``: regular file, no user block, no soft/external/user-defined links, no virtual datasets,
external storage or filters other than deflate/shuffle/fletcher32, declared sizes, chunk counts and compression
ratios within ``ReadLimits``), through the plugin-free h5py; a refusal names the HDF5 path. Probabilities are then
converted and checked like every import (finite, in [0, 1], rows summing to 1).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..archive_schema import SplitSpec
from ..archive_schema.blocks import read_all
from ..archive_schema.safe_h5py import h5py
from ..archive_schema.scan import Scan, check_container, open_readonly, walk
from ..archive_schema.spec import ReadLimits
from .plan import ImportFailure, ImportPlan, Member, check_labels

__all__ = ["open_calarena", "plan_calarena", "SPLITS", "datasets_and_models"]

#: CalArena's split -> the archive's split name.
SPLITS = {"test": "test", "cal": "val"}


def open_calarena(path: Path) -> tuple[h5py.File, set[str]]:
    """The file opened read-only after the archive reader's container and storage checks, and the paths of its
    datasets judged safe to read; ``ImportFailure`` naming the first problem."""
    scan = Scan(str(path), ReadLimits())
    if not check_container(scan):
        raise ImportFailure(f"{path}: {scan.findings[0].message}")
    f = open_readonly(scan)
    if f is None:
        raise ImportFailure(f"{path}: {scan.findings[0].message}")
    safe = walk(scan, f)
    errors = [x for x in scan.findings if x.severity == "error"]
    if errors:
        f.close()
        raise ImportFailure(f"{path}:{errors[0].path}: {errors[0].message}")
    return f, safe


def datasets_and_models(f: h5py.File) -> dict[str, list[str]]:
    return {d: sorted(k for k in f[d] if isinstance(f[d][k], h5py.Group)) for d in sorted(f)
            if isinstance(f[d], h5py.Group)}


def plan_calarena(path: Path, *, dataset: str, model: str, file: tuple[h5py.File, set[str]] | None = None,
                  method: str | None = None) -> ImportPlan:
    """Plan the archive of ``dataset``/``model`` (module docstring); ``file``: an already checked open file."""
    path = Path(path)
    f, safe = file if file is not None else open_calarena(path)
    where = f"{path}:/{dataset}/{model}"
    if dataset not in f or not isinstance(f[dataset], h5py.Group):
        raise ImportFailure(f"{path}: no dataset group {dataset!r} (found {sorted(datasets_and_models(f))[:20]})")
    if model not in f[dataset] or not isinstance(f[dataset][model], h5py.Group):
        raise ImportFailure(f"{path}:/{dataset}: no model group {model!r} (found {sorted(f[dataset])[:20]})")
    g = f[dataset][model]
    splits: dict[str, SplitSpec] = {}
    sources: dict[str, Any] = {}
    n_classes = None
    for theirs, ours in SPLITS.items():
        names = (f"probas_{theirs}", f"labels_{theirs}")
        for name in names:
            if name not in g:
                raise ImportFailure(f"{where}: no dataset {name!r} (CalArena's layout: probas_cal, labels_cal, "
                                    "probas_test, labels_test)")
            if f"/{dataset}/{model}/{name}" not in safe:
                raise ImportFailure(f"{where}/{name}: not a dataset that can be read safely")
        probs, labels = g[names[0]], g[names[1]]
        if probs.ndim != 2 or probs.dtype.kind != "f":
            raise ImportFailure(f"{where}/{names[0]}: expected floating-point (N, C) probabilities; found "
                                f"{probs.dtype} {probs.shape}")
        if labels.ndim != 1 or labels.dtype.kind not in "iuf":
            raise ImportFailure(f"{where}/{names[1]}: expected (N,) labels; found {labels.dtype} {labels.shape}")
        c = probs.shape[1]
        if n_classes is not None and c != n_classes:
            raise ImportFailure(f"{where}/{names[0]}: {c} classes but probas_test has {n_classes}")
        n_classes = c
        y = read_all(labels)
        if y.dtype.kind == "f":
            if not np.all(np.isfinite(y)) or not np.all(y == np.round(y)):
                i = int(np.argmax(~np.isfinite(y) | (y != np.round(np.nan_to_num(y)))))
                raise ImportFailure(f"{where}/{names[1]}: label {y[i]} at index {i} is not an integer")
        y = check_labels(y.astype(np.int64), c, probs.shape[0], f"{where}/{names[1]}")
        splits[ours] = SplitSpec(role="in_domain", dataset=dataset, labels=y)
        sources[ours] = probs
    config = {"import_format": "calarena", "sources": [str(path)], "stored_kind": "probs", "dataset": dataset,
              "model": model, "split test": f"/{dataset}/{model}/probas_test",
              "split val": f"/{dataset}/{model}/probas_cal (CalArena's calibration split)"}
    member = Member({k: (lambda k=k: read_all(sources[k])) for k in sources},
                    {k: f"{where}/probas_{'cal' if k == 'val' else 'test'}" for k in sources}, kind="point")
    notes = ["CalArena's calibration split is the archive's in-domain split 'val', its test split 'test' (the "
             "primary one)"]
    return ImportPlan(method=method or "calarena", model=model, dataset=dataset, n_classes=n_classes,
                      splits=splits, members=iter([member]), stored_kind="probs", config=config, notes=notes,
                      n_members=1)
