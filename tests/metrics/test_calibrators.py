# SPDX-License-Identifier: MIT
"""Post-hoc calibrators under test-time cross-validation (issue #17 items 7-8).

Oracles: scikit-learn's IsotonicRegression (run here), and torch-uncertainty 0.13's scalers, fitted once on the
first 300 samples of ``tests/data/peer_oracle/calibrators_inputs.npz`` and applied to the last 300
(``make_oracle.py``; see the README there). Plus the property of each kind.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import log_softmax

from ubench import metrics as m
from ubench.metrics.calibrators import (
    CALIBRATORS,
    cross_validated_calibrators,
    fit_calibrator,
    odir_inner_folds,
    select_odir,
)

ORACLE = Path(__file__).parent.parent / "data" / "peer_oracle"


@pytest.fixture(scope="module")
def small():
    d = np.load(ORACLE / "calibrators_inputs.npz")
    return d["probs"], d["labels"], json.loads((ORACLE / "calibrators_values.json").read_text())


@pytest.mark.parametrize("key,name,options,tol", [
    ("histogram_15", "histogram", {}, 1e-6),          # torch-uncertainty keeps bin values in float32
    ("isotonic", "isotonic", {}, 1e-12),
    ("bbq_frequency", "bbq", {"bbq_estimate": "frequency"}, 1e-5),  # float32 input there (float64 crashes it)
])
def test_binning_calibrators_equal_torch_uncertainty(small, key, name, options, tol):
    p, y, ref = small
    q = fit_calibrator(name, p[:300], y[:300], **options).apply(p[300:])
    np.testing.assert_allclose(q, np.array(ref[key]), atol=tol)


def _odir_objective(w, b, p, y, lam, mu, eps=1e-12):
    c = p.shape[1]
    logp = log_softmax(np.log(p + eps) @ np.asarray(w).T + np.asarray(b), axis=1)
    off = 1 - np.eye(c)
    return (-logp[np.arange(len(y)), y].mean() + lam * np.sum((np.asarray(w) * off) ** 2) / (c * (c - 1))
            + mu * np.sum(np.asarray(b) ** 2) / c)


@pytest.mark.parametrize("key,name,lam", [("matrix", "matrix", 0.0), ("dirichlet_1e-2", "dirichlet", 1e-2)])
def test_scaling_calibrators_reach_torch_uncertaintys_optimum(small, key, name, lam):
    """torch-uncertainty's L-BFGS (no line search, 2000 iterations, float32) stops near the optimum; ubench's
    Newton-CG gets at least as low an objective and the same calibrated probabilities to 2e-3."""
    p, y, ref = small
    cal = fit_calibrator(name, p[:300], y[:300], odir_lambda=lam, odir_mu=lam)
    ours = _odir_objective(cal.params["weight"], cal.params["bias"], p[:300], y[:300], lam, lam)
    theirs = _odir_objective(*ref[key + "_params"], p[:300], y[:300], lam, lam)
    assert ours <= theirs + 1e-7
    np.testing.assert_allclose(cal.apply(p[300:]), np.array(ref[key]), atol=2e-3)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(20, 120), c=st.integers(2, 5))
def test_isotonic_equals_sklearn_and_is_monotone(seed, n, c):
    from sklearn.isotonic import IsotonicRegression

    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(c), size=n)
    p[: n // 4] = p[n // 4 : 2 * (n // 4)]  # duplicated scores
    y = rng.integers(0, c, size=n)
    test = rng.dirichlet(np.ones(c), size=50)
    cal = fit_calibrator("isotonic", p, y)
    raw = np.stack([IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(p[:, k], y == k)
                    .predict(test[:, k]) for k in range(c)], 1)
    ref = np.clip(raw / (raw.sum(1, keepdims=True) + 1e-12), 1e-6, 1 - 1e-6)
    np.testing.assert_allclose(cal.apply(test), ref / ref.sum(1, keepdims=True), atol=1e-12)
    for xk, yk in cal.params["maps"]:  # each one-vs-rest map is non-decreasing
        assert np.all(np.diff(yk) >= 0) and np.all(np.diff(xk) > 0)


def test_histogram_reproduces_the_bin_means():
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.ones(2), size=400)
    y = (rng.random(400) < p[:, 1]).astype(int)
    cal = fit_calibrator("histogram", p, y, histogram_bins=5)
    edges = np.linspace(0, 1, 6)
    for k in range(2):
        for b in range(5):
            inside = (p[:, k] > edges[b]) & (p[:, k] <= edges[b + 1])
            if inside.any():
                assert cal.params["values"][k, b] == pytest.approx(np.mean(y[inside] == k), abs=1e-15)


def test_bbq_posterior_estimate_by_hand():
    """Two classes, values 0.2 x 4 and 0.8 x 4: the only binning is two bins split at the median."""
    p1 = np.array([0.2] * 4 + [0.8] * 4)
    p = np.stack([1 - p1, p1], 1)
    y = np.array([0, 0, 0, 1, 1, 1, 1, 0])
    cal = fit_calibrator("bbq", p, y)
    models, weights = cal.params["models"][1]
    edges, values = models[0]
    a0 = 2.0 / (len(edges) - 1)
    mid = 0.5 * (edges[:-1] + edges[1:])
    n_b, m_b = np.array([4.0, 4.0]), np.array([1.0, 3.0])
    if len(edges) == 3:
        np.testing.assert_allclose(values, (m_b + a0 * mid) / (n_b + a0), atol=1e-12)
    assert weights.sum() == pytest.approx(1.0)


def test_affine_maps_stay_near_identity_on_calibrated_data():
    """Labels drawn from the probabilities themselves: the fitted map is close to the identity (W = I, b = 0),
    and W = I, b = 0 returns the input exactly."""
    rng = np.random.default_rng(5)
    logits = rng.normal(size=(20000, 3)) * 1.5
    p = np.exp(log_softmax(logits, axis=1))
    y = np.array([rng.choice(3, p=row) for row in p])
    cal = fit_calibrator("matrix", p, y)
    np.testing.assert_allclose(cal.params["weight"], np.eye(3), atol=0.08)
    np.testing.assert_allclose(cal.params["bias"] - cal.params["bias"].mean(), 0, atol=0.08)
    ident = np.exp(log_softmax(np.log(p + 1e-12) @ np.eye(3).T, axis=1))
    np.testing.assert_allclose(ident, p, atol=1e-10)


def test_cross_validation_matches_the_calibrated_protocol(small):
    p, y, _ = small
    scores = cross_validated_calibrators(p, y, ["temperature"], n_repeats=3, seed=4)
    cv = m.cross_validated_calibration(p[None], y, n_repeats=3, seed=4)
    assert scores["temperature"].nll == pytest.approx(cv.nll_after, rel=1e-9)
    assert scores["temperature"].brier == pytest.approx(cv.brier_after, rel=1e-9)
    assert scores["temperature"].ece == pytest.approx(cv.ece_after, rel=1e-6)  # T agrees to the solver tolerance


def test_every_calibrator_runs_and_improves_a_miscalibrated_model():
    rng = np.random.default_rng(11)
    logits = rng.normal(size=(1200, 4)) * 2.0
    true = np.exp(log_softmax(logits, axis=1))
    y = np.array([rng.choice(4, p=row) for row in true])
    over = np.exp(log_softmax(logits * 3.0, axis=1))  # overconfident: temperature 3 too sharp
    before = m.nll_loss(over, y)
    scores = cross_validated_calibrators(over, y)
    assert set(scores) == set(CALIBRATORS)
    for name in ("temperature", "vector", "matrix", "dirichlet", "bbq", "histogram", "isotonic"):
        assert scores[name].nll < before, name


def test_affine_fits_say_when_they_stop_at_the_cap():
    """On the bundled digits example's 300-sample halves dirichlet's unpenalised diagonal has no finite optimum in
    some folds: Newton-CG stops at its 200-iteration cap there and the fold says so (2 of 10 with scipy 1.17; in a
    side run, one capped fold's held-out NLL was 2.04 where Newton-CG with the dense Hessian converged to 1.58). On
    labels drawn from the predictions themselves (calibrated, a finite optimum) every fold converges."""
    import h5py

    with h5py.File(Path(__file__).resolve().parents[2] / "examples" / "digits_deep_ensemble.h5") as f:
        p = f["splits/test/probs"][()].astype(np.float64).mean(0)
        y = f["splits/test/labels"][()]
    res = cross_validated_calibrators(p, y, names=("dirichlet", "temperature"))
    flags = [f["converged"] for f in res["dirichlet"].folds]
    assert res["dirichlet"].unconverged_folds == flags.count(False) > 0
    assert res["temperature"].unconverged_folds == 0
    rng = np.random.default_rng(0)
    q = np.exp(log_softmax(rng.normal(size=(400, 3)) * 2.0, axis=1))
    drawn = np.array([rng.choice(3, p=row) for row in q])
    fine = cross_validated_calibrators(q, drawn, names=("matrix", "dirichlet"), n_repeats=1)
    assert fine["matrix"].unconverged_folds == 0 and fine["dirichlet"].unconverged_folds == 0


# --- ODIR strengths chosen by inner cross-validation (odir_lambda="cv") ------------------------------------------

def _overconfident(n, c, seed):
    rng = np.random.default_rng(seed)
    q = np.exp(log_softmax(rng.normal(size=(n, c)) * 1.5, axis=1))
    y = np.array([rng.choice(c, p=row) for row in q])
    return np.exp(log_softmax(np.log(q) * 2.5, axis=1)), y


def test_odir_cv_equals_a_brute_force_inner_cross_validation():
    """Oracle: the inner folds rebuilt with scikit-learn's ``KFold`` (unshuffled) over the seeded permutation, every
    (λ, μ) of the grid fitted with fixed strengths by plain loops, the held-out NLL written out, the first minimum
    taken; then the chosen pair refitted on the whole half. Selection and held-out NLL equal the implementation's
    in every outer fold of ``cross_validated_calibrators``."""
    from sklearn.model_selection import KFold

    p, y = _overconfident(160, 3, 4)
    grid, eps = (1e1, 1e-1, 1e-3), 1e-12
    res = cross_validated_calibrators(p, y, names=("dirichlet",), n_repeats=1, seed=3, odir_lambda="cv",
                                      odir_grid=grid)["dirichlet"]
    assert len(res.selected) == 2
    for (fit_idx, held), fold, sel in zip(m.cv_splits(160, n_repeats=1, seed=3), res.folds, res.selected):
        pf, yf = p[fit_idx], y[fit_idx]
        perm = np.random.default_rng(3).permutation(len(yf))  # odir_seed defaults to the outer seed
        best, table = None, []
        for lam in grid:
            for mu in grid:
                losses = []
                for tr, te in KFold(n_splits=5).split(perm):
                    tr, te = np.sort(perm[tr]), np.sort(perm[te])  # the documented folds are sorted
                    q = fit_calibrator("dirichlet", pf[tr], yf[tr], odir_lambda=lam, odir_mu=mu).apply(pf[te])
                    losses.append(-np.mean(np.log(q[np.arange(len(te)), yf[te]] + eps)))
                table.append(np.mean(losses))
                if best is None or table[-1] < best[0]:
                    best = (table[-1], lam, mu)
        assert len(set(np.round(table, 9))) > 1  # the grid matters here
        assert (sel["lambda"], sel["mu"]) == best[1:]
        assert sel["inner_nll"] == pytest.approx(best[0], rel=1e-12)
        q = fit_calibrator("dirichlet", pf, yf, odir_lambda=best[1], odir_mu=best[2]).apply(p[held])
        assert fold["nll"] == pytest.approx(-np.mean(np.log(q[np.arange(len(held)), y[held]] + eps)), rel=1e-12)


def test_odir_cv_is_opt_in_and_deterministic():
    p, y = _overconfident(120, 3, 5)
    default = cross_validated_calibrators(p, y, names=("dirichlet",), n_repeats=1)["dirichlet"]
    fixed = cross_validated_calibrators(p, y, names=("dirichlet",), n_repeats=1, odir_lambda=1e-3,
                                        odir_mu=1e-3)["dirichlet"]
    assert default.nll == fixed.nll and default.selected == ()
    a = fit_calibrator("dirichlet", p, y, odir_lambda="cv", odir_grid=(1e-1, 1e-3), odir_seed=7)
    b = fit_calibrator("dirichlet", p, y, odir_lambda="cv", odir_grid=(1e-1, 1e-3), odir_seed=7)
    assert a.params["selected"] == b.params["selected"]
    np.testing.assert_array_equal(a.params["weight"], b.params["weight"])
    # odir_mu given: only λ is chosen
    c = fit_calibrator("dirichlet", p, y, odir_lambda="cv", odir_mu=0.5, odir_grid=(1e-1, 1e-3))
    assert c.params["selected"]["mu"] == 0.5 and len(c.params["odir_grid"]) == 2


@pytest.mark.parametrize("options", [
    {"odir_lambda": "cross"}, {"odir_lambda": -1.0}, {"odir_mu": "CV"}, {"odir_lambda": float("nan")},
    {"odir_lambda": "cv", "odir_grid": ()}, {"odir_lambda": "cv", "odir_grid": (1.0, -1.0)},
    {"odir_lambda": "cv", "odir_folds": 1}, {"odir_lambda": "cv", "odir_seed": -2},
    {"odir_lambda": "cv", "odir_folds": 2.5},
])
def test_bad_odir_options_are_refused_before_any_fit(options):
    p, y = _overconfident(40, 3, 6)
    with pytest.raises(ValueError, match="odir_"):
        fit_calibrator("dirichlet", p, y, **options)
    with pytest.raises(ValueError, match="odir_"):
        cross_validated_calibrators(p, y, names=("temperature", "dirichlet"), n_repeats=1, **options)


def test_odir_cv_on_the_digits_example():
    """The bundled digits example (599 x 10, halves of 300), one pair of outer folds and two grid points to stay
    fast (Newton-CG is slow at λ >= 10 there). The selected pair is the grid point of lowest mean inner NLL in each
    fold, and neither refit stops at the cap. Measured separately over all 10 folds and the full grid (395 s on
    2 busy cores): λ = 1e3 (the grid's largest) chosen in every fold, μ 0.1 to 1e3; held-out NLL 0.319 against
    0.796 at the default λ = μ = 1e-3; but 3 of the 10 refits at λ = 1e3 stop at the iteration cap (default: 2),
    since the diagonal stays unpenalised."""
    import h5py

    with h5py.File(Path(__file__).resolve().parents[2] / "examples" / "digits_deep_ensemble.h5") as f:
        p = f["splits/test/probs"][()].astype(np.float64).mean(0)
        y = f["splits/test/labels"][()]
    res = cross_validated_calibrators(p, y, names=("dirichlet",), n_repeats=1, odir_lambda="cv",
                                      odir_grid=(1e-3, 1e-5))["dirichlet"]
    assert len(res.selected) == 2
    for fold, sel in zip(res.folds, res.selected):
        table = fold["odir_grid"]
        assert len(table) == 4
        best = table[int(np.argmin([row[2] for row in table]))]
        assert (sel["lambda"], sel["mu"], sel["inner_nll"]) == best[:3]
    assert res.unconverged_folds == 0


# --- names, parameters and options reach what they name ----------------------------------------------------------

def test_every_calibrator_names_itself_and_keeps_its_parameters():
    """fit_calibrator's result and the cross-validated scores carry the calibrator's name; the parameters are the
    ones the named fit returns (temperature, vector) or was given (dirichlet's λ and μ), and apply() is the
    documented map with them."""
    p, y = _overconfident(200, 3, 7)
    for name in CALIBRATORS:
        assert fit_calibrator(name, p, y).name == name
    scores = cross_validated_calibrators(p, y, names=("histogram", "isotonic"), n_repeats=1)
    assert [s.name for s in scores.values()] == ["histogram", "isotonic"]
    for eps in (1e-12, 1e-3):  # eps reaches the fit and the map
        t = fit_calibrator("temperature", p, y, eps=eps)
        assert t.params["temperature"] == m.fit_temperature(p, y, eps=eps).temperature
        np.testing.assert_array_equal(t.apply(p), m.apply_temperature(p, t.params["temperature"], eps=eps))
        v = fit_calibrator("vector", p, y, eps=eps)
        np.testing.assert_array_equal(v.params["temperatures"], m.fit_vector_scaling(p, y, eps=eps).temperatures)
        np.testing.assert_array_equal(v.apply(p), m.apply_vector_scaling(p, v.params["temperatures"], eps=eps))
    assert fit_calibrator("temperature", p, y, eps=1e-3).params["temperature"] != \
        fit_calibrator("temperature", p, y).params["temperature"]
    d = fit_calibrator("dirichlet", p, y, odir_lambda=0.5, odir_mu=0.25)
    assert (d.params["lambda"], d.params["mu"]) == (0.5, 0.25)
    assert fit_calibrator("bbq", p, y, bbq_estimate="frequency").params["estimate"] == "frequency"
    np.testing.assert_array_equal(fit_calibrator("histogram", p, y, histogram_bins=4).params["edges"],
                                  [0, 0.25, 0.5, 0.75, 1])


def test_held_out_scores_use_eps_and_n_bins():
    """Each fold's NLL is -mean log(q_y + eps) and its ECE the n_bins-bin ECE of the held-out calibrated
    probabilities (one-hot-ish inputs: eps matters), the defaults 5 repeats from seed 0."""
    p, y = _overconfident(120, 3, 8)
    kw = dict(names=("histogram",), n_repeats=1, seed=2, eps=1e-2, n_bins=4)
    res = cross_validated_calibrators(p, y, **kw)["histogram"]
    for (fit_idx, held), fold in zip(m.cv_splits(120, n_repeats=1, seed=2), res.folds):
        q = fit_calibrator("histogram", p[fit_idx], y[fit_idx]).apply(p[held])
        assert fold["nll"] == pytest.approx(-np.mean(np.log(q[np.arange(len(held)), y[held]] + 1e-2)), rel=1e-12)
        assert fold["ece"] == pytest.approx(m.expected_calibration_error(q, y[held], n_bins=4), rel=1e-12)
    assert res.ece != cross_validated_calibrators(p, y, **{**kw, "n_bins": 15})["histogram"].ece
    default = cross_validated_calibrators(p, y, names=("histogram",))["histogram"]
    assert default == cross_validated_calibrators(p, y, names=("histogram",), n_repeats=5, seed=0)["histogram"]
    assert len(default.folds) == 10


def test_binary_dirichlet_minimises_kull_et_als_objective():
    """Two classes: the ODIR penalty is λ/(C(C-1)) = λ/2 on the off-diagonal weights. ubench's fit reaches the
    minimum of the objective written out here (scipy's BFGS on it, from W = I, b = 0, to a gradient of 1e-10) to
    1e-9 and the same parameters to 1e-4, at a λ that matters (the unpenalised optimum is far off)."""
    from scipy.optimize import minimize

    p, y = _overconfident(300, 2, 9)
    lam = mu = 3.0

    def objective(theta, lam, mu):
        return _odir_objective(theta[:4].reshape(2, 2), theta[4:], p, y, lam, mu)

    ref = minimize(objective, np.r_[np.eye(2).ravel(), 0, 0], args=(lam, mu), method="BFGS", options={"gtol": 1e-10})
    free = minimize(objective, np.r_[np.eye(2).ravel(), 0, 0], args=(0.0, mu), method="BFGS")
    cal = fit_calibrator("dirichlet", p, y, odir_lambda=lam, odir_mu=mu)
    ours = np.r_[cal.params["weight"].ravel(), cal.params["bias"]]
    assert objective(ours, lam, mu) <= ref.fun + 1e-9
    np.testing.assert_allclose(ours, ref.x, atol=1e-4)
    assert np.abs(free.x - ref.x).max() > 0.1


def test_odir_options_by_hand():
    """The option parsing: numbers as text are numbers, 0 is allowed (λ = μ = 0: matrix scaling), booleans are
    not numbers; a fixed λ with μ = "cv" selects μ alone; odir_folds and odir_seed reach the inner
    cross-validation (defaults 5 folds, seed 0); the grid may hold 0."""
    p, y = _overconfident(60, 3, 10)
    assert fit_calibrator("dirichlet", p, y, odir_lambda="0.01").params["lambda"] == 0.01
    assert fit_calibrator("dirichlet", p, y, odir_lambda=0, odir_mu=0).params["lambda"] == 0.0
    with pytest.raises(ValueError) as ei:
        fit_calibrator("dirichlet", p, y, odir_lambda=True)
    assert str(ei.value) == "odir_lambda must be a non-negative number or 'cv'; got True"
    c = fit_calibrator("dirichlet", p, y, odir_lambda=0.5, odir_mu="cv", odir_grid=(0.0, 1e-1), odir_folds=3,
                       odir_seed=4)
    assert c.params["selected"]["lambda"] == 0.5 and [row[:2] for row in c.params["odir_grid"]] == [(0.5, 0.0),
                                                                                                     (0.5, 0.1)]
    sel = select_odir(p, y, lambdas=(0.5,), mus=(0.0, 1e-1), n_folds=3, seed=4)
    assert c.params["selected"] == {k: sel[k] for k in ("lambda", "mu", "inner_nll")} and c.name == "dirichlet"
    e = fit_calibrator("dirichlet", p, y, odir_lambda=0.5, odir_mu="cv", odir_grid=(0.0, 1e-1), odir_folds=3,
                       odir_seed=4, eps=1e-2)  # eps reaches the inner cross-validation too
    assert e.params["selected"]["inner_nll"] == select_odir(p, y, lambdas=(0.5,), mus=(0.0, 1e-1), n_folds=3,
                                                             seed=4, eps=1e-2)["inner_nll"] != sel["inner_nll"]
    assert select_odir(p, y, lambdas=(0.5,), mus=(0.0, 1e-1), n_folds=5, seed=4)["grid"] != sel["grid"]
    d = fit_calibrator("dirichlet", p, y, odir_lambda="cv", odir_grid=(1e-1, 1e-3))
    assert d.params["odir_grid"] == select_odir(p, y, lambdas=(1e-1, 1e-3), n_folds=5, seed=0)["grid"]
    full = select_odir(p, y, lambdas=(1e-1, 1e-3))  # mus=None: the same grid
    assert [row[:2] for row in full["grid"]] == [(0.1, 0.1), (0.1, 0.001), (0.001, 0.1), (0.001, 0.001)]
    assert full == select_odir(p, y, lambdas=(1e-1, 1e-3), mus=(1e-1, 1e-3), n_folds=5, seed=0)
    folds = odir_inner_folds(5, 5)  # as many folds as samples: one held out each
    assert [held.tolist() for _, held in folds] == [[i] for i in np.random.default_rng(0).permutation(5)]
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(folds, odir_inner_folds(5, 5, 0)))


def test_select_odir_counts_the_capped_folds_and_scores_with_eps():
    """The 4th entry of each grid row counts the inner fits that stopped at the cap (none on labels drawn from
    the predictions), and the inner NLL is -mean log(q_y + eps) of the inner held-out parts."""
    rng = np.random.default_rng(0)
    q = np.exp(log_softmax(rng.normal(size=(200, 3)) * 2.0, axis=1))
    y = np.array([rng.choice(3, p=row) for row in q])
    sel = select_odir(q, y, lambdas=(1e-1,), n_folds=2, eps=1e-2)
    assert sel["grid"][0][3] == 0
    nll = []
    for fit_idx, held in odir_inner_folds(200, 2, 0):
        cal = fit_calibrator("dirichlet", q[fit_idx], y[fit_idx], odir_lambda=0.1, odir_mu=0.1, eps=1e-2)
        r = cal.apply(q[held])
        nll.append(-np.mean(np.log(r[np.arange(len(held)), y[held]] + 1e-2)))
    assert sel["inner_nll"] == pytest.approx(np.mean(nll), rel=1e-12)


def test_select_odir_capped_counts_every_fold_that_stopped_at_the_cap():
    """Separable-ish data (the true class's logit + 3): some (λ, μ) fits stop at the iteration cap in some folds.
    The grid's 4th entry is, per pair, the number of folds whose fit (``fit_calibrator`` on the fold's fitting
    part) reports ``converged`` False. Which folds stop at the cap follows the last bits of L-BFGS-B's iterates,
    which follow the machine's BLAS kernels (1 and 2 of 3 where this test was written, 0 and 2 on another 2-core
    machine with the same scipy 1.17.1 and numpy 2.4.6), so the guard asks only for what catches the slips: a
    count of at least 2 (a count that keeps only the last fold gives at most 1) that is not every fold (a count of
    "any fold" gives 3); a count that subtracts (converged folds) gives 3 - k, never k for 3 folds."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 60)
    logits = rng.normal(size=(60, 3))
    logits[np.arange(60), y] += 3.0
    p = np.exp(log_softmax(logits, axis=1))
    sel = select_odir(p, y, lambdas=(0.0, 1e-1), n_folds=3)
    want = [sum(not fit_calibrator("dirichlet", p[fit], y[fit], odir_lambda=lam, odir_mu=mu).params["converged"]
                for fit, _ in odir_inner_folds(60, 3, 0)) for lam, mu, _, _ in sel["grid"]]
    assert [row[3] for row in sel["grid"]] == want
    assert any(2 <= k < 3 for k in want)


def test_affine_fits_emit_no_warning():
    """The affine calibrators' fits run without a warning (no division by zero in the objective, no option the
    solver does not know), also at the iteration cap (inner fits of the ODIR cross-validation here)."""
    import warnings

    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 60)
    logits = rng.normal(size=(60, 3))
    logits[np.arange(60), y] += 3.0
    p = np.exp(log_softmax(logits, axis=1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in ("vector", "matrix", "dirichlet"):
            fit_calibrator(name, p, y)
        assert sum(row[3] for row in select_odir(p, y, lambdas=(0.0, 1e-1), n_folds=3)["grid"]) > 0


@pytest.mark.parametrize(("call", "message"), [
    (lambda p, y: fit_calibrator("platt", p, y),
     "unknown calibrator 'platt'; known: temperature, vector, matrix, dirichlet, histogram, isotonic, bbq"),
    (lambda p, y: cross_validated_calibrators(p, y, names=("temperature", "platt")),
     "unknown calibrator 'platt'; known: temperature, vector, matrix, dirichlet, histogram, isotonic, bbq"),
    (lambda p, y: fit_calibrator("bbq", p, y, bbq_estimate="mean"),
     "estimate must be 'posterior' or 'frequency', got 'mean'"),
    (lambda p, y: fit_calibrator("dirichlet", p, y, odir_lambda="cv", odir_grid=5),
     "odir_grid must be a sequence of non-negative numbers; got 5"),
    (lambda p, y: fit_calibrator("dirichlet", p, y, odir_lambda="cv", odir_folds=1),
     "odir_folds must be an integer >= 2; got 1"),
    (lambda p, y: fit_calibrator("dirichlet", p, y, odir_lambda="cv", odir_seed=-1),
     "odir_seed must be an integer >= 0; got -1"),
    (lambda p, y: select_odir(p, y, n_folds=1), "odir_folds must be an integer >= 2; got 1"),
    (lambda p, y: select_odir(p, y, seed=-1), "odir_seed must be an integer >= 0; got -1"),
    (lambda p, y: odir_inner_folds(4, 5), "odir_lambda='cv' needs at least odir_folds=5 samples; got 4"),
])
def test_calibrator_errors_say_what_is_wrong(call, message):
    p, y = _overconfident(30, 3, 6)
    with pytest.raises(ValueError) as ei:
        call(p, y)
    assert str(ei.value) == message


def test_odir_options_are_checked_only_for_dirichlet():
    p, y = _overconfident(40, 3, 6)
    cross_validated_calibrators(p, y, names=("histogram",), n_repeats=1, odir_lambda=-1.0)


# --- BBQ's binnings --------------------------------------------------------------------------------------------

def _bbq_binnings(x, max_bins):
    """The documented model set: for B = 2..max_bins, np.unique of the (B + 1) equal-frequency quantiles, kept
    when it has at least 2 edges, outer edges widened to -1e-5 and 1 + 1e-5, the first of equal edge sets."""
    out = []
    for b in range(2, max_bins + 1):
        e = np.unique(np.quantile(x, np.linspace(0, 1, b + 1)))
        if e.shape[0] < 2:
            continue
        e[0], e[-1] = -1e-5, 1 + 1e-5
        if not any(np.array_equal(e, o) for o in out):
            out.append(e)
    return out


@pytest.mark.parametrize("max_bins", [2, 3, 6, 10])  # 10: distinct binnings with as many edges (B = 6 .. 10)
def test_bbq_binnings_are_the_documented_ones(max_bins):
    """With pruning off (bbq_prune=0) every binning of 2..max_bins equal-frequency bins is a model, duplicates
    (ties in the scores) once; the prior weight N' enters the posterior estimate as a0 = N'/B."""
    rng = np.random.default_rng(0)
    x = rng.choice([0.1, 0.3, 0.5, 0.7, 0.9], 60, p=[0.4, 0.1, 0.1, 0.1, 0.3])  # ties: B = 4, 5 repeat B = 3
    p = np.stack([1 - x, x], axis=1)
    y = (rng.random(60) < x).astype(int)
    cal = fit_calibrator("bbq", p, y, bbq_max_bins=max_bins, bbq_prune=0.0, bbq_prior_weight=5.0)
    models, weights = cal.params["models"][1]
    want = _bbq_binnings(x, max_bins)
    assert len(models) == len(want) == len(weights)
    for (edges, value), e in zip(models, want):
        np.testing.assert_array_equal(edges, e)
        idx = np.clip(np.searchsorted(e, x, side="left") - 1, 0, len(e) - 2)
        n_b = np.bincount(idx, minlength=len(e) - 1)
        m_b = np.bincount(idx, weights=y, minlength=len(e) - 1)
        a0 = 5.0 / (len(e) - 1)
        mid = (e[:-1] + e[1:]) / 2
        np.testing.assert_allclose(value, (m_b + a0 * mid) / (n_b + a0), rtol=1e-14)
    assert weights.sum() == pytest.approx(1.0)
    # bbq_prune drops the binnings of smaller posterior weight (the others keep theirs)
    pruned = fit_calibrator("bbq", p, y, bbq_max_bins=max_bins, bbq_prune=0.3, bbq_prior_weight=5.0)
    pruned = pruned.params["models"][1][1]
    np.testing.assert_array_equal(pruned, weights[weights >= 0.3])


def test_bbq_prune_zero_keeps_the_binnings_whose_weight_underflows():
    """Pruning keeps a binning of weight >= bbq_prune: at 0 every binning stays, also the 2-bin one whose
    posterior weight underflows to 0.0 on 20,000 samples (its marginal likelihood is ~ 10^-300 of the best)."""
    rng = np.random.default_rng(1)
    x = rng.random(20_000)
    p = np.stack([1 - x, x], axis=1)
    y = (rng.random(x.size) < x).astype(int)
    models, weights = fit_calibrator("bbq", p, y, bbq_max_bins=10, bbq_prune=0.0).params["models"][1]
    assert len(models) == len(weights) == 9 and weights[0] == 0.0
    np.testing.assert_array_equal(models[0][0], [-1e-5, np.median(x), 1 + 1e-5])


def test_bbq_two_values_and_a_constant_class():
    """Scores taking two values, the smaller the median, up to 3 bins: the only binning is one bin (edges -1e-5,
    1 + 1e-5) with the posterior estimate (m + a0/2) / (n + a0), a0 = 2; a constant column has the one-bin
    fallback (its label share) with weight 1, as every class's weights sum to 1."""
    x = np.array([0.2] * 6 + [0.8] * 2)
    p = np.stack([1 - x, x], axis=1)
    y = np.array([0, 1, 0, 0, 0, 0, 1, 1])
    cal = fit_calibrator("bbq", p, y, bbq_max_bins=3)
    models, weights = cal.params["models"][1]
    assert len(models) == 1 and weights.tolist() == [1.0]
    np.testing.assert_array_equal(models[0][0], [-1e-5, 1 + 1e-5])
    assert models[0][1][0] == pytest.approx((3 + 2 * 0.5) / (8 + 2), rel=1e-14)
    pc = np.array([[0.5, 0.2, 0.3], [0.3, 0.2, 0.5], [0.6, 0.2, 0.2], [0.1, 0.2, 0.7]] * 5)
    yc = np.array([0, 2, 0, 1] * 5)
    cal = fit_calibrator("bbq", pc, yc)
    for models, weights in cal.params["models"]:
        assert weights.sum() == pytest.approx(1.0, abs=1e-12)
    models, weights = cal.params["models"][1]
    assert weights.tolist() == [1.0] and models[0][1].tolist() == [0.25]
    # apply: the weighted sum of every class's model values, renormalised; the frequency estimate has empty-of-k
    # bins (value 0), whose clip at 1e-6 makes the row's scale visible
    for cal in (cal, fit_calibrator("bbq", pc, yc, bbq_estimate="frequency")):
        q = np.stack([sum(w * v[np.clip(np.searchsorted(e, pc[:, k], side="left") - 1, 0, len(v) - 1)]
                          for (e, v), w in zip(*cal.params["models"][k])) for k in range(3)], axis=1)
        q = np.clip(q / (q.sum(axis=1, keepdims=True) + 1e-12), 1e-6, 1 - 1e-6)
        np.testing.assert_allclose(cal.apply(pc), q / q.sum(axis=1, keepdims=True), rtol=1e-15, atol=0)
    assert np.any(q == 1e-6)
