# SPDX-License-Identifier: MIT
"""Archives for the scoring tests (imported as ``scoring_archives``): written by ``ArchiveWriter`` and, once, with plain h5py from SPEC.md."""

from __future__ import annotations

import numpy as np

from ubench.archive_schema import ArchiveWriter, SplitSpec


def member_logits(rng, n, c, labels, m, strength):
    """(M, N, C) float64 bounded logits (max 0 per row), members correlated, biased towards ``labels``."""
    base = rng.normal(size=(n, c))
    out = np.empty((m, n, c), np.float64)
    for j in range(m):
        z = base + rng.normal(scale=0.7, size=(n, c))
        if labels is not None:
            z[np.arange(n), labels] += strength
        out[j] = z - z.max(axis=1, keepdims=True)
    return out


def _softmax32(z):
    p = np.exp(z)
    return (p / p.sum(axis=-1, keepdims=True)).astype(np.float32)


def member_predictions(rng, n, c, labels, m, strength):
    """(M, N, C) float32 softmax of :func:`member_logits`."""
    return _softmax32(member_logits(rng, n, c, labels, m, strength))


def build_archive(path, *, m=4, n=120, c=5, seed=0, ood=True, shifts=((("blur", 1.0), 1.5), (("blur", 2.0), 0.8),
                                                                      (("noise", 1.0), 1.2)), ids_offset=0, compression=None,
                  logits=False, scores=None):
    """An archive with an in-domain split 'test', an OOD split 'ood' and shift splits; returns (path, data).

    ``logits``: also store the float32 logits (format 1.1); ``scores``: {name: direction} method scores, each
    the mean member's top-1 probability plus noise (negated for ``uncertainty``), from a generator of its own."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    ids = np.arange(n) + ids_offset
    specs = {"test": SplitSpec(role="in_domain", dataset="toy", labels=y, sample_ids=ids)}
    z = {"test": member_logits(rng, n, c, y, m, 2.0)}
    if ood:
        specs["ood"] = SplitSpec(role="ood", dataset="noise", sample_ids=np.arange(n // 2))
        z["ood"] = member_logits(rng, n // 2, c, None, m, 0.0)
    for (kind, level), strength in shifts:
        name = f"{kind}_{level:g}"
        specs[name] = SplitSpec(role="shift", dataset="toy", labels=y, sample_ids=ids, shift_kind=kind,
                                shift_intensity=level)
        z[name] = member_logits(rng, n, c, y, m, strength)
    probs = {k: _softmax32(v) for k, v in z.items()}
    w = ArchiveWriter(path, method="deep_ensemble", model="mlp", dataset="toy", n_classes=c, splits=specs,
                      compression=compression)
    for j in range(m):
        w.add_member({k: v[j] for k, v in probs.items()}, seed=j,
                     logits={k: v[j].astype(np.float32) for k, v in z.items()} if logits else None)
    values = {}
    for i, (name, direction) in enumerate((scores or {}).items()):
        noise = np.random.default_rng(seed + 1000 + i)
        values[name] = {k: (v.mean(0).max(1) + noise.normal(0, 0.1, v.shape[1])) * (-1 if direction == "uncertainty"
                                                                                     else 1) for k, v in probs.items()}
        w.set_scores(name, values[name], direction=direction)
    w.finalize()
    return path, {"labels": y, "probs": probs, "ids": ids, "logits": z, "scores": values}



def write_plain_archive(path, probs: dict, labels: dict, roles: dict, n_classes: int, shift=None):
    """A v1.0 archive written with h5py from archive_schema/SPEC.md alone (no ubench writer)."""
    import h5py

    m = next(iter(probs.values())).shape[0]
    with h5py.File(path, "w") as f:
        f.attrs.update({"ubench_format": "prediction-archive", "ubench_format_version": "1.0",
                        "ubench_kind": "archive", "method": "mc_dropout", "model": "lenet", "dataset": "toy",
                        "n_classes": np.int64(n_classes), "created": "2026-11-22T03:21:31+00:00",
                        "writer": "plain-h5py-test 1.0"})
        g = f.create_group("members")
        g.attrs["ubench_kind"] = "members"
        g["seed"] = np.arange(m, dtype=np.int64)
        g["epoch"] = np.full(m, -1, np.int64)
        g["step"] = np.full(m, -1, np.int64)
        str_dt = h5py.string_dtype()
        g.create_dataset("kind", data=np.array(["mc_sample"] * m, dtype=object), dtype=str_dt)
        g.create_dataset("info", data=np.array(["{}"] * m, dtype=object), dtype=str_dt)
        s = f.create_group("splits")
        s.attrs["ubench_kind"] = "splits"
        for name, p in probs.items():
            sg = s.create_group(name)
            sg.attrs.update({"ubench_kind": "split", "role": roles[name], "dataset": "toy",
                             "n_samples": np.int64(p.shape[1])})
            if roles[name] == "shift":
                sg.attrs["shift_kind"], sg.attrs["shift_intensity"] = shift[name]
            sg["probs"] = p
            if labels.get(name) is not None:
                sg["labels"] = labels[name].astype(np.int64)
            sg["sample_ids"] = np.arange(p.shape[1], dtype=np.int64)
    return path
