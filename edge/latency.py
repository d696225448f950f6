# SPDX-License-Identifier: MIT
"""The latency of an exported ensemble (URSABench's protocol: batch 1 by default, warm-up batches discarded, the
members run one after another and their times summed per batch), with ONNX Runtime, PyTorch eager or
``torch.compile``; TensorRT where a GPU and the ``tensorrt`` package exist. ``device="cuda"`` runs the torch
backends (fp32 or fp16) and ONNX Runtime (its CUDA execution provider, where the installed package has one) on the
GPU.

Every timed iteration runs all M members on the same batch (fresh seeded inputs of the task's shape in [0, 1]);
the ensemble latency is that iteration's wall time (``time.perf_counter_ns``). Reported per batch size: p50, p95,
mean and std in milliseconds, throughput (samples per second at the mean), the timer's own cost per call
(measured, not subtracted: it is ~0.1 µs against milliseconds), the threads the backend was pinned to, the peak
RSS of this process and the models' bytes. ``fused`` times the same members as one call (one ONNX graph holding
every member's subgraph, output M x B x C; the torch modules stacked in one module), alternating with the
sequential iterations; ``call_overhead_us`` is what one call of the backend costs when it computes nothing (an
``Identity`` graph), which the sequential ensemble pays M times per batch and the fused graph once: at batch 1 on
small networks that difference is most of what fusing saves. On a GPU every call is timed host to host: the batch
is copied in, the members run, the probabilities are copied back (which waits for the device), as an application
sees it; ``device_peak_bytes`` is torch's CUDA allocator peak (torch backends; it includes the cuBLAS workspace
torch allocates through it, about 32 MiB on an H200, so a 3-MLP ensemble shows 35 MiB). ``what_fits`` turns the batch-1 numbers and the archive's
CLL-against-members curve into the largest ensemble within a latency and a memory budget.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import resource
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["BACKENDS", "LatencyError", "fused_onnx", "load_models", "measure", "what_fits"]

BACKENDS = ("onnxruntime", "torch", "torch-compile", "tensorrt")


class LatencyError(Exception):
    """A models directory or backend that cannot be timed (the message says why)."""


@dataclass(frozen=True)
class Models:
    directory: Path
    doc: dict[str, Any]

    @property
    def members(self) -> list[dict[str, Any]]:
        return self.doc["members"]

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.doc["input_shape"])


def load_models(directory: str | Path) -> Models:
    """Read ``models.json`` and check every member's ONNX file against its recorded sha256."""
    directory = Path(directory)
    try:
        doc = json.loads((directory / "models.json").read_text())
    except (OSError, ValueError) as exc:
        raise LatencyError(f"{directory}: no readable models.json ({exc}); write one with "
                           "`ubench produce ... --save-models`") from None
    if not isinstance(doc, dict) or doc.get("models_schema") not in (1, 2):
        raise LatencyError(f"{directory}/models.json: models_schema "
                           f"{doc.get('models_schema') if isinstance(doc, dict) else None!r} is not one this ubench "
                           "reads (1 or 2)")
    if not doc.get("members"):
        raise LatencyError(f"{directory}/models.json lists no members")
    doc.setdefault("sampling", "none")  # schema 1 exported deterministic members only
    for m in doc["members"]:
        path = directory / m["onnx"]
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != m["onnx_sha256"]:
            raise LatencyError(f"{path}: missing or not the file models.json recorded (sha256 differs)")
    return Models(directory, doc)


def _check_device(device: str) -> None:
    if device == "cpu":
        return
    if device != "cuda" and not (device.startswith("cuda:") and device[5:].isdigit()):
        raise LatencyError(f"device {device!r}: choose cpu, cuda or cuda:N")
    try:
        import torch
    except ImportError:
        raise LatencyError(f"device {device}: needs torch with CUDA to see the GPU; torch is not installed") from None
    if not torch.cuda.is_available():
        raise LatencyError(f"device {device}: no CUDA device is visible here (torch.cuda.is_available() is False)")
    if torch.device(device).index is not None and torch.device(device).index >= torch.cuda.device_count():
        raise LatencyError(f"device {device}: only {torch.cuda.device_count()} CUDA device(s) here")


def _ort_providers(device: str) -> list:
    """ONNX Runtime's providers for ``device``: the CPU one, or the CUDA one (with the CPU one behind it for the
    nodes CUDA lacks); a package without the CUDA provider (plain ``onnxruntime``) is an error, not a silent CPU
    run."""
    import onnxruntime as ort

    if device == "cpu":
        return ["CPUExecutionProvider"]
    available = ort.get_available_providers()
    if "CUDAExecutionProvider" not in available:
        raise LatencyError(f"onnxruntime backend on {device}: this onnxruntime ({ort.__version__}) has no CUDA "
                           f"execution provider (it has {', '.join(available)}); install onnxruntime-gpu")
    index = 0 if device == "cuda" else int(device[5:])
    return [("CUDAExecutionProvider", {"device_id": index}), "CPUExecutionProvider"]


def _ort_session(source, threads: int, device: str):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    return ort.InferenceSession(source, opts, providers=_ort_providers(device))


def _onnxruntime_runners(models: Models, threads: int, precision: str, device: str = "cpu"):
    if precision != "fp32":
        raise LatencyError("onnxruntime backend: fp32 only (fp16 needs an fp16 graph; use torch or tensorrt)")
    sessions = [_ort_session(str(models.directory / m["onnx"]), threads, device) for m in models.members]
    return [lambda x, s=s: s.run(None, {"x": x})[0] for s in sessions]


def _torch_module(models: Models, member: dict[str, Any], device: str = "cpu", precision: str = "fp32"):
    import torch
    from torch import nn

    from ..producers.models import build_model

    doc = models.doc
    net = build_model(doc["model"], tuple(doc["input_shape"]), doc["n_classes"], mean=doc["normalisation"]["mean"],
                      std=doc["normalisation"]["std"], dropout=doc["dropout"], p=doc["dropout_rate"])
    if doc.get("dropout_before"):
        from ..producers.last_layer import insert_dropout

        insert_dropout(net, doc["dropout_before"], doc["dropout_rate"])
    with np.load(models.directory / member["weights"], allow_pickle=False) as w:
        state = {k: torch.from_numpy(np.array(w[k])) for k in w.files}
    net.load_state_dict(state)
    net = nn.Sequential(net, nn.Softmax(dim=-1)).eval()
    if doc["sampling"].endswith("in_graph"):  # the members sample dropout masks, as the ONNX graph does
        from ..producers.models import set_mc_dropout

        set_mc_dropout(net, True)
    return net.to(device=device, dtype=torch.float16 if precision == "fp16" else torch.float32)


def _torch_call(net, device: str, precision: str):
    """``x`` (NumPy, float32, host) -> probabilities (NumPy, float32, host) through ``net`` on ``device``: the copy
    in, the forward pass and the copy back (``.cpu()`` waits for the device), in inference mode."""
    import torch

    dtype = torch.float16 if precision == "fp16" else torch.float32

    def run(x):
        with torch.inference_mode():
            return net(torch.from_numpy(x).to(device=device, dtype=dtype)).float().cpu().numpy()
    return run


def _torch_runners(models: Models, threads: int, precision: str, compiled: bool, device: str = "cpu"):
    import torch

    if precision != "fp32" and device == "cpu":
        raise LatencyError("torch backends: fp32 only on the CPU (fp16 with --device cuda)")
    torch.set_num_threads(threads)
    nets = [_torch_module(models, m, device, precision) for m in models.members]
    runs = [_torch_call(n, device, precision) for n in nets]
    if compiled:
        try:
            runs = [_torch_call(torch.compile(n), device, precision) for n in nets]
            for run in runs:
                run(np.zeros((1, *models.input_shape), dtype=np.float32))
        except Exception as exc:  # torch.compile needs a C++ compiler on the CPU (Triton on a GPU)
            raise LatencyError(f"torch-compile backend: torch.compile failed ({type(exc).__name__}: "
                               f"{str(exc)[:200]})") from None
    return runs


def _runners(models: Models, backend: str, threads: int, precision: str, device: str = "cpu"):
    if backend == "onnxruntime":
        return _onnxruntime_runners(models, threads, precision, device)
    if backend in ("torch", "torch-compile"):
        return _torch_runners(models, threads, precision, backend == "torch-compile", device)
    if backend == "tensorrt":
        try:
            import tensorrt  # noqa: F401
        except ImportError:
            raise LatencyError("tensorrt backend: needs an NVIDIA GPU and the tensorrt package "
                               "(pip install 'ubench[edge-trt]'); neither is here") from None
        raise LatencyError("tensorrt backend: engines are built per batch size; call _tensorrt_runners")
    raise LatencyError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")


def _tensorrt_runners(models: Models, batch: int, precision: str, cache_dir: Path | None):
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        raise LatencyError("tensorrt backend: needs an NVIDIA GPU and the tensorrt package "
                           "(pip install 'ubench[edge-trt]'); neither is here") from None
    from .tensorrt_backend import tensorrt_runners

    try:
        return tensorrt_runners([models.directory / m["onnx"] for m in models.members], models.input_shape, batch,
                                precision, cache_dir or models.directory / "trt-cache")
    except RuntimeError as exc:
        raise LatencyError(f"tensorrt backend: {exc}") from None


def fused_onnx(models: Models) -> bytes:
    """One ONNX graph running every member on the same input: the members' graphs side by side (names prefixed
    ``m<i>_``, the input ``x`` shared), each output unsqueezed and concatenated into ``probs`` of shape M x B x C.
    Random nodes keep their seeds, so the fused graph draws what each member's own graph draws."""
    import onnx
    import onnx.compose
    from onnx import TensorProto, helper

    nodes, inits, outs, x_info, opset, ir = [], [], [], None, None, None
    axes = helper.make_tensor("fused_axes0", TensorProto.INT64, [1], [0])
    for i, m in enumerate(models.members):
        proto = onnx.compose.add_prefix(onnx.load(str(models.directory / m["onnx"])), f"m{i}_",
                                        rename_inputs=False)
        x_info, opset, ir = proto.graph.input[0], proto.opset_import, proto.ir_version
        nodes += list(proto.graph.node)
        inits += list(proto.graph.initializer)
        name = proto.graph.output[0].name
        nodes.append(helper.make_node("Unsqueeze", [name, "fused_axes0"], [f"{name}_1"], name=f"fused_unsqueeze{i}"))
        outs.append(f"{name}_1")
    nodes.append(helper.make_node("Concat", outs, ["probs"], axis=0, name="fused_concat"))
    out_info = helper.make_tensor_value_info("probs", TensorProto.FLOAT,
                                             [len(models.members), "batch", models.doc["n_classes"]])
    graph = helper.make_graph(nodes, "fused_ensemble", [x_info], [out_info], initializer=[axes, *inits])
    fused = helper.make_model(graph, opset_imports=list(opset), producer_name="ubench-fused")
    fused.ir_version = ir
    onnx.checker.check_model(fused)
    return fused.SerializeToString()


def _fused_runner(models: Models, backend: str, threads: int, device: str = "cpu", precision: str = "fp32"):
    """The members as one call: the fused ONNX graph in one session, or the torch modules stacked in one module
    (compiled as one graph by ``torch-compile``); ``None`` for TensorRT (engines are per member here)."""
    if backend == "onnxruntime":
        sess = _ort_session(fused_onnx(models), threads, device)
        return lambda x: sess.run(None, {"x": x})[0]
    if backend in ("torch", "torch-compile"):
        import torch
        from torch import nn

        class Stacked(nn.Module):
            def __init__(self, nets):
                super().__init__()
                self.nets = nn.ModuleList(nets)

            def forward(self, x):
                return torch.stack([n(x) for n in self.nets])

        net = Stacked([_torch_module(models, m, device, precision) for m in models.members]).eval()
        if backend == "torch-compile":
            net = torch.compile(net)
        return _torch_call(net, device, precision)
    return None


def _call_overhead_us(backend: str, threads: int, input_shape: tuple[int, ...], n: int = 2000,
                      device: str = "cpu") -> float | None:
    """Median cost of one call that does no work, through the same path as a member's call (ONNX Runtime: a
    session of one ``Identity`` node; torch: inference mode, ``from_numpy``, the copy to ``device``,
    ``nn.Identity``, the copy back, ``.numpy()``) at batch 1: what each of the M sequential calls pays and a fused
    call pays once."""
    x = np.zeros((1, *input_shape), dtype=np.float32)
    if backend == "onnxruntime":
        from onnx import TensorProto, helper

        info = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, *input_shape])
        out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, *input_shape])
        proto = helper.make_model(helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "identity",
                                                    [info], [out]), opset_imports=[helper.make_opsetid("", 17)])
        proto.ir_version = 8
        sess = _ort_session(proto.SerializeToString(), threads, device)
        call = lambda: sess.run(None, {"x": x})  # noqa: E731
    elif backend in ("torch", "torch-compile"):
        import torch

        ident = _torch_call(torch.nn.Identity(), device, "fp32")
        call = lambda: ident(x)  # noqa: E731
    else:
        return None
    for _ in range(50):
        call()
    times = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        call()
        times.append(time.perf_counter_ns() - t0)
    return float(np.median(times)) / 1e3


def _stats(times: list[float], b: int) -> dict[str, float]:
    mean = statistics.fmean(times)
    return {"batch_size": int(b), "p50_ms": float(np.percentile(times, 50)), "p95_ms": float(np.percentile(times, 95)),
            "mean_ms": mean, "std_ms": statistics.pstdev(times), "throughput_per_s": int(b) / (mean / 1e3)}


def _timer_overhead_us(n: int = 10000) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(n):
        time.perf_counter_ns()
    return (time.perf_counter_ns() - t0) / n / 1e3


@contextlib.contextmanager
def _inference_settings(backend: str):
    """torch's global flags as a deployed model runs while the torch backends are timed, restored after:
    nondeterministic kernels allowed and cuDNN's autotuner on (the shapes are fixed per batch size). A producer run
    earlier in the same process (the Python API, bench scripts) leaves deterministic algorithms on and the autotuner
    off, settings for reproducible training, not for timing inference."""
    if backend not in ("torch", "torch-compile"):
        yield None
        return
    import torch

    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              torch.backends.cudnn.benchmark)
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.benchmark = True
    try:
        yield {"deterministic_algorithms": False, "cudnn_benchmark": True}
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.backends.cudnn.benchmark = before[2]


def measure(models: Models, *, backend: str = "onnxruntime", batch_sizes=(1,), warmup: int = 10, iters: int = 200,
            threads: int = 1, precision: str = "fp32", seed: int = 0, cache_dir: Path | None = None,
            fused: bool = True, device: str = "cpu") -> dict[str, Any]:
    """Time the sequential ensemble at each batch size (see the module docstring) and, with ``fused``, the members
    as one call (:func:`fused_onnx`; the torch modules stacked), the two alternating iteration by iteration so
    that drifts in the machine's load hit both. TensorRT engines are built (or read from ``cache_dir``, default
    ``MODELS/trt-cache``) per batch size and add ``device_peak_bytes``; TensorRT has no fused timing here. With
    ``device`` ``cuda`` (or ``cuda:N``) the torch backends and ONNX Runtime run on that GPU (TensorRT always
    does). The torch backends run under :func:`_inference_settings` (reported as ``torch_settings``)."""
    with _inference_settings(backend) as flags:
        out = _measure(models, backend=backend, batch_sizes=batch_sizes, warmup=warmup, iters=iters, threads=threads,
                       precision=precision, seed=seed, cache_dir=cache_dir, fused=fused, device=device)
    if flags is not None:
        out["torch_settings"] = flags
    return out


def _measure(models: Models, *, backend: str, batch_sizes, warmup: int, iters: int, threads: int, precision: str,
             seed: int, cache_dir: Path | None, fused: bool, device: str) -> dict[str, Any]:
    trt = backend == "tensorrt"
    if trt:
        device = "cuda"  # its own errors name what is missing (the package, CUDA)
    else:
        _check_device(device)
    gpu_torch = device != "cpu" and backend in ("torch", "torch-compile")
    if gpu_torch:
        import torch

        torch.cuda.reset_peak_memory_stats(device)
    runners = [] if trt else _runners(models, backend, threads, precision, device)
    fused_run = _fused_runner(models, backend, threads, device, precision) if fused and not trt else None
    device_peak = None
    rng = np.random.default_rng(seed)
    rows, fused_rows = [], []
    for b in batch_sizes:
        if trt:
            runners, peak = _tensorrt_runners(models, int(b), precision, cache_dir)
        x = rng.random((int(b), *models.input_shape), dtype=np.float32)
        for _ in range(warmup):
            for run in runners:
                run(x)
            if fused_run is not None:
                fused_run(x)
        times, ftimes = [], []
        for _ in range(iters):
            t0 = time.perf_counter_ns()
            for run in runners:
                run(x)
            times.append((time.perf_counter_ns() - t0) / 1e6)
            if fused_run is not None:
                t0 = time.perf_counter_ns()
                fused_run(x)
                ftimes.append((time.perf_counter_ns() - t0) / 1e6)
        row = _stats(times, b)
        row["per_member_mean_ms"] = row["mean_ms"] / len(runners)
        rows.append(row)
        if fused_run is not None:
            frow = _stats(ftimes, b)
            frow["speedup_p50"] = row["p50_ms"] / frow["p50_ms"]
            fused_rows.append(frow)
        if trt:
            device_peak = max(device_peak or 0, int(peak()))
    if gpu_torch:
        device_peak = int(torch.cuda.max_memory_allocated(device))
    notes = []
    if device != "cpu" and os.environ.get("CUBLAS_WORKSPACE_CONFIG"):
        notes.append(f"CUBLAS_WORKSPACE_CONFIG={os.environ['CUBLAS_WORKSPACE_CONFIG']} is set (cuBLAS's "
                     "deterministic workspace, which ubench's trainers set): on an H200 ':4096:8' made a 3-MLP "
                     "ensemble's batch-1 latency 3.3x slower (1.36 against 0.405 ms); unset it to time deployment")
    out = {"backend": backend, "precision": precision, "device": device, "device_name": _device_name(device),
           "threads": threads, "warmup": warmup, "iters": iters,
           "n_members": len(models.members), "model": models.doc["model"], "method": models.doc["method"],
           "sampling": models.doc["sampling"],
           "model_bytes": int(sum(m["onnx_bytes"] for m in models.members)),
           "parameters": int(sum(m["parameters"] for m in models.members)),
           "timer_overhead_us": _timer_overhead_us(),
           "call_overhead_us": _call_overhead_us(backend, threads, models.input_shape, device=device),
           "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
           **({"device_peak_bytes": device_peak} if device_peak is not None else {}), "notes": notes,
           "batches": rows}
    if fused_run is not None:
        out["fused"] = {"graph": "onnx: one graph, the members' subgraphs side by side, output M x B x C"
                        if backend == "onnxruntime" else "torch: the members stacked in one module, one call",
                        "batches": fused_rows}
    return out


def _device_name(device: str) -> str:
    if device == "cpu":
        import platform

        return platform.processor() or platform.machine()
    import torch

    return torch.cuda.get_device_name(torch.device(device))


def what_fits(result: dict[str, Any], cll_by_members: list[float] | None, *, latency_budget_ms: float | None,
              memory_budget_bytes: int | None) -> dict[str, Any]:
    """The largest ensemble of this method within the budgets at batch 1: members limited by latency (batch-1
    mean latency per member) and by memory (the members' model bytes, each member held once), and the CLL of
    that many members from the archive's member curve (``None`` without one). Members sampled inside one graph
    (``sampling`` ``in_graph``: MC dropout) share their weights, which count once against the memory budget."""
    b1 = next((r for r in result["batches"] if r["batch_size"] == 1), result["batches"][0])
    m = result["n_members"]
    per_ms, per_bytes = b1["per_member_mean_ms"], result["model_bytes"] / m
    by_latency = m if latency_budget_ms is None else int(latency_budget_ms // per_ms)
    if result.get("sampling") == "in_graph":  # one network sampled M times: its weights are held once
        by_memory = m if memory_budget_bytes is None or per_bytes <= memory_budget_bytes else 0
    else:
        by_memory = m if memory_budget_bytes is None else int(memory_budget_bytes // per_bytes)
    k = max(0, min(m, by_latency, by_memory))
    out = {"members": k, "limited_by": "latency" if k == by_latency and k < m else (
               "memory" if k == by_memory and k < m else "members available"),
           "per_member_ms": per_ms, "per_member_bytes": per_bytes,
           "latency_budget_ms": latency_budget_ms, "memory_budget_bytes": memory_budget_bytes,
           "cll": None if not cll_by_members or k == 0 else cll_by_members[k - 1]}
    fused = next((r for r in result.get("fused", {}).get("batches", ()) if r["batch_size"] == 1), None)
    overhead_us = result.get("call_overhead_us")
    if fused is not None and overhead_us is not None and latency_budget_ms is not None:
        # One call of a k-member fused graph, modelled as the empty call plus k times the measured M-member graph's
        # cost per member beyond it: t(k) = o + k (t_M - o) / M. A model (only k = M is measured), said so.
        o = overhead_us / 1e3
        per_fused = max(fused["mean_ms"] - o, 0.0) / m
        by_fused = m if per_fused == 0.0 else int(max(latency_budget_ms - o, 0.0) // per_fused)
        kf = max(0, min(m, by_fused, by_memory))
        out["fused"] = {"members": kf, "per_member_ms": per_fused, "call_overhead_ms": o,
                        "model": "call overhead + k x (fused M-member mean - overhead) / M",
                        "cll": None if not cll_by_members or kf == 0 else cll_by_members[kf - 1]}
    return out
