# SPDX-License-Identifier: MIT
"""The TensorRT backend (issue #13 leftover 1): engine cache keys, and on a CUDA machine with ``tensorrt``
the engines' outputs equal ONNX Runtime's and a second run reads the cache."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ubench.edge.tensorrt_backend import engine_path


def test_engine_cache_key_changes_with_every_part_of_the_key(tmp_path):
    base = engine_path(tmp_path, b"onnx", "10.0.1", "fp32", 1)
    assert base == engine_path(tmp_path, b"onnx", "10.0.1", "fp32", 1)
    others = {engine_path(tmp_path, b"onnx2", "10.0.1", "fp32", 1), engine_path(tmp_path, b"onnx", "10.1.0", "fp32", 1),
              engine_path(tmp_path, b"onnx", "10.0.1", "fp16", 1), engine_path(tmp_path, b"onnx", "10.0.1", "fp32", 128)}
    assert base not in others and len(others) == 4 and base.parent == tmp_path


@pytest.mark.torch
def test_tensorrt_engines_equal_onnxruntime_on_a_gpu(tmp_path):
    pytest.importorskip("tensorrt")
    torch = pytest.importorskip("torch")
    ort = pytest.importorskip("onnxruntime")
    if not torch.cuda.is_available():
        pytest.skip("TensorRT needs a CUDA device")
    from click.testing import CliRunner

    from ubench.cli import cli
    from ubench.edge.tensorrt_backend import tensorrt_runners

    out = tmp_path / "de.h5"
    res = CliRunner().invoke(cli, ["produce", "deep_ensemble", "--members", "2", "--save-models", "--out", str(out),
                                   "--dataset", "digits", "--epochs", "1", "--train-samples", "200",
                                   "--test-samples", "60", "--shift-samples", "20", "--ood-samples", "20",
                                   "--no-progress"])
    assert res.exit_code == 0, res.output
    models = Path(str(out) + ".models")
    onnx = sorted(models.glob("member_*.onnx"))
    shape = tuple(json.loads((models / "models.json").read_text())["input_shape"])
    x = np.random.default_rng(0).random((4, *shape), dtype=np.float32)
    runners, peak = tensorrt_runners(onnx, shape, 4, "fp32", tmp_path / "cache")
    for path, run in zip(onnx, runners):
        want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        np.testing.assert_allclose(run(x), want, atol=1e-4)
    assert len(list((tmp_path / "cache").glob("*.engine"))) == len(onnx) and peak() > 0
