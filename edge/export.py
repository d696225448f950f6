# SPDX-License-Identifier: MIT
"""Members leave the producer as ONNX: ``ubench produce … --save-models`` writes ``OUT.models/member_0000.onnx``
(input ``x`` of the task's raw image shape with a dynamic batch axis; output ``probs``, the softmax of the
network, so the graph computes exactly what the archive stores; normalisation is inside the network),
``member_0000.npz`` (the same weights as named float arrays, loadable without pickle for the torch backends of
``ubench latency``) and ``models.json`` (archive sha256, model name, input shape, classes, normalisation, how the
members sample, and per member its parameter count and bytes).

How each kind of member is exported (``models.json``'s ``sampling``):

* ``none``: a deterministic network (sgd, deep_ensemble, sse, fge, swa): the member is the network in evaluation
  mode, and ONNX Runtime reproduces the archive's predictions within 1e-5.
* ``weights``: the member is one weight draw (SWAG, SWAG-diag, KFAC/diagonal/last-layer Laplace, VI, last-layer
  SVI, SG-MCMC, cyclical SG-MCMC, HMC, subspace ESS): the drawn network (batch-norm statistics recomputed, VI's
  sampled weights written as plain weights) is exported as its own deterministic graph, which also reproduces the
  archive's member.
* ``in_graph``: MC dropout, MC Gaussian dropout, last-layer dropout: dropout stays *active inside the graph*,
  seeded. ONNX Runtime deletes ``Dropout`` nodes at inference, so the mask is built explicitly: Bernoulli
  dropout of rate p is ``x * (RandomUniformLike(x) >= p) / (1 - p)`` (keep probability 1 - p, torch's scaling);
  Gaussian dropout is ``mu + sqrt(var) * RandomNormalLike(mu)`` at the next layer's output (Laves et al. 2020,
  eqs. 6-9, as :class:`~ubench.producers.models.GaussianDropoutLinear` trains it). Every random node gets its own
  ``seed`` attribute (recorded as the member's ``graph_seeds``), so a fresh session's first call draws the same
  masks every time and each further call fresh ones, as torch's MC dropout does. Why sampling in the graph rather
  than M networks with fixed masks: a fixed mask would be shared by every input of a batch, which is not MC
  dropout's predictive (one mask per input and pass), and the masks of M members would have to be stored. The
  price: ONNX Runtime's generator is not torch's, so the exported member equals the archive's member in
  distribution, not draw for draw; the parity test checks the masks' statistics and that the graph equals the torch
  network under the same masks. The M members are one network: each file holds the same weights with other seeds,
  and ``ubench latency``'s what-fits counts those weights once.
* ``weights+in_graph``: SWAG on a dropout network: a weight draw per member, with in-graph masks.

Test-time augmentation (``tta``, ``METHOD+tta``) is refused: its members are one network applied to random crops
and flips of each input drawn on the host by torch's generator, i.e. input preprocessing, not a network; export the
method without ``--tta`` and crop in the serving pipeline.
"""

from __future__ import annotations

import copy
import hashlib
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["MODELS_SCHEMA", "NotExportable", "SAMPLING", "member_sampling", "export_member", "write_models_json",
           "models_dir_for", "plain_state_dict"]

#: 2: ``sampling``, per member ``graph_seeds``, ``dropout_before`` (schema 1 had deterministic members only).
MODELS_SCHEMA = 2
SAMPLING = ("none", "weights", "in_graph", "weights+in_graph")
RANDOM_OPS = ("RandomUniformLike", "RandomNormalLike", "RandomUniform", "RandomNormal", "Bernoulli", "Multinomial")


class NotExportable(ValueError):
    """A method whose members are not networks (the message says why)."""


def models_dir_for(out: str | Path) -> Path:
    out = Path(out)
    return out.with_name(out.name + ".models")


def member_sampling(method) -> str:
    """How ``method``'s (class or instance) members sample (one of :data:`SAMPLING`, see the module docstring);
    raises :class:`NotExportable` for test-time augmentation."""
    cls = method if isinstance(method, type) else type(method)
    if cls.member_kind == "augmentation" or "+tta" in cls.name:
        raise NotExportable(
            f"--save-models: {cls.name}'s members are one network applied to random crops/flips of each input, "
            "drawn on the host by torch's generator: input preprocessing, not a network, so there is no member "
            "graph to export; produce the method without --tta to export its networks and crop in the serving "
            "pipeline")
    if not getattr(cls, "exportable", True):  # issue #31: heads of one network, batch-statistics members, ...
        raise NotExportable(f"--save-models: {cls.name}'s members are not separate networks ubench exports "
                            "(" + str(getattr(cls, "not_exportable_because", "their predictor is not one graph")) + ")")
    weights = cls.member_kind == "posterior_sample"
    graph = bool(getattr(cls, "test_time_dropout", False))
    return {(False, False): "none", (True, False): "weights", (False, True): "in_graph",
            (True, True): "weights+in_graph"}[(weights, graph)]


def _graph_bernoulli_dropout(p: float):
    """Bernoulli dropout that samples in every mode: ``x * (U(0,1) >= p) / (1 - p)`` (exports as
    ``RandomUniformLike``, ``GreaterOrEqual``, ``Cast``, ``Mul``)."""
    import torch
    from torch import nn

    class GraphBernoulliDropout(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.p = float(p)

        def forward(self, x):
            return x * (torch.rand_like(x) >= self.p).to(x.dtype) * (1.0 / (1.0 - self.p))

    return GraphBernoulliDropout()


def _activate_dropout_in_graph(net) -> int:
    """Make every dropout of ``net`` (in place) sample whatever the mode; returns how many were found."""
    from torch import nn

    from ..producers.models import GaussianDropoutConv2d, GaussianDropoutLinear

    found = 0
    for name, module in list(net.named_modules()):
        if isinstance(module, nn.Dropout) and module.p > 0:
            parent, _, child = name.rpartition(".")
            setattr(net.get_submodule(parent) if parent else net, child, _graph_bernoulli_dropout(module.p))
            found += 1
        elif isinstance(module, (GaussianDropoutLinear, GaussianDropoutConv2d)) and module.p > 0:
            module.forward = module.sampled
            found += 1
    return found


def plain_state_dict(network) -> dict[str, np.ndarray]:
    """The weights of ``network`` as a plain network of its architecture holds them: a variational layer's sampled
    weight (``fixed``) becomes its ``weight`` and its ``log_sigma`` is dropped."""
    state = {k: v.detach().cpu().numpy() for k, v in network.state_dict().items()}
    for name, module in network.named_modules():
        fixed = getattr(module, "fixed", None)
        if fixed is not None:
            state[f"{name}.weight"] = fixed.detach().cpu().numpy()
            state.pop(f"{name}.log_sigma", None)
    return state


def export_member(model, input_shape: tuple[int, ...], directory: Path, index: int, *, sampling: str = "none",
                  seed: int = 0) -> dict[str, Any]:
    """Write member ``index`` (``softmax(model(x))``; with ``in_graph`` sampling its dropout active and seeded by
    ``seed`` and ``index``) as ONNX and its weights as ``.npz``; return its ``models.json`` entry."""
    import onnx
    import torch
    from torch import nn

    if sampling not in SAMPLING:
        raise ValueError(f"sampling must be one of {SAMPLING}; got {sampling!r}")
    directory.mkdir(parents=True, exist_ok=True)
    net = copy.deepcopy(model).cpu().eval()
    in_graph = sampling.endswith("in_graph")
    if in_graph and not _activate_dropout_in_graph(net):
        raise NotExportable(f"member {index}: sampling {sampling!r} but the network has no dropout layer")
    net = nn.Sequential(net, nn.Softmax(dim=-1)).eval()
    onnx_path = directory / f"member_{index:04d}.onnx"
    tmp = onnx_path.with_suffix(".onnx.tmp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (torch.zeros((1, *input_shape)),), str(tmp), input_names=["x"],
                          output_names=["probs"], dynamic_axes={"x": {0: "batch"}, "probs": {0: "batch"}},
                          dynamo=False, opset_version=17)
    proto = onnx.load(str(tmp))
    random_nodes = [n for n in proto.graph.node if n.op_type in RANDOM_OPS]
    if bool(random_nodes) != in_graph:
        tmp.unlink()
        raise RuntimeError(f"member {index}: {len(random_nodes)} random nodes in a graph exported with sampling "
                           f"{sampling!r}")
    seeds = []
    if random_nodes:
        # Seeds below 2**24 are exact in the attribute's float32; one per node, derived from (seed, index).
        seeds = [int(v) for v in np.random.SeedSequence([int(seed) & 0xFFFFFFFF, index]).generate_state(
            len(random_nodes)) % (1 << 24)]
        for node, s in zip(random_nodes, seeds):
            for a in [a for a in node.attribute if a.name == "seed"]:
                node.attribute.remove(a)
            node.attribute.append(onnx.helper.make_attribute("seed", float(s)))
        onnx.save(proto, str(tmp))
    tmp.replace(onnx_path)
    weights = plain_state_dict(model)
    npz_path = directory / f"member_{index:04d}.npz"
    with open(npz_path.with_suffix(".npz.tmp"), "wb") as f:
        np.savez(f, **weights)
    npz_path.with_suffix(".npz.tmp").replace(npz_path)
    n_params = int(sum(p.numel() for n, p in model.named_parameters() if not n.endswith("log_sigma")))
    return {"index": index, "onnx": onnx_path.name, "weights": npz_path.name, "parameters": n_params,
            "onnx_bytes": onnx_path.stat().st_size,
            "onnx_sha256": hashlib.sha256(onnx_path.read_bytes()).hexdigest(),
            **({"graph_seeds": seeds} if seeds else {})}


def write_models_json(directory: Path, *, archive: Path, method: str, model: str, input_shape, n_classes: int,
                      mean: float, std: float, dropout: str, dropout_rate: float, members: list[dict],
                      sampling: str = "none", dropout_before: str | None = None) -> Path:
    """``models.json``; ``dropout_before`` names the layer a method put its own dropout in front of (ll_dropout),
    so the torch backends rebuild the same network."""
    doc = {"models_schema": MODELS_SCHEMA, "archive": archive.name, "sampling": sampling,
           **({"dropout_before": dropout_before} if dropout_before else {}),
           "archive_sha256": hashlib.sha256(archive.read_bytes()).hexdigest(), "method": method, "model": model,
           "input_shape": list(input_shape), "n_classes": int(n_classes),
           "normalisation": {"mean": float(mean), "std": float(std), "inside_graph": True},
           "dropout": dropout, "dropout_rate": float(dropout_rate), "output": "probs (softmax)",
           "members": sorted(members, key=lambda m: m["index"])}
    path = directory / "models.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path
