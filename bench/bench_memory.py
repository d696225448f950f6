# SPDX-License-Identifier: MIT
"""Bounded memory of sandboxed scoring: peak RSS depends on samples x classes, not on the number of members.

Archive: M = 200 members, one in-domain split of N = 10,000 x C = 100, float32 (800 MB of predictions; shuffle
+ deflate 1 as ``ArchiveWriter`` writes it). It is scored (``score_archive``, pitfalls protocol, labels from a
reference) in the sandbox, whose child reports its peak RSS (``getrusage(RUSAGE_SELF).ru_maxrss``; the parent's
``wait4`` rusage agrees). Target: peak RSS under 400 MB, and the in-domain numbers equal the in-memory path's
(the whole (M, N, C) stack read at once and passed to ``metrics.report.split_arrays``).

    python bench/bench_memory.py [--members 200] [--keep DIR] [--no-compare]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def build(path: Path, *, m: int, n: int, c: int, seed: int = 0) -> Path:
    from ubench.archive_schema import ArchiveWriter, SplitSpec

    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    w = ArchiveWriter(path, method="deep_ensemble", model="bench", dataset="bench", n_classes=c, overwrite=True,
                      splits={"test": SplitSpec(role="in_domain", dataset="bench", labels=y,
                                                sample_ids=np.arange(n))})
    for k in range(w.n_members, m):
        z = rng.normal(0, 2, (n, c)).astype(np.float32)
        z[np.arange(n), y] += 2
        p = np.exp(z - z.max(1, keepdims=True))
        w.add_member({"test": (p / p.sum(1, keepdims=True)).astype(np.float32)}, seed=k)
    return w.finalize()


def in_memory(path: Path, reference: Path) -> dict:
    """The non-streaming path: whole stack in memory, then the same report sections as score.py."""
    from ubench.archive_schema import read_archive
    from ubench.metrics import report as R
    from ubench.scoring.protocols import Protocol
    from ubench.scoring.reference import read_reference

    p = Protocol.preset("pitfalls")
    a = read_archive(path)
    y = read_reference(reference).splits["test"].labels
    arrays = R.split_arrays(a.probs["test"], smoothing=p.smoothing)
    kw = dict(bins=p.bins, eps=p.eps, smoothing=p.smoothing)
    sec = R.in_domain_section(arrays, y, tpr=p.tpr, **kw)
    sec["calibrated"] = R.calibrated_section(arrays, y, placement=p.placement, repeats=p.repeats,
                                             seed=p.seed, **kw)
    return sec


def scalars(d: dict, prefix: str = "") -> dict[str, float]:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(scalars(v, f"{prefix}{k}."))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[prefix + k] = float(v)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, default=200)
    ap.add_argument("--samples", type=int, default=10_000)
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--keep", type=Path, default=None, help="Directory to keep (and reuse) the archive in.")
    ap.add_argument("--no-compare", action="store_true", help="Skip the in-memory comparison.")
    ap.add_argument("--out-dir", default=None)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _results import Recorder

    rec = Recorder(__file__, "h5py")
    rows = []

    from ubench.scoring.reference import write_reference
    from ubench.scoring.sandbox import SandboxLimits, SandboxTask, run_sandboxed

    with tempfile.TemporaryDirectory() as tmp:
        d = args.keep or Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"mem_m{args.members}_n{args.samples}_c{args.classes}.h5"
        t0 = time.perf_counter()
        if not path.exists():
            build(path, m=args.members, n=args.samples, c=args.classes)
        ref = write_reference(path, d / "ref.h5", overwrite=True)
        print(f"archive {path.name}: {path.stat().st_size / 2**20:.0f} MiB on disk, "
              f"{args.members * args.samples * args.classes * 4 / 1e6:.0f} MB of predictions "
              f"(built in {time.perf_counter() - t0:.0f} s)")
        limits = SandboxLimits(memory_bytes=4 * 2**30, cpu_seconds=3600, timeout_seconds=3600)
        for kind in ("validate", "score"):
            t0 = time.perf_counter()
            out = run_sandboxed(SandboxTask(kind, str(path), str(ref) if kind == "score" else None), limits)
            wall = time.perf_counter() - t0
            print(f"{kind:<8} status {out.status}  peak RSS {out.peak_rss_bytes / 2**20:.0f} MiB  "
                  f"wall {wall:.1f} s" + ("" if out.status == "ok" else f"  {out.findings}"))
            rows.append({"task": kind, "members": args.members, "samples": args.samples, "classes": args.classes,
                         "status": out.status, "peak_rss_mib": round(out.peak_rss_bytes / 2**20, 1),
                         "wall_s": round(wall, 2), "max_abs_diff_in_memory": None})
        settings = {"members": args.members, "samples": args.samples, "classes": args.classes}
        if out.status != "ok" or args.no_compare:
            rec.write(rows, _summary(rows, args), settings=settings, out_dir=args.out_dir)
            return
        streamed = scalars(out.report["in_domain"]["test"])
        whole = scalars(json.loads(json.dumps(in_memory(path, ref))))
        common = sorted(set(streamed) & set(whole))
        worst = max((abs(streamed[k] - whole[k]) for k in common), default=math.nan)
        missing = sorted(set(whole) ^ set(streamed))
        print(f"in-memory comparison: {len(common)} scalars, max |streamed - in-memory| = {worst:.3g}"
              + (f"; keys in one only: {missing[:8]}" if missing else ""))
        rows[-1]["max_abs_diff_in_memory"] = worst
        rec.write(rows, _summary(rows, args), settings=settings, out_dir=args.out_dir)


def _summary(rows, args):
    score = next((r for r in rows if r["task"] == "score"), None)
    if score is None or score["status"] != "ok":
        return []
    diff = score["max_abs_diff_in_memory"]
    same = "not compared" if diff is None else f"max |streamed - in-memory| = {diff:.3g}"
    return [{"what": "sandboxed scoring memory", "workload": f"M = {args.members}, N = {args.samples:,}, "
             f"C = {args.classes}", "result": f"peak RSS {score['peak_rss_mib']:.0f} MiB; {same}",
             "target": "< 400 MB", "met": score["peak_rss_mib"] * 2**20 < 400e6}]


if __name__ == "__main__":
    main()
