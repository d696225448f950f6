# SPDX-License-Identifier: MIT
"""The producers on a GPU: every registered torch method trains on digits with ``ubench produce --device cuda``
and writes an archive that validates, reads, holds probabilities (finite, rows summing to 1) and predicts the test
split well above chance; ``--save-models`` exports a CUDA-trained network whose ONNX graph, run by ONNX Runtime on
the CPU, gives the archive's predictions; a JAX producer runs on JAX's default backend (the GPU where there is one).

The CUDA tests are skipped where ``torch.cuda.is_available()`` is False. The test bodies take the device as a
parameter, and a CPU variant of two fast methods (and of the export) always runs, so the checks themselves are
exercised by the CPU suite. Run on a GPU machine::

    python -m pytest -q -p no:cacheprovider tests/producers/test_cuda_producers.py

Tiny settings (600 training images, a few epochs, two members) keep the whole file to a few minutes on one GPU;
the accuracy threshold was set from the same runs on the CPU (the lowest test accuracy of any method, over
two seeds, was 0.72; chance is 0.1).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")  # the bundled digits data

from ubench.archive_schema import read_archive, validate_archive  # noqa: E402
from ubench.cli import cli  # noqa: E402
from ubench.producers.registry import METHODS  # noqa: E402

pytestmark = pytest.mark.torch

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (torch.cuda.is_available() is False)")

#: The data of every run: 600 of digits' 1198 training images, its whole test split (599), small shifted and OOD
#: splits (their probabilities are checked too).
DATA = ["--dataset", "digits", "--train-samples", "600", "--shifts", "rotate,noise", "--shift-samples", "60",
        "--ood-samples", "60", "--batch-size", "64", "--no-progress"]

#: method -> (members, --set overrides): a few epochs each, two members where the method allows more than one.
TINY: dict[str, tuple[int, dict]] = {
    "sgd": (1, {"epochs": 5}),
    "deep_ensemble": (2, {"epochs": 5}),
    "mc_dropout": (2, {"epochs": 5, "dropout_rate": 0.2}),
    "gaussian_dropout": (2, {"epochs": 5}),
    "swag_diag": (2, {"epochs": 4, "swa_epochs": 3}),
    "swag": (2, {"epochs": 4, "swa_epochs": 3, "rank": 3}),
    "sse": (2, {"cycle_epochs": 3}),
    "fge": (2, {"epochs": 4, "cycle_epochs": 2}),
    "sgld": (2, {"burn_in_epochs": 8}),
    "sghmc": (2, {"burn_in_epochs": 4}),
    "csgld": (2, {"lr": 0.2, "cycle_epochs": 6, "exploration_epochs": 4, "samples_per_cycle": 2}),
    "csghmc": (2, {"cycle_epochs": 6, "exploration_epochs": 3, "samples_per_cycle": 2}),
    "tta": (2, {"epochs": 10}),
    "hmc": (2, {"burn_in": 10, "thin": 2, "step_size": 0.002, "trajectory_length": 0.04, "max_leapfrog": 40}),
    "vi": (2, {"epochs": 4, "vi_epochs": 1}),
    "ll_svi": (2, {"epochs": 4, "vi_epochs": 1}),
    "ll_dropout": (2, {"epochs": 5, "dropout_rate": 0.2}),
    "kfac_laplace": (2, {"epochs": 4, "scale_num": 3, "search_members": 2}),
    "ll_laplace": (2, {"epochs": 4, "scale_num": 3, "search_members": 2}),
    "diag_laplace": (2, {"epochs": 4, "scale_num": 3, "search_members": 2}),
    "swa": (1, {"epochs": 4, "swa_epochs": 2}),
    "swag_dropout": (2, {"epochs": 4, "swa_epochs": 3, "rank": 3, "dropout_rate": 0.2}),
    "subspace_ess": (2, {"epochs": 4, "swa_epochs": 3, "rank": 3, "max_rank": 3}),
    # issue #31 (CPU accuracy of these settings, seed 0: checked once above MIN_ACCURACY)
    "batch_ensemble": (2, {"epochs": 5}),
    "packed_ensembles": (2, {"epochs": 8}),
    "mimo": (2, {"epochs": 8}),
    "mc_batchnorm": (2, {"epochs": 5}),
    "evidential": (1, {"epochs": 10, "evidence": "softplus", "weight_decay": 0.0}),
    "sngp": (1, {"epochs": 5, "gp_hidden_dim": 128}),
    "ddu": (1, {"epochs": 5}),
}
#: Extra cases beyond the registry: test-time augmentation on top of a method (crops drawn on the host, applied to
#: device tensors), and two sampler chains.
EXTRA: dict[str, tuple[str, int, dict, list[str]]] = {
    "mc_dropout+tta": ("mc_dropout", 2, {"epochs": 10, "dropout_rate": 0.2, "tta_samples": 2}, ["--tta"]),
    "sgld-2chains": ("sgld", 4, {"burn_in_epochs": 8}, ["--chains", "2"]),
}
#: The methods whose CPU variant runs in the CPU suite (all 23 methods took about 25 s together on the 2-core
#: development machine; the CPU suite keeps two, the GPU run does the rest).
CPU_CASES = ("deep_ensemble", "swag")
#: Ten classes: chance is 0.1. Every tiny run reached 0.72 or more on the CPU (seeds 0 and 7).
MIN_ACCURACY = 0.5


def _invoke(args: list[str]):
    res = CliRunner().invoke(cli, args)
    detail = res.output
    if res.exc_info is not None and res.exit_code != 0:
        detail += "".join(traceback.format_exception(*res.exc_info))
    return res, detail


def _produce(method: str, members: int, hyper: dict, device: str, out, extra=()) -> None:
    sets = [a for k, v in hyper.items() for a in ("--set", f"{k}={v}")]
    res, detail = _invoke(["produce", method, "--out", str(out), "--members", str(members), "--device", device,
                           *sets, *extra, *DATA])
    assert res.exit_code == 0, detail
    assert str(out) in res.output.splitlines()


def _check_archive(out, *, members: int, device: str, method: str) -> None:
    """The archive of a finished run: valid, readable, M members of probabilities on every split, made on
    ``device``, and the ensemble's test accuracy well above chance."""
    errors = [f for f in validate_archive(out) if f.severity == "error"]
    assert errors == [], errors
    a = read_archive(out)
    assert a.method == method and len(a.members) == members
    assert a.scalability["device"].split(":")[0] == device, a.scalability
    for name, probs in a.probs.items():
        assert probs.shape[0] == members and probs.shape[2] == 10, (name, probs.shape)
        assert np.isfinite(probs).all(), name
        assert (probs >= 0).all(), name
        np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-4, err_msg=name)
    test = a.probs["test"]
    assert test.shape[1] == 599  # digits' whole test split
    accuracy = float((test.mean(0).argmax(1) == a.labels["test"]).mean())
    assert accuracy > MIN_ACCURACY, (method, device, accuracy)
    if members > 1:  # the members are not one network written M times
        assert all(np.abs(test[0] - test[k]).max() > 1e-5 for k in range(1, members))


def _case_params():
    out = []
    for method in sorted(METHODS):
        out.append(pytest.param(method, "cuda", marks=needs_cuda, id=f"{method}-cuda"))
        if method in CPU_CASES:
            out.append(pytest.param(method, "cpu", id=f"{method}-cpu"))
    return out


def test_every_registered_method_has_a_tiny_setting():
    assert set(TINY) == set(METHODS)
    assert set(CPU_CASES) <= set(TINY)


@pytest.mark.parametrize(("method", "device"), _case_params())
def test_method_trains_and_writes_a_valid_archive(method, device, tmp_path):
    members, hyper = TINY[method]
    out = tmp_path / f"{method}.h5"
    _produce(method, members, hyper, device, out)
    _check_archive(out, members=members, device=device, method=method)


@needs_cuda
@pytest.mark.parametrize("case", sorted(EXTRA))
def test_tta_and_chains_on_cuda(case, tmp_path):
    method, members, hyper, extra = EXTRA[case]
    out = tmp_path / "extra.h5"
    _produce(method, members, hyper, "cuda", out, extra)
    entries = members * int(hyper.get("tta_samples", 1))
    _check_archive(out, members=entries, device="cuda",
                   method=f"{method}+tta" if "--tta" in extra else method)


#: --save-models cases: a deterministic network, a VI weight draw (sampled layers hold their weights outside the
#: parameters), a SWAG draw.
EXPORT = {"deep_ensemble": TINY["deep_ensemble"], "vi": TINY["vi"], "swag": TINY["swag"]}


@pytest.mark.parametrize(("method", "device"), [
    *[pytest.param(m, "cuda", marks=needs_cuda, id=f"{m}-cuda") for m in sorted(EXPORT)],
    pytest.param("vi", "cpu", id="vi-cpu"),
])
def test_save_models_exports_what_the_device_computed(method, device, tmp_path):
    """ONNX Runtime on the CPU, run on the exported graph of a member trained (and predicted) on ``device``, gives
    the archive's probabilities within 1e-4; the torch rebuild from the plain weights gives ONNX Runtime's."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from export_checks import assert_members_reproduce_the_archive

    from ubench.producers.task import build_task

    members, hyper = EXPORT[method]
    out = tmp_path / f"{method}.h5"
    _produce(method, members, hyper, device, out, ["--save-models"])
    _check_archive(out, members=members, device=device, method=method)
    models_dir = out.with_name(out.name + ".models")
    doc = json.loads((models_dir / "models.json").read_text())
    assert [m["index"] for m in doc["members"]] == list(range(members))
    task = build_task("digits", train_samples=600, shift_kinds=("rotate", "noise"), shift_samples=60,
                      ood_samples=60)
    x = np.ascontiguousarray(task.splits["test"].images, dtype=np.float32)
    with h5py.File(out, "r") as f:
        stored = f["splits/test/probs"][:]
    assert_members_reproduce_the_archive(models_dir, x, stored, archive_atol=1e-4)


#: ``ubench`` with BlackJAX unimportable (as on a machine without it), in a process of its own.
_NO_BLACKJAX = "import sys; sys.modules['blackjax'] = None; from ubench.cli import main; sys.exit(main())"


def test_jax_producer_on_the_default_backend(tmp_path):
    """``--framework jax`` trains a deep ensemble on JAX's default backend, which must be the GPU wherever torch sees
    one (the CUDA plugin works), and needs no BlackJAX (only hmc does; a GPU machine may lack it). In a subprocess:
    JAX's and torch's CUDA libraries and memory pools stay out of each other's way."""
    pytest.importorskip("jax")
    pytest.importorskip("optax")
    out = tmp_path / "jax.h5"
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    run = subprocess.run([sys.executable, "-c", _NO_BLACKJAX, "produce", "deep_ensemble", "--framework", "jax",
                          "--out", str(out), "--members", "2", "--set", "epochs=5", *DATA],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    a = read_archive(out)
    assert a.provenance["framework"] == "jax"
    device = a.scalability["device"].split(":")[0].lower()
    if CUDA:
        assert device in ("cuda", "gpu"), f"torch sees a GPU, JAX ran on {a.scalability['device']}: no CUDA plugin?"
    _check_archive(out, members=2, device=device, method="deep_ensemble")


def test_jax_hmc_without_blackjax_is_a_clear_error(tmp_path, monkeypatch):
    pytest.importorskip("jax")
    pytest.importorskip("optax")
    monkeypatch.setitem(sys.modules, "blackjax", None)  # an import of it now fails, as where it is not installed
    res, detail = _invoke(["produce", "hmc", "--framework", "jax", "--out", str(tmp_path / "hmc.h5"), *DATA])
    assert res.exit_code == 1 and "needs the jax extra (blackjax not installed)" in res.output, detail
    assert not (tmp_path / "hmc.h5").exists()
