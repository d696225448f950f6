# SPDX-License-Identifier: MIT
"""The export parity check shared by the edge and producer tests (imported as ``export_checks``).

Every exported member, run by ONNX Runtime on the CPU, gives the archive's stored probabilities for the same inputs,
and the torch network rebuilt from its plain weights (``edge.latency._torch_module``) gives ONNX Runtime's: the
archive is the independent side (the producer computed it with the trained torch model before any export).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def assert_members_reproduce_the_archive(models_dir: Path, x: np.ndarray, stored: np.ndarray, *,
                                         archive_atol: float, rebuild_atol: float = 1e-5) -> list:
    """Check each member of ``models_dir`` on ``x`` against ``stored[m]`` (M x N x C) and its torch rebuild;
    returns the ONNX Runtime sessions, in member order, for further checks."""
    import onnxruntime as ort
    import torch

    from ubench.edge.latency import _torch_module, load_models

    doc = json.loads((Path(models_dir) / "models.json").read_text())
    models = load_models(models_dir)
    sessions = []
    for m, member in enumerate(doc["members"]):
        sess = ort.InferenceSession(str(Path(models_dir) / member["onnx"]), providers=["CPUExecutionProvider"])
        got = sess.run(None, {"x": x})[0]
        np.testing.assert_allclose(got, stored[m], atol=archive_atol)
        with torch.inference_mode():
            rebuilt = _torch_module(models, member)(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(rebuilt, got, atol=rebuild_atol)
        sessions.append(sess)
    return sessions
