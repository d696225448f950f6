# SPDX-License-Identifier: MIT
"""``ubench import torch``: a ``.pt`` of tensors, loaded with ``torch.load(weights_only=True)`` only.

``weights_only=True`` unpickles tensors, dicts, lists and numbers and refuses every other global, so a ``.pt``
that would run code when unpickled is refused, never executed. The file holds a tensor (M, N, C) / (N, C), or a
dict with one prediction tensor (``--key`` names it when there are several) and optionally ``labels``.

A tensor is judged from its metadata before a value is read: its declared size against ``max_bytes``, and its
storage: a tensor whose storage holds fewer elements than it declares (an expanded, stride-0 view: one stored
value seen as 20 x 1,000,000 x 100) is not a saved prediction and is refused.
"""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from ..archive_schema import SplitSpec
from .plan import (DEFAULT_MAX_BYTES, ImportFailure, ImportPlan, Member, check_declared, check_labels,
                   label_shape_problem, load_labels)

__all__ = ["load_pt", "plan_torch", "numpy_dtype"]


def load_pt(path: Path) -> Any:
    """``torch.load(path, weights_only=True, mmap=True)`` (memory-mapped where the file allows), on the CPU."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - the torch extra
        raise ImportFailure("importing .pt files needs PyTorch: pip install 'ubench[torch]'") from exc
    # UnpicklingError: a pickle that needs a global outside the allow-list (code); the rest: not a .pt at all
    refused = (pickle.UnpicklingError, RuntimeError, OSError, EOFError, ValueError, zipfile.BadZipFile)
    try:
        try:
            return torch.load(path, weights_only=True, mmap=True, map_location="cpu")
        except RuntimeError as exc:
            if "mmap" not in str(exc):
                raise
            # the legacy (non-zip) format cannot be memory-mapped
            return torch.load(path, weights_only=True, map_location="cpu")
    except refused as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ImportFailure(f"{path}: refused or unreadable by torch.load(weights_only=True): {first}") from exc


def plan_torch(sources: list[Path], *, kind: str, dataset: str, method: str = "imported", model: str = "unknown",
               key: str | None = None, labels: Path | None = None, member_kind: str | None = None,
               max_bytes: int = DEFAULT_MAX_BYTES) -> ImportPlan:
    """Plan the import of ``.pt`` prediction tensors (module docstring)."""
    import torch

    tensors, where, y = [], [], None
    config: dict[str, Any] = {"import_format": "torch", "sources": [str(p) for p in sources], "stored_kind": kind}
    for p in map(Path, sources):
        obj = load_pt(p)
        name = str(p)
        if isinstance(obj, dict):
            cands = [k for k, v in obj.items() if isinstance(v, torch.Tensor) and v.is_floating_point()]
            k = key or (cands[0] if len(cands) == 1 else None)
            if k is None or k not in obj:
                raise ImportFailure(f"{p}: which tensor holds the predictions? keys {sorted(map(str, obj))}; "
                                    "name it with --key")
            if key is None:
                config["key"] = k
            if y is None and labels is None and isinstance(obj.get("labels"), torch.Tensor):
                y = obj["labels"]
                config["labels"] = f"{p}:labels"
            obj, name = obj[k], f"{p}:{k}"
        if not isinstance(obj, torch.Tensor):
            raise ImportFailure(f"{p}: expected a tensor or a dict of tensors; found {type(obj).__name__}")
        _check_storage(obj, name)
        tensors.append(obj.detach())
        where.append(name)
    shapes = [tuple(t.shape) for t in tensors]
    if len(tensors) == 1 and len(shapes[0]) == 3:
        m, n, c = shapes[0]
        parts = [(lambda j=j: tensors[0][j].numpy(), f"{where[0]}[{j}]") for j in range(m)]
    elif all(len(s) == 2 and s == shapes[0] for s in shapes):
        m, (n, c) = len(tensors), shapes[0]
        parts = [(lambda t=t: t.numpy(), w) for t, w in zip(tensors, where)]
    else:
        raise ImportFailure(f"{where[0]}: expected (M, N, C), (N, C) or one (N, C) tensor per file; found {shapes}")
    dtype = np.float64 if all(t.dtype == torch.float64 for t in tensors) else np.float32
    check_declared(where[0], m, {"test": n}, c, np.dtype(dtype).itemsize, max_bytes)
    if labels is not None:
        y = load_labels(labels, n=n)
        config["labels"] = str(labels)
    elif y is not None:
        _check_storage(y, config["labels"])
        problem = label_shape_problem(tuple(y.shape), numpy_dtype(y), n)
        if problem is not None:
            raise ImportFailure(f"{config['labels']}: {problem}")
        y = y.numpy().astype(np.int64)
    notes = [] if y is not None else ["no labels given (--labels or a 'labels' tensor): only label-free scores"]
    if y is not None:
        check_labels(y, c, n, config["labels"])
    member_kind = member_kind or ("point" if m == 1 else "independent")
    config.update(n_members=m, n_samples=n, n_classes=c, member_kind=member_kind,
                  split=f"test (role in_domain, dataset {dataset})")
    members = (Member({"test": th}, {"test": w}, kind=member_kind, info={"source": w}) for th, w in parts)
    return ImportPlan(method=method, model=model, dataset=dataset, n_classes=c,
                      splits={"test": SplitSpec(role="in_domain", dataset=dataset, labels=y,
                                                n_samples=None if y is not None else n)},
                      members=members, stored_kind=kind, config=config, dtype=dtype, notes=notes, n_members=m)


def numpy_dtype(t: Any) -> np.dtype:
    """The kind of a tensor's values as a NumPy dtype, for shape-and-kind checks before ``.numpy()`` (which
    bfloat16 and other types NumPy lacks would fail)."""
    import torch

    if t.dtype == torch.bool:
        return np.dtype(np.bool_)
    if t.is_floating_point():
        return np.dtype(np.float64)
    return np.dtype(np.complex128) if t.is_complex() else np.dtype(np.int64)


def _check_storage(t: Any, where: str) -> None:
    """Refuse a tensor whose storage holds fewer bytes than its shape declares (stride 0, ``expand``)."""
    declared = t.numel() * t.element_size()
    stored = t.untyped_storage().nbytes() - t.storage_offset() * t.element_size()
    repeated = any(stride == 0 and size > 1 for size, stride in zip(t.shape, t.stride()))
    if repeated or stored < declared:
        raise ImportFailure(f"{where}: tensor of shape {tuple(t.shape)} declares {declared} bytes but its storage "
                            f"holds {max(stored, 0)} (strides {tuple(t.stride())}: an expanded view repeating "
                            "stored values, not saved predictions); save a contiguous tensor (.contiguous())")
