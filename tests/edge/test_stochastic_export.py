# SPDX-License-Identifier: MIT
"""--save-models for stochastic members (issue #13 item 1): every weight draw is its own network equal to the
archive's member; MC/Gaussian dropout sample inside the graph with seeded masks whose statistics are those of
dropout and under which the graph equals the torch network; test-time augmentation is refused."""

from __future__ import annotations

import dataclasses
import json

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from ubench.cli import cli  # noqa: E402
from ubench.edge.export import RANDOM_OPS, member_sampling  # noqa: E402
from ubench.edge.latency import _torch_module, fused_onnx, load_models  # noqa: E402
from ubench.producers.archive_run import produce_archive  # noqa: E402
from ubench.producers.models import GaussianDropoutConv2d, GaussianDropoutLinear, set_mc_dropout  # noqa: E402
from ubench.producers.registry import METHODS, load_method  # noqa: E402
from ubench.producers.task import build_task  # noqa: E402
from ubench.producers.torch_trainer import RunSettings  # noqa: E402

pytestmark = pytest.mark.torch

# (members, hyperparameters) small enough for a unit test; the settings of tests/producers/test_producer_methods.
WEIGHTS = {
    "swag_diag": (2, {"epochs": 1, "swa_epochs": 3}),
    "swag": (2, {"epochs": 1, "swa_epochs": 3, "rank": 3}),
    "vi": (2, {"epochs": 2, "vi_epochs": 1}),
    "ll_svi": (2, {"epochs": 2, "vi_epochs": 1}),
    "kfac_laplace": (2, {"epochs": 2, "scale_num": 3, "search_members": 2}),
    "diag_laplace": (2, {"epochs": 2, "scale_num": 3, "search_members": 2}),
    "ll_laplace": (2, {"epochs": 2, "scale_num": 3, "search_members": 2}),
    "sgld": (2, {"burn_in_epochs": 1}),
    "subspace_ess": (2, {"epochs": 2, "swa_epochs": 3, "rank": 3, "max_rank": 3}),
}
IN_GRAPH = {
    "mc_dropout": (3, {"epochs": 1, "dropout_rate": 0.3}),
    "gaussian_dropout": (2, {"epochs": 1}),
    "ll_dropout": (2, {"epochs": 1, "dropout_rate": 0.25}),
    "swag_dropout": (2, {"epochs": 1, "swa_epochs": 3, "rank": 3, "dropout_rate": 0.2}),
}


@pytest.fixture(scope="module")
def task():
    t = build_task("digits", train_samples=300, test_samples=120, shift_samples=20, ood_samples=20)
    order = np.random.default_rng(0).permutation(len(t.train))  # a validation split for Laplace's scale search
    return dataclasses.replace(t, train=t.train.take(np.sort(order[30:])), val=t.train.take(np.sort(order[:30])))


def _produce(task, tmp_path, method, members, hyper):
    torch.set_num_threads(1)
    settings = RunSettings(model="mlp", members=members, seed=3, batch_size=64)
    out = produce_archive(method, task, tmp_path / f"{method}.h5", settings=settings, hyper=hyper, threads=1,
                          save_models=True)
    return out, out.with_name(out.name + ".models")


def _x(task):
    return np.ascontiguousarray(task.splits["test"].images, dtype=np.float32)


def test_every_method_is_exported_or_refused():
    """Every registered method has a sampling kind (test-time augmentation alone is refused)."""
    kinds = {}
    for name in METHODS:
        try:
            kinds[name] = member_sampling(load_method(name))
        except ValueError as exc:
            kinds[name] = "refused"
            assert "crops" in str(exc) or "not separate networks" in str(exc)
    assert kinds["tta"] == "refused" and kinds["deep_ensemble"] == kinds["swa"] == "none"
    # issue #31: heads of one network, scores fitted outside it, Dirichlet outputs: refused, saying why
    assert {m for m, k in kinds.items() if k == "refused"} == {"tta", "batch_ensemble", "packed_ensembles", "mimo",
                                                              "evidential", "sngp", "ddu"}
    assert kinds["mc_batchnorm"] == "none"  # each member is the network with one batch's statistics
    assert {kinds[m] for m in WEIGHTS} == {"weights"}
    assert {kinds[m] for m in ("mc_dropout", "gaussian_dropout", "ll_dropout")} == {"in_graph"}
    assert kinds["swag_dropout"] == "weights+in_graph"


@pytest.mark.parametrize("method", sorted(WEIGHTS))
def test_each_weight_draw_is_a_network_equal_to_the_archive_member(task, tmp_path, method):
    out, models_dir = _produce(task, tmp_path, method, *WEIGHTS[method])
    doc = json.loads((models_dir / "models.json").read_text())
    assert doc["models_schema"] == 2 and doc["sampling"] == "weights"
    assert all("graph_seeds" not in m for m in doc["members"])
    x = _x(task)
    with h5py.File(out, "r") as f:
        stored = f["splits/test/probs"][:]
    models = load_models(models_dir)
    outs = []
    for m, member in enumerate(doc["members"]):
        proto = onnx.load(str(models_dir / member["onnx"]))
        assert not [n for n in proto.graph.node if n.op_type in RANDOM_OPS]
        got = ort.InferenceSession(str(models_dir / member["onnx"]),
                                   providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        np.testing.assert_allclose(got, stored[m], atol=1e-5)
        with torch.inference_mode():  # the torch backends' rebuild from the plain weights
            rebuilt = _torch_module(models, member)(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(rebuilt, got, atol=1e-5)
        outs.append(got)
    assert np.abs(outs[0] - outs[1]).max() > 1e-4  # two draws, two networks


def _random_outputs(path):
    """The ONNX model at ``path`` with every random node's output added as a graph output, and those names."""
    proto = onnx.load(str(path))
    names = [n.output[0] for n in proto.graph.node if n.op_type in RANDOM_OPS]
    for name in names:
        proto.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    return proto.SerializeToString(), names


def _torch_under_masks(net, draws, p):
    """``net`` (dropout off) run with the graph's draws put in by hooks, in forward order: Bernoulli dropout's
    output is ``x (u >= p) / (1 - p)``; a Gaussian dropout layer's is ``mu + sqrt(p/(1-p) (x^2 W^2)) eps``."""
    set_mc_dropout(net, False)
    queue = list(draws)
    hooks = []

    def bernoulli(module, inputs, output):
        u = torch.from_numpy(queue.pop(0))
        return inputs[0] * (u >= p).to(inputs[0].dtype) / (1.0 - p)

    def gaussian(module, inputs, output):
        x = inputs[0]
        if isinstance(module, GaussianDropoutLinear):
            var = torch.nn.functional.linear(x * x, module.weight * module.weight)
        else:
            var = module._conv_forward(x * x, module.weight * module.weight, None)
        return output + (var * (module.p / (1.0 - module.p))).clamp_min(0).sqrt() * torch.from_numpy(queue.pop(0))

    for module in net.modules():
        if isinstance(module, torch.nn.Dropout):
            hooks.append(module.register_forward_hook(bernoulli))
        elif isinstance(module, (GaussianDropoutLinear, GaussianDropoutConv2d)):
            hooks.append(module.register_forward_hook(gaussian))
    return net, hooks, queue


@pytest.mark.parametrize("method", sorted(IN_GRAPH))
def test_dropout_sampled_inside_the_graph(task, tmp_path, method):
    members, hyper = IN_GRAPH[method]
    out, models_dir = _produce(task, tmp_path, method, members, hyper)
    doc = json.loads((models_dir / "models.json").read_text())
    assert doc["sampling"] == ("weights+in_graph" if method == "swag_dropout" else "in_graph")
    p = doc["dropout_rate"]
    gaussian = doc["dropout"] == "gaussian"
    x = _x(task)
    models = load_models(models_dir)
    firsts = []
    for member in doc["members"]:
        model_bytes, names = _random_outputs(models_dir / member["onnx"])
        assert len(names) == len(member["graph_seeds"]) >= 1
        sess = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
        probs, *draws = sess.run(None, {"x": x})
        again, *draws2 = sess.run(None, {"x": x})
        fresh = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"]).run(None, {"x": x})
        # seeded: a fresh session's first call repeats the draws; the next call draws new ones
        np.testing.assert_array_equal(fresh[0], probs)
        assert np.abs(again - probs).max() > 1e-4
        firsts.append(probs)
        for d, d2 in zip(draws, draws2):
            assert d.shape[0] == len(x) and not np.array_equal(d, d2)
            n = d.size
            if gaussian:  # eps ~ N(0, 1): mean within 5 standard errors, variance within 5%
                assert abs(d.mean()) < 5 / np.sqrt(n) and abs(d.var() - 1) < 0.05
            else:  # kept units ~ Bernoulli(1 - p), independently per input and unit
                keep = d >= p
                assert abs(keep.mean() - (1 - p)) < 5 * np.sqrt(p * (1 - p) / n)
                assert np.abs(np.corrcoef(keep[0], keep[1])[0, 1]) < 0.3  # two inputs, two masks
        # the graph equals the torch network of the same weights under the same masks
        net, hooks, queue = _torch_under_masks(_torch_module(models, member), draws, p)
        with torch.inference_mode():
            expected = net(torch.from_numpy(x)).numpy()
        assert not queue
        np.testing.assert_allclose(probs, expected, atol=1e-5)
        for h in hooks:
            h.remove()
    assert np.abs(firsts[0] - firsts[1]).max() > 1e-4  # members have their own seeds
    # the fused graph keeps each member's seeds: its first call is every member's first call
    fused = ort.InferenceSession(fused_onnx(models), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(fused, np.stack(firsts), atol=1e-6)
    # in distribution the graph is the archive's member: mean predictive over 200 calls vs the archive's members
    with h5py.File(out, "r") as f:
        stored = f["splits/test/probs"][:]
    if method != "swag_dropout":  # one network: every archive member is a draw of the same predictive
        sess = ort.InferenceSession(str(models_dir / doc["members"][0]["onnx"]), providers=["CPUExecutionProvider"])
        draws = np.array([sess.run(None, {"x": x})[0] for _ in range(200)])
        var = draws.var(axis=0)  # per input and class; the z-score of the two means' difference
        z = np.abs(draws.mean(axis=0) - stored.mean(axis=0)) / np.sqrt(var / len(stored) + var / 200 + 1e-8)
        assert z.max() < 6 and np.mean(z > 3) < 0.02, (z.max(), np.mean(z > 3))


def test_tta_is_refused_with_the_reason(tmp_path):
    res = CliRunner().invoke(cli, ["produce", "sgd", "--tta", "--save-models", "--dataset", "digits", "--out",
                                   str(tmp_path / "t.h5"), "--no-progress"])
    assert res.exit_code == 2 and "random crops" in res.output and "without --tta" in res.output
    assert not (tmp_path / "t.h5.partial").exists()
    res = CliRunner().invoke(cli, ["produce", "tta", "--save-models", "--dataset", "digits", "--out",
                                   str(tmp_path / "t.h5"), "--no-progress"])
    assert res.exit_code == 2 and "random crops" in res.output


def test_what_fits_counts_in_graph_weights_once():
    from ubench.edge.latency import what_fits

    result = {"n_members": 4, "model_bytes": 4 * 100, "sampling": "in_graph",
              "batches": [{"batch_size": 1, "per_member_mean_ms": 1.0}]}
    assert what_fits(result, None, latency_budget_ms=None, memory_budget_bytes=150)["members"] == 4
    assert what_fits(result, None, latency_budget_ms=None, memory_budget_bytes=99)["members"] == 0
    result["sampling"] = "weights"
    assert what_fits(result, None, latency_budget_ms=None, memory_budget_bytes=250)["members"] == 2
