# SPDX-License-Identifier: MIT
"""`ubench latency --device`: the torch backends (and ONNX Runtime's CUDA provider, where installed) on a GPU.

On a machine without CUDA the device errors are checked (exit 2, the reason named); with CUDA the GPU runners'
probabilities equal the CPU ONNX graph's (fp32 within 1e-5, fp16 within 2e-3), the result carries the device, its
name and torch's allocator peak, and ``--record-into`` stores the device in ``/scalability``."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from ubench.cli import cli  # noqa: E402

pytestmark = pytest.mark.torch
CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device (runs where the device tool lends a GPU)")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("edge-device") / "mc.h5"
    res = CliRunner().invoke(cli, ["produce", "deep_ensemble", "--members", "2", "--save-models", "--out", str(out),
                                   "--dataset", "digits", "--epochs", "1", "--train-samples", "300",
                                   "--test-samples", "64", "--shift-samples", "20", "--ood-samples", "20",
                                   "--no-progress", "--device", "cpu"])
    assert res.exit_code == 0, res.output
    return out, out.with_name("mc.h5.models")


def test_device_errors_name_the_problem(exported):
    _, models_dir = exported
    res = CliRunner().invoke(cli, ["latency", str(models_dir), "--device", "tpu", "--iters", "2"])
    assert res.exit_code == 2 and "device 'tpu': choose cpu, cuda or cuda:N" in res.output
    res = CliRunner().invoke(cli, ["latency", str(models_dir), "--backend", "torch", "--precision", "fp16",
                                   "--iters", "2"])
    assert res.exit_code == 2 and "fp32 only on the CPU (fp16 with --device cuda)" in res.output
    if not CUDA:
        res = CliRunner().invoke(cli, ["latency", str(models_dir), "--backend", "torch", "--device", "cuda",
                                       "--iters", "2"])
        assert res.exit_code == 2 and "no CUDA device is visible here" in res.output
        assert "Traceback" not in res.output
    elif "CUDAExecutionProvider" not in ort.get_available_providers():
        res = CliRunner().invoke(cli, ["latency", str(models_dir), "--device", "cuda", "--iters", "2"])
        assert res.exit_code == 2 and "has no CUDA execution provider" in res.output


@needs_cuda
@pytest.mark.parametrize("precision, atol", [("fp32", 1e-5), ("fp16", 2e-3)])
def test_gpu_torch_runners_equal_the_cpu_onnx_graph(exported, precision, atol):
    from ubench.edge.latency import _fused_runner, _runners, load_models

    _, models_dir = exported
    models = load_models(models_dir)
    x = np.random.default_rng(0).random((16, *models.input_shape), dtype=np.float32)
    want = np.stack([ort.InferenceSession(str(models_dir / m["onnx"]), providers=["CPUExecutionProvider"])
                     .run(None, {"x": x})[0] for m in models.members])
    got = np.stack([run(x) for run in _runners(models, "torch", 1, precision, "cuda")])
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=atol)
    np.testing.assert_allclose(_fused_runner(models, "torch", 1, "cuda", precision)(x), want, atol=atol)


@needs_cuda
@pytest.mark.parametrize("backend", ["torch", "torch-compile"])
def test_gpu_latency_json_and_record(exported, tmp_path, backend):
    import shutil

    from ubench.archive_schema.safe_h5py import h5py

    out, models_dir = exported
    archive = tmp_path / "mc.h5"
    shutil.copy(out, archive)
    res = CliRunner().invoke(cli, ["latency", str(models_dir), "--backend", backend, "--device", "cuda",
                                   "--iters", "20", "--warmup", "3", "--batch-size", "1", "--batch-size", "64",
                                   "--json"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)
    assert r["device"] == "cuda" and r["device_name"] == torch.cuda.get_device_name(0)
    assert r["device_peak_bytes"] > 0 and r["call_overhead_us"] > 0
    assert [b["batch_size"] for b in r["batches"]] == [1, 64] and r["fused"]["batches"][0]["p50_ms"] > 0
    from ubench.edge.record import record_latency

    record_latency(archive, r, None)
    with h5py.File(archive, "r") as f:
        assert f["scalability"].attrs["latency_device"] == f"cuda ({torch.cuda.get_device_name(0)})"
        assert int(f["scalability"].attrs["latency_device_peak_bytes"]) == r["device_peak_bytes"]


@needs_cuda
def test_gpu_onnxruntime_where_the_cuda_provider_exists(exported):
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip(f"this onnxruntime has no CUDA provider ({', '.join(ort.get_available_providers())})")
    from ubench.edge.latency import _runners, load_models

    _, models_dir = exported
    models = load_models(models_dir)
    x = np.random.default_rng(1).random((8, *models.input_shape), dtype=np.float32)
    want = [ort.InferenceSession(str(models_dir / m["onnx"]), providers=["CPUExecutionProvider"])
            .run(None, {"x": x})[0] for m in models.members]
    for run, w in zip(_runners(models, "onnxruntime", 1, "fp32", "cuda"), want):
        np.testing.assert_allclose(run(x), w, atol=1e-5)


def test_a_gpu_result_records_its_device_and_the_tables_show_it():
    """Without a GPU: a result as measure() returns it on cuda becomes latency_device in /scalability's attributes,
    which score's latency table prints in place of the CPU thread count."""
    from ubench.edge.record import latency_attributes
    from ubench.scoring.score import latency_section
    from ubench.scoring.tables import latency_table

    row = {"batch_size": 1, "p50_ms": 0.2, "p95_ms": 0.3, "mean_ms": 0.21, "std_ms": 0.01, "throughput_per_s": 4761.9}
    result = {"backend": "torch", "precision": "fp16", "device": "cuda", "device_name": "NVIDIA H200", "threads": 1,
              "n_members": 3, "model_bytes": 1000, "peak_rss_bytes": 10, "device_peak_bytes": 4096,
              "call_overhead_us": 30.0, "batches": [row]}
    attrs = latency_attributes(result)
    assert attrs["latency_device"] == "cuda (NVIDIA H200)" and attrs["latency_device_peak_bytes"] == 4096
    assert "latency_device" not in latency_attributes({**result, "device": "cpu"})
    section = latency_section(attrs)
    _, rows = latency_table([{"archive": {"latency": section}, "summary": {"accuracy": 0.9, "nll": 0.3}}], ["de"])
    assert rows[0][-1] == "torch fp16 on cuda (NVIDIA H200)"


def test_torch_is_timed_with_inference_flags_and_the_callers_flags_come_back(exported):
    """A producer run in the same process leaves deterministic algorithms on and cuDNN's autotuner off; the torch
    backends are timed without them (reported as torch_settings) and the caller's flags are restored after."""
    from ubench.edge.latency import load_models, measure

    _, models_dir = exported
    models = load_models(models_dir)
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              torch.backends.cudnn.benchmark)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    try:
        r = measure(models, backend="torch", iters=3, warmup=1, fused=False)
        assert r["torch_settings"] == {"deterministic_algorithms": False, "cudnn_benchmark": True}
        assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
        assert torch.backends.cudnn.benchmark is False
        assert "torch_settings" not in measure(models, backend="onnxruntime", iters=3, warmup=1, fused=False)
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.backends.cudnn.benchmark = before[2]


@needs_cuda
def test_a_set_cublas_workspace_is_noted(exported, monkeypatch):
    """CUBLAS_WORKSPACE_CONFIG (set by ubench's trainers for deterministic cuBLAS) slows small GPU GEMMs several
    times: a GPU timing made with it set says so."""
    from ubench.edge.latency import load_models, measure

    _, models_dir = exported
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    r = measure(load_models(models_dir), backend="torch", device="cuda", iters=3, warmup=1, fused=False)
    assert any("CUBLAS_WORKSPACE_CONFIG=:4096:8 is set" in n for n in r["notes"])
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")
    assert measure(load_models(models_dir), backend="torch", device="cuda", iters=3, warmup=1, fused=False)["notes"] == []
