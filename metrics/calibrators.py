# SPDX-License-Identifier: MIT
"""Post-hoc calibrators of stored probabilities, each fitted and evaluated under test-time cross-validation.

Every calibrator maps (N, C) probabilities to (N, C) probabilities: it is fitted on one half of a split and
applied to the other, over the same 2 x ``repeats`` halvings as temperature scaling (:func:`~ubench.metrics.
cv_splits`), and :func:`cross_validated_calibrators` reports the held-out NLL, Brier and ECE averaged over the
folds. Archives hold probabilities, not logits, so the "logits" of the scaling methods are ``log(p + eps)``
(any logits of the model differ from them by a per-sample constant, which a softmax ignores; for matrix scaling
this makes it the unregularised Dirichlet calibration of Kull et al. 2019).

Calibrators: ``temperature`` (Guo et al. 2017), ``vector`` (one temperature per class, as ``ubench.metrics.
fit_vector_scaling``), ``matrix`` (``softmax(W log p + b)``, Guo et al.), ``dirichlet`` (the same map with Kull
et al.'s off-diagonal and intercept regularisation, ODIR), ``histogram`` (one-vs-rest equal-width histogram
binning, Zadrozny & Elkan 2001), ``isotonic`` (one-vs-rest isotonic regression, Zadrozny & Elkan 2002) and
``bbq`` (one-vs-rest Bayesian binning into quantiles, Naeini et al. 2015); the one-vs-rest ones renormalise each
row. Their conventions follow torch-uncertainty 0.13's post-processing modules (the maintained implementations
of all seven) except where a docstring says otherwise.

``dirichlet``'s ODIR strengths are fixed (:data:`ODIR_LAMBDA`, :data:`ODIR_MU`) unless ``odir_lambda="cv"``
(opt-in): then λ and μ are chosen in each fitting half by an inner 5-fold cross-validation over Kull et al.'s grid
and refitted on the whole half (:func:`select_odir`, which says what the reference code does and where ubench
differs). ``matrix`` stays unregularised and has no such option: Kull et al.'s tuned matrix scaling (MS-ODIR,
experiments_dnn ``tune_cal_odir.py --comp_l2 --use_logits``) is the ODIR objective on logits, and on the
log-probabilities ubench has it is the same map and objective as ``dirichlet`` with ``odir_lambda="cv"``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .calibration import _ece
from .classification import _brier_per_sample, _check_probs_labels, _nll
from .protocol import cv_splits
from .temperature import DEFAULT_EPS, apply_temperature, fit_temperature
from .vector_scaling import apply_vector_scaling, fit_vector_scaling

__all__ = ["CALIBRATORS", "FittedCalibrator", "fit_calibrator", "cross_validated_calibrators",
           "CalibratorScores", "select_odir", "odir_inner_folds", "ODIR_GRID", "ODIR_FOLDS"]

CALIBRATORS = ("temperature", "vector", "matrix", "dirichlet", "histogram", "isotonic", "bbq")

#: Default ODIR strengths of ``dirichlet`` (λ off-diagonal, μ intercept). Kull et al. pick them per data set by an
#: inner cross-validation over 10^-k grids; a scorer of fixed predictions fixes them (override with options, or
#: ``odir_lambda="cv"`` for the inner cross-validation: :func:`select_odir`).
ODIR_LAMBDA = 1e-3
ODIR_MU = 1e-3
#: The λ and μ grid of ``odir_lambda="cv"``: Kull et al.'s ``l2_odir`` (experiments_neurips, for the same
#: normalised objective as ubench's), largest first; ties go to the first grid point.
ODIR_GRID = (1e3, 1e1, 1e-1, 1e-3, 1e-5, 1e-7)
#: Inner folds of ``odir_lambda="cv"`` (Kull et al.'s neural-network experiments: 5-fold ``KFold``).
ODIR_FOLDS = 5
#: Histogram binning: equal-width bins (torch-uncertainty's default 15; bins are ``(lo, hi]`` as ubench's ECE).
HISTOGRAM_BINS = 15
#: BBQ: largest number of equal-frequency bins, Dirichlet prior equivalent sample size N' (Naeini et al.: 2) and
#: the posterior weight below which a binning is dropped (torch-uncertainty's defaults).
BBQ_MAX_BINS = 15
BBQ_PRIOR_WEIGHT = 2.0
BBQ_PRUNE = 1e-9
#: One-vs-rest outputs are clipped to [eps, 1 - eps] after renormalising (torch-uncertainty: 1e-6).
OVR_EPS = 1e-6


@dataclass(frozen=True)
class FittedCalibrator:
    """A calibrator fitted on some data: ``apply(probs)`` maps (N, C) probabilities to calibrated ones."""

    name: str
    apply: Callable[[NDArray], NDArray[np.float64]] = field(repr=False)
    params: dict = field(default_factory=dict, repr=False)


# --- scaling maps on log-probabilities ------------------------------------------------------------------------

def _affine_fit(x: NDArray[np.float64], labels: NDArray, lam: float, mu: float) -> tuple[NDArray, NDArray, bool]:
    """W (C, C), b (C) minimising mean CE(softmax(x W^T + b), y) + λ Σ_{i≠j} W_ij² / (C(C-1)) + μ Σ b² / C
    (Kull et al.'s ODIR normalisation; λ = μ = 0 is matrix scaling), by Newton-CG from W = I, b = 0; and whether
    it converged before its 200-iteration cap. On (near-)separable data the unpenalised directions (the diagonal of
    W; all of W and b in matrix scaling) have no finite optimum: the fit stops at the cap, the training loss is
    flat to ~1e-6 and the held-out numbers depend on where the solver stopped."""
    from scipy.special import log_softmax  # at use: scipy.special costs `ubench score` start-up otherwise

    n, c = x.shape
    onehot = np.zeros((n, c))
    onehot[np.arange(n), labels] = 1.0
    off = 1.0 - np.eye(c)
    norm_w = lam / (c * (c - 1)) if c > 1 else 0.0

    cache: dict = {}

    def probs_at(theta: NDArray) -> NDArray:
        key = theta.tobytes()
        if cache.get("key") != key:
            w, b = theta[: c * c].reshape(c, c), theta[c * c :]
            cache.update(key=key, logp=log_softmax(x @ w.T + b, axis=1))
        return cache["logp"]

    def objective(theta: NDArray) -> tuple[float, NDArray]:
        w, b = theta[: c * c].reshape(c, c), theta[c * c :]
        logp = probs_at(theta)
        loss = -np.sum(logp * onehot) / n + norm_w * np.sum((w * off) ** 2) + mu * np.sum(b**2) / c
        d = (np.exp(logp) - onehot) / n
        gw = d.T @ x + 2.0 * norm_w * w * off
        gb = d.sum(0) + 2.0 * mu * b / c
        return float(loss), np.concatenate([gw.ravel(), gb])

    def hessp(theta: NDArray, v: NDArray) -> NDArray:
        # Softmax cross-entropy Hessian times v: dz = x V^T + v_b; H dz = p * dz - p (p . dz) per sample.
        p = np.exp(probs_at(theta))
        vw, vb = v[: c * c].reshape(c, c), v[c * c :]
        dz = x @ vw.T + vb
        hz = p * dz - p * np.sum(p * dz, axis=1, keepdims=True)
        hw = hz.T @ x / n + 2.0 * norm_w * vw * off
        hb = hz.sum(0) / n + 2.0 * mu * vb / c
        return np.concatenate([hw.ravel(), hb])

    theta0 = np.concatenate([np.eye(c).ravel(), np.zeros(c)])
    # Newton-CG with exact Hessian-vector products: the objective is convex, so a few Newton steps reach the
    # optimum that L-BFGS approaches in hundreds of iterations on these ill-conditioned log-probabilities.
    from scipy.optimize import minimize  # at use: scipy.optimize costs `ubench score` start-up otherwise

    res = minimize(objective, theta0, jac=True, hessp=hessp, method="Newton-CG",
                   options={"maxiter": 200, "xtol": 1e-10})
    return res.x[: c * c].reshape(c, c), res.x[c * c :], bool(res.success)


def _fit_affine(name: str, probs: NDArray, labels: NDArray, eps: float, lam: float, mu: float) -> FittedCalibrator:
    from scipy.special import softmax  # at use (start-up)

    w, b, converged = _affine_fit(np.log(probs.astype(np.float64) + eps), labels, lam, mu)
    return FittedCalibrator(name, lambda p: softmax(np.log(p.astype(np.float64) + eps) @ w.T + b, axis=1),
                            {"weight": w, "bias": b, "lambda": lam, "mu": mu, "converged": converged})


# --- one-vs-rest binning maps ----------------------------------------------------------------------------------

def _renormalised(q: NDArray[np.float64]) -> NDArray[np.float64]:
    """One-vs-rest outputs to a distribution as torch-uncertainty's scalers leave them for a softmax: divide by the
    row sum (+1e-12), clip to [eps, 1 - eps], take logs; the softmax of those logs renormalises once more."""
    q = np.clip(q / (q.sum(axis=1, keepdims=True) + 1e-12), OVR_EPS, 1.0 - OVR_EPS)
    return q / q.sum(axis=1, keepdims=True)


def _fit_histogram(probs: NDArray, labels: NDArray, n_bins: int) -> FittedCalibrator:
    """Per class, the share of positives in each equal-width bin ``(lo, hi]`` of ``p_c``; an empty bin keeps its
    centre (torch-uncertainty's convention)."""
    n, c = probs.shape
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    inner = edges[1:-1]
    values = np.empty((c, n_bins))
    centres = 0.5 * (edges[:-1] + edges[1:])
    for k in range(c):
        idx = np.searchsorted(inner, probs[:, k], side="left")  # (lo, hi]: torch.bucketize's default
        count = np.bincount(idx, minlength=n_bins)
        pos = np.bincount(idx, weights=(labels == k).astype(np.float64), minlength=n_bins)
        values[k] = np.where(count > 0, pos / np.maximum(count, 1), centres)

    def apply(p: NDArray) -> NDArray[np.float64]:
        idx = np.searchsorted(inner, p, side="left")
        return _renormalised(values[np.arange(c)[None, :], idx])

    return FittedCalibrator("histogram", apply, {"edges": edges, "values": values})


def _isotonic_1d(x: NDArray, y: NDArray) -> tuple[NDArray, NDArray]:
    """Thresholds and values of the non-decreasing least-squares fit of y on x, clipped to [0, 1]: duplicate x
    pooled by their mean y (weights = counts), then pool-adjacent-violators (scipy). Predictions interpolate
    linearly between thresholds and clip outside them, as scikit-learn's ``IsotonicRegression(out_of_bounds=
    "clip")`` does."""
    ux, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    ymean = np.bincount(inverse, weights=y) / counts
    from scipy.optimize import isotonic_regression  # at use (start-up)

    fit = isotonic_regression(ymean, weights=counts.astype(np.float64), increasing=True).x
    return ux, np.clip(fit, 0.0, 1.0)


def _fit_isotonic(probs: NDArray, labels: NDArray) -> FittedCalibrator:
    p64 = probs.astype(np.float64)
    maps = [_isotonic_1d(p64[:, k], (labels == k).astype(np.float64)) for k in range(probs.shape[1])]

    def apply(p: NDArray) -> NDArray[np.float64]:
        p = p.astype(np.float64)
        q = np.stack([np.interp(p[:, k], xk, yk) for k, (xk, yk) in enumerate(maps)], axis=1)
        return _renormalised(q)

    return FittedCalibrator("isotonic", apply, {"maps": maps})


def _bbq_class(x: NDArray, y: NDArray, max_bins: int, prior: float, prune: float, estimate: str):
    """BBQ for one class: the equal-frequency binnings with 2..max_bins bins (edges at ``np.quantile``, duplicates
    merged, outer edges widened to -1e-5 and 1 + 1e-5), each scored by its BDeu marginal likelihood
    ``Σ_b lnΓ(N'/B) - lnΓ(n_b + N'/B) + lnΓ(m_b + α_b) - lnΓ(α_b) + lnΓ(n_b - m_b + β_b) - lnΓ(β_b)`` with
    ``α_b = N'/B · p̄_b``, ``β_b = N'/B · (1 - p̄_b)`` at the bin midpoint ``p̄_b``, weighted by the softmax of the
    scores. ``estimate="posterior"`` predicts ``(m_b + α_b) / (n_b + α_b + β_b)`` in a bin (Naeini et al.'s
    Bayesian estimate); ``"frequency"`` predicts ``m_b / n_b`` (torch-uncertainty's)."""
    from scipy.special import gammaln, softmax  # at use (start-up)

    models, scores, seen = [], [], set()
    for b in range(2, max_bins + 1):
        edges = np.unique(np.quantile(x, np.linspace(0.0, 1.0, b + 1)))
        if edges.shape[0] < 2:
            continue
        edges[0], edges[-1] = -1e-5, 1.0 + 1e-5
        key = tuple(np.round(edges, 9))
        if key in seen:
            continue
        seen.add(key)
        nb = edges.shape[0] - 1
        idx = np.clip(np.searchsorted(edges, x, side="left") - 1, 0, nb - 1)
        n_b = np.bincount(idx, minlength=nb).astype(np.float64)
        m_b = np.bincount(idx, weights=y, minlength=nb)
        a0 = prior / nb
        mid = 0.5 * (edges[:-1] + edges[1:])
        alpha, beta = a0 * mid, a0 * (1.0 - mid)
        score = np.sum(gammaln(a0) - gammaln(n_b + a0) + gammaln(m_b + alpha) - gammaln(alpha)
                       + gammaln(n_b - m_b + beta) - gammaln(beta))
        if estimate == "posterior":
            value = (m_b + alpha) / (n_b + alpha + beta)
        else:
            value = np.where(n_b > 0, m_b / np.maximum(n_b, 1.0), mid)
        models.append((edges, value))
        scores.append(score)
    if not models:  # every probability equal: one bin
        return [(np.array([-1e-5, 1.0 + 1e-5]), np.array([float(y.mean())]))], np.array([1.0])
    w = softmax(np.array(scores))
    keep = w >= prune
    return [m for m, k in zip(models, keep) if k], w[keep]


def _fit_bbq(probs: NDArray, labels: NDArray, max_bins: int, prior: float, prune: float,
             estimate: str) -> FittedCalibrator:
    if estimate not in ("posterior", "frequency"):
        raise ValueError(f"estimate must be 'posterior' or 'frequency', got {estimate!r}")
    p64 = probs.astype(np.float64)
    per_class = [_bbq_class(p64[:, k], (labels == k).astype(np.float64), max_bins, prior, prune, estimate)
                 for k in range(probs.shape[1])]

    def apply(p: NDArray) -> NDArray[np.float64]:
        p = p.astype(np.float64)
        q = np.zeros(p.shape)
        for k, (models, weights) in enumerate(per_class):
            for (edges, value), w in zip(models, weights):
                idx = np.clip(np.searchsorted(edges, p[:, k], side="left") - 1, 0, value.shape[0] - 1)
                q[:, k] += w * value[idx]
        return _renormalised(q)

    return FittedCalibrator("bbq", apply, {"models": per_class, "estimate": estimate})


# --- the public entry points ----------------------------------------------------------------------------------

def _odir_value(options: dict, key: str, default: float) -> float | str:
    v = options.get(key, default)
    if isinstance(v, str):
        if v == "cv":
            return v
        try:
            v = float(v)
        except ValueError:
            raise ValueError(f"{key} must be a non-negative number or 'cv'; got {v!r}") from None
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not np.isfinite(v) \
            or v < 0:
        raise ValueError(f"{key} must be a non-negative number or 'cv'; got {v!r}")
    return float(v)


def _odir_settings(options: dict) -> tuple[float | str, float | str, tuple[float, ...], int, int]:
    """(λ, μ, grid, folds, seed) of ``dirichlet`` from the options, each checked. ``odir_lambda="cv"`` selects μ
    too unless ``odir_mu`` is given (as Kull et al., who tune both)."""
    lam = _odir_value(options, "odir_lambda", ODIR_LAMBDA)
    mu = _odir_value(options, "odir_mu", "cv" if lam == "cv" and "odir_mu" not in options else ODIR_MU)
    grid = options.get("odir_grid", ODIR_GRID)
    try:
        grid = tuple(float(g) for g in grid)
    except (TypeError, ValueError):
        raise ValueError(f"odir_grid must be a sequence of non-negative numbers; got {grid!r}") from None
    if not grid or not all(np.isfinite(g) and g >= 0 for g in grid):
        raise ValueError(f"odir_grid must be a non-empty sequence of non-negative numbers; got {grid!r}")
    folds, seed = options.get("odir_folds", ODIR_FOLDS), options.get("odir_seed", 0)
    for key, v, lo in (("odir_folds", folds, 2), ("odir_seed", seed, 0)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"{key} must be an integer >= {lo}; got {v!r}")
    return lam, mu, grid, int(folds), int(seed)


def odir_inner_folds(n_samples: int, n_folds: int = ODIR_FOLDS, seed: int = 0) -> list[tuple[NDArray, NDArray]]:
    """The (fit, held-out) index pairs of ``odir_lambda="cv"``'s inner cross-validation of ``n_samples`` rows:
    ``np.random.default_rng(seed).permutation(n_samples)`` cut into ``n_folds`` consecutive parts whose sizes
    differ by at most one, the larger first (``np.array_split``; scikit-learn's ``KFold`` of the permuted rows);
    fold k holds out part k. Each index array is sorted. Not stratified, as Kull et al.'s ``KFold``."""
    if n_samples < n_folds:
        raise ValueError(f"odir_lambda='cv' needs at least odir_folds={n_folds} samples; got {n_samples}")
    parts = np.array_split(np.random.default_rng(seed).permutation(n_samples), n_folds)
    return [(np.sort(np.concatenate(parts[:k] + parts[k + 1:])), np.sort(parts[k])) for k in range(n_folds)]


def select_odir(probs: ArrayLike, labels: ArrayLike, *, eps: float = DEFAULT_EPS, lambdas: Sequence[float] = ODIR_GRID,
                mus: Sequence[float] | None = None, n_folds: int = ODIR_FOLDS, seed: int = 0) -> dict:
    """ODIR strengths of ``dirichlet`` chosen by inner K-fold cross-validation, as Kull et al. (2019) choose them.

    Every (λ, μ) of ``lambdas`` x ``mus`` (``mus=None``: ``lambdas``) is fitted on K-1 parts of
    :func:`odir_inner_folds` (``n_folds``, ``seed``) and scored by the held-out NLL (``-log(p_y + eps)``) of the
    remaining part; the pair with the lowest mean over the K parts wins (the first in grid order, λ outer, on ties).
    Returns ``{"lambda", "mu", "inner_nll", "grid"}``: the choice, its mean inner NLL, and every pair's
    ``(λ, μ, mean inner NLL, folds that stopped at the iteration cap)``.

    What the reference does, and where ubench differs:

    * Kull et al.'s neural-network experiments (github.com/dirichletcal/experiments_dnn, ``scripts/
      tune_cal_odir.py`` with ``--comp_l2``, ``scripts/tune_dirichlet_nn_slim.py``) cross every λ of
      ``{1, 0.25, 0.5} x 10^k``, k = -5..6 (from -2 with 100 classes), with every μ of ``10^k``, fit a Keras
      Dirichlet layer (Adam, early stopping) on each of 5 ``KFold(shuffle=True, random_state=15)`` parts of the
      validation set (not stratified), and pick the pair with the lowest mean held-out log-loss
      (``notebooks/Final Results...ipynb``, ``get_best_validation(param="Loss")``); their penalty there is not
      divided by C(C-1) or C. The test predictions are the average of the 5 fold models: no refit.
    * Their non-neural experiments (github.com/dirichletcal/experiments_neurips, ``calib/models/calibration.py``
      ``dirichlet_odir_l2``) use the grid ``l2_odir`` = 1e3, 1e1, ..., 1e-7 for both λ and μ with ``reg_norm=True``
      (λ / (C(C-1)), μ / C: ubench's objective), via the ``dirichlet`` submodule's ``FullDirichletCalibrator``
      (dirichlet_python commit 6c750d9, ``calib/fulldirichlet.py``): each pair fitted on the calibration part and
      the log-loss read on a separate set (``calib/utils/calibration.py``: the classifier's training part of a
      3-fold ``StratifiedKFold``), again averaging the inner models rather than refitting.
    * ubench uses the ``l2_odir`` grid, since its objective is the normalised one, and the neural experiments'
      5 unstratified inner folds of the data it is given (one half of a test-time CV split), scores by its own
      NLL (eps as everywhere in ubench; scikit-learn's ``log_loss`` clips at 1e-15), fits by Newton-CG, and then
      refits the chosen pair on the whole half (:func:`fit_calibrator` with ``odir_lambda="cv"``), so that one map
      is applied to the held-out half as with every other calibrator.
    """
    from scipy.special import softmax  # at use (start-up)

    probs, labels = _check_probs_labels(probs, labels)
    lambdas = _odir_settings({"odir_grid": lambdas, "odir_folds": n_folds, "odir_seed": seed})[2]
    mus = lambdas if mus is None else _odir_settings({"odir_grid": mus})[2]
    x = np.log(probs.astype(np.float64) + eps)
    folds = odir_inner_folds(labels.shape[0], n_folds, seed)
    table = []
    for lam in lambdas:
        for mu in mus:
            nlls, capped = [], 0
            for fit_idx, held in folds:
                w, b, converged = _affine_fit(x[fit_idx], labels[fit_idx], lam, mu)
                q = softmax(x[held] @ w.T + b, axis=1)
                nlls.append(_nll(q, labels[held], eps))
                capped += not converged
            table.append((lam, mu, float(np.mean(nlls)), capped))
    best = min(range(len(table)), key=lambda i: (table[i][2], i))
    return {"lambda": table[best][0], "mu": table[best][1], "inner_nll": table[best][2], "grid": table}


def _fit_dirichlet(probs: NDArray, labels: NDArray, eps: float, options: dict) -> FittedCalibrator:
    lam, mu, grid, folds, seed = _odir_settings(options)
    if lam != "cv" and mu != "cv":
        return _fit_affine("dirichlet", probs, labels, eps, lam, mu)
    sel = select_odir(probs, labels, eps=eps, lambdas=grid if lam == "cv" else (lam,),
                      mus=grid if mu == "cv" else (mu,), n_folds=folds, seed=seed)
    cal = _fit_affine("dirichlet", probs, labels, eps, sel["lambda"], sel["mu"])
    cal.params["selected"] = {"lambda": sel["lambda"], "mu": sel["mu"], "inner_nll": sel["inner_nll"]}
    cal.params["odir_grid"] = sel["grid"]
    return cal


def _fit(name: str, probs: NDArray, labels: NDArray, eps: float, options: dict) -> FittedCalibrator:
    if name == "temperature":
        t = fit_temperature(probs, labels, eps=eps).temperature
        return FittedCalibrator(name, lambda p: apply_temperature(p, t, eps=eps), {"temperature": t})
    if name == "vector":
        ts = fit_vector_scaling(probs, labels, eps=eps).temperatures
        return FittedCalibrator(name, lambda p: apply_vector_scaling(p, ts, eps=eps), {"temperatures": ts})
    if name == "matrix":
        return _fit_affine(name, probs, labels, eps, 0.0, 0.0)
    if name == "dirichlet":
        return _fit_dirichlet(probs, labels, eps, options)
    if name == "histogram":
        return _fit_histogram(probs, labels, int(options.get("histogram_bins", HISTOGRAM_BINS)))
    if name == "isotonic":
        return _fit_isotonic(probs, labels)
    if name == "bbq":
        return _fit_bbq(probs, labels, int(options.get("bbq_max_bins", BBQ_MAX_BINS)),
                        float(options.get("bbq_prior_weight", BBQ_PRIOR_WEIGHT)),
                        float(options.get("bbq_prune", BBQ_PRUNE)), str(options.get("bbq_estimate", "posterior")))
    raise ValueError(f"unknown calibrator {name!r}; known: {', '.join(CALIBRATORS)}")


def fit_calibrator(name: str, probs: ArrayLike, labels: ArrayLike, *, eps: float = DEFAULT_EPS,
                   **options) -> FittedCalibrator:
    """Fit calibrator ``name`` (:data:`CALIBRATORS`) to ``probs`` (N, C) and ``labels``.

    Options: ``odir_lambda``, ``odir_mu`` (dirichlet: a number >= 0, or ``"cv"`` to choose it by the inner
    cross-validation of :func:`select_odir` and refit the chosen pair on all of ``probs``; ``odir_lambda="cv"``
    chooses μ too unless ``odir_mu`` is given; the choice is ``params["selected"]``), ``odir_grid``, ``odir_folds``,
    ``odir_seed`` (that cross-validation's grid, folds and seed), ``histogram_bins``, ``bbq_max_bins``,
    ``bbq_prior_weight``, ``bbq_prune``, ``bbq_estimate`` (``"posterior"`` or ``"frequency"``). See the module docstring.

    Examples
    --------
    >>> import numpy as np
    >>> p = np.array([[0.9, 0.1], [0.8, 0.2], [0.7, 0.3], [0.6, 0.4]])
    >>> # Two bins per class: every p_0 lies in (0.5, 1], where 3 of 4 labels are 0; every p_1 in (0, 0.5].
    >>> fit_calibrator("histogram", p, np.array([0, 0, 1, 0]), histogram_bins=2).apply(p)[0]
    array([0.75, 0.25])
    """
    probs, labels = _check_probs_labels(probs, labels)
    return _fit(name, probs, labels, eps, options)


@dataclass(frozen=True)
class CalibratorScores:
    """Held-out NLL, Brier and ECE of one calibrator, means over the test-time CV folds (and per fold), and
    the number of folds whose fit did not converge (only the iterative ``matrix`` and ``dirichlet`` can fail to)."""

    name: str
    nll: float
    brier: float
    ece: float
    folds: tuple[dict, ...] = field(repr=False, default=())
    unconverged_folds: int = 0
    #: ``dirichlet`` with ``odir_lambda``/``odir_mu="cv"``: the (λ, μ) chosen in each fold, ``{"lambda", "mu",
    #: "inner_nll"}``; empty otherwise.
    selected: tuple[dict, ...] = field(repr=False, default=())


def cross_validated_calibrators(probs: ArrayLike, labels: ArrayLike, names: Sequence[str] = CALIBRATORS, *,
                                n_repeats: int = 5, seed: int = 0, eps: float = DEFAULT_EPS, n_bins: int = 15,
                                **options) -> dict[str, CalibratorScores]:
    r"""Every calibrator in ``names`` fitted on one half and scored on the other, over the halvings of
    :func:`~ubench.metrics.cv_splits` (``2 * n_repeats`` folds, from ``seed``).

    Returns ``{name: CalibratorScores}`` with the mean held-out ``nll`` (:math:`-\log(\tilde p_y + \text{eps})`),
    ``brier`` (summed over classes, in [0, 2]) and ``ece`` (``n_bins`` equal-width bins). The ``temperature``
    entry equals the calibrated protocol's ``calibrated_{nll,brier,ece}`` on the same folds.
    ``unconverged_folds`` counts the folds whose ``matrix``/``dirichlet`` fit stopped at its iteration cap (the
    refit on the whole half, with ``odir_lambda="cv"``); ``selected`` holds the (λ, μ) that option chose per fold,
    its inner folds drawn from ``odir_seed`` (default: ``seed``) within each half, and each fold's dict in ``folds``
    also holds the whole ``odir_grid`` table of :func:`select_odir`.
    """
    probs, labels = _check_probs_labels(probs, labels)
    for name in names:
        if name not in CALIBRATORS:
            raise ValueError(f"unknown calibrator {name!r}; known: {', '.join(CALIBRATORS)}")
    options.setdefault("odir_seed", seed)
    if "dirichlet" in names:
        _odir_settings(options)  # bad values fail before any fit
    folds = cv_splits(labels.shape[0], n_repeats=n_repeats, seed=seed)
    out = {}
    for name in names:
        per_fold = []
        for fit_idx, held in folds:
            cal = _fit(name, probs[fit_idx], labels[fit_idx], eps, options)
            q = cal.apply(probs[held])
            y = labels[held]
            per_fold.append({"nll": _nll(q, y, eps), "brier": float(_brier_per_sample(q, y).mean()),
                             "ece": _ece(q, y, n_bins), "converged": cal.params.get("converged", True)})
            if "selected" in cal.params:
                per_fold[-1].update(selected=cal.params["selected"], odir_grid=cal.params["odir_grid"])
        out[name] = CalibratorScores(
            name, *(float(np.mean([f[k] for f in per_fold])) for k in ("nll", "brier", "ece")), tuple(per_fold),
            sum(not f["converged"] for f in per_fold), tuple(f["selected"] for f in per_fold if "selected" in f))
    return out
