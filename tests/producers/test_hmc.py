# SPDX-License-Identifier: MIT
"""HMC: the sampler against targets with known moments, the integrator's invariants, and the producer on digits."""

import math
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ubench.archive_schema import read_archive  # noqa: E402
from ubench.producers import member_loop  # noqa: E402
from ubench.producers.archive_run import produce_archive  # noqa: E402
from ubench.producers.hmc import HMC, URSABENCH_PRESET, log_posterior_fn  # noqa: E402
from ubench.producers.hmc_sampler import (  # noqa: E402
    DualAveraging, HMCState, hmc_transition, leapfrog, n_leapfrog_steps,
)
from ubench.producers.task import build_task  # noqa: E402
from ubench.producers.torch_trainer import RunSettings  # noqa: E402

pytestmark = pytest.mark.torch

# A correlated 3-D Gaussian: U = (x - mu)' P (x - mu) / 2 with P = inv(S).
MU = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
S = torch.tensor([[1.0, 0.6, 0.0], [0.6, 2.0, -0.3], [0.0, -0.3, 0.5]], dtype=torch.float64)
P = torch.linalg.inv(S)


def gaussian(theta):
    d = theta - MU
    return 0.5 * d @ P @ d, P @ d


def banana(theta, b=0.5):
    """x1 ~ N(0, 1), x2 | x1 ~ N(b x1^2, 1): E x2 = b, Var x2 = 1 + 2 b^2, Var x1 = 1, Cov(x1, x2) = 0."""
    x1, x2 = theta[0], theta[1]
    r = x2 - b * x1 ** 2
    u = 0.5 * x1 ** 2 + 0.5 * r ** 2
    return u, torch.stack([x1 - 2 * b * x1 * r, r])


def run_chain(target, start, n, *, step, n_steps, seed, mass=1.0):
    gen = torch.Generator().manual_seed(seed)
    state = HMCState.at(start, target)
    xs, acc = [], []
    for _ in range(n):
        state, info = hmc_transition(state, target, step_size=step, n_steps=n_steps, mass=mass, generator=gen)
        xs.append(state.theta)
        acc.append(info.accept_prob)
    return torch.stack(xs).numpy(), np.array(acc)


def batch_means_se(x, n_batches=40):
    """Monte-Carlo standard error of the mean of each column by non-overlapping batch means."""
    b = np.array_split(x, n_batches)
    means = np.stack([c.mean(0) for c in b])
    return means.std(0, ddof=1) / math.sqrt(n_batches)


@pytest.mark.parametrize("mass", [1.0, 2.5])
def test_gaussian_moments_within_monte_carlo_error(mass):
    # Time T = step * n_steps / mass stays far from half a period (pi * sd) of every eigendirection, where HMC would
    # only flip signs.
    xs, acc = run_chain(gaussian, torch.zeros(3, dtype=torch.float64), 8000, step=0.2 * mass, n_steps=6, seed=1,
                        mass=mass)
    xs = xs[500:]
    se = batch_means_se(xs)
    z = np.abs(xs.mean(0) - MU.numpy()) / se
    assert np.all(z < 4.5), (xs.mean(0), se)
    cov = np.cov(xs.T)
    # Covariance: batch-means error of each second moment, same 4.5-sigma rule.
    for i in range(3):
        for j in range(3):
            prod = (xs[:, i] - xs[:, i].mean()) * (xs[:, j] - xs[:, j].mean())
            assert abs(cov[i, j] - S[i, j].item()) < 4.5 * batch_means_se(prod[:, None])[0] + 1e-3, (i, j, cov)
    assert 0.5 < acc.mean() < 1.0


def test_banana_moments_within_monte_carlo_error():
    xs, _ = run_chain(banana, torch.zeros(2, dtype=torch.float64), 12000, step=0.2, n_steps=10, seed=2)
    xs = xs[500:]
    b = 0.5
    mean_se = batch_means_se(xs)
    assert abs(xs[:, 0].mean()) < 4.5 * mean_se[0]
    assert abs(xs[:, 1].mean() - b) < 4.5 * mean_se[1]
    var_se = batch_means_se((xs - xs.mean(0)) ** 2)
    assert abs(xs[:, 0].var() - 1.0) < 4.5 * var_se[0]
    assert abs(xs[:, 1].var() - (1 + 2 * b * b)) < 4.5 * var_se[1]


def test_leapfrog_is_reversible():
    theta0 = torch.tensor([0.3, -1.0, 2.0], dtype=torch.float64)
    p0 = torch.tensor([1.0, 0.5, -0.7], dtype=torch.float64)
    _, g0 = gaussian(theta0)
    theta1, p1, _, g1 = leapfrog(theta0, p0, g0, gaussian, step_size=0.1, n_steps=25, inv_mass=1.0)
    theta2, p2, _, _ = leapfrog(theta1, -p1, g1, gaussian, step_size=0.1, n_steps=25, inv_mass=1.0)
    np.testing.assert_allclose(theta2.numpy(), theta0.numpy(), atol=1e-12)
    np.testing.assert_allclose(-p2.numpy(), p0.numpy(), atol=1e-12)


def test_energy_error_is_second_order_and_acceptance_tends_to_one():
    """Leapfrog's global energy error over a fixed trajectory length is O(step^2): halving the step divides it by
    about 4, and acceptance tends to 1 as the step tends to 0."""
    theta0 = torch.tensor([0.3, -1.0, 2.0], dtype=torch.float64)
    p0 = torch.tensor([1.0, 0.5, -0.7], dtype=torch.float64)
    u0, g0 = gaussian(theta0)
    errors = []
    for step in (0.08, 0.04, 0.02, 0.01):
        theta, p, u, _ = leapfrog(theta0, p0, g0, gaussian, step_size=step, n_steps=int(round(1.6 / step)),
                                  inv_mass=1.0)
        errors.append(abs(u + 0.5 * float(p @ p) - float(u0) - 0.5 * float(p0 @ p0)))
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    assert np.all((ratios > 3.0) & (ratios < 5.0)), ratios
    accept = [run_chain(gaussian, MU.clone(), 50, step=s, n_steps=int(1.0 / s), seed=3)[1].mean()
              for s in (0.5, 0.1, 0.01)]
    assert accept[0] < accept[1] < accept[2] and accept[2] > 0.999, accept


def test_seeded_chain_is_bit_identical_and_seed_matters():
    a, _ = run_chain(banana, torch.zeros(2, dtype=torch.float64), 200, step=0.2, n_steps=5, seed=7)
    b, _ = run_chain(banana, torch.zeros(2, dtype=torch.float64), 200, step=0.2, n_steps=5, seed=7)
    c, _ = run_chain(banana, torch.zeros(2, dtype=torch.float64), 200, step=0.2, n_steps=5, seed=8)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_divergence_is_rejected():
    state = HMCState.at(torch.zeros(3, dtype=torch.float64), gaussian)
    new, info = hmc_transition(state, gaussian, step_size=50.0, n_steps=20, mass=1.0,
                               generator=torch.Generator().manual_seed(0))
    assert not info.accepted and info.accept_prob == 0.0 and new is state


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_chain_on_cuda_with_a_cpu_or_a_cuda_generator():
    """A chain on CUDA tensors draws from a CPU generator the momenta a CPU chain draws (so the two chains agree to
    float64 rounding), and runs from a CUDA generator too."""
    mu, p = MU.cuda(), P.cuda()

    def gaussian_cuda(theta):
        d = theta - mu
        return 0.5 * d @ p @ d, p @ d

    cpu, _ = run_chain(gaussian, torch.zeros(3, dtype=torch.float64), 50, step=0.2, n_steps=5, seed=3)
    gen = torch.Generator().manual_seed(3)
    state = HMCState.at(torch.zeros(3, dtype=torch.float64, device="cuda"), gaussian_cuda)
    for i in range(50):
        state, _ = hmc_transition(state, gaussian_cuda, step_size=0.2, n_steps=5, mass=1.0, generator=gen)
        assert state.theta.device.type == "cuda"
        np.testing.assert_allclose(state.theta.cpu().numpy(), cpu[i], atol=1e-8)
    gen = torch.Generator(device="cuda").manual_seed(3)
    for _ in range(5):
        state, info = hmc_transition(state, gaussian_cuda, step_size=0.2, n_steps=5, mass=1.0, generator=gen)
        assert state.theta.device.type == "cuda" and 0.0 <= info.accept_prob <= 1.0


def test_dual_averaging_reaches_the_target_acceptance():
    gen = torch.Generator().manual_seed(4)
    state = HMCState.at(torch.zeros(3, dtype=torch.float64), gaussian)
    da = DualAveraging.start(1e-3, target=0.8)
    step = 1e-3
    for _ in range(600):
        n = n_leapfrog_steps(1.5, step, max_steps=500)
        state, info = hmc_transition(state, gaussian, step_size=step, n_steps=n, mass=1.0, generator=gen)
        step = da.update(info.accept_prob)
    final = da.final
    accept = []
    for _ in range(1500):
        state, info = hmc_transition(state, gaussian, step_size=final,
                                     n_steps=n_leapfrog_steps(1.5, final, max_steps=500), mass=1.0, generator=gen)
        accept.append(info.accept_prob)
    assert 0.7 < np.mean(accept) < 0.9, (final, np.mean(accept))


def test_n_leapfrog_steps_keeps_the_trajectory_length():
    assert n_leapfrog_steps(40 * 2e-4, 2e-4, max_steps=200) == 40
    assert n_leapfrog_steps(1.0, 0.3, max_steps=200) == 4
    assert n_leapfrog_steps(1.0, 1e-6, max_steps=200) == 200
    assert n_leapfrog_steps(1e-9, 1.0, max_steps=200) == 1


def test_network_potential_matches_a_hand_computation():
    """U(theta) = sum of cross-entropies + tau/2 |theta|^2 and its gradient, against autograd on the module."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3)).double()
    x = torch.randn(20, 4, dtype=torch.float64)
    y = torch.randint(0, 3, (20,))
    target = log_posterior_fn(model, x, y, prior_precision=7.0)
    theta = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    u, g = target(theta)
    logp = torch.log_softmax(model(x), 1)[torch.arange(20), y]
    expected = -logp.sum() + 3.5 * sum((p ** 2).sum() for p in model.parameters())
    expected.backward()
    grad = torch.cat([p.grad.flatten() for p in model.parameters()])
    assert abs(float(u) - float(expected.detach())) < 1e-10
    np.testing.assert_allclose(g.numpy(), grad.numpy(), atol=1e-10)


@pytest.fixture(scope="module")
def digits_task():
    return build_task("digits", shift_kinds=("rotate",), train_samples=300, test_samples=120, shift_samples=30)


def _produce(task, out, device="auto", **hyper):
    settings = RunSettings(model="mlp", members=3, seed=5, device=device)
    hp = {"burn_in": 12, "thin": 2, **hyper}
    return produce_archive("hmc", task, out, settings=settings, hyper=hp, threads=1)


def test_hmc_producer_writes_samples_with_their_diagnostics(digits_task, tmp_path):
    a = read_archive(_produce(digits_task, tmp_path / "hmc.h5", preset="ursabench"))
    assert a.method == "hmc" and len(a.members) == 3
    assert {m.kind for m in a.members} == {"posterior_sample"}
    assert [m.epoch for m in a.members] == [14, 16, 18]
    for m in a.members:
        info = m.info
        assert set(info) >= {"step_size", "n_leapfrog", "trajectory_length", "acceptance_rate", "energy_error",
                             "log_posterior"}
        assert 0.0 <= info["acceptance_rate"] <= 1.0
        # fixed trajectory length: L = ceil(length / step), at most max_leapfrog (closed form, not the helper)
        expected = min(math.ceil(URSABENCH_PRESET["trajectory_length"] / info["step_size"]), 200)
        assert info["n_leapfrog"] == expected
        assert info["trajectory_length"] == pytest.approx(info["step_size"] * expected)
    # After burn-in the step size is frozen: every member used the same one.
    assert len({m.info["step_size"] for m in a.members}) == 1
    test = a.probs["test"]
    assert (test.mean(0).argmax(1) == a.labels["test"]).mean() > 0.2  # ten classes; 18 iterations from init
    assert np.abs(test[0] - test[2]).max() > 1e-4


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_hmc_producer_on_cuda(digits_task, tmp_path):
    """``ubench produce hmc --device cuda``: the chain, its checkpoints and the predictions run on the GPU."""
    a = read_archive(_produce(digits_task, tmp_path / "hmc.h5", device="cuda"))
    assert len(a.members) == 3 and [m.epoch for m in a.members] == [14, 16, 18]
    assert all(0.0 <= m.info["acceptance_rate"] <= 1.0 for m in a.members)
    assert all(np.isfinite(p).all() for p in a.probs.values())
    assert str(a.scalability["device"]).startswith("cuda")


@pytest.mark.parametrize("hyper", [{}, {"burn_in": 24, "sampler": "nuts", "max_tree_depth": 5}],
                         ids=["hmc", "nuts-with-mass-window"])
def test_hmc_producer_resumes_bit_identically(digits_task, tmp_path, monkeypatch, hyper):
    """A run interrupted at iteration 16 resumes from its checkpoint and gives exactly the archive of an
    uninterrupted run: after a member was written (burn-in 12), and inside Stan's mass-matrix window (burn-in 24:
    the window is iterations 3..21, its running variance is in the checkpoint)."""
    full = read_archive(_produce(digits_task, tmp_path / "full.h5", **hyper))
    original = HMC.run_epoch
    calls = {"n": 0}

    def failing(self, *args, epoch, **kwargs):
        if epoch == 16 and calls["n"] == 0:
            calls["n"] += 1
            raise KeyboardInterrupt
        return original(self, *args, epoch=epoch, **kwargs)

    monkeypatch.setattr(HMC, "run_epoch", failing)
    with pytest.raises(KeyboardInterrupt):
        _produce(digits_task, tmp_path / "cut.h5", **hyper)
    assert (tmp_path / "cut.h5.partial").exists()
    resumed = read_archive(_produce(digits_task, tmp_path / "cut.h5", **hyper))
    for name in full.probs:
        np.testing.assert_array_equal(resumed.probs[name], full.probs[name])
    assert [m.info for m in resumed.members] == [m.info for m in full.members]


def test_hmc_producer_evaluates_the_target_l_times_per_iteration(digits_task, tmp_path, monkeypatch):
    """The end point of a transition carries its potential and gradient into the next one: a run of T iterations
    of L leapfrog steps evaluates the network T * L + 1 times (the + 1 at the start), not T * (L + 1)."""
    from ubench.producers import hmc as hmc_module

    calls = {"n": 0}
    original = hmc_module.log_posterior_fn

    def counting(*args, **kwargs):
        fn = original(*args, **kwargs)

        def wrapped(theta):
            calls["n"] += 1
            return fn(theta)

        return wrapped

    monkeypatch.setattr(hmc_module, "log_posterior_fn", counting)
    step = URSABENCH_PRESET["step_size"]
    _produce(digits_task, tmp_path / "hmc.h5", preset="ursabench", adapt_step_size=False,
             trajectory_length=3 * step)
    iterations = 12 + 3 * 2  # burn_in + members * thin
    assert calls["n"] == iterations * 3 + 1


@pytest.mark.slow
@pytest.mark.skipif(not any(shutil.which(c) for c in ("c++", "g++", "clang++")),
                    reason="torch.compile on the CPU needs a C++ compiler")
def test_compiled_target_agrees_with_eager_on_the_digits_mlp(digits_task):
    """``compile=True`` changes kernels, not the target: the same U and gradient to float32 tolerance."""
    from ubench.producers.models import build_model

    torch.manual_seed(0)
    t = digits_task
    model = build_model("mlp", t.input_shape, t.n_classes, mean=t.mean, std=t.std, dropout="none", p=0.0)
    x, y = torch.from_numpy(t.train.images), torch.from_numpy(t.train.labels)
    theta = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    u0, g0 = log_posterior_fn(model, x, y, prior_precision=100.0)(theta)
    u1, g1 = log_posterior_fn(model, x, y, prior_precision=100.0, compile=True)(theta)
    assert float(u1) == pytest.approx(float(u0), rel=1e-6)
    np.testing.assert_allclose(g1.numpy(), g0.numpy(), rtol=1e-4, atol=1e-4 * float(g0.abs().max()))


def test_presets_and_sampler_are_resolved_and_checked():
    """``preset=ursabench`` is URSABench's HMC_BO.json run as before issue #30 (scalar mass, fixed trajectory, 300
    iterations of which 200 burn-in); explicit values win over the preset; unknown names are refused."""
    ursa = HMC.resolve_hyperparameters({"preset": "ursabench"})
    assert ursa == {**HMC.defaults, **URSABENCH_PRESET, "preset": "ursabench"}
    assert (ursa["step_size"], ursa["mass"], ursa["burn_in"], ursa["adapt_mass"], ursa["jitter"]) == (
        0.00020897435024380684, 0.1919177919626236, 200, False, 0.0)
    assert ursa["trajectory_length"] == pytest.approx(40 * ursa["step_size"])
    assert HMC.resolve_hyperparameters({"preset": "ursabench", "thin": 3})["thin"] == 3
    assert HMC.resolve_hyperparameters({})["adapt_mass"] is True
    with pytest.raises(ValueError, match="preset must be one of"):
        HMC.resolve_hyperparameters({"preset": "stan"})
    with pytest.raises(ValueError, match="sampler must be one of"):
        HMC.resolve_hyperparameters({"sampler": "mala"})
    with pytest.raises(ValueError, match="jitter"):
        HMC.resolve_hyperparameters({"jitter": 1.5})


def test_nuts_producer_records_its_trees(digits_task, tmp_path):
    a = read_archive(_produce(digits_task, tmp_path / "nuts.h5", sampler="nuts", max_tree_depth=4))
    for m in a.members:
        assert m.info["sampler"] == "nuts" and 1 <= m.info["tree_depth"] <= 4
        assert 1 <= m.info["n_leapfrog"] <= 15
    assert a.members[-1].info["leapfrog_total"] > a.members[0].info["leapfrog_total"]
    assert a.config["hyperparameters"]["sampler"] == "nuts"


def test_chain_starts_from_a_prior_draw_or_the_networks_initialisation(digits_task, tmp_path, monkeypatch):
    """``init=prior`` (the default) starts the chain at theta ~ N(0, 1/tau): sample sd 1/sqrt(tau) = 0.1 over the
    MLP's 55,000 weights, mean 0; ``init=model`` keeps torch's initialisation (uniform, sd well below 0.1)."""
    from ubench.producers import hmc as hmc_module

    starts = {}
    original = hmc_module.chain_step

    def spy(current, target, state, settings, *, t, seed):
        starts.setdefault("theta", current.theta.clone())
        return original(current, target, state, settings, t=t, seed=seed)

    monkeypatch.setattr(hmc_module, "chain_step", spy)
    _produce(digits_task, tmp_path / "prior.h5", burn_in=2, thin=1, trajectory_length=0.01)
    prior = starts.pop("theta").double()
    assert abs(float(prior.std()) - 0.1) < 0.002 and abs(float(prior.mean())) < 0.002
    _produce(digits_task, tmp_path / "model.h5", burn_in=2, thin=1, trajectory_length=0.01, init="model")
    assert float(starts["theta"].double().std()) < 0.06
