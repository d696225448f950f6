# SPDX-License-Identifier: MIT
"""Chunking and compression of ``probs`` for the two access paths, measured (issue #2).

Producers write one member at a time; the scorer streams blocks of samples across all members. For each chunk
target × filter setting this measures, on realistic softmax output (default M=20, N=10,000, C=100, float32):

* file size and compression ratio (raw probs bytes / file bytes);
* write: ``finalize_partial`` assembling the archive from the producer's member files (the real path);
* validate: ``validate_archive`` (link/storage walk + every value checked in blocks);
* stream: ``open_archive(...).iter_probs(split)`` over all samples in the scorer's default blocks, and
  ``rows=256`` small blocks;
* member read: one member's full (N, C) slice (a producer or a per-member metric).

Chunking is ubench's ``(1, rows, C)`` with ``rows * C * 4 ≈ target``; the filter setting replaces the writer's
``shuffle + deflate(DEFAULT_DEFLATE)`` for the run (``_write_probs`` below mirrors the writer's own function with the
filters as parameters). Reads are warm in the page cache (what a scorer sees right after fetching the file) but each run opens the
file afresh, so HDF5's chunk cache starts empty; each time is the best of ``--repeat`` runs. Stream and member
times include ``open_archive(..., check_values=False)`` (the structural checks, a few ms).

    python bench/bench_archive_storage.py    # print the table, write bench/results/bench_archive_storage.json
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import Recorder  # noqa: E402

from ubench.archive_schema import ArchiveWriter, SplitSpec, open_archive, validate_archive
from ubench.archive_schema import writer as writer_mod
from ubench.archive_schema.safe_h5py import h5py

KIB = 2**10
CHUNK_TARGETS = [64 * KIB, 256 * KIB, 1024 * KIB, 4096 * KIB]
FILTERS = {  # name -> (shuffle, deflate level or None)
    "none": (False, None),
    "shuffle+deflate1": (True, 1),
    "shuffle+deflate4": (True, 4),
    "deflate4": (False, 4),
}


def realistic_members(m: int, n: int, c: int, seed: int = 0) -> np.ndarray:
    """(M, N, C) float32 softmax output shaped like a trained classifier's.

    Per sample: a true class with a logit margin ~ N(6, 3) over N(0, 1) noise logits, 10 % of samples near
    saturation (margin ~ 25), 15 % confidently wrong (margin on another class); per member, the shared logits plus
    N(0, 0.7) member noise and a member temperature in [1, 3].
    """
    rng = np.random.default_rng(seed)
    base = rng.normal(0.0, 1.0, (n, c))
    y = rng.integers(0, c, n)
    margin = rng.normal(6.0, 3.0, n)
    margin[rng.random(n) < 0.10] = 25.0
    wrong = rng.random(n) < 0.15
    target = np.where(wrong, (y + 1 + rng.integers(0, c - 1, n)) % c, y)
    base[np.arange(n), target] += margin
    out = np.empty((m, n, c), np.float32)
    for k in range(m):
        z = (base + rng.normal(0.0, 0.7, (n, c))) / rng.uniform(1.0, 3.0)
        z -= z.max(axis=1, keepdims=True)
        e = np.exp(z)
        out[k] = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
    return out


def _write_probs_factory(chunk_bytes: int, shuffle: bool, level: int | None):
    def _write_probs(split, name, members, n_classes, compression):
        n = int(split.attrs["n_samples"])
        with h5py.File(members[0], "r") as mf:
            dtype = mf[f"probs/{name}"].dtype
        kwargs = {"chunks": writer_mod.chunk_shape(n, n_classes, dtype.itemsize, chunk_bytes)}
        if level is not None:
            kwargs.update(shuffle=shuffle, compression="gzip", compression_opts=level)
        ds = split.create_dataset("probs", shape=(len(members), n, n_classes), dtype=dtype, **kwargs)
        for k, p in enumerate(members):
            with h5py.File(p, "r") as mf:
                ds[k] = mf[f"probs/{name}"][()]

    return _write_probs


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def run(m: int, n: int, c: int, repeat: int, workdir: Path) -> list[dict]:
    probs = realistic_members(m, n, c)
    source = workdir / "source.h5"
    w = ArchiveWriter(source, method="bench", model="mlp", dataset="synthetic", n_classes=c,
                      splits={"test": SplitSpec(role="in_domain", dataset="synthetic", n_samples=n)})
    for k in range(m):
        w.add_member({"test": probs[k]}, seed=k)
    members_dir = writer_mod.partial_dir_for(source)  # kept: every configuration is finalized from a copy
    raw = probs.nbytes
    rows = []
    original = writer_mod._write_probs
    try:
        for chunk_bytes in CHUNK_TARGETS:
            for fname, (shuffle, level) in FILTERS.items():
                writer_mod._write_probs = _write_probs_factory(chunk_bytes, shuffle, level)
                out = workdir / f"c{chunk_bytes}_{fname}.h5"
                write_times = []
                for _ in range(repeat):
                    if out.exists():
                        out.unlink()
                    part = writer_mod.partial_dir_for(out)
                    shutil.copytree(members_dir, part)
                    t = time.perf_counter()
                    writer_mod.finalize_partial(part, compression="deflate" if level else None)
                    write_times.append(time.perf_counter() - t)
                size = out.stat().st_size
                validate_s = _best(lambda: validate_archive(out), repeat)
                # A fresh handle per run: HDF5's chunk cache would otherwise serve repeated reads.
                def stream(rows=None):
                    with open_archive(out, check_values=False) as r:
                        for _, block in r.iter_probs("test", rows=rows):
                            block.sum()

                def one_member():
                    with open_archive(out, check_values=False) as r:
                        return r.dataset("test")[m // 2]

                stream_s = _best(stream, repeat)
                stream256_s = _best(lambda: stream(256), repeat)
                member_s = _best(one_member, repeat)
                with open_archive(out, check_values=False) as r:
                    chunk = r.dataset("test").chunks
                    np.testing.assert_array_equal(r.dataset("test")[m - 1], probs[m - 1])
                rows.append(dict(chunk_kib=chunk_bytes // KIB, chunk=chunk, filters=fname, mib=size / 2**20,
                                 ratio=raw / size, write_s=min(write_times), validate_s=validate_s,
                                 stream_s=stream_s, stream256_s=stream256_s, member_s=member_s))
                out.unlink()
                print(_row(rows[-1]), flush=True)
    finally:
        writer_mod._write_probs = original
    return rows


HEADER = ("| chunk target | chunk shape | filters | file MiB | ratio | write s | validate s | stream s | "
          "stream 256-row s | one member s |\n|---|---|---|---|---|---|---|---|---|---|")


def _row(r: dict) -> str:
    return (f"| {r['chunk_kib']} KiB | {r['chunk']} | {r['filters']} | {r['mib']:.1f} | {r['ratio']:.2f} | "
            f"{r['write_s']:.2f} | {r['validate_s']:.2f} | {r['stream_s']:.3f} | {r['stream256_s']:.3f} | "
            f"{r['member_s']:.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, default=20)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--c", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out-dir", default=None)
    args = ap.parse_args()
    rec = Recorder(__file__, "h5py")
    print(HEADER, flush=True)
    with tempfile.TemporaryDirectory(prefix="ubench-bench-") as tmp:
        rows = run(args.m, args.n, args.c, args.repeat, Path(tmp))
    rec.write(rows, [], settings={"m": args.m, "n": args.n, "c": args.c, "repeat": args.repeat,
                                  "hdf5": h5py.version.hdf5_version, "tmpdir": tempfile.gettempdir()},
              out_dir=args.out_dir)


if __name__ == "__main__":
    main()
