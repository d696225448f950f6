# SPDX-License-Identifier: MIT
"""Regenerate the README's Performance table, its Fashion-MNIST table and bench/RESULTS.md from bench/results/*.json.

Every figure comes from a JSON file a bench script wrote (``bench/_results.py``); nothing here is typed by hand
except the description of each script's method. Each table row names the machine, the load and the date.

    python bench/render.py           # rewrite README.md (between the bench markers) and bench/RESULTS.md
    python bench/render.py --check   # exit 1 when either differs from what the JSON gives (CI)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS_DIR = BENCH / "results"
PERF = ("<!-- bench:performance:start -->", "<!-- bench:performance:end -->")
FASHION = ("<!-- bench:fashion-mnist:start -->", "<!-- bench:fashion-mnist:end -->")

#: Scripts in the order they are rendered, with the command that produced their JSON and what they measure.
SCRIPTS = {
    "bench_metrics": ("python bench/bench_metrics.py",
                      "The metrics core against the libraries users would otherwise pick (scikit-learn, "
                      "torchmetrics, netcal, a hand-written float32 NumPy baseline), the same arrays for everyone; "
                      "best of `--repeat` calls, validation included; peak extra memory by tracemalloc."),
    "bench_protocol": ("python bench/bench_protocol.py --pitfalls /tmp/pitfalls-ensembles",
                       "The calibration protocol against the peers users run, the same work, interleaved in one "
                       "process (ubench, peer, ubench, ...; ratios are medians of the per-pair ratios): torch "
                       "L-BFGS run to convergence (on T without line search, on log T with strong Wolfe; "
                       "`tolerance_grad` 1e-7, both T's in the JSON) and with the temperature_scaling repository's "
                       "settings (not converged); the Pitfalls repository's own CV-TS + CLL pipeline (`metrics.metrics_kfold`, "
                       "Nelder-Mead `ts`, `KFold(2, shuffle)` x 5) run twice, as each row names: on the log of the "
                       "members' mean probability (as its notebooks run it) and after the `logsumexp` of the members' "
                       "log-probabilities (`ens/ens-deepens.py`); and its "
                       "per-prefix DEE sweep, run from a checkout of bayesgroup/pytorch-ensembles. torch threads "
                       "as in the JSON's settings."),
    "bench_score": ("python bench/bench_score.py --repeats 3 --keep /tmp/ubench-bench --baseline-src DIR",
                    "`ubench score ARCHIVE --json` as a real subprocess (start-up included) on an archive from "
                    "`ArchiveWriter`; an ImageNet-shaped archive (M = 5, N = 50,000, C = 1,000) scored in a fresh "
                    "process against the physical limit measured in the same run (one read of the split along "
                    "whole chunks plus one float32 pass), with peak RSS, and an earlier ubench (`--baseline-src`) "
                    "as the before column; start-up of `ubench --help` and of scoring the bundled example."),
    "bench_intervals": ("python bench/bench_intervals.py --repeats 3 --baseline-src DIR",
                        "Bootstrap intervals (issue #26): `ubench score --json` (1,000 replicates) against "
                        "`--no-intervals` as real subprocesses, calls alternating, medians, with an earlier ubench "
                        "(`--baseline-src`) in the same rounds, and the CPU seconds of the resampling alone on one "
                        "thread (fresh processes, one BLAS thread); the rank intervals of a "
                        "100-row board from its rows' per-sample CLL columns; and `scipy.stats.bootstrap` "
                        "(percentile) on the same statistics, compared per replicate (scipy runs fewer resamples "
                        "where each costs a protocol refit)."),
    "bench_memory": ("python bench/bench_memory.py --members 5 50 200 --imagenet-c --beyond --keep /tmp/ubench-bench",
                     "Sandboxed validation and scoring: peak RSS of the child (its own `VmHWM`) for M = 5, 50, 200 and "
                     "an ImageNet-C-shaped archive (21 splits of 50,000 x 1,000), the streamed report against the "
                     "in-memory path, and a 4 GB split scored in passes in a 2 GiB sandbox against the same split "
                     "in memory."),
    "bench_scale": ("python bench/bench_scale.py --one-archive --keep /tmp/ubench-bench",
                    "Leaderboard throughput on an already-started Dask `LocalCluster` (processes, 1 thread per "
                    "worker), a fresh board each run; and one ImageNet-C-shaped archive (21 splits of 50,000 x "
                    "1,000) scored in one process against its splits spread over 2 workers (`run_score(scheduler=)`)."),
    "bench_archive_storage": ("python bench/bench_archive_storage.py",
                              "Chunking and compression of `probs`: file size, write (`finalize_partial`), "
                              "validate, stream in default and 256-row blocks, one member; best of `--repeat`, "
                              "warm page cache."),
    "bench_hmc": ("python bench/bench_hmc.py --iterations 10 --repeats 3",
                  "HMC iterations per second on the digits MLP (full batch, the same step size and L for all): "
                  "ubench's torch HMC (`functional_call` on a flat vector, L gradients per iteration; eager and "
                  "`compile=True`), hamiltorch's `sample_model` loop re-implemented step for step (L + 1 gradients "
                  "and two forward passes per iteration), BlackJAX's `hmc` (jit, compile excluded); and one "
                  "SGD epoch of the torch and the JAX producer (compile excluded). Interleaved, best of repeats."),
    "bench_hmc_cuda": ("python bench/bench_hmc.py --device cuda --iterations 10 --repeats 3",
                       "The same contenders and SGD epochs as `bench_hmc.py` on a CUDA GPU: the model, the data and "
                       "every torch contender on the GPU (ubench's momenta drawn from its CPU generator and moved "
                       "there, the loop's from a generator on the GPU, as hamiltorch draws), BlackJAX and the JAX "
                       "producer on JAX's default backend (`settings.jax_backend`) with full float32 matrix products "
                       "like torch's; every timed region ends with `torch.cuda.synchronize()` or "
                       "`block_until_ready`. The verdict is taken in wall time (the host's CPU time includes the "
                       "busy-wait of each synchronisation); the matrix-product floor is timed on the GPU in wall "
                       "time, synchronised. A contender that cannot run there is skipped with its reason "
                       "(`settings.skipped`)."),
    "bench_hmc_ess": ("python bench/bench_hmc.py --ess --warmup 500 --draws 500",
                      "Effective sample size per second (issue #30) on the digits softmax regression and the digits "
                      "MLP (the `hmc` producer's posterior): one chain each of torch HMC with the URSABench preset "
                      "(scalar mass, fixed trajectory), torch HMC with the defaults (Stan's windowed diagonal mass, "
                      "jittered length), torch NUTS and BlackJAX NUTS (`window_adaptation`, jit-compiled ahead of "
                      "the clock); bulk ESS and split-R-hat (`ubench.metrics.diagnostics`) of the log-posterior and "
                      "of p(label) on 100 probe images, per second of warm-up plus sampling and per 1000 gradients."),
    "bench_hmc_default": ("python bench/bench_hmc.py --default-run",
                          "`ubench produce hmc --dataset digits` with the producer's defaults (one chain of 400 "
                          "members, torch one thread), timed end to end, and the archive's own diagnostics judged "
                          "by `compare --reference-posterior`'s bar (issue #30): split-R-hat <= 1.05 and bulk ESS "
                          ">= 100 on the log-posterior and on every one of the 100 probe samples' p(label)."),
    "bench_peers": ("python bench/bench_peers.py",
                    "The newest peers' metrics (issue #17): ubench against torch-uncertainty 0.13 (and relplot for "
                    "smooth ECE) on the same 200,000 x 100 float32 arrays, calls alternating, best of `--repeat`, "
                    "validation included, torch and ubench on the same threads; and `score --calibrators all` "
                    "against `score` on the bundled example."),
    "bench_edge": ("python bench/bench_edge.py --iters 100",
                   "ONNX Runtime against PyTorch eager and `torch.compile` on the MLP, LeNet and ResNet-20 at batch 1 "
                   "and 128 with `ubench latency`'s harness (one member, untrained weights, pinned threads); a "
                   "trained digits deep ensemble (3 MLPs) and MC dropout (10 samples in one graph) with ONNX "
                   "Runtime, members one after another against one fused graph, with the harness's own costs "
                   "(timer per call, an empty ORT call); and what fits in 0.03 ms and 4G at batch 1 with its "
                   "CLL/DEE."),
    "bench_edge_cuda": ("python bench/bench_edge.py --device cuda --iters 100",
                        "The same networks on a lent GPU (the device tool's NVIDIA H100/H200): torch eager (fp32, fp16) "
                        "and `torch.compile` (fp32) on the GPU (ONNX Runtime's CUDA provider where installed), "
                        "timed host to host (copy in, run, copy back), beside ONNX Runtime on the CPU threads of "
                        "the same machine; a digits deep ensemble (3 MLPs) trained on the GPU, members one after "
                        "another against stacked in one module. TensorRT: see the README's edge section."),
    "bench_mutation": ("python bench/bench_mutation.py",
                       "Mutation testing (mutmut, not in CI), one row per module: mutants made, judged equivalent "
                       "(listed with why in the script's EQUIVALENT), killed, survived, reached by no selected test, "
                       "timed out; score = killed / non-equivalent; `survivors` names the mutants left "
                       "(`mutmut show NAME` in the shard's workdir). Sharded by module and incremental: a module "
                       "whose source is unchanged keeps its row; each row has its own date and load; `minutes` is the "
                       "module's mutant testing (mutmut's time per mutant, summed, over the processes run at once), "
                       "without the shard's shared stats and clean runs."),
    "bench_serve": ("python bench/bench_serve.py",
                    "`ubench serve` on loopback: uploads accepted per second with 8 clients while scoring runs, POST "
                    "and GET latency, and the time from an upload to its leaderboard row, with 1 and 2 workers; "
                    "then the public board's latency (`GET /`, `GET /api/leaderboard`) at 10,000 scored rows "
                    "(filled through the store) with 8 keep-alive readers for 30 s while a ninth client uploads "
                    "the bundled examples, and the time of one full refresh of the board at that size."),
}
#: Row keys kept in a script's JSON but not shown in RESULTS.md (long lists: the JSON is where to read them).
HIDDEN_COLUMNS = {"bench_mutation": {"survivors"}}
FASHION_COLUMNS = (("method", "method"), ("members", "M"), ("accuracy", "accuracy"), ("nll", "NLL"), ("cll", "CLL"),
                   ("dee", "DEE"), ("ood_auroc_mnist", "OOD AUROC MNIST"), ("ood_auroc_notmnist", "OOD AUROC notMNIST"),
                   ("own_score", "own score"), ("ood_auroc_own_mnist", "own-score OOD AUROC MNIST"),
                   ("ood_auroc_own_notmnist", "own-score OOD AUROC notMNIST"), ("minutes", "minutes"))


def load_results(results_dir: Path = RESULTS_DIR) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(results_dir.glob("*.json"))}


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return ", ".join(_fmt(x) for x in v)
    if isinstance(v, dict):
        return "; ".join(f"{k} {_fmt(x)}" for k, x in v.items()) or "-"
    return str(v).replace("|", "\\|").replace("\n", " ")


def _gpu(m: dict) -> str:
    """``; GPU <name>, CUDA <version>`` when the run recorded a GPU, else nothing."""
    return f"; GPU {m['gpu']}, CUDA {_fmt(m.get('cuda'))}" if m.get("gpu") else ""


def _machine(doc: dict) -> str:
    m = doc.get("machine") or {}
    libs = ", ".join(f"{k} {m[k]}" for k in ("numpy", "scipy", "torch") if m.get(k))
    return (f"{m.get('cpu', 'unknown CPU')}, {_fmt(m.get('cores'))} cores, {_fmt(m.get('memory_gib'))} GiB{_gpu(m)}; "
            f"Python {_fmt(m.get('python'))}, {libs}")


def _first(v):
    """The 1-minute figure of a load average (a list), or the value itself."""
    return v[0] if isinstance(v, (list, tuple)) and v else v


def _load(doc: dict) -> str:
    ld = doc.get("load") or {}
    return f"load {_fmt(_first(ld.get('before')))} before, {_fmt(_first(ld.get('after')))} after"


def _stamp(doc: dict) -> str:
    m = doc.get("machine") or {}
    return (f"{str(doc.get('date', 'undated'))[:10]}; {_load(doc)}; {_fmt(m.get('cores'))}-core {m.get('cpu', '?')}"
            f"{_gpu(m)}")


def _label(stem: str, command: str) -> str:
    """How a results file is named in the tables: its script, ``<stem>.py``; for a second JSON of one script
    (``bench_hmc_cuda`` from ``bench_hmc.py --device cuda``) the script and the JSON."""
    script = next((Path(w).name for w in command.split() if w.endswith(".py")), f"{stem}.py")
    return f"`{script}`" if script == f"{stem}.py" else f"`{script}`, `{stem}.json`"


def _met(v) -> str:
    return {True: "met", False: "**not met**", None: "no target"}[v]


def render_performance(results: dict[str, dict]) -> str:
    lines = [PERF[0], "",
             "Generated by `python bench/render.py` from `bench/results/*.json`; methods and full tables in",
             "[`bench/RESULTS.md`](bench/RESULTS.md). The development machine is shared: read the load beside",
             "each figure (a load above the core count means other jobs competed for the CPU).", "",
             "| what (script) | workload | result | target | status | date; load; machine |", "|---|---|---|---|---|---|"]
    for stem, (command, _) in SCRIPTS.items():
        doc = results.get(stem)
        label = _label(stem, command)
        if doc is None:
            lines.append(f"| {label} | - | no results file: run `{command}` | - | not measured | - |")
            continue
        for s in doc.get("summary") or []:
            lines.append(f"| {_fmt(s['what'])} ({label}) | {_fmt(s['workload'])} | {_fmt(s['result'])} | "
                         f"{_fmt(s['target'])} | {_met(s['met'])} | {_stamp(doc)} |")
    lines += ["", PERF[1]]
    return "\n".join(lines)


def render_fashion(doc: dict) -> str:
    lines = [FASHION[0], "", "| " + " | ".join(h for _, h in FASHION_COLUMNS) + " |",
             "|" + "---|" * len(FASHION_COLUMNS)]
    for row in doc.get("rows") or []:
        lines.append("| " + " | ".join("< 1" if k == "dee" and row.get("dee_below_reference") else _fmt(row.get(k))
                                       for k, _ in FASHION_COLUMNS) + " |")
    lines += ["", f"(`bench/reproduce_fashion_mnist.py`, {_stamp(doc)}; generated by `bench/render.py`.)", "",
              FASHION[1]]
    return "\n".join(lines)


def render_results_md(results: dict[str, dict]) -> str:
    out = ["# ubench benchmark results", "",
           "Generated by `python bench/render.py` from `bench/results/*.json`: do not edit by hand; re-run the",
           "script named in each section and then `bench/render.py`. Every run records the machine, the load average",
           "(1-minute, before and after) and the date; the development machine is shared with other engineers'",
           "jobs, so compare figures only within one run.", ""]
    stems = list(SCRIPTS) + sorted(set(results) - set(SCRIPTS))
    for stem in stems:
        command, about = SCRIPTS.get(stem, (f"python bench/{stem}.py", ""))
        out += [f"## {_label(stem, command)}", ""]
        doc = results.get(stem)
        if doc is None:
            out += [f"No results file yet: run `{command}`.", ""]
            continue
        out += [f"`{command}`. {about}".rstrip(), "",
                f"Run {doc.get('date', 'undated')}; {_load(doc)} ({(doc.get('load') or {}).get('note', '')}); "
                f"machine: {_machine(doc)}.", ""]
        if doc.get("settings"):
            out += [f"Settings: {_fmt(doc['settings'])}.", ""]
        rows = doc.get("rows") or []
        if rows:
            hidden = HIDDEN_COLUMNS.get(stem, set())
            cols = [k for k in dict.fromkeys(k for r in rows for k in r) if k not in hidden]
            out += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
            out += ["| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |" for r in rows]
            out.append("")
        for s in doc.get("summary", []):
            out.append(f"- {_fmt(s['what'])}: {s['result']} (target {_fmt(s['target'])}: {_met(s['met'])}).")
        if doc.get("summary"):
            out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def _replace_between(text: str, markers: tuple[str, str], block: str, name: str) -> str:
    start, end = text.find(markers[0]), text.find(markers[1])
    if start == -1 or end == -1 or end < start:
        raise SystemExit(f"README.md: the markers {markers[0]} ... {markers[1]} ({name}) are missing")
    return text[:start] + block + text[end + len(markers[1]):]


def render_readme(readme: str, results: dict[str, dict]) -> str:
    readme = _replace_between(readme, PERF, render_performance(results), "performance table")
    if "reproduce_fashion_mnist" in results:  # without its JSON the table stays as it is
        readme = _replace_between(readme, FASHION, render_fashion(results["reproduce_fashion_mnist"]),
                                  "Fashion-MNIST table")
    return readme


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 when out of date")
    ap.add_argument("--root", type=Path, default=ROOT)
    args = ap.parse_args(argv)
    results = load_results(args.root / "bench" / "results")
    targets = {args.root / "README.md": render_readme((args.root / "README.md").read_text(), results),
               args.root / "bench" / "RESULTS.md": render_results_md(results)}
    stale = [p for p, text in targets.items() if not p.exists() or p.read_text() != text]
    if args.check:
        for p in stale:
            print(f"{p.relative_to(args.root)} is out of date: run python bench/render.py", file=sys.stderr)
        return 1 if stale else 0
    for p in stale:
        p.write_text(targets[p])
        print(f"wrote {p.relative_to(args.root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
