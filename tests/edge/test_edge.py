# SPDX-License-Identifier: MIT
"""edge/: members exported as ONNX equal the archive's predictions, and `ubench latency` times them
(issue #13 items 1-4)."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from ubench.cli import cli  # noqa: E402

pytestmark = pytest.mark.torch

PRODUCE = ["--dataset", "digits", "--epochs", "1", "--train-samples", "400", "--test-samples", "120",
           "--shift-samples", "40", "--ood-samples", "40", "--no-progress"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("edge") / "de.h5"
    res = CliRunner().invoke(cli, ["produce", "deep_ensemble", "--members", "2", "--save-models", "--out", str(out),
                                   *PRODUCE])
    assert res.exit_code == 0, res.output
    return out, out.with_name("de.h5.models")


def _test_inputs():
    from ubench.producers.task import build_task

    task = build_task("digits", train_samples=400, test_samples=120, shift_samples=40, ood_samples=40)
    return np.ascontiguousarray(task.splits["test"].images, dtype=np.float32)


def test_onnx_members_equal_the_archive_and_the_torch_rebuild(exported):
    import hashlib

    from export_checks import assert_members_reproduce_the_archive

    out, models_dir = exported
    doc = json.loads((models_dir / "models.json").read_text())
    assert doc["archive_sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert [m["onnx"] for m in doc["members"]] == ["member_0000.onnx", "member_0001.onnx"]
    x = _test_inputs()
    with h5py.File(out, "r") as f:
        stored = f["splits/test/probs"][:]
    sessions = assert_members_reproduce_the_archive(models_dir, x, stored, archive_atol=1e-5)
    for sess in sessions:
        got = sess.run(None, {"x": x})[0]
        one = sess.run(None, {"x": x[:1]})[0]  # the dynamic batch axis also takes batch 1
        np.testing.assert_allclose(one, got[:1], atol=1e-6)


@pytest.mark.parametrize("backend", ["onnxruntime", "torch"])
def test_latency_json_and_what_fits(exported, backend):
    out, models_dir = exported
    res = CliRunner().invoke(cli, ["latency", str(models_dir), "--backend", backend, "--iters", "20", "--warmup", "2",
                                   "--batch-size", "1", "--batch-size", "32", "--json", "--latency-budget", "1e9",
                                   "--memory-budget", "1G"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)
    assert r["n_members"] == 2 and r["threads"] == 1 and r["model_bytes"] > 0
    assert [b["batch_size"] for b in r["batches"]] == [1, 32]
    for b in r["batches"]:
        assert 0 < b["p50_ms"] <= b["p95_ms"] and b["throughput_per_s"] > 0
    w = r["what_fits"]
    assert w["members"] == 2 and w["limited_by"] == "members available"
    report = json.loads(CliRunner().invoke(cli, ["score", str(out), "--json", "--member-curves"]).stdout)
    curve = report["in_domain"][report["primary_split"]]["member_curves"]["metrics"]["cll"]["mean"]
    assert w["cll"] == pytest.approx(curve[1])


def test_what_fits_budgets_by_hand():
    from ubench.edge.latency import what_fits

    result = {"n_members": 5, "model_bytes": 5 * 100, "batches": [{"batch_size": 1, "per_member_mean_ms": 2.0}]}
    w = what_fits(result, [-0.5, -0.4, -0.35, -0.33, -0.32], latency_budget_ms=7.0, memory_budget_bytes=10**6)
    assert (w["members"], w["limited_by"], w["cll"]) == (3, "latency", -0.35)
    w = what_fits(result, [-0.5, -0.4, -0.35, -0.33, -0.32], latency_budget_ms=None, memory_budget_bytes=250)
    assert (w["members"], w["limited_by"], w["cll"]) == (2, "memory", -0.4)
    assert "fused" not in w  # nothing fused was measured
    # Fused: one call 1 ms (1000 us) + (6 - 1) / 5 = 1 ms per member; 7 ms fits 6 -> capped at the 5 available;
    # 3.5 ms fits 2 (1 + 2 x 1 <= 3.5 < 1 + 3 x 1); memory (250 bytes: 2 members) caps it as well.
    result |= {"call_overhead_us": 1000.0, "fused": {"batches": [{"batch_size": 1, "mean_ms": 6.0}]}}
    curve = [-0.5, -0.4, -0.35, -0.33, -0.32]
    f = what_fits(result, curve, latency_budget_ms=7.0, memory_budget_bytes=10**6)["fused"]
    assert (f["members"], f["per_member_ms"], f["call_overhead_ms"], f["cll"]) == (5, 1.0, 1.0, -0.32)
    assert what_fits(result, curve, latency_budget_ms=3.5, memory_budget_bytes=None)["fused"]["members"] == 2
    assert what_fits(result, curve, latency_budget_ms=7.0, memory_budget_bytes=250)["fused"]["members"] == 2
    assert what_fits(result, curve, latency_budget_ms=0.5, memory_budget_bytes=None)["fused"]["members"] == 0


def test_tampered_model_and_missing_backend_are_clear_errors(exported, tmp_path):
    import shutil

    _, models_dir = exported
    copy = tmp_path / "copy.models"
    shutil.copytree(models_dir, copy)
    (copy / "member_0001.onnx").write_bytes(b"not onnx")
    res = CliRunner().invoke(cli, ["latency", str(copy)])
    assert res.exit_code == 2 and "member_0001.onnx" in res.output and "sha256" in res.output
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        res = CliRunner().invoke(cli, ["latency", str(models_dir), "--backend", "tensorrt"])
        assert res.exit_code == 1 and "pip install 'ubench[edge-trt]'" in res.output  # a missing extra, as anywhere


def test_distilled_student_is_closer_to_its_teacher_than_sgd(exported, tmp_path):
    """Bayesian Dark Knowledge (issue #13 item 6): the student's test NLL is nearer the teacher's than an SGD
    model's trained on the labels of the same data."""
    out, models_dir = exported
    student = tmp_path / "student.h5"
    res = CliRunner().invoke(cli, ["distill", str(out), "--out", str(student), "--epochs", "15"])
    assert res.exit_code == 0, res.output
    sgd = tmp_path / "sgd.h5"
    res = CliRunner().invoke(cli, ["produce", "sgd", "--out", str(sgd), *PRODUCE[:2], "--epochs", "15",
                                   *PRODUCE[4:]])
    assert res.exit_code == 0, res.output

    def nll(path):
        r = CliRunner().invoke(cli, ["score", str(path), "--json", "--placement", "none"])
        return json.loads(r.stdout)["summary"]["nll"]

    teacher, stud, point = nll(out), nll(student), nll(sgd)
    assert abs(stud - teacher) < abs(point - teacher), (teacher, stud, point)
    with h5py.File(student, "r") as f:
        assert f.attrs["method"] == "distill:deep_ensemble" and f["splits/test/probs"].shape[0] == 1
    assert (student.with_name("student.h5.models") / "member_0000.onnx").is_file()


def test_distill_refuses_a_teacher_that_is_not_the_exported_archive(exported, tmp_path):
    out, models_dir = exported
    other = tmp_path / "other.h5"
    other.write_bytes(out.read_bytes() + b"\0")
    res = CliRunner().invoke(cli, ["distill", str(other), "--models", str(models_dir), "--out",
                                   str(tmp_path / "s.h5")])
    assert res.exit_code == 2 and "sha256 differs" in res.output


def test_fused_graph_equals_the_members_stacked(exported):
    """Issue #13 item 3: one ONNX graph runs every member on the same input, output M x B x C."""
    from ubench.edge.latency import fused_onnx, load_models

    _, models_dir = exported
    models = load_models(models_dir)
    x = _test_inputs()
    fused = ort.InferenceSession(fused_onnx(models), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    each = [ort.InferenceSession(str(models_dir / m["onnx"]), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0] for m in models.members]
    assert fused.shape == (2, len(x), 10)
    np.testing.assert_allclose(fused, np.stack(each), atol=1e-6)


def test_latency_reports_fused_and_call_overhead_unless_no_fused(exported):
    _, models_dir = exported
    res = CliRunner().invoke(cli, ["latency", str(models_dir), "--iters", "10", "--warmup", "1", "--json"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)
    assert r["call_overhead_us"] > 0 and r["sampling"] == "none"
    (f,) = r["fused"]["batches"]
    assert f["batch_size"] == 1 and 0 < f["p50_ms"] <= f["p95_ms"]
    assert f["speedup_p50"] == pytest.approx(r["batches"][0]["p50_ms"] / f["p50_ms"])
    res = CliRunner().invoke(cli, ["latency", str(models_dir), "--iters", "5", "--warmup", "0", "--no-fused",
                                   "--json"])
    assert res.exit_code == 0 and "fused" not in json.loads(res.stdout)
    assert "--no-fused" in CliRunner().invoke(cli, ["latency", "--help"]).output


def test_record_into_writes_scalability_that_score_reads(exported, tmp_path):
    """Issue #13 item 3: --record-into puts the numbers in /scalability (SPEC 5.2); the archive still validates
    and models.json follows its new sha256."""
    import hashlib
    import shutil

    from ubench.archive_schema import read_archive

    out, models_dir = exported
    arch, models = tmp_path / "de.h5", tmp_path / "de.h5.models"
    shutil.copyfile(out, arch)
    shutil.copytree(models_dir, models)
    res = CliRunner().invoke(cli, ["latency", str(models), "--iters", "10", "--warmup", "1", "--json",
                                   "--record-into", str(arch)])
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)
    s = read_archive(arch).scalability
    assert s["latency_p50_ms"] == r["batches"][0]["p50_ms"] and s["latency_members"] == 2
    assert s["latency_fused_p50_ms"] == r["fused"]["batches"][0]["p50_ms"] and s["latency_backend"] == "onnxruntime"
    assert json.loads((models / "models.json").read_text())["archive_sha256"] == \
        hashlib.sha256(arch.read_bytes()).hexdigest()
    report = json.loads(CliRunner().invoke(cli, ["score", str(arch), "--json", "--placement", "none"]).stdout)
    assert report["archive"]["latency"]["latency_p50_ms"] == s["latency_p50_ms"]
    res = CliRunner().invoke(cli, ["latency", str(models), "--iters", "2", "--record-into", str(out)])
    assert res.exit_code == 2 and "sha256 differs" in res.output  # not the archive these models came from
