# SPDX-License-Identifier: MIT
"""The peers' methods of issue #31 against independent oracles.

torch-uncertainty (the Packed-Ensembles authors' library, whose BatchEnsemble layers follow edward2) on the same
weights for BatchEnsemble, Packed-Ensembles and MC batch norm, and its ``DECLoss`` for the evidential loss;
numpy/scipy closed forms for the spectral-norm bound, SNGP's GP variance and DDU's Gaussian densities; and the
archives the methods write, checked against relations between what they store (vacuity = K / sum(exp(logits))).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats
from scipy.special import logsumexp

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from ubench.archive_schema import read_archive  # noqa: E402
from ubench.producers.archive_run import produce_archive  # noqa: E402
from ubench.producers.ddu import JITTERS, fit_gda, gda_log_density  # noqa: E402
from ubench.producers.efficient_ensembles import MIMO  # noqa: E402
from ubench.producers.ensemble_layers import (BatchConv2d, BatchLinear, PackedLinear, set_member,  # noqa: E402
                                              to_packed)
from ubench.producers.evidential import evidential_loss  # noqa: E402
from ubench.producers.mc_batchnorm import batch_statistics, insert_batchnorm  # noqa: E402
from ubench.producers.models import build_model  # noqa: E402
from ubench.producers.sngp import RandomFeatureGP  # noqa: E402
from ubench.producers.spectral_norm import BoundedSpectralNorm, bound_spectral_norms  # noqa: E402
from ubench.producers.task import build_task  # noqa: E402
from ubench.producers.torch_trainer import RunSettings  # noqa: E402

torch.set_num_threads(1)
tu_layers = pytest.importorskip("torch_uncertainty.layers")


def test_batch_ensemble_layers_equal_torch_uncertainty():
    """BatchLinear and BatchConv2d on member-major blocks equal torch-uncertainty's with the same W, r, s, b; a
    single member's call equals its block."""
    torch.manual_seed(0)
    m, b = 3, 4
    lin = BatchLinear(nn.Linear(6, 5), m)
    ref = tu_layers.BatchLinear(6, 5, m)
    conv = BatchConv2d(nn.Conv2d(2, 4, 3, padding=1), m)
    ref_conv = tu_layers.BatchConv2d(2, 4, 3, m, padding=1)
    with torch.no_grad():
        ref.linear.weight.copy_(lin.weight)
        ref_conv.conv.weight.copy_(conv.conv.weight)
        for ours, theirs in ((lin, ref), (conv, ref_conv)):
            theirs.r_group.copy_(ours.r)
            theirs.s_group.copy_(ours.s)
            theirs.bias.copy_(ours.bias)
    x, xc = torch.randn(m * b, 6), torch.randn(m * b, 2, 5, 5)
    torch.testing.assert_close(lin(x), ref(x), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(conv(xc), ref_conv(xc), rtol=1e-5, atol=1e-5)
    lin.member = 1
    torch.testing.assert_close(lin(x[b:2 * b]), ref(x)[b:2 * b], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_packed_linear_equals_torch_uncertainty(where):
    """PackedLinear (grouped, alpha = 2, M = 4, gamma = 2) and the last layer's member-major reordering equal
    torch-uncertainty's PackedLinear on the same weights."""
    torch.manual_seed(1)
    m, alpha, gamma = 4, 2, 2
    first, last = where == "first", where == "last"
    ref = tu_layers.PackedLinear(16, 8 if last else 16, alpha, m, gamma=gamma, first=first, last=last)
    net = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 8))
    to_packed(net, m, alpha, gamma)
    ours = {"first": net[0], "middle": net[2], "last": net[4]}[where]
    layer = ours.layer if last else ours
    assert isinstance(layer, PackedLinear) and layer.weight.shape == ref.weight.shape
    with torch.no_grad():
        layer.weight.copy_(ref.weight)
        layer.bias.copy_(ref.bias)
    x = torch.randn(5, 16 if first else 32)
    torch.testing.assert_close(ours(x), ref(x), rtol=1e-5, atol=1e-5)


def test_packed_conv_equals_torch_uncertainty():
    torch.manual_seed(2)
    m, alpha = 2, 2
    ref = tu_layers.PackedConv2d(4, 6, 3, alpha, m, padding=1)
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.Conv2d(4, 6, 3, padding=1), nn.Flatten(),
                        nn.Linear(6 * 25, 3))
    to_packed(net, m, alpha, 1)
    ours = net[1]
    assert ours.groups == ref.conv.groups and ours.weight.shape == ref.conv.weight.shape
    with torch.no_grad():
        ours.weight.copy_(ref.conv.weight)
        ours.bias.copy_(ref.conv.bias)
    x = torch.randn(3, 8, 5, 5)
    torch.testing.assert_close(ours(x), ref(x), rtol=1e-5, atol=1e-5)
    assert net(torch.randn(3, 1, 5, 5)).shape == (m * 3, 3)  # Flatten of grouped channels feeds the packed head


def test_mc_batchnorm_statistics_equal_torch_uncertainty():
    """For the same training batches, a member with ubench's batch statistics predicts what torch-uncertainty's
    MCBatchNorm estimator predicts (mean and unbiased variance of each layer's input, layer by layer)."""
    from torch.utils.data import DataLoader, TensorDataset
    from torch_uncertainty.post_processing import MCBatchNorm

    torch.manual_seed(3)
    model = build_model("resnet20", (1, 8, 8), 10, mean=0.5, std=0.3).eval()
    train = torch.rand(64, 1, 8, 8)
    x = torch.rand(7, 1, 8, 8)
    ref = MCBatchNorm(model, num_estimators=3, mc_batch_size=16)
    ref.fit(DataLoader(TensorDataset(train, torch.zeros(64, dtype=torch.long)), batch_size=16))
    with torch.no_grad():
        theirs = ref(x).reshape(3, 7, 10)
        for k in range(3):
            import copy

            member = batch_statistics(copy.deepcopy(model), train[16 * k: 16 * (k + 1)])
            torch.testing.assert_close(member(x), theirs[k], rtol=1e-4, atol=1e-5)
    assert not torch.allclose(theirs[0], theirs[1])


def test_insert_batchnorm_puts_one_after_each_hidden_layer():
    mlp = insert_batchnorm(build_model("mlp", (1, 8, 8), 10, mean=0.5, std=0.3))
    kinds = [type(layer).__name__ for layer in mlp.net]
    assert kinds == ["Flatten", "Linear", "BatchNorm1d", "ReLU", "Linear", "BatchNorm1d", "ReLU", "Linear"]
    lenet = insert_batchnorm(build_model("lenet", (1, 8, 8), 10, mean=0.5, std=0.3))
    assert sum(isinstance(m, nn.BatchNorm2d) for m in lenet.modules()) == 2
    assert sum(isinstance(m, nn.BatchNorm1d) for m in lenet.modules()) == 1


@pytest.mark.parametrize("loss_type", ["mse", "log", "digamma"])
def test_evidential_loss_equals_torch_uncertainty_dec_loss(loss_type):
    """Sensoy et al.'s loss with the KL term annealed by min(1, t / 10) equals torch-uncertainty's DECLoss with
    annealing_step = 10 at epoch t (before, during and after the annealing)."""
    from torch_uncertainty.losses import DECLoss

    torch.manual_seed(4)
    z = torch.randn(20, 5, dtype=torch.float64) * 3
    y = torch.randint(0, 5, (20,))
    ref = DECLoss(annealing_step=10, loss_type=loss_type)
    for t in (0, 3, 10, 25):
        ours = evidential_loss(z, y, min(1.0, t / 10), loss_type)
        torch.testing.assert_close(ours, ref(z, y, current_epoch=t), rtol=1e-10, atol=1e-10)


def test_mimo_batch_format_follows_the_reference():
    """Each member gets the batch repeated ``batch_repetitions`` times in its own order (labels follow their
    images); with input_repetition_probability 1 every member gets the same order."""
    method = MIMO({**MIMO.defaults, "batch_repetitions": 2}, n_members=3, n_train=10)
    x = torch.arange(5, dtype=torch.float32)[:, None, None, None].expand(5, 1, 2, 2).clone()
    y = torch.arange(5)
    xs, ys = method.format_batch(x, y, torch.Generator().manual_seed(0))
    assert xs.shape == (10, 3, 2, 2) and ys.shape == (30,)
    for k in range(3):
        assert sorted(ys[10 * k: 10 * (k + 1)].tolist()) == sorted(list(range(5)) * 2)
        torch.testing.assert_close(xs[:, k, 0, 0], ys[10 * k: 10 * (k + 1)].float())
    assert not torch.equal(ys[:10], ys[10:20])
    same = MIMO({**MIMO.defaults, "input_repetition_probability": 1.0}, n_members=3, n_train=10)
    _, ys = same.format_batch(x, y, torch.Generator().manual_seed(0))
    assert torch.equal(ys[:20], ys[20:40]) and torch.equal(ys[:20], ys[40:])


def test_bounded_spectral_norm_caps_the_largest_singular_value():
    """After enough power steps the effective weight's largest singular value (numpy's SVD) is the bound when the
    weight's exceeds it, and the weight is unchanged when it does not."""
    torch.manual_seed(5)
    big, small = nn.Linear(30, 20), nn.Linear(30, 20)
    with torch.no_grad():
        big.weight.mul_(20.0)
        small.weight.mul_(0.01)
    bound_spectral_norms([big, small], bound=2.0, iterations=1)
    big.train(), small.train()
    for _ in range(50):
        big(torch.zeros(1, 30)), small(torch.zeros(1, 30))
    big.eval(), small.eval()
    assert np.linalg.norm(big.weight.detach().numpy(), 2) == pytest.approx(2.0, rel=1e-4)
    raw = small.parametrizations.weight.original.detach().numpy()
    np.testing.assert_allclose(small.weight.detach().numpy(), raw, rtol=0, atol=0)
    conv = BoundedSpectralNorm(torch.randn(4, 3, 3, 3), 1.0)
    assert conv.u.shape == (4,) and conv.v.shape == (27,)


def test_sngp_variance_and_mean_field_logits_equal_the_closed_form():
    """v = s phi^T (s I + Phi^T Phi)^{-1} phi over the features the layer saw while accumulating, and the logits
    are z / sqrt(1 + lambda v): computed with numpy from the layer's own features."""
    torch.manual_seed(6)
    gp = RandomFeatureGP(12, 4, input_dim=6, n_features=40, ridge=0.7, mean_field=3.0, normalize=True, seed=1)
    train = [torch.randn(25, 12) for _ in range(3)]
    gp.train()
    gp.accumulate = True
    with torch.no_grad():
        for batch in train:
            gp(batch)
    gp.accumulate = False
    gp.eval()
    x = torch.randn(9, 12)
    with torch.no_grad():
        out = gp(x).double().numpy()
        phi_train = torch.cat([gp.features(b) for b in train]).double().numpy()
        phi = gp.features(x).double().numpy()
        z = gp.beta(gp.features(x)).double().numpy()
    precision = 0.7 * np.eye(40) + phi_train.T @ phi_train
    v = 0.7 * np.einsum("ij,ij->i", phi, np.linalg.solve(precision, phi.T).T)
    np.testing.assert_allclose(gp.last_variance.numpy(), v, rtol=1e-8)
    np.testing.assert_allclose(out, z / np.sqrt(1 + 3.0 * v)[:, None], rtol=1e-5)


def test_sngp_random_features_approximate_the_reference_rbf_kernel():
    """The features of uncertainty-baselines' GP layer (ORF rows of standard deviation 0.05 on the layer-normed
    projection z) estimate the RBF kernel by Bochner's theorem: (2 / D) phi(h)^T phi(h') ~ exp(-0.05^2 |z - z'|^2 / 2),
    with z computed here in numpy. Pairs at several distances up to opposite z (|z - z'| = 2 sqrt(128)), so the kernel
    spans ~0.5 to ~1; unit-variance rows give a kernel near 0 for all but the nearest pair."""
    torch.manual_seed(3)
    gp = RandomFeatureGP(200, 10, input_dim=128, n_features=4096, ridge=1.0, mean_field=25.0, normalize=True, seed=2)
    h = torch.randn(8, 200).abs()  # ReLU-like penultimate features
    h2 = h + torch.linspace(0.05, 3.0, 8)[:, None] * torch.randn(8, 200)
    h2[-1] = -h[-1]
    with torch.no_grad():
        estimate = (2.0 / 4096) * (gp.features(h) * gp.features(h2)).sum(dim=1).double().numpy()

    def layer_norm(u):
        u = u.double().numpy() @ gp.projection.double().numpy().T
        return (u - u.mean(1, keepdims=True)) / np.sqrt(u.var(1, keepdims=True) + 1e-3)

    distance = np.linalg.norm(layer_norm(h) - layer_norm(h2), axis=1)
    kernel = np.exp(-0.05**2 * distance**2 / 2)
    assert kernel.min() < 0.6 and kernel.max() > 0.95
    np.testing.assert_allclose(estimate, kernel, atol=0.03)


def test_sngp_trains_on_fashion_mnist_pixels(tmp_path):
    """784 inputs, 400 training images, 8 epochs at the defaults' lr: the reference's feature scale learns (test
    accuracy ~0.7 for seeds 0-3); unit-variance random features made SGD diverge to chance (0.14-0.25 there, 0.10 on
    the full Fashion-MNIST table)."""
    task = build_task("fashion-mnist", ood=("uniform",), shift_kinds=(), train_samples=400, test_samples=500,
                      ood_samples=50)
    settings = RunSettings(model="mlp", members=1, seed=0, batch_size=16)
    a = read_archive(produce_archive("sngp", task, tmp_path / "sngp.h5", settings=settings, hyper={"epochs": 8},
                                     threads=1))
    accuracy = (a.probs["test"][0].argmax(1) == a.labels["test"]).mean()
    assert accuracy > 0.6, accuracy


def test_ddu_density_equals_scipy_gaussians():
    rng = np.random.default_rng(7)
    z = torch.from_numpy(rng.normal(size=(90, 4)) + np.repeat(np.arange(3), 30)[:, None])
    y = torch.from_numpy(np.repeat(np.arange(3), 30))
    means, chol, jitter = fit_gda(z, y, 3)
    assert jitter == 0.0
    x = rng.normal(size=(11, 4))
    ours = gda_log_density(torch.from_numpy(x), means, chol).numpy()
    per_class = [scipy.stats.multivariate_normal(z[y == c].mean(0).numpy(), np.cov(z[y == c].numpy(), rowvar=False)
                                                 ).logpdf(x) for c in range(3)]
    np.testing.assert_allclose(ours, logsumexp(per_class, axis=0), rtol=1e-10)


def test_ddu_jitter_is_the_first_that_makes_the_covariances_positive_definite():
    """A feature constant within a class makes that covariance singular: the reference's jitter list is walked
    until every class's Cholesky succeeds, and the previous entry fails."""
    rng = np.random.default_rng(8)
    z = rng.normal(size=(40, 3))
    z[:20, 2] = 1.0  # class 0 has zero variance along feature 2
    y = torch.from_numpy(np.repeat([0, 1], 20))
    _, _, jitter = fit_gda(torch.from_numpy(z), y, 2)
    assert jitter > 0
    before = JITTERS[JITTERS.index(jitter) - 1]
    cov0 = np.cov(z[:20], rowvar=False)
    assert torch.linalg.cholesky_ex(torch.from_numpy(cov0 + before * np.eye(3)))[1] != 0


@pytest.fixture(scope="module")
def task():
    return build_task("digits", shift_kinds=(), train_samples=300, test_samples=80, ood_samples=40)


def _produce(task, tmp_path, method, members, hyper):
    settings = RunSettings(model="mlp", members=members, seed=0, batch_size=64, logits=True)
    return read_archive(produce_archive(method, task, tmp_path / f"{method}.h5", settings=settings, hyper=hyper,
                                        threads=1))


def test_evidential_archive_stores_vacuity_of_its_logits(task, tmp_path):
    """The archive's logits are log(alpha) and its vacuity K / S: so vacuity = K / sum(exp(logits)) sample by
    sample, and the probabilities are alpha / S."""
    a = _produce(task, tmp_path, "evidential", 1, {"epochs": 3})
    for split in a.probs:
        s = np.exp(a.logits[split][0].astype(np.float64)).sum(axis=1)
        np.testing.assert_allclose(a.scores[split]["vacuity"], 10 / s, rtol=1e-5)
        assert (a.logits[split] >= 0).all()  # alpha >= 1
    assert a.splits["test"].scores == {"vacuity": "uncertainty"}


def test_sngp_and_ddu_write_their_scores_and_score_reports_them(task, tmp_path):
    from ubench.scoring.score import score_archive

    for method, score, direction in (("sngp", "variance", "uncertainty"), ("ddu", "log_density", "confidence")):
        hyper = {"epochs": 2, **({"gp_hidden_dim": 64} if method == "sngp" else {})}
        a = _produce(task, tmp_path, method, 1, hyper)
        assert a.splits["ood_uniform"].scores == {score: direction}
        report = score_archive(tmp_path / f"{method}.h5")
        row = report["method_scores"][score]
        assert row["method_specific"] is True and row["direction"] == direction and 0 <= row["ood_auroc"] <= 1
        assert report["method_scores"]["energy"]["method_specific"] is False
    assert (a.scores["test"]["log_density"] > a.scores["ood_uniform"]["log_density"].mean()).mean() > 0.5
