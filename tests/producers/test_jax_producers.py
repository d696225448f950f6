# SPDX-License-Identifier: MIT
"""JAX producers: the same network and schedule as torch, archives through the same writer, resumption."""

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("optax")
pytest.importorskip("blackjax")

import jax.numpy as jnp  # noqa: E402

from ubench.archive_schema import read_archive  # noqa: E402
from ubench.producers.jax import produce_archive_jax  # noqa: E402
from ubench.producers.jax import run as jax_run  # noqa: E402
from ubench.producers.jax.mlp import init_mlp, mlp_logits, n_parameters  # noqa: E402
from ubench.producers.jax.run import JaxRunSettings  # noqa: E402
from ubench.producers.jax.train import pitfalls_schedule_jax  # noqa: E402
from ubench.producers.schedules import pitfalls_schedule  # noqa: E402
from ubench.producers.task import build_task  # noqa: E402


@pytest.fixture(scope="module")
def task():
    return build_task("digits", shift_kinds=("rotate",), train_samples=300, test_samples=120, shift_samples=30)


def test_schedule_is_the_pitfalls_schedule_at_every_step():
    hp = {"epochs": 10, "lr": 0.05}
    schedule = pitfalls_schedule_jax(hp, steps_per_epoch=7)
    for count in range(0, 80):
        assert float(schedule(count)) == pytest.approx(pitfalls_schedule(count / 7, 0.05, 10), rel=1e-6, abs=1e-9)


def test_mlp_matches_the_torch_mlp_given_the_same_weights():
    torch = pytest.importorskip("torch")
    from ubench.producers.models import build_model

    params = init_mlp(jax.random.key(3), 64, 10)
    model = build_model("mlp", (1, 8, 8), 10, mean=0.3, std=0.2, dropout="none", p=0.0).double()
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linears) == len(params) and n_parameters(params) == sum(p.numel() for p in model.parameters())
    with torch.no_grad():
        for lin, (w, b) in zip(linears, params):
            lin.weight.copy_(torch.from_numpy(np.asarray(w, dtype=np.float64).T))
            lin.bias.copy_(torch.from_numpy(np.asarray(b, dtype=np.float64)))
    x = np.random.default_rng(0).random((5, 1, 8, 8))
    expected = model(torch.from_numpy(x)).detach().numpy()
    got = np.asarray(mlp_logits(params, jnp.asarray(x, dtype=jnp.float32), 0.3, 0.2))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    # torch.nn.Linear's initialisation: uniform in +-1/sqrt(fan_in).
    w0 = np.asarray(params[0][0])
    assert np.abs(w0).max() <= 1 / 8 and np.abs(w0).max() > 0.95 / 8 and abs(w0.std() - (1 / 8) / np.sqrt(3)) < 2e-3


def test_deep_ensemble_archive_is_written_by_jax(task, tmp_path):
    a = read_archive(produce_archive_jax("deep_ensemble", task, tmp_path / "de.h5",
                                         settings=JaxRunSettings(members=2, seed=0), hyper={"epochs": 3}))
    assert a.provenance["framework"] == "jax" and a.method == "deep_ensemble" and len(a.members) == 2
    assert {m.kind for m in a.members} == {"independent"}
    test = a.probs["test"]
    assert (test.mean(0).argmax(1) == a.labels["test"]).mean() > 0.3  # ten classes, 9 steps
    assert np.abs(test[0] - test[1]).max() > 1e-3
    assert a.config["hyperparameters"]["epochs"] == 3


def test_killed_jax_run_resumes_to_the_same_archive(task, tmp_path, monkeypatch):
    settings = JaxRunSettings(members=2, seed=1)
    full = read_archive(produce_archive_jax("deep_ensemble", task, tmp_path / "full.h5", settings=settings,
                                            hyper={"epochs": 2}))
    original = jax_run.predict_splits_jax
    calls = []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(jax_run, "predict_splits_jax", failing)
    with pytest.raises(KeyboardInterrupt):
        produce_archive_jax("deep_ensemble", task, tmp_path / "cut.h5", settings=settings, hyper={"epochs": 2})
    monkeypatch.setattr(jax_run, "predict_splits_jax", original)
    resumed = read_archive(produce_archive_jax("deep_ensemble", task, tmp_path / "cut.h5", settings=settings,
                                               hyper={"epochs": 2}))
    for name in full.probs:
        np.testing.assert_array_equal(resumed.probs[name], full.probs[name])


def test_blackjax_hmc_writes_posterior_samples(task, tmp_path):
    a = read_archive(produce_archive_jax("hmc", task, tmp_path / "hmc.h5", settings=JaxRunSettings(members=3, seed=0),
                                         hyper={"burn_in": 30, "thin": 2, "n_leapfrog": 10}))
    assert a.provenance["framework"] == "jax" and {m.kind for m in a.members} == {"posterior_sample"}
    assert [m.info["iteration"] for m in a.members] == [32, 34, 36]
    assert [m.info["chain"] for m in a.members] == [0, 0, 0]
    assert a.diagnostics["chains"] == 1 and "draws per chain" in a.diagnostics["note"]  # 3 draws: too few
    for m in a.members:
        assert 0 <= m.info["acceptance_rate"] <= 1 and m.info["step_size"] > 0
    assert (a.probs["test"].mean(0).argmax(1) == a.labels["test"]).mean() > 0.5


def test_unknown_jax_method_or_hyperparameter_is_refused(task, tmp_path):
    with pytest.raises(ValueError, match="implements"):
        produce_archive_jax("swag", task, tmp_path / "x.h5", settings=JaxRunSettings(members=1, seed=0))
    with pytest.raises(ValueError, match="no hyperparameter 'nope'"):
        produce_archive_jax("sgd", task, tmp_path / "x.h5", settings=JaxRunSettings(members=1, seed=0),
                            hyper={"nope": 1})


def _scores(archive):
    from ubench.metrics import accuracy_score, cross_validated_calibration, nll_loss

    probs, labels = archive.probs["test"], archive.labels["test"]
    mean = probs.astype(np.float64).mean(0)
    return np.array([accuracy_score(mean, labels), nll_loss(mean, labels),
                     cross_validated_calibration(probs, labels).cll])


@pytest.mark.slow
def test_torch_and_jax_sgd_agree_within_the_spread_over_seeds(tmp_path):
    """The same method, network, schedule and hyperparameters in both frameworks, four seeds each: the frameworks'
    mean accuracy, NLL and CLL differ by less than three standard errors of the difference (the seed-to-seed
    spread measured here), so a framework-specific bug (another init, schedule or loss) would show."""
    torch = pytest.importorskip("torch")
    from ubench.producers.archive_run import produce_archive
    from ubench.producers.torch_trainer import RunSettings

    torch.set_num_threads(1)
    task = build_task("digits", shift_kinds=())
    hyper = {"epochs": 8}
    t = np.array([_scores(read_archive(produce_archive(
        "sgd", task, tmp_path / f"t{s}.h5", settings=RunSettings(model="mlp", members=1, seed=s), hyper=hyper,
        threads=1))) for s in range(4)])
    j = np.array([_scores(read_archive(produce_archive_jax(
        "sgd", task, tmp_path / f"j{s}.h5", settings=JaxRunSettings(members=1, seed=s), hyper=hyper)))
        for s in range(4)])
    se = np.sqrt(t.var(0, ddof=1) / len(t) + j.var(0, ddof=1) / len(j))
    diff = np.abs(t.mean(0) - j.mean(0))
    assert np.all(diff <= 3 * se + 1e-3), {"torch": t.mean(0), "jax": j.mean(0), "se": se}
    # Both learnt the task (and the spread is a spread, not a constant).
    assert t[:, 0].min() > 0.9 and j[:, 0].min() > 0.9 and np.all(se > 0)


def test_jax_sgmcmc_step_injects_the_torch_parameterisation_noise():
    """One SGHMC step from zero velocity: (theta' - theta) + lr (grad + theta / (sigma^2 N)) is the injected noise,
    whose std must be sqrt(2 lr alpha T / N) (the formula of ubench.producers.sgmcmc, the reference code's at
    T = 1/N)."""
    import optax

    from ubench.producers.jax.sgmcmc import _compiled_step

    n, lr, alpha, t, sigma = 500, 0.05, 0.3, 2.0, 0.2
    params = init_mlp(jax.random.key(0), 64, 10)
    x = jax.random.uniform(jax.random.key(1), (32, 1, 8, 8))
    y = jnp.arange(32) % 10
    step = _compiled_step(0.3, 0.2, n, sigma, alpha, t)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    new, _ = step(params, zeros, jax.random.key(2), x, y, lr)
    grads = jax.grad(lambda p: optax.softmax_cross_entropy_with_integer_labels(
        mlp_logits(p, x, 0.3, 0.2), y).mean())(params)
    noise = np.concatenate([np.ravel(np.asarray(a, np.float64) - np.asarray(b, np.float64)
                                     + lr * (np.asarray(g, np.float64) + np.asarray(b, np.float64) / (sigma ** 2 * n)))
                            for a, b, g in zip(jax.tree_util.tree_leaves(new), jax.tree_util.tree_leaves(params),
                                               jax.tree_util.tree_leaves(grads))])
    expected = np.sqrt(2 * lr * alpha * t / n)
    assert abs(noise.std() / expected - 1) < 0.02 and abs(noise.mean()) < 3 * expected / np.sqrt(noise.size)


def test_jax_sgld_writes_a_chain_with_diagnostics(task, tmp_path):
    a = read_archive(produce_archive_jax("sgld", task, tmp_path / "sgld.h5", settings=JaxRunSettings(members=4, seed=0),
                                         hyper={"burn_in_epochs": 2}))
    assert a.provenance["framework"] == "jax" and {m.kind for m in a.members} == {"posterior_sample"}
    assert [m.epoch for m in a.members] == [3, 4, 5, 6]
    assert all(m.info["chain"] == 0 and m.info["log_posterior"] < 0 for m in a.members)
    assert a.diagnostics["chains"] == 1 and a.diagnostics["draws_per_chain"] == 4
    assert a.config["hyperparameters"]["temperature"] == "1/N"


def test_jax_samplers_run_several_chains(task, tmp_path):
    """--chains 2 for the JAX samplers: members carry their chain, chain 0 is the one-chain run, and the
    diagnostics count two chains."""
    one = read_archive(produce_archive_jax("sgld", task, tmp_path / "one.h5", hyper={"burn_in_epochs": 1},
                                           settings=JaxRunSettings(members=4, seed=0)))
    two = read_archive(produce_archive_jax("sgld", task, tmp_path / "two.h5", hyper={"burn_in_epochs": 1},
                                           settings=JaxRunSettings(members=8, seed=0, chains=2)))
    assert [m.info["chain"] for m in two.members] == [0] * 4 + [1] * 4
    np.testing.assert_array_equal(one.probs["test"], two.probs["test"][:4])
    assert two.diagnostics["chains"] == 2 and two.config["chains"] == 2 and "chains" not in one.config
    hmc = read_archive(produce_archive_jax("hmc", task, tmp_path / "hmc.h5", hyper={"burn_in": 20, "thin": 1,
                                                                                    "n_leapfrog": 5},
                                           settings=JaxRunSettings(members=8, seed=0, chains=2)))
    assert [m.info["chain"] for m in hmc.members] == [0] * 4 + [1] * 4
    assert hmc.diagnostics["chains"] == 2 and "log_posterior" in hmc.diagnostics
    with pytest.raises(ValueError, match="chains"):
        produce_archive_jax("deep_ensemble", task, tmp_path / "x.h5", settings=JaxRunSettings(members=2, seed=0,
                                                                                           chains=2))
