# SPDX-License-Identifier: MIT
"""TensorRT 10 runners for ``ubench latency --backend tensorrt`` (NVIDIA GPU and the ``tensorrt`` package only).

Each member's ONNX file is parsed (``OnnxParser``) into a network whose dynamic batch axis gets one optimisation
profile fixed at the timed batch size (min = opt = max = B, so the engine is tuned for exactly that batch); FP16 is
the ``BuilderFlag.FP16`` flag for ``--precision fp16``. Serialised engines are cached under ``cache_dir`` keyed by
sha256(ONNX) + TensorRT version + precision + batch, so a re-run skips the build. Input and output live on the GPU
as torch CUDA tensors (``set_tensor_address``); a call copies the host batch in, runs ``execute_async_v3`` on a
torch stream and synchronises, so the wall time measured by ``latency.measure`` is the full host-to-host latency.
Not exercised on this project's CPU CI (tests skip without ``tensorrt`` and CUDA).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Callable

import numpy as np

__all__ = ["engine_path", "tensorrt_runners"]


def engine_path(cache_dir: Path, onnx_bytes: bytes, trt_version: str, precision: str, batch: int) -> Path:
    """The cache file of one engine: sha256 of the ONNX bytes, TensorRT version, precision and batch size."""
    key = hashlib.sha256(onnx_bytes + f"|{trt_version}|{precision}|{int(batch)}".encode()).hexdigest()
    return Path(cache_dir) / f"{key}.engine"


def _build(trt: Any, logger: Any, onnx_bytes: bytes, input_shape: tuple[int, ...], batch: int,
           precision: str) -> bytes:
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(onnx_bytes):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise RuntimeError(f"TensorRT could not parse the ONNX graph: {errors}")
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    shape = (int(batch), *input_shape)
    profile.set_shape(network.get_input(0).name, shape, shape, shape)
    config.add_optimization_profile(profile)
    if precision == "fp16":
        config.set_flag(trt.BuilderFlag.FP16)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise RuntimeError("TensorRT build_serialized_network returned no engine (see the TensorRT log above)")
    return bytes(serialized)


def tensorrt_runners(onnx_files: list[Path], input_shape: tuple[int, ...], batch: int, precision: str,
                     cache_dir: Path) -> tuple[list[Callable[[np.ndarray], np.ndarray]], Callable[[], int]]:
    """One runner per member for batches of exactly ``batch`` rows, and a function returning the CUDA memory
    peak (bytes, ``torch.cuda.max_memory_allocated``: the I/O tensors; TensorRT's own workspace is not in it)."""
    import tensorrt as trt
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device visible to torch")
    if precision not in ("fp32", "fp16"):
        raise RuntimeError(f"precision {precision!r}: TensorRT runs fp32 or fp16")
    logger = trt.Logger(trt.Logger.WARNING)
    runtime = trt.Runtime(logger)
    stream = torch.cuda.Stream()
    torch.cuda.reset_peak_memory_stats()
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    runners = []
    for onnx in onnx_files:
        onnx_bytes = Path(onnx).read_bytes()
        cached = engine_path(cache_dir, onnx_bytes, trt.__version__, precision, batch)
        if cached.is_file():
            plan = cached.read_bytes()
        else:
            plan = _build(trt, logger, onnx_bytes, input_shape, batch, precision)
            tmp = cached.with_suffix(".tmp")
            tmp.write_bytes(plan)
            tmp.replace(cached)
        engine = runtime.deserialize_cuda_engine(plan)
        context = engine.create_execution_context()
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        inp = next(n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT)
        out = next(n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT)
        context.set_input_shape(inp, (int(batch), *input_shape))
        x_dev = torch.empty((int(batch), *input_shape), dtype=torch.float32, device="cuda")
        y_dev = torch.empty(tuple(context.get_tensor_shape(out)), dtype=torch.float32, device="cuda")
        context.set_tensor_address(inp, x_dev.data_ptr())
        context.set_tensor_address(out, y_dev.data_ptr())

        def run(x: np.ndarray, context=context, x_dev=x_dev, y_dev=y_dev, engine=engine) -> np.ndarray:
            with torch.cuda.stream(stream):
                x_dev.copy_(torch.from_numpy(x), non_blocking=False)
                if not context.execute_async_v3(stream.cuda_stream):
                    raise RuntimeError("TensorRT execute_async_v3 failed")
                y = y_dev.cpu()
            stream.synchronize()
            return y.numpy()

        runners.append(run)
    return runners, torch.cuda.max_memory_allocated
