# SPDX-License-Identifier: MIT
"""Issue #13 item 7: ONNX Runtime against PyTorch eager and ``torch.compile`` on the papers' small networks, side
by side in one run, with ``ubench latency``'s own harness (``ubench.edge.latency.measure``).

Networks (untrained: latency does not depend on the weights): the digits MLP (1x8x8), LeNet (1x28x28) and
ResNet-20 (3x32x32), 10 classes, one member each, exported by ``ubench.edge.export.export_member``; batch 1 and
128; the same seeded inputs, warm-up discarded, ``--threads`` threads for every backend. The timer's own cost
per call is measured and reported (not subtracted).

Ensembles (issue #13 items 3-4): a digits deep ensemble of 3 members (``produce_archive(..., save_models=True)``,
20 epochs, the full digits split) timed with ONNX Runtime on 1 thread at batch 1 and 128, the members one after
another (``sequential``) beside one fused graph (``fused``: the members' subgraphs side by side, output M x B x
C), iterations alternating; the harness's own cost: the timer's resolution per call and what an empty call of
ONNX Runtime costs (``call_overhead_us``, paid M times sequentially and once fused). And one "what fits" answer,
``--latency-budget 0.03 --memory-budget 4G`` at batch 1, for the deep ensemble and for MC dropout (10 members
sampled inside one graph): how many members fit, and their CLL and DEE (against the deep ensemble) from the
archives' member curves.

    python bench/bench_edge.py [--iters 200] [--threads 1]
    python bench/bench_edge.py --device cuda     # on a GPU machine

Writes bench/results/bench_edge.json. With ``--device cuda`` (bench/results/bench_edge_cuda.json) the same networks
run on the GPU with torch eager (fp32 and fp16) and ``torch.compile`` (fp32) (and ONNX Runtime's CUDA provider
where the installed onnxruntime has one), host to host (copy in, run, copy back), beside ONNX Runtime on ``--threads`` CPU
threads of the same machine; the ensembles are timed with torch on the GPU, sequential against stacked in one
module, and the what-fits answer (an edge-device question) is left to the CPU run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import Recorder  # noqa: E402

NETWORKS = {"mlp": (1, 8, 8), "lenet": (1, 28, 28), "resnet20": (3, 32, 32)}
BACKENDS = ("onnxruntime", "torch", "torch-compile")


def contenders(device: str) -> list[tuple[str, str, str, str]]:
    """(label, backend, device, precision) timed per network: the CPU set, or ONNX Runtime on the CPU as the
    baseline beside the GPU contenders."""
    if device == "cpu":
        return [(b, b, "cpu", "fp32") for b in BACKENDS]
    out = [("onnxruntime", "onnxruntime", "cpu", "fp32")]
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        out.append(("onnxruntime cuda", "onnxruntime", device, "fp32"))
    # torch.compile in fp32 only: each compile costs tens of seconds of a short GPU lease
    return out + [("torch cuda fp32", "torch", device, "fp32"), ("torch cuda fp16", "torch", device, "fp16"),
                  ("torch-compile cuda fp32", "torch-compile", device, "fp32")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda to time the torch backends on the GPU")
    args = ap.parse_args(argv)

    import torch

    from ubench.edge.export import export_member, write_models_json
    from ubench.edge.latency import LatencyError, load_models, measure
    from ubench.producers.models import build_model

    rec = Recorder(__file__, "onnxruntime", "onnx", name="bench_edge" if args.device == "cpu" else "bench_edge_cuda",
                   note=None if args.device == "cpu" else "GPU machine, lent for this run; see load")
    rows, summary = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name, shape in NETWORKS.items():
            torch.manual_seed(0)
            net = build_model(name, shape, 10, mean=0.5, std=0.25)
            d = Path(tmp) / name
            entry = export_member(net, shape, d, 0)
            archive = d / "none.h5"
            archive.write_bytes(b"")
            write_models_json(d, archive=archive, method="bench", model=name, input_shape=shape, n_classes=10,
                              mean=0.5, std=0.25, dropout="none", dropout_rate=0.0, members=[entry])
            models = load_models(d)
            by_backend = {}
            for backend, kind, device, precision in contenders(args.device):
                try:
                    r = measure(models, backend=kind, batch_sizes=(1, 128), warmup=args.warmup,
                                iters=args.iters, threads=args.threads, device=device, precision=precision,
                                fused=False)
                except LatencyError as exc:
                    rows.append({"network": name, "backend": backend, "error": str(exc)})
                    print(f"{name:9s} {backend:14s} {exc}", flush=True)
                    continue
                by_backend[backend] = r
                for b in r["batches"]:
                    rows.append({"network": name, "backend": backend, "device": r["device_name"],
                                 "precision": precision, "mode": "one member", "members": 1,
                                 "batch_size": b["batch_size"],
                                 "p50_ms": round(b["p50_ms"], 4), "p95_ms": round(b["p95_ms"], 4),
                                 "mean_ms": round(b["mean_ms"], 4), "throughput_per_s": round(b["throughput_per_s"]),
                                 "threads": args.threads, "timer_overhead_us": round(r["timer_overhead_us"], 3),
                                 "parameters": r["parameters"], "model_bytes": r["model_bytes"],
                                 "device_peak_bytes": r.get("device_peak_bytes")})
                    print(f"{name:9s} {backend:14s} batch {b['batch_size']:4d}: p50 {b['p50_ms']:.4f} ms, "
                          f"{b['throughput_per_s']:.0f}/s", flush=True)
            if "onnxruntime" in by_backend:
                base = {b["batch_size"]: b["p50_ms"] for b in by_backend["onnxruntime"]["batches"]}
                parts = []
                for backend, r in by_backend.items():
                    if backend == "onnxruntime":
                        continue
                    for b in r["batches"]:
                        parts.append(f"{backend} b{b['batch_size']}: {b['p50_ms'] / base[b['batch_size']]:.3g}x")
                gpu = "" if args.device == "cpu" else " (ORT on the CPU; the others on the GPU, host to host)"
                summary.append({"what": f"{name}: ONNX Runtime p50 latency vs torch eager / torch.compile{gpu}",
                                "workload": f"batch 1 and 128, {args.threads} thread(s), {args.iters} iterations",
                                "result": f"ORT b1 {base[1]:.3f} ms, b128 {base[128]:.3f} ms; others/ORT: "
                                          + ", ".join(parts), "target": "measured side by side", "met": None})
        if args.device == "cpu":
            ensemble_rows(Path(tmp), args, rows, summary)
        else:
            gpu_ensemble_rows(Path(tmp), args, rows, summary)
    rec.write(rows, summary, settings=vars(args))
    return 0


BUDGET_MS, BUDGET_MEMORY = 0.03, "4G"


def _curves(archive: Path, ensemble: Path):
    """CLL per number of members of ``archive`` and its DEE curve against the deep ensemble ``ensemble``."""
    from ubench.scoring.dee import DEE_REFERENCE_SETTINGS, dee_between
    from ubench.scoring.protocols import Protocol
    from ubench.scoring.score import score_archive

    protocol = Protocol.preset("pitfalls").replace(member_curves=True)
    method = score_archive(archive, protocol=protocol)
    ens = score_archive(ensemble, protocol=protocol.replace(**DEE_REFERENCE_SETTINGS))
    d = dee_between(method, ens)
    return [p["cll"] for p in d["curve"]], [p["dee"] for p in d["curve"]]


def ensemble_rows(tmp: Path, args, rows: list, summary: list) -> None:
    """The deep-ensemble rows (sequential against fused, harness overhead) and the what-fits answers."""
    import torch

    from ubench.edge.latency import load_models, measure, what_fits
    from ubench.producers.archive_run import produce_archive
    from ubench.producers.task import build_task
    from ubench.producers.torch_trainer import RunSettings
    from ubench.scoring.sandbox import parse_size

    torch.set_num_threads(args.threads)
    task = build_task("digits")
    archives = {}
    for method, members, hyper in (("deep_ensemble", 3, {}), ("mc_dropout", 10, {})):
        out = produce_archive(method, task, tmp / f"{method}.h5", threads=args.threads, hyper=hyper,
                              settings=RunSettings(model="mlp", members=members, seed=0), save_models=True)
        archives[method] = out
    fits = []
    for method, out in archives.items():
        models = load_models(out.with_name(out.name + ".models"))
        r = measure(models, backend="onnxruntime", batch_sizes=(1, 128), warmup=args.warmup, iters=args.iters,
                    threads=args.threads, fused=True)
        fused = {b["batch_size"]: b for b in r["fused"]["batches"]}
        for b in r["batches"]:
            for mode, row in (("sequential", b), ("fused", fused[b["batch_size"]])):
                rows.append({"network": f"mlp {method}", "backend": "onnxruntime", "mode": mode,
                             "members": r["n_members"], "batch_size": b["batch_size"],
                             "p50_ms": round(row["p50_ms"], 4), "p95_ms": round(row["p95_ms"], 4),
                             "mean_ms": round(row["mean_ms"], 4), "throughput_per_s": round(row["throughput_per_s"]),
                             "threads": args.threads, "timer_overhead_us": round(r["timer_overhead_us"], 3),
                             "call_overhead_us": round(r["call_overhead_us"], 2),
                             "parameters": r["parameters"], "model_bytes": r["model_bytes"]})
                print(f"{method:14s} {mode:10s} batch {b['batch_size']:4d}: p50 {row['p50_ms']:.4f} ms, "
                      f"{row['throughput_per_s']:.0f}/s", flush=True)
        if method == "deep_ensemble":
            b1, f1 = r["batches"][0], fused[1]
            b128, f128 = r["batches"][1], fused[128]
            summary.append({
                "what": "digits deep ensemble (3 MLPs), ONNX Runtime: members one after another vs one fused graph",
                "workload": f"batch 1 and 128, {args.threads} thread(s), {args.iters} iterations alternating",
                "result": f"b1 p50 {b1['p50_ms']:.4f} ms sequential, {f1['p50_ms']:.4f} ms fused "
                          f"({b1['p50_ms'] / f1['p50_ms']:.2f}x); b128 {b128['throughput_per_s']:.0f} vs "
                          f"{f128['throughput_per_s']:.0f} samples/s ({b128['p50_ms'] / f128['p50_ms']:.2f}x); "
                          f"an empty ORT call {r['call_overhead_us']:.1f} us, timer {r['timer_overhead_us']:.3f} us",
                "target": "measured side by side", "met": None})
        cll, dee = _curves(out, archives["deep_ensemble"])
        w = what_fits(r, cll, latency_budget_ms=BUDGET_MS, memory_budget_bytes=parse_size(BUDGET_MEMORY))
        k = w["members"]
        fits.append(f"{method}: {k} of {r['n_members']} ({w['limited_by']}, {w['per_member_ms'] * 1e3:.1f} us per "
                    f"member), CLL {'-' if k == 0 else format(cll[k - 1], '.4f')}, DEE "
                    f"{'-' if k == 0 else format(dee[k - 1], '.2f')}")
        rows.append({"network": f"mlp {method}", "backend": "onnxruntime", "mode": "what fits", "members": k,
                     "batch_size": 1, "threads": args.threads,
                     "what_fits": f"{BUDGET_MS} ms, {BUDGET_MEMORY}: {k} ({w['limited_by']})",
                     "cll": None if k == 0 else round(cll[k - 1], 4), "dee": None if k == 0 else round(dee[k - 1], 3)})
    summary.append({"what": f"what fits in {BUDGET_MS} ms and {BUDGET_MEMORY} at batch 1 (ONNX Runtime, "
                            f"{args.threads} thread)",
                    "workload": "digits, members' CLL/DEE from the archives' member curves (DEE against the "
                                "3-member deep ensemble)",
                    "result": "; ".join(fits), "target": "measured", "met": None})


def gpu_ensemble_rows(tmp: Path, args, rows: list, summary: list) -> None:
    """The digits deep ensemble (3 MLPs, trained on the GPU) with torch and torch.compile on the GPU: the members
    one after another against the members stacked in one module (one call), batch 1 and 128, fp32. Timed by
    ``ubench latency --json`` in its own process, as a user runs it, without the ``CUBLAS_WORKSPACE_CONFIG`` that
    the training set (``configure_torch``: cuBLAS's deterministic workspace, ``:4096:8``). With it the same command
    took 1.36 ms at batch 1 against 0.405 ms without (H200, 2026-11-26): timed in the training process, or in a
    child that inherits the variable, the rows measured the workspace setting, not the ensemble."""
    import json
    import os
    import subprocess

    from ubench.producers.archive_run import produce_archive
    from ubench.producers.task import build_task
    from ubench.producers.torch_trainer import RunSettings

    task = build_task("digits")
    out = produce_archive("deep_ensemble", task, tmp / "deep_ensemble.h5", threads=args.threads,
                          settings=RunSettings(model="mlp", members=3, seed=0, device=args.device), save_models=True)
    models_dir = out.with_name(out.name + ".models")
    parts = []
    for backend in ("torch", "torch-compile"):
        cmd = [sys.executable, "-m", "ubench.cli", "latency", str(models_dir), "--backend", backend, "--device",
               args.device, "--batch-size", "1", "--batch-size", "128", "--warmup", str(args.warmup), "--iters",
               str(args.iters), "--threads", str(args.threads), "--json"]
        env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
        done = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
        r = json.loads(done.stdout)
        fused = {b["batch_size"]: b for b in r["fused"]["batches"]}
        for b in r["batches"]:
            for mode, row in (("sequential", b), ("fused", fused[b["batch_size"]])):
                rows.append({"network": "mlp deep_ensemble", "backend": f"{backend} cuda fp32",
                             "device": r["device_name"], "precision": "fp32", "mode": mode,
                             "members": r["n_members"], "batch_size": b["batch_size"],
                             "p50_ms": round(row["p50_ms"], 4), "p95_ms": round(row["p95_ms"], 4),
                             "mean_ms": round(row["mean_ms"], 4), "throughput_per_s": round(row["throughput_per_s"]),
                             "threads": args.threads, "timer_overhead_us": round(r["timer_overhead_us"], 3),
                             "call_overhead_us": round(r["call_overhead_us"], 2),
                             "parameters": r["parameters"], "model_bytes": r["model_bytes"],
                             "device_peak_bytes": r.get("device_peak_bytes")})
                print(f"deep_ensemble {backend:14s} {mode:10s} batch {b['batch_size']:4d}: p50 "
                      f"{row['p50_ms']:.4f} ms", flush=True)
        parts.append(f"{backend}: b1 p50 {r['batches'][0]['p50_ms']:.4f} ms sequential, {fused[1]['p50_ms']:.4f} ms "
                     f"stacked ({r['batches'][0]['p50_ms'] / fused[1]['p50_ms']:.2f}x); b128 "
                     f"{r['batches'][1]['p50_ms'] / fused[128]['p50_ms']:.2f}x; an empty host-to-host call "
                     f"{r['call_overhead_us']:.1f} us")
    summary.append({"what": f"digits deep ensemble (3 MLPs) on {r['device_name']}: members one after another vs "
                            "stacked in one module (`ubench latency --device cuda`)",
                    "workload": f"batch 1 and 128, {args.iters} iterations alternating, host to host",
                    "result": "; ".join(parts), "target": "measured side by side", "met": None})


if __name__ == "__main__":
    raise SystemExit(main())
