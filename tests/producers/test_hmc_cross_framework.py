# SPDX-License-Identifier: MIT
"""ubench's torch HMC and BlackJAX's HMC sample the same posterior (issue #11 item 6): Bayesian softmax regression
on a digits subset, the same step size and path length, and posterior expectations that agree within their
Monte-Carlo errors (batch means)."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
blackjax = pytest.importorskip("blackjax")

import jax.numpy as jnp  # noqa: E402

from ubench.producers.hmc_sampler import HMCState, hmc_transition  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.torch]

TAU = 1.0  # prior precision
STEP, L, ITER, BURN = 0.03, 15, 1500, 300


def _data():
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = (x - x.mean(0)) / (x.std(0) + 1e-6)
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(y))
    train, test = idx[:150], idx[150:450]
    return x[train], y[train], x[test], y[test]


def _expected_loglik(samples, x, y):
    """Per draw: the mean test log-likelihood under that draw's weights."""
    w = samples.reshape(len(samples), x.shape[1] + 1, 10)
    logits = np.einsum("nd,sdc->snc", x, w[:, :-1]) + w[:, -1][:, None, :]
    logp = logits - np.logaddexp.reduce(logits, axis=2, keepdims=True)
    return logp[:, np.arange(len(y)), y].mean(1)


def _batch_se(v, batches=30):
    means = np.array([b.mean() for b in np.array_split(v, batches)])
    return means.std(ddof=1) / math.sqrt(batches)


def test_torch_hmc_and_blackjax_agree_on_a_bayesian_softmax_regression():
    xtr, ytr, xte, yte = _data()
    d = (xtr.shape[1] + 1) * 10
    xt, yt = torch.from_numpy(xtr), torch.from_numpy(ytr)

    def potential_and_grad(theta):
        theta = theta.detach().requires_grad_(True)
        w = theta.view(xtr.shape[1] + 1, 10)
        logits = xt @ w[:-1] + w[-1]
        u = torch.nn.functional.cross_entropy(logits, yt, reduction="sum") + 0.5 * TAU * (theta ** 2).sum()
        (g,) = torch.autograd.grad(u, theta)
        return u.detach(), g

    gen = torch.Generator().manual_seed(0)
    state = HMCState.at(torch.zeros(d, dtype=torch.float64), potential_and_grad)
    torch_draws, acc = [], []
    for _ in range(ITER):
        state, info = hmc_transition(state, potential_and_grad, step_size=STEP, n_steps=L, mass=1.0, generator=gen)
        torch_draws.append(state.theta.numpy().copy())
        acc.append(info.accept_prob)
    torch_draws = np.array(torch_draws[BURN:])

    jx, jy = jnp.asarray(xtr, dtype=jnp.float32), jnp.asarray(ytr)

    def logdensity(theta):
        w = theta.reshape(xtr.shape[1] + 1, 10)
        logits = jx @ w[:-1] + w[-1]
        return jnp.sum(jax.nn.log_softmax(logits)[jnp.arange(len(ytr)), jy]) - 0.5 * TAU * jnp.sum(theta ** 2)

    kernel = blackjax.hmc(logdensity, step_size=STEP, inverse_mass_matrix=jnp.ones(d), num_integration_steps=L)

    @jax.jit
    def run(key):
        def one(s, k):
            s, _ = kernel.step(k, s)
            return s, s.position
        _, xs = jax.lax.scan(one, kernel.init(jnp.zeros(d)), jax.random.split(key, ITER))
        return xs

    jax_draws = np.asarray(run(jax.random.key(1)), dtype=np.float64)[BURN:]

    assert 0.6 < np.mean(acc[BURN:]) < 1.0
    a, b = _expected_loglik(torch_draws, xte, yte), _expected_loglik(jax_draws, xte, yte)
    se = math.sqrt(_batch_se(a) ** 2 + _batch_se(b) ** 2)
    assert abs(a.mean() - b.mean()) < 4 * se, (a.mean(), b.mean(), se)
    # Posterior means of the weights, coordinate by coordinate, within 4.5 combined standard errors.
    se_w = np.sqrt(np.array([_batch_se(torch_draws[:, i]) ** 2 + _batch_se(jax_draws[:, i]) ** 2
                             for i in range(d)]))
    z = np.abs(torch_draws.mean(0) - jax_draws.mean(0)) / se_w
    assert np.mean(z < 3) > 0.95 and z.max() < 6, (np.mean(z < 3), z.max())
