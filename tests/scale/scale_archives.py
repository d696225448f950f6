# SPDX-License-Identifier: MIT
"""Small valid archives for the scale tests (a uniquely named module: every test directory has a conftest)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ubench.archive_schema import ArchiveWriter, SplitSpec


def make_archive(path: Path, *, m: int = 3, n: int = 60, c: int = 4, seed: int = 0, ood: bool = True,
                 compression: str | None = "deflate") -> Path:
    """A valid archive: an in-domain split (labels, ids) and an OOD split; labels are the same for every seed."""
    label_rng = np.random.default_rng(1234)
    labels = label_rng.integers(0, c, n)
    rng = np.random.default_rng(seed)
    splits = {"test": SplitSpec(role="in_domain", dataset="digits", labels=labels, sample_ids=np.arange(n))}
    if ood:
        splits["noise"] = SplitSpec(role="ood", dataset="noise", sample_ids=np.arange(n // 2))
    w = ArchiveWriter(path, method="deep_ensemble", model="mlp", dataset="digits", n_classes=c, splits=splits,
                      compression=compression, overwrite=True)
    for k in range(m):
        out = {}
        for name, spec in splits.items():
            rows = n if name == "test" else n // 2
            z = rng.normal(0, 2, (rows, c))
            if name == "test":
                z[np.arange(rows), labels] += 1.0 + seed * 0.3  # better seeds are more accurate
            p = np.exp(z - z.max(1, keepdims=True))
            out[name] = (p / p.sum(1, keepdims=True)).astype(np.float32)
        w.add_member(out, seed=k)
    return w.finalize()
