# SPDX-License-Identifier: MIT
"""VI, the last-layer methods and the Laplace approximations: their building blocks against closed forms and
explicit per-example loops, a property of each method on digits, the validation split, and bit-identical resumption."""

import copy
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402
from torch import nn  # noqa: E402

from ubench.archive_schema import read_archive  # noqa: E402
from ubench.producers.archive_run import produce_archive  # noqa: E402
from ubench.producers.command import produce  # noqa: E402
from ubench.producers.laplace import DiagonalLaplace, KFACLaplace, kfac_factors, scale_grid  # noqa: E402
from ubench.producers.last_layer import LastLayerDropout, LastLayerSVI  # noqa: E402
from ubench.producers.member_loop import _train_run  # noqa: E402
from ubench.producers.models import build_model  # noqa: E402
from ubench.producers.registry import load_method  # noqa: E402
from ubench.producers.task import build_task  # noqa: E402
from ubench.producers.torch_trainer import Progress, RunSettings, TrainContext  # noqa: E402
from ubench.producers.vi import (  # noqa: E402
    MeanFieldLinear, VariationalInference, kl_divergence, mean_field_layers, sample_weights, to_mean_field,
)

pytestmark = pytest.mark.torch
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def task():
    return build_task("digits", shift_kinds=("rotate",), train_samples=500, test_samples=120, shift_samples=30,
                      val_fraction=0.2)


class _Scratch:
    """The part of the archive writer that ``_train_run`` uses."""

    def __init__(self, path):
        self.scratch_dir = path
        self.n_members = 0


class _Clock:
    def add(self, key, seconds):
        pass


def _train(method_name, task, tmp_path, hyper, *, model="mlp", seed=0):
    """Train one run of a posterior method directly; returns (method, model, state, ctx)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    cls = load_method(method_name)
    method = cls(cls.resolve_hyperparameters(hyper), n_members=2, n_train=len(task.train))
    ctx = TrainContext.create(task, RunSettings(model=model, members=2, seed=seed, batch_size=64))
    net, state, _, _ = _train_run(method, ctx, _Scratch(tmp_path), run_index=0, run_seed=seed, clock=_Clock(),
                                  progress=Progress(), on_snapshot=None)
    return method, net, state, ctx


# -- the validation split (#12.8) ------------------------------------------------------------------------------------
def test_validation_split_comes_out_of_the_training_set_only():
    full = build_task("digits", shift_kinds=(), train_samples=500, test_samples=120)
    split = build_task("digits", shift_kinds=(), train_samples=500, test_samples=120, val_fraction=0.2)
    assert full.val is None and full.settings["val_fraction"] == 0.0
    assert len(split.val) == 100 and len(split.train) == 400
    assert split.settings["val_fraction"] == 0.2 and split.settings["val_samples"] == 100
    ids_train, ids_val = set(split.train.sample_ids), set(split.val.sample_ids)
    assert not ids_train & ids_val and ids_train | ids_val == set(full.train.sample_ids)
    # The test split is untouched (and the training file's ids are not the test file's).
    np.testing.assert_array_equal(split.splits["test"].sample_ids, full.splits["test"].sample_ids)
    np.testing.assert_array_equal(split.splits["test"].images, full.splits["test"].images)
    with pytest.raises(ValueError, match="val_fraction"):
        build_task("digits", shift_kinds=(), val_fraction=1.0)


def test_command_lists_the_methods_and_records_or_refuses_the_validation_fraction(tmp_path):
    help_text = "".join(CliRunner().invoke(produce, ["--help"]).output.split())  # the choices wrap
    for name in ("vi", "ll_svi", "ll_dropout", "kfac_laplace", "ll_laplace", "diag_laplace", "--val-fraction"):
        assert name in help_text
    refused = CliRunner().invoke(produce, ["kfac_laplace", "--val-fraction", "0", "--out", str(tmp_path / "k.h5")])
    assert refused.exit_code == 2 and "--val-fraction" in refused.output and "Traceback" not in refused.output
    out = tmp_path / "l.h5"
    ok = CliRunner().invoke(produce, [
        "ll_laplace", "--dataset", "digits", "--epochs", "1", "--members", "2", "--train-samples", "200",
        "--test-samples", "50", "--shifts", "none", "--set", "scale_num=3", "--set", "search_members=2",
        "--out", str(out)])
    assert ok.exit_code == 0, ok.output
    config = read_archive(out).config
    assert config["data"]["val_fraction"] == 0.1 and config["data"]["val_samples"] == 20
    assert config["data"]["train_samples"] == 180


# -- VI ------------------------------------------------------------------------------------------------------------
def test_mean_field_kl_matches_torch_distributions():
    layer = MeanFieldLinear(nn.Linear(5, 3), lv_init=-2.0, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        layer.log_sigma.uniform_(-3.0, 1.0)
    prior_var = 0.7
    q = torch.distributions.Normal(layer.weight.double(), torch.exp(layer.log_sigma.double()))
    p = torch.distributions.Normal(layer.weight.double(), math.sqrt(prior_var))  # the mean term is weight decay
    expected = torch.distributions.kl_divergence(q, p).sum()
    torch.testing.assert_close(layer.kl(prior_var), expected)
    # The initial log-sigmas are the code's uniform(lv_init - 0.1, lv_init).
    fresh = MeanFieldLinear(nn.Linear(50, 40), lv_init=-5.0, generator=torch.Generator().manual_seed(1))
    assert fresh.log_sigma.min() >= -5.1 and fresh.log_sigma.max() <= -5.0 and fresh.log_sigma.std() > 0.02


def test_local_reparameterisation_has_the_moments_of_the_weight_posterior():
    """Per example the pre-activation is N(x mu + b, x^2 sigma^2): checked against the closed form by sampling."""
    torch.manual_seed(0)
    layer = MeanFieldLinear(nn.Linear(4, 2), lv_init=-1.0, generator=torch.Generator().manual_seed(0))
    layer.stochastic = True
    x = torch.tensor([[1.0, -2.0, 0.5, 3.0]]).repeat(20000, 1)
    with torch.no_grad():
        out = layer(x).double()
    mean = (x[0] @ layer.weight.t() + layer.bias).double()
    var = ((x[0] ** 2) @ torch.exp(2 * layer.log_sigma).t()).double()
    se = torch.sqrt(var / len(x))
    assert torch.all((out.mean(0) - mean).abs() < 4 * se)
    assert torch.all((out.var(0) / var - 1).abs() < 4 * math.sqrt(2 / len(x)))


@pytest.mark.slow
def test_vi_posterior_variance_shrinks_with_more_data(tmp_path):
    """The KL term's weight is 1/N: with 10x the data (and as many optimisation steps, 160) the trained posterior
    standard deviations are smaller, and moved from their initial exp(-5) in both runs."""
    sigmas = {}
    for n, vi_epochs in ((128, 80), (1024, 10)):
        small = build_task("digits", shift_kinds=(), train_samples=n, test_samples=20)
        _, net, _, _ = _train("vi", small, tmp_path / str(n), {"epochs": 1, "vi_epochs": vi_epochs})
        sigmas[n] = torch.cat([torch.exp(m.log_sigma).flatten() for m in net.modules()
                               if hasattr(m, "log_sigma")]).mean().item()
    print(sigmas)
    assert sigmas[1024] < 0.7 * sigmas[128], sigmas
    assert sigmas[1024] > 2 * math.exp(-5.0)  # the posterior moved away from the initial variance


def test_vi_members_are_weight_draws_from_the_variational_posterior(task, tmp_path):
    method, net, state, ctx = _train("vi", task, tmp_path, {"epochs": 1, "vi_epochs": 1})
    layers = [m for m in net.modules() if hasattr(m, "log_sigma")]
    assert len(layers) == 3  # every linear layer of the MLP
    x = torch.from_numpy(task.splits["test"].images[:5])
    a = method.member_predictor(net, state, ctx, seed=1)
    b = method.member_predictor(net, state, ctx, seed=2)
    # One draw per member: the same input twice gives the same logits; two members differ.
    torch.testing.assert_close(a(x, None), a(x, None))
    assert (a(x, None) - b(x, None)).abs().max() > 1e-4


# -- last-layer methods -----------------------------------------------------------------------------------------
def _effective_weights(model):
    """Every parameter, with a mean-field layer's drawn weight in place of its mean."""
    out = {n: p for n, p in model.named_parameters()}
    for n, m in model.named_modules():
        if getattr(m, "fixed", None) is not None:
            out[f"{n}.weight"] = m.fixed
    return out


def _penultimate(model, x):
    last = [m for m in model.modules() if isinstance(m, (nn.Linear, MeanFieldLinear))][-1]
    seen = {}
    handle = last.register_forward_pre_hook(lambda m, inp: seen.__setitem__("x", inp[0].detach().clone()))
    model(x)
    handle.remove()
    return seen["x"]


@pytest.mark.parametrize("name", ["ll_svi", "ll_laplace"])
def test_last_layer_methods_vary_only_the_last_layer(task, tmp_path, name):
    hyper = {"epochs": 2, "vi_epochs": 2} if name == "ll_svi" else {"epochs": 2, "scale_num": 3, "search_members": 2}
    method, net, state, ctx = _train(name, task, tmp_path, hyper, model="lenet")
    if name == "ll_svi":
        assert sum(hasattr(m, "log_sigma") for m in net.modules()) == 1
        models = [sample_weights(net, torch.Generator().manual_seed(s)) for s in (1, 2)]
    else:
        models = [method.sample_model(net, state["posterior"], 1.0, seed=s) for s in (1, 2)]
    last = [n for n, m in net.named_modules() if isinstance(m, (nn.Linear, MeanFieldLinear))][-1]
    a, b = (_effective_weights(m) for m in models)
    varied = {n for n in a if not torch.equal(a[n], b[n])}
    assert varied and all(n.startswith(last + ".") for n in varied), varied
    x = torch.from_numpy(task.splits["test"].images[:8])
    torch.testing.assert_close(_penultimate(models[0], x), _penultimate(models[1], x), rtol=0, atol=0)


def test_last_layer_svi_keeps_the_pretrained_features(task, tmp_path):
    """After the VI epochs every parameter but the last layer is exactly the pretrained one."""
    _, pre, _, _ = _train("ll_svi", task, tmp_path / "a", {"epochs": 2, "vi_epochs": 0 + 1})
    _, longer, _, _ = _train("ll_svi", task, tmp_path / "b", {"epochs": 2, "vi_epochs": 3})
    a, b = dict(pre.named_parameters()), dict(longer.named_parameters())
    changed = {n for n in a if not torch.equal(a[n], b[n])}
    assert changed and all(n.startswith("net.5.") for n in changed), changed


def test_last_layer_dropout_masks_only_the_input_of_the_last_layer(task, tmp_path):
    method, net, state, ctx = _train("ll_dropout", task, tmp_path, {"epochs": 1})
    dropouts = [n for n, m in net.named_modules() if isinstance(m, nn.Dropout)]
    assert dropouts == ["net.5.0"] and isinstance(net.net[5][1], nn.Linear)
    x = torch.from_numpy(task.splits["test"].images[:8])
    predictor = method.member_predictor(net, state, ctx, seed=0)
    torch.manual_seed(1)
    first = predictor(x, None)
    torch.manual_seed(2)
    second = predictor(x, None)
    assert (first - second).abs().max() > 1e-4
    # The features entering the dropout layer are those of the deterministic network.
    feats = {}
    net.net[5][0].register_forward_pre_hook(lambda m, inp: feats.setdefault("x", []).append(inp[0].clone()))
    predictor(x, None)
    predictor(x, None)
    torch.testing.assert_close(feats["x"][0], feats["x"][1], rtol=0, atol=0)


# -- Laplace -------------------------------------------------------------------------------------------------------
def test_kfac_factors_match_an_explicit_per_example_loop():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
    x, y = torch.randn(13, 6), torch.randint(0, 3, (13,))
    factors = kfac_factors(model, x, y, batch_size=4)
    xxt = {n: torch.zeros(1) for n in ("0", "2")}
    ggt = {n: torch.zeros(1) for n in ("0", "2")}
    for i in range(len(x)):
        h = torch.tanh(model[0](x[i:i + 1]))
        z1 = model[0](x[i:i + 1])
        z1.retain_grad()
        out = model[2](torch.tanh(z1))
        out.retain_grad()
        nn.functional.cross_entropy(out, y[i:i + 1]).backward()
        for name, a, g in (("0", x[i], z1.grad[0]), ("2", h[0].detach(), out.grad[0])):
            a1 = torch.cat([a, torch.ones(1)]).double()
            xxt[name] = xxt[name] + torch.outer(a1, a1)
            ggt[name] = ggt[name] + torch.outer(g.double(), g.double())
    for name in ("0", "2"):
        torch.testing.assert_close(factors[name]["xxt"], xxt[name], rtol=1e-6, atol=1e-8)
        torch.testing.assert_close(factors[name]["ggt"], ggt[name], rtol=1e-5, atol=1e-9)


def test_diagonal_laplace_precision_is_the_summed_squared_per_example_gradient(task, tmp_path):
    method, net, state, ctx = _train("diag_laplace", task, tmp_path, {"epochs": 1, "scale_num": 2,
                                                                      "search_members": 2})
    x, y = ctx.x_train[:50], ctx.y_train[:50]
    net.eval()
    fisher = {n: torch.zeros_like(p, dtype=torch.float64) for n, p in net.named_parameters()}
    for i in range(len(x)):
        net.zero_grad()
        nn.functional.cross_entropy(net(x[i:i + 1]), y[i:i + 1]).backward()
        for n, p in net.named_parameters():
            fisher[n] += p.grad.double() ** 2
    sub = type(ctx)(ctx.task, ctx.settings, ctx.device, x, y)
    std = DiagonalLaplace.fit(method, net, sub)
    for n in fisher:
        torch.testing.assert_close(std[n].double(), 1 / torch.sqrt(fisher[n] + method.eps), rtol=1e-4, atol=0)


@pytest.mark.parametrize("name", ["kfac_laplace", "ll_laplace", "diag_laplace"])
def test_laplace_predictive_variance_grows_away_from_the_data(task, tmp_path, name):
    method, net, state, ctx = _train(name, task, tmp_path, {"epochs": 3, "scale": 0.1})
    x = torch.from_numpy(task.splits["test"].images[:30])
    direction = torch.randn(x.shape, generator=torch.Generator().manual_seed(0))
    direction /= direction.flatten(1).norm(dim=1)[:, None, None, None]
    models = [method.sample_model(net, state["posterior"], state["scale"], seed=s) for s in range(20)]
    spreads = []
    with torch.no_grad():
        for t in (0.0, 3.0, 10.0):
            logits = torch.stack([m(x + t * direction) for m in models]).double()
            spreads.append(logits.var(0).mean().item())
    assert spreads[0] < spreads[1] < spreads[2], spreads
    assert spreads[2] > 4 * spreads[0], spreads


def test_laplace_scale_search_scores_the_code_grid_on_validation(task, tmp_path):
    method, net, state, ctx = _train("kfac_laplace", task, tmp_path, {"epochs": 2, "search_members": 3})
    grid = [s for s, _ in state["search"]]
    np.testing.assert_allclose(grid, 10.0 ** np.linspace(-2, 1, 25))
    np.testing.assert_allclose(scale_grid(-2, 1, 25), grid)
    best = min(state["search"], key=lambda r: r[1])
    assert state["scale"] == best[0]
    # The largest scale destroys the network: its validation NLL is worse than the best one.
    assert state["search"][-1][1] > best[1]
    assert KFACLaplace.default_val_fraction == 0.1


def test_laplace_refuses_a_task_without_validation_split(tmp_path):
    plain = build_task("digits", shift_kinds=(), train_samples=100, test_samples=20)
    with pytest.raises(ValueError, match="--val-fraction"):
        _train("kfac_laplace", plain, tmp_path, {"epochs": 1})


# -- resumption --------------------------------------------------------------------------------------------------
RESUME = {
    "vi": ({"epochs": 1, "vi_epochs": 2}, 3),
    "ll_svi": ({"epochs": 1, "vi_epochs": 2}, 3),
    "ll_dropout": ({"epochs": 3, "dropout_rate": 0.2}, 2),
    "kfac_laplace": ({"epochs": 2, "scale_num": 3, "search_members": 2}, 3),
    "ll_laplace": ({"epochs": 2, "scale_num": 3, "search_members": 2}, 3),
    "diag_laplace": ({"epochs": 2, "scale_num": 3, "search_members": 2}, 2),
}


@pytest.mark.parametrize("name", sorted(RESUME))
def test_interrupted_run_resumes_bit_identically(task, tmp_path, monkeypatch, name):
    hyper, cut = RESUME[name]

    def run(out):
        return read_archive(produce_archive(name, task, out, hyper=hyper, threads=1,
                                            settings=RunSettings(model="mlp", members=3, seed=5, batch_size=64)))

    full = run(tmp_path / "full.h5")
    cls = load_method(name)
    original = cls.run_epoch
    calls = {"n": 0}

    def failing(self, *args, epoch, **kwargs):
        if epoch == cut and calls["n"] == 0:
            calls["n"] += 1
            raise KeyboardInterrupt
        return original(self, *args, epoch=epoch, **kwargs)

    monkeypatch.setattr(cls, "run_epoch", failing)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "cut.h5")
    assert calls["n"] == 1 and (tmp_path / "cut.h5.partial").exists()
    resumed = run(tmp_path / "cut.h5")
    for split in full.probs:
        np.testing.assert_array_equal(resumed.probs[split], full.probs[split])
    assert [m.info for m in resumed.members] == [m.info for m in full.members]


def test_variational_layers_replace_every_linear_and_convolution():
    model = build_model("lenet", (1, 8, 8), 10, mean=0.0, std=1.0)
    n_before = sum(isinstance(m, (nn.Linear, nn.Conv2d)) for m in model.modules())
    to_mean_field(model, lv_init=-5.0, seed=0)
    assert sum(hasattr(m, "log_sigma") for m in model.modules()) == n_before == 4
    assert not any(isinstance(m, (nn.Linear, nn.Conv2d)) for m in model.modules())
    assert kl_divergence(model, 1.0).dtype == torch.float64
    assert issubclass(LastLayerSVI, VariationalInference) and LastLayerDropout.default_members == 20


def test_a_weight_draw_moves_and_casts_with_its_network():
    """A draw's sampled weights (``fixed``, not parameters) follow ``.to()``/``.double()`` with the network:
    ``--save-models`` moves a draw made on CUDA to the CPU to export it."""
    model = to_mean_field(build_model("lenet", (1, 8, 8), 10, mean=0.0, std=1.0), lv_init=-3.0, seed=0)
    sampled = sample_weights(model, torch.Generator().manual_seed(0))
    x = torch.rand(4, 1, 8, 8)
    with torch.no_grad():
        expected = sampled(x).double()
        on_meta = copy.deepcopy(sampled).to("meta")
        assert {m.fixed.device.type for m in mean_field_layers(on_meta)} == {"meta"}
        as_double = sampled.double()
        assert {m.fixed.dtype for m in mean_field_layers(as_double)} == {torch.float64}
        torch.testing.assert_close(as_double(x.double()), expected, atol=1e-5, rtol=1e-5)


def test_kfac_weight_factors_are_laplace_torch_empirical_fisher_times_n():
    """The measurement behind the module docstring: laplace-torch's empirical-Fisher Kronecker factors of a
    layer's weight equal the Pitfalls code's summed factors divided by N (its bias is a separate block)."""
    laplace = pytest.importorskip("laplace")
    from laplace.curvature import CurvlinopsEF
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
    x, y = torch.randn(40, 6), torch.randint(0, 3, (40,))
    ours = kfac_factors(model, x, y, batch_size=8)
    la = laplace.Laplace(model, "classification", subset_of_weights="all", hessian_structure="kron",
                         backend=CurvlinopsEF, prior_precision=1.0)
    la.fit(DataLoader(TensorDataset(x, y), batch_size=8))
    assert len(la.H_facs.kfacs) == 4  # weight and bias blocks of each layer: the code joins them
    for layer, index in (("0", 0), ("2", 2)):
        g_theirs, a_theirs = (f.double() for f in la.H_facs.kfacs[index])
        d = a_theirs.shape[0]
        theirs = torch.kron(g_theirs, a_theirs)
        mine = torch.kron(ours[layer]["ggt"], ours[layer]["xxt"][:d, :d]) / len(x)
        torch.testing.assert_close(theirs, mine, rtol=1e-5, atol=1e-7)
