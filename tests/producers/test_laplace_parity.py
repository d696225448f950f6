# SPDX-License-Identifier: MIT
"""The Laplace posteriors (issue #30 items 3 and 4): the covariance each structure samples against the inverse of
its precision in closed form, and last-layer ``kron`` and ``full`` Laplace with the GGN against laplace-torch itself
(precision, log marginal likelihood, its optimum, and the nn-MC predictive within Monte-Carlo error) on a digits MLP."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from ubench.producers.laplace_curvature import kfac_factors, last_layer_curvature, last_layer_inputs  # noqa: E402
from ubench.producers.laplace_posterior import (  # noqa: E402
    full_posterior, kfac_posterior, kron_eigen, kron_posterior, log_marginal_likelihood, noise,
    optimise_prior_precision,
)
from ubench.producers.last_layer import last_linear_name  # noqa: E402
from ubench.producers.registry import load_method  # noqa: E402
from ubench.producers.task import build_task  # noqa: E402
from ubench.producers.torch_trainer import RunSettings, TrainContext, train_epoch  # noqa: E402

pytestmark = pytest.mark.torch
torch.set_num_threads(1)


def _spd(n, seed):
    a = torch.randn(n, n + 3, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    return a @ a.t()


def _exact_covariance(monkeypatch, layer, total, flatten):
    """The exact covariance of ``noise(layer)``, a linear map of ``total`` standard normals: push each unit vector
    through the producer's own draw (``torch.randn`` hands out the unit vector's pieces in draw order)."""
    columns = []
    for k in range(total):
        e = torch.zeros(total)
        e[k] = 1.0
        used = [0]

        def unit(*shape, generator=None, e=e, used=used, **kwargs):
            n = math.prod(shape)
            piece = e[used[0]: used[0] + n].reshape(shape)
            used[0] += n
            return piece

        monkeypatch.setattr(torch, "randn", unit)
        w, b = noise(layer, torch.Generator())
        monkeypatch.undo()
        assert used[0] == total
        columns.append(flatten(w.double(), None if b is None else b.double()))
    m = torch.stack(columns, dim=1)
    return m @ m.t()


def _column_major(w, b):
    return w.t().reshape(-1)


@pytest.mark.parametrize("locations", [1, 4])
def test_kfac_textbook_draw_has_the_inverse_precision_as_covariance_and_the_pitfalls_draw_does_not(
        monkeypatch, locations):
    """The ``kfac`` precision of a layer is (X_d kron G_d) / L (column-major vec W); the textbook draw's covariance
    equals its inverse exactly; the Pitfalls code's draw has the same eigenvalues but another covariance."""
    xxt, ggt = _spd(4, 0), _spd(3, 1)
    factor = {"xxt": xxt, "ggt": ggt, "locations": locations, "bias": True}
    delta = 0.7
    pi = float(torch.trace(xxt) * 3 / (torch.trace(ggt) * 4))
    xd = xxt + math.sqrt(delta * locations * pi) * torch.eye(4, dtype=torch.float64)
    gd = ggt + math.sqrt(delta * locations / pi) * torch.eye(3, dtype=torch.float64)
    inverse = torch.linalg.inv(torch.kron(xd, gd) / locations)
    text = _exact_covariance(monkeypatch, kfac_posterior(factor, delta, covariance="textbook"), 12, _column_major)
    torch.testing.assert_close(text, inverse, rtol=2e-5, atol=1e-7 * float(inverse.abs().max()))
    code = _exact_covariance(monkeypatch, kfac_posterior(factor, delta, covariance="pitfalls"), 12, _column_major)
    np.testing.assert_allclose(np.linalg.eigvalsh(code.numpy()), np.linalg.eigvalsh(inverse.numpy()), rtol=1e-4)
    assert float((code - inverse).abs().max()) > 0.05 * float(inverse.abs().max())


def test_kfac_textbook_sample_covariance_matches_the_inverse_precision():
    """Monte Carlo through the producer's own draw: 10000 samples of a 3 x 4 layer, every covariance entry within
    5 standard errors of the inverse precision (the standard error of a sample covariance from the Gaussian's
    fourth moments, sigma_ij^2 + sigma_ii sigma_jj, over n)."""
    xxt, ggt = _spd(4, 2), _spd(3, 3)
    layer = kfac_posterior({"xxt": xxt, "ggt": ggt, "locations": 1, "bias": True}, 0.3)
    pi = float(torch.trace(xxt) * 3 / (torch.trace(ggt) * 4))
    xd = xxt + math.sqrt(0.3 * pi) * torch.eye(4, dtype=torch.float64)
    gd = ggt + math.sqrt(0.3 / pi) * torch.eye(3, dtype=torch.float64)
    sigma = torch.linalg.inv(torch.kron(xd, gd)).numpy()
    gen = torch.Generator().manual_seed(0)
    n = 10000
    draws = np.stack([noise(layer, gen)[0].double().t().reshape(-1).numpy() for _ in range(n)])
    cov = draws.T @ draws / n
    se = np.sqrt((sigma ** 2 + np.outer(np.diag(sigma), np.diag(sigma))) / n)
    assert np.max(np.abs(cov - sigma) / se) < 5.0


def test_kron_draw_has_the_inverse_of_laplace_torch_precision(monkeypatch):
    """``kron``: the weight block G kron (X_w / N) + delta I (row-major vec W), the bias block G + delta I and no
    weight-bias covariance."""
    xxt, ggt, n = _spd(5, 4), _spd(3, 5), 40
    layer = kron_posterior(kron_eigen({"xxt": xxt, "ggt": ggt, "locations": 1, "bias": True}, n), 0.5)
    precision = torch.block_diag(torch.kron(ggt, xxt[:4, :4] / n), ggt) + 0.5 * torch.eye(15, dtype=torch.float64)
    cov = _exact_covariance(monkeypatch, layer, 15, lambda w, b: torch.cat([w.reshape(-1), b]))
    expected = torch.linalg.inv(precision)  # the draw is float32: agreement to float32 of the largest entry
    torch.testing.assert_close(cov, expected, rtol=1e-4, atol=1e-5 * float(expected.abs().max()))


# -- parity with laplace-torch on a digits MLP ------------------------------------------------------------------
@pytest.fixture(scope="module")
def trained():
    """A digits MLP trained for 3 epochs, its training tensors and a test batch."""
    task = build_task("digits", shift_kinds=(), train_samples=400, test_samples=100)
    cls = load_method("ll_laplace")
    method = cls(cls.resolve_hyperparameters({"epochs": 3}), n_members=2, n_train=len(task.train))
    ctx = TrainContext.create(task, RunSettings(model="mlp", members=2, seed=0, batch_size=64))
    model = ctx.new_model(method, 0)
    opt = method.make_optimizer(model)
    for epoch in range(1, 4):
        train_epoch(model, opt, method, ctx, epoch=epoch, seed=epoch)
    model.eval()
    return method, model, ctx, torch.from_numpy(task.splits["test"].images[:60])


def _laplace_torch(model, ctx, structure, delta):
    laplace = pytest.importorskip("laplace")
    from torch.utils.data import DataLoader, TensorDataset

    from laplace.curvature import BackPackGGN

    # BackPACK's GGN (its default curvlinops backend builds the full matrix from 2000 matrix-vector products)
    la = laplace.Laplace(model, "classification", subset_of_weights="last_layer", hessian_structure=structure,
                         prior_precision=delta, backend=BackPackGGN)
    la.fit(DataLoader(TensorDataset(ctx.x_train, ctx.y_train), batch_size=64))
    return la


def _ours(method, model, ctx, structure, **hp):
    method.hp.update({"structure": structure, "hessian": "ggn", "prior": "search", "scale": 1.0, **hp})
    return method.fit(model, ctx)


@pytest.mark.parametrize("structure", ["kron", "full"])
def test_last_layer_ggn_laplace_matches_laplace_torch(trained, structure):
    """Same MAP, same prior precision: the posterior precision equals laplace-torch's (kron: the Kronecker
    factors' product, rebuilt densely; full: the matrix), and the nn-MC predictive of 300 draws each agrees with
    laplace-torch's within Monte-Carlo error on 60 test images."""
    method, model, ctx, x_test = trained
    delta = float(method.eps)
    la = _laplace_torch(model, ctx, structure, delta)
    posterior = _ours(method, model, ctx, structure)
    assert posterior["prior_precision"] == delta
    layer = dict(model.named_modules())[last_linear_name(model)]
    w = layer.weight
    c, d = w.shape
    if structure == "full":
        feats, logits = last_layer_inputs(model, layer, ctx.x_train, batch_size=64)
        h = last_layer_curvature(feats, logits, ctx.y_train, hessian="ggn")
        perm = [o * (d + 1) + i for o in range(c) for i in range(d)] + [o * (d + 1) + d for o in range(c)]
        mine = h[perm][:, perm] + delta * torch.eye(c * (d + 1), dtype=torch.float64)
        theirs = la.posterior_precision.double()
    else:
        name = last_linear_name(model)
        f = kfac_factors(model, ctx.x_train, ctx.y_train, batch_size=64, only=name, hessian="ggn")[name]
        mine = torch.block_diag(torch.kron(f["ggt"], f["xxt"][:-1, :-1] / len(ctx.y_train)), f["ggt"])
        mine = mine + delta * torch.eye(len(mine), dtype=torch.float64)
        theirs = la.posterior_precision.to_matrix().double()
    torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-4 * float(theirs.abs().max()))
    k = 300
    with torch.no_grad():
        ours = torch.stack([torch.softmax(method.sample_model(model, posterior, 1.0, seed=s)(x_test).double(), 1)
                            for s in range(k)])
        ref = la.predictive_samples(x_test, pred_type="nn", n_samples=k,
                                    generator=torch.Generator().manual_seed(1)).double()
    se = torch.sqrt(ours.var(0) / k + ref.var(0) / k) + 1e-6
    z = ((ours.mean(0) - ref.mean(0)).abs() / se).numpy()
    assert np.quantile(z, 0.99) < 3.5 and z.max() < 6.0, (np.quantile(z, 0.99), z.max())
    # The draws are not the MAP: the predictive moves, so the check above is not trivially met.
    assert float(ours.var(0).mean()) > 1e-5


@pytest.mark.parametrize("structure", ["kron", "full"])
def test_marginal_likelihood_matches_laplace_torch_and_the_producer_takes_its_maximum(trained, structure):
    """Our log marginal likelihood equals laplace-torch's at three prior precisions, and the producer's
    ``prior=marglik`` records the maximum of that function (bounded Brent), which no precision on a fine grid beats."""
    method, model, ctx, _ = trained
    la = _laplace_torch(model, ctx, structure, 1.0)
    posterior = _ours(method, model, ctx, structure, prior="marglik")
    log_lik, sq_norm, n_params, eigens = _marglik_terms(model, ctx, structure)
    for delta in (0.1, 3.0, 40.0):
        mine = log_marginal_likelihood(log_lik, sq_norm, n_params, eigens, delta)
        theirs = float(la.log_marginal_likelihood(prior_precision=torch.tensor([delta])))
        assert mine == pytest.approx(theirs, rel=1e-5, abs=1e-3)
    grid = np.exp(np.linspace(np.log(1e-3), np.log(1e4), 400))
    best = max(log_marginal_likelihood(log_lik, sq_norm, n_params, eigens, d) for d in grid)
    assert posterior["log_marginal_likelihood"] >= best - 1e-6
    assert posterior["log_marginal_likelihood"] == pytest.approx(
        log_marginal_likelihood(log_lik, sq_norm, n_params, eigens, posterior["prior_precision"]), rel=1e-12)


def test_marglik_optimum_agrees_with_laplace_torch_optimisation(trained):
    """laplace-torch's own optimisation (300 Adam steps on log delta, scalar prior) lands where ours does."""
    method, model, ctx, _ = trained
    la = _laplace_torch(model, ctx, "kron", 1.0)
    la.optimize_prior_precision(pred_type="nn", method="marglik", prior_structure="scalar", n_steps=300, lr=0.1)
    delta_mine, value_mine = optimise_prior_precision(*_marglik_terms(model, ctx, "kron"))
    assert value_mine >= float(la.log_marginal_likelihood()) - 1e-6 * abs(value_mine)
    assert math.log(delta_mine) == pytest.approx(math.log(float(la.prior_precision)), abs=0.05)


def _marglik_terms(model, ctx, structure):
    """(training log-likelihood at the MAP, squared norm and count of the last layer's parameters, eigens)."""
    name = last_linear_name(model)
    layer = dict(model.named_modules())[name]
    params = torch.cat([layer.weight.detach().double().reshape(-1), layer.bias.detach().double()])
    if structure == "full":
        feats, logits = last_layer_inputs(model, layer, ctx.x_train, batch_size=64)
        eigens = [torch.linalg.eigvalsh(last_layer_curvature(feats, logits, ctx.y_train, hessian="ggn"))]
    else:
        f = kfac_factors(model, ctx.x_train, ctx.y_train, batch_size=64, only=name, hessian="ggn")[name]
        eigens = [kron_eigen(f, len(ctx.y_train))]
    with torch.no_grad():
        log_lik = -float(torch.nn.functional.cross_entropy(model(ctx.x_train).double(), ctx.y_train,
                                                           reduction="sum"))
    return log_lik, float(params @ params), len(params), eigens


def test_full_posterior_draw_has_the_inverse_precision(monkeypatch):
    h = _spd(6, 7)
    layer = full_posterior(h, 0.2, shape=(2, 3))
    cov = _exact_covariance(monkeypatch, layer, 6, lambda w, b: w.reshape(-1))
    expected = torch.linalg.inv(h + 0.2 * torch.eye(6, dtype=torch.float64))
    torch.testing.assert_close(cov, expected, rtol=1e-4, atol=1e-5 * float(expected.abs().max()))
    w, b = noise(layer, torch.Generator().manual_seed(0))
    assert w.shape == (2, 3) and b is None


def test_refusals_name_the_hyperparameter():
    kfac, ll = load_method("kfac_laplace"), load_method("ll_laplace")
    with pytest.raises(ValueError, match="full is for ll_laplace"):
        kfac.resolve_hyperparameters({"structure": "full"})
    with pytest.raises(ValueError, match="covariance=pitfalls"):
        ll.resolve_hyperparameters({"structure": "kron", "covariance": "pitfalls"})
    with pytest.raises(ValueError, match="prior=marglik needs structure"):
        ll.resolve_hyperparameters({"prior": "marglik"})
    with pytest.raises(ValueError, match="hessian"):
        ll.resolve_hyperparameters({"hessian": "hessian"})
    assert ll.resolve_hyperparameters({"structure": "full", "prior": "marglik"})["structure"] == "full"


def test_kron_refuses_convolutions():
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(2 * 6 * 6, 3))
    x, y = torch.randn(10, 1, 8, 8), torch.randint(0, 3, (10,))
    f = kfac_factors(model, x, y, batch_size=5)
    with pytest.raises(ValueError, match="structure=kron covers linear layers"):
        kron_eigen(f["0"], 10)
