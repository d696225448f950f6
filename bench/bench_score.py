# SPDX-License-Identifier: MIT
"""Benchmark of ``ubench score``: end to end, at ImageNet scale against the physical limit, and start-up.

1. End to end (a real subprocess, start-up included): M = 20 members, an in-domain split of N = 10,000 x
   C = 100, one OOD split and 5 shift splits of the same size, float32, written by ``ArchiveWriter``.
   Target: under 5 s wall on a 2-core machine.
2. ImageNet-shaped archive (issue #29 item 1): M = 5, N = 50,000, C = 1,000 (``bench/_archives.py``, 1 GB),
   every default metric (pitfalls preset). The scoring time of ``run_score`` in a fresh process (imports
   excluded) against the physical limit measured in the same run: one read of the split's predictions along
   whole chunks plus one float32 pass over them (``_archives.read_floor``), page cache warm for both, runs
   interleaved. Peak RSS of the scoring process (``VmHWM``). Targets: <= 4x the limit, <= 600 MB. With
   ``--baseline-src DIR`` (a checkout of an earlier ubench, e.g. ``git archive main``), the same runs of that
   version give the before column and the largest difference of any number of the two reports.
3. Start-up: whole-process wall of ``ubench --help`` and of ``ubench score examples/digits_deep_ensemble.h5
   --json`` (median of ``--startup-repeats``; with and without ``--no-intervals``), wall and CPU (user + system),
   with the bytecode cached as an installed package has it (``PYTHONPYCACHEPREFIX``; ``PYTHONDONTWRITEBYTECODE``
   would recompile ubench's modules on every run), ``--baseline-src``'s version interleaved, and the modules
   ``python -X importtime`` finds slowest; with ``--instructions`` the instructions each executes (callgrind's
   count: what a loaded machine does not disturb). Targets: <= 0.3 s and <= 0.5 s on an idle machine, for ubench
   as the README's ``pip install .`` installs it (a wheel of this checkout in a fresh virtual environment,
   interleaved with the others: ``installed_*`` keys); the development install (``pip install -e``: setuptools'
   editable finder runs at every start) is the before/after comparison.

    python bench/bench_score.py [--keep DIR] [--repeats 3] [--baseline-src DIR] [--no-imagenet] [--startup-only]
        [--instructions]

Writes bench/results/bench_score.json. Archives go to ``--keep`` (default: a temporary directory).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _archives import compute_floors, imagenet_like, read_floor  # noqa: E402
from _results import Recorder  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "digits_deep_ensemble.h5"

#: A fresh process scores the archive and reports its scoring time (imports apart) and peak RSS.
_SCORE_CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
import ubench.scoring.score as score
from ubench.scoring.score import run_score
t1 = time.perf_counter()
streamed = [0.0]
stream = score._stream_split
def timed(*args, **kwargs):  # the reads of the splits, apart from their metrics
    t = time.perf_counter()
    try:
        return stream(*args, **kwargs)
    finally:
        streamed[0] += time.perf_counter() - t
score._stream_split = timed
protocol = "pitfalls"
if len(sys.argv) > 3:  # the report without bootstrap intervals (issue #26's, on by default since)
    from ubench.scoring.protocols import Protocol
    protocol = Protocol.preset("pitfalls").replace(intervals=False)
report = run_score(sys.argv[1], protocol=protocol)
t2 = time.perf_counter()
with open(sys.argv[2], "w") as f:
    json.dump(report, f)
# VmHWM: the peak of this program's own address space (ru_maxrss also counts the parent's pages that a forked
# child shares until it execs, which is the bench's own memory after it wrote a 1 GB archive)
hwm = [int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM:")]
print(json.dumps({"import_s": t1 - t0, "score_s": t2 - t1, "stream_s": streamed[0],
                  "peak_rss_bytes": hwm[0] if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def build(path: Path, *, m: int = 20, n: int = 10_000, c: int = 100, seed: int = 0) -> Path:
    from ubench.archive_schema import ArchiveWriter, SplitSpec

    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    splits = {"test": SplitSpec(role="in_domain", dataset="bench", labels=y, sample_ids=np.arange(n)),
              "ood": SplitSpec(role="ood", dataset="noise", sample_ids=np.arange(n))}
    for k in range(5):
        splits[f"noise{k + 1}"] = SplitSpec(role="shift", dataset="bench", labels=y, sample_ids=np.arange(n),
                                            shift_kind="gaussian_noise", shift_intensity=k + 1)
    w = ArchiveWriter(path, method="deep_ensemble", model="bench", dataset="bench", n_classes=c, splits=splits,
                      overwrite=True)
    base = rng.normal(size=(n, c)).astype(np.float32)
    for j in range(m):
        preds = {}
        for i, (name, spec) in enumerate(splits.items()):
            z = base + rng.normal(scale=0.5, size=(n, c)).astype(np.float32)
            if spec.labels is not None:
                z[np.arange(n), y] += 4.0 - (i - 1) * 0.6 if spec.role == "shift" else 4.0
            z -= z.max(axis=1, keepdims=True)
            p = np.exp(z)
            p /= p.sum(axis=1, keepdims=True)
            preds[name] = p.astype(np.float32)
        w.add_member(preds, seed=j)
    return w.finalize()


def _score_child(path: Path, out: Path, src: Path | None, intervals: bool = True) -> dict:
    env = dict(os.environ)
    if src is not None:  # an earlier ubench: its package directory's parent on the path (before the install)
        env["PYTHONPATH"] = str(src)
    extra = [] if intervals else ["no-intervals"]
    res = subprocess.run([sys.executable, "-c", _SCORE_CHILD, str(path), str(out), *extra], capture_output=True,
                         text=True, env=env, cwd=tempfile.gettempdir(), check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def _numbers(d, prefix=""):
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _numbers(v, f"{prefix}/{k}")
    elif isinstance(d, list):
        for i, v in enumerate(d):
            yield from _numbers(v, f"{prefix}[{i}]")
    elif isinstance(d, (int, float)) and not isinstance(d, bool):
        yield prefix, float(d)


def _max_diff(a: Path, b: Path) -> tuple[float, int]:
    """Largest |a - b| over the numbers two reports both hold, and how many they share."""
    x, y = dict(_numbers(json.loads(a.read_text()))), dict(_numbers(json.loads(b.read_text())))
    common = [k for k in x if k in y and "ubench_version" not in k]
    return max((abs(x[k] - y[k]) for k in common), default=0.0), len(common)


def bench_imagenet(tmp: Path, repeats: int, baseline: Path | None) -> tuple[list[dict], list[dict]]:
    m, n, c = 5, 50_000, 1_000
    path = tmp / f"imagenet_m{m}_n{n}_c{c}.h5"
    t = time.perf_counter()
    imagenet_like(path, m=m, n=n, c=c)
    print(f"archive {path} ({path.stat().st_size / 2**20:.0f} MiB; ready in {time.perf_counter() - t:.0f} s)")
    read_floor(path)  # warm the page cache
    runs: dict[str, list[dict]] = {"ubench": [], "ubench, no intervals": [], "baseline": []}
    floors = []
    for _ in range(repeats):  # interleaved: floor, ubench, ubench without intervals, floor, baseline
        floors.append(read_floor(path))
        runs["ubench"].append(_score_child(path, tmp / "report_new.json", None))
        runs["ubench, no intervals"].append(_score_child(path, tmp / "report_nointervals.json", None, False))
        if baseline is not None:
            floors.append(read_floor(path))
            runs["baseline"].append(_score_child(path, tmp / "report_old.json", baseline))
    floor = statistics.median(floors)
    floors_more = compute_floors(path)
    rows, summary = [], []
    for who, rs in runs.items():
        if not rs:
            continue
        score = statistics.median(r["score_s"] for r in rs)
        rss = max(r["peak_rss_bytes"] for r in rs)
        row = {"what": "ImageNet-shaped scoring", "version": who, "archive": f"M={m}, N={n:,}, C={c:,}, float32",
               "score_s": [round(r["score_s"], 2) for r in rs], "median_score_s": round(score, 2),
               "import_s": round(statistics.median(r["import_s"] for r in rs), 2),
               "stream_s": round(statistics.median(r.get("stream_s", float("nan")) for r in rs), 2),
               "floor_read_plus_pass_s": round(floor, 3), "ratio_to_floor": round(score / floor, 2),
               **floors_more, "peak_rss_mib": round(rss / 2**20, 1)}
        rows.append(row)
        print(row)
    new, plain = rows[0], rows[1]
    diff = None
    if baseline is not None:
        diff, shared = _max_diff(tmp / "report_new.json", tmp / "report_old.json")
        rows[0]["max_abs_diff_vs_baseline"], rows[0]["numbers_compared"] = diff, shared
    before = (f"; before: {rows[2]['median_score_s']:.1f} s = {rows[2]['ratio_to_floor']:.1f}x, "
              f"{rows[2]['peak_rss_mib']:.0f} MiB; max |difference| {diff:.1e} over {shared:,} numbers"
              if len(rows) > 2 else "")
    before = (f"; without the bootstrap intervals {plain['median_score_s']:.2f} s = {plain['ratio_to_floor']:.1f}x, "
              f"{plain['peak_rss_mib']:.0f} MiB") + before
    exact = floor + sum(floors_more.values())
    summary.append({"what": "ImageNet-shaped scoring, time",
                    "workload": f"M = {m}, N = {n:,}, C = {c:,}, every default metric",
                    "result": f"{new['median_score_s']:.2f} s (read and stream {new['stream_s']:.2f} s) = "
                              f"**{new['ratio_to_floor']:.1f}x** the read + one float32 pass ({floor:.2f} s); with the "
                              f"logs and exps exact numbers need, the floor is {exact:.2f} s{before}",
                    "target": "<= 4x", "met": new["ratio_to_floor"] <= 4})
    summary.append({"what": "ImageNet-shaped scoring, peak RSS", "workload": f"M = {m}, N = {n:,}, C = {c:,}",
                    "result": f"{new['peak_rss_mib']:.0f} MiB", "target": "<= 600 MB",
                    "met": new["peak_rss_mib"] * 2**20 <= 600e6})
    return rows, summary


def _wall(cmd: list[str], repeats: int, env: dict | None = None) -> list[float]:
    return [t for t, _ in _timed_runs(cmd, repeats, env)]


def _timed_runs(cmd: list[str], repeats: int, env: dict | None = None) -> list[tuple[float, float]]:
    """(wall, CPU) seconds of ``repeats`` runs of ``cmd``; CPU is the child's user + system time (all its threads),
    which the other jobs of a loaded machine disturb less than the wall."""
    out = []
    for _ in range(repeats):
        before = os.times()
        t = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tempfile.gettempdir(),
                       env=env)
        wall = time.perf_counter() - t
        after = os.times()
        out.append((wall, after.children_user + after.children_system - before.children_user
                     - before.children_system))
    return out


def _slowest_imports(cmd: list[str], k: int = 5, env: dict | None = None) -> list[list]:
    """The ``k`` modules with the largest cumulative import time (microseconds) under ``-X importtime``."""
    res = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], capture_output=True, text=True,
                         cwd=tempfile.gettempdir(), env=env)
    rows = []
    for line in res.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cum, name = (x.strip() for x in line[len("import time:"):].split("|"))
            if cum.isdigit():
                rows.append([name.strip(), int(cum)])
    return sorted(rows, key=lambda r: -r[1])[:k]


def _startup_env(pycache: Path, src: Path | None = None) -> dict:
    """The environment of the start-up runs: bytecode cached in ``pycache`` (as an installed package has it: pip
    compiles at install), whatever ``PYTHONDONTWRITEBYTECODE`` says here (set, it recompiles ubench's ~60 modules
    on every run: ~0.1 s); ``src``: a directory holding another ubench (the before column)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    return env


def _installed_python(tmp: Path) -> Path | None:
    """An interpreter that runs ubench as the README's ``pip install .`` leaves it: a virtual environment holding
    ubench built as a wheel from this checkout and unpacked into its site-packages, bytecode compiled as pip
    compiles it, and this interpreter's site-packages directories appended as plain paths for the dependencies
    (a plain path line of a ``.pth`` file runs no other ``.pth`` file: no development install's import hook, such
    as setuptools' editable finder, which alone costs ~20 ms of every start). None when no wheel can be built."""
    import glob
    import zipfile

    wheels = tmp / "wheel"
    for isolation in (["--no-build-isolation"], []):
        built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, "-w",
                                str(wheels), str(ROOT)], capture_output=True, text=True)
        if built.returncode == 0:
            break
    found = glob.glob(str(wheels / "ubench-*.whl"))
    if not found:
        print(f"no wheel of ubench could be built, so no start-up row of the installed package:\n{built.stderr}")
        return None
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    target = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                 capture_output=True, text=True, check=True).stdout.strip())
    with zipfile.ZipFile(found[0]) as z:
        z.extractall(target)
    # every site directory this interpreter has, also those a .pth file added (a thin venv over shared packages)
    deps = [d for d in sys.path if Path(d).name in ("site-packages", "dist-packages") and Path(d).is_dir()]
    (target / "ubench_bench_deps.pth").write_text("".join(f"{d}\n" for d in deps))
    subprocess.run([str(python), "-m", "compileall", "-q", str(target / "ubench")], check=True,
                   stdout=subprocess.DEVNULL)
    return python


def _instructions(cmd: list[str], env: dict) -> int | None:
    """Instructions the process executes (callgrind's ``I refs``): a count the other jobs of a loaded machine do
    not change, unlike a time (valgrind runs it ~40x slower; numpy then takes its AVX2 code paths, the same for
    both versions). None without valgrind."""
    import re
    import shutil

    if shutil.which("valgrind") is None:
        return None
    res = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *cmd],
                         capture_output=True, text=True, cwd=tempfile.gettempdir(), env=env)
    found = re.search(r"I\s+refs:\s+([\d,]+)", res.stderr)
    return int(found.group(1).replace(",", "")) if found else None


def bench_startup(repeats: int, baseline: Path | None = None, instructions: bool = False
                  ) -> tuple[list[dict], list[dict]]:
    """Whole-process wall and CPU of the start-up commands, bytecode cached; with ``baseline`` the same runs of
    that ubench interleaved (the before column). ``score --no-intervals`` shows the share of the bootstrap
    intervals (issue #26's, on by default)."""
    cases = (("ubench --help", ["--help"], 0.3),
             ("ubench score examples/digits_deep_ensemble.h5 --json", ["score", str(EXAMPLE), "--json"], 0.5),
             ("ubench score examples/digits_deep_ensemble.h5 --json --no-intervals",
              ["score", str(EXAMPLE), "--json", "--no-intervals"], None))
    pycache = Path(tempfile.mkdtemp(prefix="ubench-pycache-"))
    # name -> (interpreter, environment): this checkout's development install, the README's ``pip install .`` of
    # it (the targets' row: what a newcomer runs) and, with ``baseline``, an earlier version (the before column)
    pythons = {"ubench": (sys.executable, _startup_env(pycache / "new"))}
    installed = _installed_python(pycache / "installed")
    if installed is not None:
        pythons["installed"] = (str(installed), {k: v for k, v in os.environ.items()
                                                 if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")})
    if baseline is not None:
        pythons["baseline"] = (sys.executable, _startup_env(pycache / "old", baseline))
    rows, summary = [], []
    for what, args, target in cases:
        cmds = {k: [py, "-m", "ubench.cli", *args] for k, (py, _) in pythons.items()}
        runs: dict[str, list[tuple[float, float]]] = {k: [] for k in pythons}
        for k, (_, env) in pythons.items():
            _wall(cmds[k], 1, env)  # compile the bytecode, warm the file cache
        for _ in range(repeats):  # interleaved: each version's runs beside the others'
            for k, (_, env) in pythons.items():
                runs[k] += _timed_runs(cmds[k], 1, env)
        row = {"what": "start-up", "command": what, "bytecode": "cached (PYTHONPYCACHEPREFIX; the installed copy "
               "compiled at install)"}
        for k, r in runs.items():
            key = "" if k == "ubench" else f"{k}_"
            row.update({f"{key}wall_s": [round(t, 3) for t, _ in r],
                        f"{key}median_s": round(statistics.median(t for t, _ in r), 3),
                        f"{key}cpu_median_s": round(statistics.median(c for _, c in r), 3)})
        if instructions:
            for k, (_, env) in pythons.items():
                row[f"{'' if k == 'ubench' else k + '_'}instructions"] = _instructions(cmds[k], env)
        row["slowest_imports_us"] = _slowest_imports(cmds["ubench"], env=pythons["ubench"][1])
        rows.append(row)
        print(row)
        # the target is the README's install; the development install (setuptools' editable finder, PYTHONPATH
        # for the baseline) is the before/after comparison
        med = row.get("installed_median_s", row["median_s"])
        how = "installed as `pip install .`" if "installed_median_s" in row else "development install"
        before = f"; development install {row['median_s']:.2f} s" if "installed_median_s" in row else ""
        before += f" (before: {row['baseline_median_s']:.2f} s)" if baseline is not None else ""
        if row.get("instructions") and row.get("baseline_instructions"):
            ratio = row["instructions"] / row["baseline_instructions"] - 1
            before += (f"; {row['instructions'] / 1e9:.2f} G instructions, before "
                       f"{row['baseline_instructions'] / 1e9:.2f} G ({ratio:+.1%})")
        cpu = row.get("installed_cpu_median_s", row["cpu_median_s"])
        summary.append({"what": f"start-up: `{what}`", "workload": f"whole process, {how}, median of {repeats}, "
                        "bytecode cached", "result": f"{med:.2f} s wall, {cpu:.2f} s CPU{before}",
                        "target": "none (the intervals' share)" if target is None else f"<= {target} s (idle machine)",
                        "met": None if target is None else med <= target})
    return rows, summary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", type=Path, default=None, help="directory to keep the archives in (reused if present)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--startup-repeats", type=int, default=10)
    ap.add_argument("--protocol", default="pitfalls")
    ap.add_argument("--baseline-src", type=Path, default=None,
                    help="directory holding an earlier ubench package (DIR/ubench) to measure the before column")
    ap.add_argument("--no-imagenet", action="store_true", help="skip the 1 GB ImageNet-shaped archive")
    ap.add_argument("--startup-only", action="store_true",
                    help="only the start-up rows (3.), written to --out-dir (default: a temporary directory): a quick "
                         "check that leaves bench/results/bench_score.json as the full run wrote it")
    ap.add_argument("--instructions", action="store_true",
                    help="also count each start-up command's instructions under valgrind (load-independent; slow)")
    ap.add_argument("--out-dir", default=None)
    args = ap.parse_args()
    rec = Recorder(__file__, "h5py")
    if args.startup_only:
        rows, summary = bench_startup(args.startup_repeats, args.baseline_src, args.instructions)
        rec.write(rows, summary, settings={"startup_only": True, "baseline_src": None if args.baseline_src is None
                                           else str(args.baseline_src)},
                  out_dir=args.out_dir or tempfile.mkdtemp(prefix="bench-score-"))
        return
    tmp = args.keep or Path(tempfile.mkdtemp())
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "bench_score.h5"
    if not path.exists():
        t = time.perf_counter()
        build(path)
        print(f"built {path} ({path.stat().st_size / 2**20:.0f} MiB) in {time.perf_counter() - t:.1f} s")
    cmd = [sys.executable, "-m", "ubench.cli", "score", str(path), "--json", "--protocol", args.protocol]
    times = _wall(cmd, args.repeats)
    print(f"ubench score --json --protocol {args.protocol}: wall " + ", ".join(f"{x:.2f}" for x in times)
          + f" s (best {min(times):.2f} s)")
    layout = "uncompressed, the writer's default chunks"
    rows = [{"what": "end to end", "protocol": args.protocol,
             "archive": "M=20; test, ood and 5 shift splits of 10,000 x 100 float32", "layout": layout,
             "wall_s": [round(x, 2) for x in times], "best_s": round(min(times), 2),
             "median_s": round(statistics.median(times), 2)}]
    summary = [{"what": "`ubench score` end to end", "workload": "M = 20, 7 splits of 10,000 x 100",
                "result": f"{min(times):.2f}-{max(times):.2f} s over {len(times)} runs, start-up included",
                "target": "< 5 s", "met": statistics.median(times) < 5}]
    if not args.no_imagenet:
        r, s = bench_imagenet(tmp, args.repeats, args.baseline_src)
        rows += r
        summary += s
    r, s = bench_startup(args.startup_repeats, args.baseline_src, args.instructions)
    rows += r
    summary += s
    rec.write(rows, summary, settings={"repeats": args.repeats, "protocol": args.protocol,
                                       "baseline_src": None if args.baseline_src is None else str(args.baseline_src)},
              out_dir=args.out_dir)


if __name__ == "__main__":
    main()
