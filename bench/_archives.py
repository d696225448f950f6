# SPDX-License-Identifier: MIT
"""ImageNet-like archives for the scale benches (issue #29): ``bench_score.py``, ``bench_memory.py``,
``bench_scale.py``. Archives go to /tmp (never into the repository); large ones take minutes to write.

Predictions look like an ImageNet classifier's rather than noise: each sample has its label's logit raised by
N(10, 3) and three confusing classes by N(6, 1.5) over N(0, 1) logits, each member adds N(0, 0.8): about 76 %
top-1 accuracy and 0.7 mean confidence for the ensemble mean (a long tail of ~1e-4 probabilities, as a real
softmax over 1,000 classes has; iid noise over 1,000 classes would give near-uniform rows instead). Shift splits
lower the label's boost with their index; OOD splits have none.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _member(base: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    z = base + rng.normal(0, 0.8, base.shape).astype(np.float32)
    z -= z.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z


def imagenet_like(path: Path, *, m: int = 5, n: int = 50_000, c: int = 1_000, shift_splits: int = 0,
                  ood_splits: int = 0, seed: int = 0) -> Path:
    """Write (or keep, if it exists) an archive: in-domain split ``test``, ``shift_splits`` shift splits (kinds of
    5 intensities each, ImageNet-C style) and ``ood_splits`` OOD splits, each of ``n`` x ``c``, ``m`` members."""
    from ubench.archive_schema import ArchiveWriter, SplitSpec

    path = Path(path)
    if path.exists():
        return path
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    splits = {"test": SplitSpec(role="in_domain", dataset="imagenet", labels=y, sample_ids=np.arange(n))}
    for k in range(ood_splits):
        splits[f"ood{k}"] = SplitSpec(role="ood", dataset=f"ood{k}", sample_ids=np.arange(n))
    for k in range(shift_splits):
        splits[f"c{k // 5:02d}_{k % 5 + 1}"] = SplitSpec(role="shift", dataset="imagenet", labels=y,
                                                        sample_ids=np.arange(n), shift_kind=f"corruption{k // 5}",
                                                        shift_intensity=k % 5 + 1)
    w = ArchiveWriter(path, method="deep_ensemble", model="bench", dataset="imagenet-bench", n_classes=c,
                      splits=splits, overwrite=True)
    bases = {}
    for name, spec in splits.items():
        b = rng.normal(0, 1, (n, c)).astype(np.float32)
        for _ in range(3):
            b[np.arange(n), rng.integers(0, c, n)] += rng.normal(6, 1.5, n).astype(np.float32)
        if spec.labels is not None:
            b[np.arange(n), y] += rng.normal(10 - 0.8 * (spec.shift_intensity or 0), 3, n).astype(np.float32)
        bases[name] = b
    for j in range(m):
        w.add_member({name: _member(b, rng) for name, b in bases.items()}, seed=j)
    return w.finalize()


def read_floor(path: Path, split: str = "test") -> float:
    """Seconds for the physical limit of scoring ``split``: one read of its predictions along whole chunks and one
    float32 pass over them (a sum), in this process (page cache warm after the first call)."""
    import time

    import h5py

    t0 = time.perf_counter()
    with h5py.File(path, "r") as f:
        ds = f[f"splits/{split}/probs"]
        m, n, c = ds.shape
        rows = (ds.chunks[1] if ds.chunks else 256) * 16
        total = 0.0
        for a in range(0, n, rows):
            total += float(ds[:, a : a + rows, :].sum(dtype=np.float32))
    return time.perf_counter() - t0


def compute_floors(path: Path, split: str = "test", exp_passes: int = 7) -> dict[str, float]:
    """Seconds of the transcendental work exact scoring cannot avoid, block by block in cache, on top of
    :func:`read_floor`: one float32 ``log`` of every member entry (the mean member entropy, data uncertainty) and
    ``exp_passes`` float64 ``exp`` passes over the (N, C) mean (test-time CV: every held-out half at its fold's
    temperature, 5 repeats, and the cumulant passes of the fits; each needs its own exponentials for the same
    numbers)."""
    import time

    import h5py

    with h5py.File(path, "r") as f:
        ds = f[f"splits/{split}/probs"]
        m, n, c = ds.shape
        rows = (ds.chunks[1] if ds.chunks else 256) * 16
        t_log = t_exp = 0.0
        for a in range(0, n, rows):
            block = ds[:, a : a + rows, :]
            t0 = time.perf_counter()
            np.log(block, out=block)
            t_log += time.perf_counter() - t0
            mean = block.mean(axis=0, dtype=np.float64)
            t0 = time.perf_counter()
            for _ in range(exp_passes):
                np.exp(mean, out=mean)
                mean *= -1.0
            t_exp += time.perf_counter() - t0
    return {"floor_member_logs_s": round(t_log, 3), f"floor_{exp_passes}_exp_passes_s": round(t_exp, 3)}
