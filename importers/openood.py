# SPDX-License-Identifier: MIT
"""``ubench import openood``: OpenOOD's per-sample score files, as an archive with one member and a method score.

Layout (OpenOOD's ``Evaluator._save_scores``, ``openood/evaluators/ood_evaluator.py``): one ``np.savez`` per
dataset in ``<output_dir>/scores/<dataset>.npz`` holding ``pred`` (N,) predicted classes, ``conf`` (N,) the
postprocessor's score (higher = more in-distribution) and ``label`` (N,) true classes, -1 for every sample of an
OOD set. The in-domain split is the file whose stem is ``--dataset``, else the one file whose labels are all
non-negative; every file labelled -1 is an OOD split named by its stem; another labelled file (OpenOOD's
covariate-shifted ID sets, FS-OOD's ``csid``) becomes a shift split of kind ``<stem>`` at intensity 1.

``conf`` becomes the archive's method score ``scores/<method>`` (direction ``confidence``; format 1.1). OpenOOD
saves no probabilities: each member row is the one-hot of ``pred``, so accuracy and the score's OOD and rejection
numbers are exact, and the probabilistic metrics describe a hard classifier (said in the archive's notes).
Arrays are read through the zip stream after their headers (shape, dtype) are checked: no pickles, at most
``ReadLimits.max_samples`` samples, integer ``pred``/``label``, finite float ``conf``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..archive_schema import SplitSpec
from ..archive_schema.spec import ReadLimits, is_score_name
from .npz import NpzStream, npz_keys
from .plan import ImportFailure, ImportPlan, Member

__all__ = ["plan_openood", "KEYS"]

KEYS = ("pred", "conf", "label")


def _read(path: Path) -> dict[str, np.ndarray]:
    """``pred``, ``conf`` and ``label`` of one score file, each (N,), checked before and after reading."""
    keys = npz_keys(path)
    missing = [k for k in KEYS if k not in keys]
    if missing:
        raise ImportFailure(f"{path}: not an OpenOOD score file: no array {missing[0]!r} (arrays: {keys}; expected "
                            "pred, conf, label)")
    out, n = {}, None
    limit = ReadLimits().max_samples
    for key in KEYS:
        stream = NpzStream(path, key)
        try:
            where = f"{path}:{key}"
            if len(stream.shape) != 1 or (n is not None and stream.shape[0] != n):
                raise ImportFailure(f"{where}: expected shape ({n if n is not None else 'N'},); found {stream.shape}")
            if stream.shape[0] > limit:
                raise ImportFailure(f"{where}: {stream.shape[0]} samples; at most {limit} are read")
            kind = "f" if key == "conf" else "iu"
            if stream.dtype.kind not in kind:
                raise ImportFailure(f"{where}: expected {'floating-point' if kind == 'f' else 'integer'} values; "
                                    f"found dtype {stream.dtype}")
            out[key], n = stream.read_all(), stream.shape[0]
        finally:
            stream.close()
    bad = ~np.isfinite(out["conf"])
    if bad.any():
        i = int(np.argmax(bad))
        raise ImportFailure(f"{path}:conf: non-finite score {out['conf'][i]} at sample {i}")
    if n == 0:
        raise ImportFailure(f"{path}: no samples")
    return out


def plan_openood(sources: list[Path], *, dataset: str | None, method: str | None = None, model: str = "unknown",
                 n_classes: int | None = None) -> ImportPlan:
    """Plan one archive from OpenOOD score files (module docstring)."""
    files = {Path(p).stem: Path(p) for p in sources}
    if len(files) != len(sources):
        raise ImportFailure("two score files share a name: OpenOOD names each file after its dataset")
    data = {stem: _read(path) for stem, path in files.items()}
    labelled = [s for s, d in data.items() if (d["label"] >= 0).all()]
    for stem, d in data.items():
        mixed = (d["label"] < 0).any() and (d["label"] >= 0).any()
        if mixed or ((d["label"] < 0).all() and (d["label"] != -1).any()):
            i = int(np.argmax(d["label"] < 0)) if mixed else int(np.argmax(d["label"] != -1))
            raise ImportFailure(f"{files[stem]}:label: OpenOOD labels an OOD set -1 throughout and an ID set with "
                                f"classes >= 0; found {d['label'][i]} at index {i}")
    if dataset is not None:
        if dataset not in data:
            raise ImportFailure(f"--dataset {dataset!r}: no score file {dataset}.npz among {sorted(files)}")
        primary = dataset
    elif len(labelled) == 1:
        primary = labelled[0]
    else:
        raise ImportFailure(f"which file is the in-distribution test set? labelled files: {sorted(labelled)}; "
                            "name it with --dataset")
    if primary not in labelled:
        raise ImportFailure(f"{files[primary]}: the in-distribution file must have class labels; its labels are -1")
    score = method or "openood"
    if not is_score_name(score):
        raise ImportFailure(f"--method {score!r} names the score: it must be a name like msp, ebo, knn")
    classes = int(max(int(d["pred"].max()) for d in data.values())) + 1
    classes = max(classes, *(int(d["label"].max()) + 1 for s, d in data.items() if s in labelled))
    if n_classes is not None:
        if n_classes < classes:
            raise ImportFailure(f"--n-classes {n_classes}: the files hold class {classes - 1}")
        classes = n_classes
    classes = max(classes, 2)
    for stem, d in data.items():
        if (d["pred"] < 0).any():
            i = int(np.argmax(d["pred"] < 0))
            raise ImportFailure(f"{files[stem]}:pred: predicted class {d['pred'][i]} at index {i} is negative")
    order = [primary] + sorted(s for s in data if s != primary)
    splits: dict[str, SplitSpec] = {}
    inferred: dict[str, Any] = {}
    for stem in order:
        d = data[stem]
        if stem == primary:
            spec = SplitSpec(role="in_domain", dataset=stem, labels=d["label"].astype(np.int64))
        elif stem in labelled:
            spec = SplitSpec(role="shift", dataset=primary, labels=d["label"].astype(np.int64), shift_kind=stem,
                             shift_intensity=1.0)
        else:
            spec = SplitSpec(role="ood", dataset=stem, n_samples=len(d["conf"]))
        splits[_split_name(stem)] = spec
        inferred[f"split {_split_name(stem)}"] = f"{spec.role} from {files[stem]}"
    names = {stem: _split_name(stem) for stem in order}

    def onehot(stem: str) -> np.ndarray:
        out = np.zeros((len(data[stem]["pred"]), classes), np.float32)
        out[np.arange(len(out)), data[stem]["pred"]] = 1.0
        return out

    member = Member({names[s]: (lambda s=s: onehot(s)) for s in order},
                    {names[s]: f"{files[s]}:pred (one-hot)" for s in order}, kind="point")
    notes = ["OpenOOD saves predicted classes, not probabilities: the member's probabilities are the one-hot "
             f"predictions (accuracy is exact; NLL, Brier and calibration describe a hard classifier); the score "
             f"{score!r} is OpenOOD's conf (higher = in-distribution)"]
    config = {"import_format": "openood", "sources": [str(p) for p in sources], "stored_kind": "probs",
              "score": score, "score_direction": "confidence", "n_classes": classes, **inferred}
    return ImportPlan(method=score, model=model, dataset=primary, n_classes=classes, splits=splits,
                      members=iter([member]), stored_kind="probs", config=config, notes=notes, n_members=1,
                      scores={score: ({names[s]: data[s]["conf"].astype(np.float64) for s in order}, "confidence")})


def _split_name(stem: str) -> str:
    """A split name for a file stem (SPEC.md §4's characters; others become '_')."""
    return "".join(ch if ch.isalnum() or ch in "_.-" else "_" for ch in stem)[:128] or "split"
