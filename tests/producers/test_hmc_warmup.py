# SPDX-License-Identifier: MIT
"""Issue #30 item 1: Stan's warm-up (windowed diagonal mass matrix, step-size initialisation), the jittered
trajectory and NUTS, against Stan's schedule, closed forms and targets with known moments."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ubench.producers.hmc_adaptation import (  # noqa: E402
    adaptation_windows, find_reasonable_step_size, regularised_variance, welford_start, welford_update,
)
from ubench.producers.hmc_chain import ChainSettings, run_chain  # noqa: E402
from ubench.producers.hmc_nuts import nuts_transition  # noqa: E402
from ubench.producers.hmc_sampler import HMCState, hmc_transition  # noqa: E402

pytestmark = pytest.mark.torch
torch.set_num_threads(1)  # tiny tensors: a second thread only waits (and on a loaded machine, spins)

# the correlated 3-D Gaussian and the banana of test_hmc.py, whose moments are known in closed form
from test_hmc import MU, S, banana, gaussian  # noqa: E402


def scaled_gaussian(sd):
    """Independent N(0, sd_i^2): a target whose scales differ by orders of magnitude."""
    prec = 1.0 / sd ** 2

    def target(theta):
        return 0.5 * torch.sum(prec * theta * theta), prec * theta

    return target


def batch_means_se(x, n_batches=40):
    b = np.array_split(x, n_batches)
    return np.stack([c.mean(0) for c in b]).std(0, ddof=1) / math.sqrt(n_batches)


# -- Stan's window schedule ------------------------------------------------------------------------------------
def test_windows_follow_stan_schedule():
    """Stan's defaults (75 / 25 / 50) worked by hand from windowed_adaptation.hpp, its 15% / 75% / 10% rule for
    short warm-ups, and its refusal below 20 iterations."""
    assert adaptation_windows(1000) == [(75, 99), (100, 149), (150, 249), (250, 449), (450, 949)]
    assert adaptation_windows(500) == [(75, 99), (100, 149), (150, 249), (250, 449)]
    assert adaptation_windows(150) == [(75, 99)]  # 75 + 25 + 50 fits exactly
    assert adaptation_windows(100) == [(15, 89)]  # 15 + 75 + 10
    assert adaptation_windows(20) == [(3, 17)]
    assert adaptation_windows(19) == []
    # Stan never stretches the first window; a later one is stretched when the next would not fit.
    assert adaptation_windows(160) == [(75, 99), (100, 109)]
    # At 299 the window after (100, 149) would end exactly at the terminal buffer (149 + 2 * 50 = 249): stretched.
    assert adaptation_windows(299) == [(75, 99), (100, 248)]
    assert adaptation_windows(300) == [(75, 99), (100, 149), (150, 249)]
    assert adaptation_windows(2000)[-1] == (850, 1949)


def test_windows_agree_with_blackjax_schedule_where_blackjax_follows_stan():
    blackjax = pytest.importorskip("blackjax")
    from blackjax.adaptation.window_adaptation import build_schedule

    def windows(n):
        out, start = [], None
        for i, (slow, end) in enumerate(np.asarray(build_schedule(n))):
            start = i if slow and start is None else start
            if end:
                out.append((start, i))
                start = None
        return out

    assert blackjax is not None
    for n in (20, 25, 60, 100, 150, 200, 230, 299, 300, 500, 549, 777, 1000, 2000):
        assert adaptation_windows(n) == windows(n), n
    # BlackJAX stretches the first window too (160: one window 75..109); ubench follows Stan's code.
    assert windows(160) == [(75, 109)]


def test_welford_and_regularised_variance_match_numpy():
    x = np.random.default_rng(0).normal(size=(37, 5)) * np.array([0.01, 0.1, 1.0, 10.0, 3.0])
    acc = welford_start(torch.zeros(5))
    for row in x:
        welford_update(acc, torch.from_numpy(row))
    n = len(x)
    np.testing.assert_allclose(acc["mean"].numpy(), x.mean(0), rtol=1e-12, atol=1e-15)
    expected = n / (n + 5.0) * x.var(0, ddof=1) + 1e-3 * 5.0 / (n + 5.0)
    np.testing.assert_allclose(regularised_variance(acc).numpy(), expected, rtol=1e-12)
    with pytest.raises(ValueError, match="at least 2 draws"):
        regularised_variance(welford_start(torch.zeros(2)))


def test_step_size_initialisation_lands_at_the_acceptance_crossing_from_either_side():
    """Stan's heuristic doubles (or halves) the start until one leapfrog step's acceptance, with a fresh momentum each
    try, crosses 0.8: its answer is the start times a power of 2, and over 15 runs its median is within a factor 1.6
    of the step size where the mean one-step acceptance crosses 0.8 (brute force over 200 momenta per step size),
    from 1e-4 and from 50 alike. (One run is noisy: the one-step energy error near the crossing is O(1).)"""
    d = 200
    target = scaled_gaussian(torch.ones(d, dtype=torch.float64))
    state = HMCState.at(torch.randn(d, dtype=torch.float64, generator=torch.Generator().manual_seed(1)), target)
    gen = torch.Generator().manual_seed(2)
    grid = 2.0 ** np.arange(-6, 2, 0.25)
    accept = [np.mean([math.exp(min(0.0, -hmc_transition(state, target, step_size=eps, n_steps=1, mass=1.0,
                                                         generator=gen)[1].energy_error)) for _ in range(200)])
              for eps in grid]
    crossing = grid[np.argmax(np.array(accept) < 0.8)]
    for start in (1e-4, 50.0):
        found = [find_reasonable_step_size(state, target, step_size=start, mass=1.0, generator=gen) for _ in range(15)]
        powers = np.log2(np.array(found) / start)
        np.testing.assert_allclose(powers, np.round(powers), atol=1e-9)
        assert crossing / 1.6 < np.median(found) < crossing * 1.6, (start, found, crossing)


# -- NUTS -----------------------------------------------------------------------------------------------------
def _nuts_chain(target, start, n, *, step, mass=1.0, seed=0, max_depth=10):
    gen = torch.Generator().manual_seed(seed)
    state = HMCState.at(start, target)
    xs, infos = [], []
    for _ in range(n):
        state, info = nuts_transition(state, target, step_size=step, mass=mass, generator=gen, max_depth=max_depth)
        xs.append(state.theta)
        infos.append(info)
    return torch.stack(xs).numpy(), infos


@pytest.mark.parametrize("mass", [1.0, "diagonal"])
def test_nuts_gaussian_moments_within_monte_carlo_error(mass):
    m = torch.tensor([1.5, 0.7, 3.0], dtype=torch.float64) if mass == "diagonal" else 1.0
    # A large step (acceptance about 0.75): the states' weights exp(-dH) differ, so a wrong multinomial or
    # progressive-sampling rule shows in the variances (it does not at small steps, where all weights are near 1).
    xs, infos = _nuts_chain(gaussian, torch.zeros(3, dtype=torch.float64), 1600, step=1.0, mass=m, seed=1)
    xs = xs[100:]
    z = np.abs(xs.mean(0) - MU.numpy()) / batch_means_se(xs)
    assert np.all(z < 4.5), z
    cov = np.cov(xs.T)
    for i in range(3):
        for j in range(3):
            prod = (xs[:, i] - xs[:, i].mean()) * (xs[:, j] - xs[:, j].mean())
            assert abs(cov[i, j] - S[i, j].item()) < 4.5 * batch_means_se(prod[:, None])[0] + 1e-3, (i, j, cov)
    assert not any(i.divergent for i in infos)
    assert 0.6 < np.mean([i.accept_prob for i in infos]) < 0.9


def test_nuts_banana_moments_within_monte_carlo_error():
    xs, _ = _nuts_chain(banana, torch.zeros(2, dtype=torch.float64), 2000, step=0.7, seed=2)
    xs, b = xs[100:], 0.5
    se = batch_means_se(xs)
    assert abs(xs[:, 0].mean()) < 4.5 * se[0] and abs(xs[:, 1].mean() - b) < 4.5 * se[1]
    var_se = batch_means_se((xs - xs.mean(0)) ** 2)
    assert abs(xs[:, 0].var() - 1.0) < 4.5 * var_se[0]
    assert abs(xs[:, 1].var() - (1 + 2 * b * b)) < 4.5 * var_se[1]


def test_nuts_stops_at_the_u_turn_and_at_the_depth_cap():
    """On a 1-D standard normal (period 2 pi) the momenta at a trajectory's two ends point against its summed
    momentum within half a period of motion; trees double past it at most once, so no trajectory with step 0.05 is
    longer than a period (125 steps, depth 7), far below the cap of 10; a cap of 3 gives at most 15 steps (7 in the
    three doublings, at most 8 in a fourth subtree that turned)."""
    target = scaled_gaussian(torch.ones(1, dtype=torch.float64))
    _, infos = _nuts_chain(target, torch.ones(1, dtype=torch.float64), 200, step=0.05, seed=3)
    assert max(i.n_steps for i in infos) * 0.05 <= 2 * math.pi and max(i.depth for i in infos) <= 7
    assert max(i.depth for i in infos) >= 5  # the trees do grow to a sizeable fraction of the period
    # depth doublings made 2^depth - 1 steps; a subtree that turned inside adds at most 2^depth more
    assert all(2 ** i.depth - 1 <= i.n_steps <= 2 ** (i.depth + 1) - 1 for i in infos)
    _, capped = _nuts_chain(target, torch.ones(1, dtype=torch.float64), 50, step=0.05, seed=3, max_depth=3)
    assert max(i.n_steps for i in capped) <= 7 and max(i.depth for i in capped) == 3
    assert all(i.n_steps == 7 for i in capped if i.depth == 3)  # the cap stops before a fourth subtree


def test_nuts_is_bit_identical_given_the_seed():
    a, _ = _nuts_chain(banana, torch.zeros(2, dtype=torch.float64), 100, step=0.3, seed=7)
    b, _ = _nuts_chain(banana, torch.zeros(2, dtype=torch.float64), 100, step=0.3, seed=7)
    c, _ = _nuts_chain(banana, torch.zeros(2, dtype=torch.float64), 100, step=0.3, seed=8)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


# -- the chain: warm-up and jitter together -------------------------------------------------------------------------
@pytest.mark.parametrize("sampler", ["hmc", "nuts"])
def test_chain_learns_the_scales_and_samples_them(sampler):
    """Scales 0.01 to 10 (a condition number of 1e6 in the covariance): after Stan's warm-up the inverse mass
    matrix is within 40% of each variance, the acceptance near the 0.8 target, and the draws' variances right."""
    sd = torch.tensor([0.01, 0.1, 1.0, 10.0, 0.03, 3.0], dtype=torch.float64)
    settings = ChainSettings(sampler=sampler, burn_in=300, trajectory_length=1.5, jitter=1.0, mass=1.0)
    draws, steps = run_chain(scaled_gaussian(sd), torch.ones(6, dtype=torch.float64), settings,
                             n_draws=1500 if sampler == "hmc" else 600, seed=4)
    x = draws.numpy()
    ratio = x.var(0) / sd.numpy() ** 2
    se = batch_means_se(x ** 2) / sd.numpy() ** 2
    assert np.all(np.abs(ratio - 1.0) < 4.5 * se + 0.02), (ratio, se)
    assert 0.65 < np.mean([s.accept_prob for s in steps[300:]]) < 0.95
    # The step size (in units of the adapted metric) is of order one: the scales were learned, not the smallest
    # scale's step taken everywhere (which would be 0.01 of the largest).
    assert steps[-1].step_size > 0.2


def test_jitter_draws_the_trajectory_length_uniformly():
    """jitter 1: the number of steps is ceil(U(0, 2) T / step), mean about T / step, spread over (0, 2T / step]."""
    settings = ChainSettings(sampler="hmc", burn_in=0, step_size=0.1, trajectory_length=1.0, jitter=1.0,
                             adapt_step_size=False, adapt_mass=False)
    _, steps = run_chain(gaussian, MU.clone(), settings, n_draws=2000, seed=5)
    n = np.array([s.n_steps for s in steps])
    assert n.min() == 1 and n.max() == 20 and abs(n.mean() - 10.5) < 0.5
    assert np.histogram(n, bins=4, range=(0.5, 20.5))[0].min() > 400  # about 500 in each quarter
    fixed = ChainSettings(**{**settings.__dict__, "jitter": 0.0})
    _, steps = run_chain(gaussian, MU.clone(), fixed, n_draws=50, seed=5)
    assert {s.n_steps for s in steps} == {10}
