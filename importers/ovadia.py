# SPDX-License-Identifier: MIT
"""``ubench import ovadia``: the released predictions of Ovadia et al. (2019), google-research ``uq_benchmark_2019``.

Layout (the release's README): ``METHOD > DATASET > {labels, probs}``. MNIST/CIFAR files hold ``probs`` of shape
(5, N, C) and ``labels`` (5, N); the leading axis is 5 *independently trained replicates of the whole method*
(for reproducibility), not ensemble members, so one replicate is imported (``--replicate``, default 0). The
ImageNet file holds ``probs`` (N, 1000) and ``labels`` (N,) with no replicate axis. For ``ensemble``, ``dropout``
and ``svi`` (and their ``ll_`` variants) the release stores only the *mean* over members / samples: M = 1.
ImageNet probabilities below 1e-6 were rounded to 0 in the release; rows short of 1 by at most C·1e-6 are
renormalised (recorded in ``config``).

DATASET names: ``test`` is the in-domain split; ``train`` and ``valid`` are skipped; a name ending in a number
(``corrupt-static-brightness-3``, ``roll-4``, ``rotate-30``) is a shift of that kind and intensity; the OOD sets
(``--ood``, default the paper's: fashion_mnist, not_mnist, svhn, celeb_a, imagenet_resized, lm1b) are OOD.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from ..archive_schema import SplitSpec
from ..archive_schema.safe_h5py import h5py
from ..archive_schema.scan import open_dataset, open_walked
from ..archive_schema.spec import ReadLimits
from .plan import (DEFAULT_MAX_BYTES, ImportFailure, ImportPlan, Member, check_declared, check_labels,
                   label_shape_problem)

__all__ = ["plan_ovadia", "methods_of", "OOD_SETS", "split_role", "RELEASE_LIMITS"]

OOD_SETS = ("fashion_mnist", "not_mnist", "notmnist", "svhn", "svhn_cropped", "celeb_a", "imagenet_resized", "lm1b")
SKIPPED = ("train", "valid")
MEAN_ONLY = ("ensemble", "dropout", "svi", "ll_dropout", "ll_svi", "dropout_nofirst")
_SHIFT = re.compile(r"^(?:corrupt-static-)?(?P<kind>.+?)[-_](?P<value>\d+(?:\.\d+)?)$")
#: A release file is read like an upload (``archive_schema.scan``: no external or soft links, no external raw
#: storage, no virtual datasets, no filter outside deflate/shuffle/fletcher32, chunk and compression bounds), but
#: holds every method of a benchmark (ImageNet's: tens of GB), so its total declared size is not bounded here; what
#: one import writes is (``max_bytes``).
RELEASE_LIMITS = ReadLimits(max_total_bytes=2**50)


def split_role(name: str, ood: tuple[str, ...] = OOD_SETS) -> dict[str, Any] | None:
    """The role inferred from a DATASET name, or None for a skipped split; raises for a name it cannot place."""
    if name in SKIPPED:
        return None
    if name == "test":
        return {"role": "in_domain"}
    if name in ood:
        return {"role": "ood", "dataset": name}
    m = _SHIFT.match(name)
    if m:
        return {"role": "shift", "shift_kind": m["kind"], "shift_intensity": float(m["value"])}
    raise ImportFailure(f"DATASET {name!r}: neither test/train/valid, an OOD set (--ood) nor a shift "
                        "<kind>-<intensity>; pass --ood {name} if it is an OOD set")


def open_release(path: Path) -> tuple[h5py.File, set[str]]:
    """The release file opened through the archives' safe layer, and the paths of the datasets that may be read;
    ``ImportFailure`` naming the file, the HDF5 path and what is wrong (an external link, external storage, …)."""
    scan, f, safe = open_walked(path, RELEASE_LIMITS)
    errors = [x for x in scan.findings if x.severity == "error"]
    if f is None or errors:
        if f is not None:
            f.close()
        e = errors[0]
        raise ImportFailure(f"{path}: {e.path}: {e.message} ({e.check}); release files are read like archives "
                            "from strangers")
    return f, safe


def methods_of(path: Path) -> list[str]:
    f, _ = open_release(path)
    with f:
        return [k for k in f if isinstance(f[k], h5py.Group)]


def _dataset(f: h5py.File, safe: set[str], hpath: str, where: str) -> h5py.Dataset:
    """A dataset the walk judged safe, opened with external file references pointing nowhere."""
    if hpath not in safe:
        raise ImportFailure(f"{where}: {hpath} is not a plain dataset")
    parent, _, name = hpath.rpartition("/")
    return open_dataset(f[parent], name)


class _Rows:
    """One replicate's (N, C) probabilities of a release dataset, read and renormalised ``[a:b]`` rows at a time."""

    def __init__(self, ds: h5py.Dataset, replicate: int | None, renorm: _Renormalised):
        self.shape, self.dtype = tuple(ds.shape[-2:]), ds.dtype
        self._ds, self._rep, self._renorm = ds, replicate, renorm

    def __getitem__(self, rows: slice) -> np.ndarray:
        block = self._ds[rows] if self._rep is None else self._ds[self._rep, rows]
        return self._renorm(np.asarray(block))


def plan_ovadia(path: Path, method: str, *, dataset: str, replicate: int = 0, model: str = "unknown",
                ood: tuple[str, ...] = OOD_SETS, max_bytes: int = DEFAULT_MAX_BYTES) -> ImportPlan:
    """Plan one method's archive from the release file ``path`` (module docstring), read through
    ``archive_schema.scan``'s safe layer; its declared size is checked against ``max_bytes`` before labels or
    values are read."""
    path = Path(path)
    f, safe = open_release(path)
    try:
        return _plan(f, safe, path, method, dataset, replicate, model, ood, max_bytes)
    except BaseException:
        f.close()
        raise


def _plan(f, safe, path, method, dataset, replicate, model, ood, max_bytes) -> ImportPlan:
    if method not in f or not isinstance(f[method], h5py.Group):
        raise ImportFailure(f"{path}: no METHOD group {method!r} (found {[k for k in f]})")
    g = f[method]
    names = sorted(g, key=lambda k: (k != "test", k))  # the in-domain split first: it is the primary one
    if "test" not in names:
        raise ImportFailure(f"{path}:/{method}: no 'test' DATASET (found {names[:10]})")
    roles: dict[str, dict[str, Any]] = {}
    sources: dict[str, Any] = {}
    inferred: dict[str, str] = {}
    n_classes = None
    replicated = None
    for name in names:
        role = split_role(name, ood)
        where = f"{path}:/{method}/{name}"
        if role is None:
            inferred[name] = "skipped (training data)"
            continue
        if not isinstance(g[name], h5py.Group) or "probs" not in g[name]:
            raise ImportFailure(f"{where}: no 'probs' dataset")
        probs = _dataset(f, safe, f"/{method}/{name}/probs", where)
        rep = probs.ndim == 3
        if probs.ndim not in (2, 3) or (replicated is not None and rep != replicated):
            raise ImportFailure(f"{where}/probs: expected (5, N, C) or (N, C) like the other splits; "
                                f"found {probs.shape}")
        replicated = rep
        if rep and not 0 <= replicate < probs.shape[0]:
            raise ImportFailure(f"{where}/probs: --replicate {replicate} outside [0, {probs.shape[0]})")
        c = probs.shape[-1]
        if n_classes is not None and c != n_classes:
            raise ImportFailure(f"{where}/probs: {c} classes, the other splits {n_classes}")
        n_classes = c
        roles[name], sources[name] = role, (probs, rep)
        inferred[name] = ", ".join(f"{k} {v}" for k, v in role.items())
    sizes = {name: probs.shape[-2] for name, (probs, _) in sources.items()}
    check_declared(f"{path}:/{method}", 1, sizes, n_classes, 4, max_bytes)
    splits: dict[str, SplitSpec] = {}
    for name, role in roles.items():
        y = None if role["role"] == "ood" else _labels(f, safe, f"/{method}/{name}", f"{path}:/{method}/{name}",
                                                      replicate, n_classes, sizes[name])
        splits[name] = SplitSpec(role=role["role"], dataset=role.get("dataset", dataset), labels=y,
                                 n_samples=None if y is not None else sizes[name], shift_kind=role.get("shift_kind"),
                                 shift_intensity=role.get("shift_intensity"))
    notes = []
    if not replicated:
        replicate_note = "none (no replicate axis)"
    else:
        replicate_note = replicate
        notes.append(f"replicate {replicate} of 5 independently trained runs (the release's leading axis); "
                     "import the others with --replicate to study run-to-run variation")
    if method in MEAN_ONLY:
        notes.append(f"the release stores only the mean over {method}'s members/samples: M = 1")
    config: dict[str, Any] = {"import_format": "ovadia", "sources": [str(path)], "stored_kind": "probs",
                              "method": method, "dataset": dataset, "replicate": replicate_note, "n_members": 1,
                              "member_kind": "point" if method not in MEAN_ONLY else "ensemble mean",
                              **{f"split {k}": v for k, v in inferred.items()}}
    renorm = _Renormalised(n_classes)
    for name, (probs, rep) in sources.items():  # a first streamed pass, so config records it before writing
        fixed = sum(int(renorm.rows(np.asarray(probs[replicate, a:a + 4096] if rep else probs[a:a + 4096])).sum())
                    for a in range(0, probs.shape[-2], 4096))
        if fixed:
            config[f"renormalised rows {name}"] = fixed
            notes.append(f"{name}: {fixed} rows short of 1 by at most C*1e-6 (the release rounded p < 1e-6 to 0) "
                         "were divided by their sum")

    def rows(name):
        probs, rep = sources[name]
        return _Rows(probs, replicate if rep else None, renorm)

    member = Member({k: (lambda k=k: rows(k)) for k in sources},
                    {k: f"{path}:/{method}/{k}/probs" + (f"[{replicate}]" if replicated else "") for k in sources},
                    kind="point", info={"replicate": replicate if replicated else -1,
                                        "mean_of_members": method in MEAN_ONLY})

    def members():
        try:
            yield member
        finally:
            f.close()

    return ImportPlan(method=method, model=model, dataset=dataset, n_classes=n_classes, splits=splits,
                      members=members(), stored_kind="probs", config=config, notes=notes, n_members=1)


def _labels(f, safe, group: str, where: str, replicate: int, n_classes: int, n: int) -> np.ndarray | None:
    """A split's labels (replicate ``replicate`` of (5, N), or (N,)), their declared shape checked first."""
    if "labels" not in f[group]:
        return None
    lab = _dataset(f, safe, f"{group}/labels", where)
    shape = lab.shape[1:] if lab.ndim == 2 else lab.shape
    problem = label_shape_problem(tuple(shape), lab.dtype, n)
    if problem is not None:
        raise ImportFailure(f"{where}/labels: {problem}")
    if lab.ndim == 2 and not 0 <= replicate < lab.shape[0]:
        raise ImportFailure(f"{where}/labels: --replicate {replicate} outside [0, {lab.shape[0]})")
    y = np.asarray(lab[replicate] if lab.ndim == 2 else lab[()])
    return check_labels(y.astype(np.int64), n_classes, n, f"{where}/labels")


class _Renormalised:
    """The ImageNet release rounded probabilities below 1e-6 to 0: a row short of 1 by at most C·1e-6 is divided
    by its sum (recorded in ``config``); any larger deficit is left for the row-sum check to refuse."""

    def __init__(self, n_classes: int):
        self.limit = n_classes * 1e-6

    def rows(self, arr: np.ndarray) -> np.ndarray:
        sums = arr.sum(axis=1, dtype=np.float64)
        return (sums < 1.0) & (sums >= 1.0 - self.limit) & (np.abs(sums - 1.0) > 1e-4)

    def __call__(self, arr: np.ndarray) -> np.ndarray:
        fix = self.rows(arr)
        if fix.any():
            arr = arr.astype(np.float64)
            arr[fix] /= arr[fix].sum(axis=1, dtype=np.float64, keepdims=True)
        return arr
