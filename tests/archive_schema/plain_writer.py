# SPDX-License-Identifier: MIT
"""An archive writer in plain h5py, written from ``archive_schema/SPEC.md`` alone (no ubench import).

Each block cites the SPEC.md section it follows. It deliberately uses the freedoms the spec grants and ubench's
own writer does not use (fixed-length UTF-8 strings, int32/uint16 integers, contiguous and compact layouts, an
integer ``shift_intensity``, fletcher32), so a test that validates its output checks the reader against the text,
not against ubench's writer. The hostile corpus (``hostile_corpus.py``) starts from it and breaks one thing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np

VLEN_UTF8 = h5py.string_dtype("utf-8")


def fixed_utf8(n: int) -> h5py.Datatype:
    """A fixed-length UTF-8 string type (§1: strings are UTF-8, variable- or fixed-length)."""
    return h5py.string_dtype("utf-8", n)


def softmax(z: np.ndarray) -> np.ndarray:
    z = np.asarray(z, dtype=np.float64)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def default_splits(m: int = 2, n: int = 12, c: int = 4, seed: int = 0) -> dict[str, dict[str, Any]]:
    """One in-domain split with labels and ids, one OOD split without labels, one shift split."""
    rng = np.random.default_rng(seed)
    return {
        "test": dict(role="in_domain", dataset="digits", probs=softmax(rng.normal(0, 3, (m, n, c))).astype("<f4"),
                     labels=rng.integers(0, c, n).astype(np.int32), sample_ids=np.arange(100, 100 + n, dtype=np.uint32)),
        "noise": dict(role="ood", dataset="uniform-noise", probs=softmax(rng.normal(0, 1, (m, 7, c)))),
        "rot_15": dict(role="shift", dataset="digits", shift_kind="rotate", shift_intensity=15,
                       probs=softmax(rng.normal(0, 2, (m, 5, c))).astype("<f4"), labels=rng.integers(0, c, 5)),
    }


def write_plain_archive(
    path: str | Path,
    *,
    n_classes: int = 4,
    splits: Mapping[str, Mapping[str, Any]] | None = None,
    class_names: list[str] | None = None,
    root: Mapping[str, Any] | None = None,
    omit_root: tuple[str, ...] = (),
    probs_options: Mapping[str, Any] | None = None,
    mutate: Callable[[h5py.File], None] | None = None,
    **h5_file_kwargs: Any,
) -> Path:
    """Write an archive following SPEC.md; ``mutate(f)`` runs last, before the file is closed.

    ``splits`` maps a name to ``role``, ``dataset``, ``probs`` (M, N, C) and optionally ``labels``,
    ``sample_ids``, ``shift_kind``, ``shift_intensity``, ``options`` (h5py dataset keywords for ``probs``), and
    (format 1.1) ``logits`` (M, N, C) and ``scores`` ({name: (values (N,), direction)}); the version is ``1.1``
    when a split has either, else ``1.0``.
    """
    path = Path(path)
    splits = default_splits(c=n_classes) if splits is None else splits
    m = next(iter(splits.values()))["probs"].shape[0]
    with h5py.File(path, "w", **h5_file_kwargs) as f:
        # §2 root attributes: required ones, then optional ones. Scalars are scalar-dataspace attributes.
        attrs: dict[str, Any] = {
            "ubench_format": "prediction-archive",
            "ubench_format_version": "1.1" if any(s.get("logits") is not None or s.get("scores")
                                                  for s in splits.values()) else "1.0",
            "ubench_kind": "archive",
            "method": "deep_ensemble",
            "model": "mlp",
            "dataset": "digits",
            "n_classes": np.int64(n_classes),
            "created": "2026-11-22T03:21:31+00:00",
            "writer": "plain-h5py-from-SPEC.md 1",
            "config": json.dumps({"lr": 0.1, "epochs": 3}),
            "description": "written from SPEC.md with plain h5py",
        }
        attrs.update(root or {})
        for key, value in attrs.items():
            if key in omit_root:
                continue
            if key == "dataset":  # exercise §1: fixed-length UTF-8 string attributes are allowed too
                f.attrs.create(key, np.array(value.encode(), dtype=fixed_utf8(len(value.encode()))))
            else:
                f.attrs[key] = value
        # §1 /classes: optional string dataset of C names (fixed-length here).
        if class_names is not None:
            width = max(len(s.encode()) for s in class_names)
            f.create_dataset("classes", data=np.array([s.encode() for s in class_names], dtype=fixed_utf8(width)))
        # §1, §3 /members: five columns of M entries; integers may be any width.
        g = f.create_group("members")
        g.attrs["ubench_kind"] = "members"
        g.create_dataset("seed", data=np.arange(m, dtype=np.int32))
        g.create_dataset("epoch", data=np.full(m, 3, dtype=np.int16))
        g.create_dataset("step", data=np.full(m, -1, dtype=np.int64))
        g.create_dataset("kind", data=np.array(["independent"] * m, dtype=object), dtype=VLEN_UTF8)
        g.create_dataset("info", data=np.array(['{"init": "he"}'] * m, dtype=object), dtype=VLEN_UTF8)
        # §1, §4 /splits/<name>.
        sg = f.create_group("splits")
        sg.attrs["ubench_kind"] = "splits"
        for name, s in splits.items():
            probs = np.asarray(s["probs"])
            sp = sg.create_group(name)
            sp.attrs["ubench_kind"] = "split"
            sp.attrs["role"] = s["role"]
            sp.attrs["dataset"] = s["dataset"]
            sp.attrs["n_samples"] = np.int64(probs.shape[1])
            if "shift_kind" in s:
                sp.attrs["shift_kind"] = s["shift_kind"]
                sp.attrs["shift_intensity"] = s["shift_intensity"]
            options = dict(s.get("options", probs_options or {}))
            sp.create_dataset("probs", data=probs, **options)
            for key in ("labels", "sample_ids"):
                if s.get(key) is not None:
                    sp.create_dataset(key, data=np.asarray(s[key]))
            # §4.3 (1.1) optional logits, beside probs, stored here without chunking.
            if s.get("logits") is not None:
                sp.create_dataset("logits", data=np.asarray(s["logits"]))
            # §4.4 (1.1) optional method scores: a group of kind "scores", one (N,) dataset each with a direction.
            if s.get("scores"):
                g = sp.create_group("scores")
                g.attrs["ubench_kind"] = "scores"
                for score, (values, direction) in s["scores"].items():
                    g.create_dataset(score, data=np.asarray(values)).attrs["direction"] = direction
        # §5 /scalability: optional attributes.
        sc = f.create_group("scalability")
        sc.attrs["ubench_kind"] = "scalability"
        sc.attrs["n_parameters"] = np.int64(1234)
        sc.attrs["device"] = "cpu"
        if mutate is not None:
            mutate(f)
    return path
