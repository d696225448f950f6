# SPDX-License-Identifier: MIT
"""Bounded memory of sandboxed scoring: peak RSS depends on one split's samples x classes, not on the number of
members or of splits (issue #29 item 2), and a split beyond memory is scored in passes (item 3).

1. Members: one in-domain split of N = 10,000 x C = 100, float32, for each M of ``--members`` (default 5, 50,
   200; 800 MB of predictions at M = 200). Each archive is validated and scored (``score_archive``, pitfalls
   protocol, labels from a reference) in the sandbox, whose child reports its peak RSS
   (``getrusage(RUSAGE_SELF).ru_maxrss``). At the largest M the in-domain numbers are compared with the
   in-memory path (the whole (M, N, C) stack read at once and passed to ``metrics.report.split_arrays``).
2. ``--imagenet-c``: an ImageNet-C-shaped archive, an in-domain split and 20 shift splits of 50,000 x 1,000
   (``--imagenet-c-members``, default 1: 4.2 GB), scored in the sandbox, and its in-domain split alone (the
   peak the 21 splits should stay at).
3. ``--beyond``: N = 200,000 x C = 1,000, M = 5 (4 GB): its mean (1.5 GiB) does not fit beside the interpreter
   in a 2 GiB sandbox, so it is scored in passes over the archive; the same archive scored with 8 GiB gives the
   in-memory numbers to compare.

Targets: peak RSS <= 2 float32 N x C arrays of the largest split + 150 MB, the same within 10 % for every M
(and 400 MB at M = 200, N = 10,000, C = 100 as before); beyond memory: scored, same numbers.

    python bench/bench_memory.py [--members 5 50 200] [--imagenet-c] [--beyond] [--keep DIR] [--no-compare]

Archives go to ``--keep`` (default: a temporary directory; the ImageNet ones are GBs: keep them in /tmp).
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


#: The protocol of the sandboxed scores: pitfalls, with the bootstrap intervals (issue #26) only under
#: ``--intervals``: their per-sample columns and resampling weights are kept per split by design, which is not
#: what this bench measures (``bench_score.py`` times scoring with and without them).
PROTOCOL: dict = {}


def _sandboxed(kind: str, path: Path, ref: Path | None, memory_bytes: int) -> tuple[object, float]:
    from ubench.scoring.sandbox import SandboxLimits, SandboxTask, run_sandboxed

    limits = SandboxLimits(memory_bytes=memory_bytes, cpu_seconds=7200, timeout_seconds=7200)
    t0 = time.perf_counter()
    task = SandboxTask(kind, str(path), None if ref is None else str(ref), PROTOCOL or None)
    out = run_sandboxed(task, limits)
    return out, time.perf_counter() - t0


def _row(task, path, m, n, c, splits, out, wall, **extra):
    row = {"task": task, "archive": path.name, "members": m, "samples": n, "classes": c, "splits": splits,
           "status": out.status, "peak_rss_mib": round(out.peak_rss_bytes / 2**20, 1), "wall_s": round(wall, 2),
           "target_mib": round((2 * 4 * n * c + 150e6) / 2**20, 1), "max_abs_diff_in_memory": None, **extra}
    print(f"{task:<8} {path.name}  status {out.status}  peak RSS {row['peak_rss_mib']:.0f} MiB  wall {wall:.1f} s"
          + ("" if out.status == "ok" else f"  {out.findings}"))
    return row


def bench_members(d: Path, members: list[int], n: int, c: int, compare: bool) -> list[dict]:
    from ubench.scoring.reference import write_reference

    rows = []
    for m in members:
        path = d / f"mem_m{m}_n{n}_c{c}.h5"
        if not path.exists():
            build(path, m=m, n=n, c=c)
        ref = write_reference(path, d / f"ref_m{m}.h5", overwrite=True)
        for kind in ("validate", "score"):
            out, wall = _sandboxed(kind, path, ref if kind == "score" else None, 4 * 2**30)
            rows.append(_row(kind, path, m, n, c, 1, out, wall))
        if compare and m == max(members) and out.status == "ok":
            streamed = scalars(out.report["in_domain"]["test"])
            whole = scalars(json.loads(json.dumps(in_memory(path, ref))))
            common = sorted(set(streamed) & set(whole))
            rows[-1]["max_abs_diff_in_memory"] = max((abs(streamed[k] - whole[k]) for k in common), default=math.nan)
            print(f"in-memory comparison at M = {m}: {len(common)} scalars, max |streamed - in-memory| = "
                  f"{rows[-1]['max_abs_diff_in_memory']:.3g}")
    return rows


def bench_imagenet_c(d: Path, m: int) -> list[dict]:
    """The ImageNet-C shape, and its in-domain split alone (the baseline a peak independent of the number of
    splits stays at)."""
    from _archives import imagenet_like

    n, c, shifts = 50_000, 1_000, 20
    rows = []
    for k, name in ((0, f"imagenet_c_m{m}_one_split.h5"), (shifts, f"imagenet_c_m{m}.h5")):
        path = imagenet_like(d / name, m=m, n=n, c=c, shift_splits=k)
        out, wall = _sandboxed("score", path, None, 8 * 2**30)
        rows.append(_row("score", path, m, n, c, k + 1, out, wall))
    return rows


def bench_beyond(d: Path) -> list[dict]:
    from _archives import imagenet_like

    m, n, c = 5, 200_000, 1_000
    path = imagenet_like(d / f"imagenet_m{m}_n{n}.h5", m=m, n=n, c=c)
    rows = []
    whole, wall = _sandboxed("score", path, None, 8 * 2**30)
    rows.append(_row("score", path, m, n, c, 1, whole, wall, memory_limit="8G", read_in_passes=False))
    passes, wall = _sandboxed("score", path, None, 2 * 2**30)
    notes = [x for x in (passes.report or {}).get("notes", []) if "read it again" in x]
    rows.append(_row("score", path, m, n, c, 1, passes, wall, memory_limit="2G", read_in_passes=bool(notes),
                     passes_note=notes[0] if notes else None))
    if whole.status == "ok" and passes.status == "ok":
        a, b = scalars(whole.report["in_domain"]["test"]), scalars(passes.report["in_domain"]["test"])
        rows[-1]["max_abs_diff_in_memory"] = max(abs(a[k] - b[k]) for k in set(a) & set(b))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, nargs="+", default=[5, 50, 200])
    ap.add_argument("--samples", type=int, default=10_000)
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--imagenet-c", action="store_true", help="also the ImageNet-C-shaped archive (GBs)")
    ap.add_argument("--imagenet-c-members", type=int, default=1)
    ap.add_argument("--beyond", action="store_true", help="also the 4 GB archive under a 2 GiB limit")
    ap.add_argument("--keep", type=Path, default=None, help="Directory to keep (and reuse) the archives in.")
    ap.add_argument("--no-compare", action="store_true", help="Skip the in-memory comparison.")
    ap.add_argument("--intervals", action="store_true", help="score with the bootstrap intervals on")
    ap.add_argument("--out-dir", default=None)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _results import Recorder

    rec = Recorder(__file__, "h5py")
    from ubench.scoring.protocols import Protocol

    PROTOCOL.update(Protocol.preset("pitfalls").replace(intervals=args.intervals).to_dict())
    with tempfile.TemporaryDirectory() as tmp:
        d = args.keep or Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        rows = bench_members(d, args.members, args.samples, args.classes, not args.no_compare)
        if args.imagenet_c:
            rows += bench_imagenet_c(d, args.imagenet_c_members)
        if args.beyond:
            rows += bench_beyond(d)
    settings = {"members": args.members, "samples": args.samples, "classes": args.classes,
                "imagenet_c": args.imagenet_c, "beyond": args.beyond, "intervals": args.intervals}
    rec.write(rows, _summary(rows, args), settings=settings, out_dir=args.out_dir)


def _summary(rows, args):
    out = []
    scores = [r for r in rows if r["task"] == "score" and r["splits"] == 1 and r["samples"] == args.samples
              and r["status"] == "ok"]
    if scores:
        rss = [r["peak_rss_mib"] for r in scores]
        # validating the same archives (the sandbox's other task): within the same target, as independent of M
        checks = [r["peak_rss_mib"] for r in rows if r["task"] == "validate" and r["status"] == "ok"]
        diff = scores[-1]["max_abs_diff_in_memory"]
        same = "not compared" if diff is None else f"max |streamed - in-memory| = {diff:.3g}"
        target = scores[0]["target_mib"]
        members = ", ".join(str(r["members"]) for r in scores)
        out.append({"what": "sandboxed scoring memory", "workload": f"M = {members}, N = {args.samples:,}, "
                    f"C = {args.classes}",
                    "result": f"peak RSS {', '.join(f'{x:.0f}' for x in rss)} MiB; spread "
                              f"{max(rss) / min(rss) - 1:.0%}; {same}"
                              + (f"; validate {', '.join(f'{x:.0f}' for x in checks)} MiB" if checks else ""),
                    "target": f"<= {target:.0f} MiB (2 float32 N x C + 150 MB), within 10 % for every M"
                              + ("" if args.intervals else "; bootstrap intervals off"),
                    "met": all(max(x) <= target and max(x) <= 1.1 * min(x) for x in (rss, checks) if x)})
    one = {r["members"]: r for r in rows if r["archive"].endswith("_one_split.h5") and r["status"] == "ok"}
    for r in rows:
        if r["splits"] > 1 and r["status"] == "ok":
            base = one.get(r["members"])
            out.append({"what": "sandboxed scoring memory, ImageNet-C shape",
                        "workload": f"{r['splits']} splits of {r['samples']:,} x {r['classes']:,}, M = {r['members']}",
                        "result": f"peak RSS {r['peak_rss_mib']:.0f} MiB in {r['wall_s']:.0f} s"
                                  + ("" if base is None else f" (its in-domain split alone: {base['peak_rss_mib']:.0f}"
                                                             " MiB)"),
                        "target": f"<= {r['target_mib']:.0f} MiB", "met": r["peak_rss_mib"] <= r["target_mib"]})
        if r.get("memory_limit") == "8G" and r["status"] == "ok":
            out.append({"what": "sandboxed scoring memory, one large split in memory",
                        "workload": f"N = {r['samples']:,}, C = {r['classes']:,}, M = {r['members']} (4 GB), 8 GiB "
                                    "sandbox",
                        "result": f"peak RSS {r['peak_rss_mib']:.0f} MiB in {r['wall_s']:.0f} s (its float64 mean "
                                  f"alone: {8 * r['samples'] * r['classes'] / 2**20:,.0f} MiB)",
                        "target": f"<= {r['target_mib']:.0f} MiB", "met": r["peak_rss_mib"] <= r["target_mib"]})
        if r.get("memory_limit") == "2G":
            diff = r["max_abs_diff_in_memory"]
            out.append({"what": "scoring beyond memory", "workload": f"N = {r['samples']:,}, C = {r['classes']:,}, "
                        f"M = {r['members']} (4 GB) in a 2 GiB sandbox",
                        "result": f"{r['status']}: read in passes {r['read_in_passes']}, peak RSS "
                                  f"{r['peak_rss_mib']:.0f} MiB, {r['wall_s']:.0f} s; max |passes - in memory| = "
                                  f"{'n/a' if diff is None else f'{diff:.3g}'}",
                        "target": "scored, same numbers", "met": r["status"] == "ok" and diff == 0})
    return out


if __name__ == "__main__":
    main()
