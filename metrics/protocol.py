# SPDX-License-Identifier: MIT
"""The calibrated evaluation protocol of the Pitfalls paper: test-time cross-validated temperature scaling, the
calibrated log-likelihood (CLL), and metric-against-members curves.

Test-time cross-validation: the in-domain test set is halved at random; a temperature is fitted on one half and
the other half is scored with it, both ways; this is repeated ``n_repeats`` times from ``np.random.default_rng(seed)``
and every metric is averaged over the ``2 * n_repeats`` held-out halves.

How ``post`` is computed (the Pitfalls placement; ``per_member`` fits each fold on its gathered half): the member
stack is validated and averaged in one read (float64 accumulation); the log of the mean is taken once; the ten
fold temperatures come from one pass over the classes that stores each row's log-partition cumulants at a common
1/T (every fold's fit is then the root of a Taylor model summed over its rows, certified to a relative 1e-7 or
refitted exactly), and each halving is scored in one pass in which every row uses the temperature of the fold
that holds it out. The numbers are those of fitting and scoring every fold separately (pinned against a scipy
restatement in ``tests/metrics/test_protocol*.py``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._validation import check_labels, check_member_probs, check_member_probs_mean, check_n_samples
from .calibration import DEFAULT_BINS, _check_n_bins, _equal_width_error
from .classification import _brier_per_sample, _nll_per_sample
from .temperature import DEFAULT_EPS, DEFAULT_TEMPERATURE_BOUNDS, _check_bounds, _check_eps, _check_placement
from .temperature_solver import (
    _RTOL,
    _label_values,
    _member_eval,
    _minimize_beta,
    _post_eval,
    _prep_probs,
    ShiftedLogs,
    _root_from_cumulants,
    _row_cumulants,
    _scaled_row_scores,
    _scaled_row_scores_multi,
    _softmax_scaled,
)

_CV_RTOL = 1e-4  # fold fits: last step taken unevaluated below this relative size
_CUMULANT_ORDER = 5  # per-row cumulants kept for the fold fits (a quartic model of dNLL/dbeta)
_CUMULANT_MIN_ROWS = 256  # below this many rows per half the folds are fitted exactly (cheap anyway)
_CUMULANT_START_ROWS = 2048  # the first expansion point is fitted on about this many rows (a strided sub-sample)

__all__ = ["CalibratedCV", "MemberCurves", "cross_validated_calibration", "member_curves", "cv_splits"]


@dataclass(frozen=True)
class CalibratedCV:
    """Test-time cross-validated temperature scaling; every metric is a mean over the held-out halves.

    The metrics carry the names of the report's ``calibrated`` keys (``scoring/REPORT_KEYS.md``): ``cll`` is the
    calibrated log-likelihood (higher is better, ``= -calibrated_nll``); ``temperature`` the mean fitted
    temperature; ``cv_*_before`` score the uncalibrated ensemble mean on the held-out halves (``accuracy`` too),
    ``calibrated_*`` the temperature-scaled prediction; ``calibrated_accuracy`` equals ``accuracy`` for ``post``
    (a temperature keeps the argmax) but not always for ``per_member``. ``temperatures`` lists the fitted
    temperature of each fold; ``n_hit_bound`` counts folds whose optimum lay at a bound. Settings: ``n_folds``
    (halves per repeat, 2), ``n_repeats``, ``seed``, ``placement``, ``eps``, ``n_bins``, ``bounds``. The names
    before issue #10 (``temperature_mean``, ``nll_before``, ``nll_after``, ``accuracy_after``, ``brier_before``,
    ``brier_after``, ``ece_before``, ``ece_after``) remain as read-only aliases.
    """

    cll: float
    temperature: float
    temperature_std: float
    cv_nll_before: float
    calibrated_nll: float
    accuracy: float
    calibrated_accuracy: float
    cv_brier_before: float
    calibrated_brier: float
    cv_ece_before: float
    calibrated_ece: float
    n_hit_bound: int
    temperatures: tuple[float, ...]
    n_folds: int
    n_repeats: int
    seed: int
    placement: str
    eps: float
    n_bins: int
    bounds: tuple[float, float]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["temperatures"] = list(self.temperatures)
        d["bounds"] = list(self.bounds)
        return d

    # the names before issue #10, kept as aliases so that code written against them keeps working
    temperature_mean = property(lambda self: self.temperature)
    nll_before = property(lambda self: self.cv_nll_before)
    nll_after = property(lambda self: self.calibrated_nll)
    accuracy_after = property(lambda self: self.calibrated_accuracy)
    brier_before = property(lambda self: self.cv_brier_before)
    brier_after = property(lambda self: self.calibrated_brier)
    ece_before = property(lambda self: self.cv_ece_before)
    ece_after = property(lambda self: self.calibrated_ece)


@dataclass(frozen=True)
class MemberCurves:
    """Metrics of the ensemble of the first k members, k = 1..M, over ``n_orders`` random member orders.

    ``n_members`` (M,) is k; ``cll``, ``accuracy``, ``brier`` are (n_orders, M) arrays (order r, prefix size k),
    with ``*_mean`` and ``*_std`` of shape (M,). ``*_std`` is the sample std over orders (ddof=1, 0 for one
    order), as the Pitfalls notebook's ``pandas ... .agg(['mean', 'std'])`` over its 5 tries (the paper's text does
    not say which). ``orders`` (n_orders, M) holds the permutations. CLL is cross-validated as in
    :func:`cross_validated_calibration`, with halvings redrawn per order; accuracy and Brier score the
    uncalibrated mean of the prefix on the whole set.
    """

    n_members: NDArray[np.int64]
    cll: NDArray[np.float64]
    accuracy: NDArray[np.float64]
    brier: NDArray[np.float64]
    orders: NDArray[np.int64]
    n_orders: int
    n_repeats: int
    seed: int
    placement: str
    eps: float

    @property
    def cll_mean(self) -> NDArray[np.float64]:
        return self.cll.mean(axis=0)

    @property
    def cll_std(self) -> NDArray[np.float64]:
        return _std_over_orders(self.cll)

    @property
    def accuracy_mean(self) -> NDArray[np.float64]:
        return self.accuracy.mean(axis=0)

    @property
    def accuracy_std(self) -> NDArray[np.float64]:
        return _std_over_orders(self.accuracy)

    @property
    def brier_mean(self) -> NDArray[np.float64]:
        return self.brier.mean(axis=0)

    @property
    def brier_std(self) -> NDArray[np.float64]:
        return _std_over_orders(self.brier)

    def to_dict(self) -> dict:
        out = {"n_members": self.n_members.tolist()}
        for name in ("cll", "accuracy", "brier"):
            out[f"{name}_mean"] = getattr(self, f"{name}_mean").tolist()
            out[f"{name}_std"] = getattr(self, f"{name}_std").tolist()
        out.update(orders=self.orders.tolist(), n_orders=self.n_orders, n_repeats=self.n_repeats, seed=self.seed,
                   placement=self.placement, eps=self.eps)
        return out


def _std_over_orders(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """Sample std (ddof=1) over axis 0, the pandas default the Pitfalls notebook uses; zeros for one row."""
    if values.shape[0] < 2:
        return np.zeros(values.shape[1:])
    return values.std(axis=0, ddof=1)


# ---------------------------------------------------------------------------------------------------------------
# kernels


def cv_splits(n_samples: int, *, n_repeats: int = 5, seed: int = 0) -> list[tuple[NDArray[np.intp], NDArray[np.intp]]]:
    """The (fit, held-out) index pairs of test-time cross-validation, ``2 * n_repeats`` of them.

    Repeat r draws ``rng.permutation(n_samples)`` from ``rng = np.random.default_rng(seed)``; its first
    ``n_samples // 2`` entries form half A, the rest half B; the folds are (A, B) then (B, A). Each half is sorted.

    Examples
    --------
    >>> [(a.tolist(), b.tolist()) for a, b in cv_splits(4, n_repeats=1, seed=0)]
    [([0, 2], [1, 3]), ([1, 3], [0, 2])]
    """
    n_samples, n_repeats, seed = _check_int(n_samples, "n_samples", 2), _check_int(n_repeats, "n_repeats", 1), \
        _check_seed(seed)
    out = []
    half = n_samples // 2
    for perm in _halving_perms(n_samples, n_repeats, np.random.default_rng(seed)):
        a, b = np.sort(perm[:half]), np.sort(perm[half:])
        out += [(a, b), (b, a)]
    return out


def _ts_problem(probs: NDArray, labels: NDArray, eps: float):
    """(s, s_y, lse1): shifted log-probabilities, label entries and log-normalisers, computed once.

    ``probs`` (N, C) is the ensemble mean for ``post``, (M, N, C) the members for ``per_member``.
    """
    s, lse1 = _prep_probs(probs, eps)
    return s, _label_values(s, labels), lse1


def _halving_perms(n_samples: int, n_repeats: int, rng: np.random.Generator) -> list[NDArray[np.intp]]:
    """``n_repeats`` permutations of the samples drawn from ``rng``: one halving each (the first half is A)."""
    return [rng.permutation(n_samples) for _ in range(n_repeats)]


def _member_halves(problem, perms):
    """``per_member``: yield (fit half, held-out half, held-out rows) for every fold, in the order of
    :func:`cv_splits`. ``perms`` holds one permutation per repeat (:func:`_halving_perms`); each repeat gathers
    the rows once in permuted order and makes both halves contiguous for the temperature kernels."""
    s, s_y, lse1 = problem
    half = s_y.shape[-1] // 2
    for perm in perms:
        sp, syp, lp = np.take(s, perm, axis=1), s_y[:, perm], lse1[:, perm]
        a = (np.ascontiguousarray(sp[:, :half]), syp[:, :half], lp[:, :half])
        b = (np.ascontiguousarray(sp[:, half:]), syp[:, half:], lp[:, half:])
        yield a, b, perm[half:]
        yield b, a, perm[:half]


def _member_fit_half(problem, bounds, beta0):
    """``per_member``: (1/T, hit_bound) fitted on a half, from ``beta0`` (the previous fold's 1/T; None: T = 1).

    Only the temperature is needed, so the solver stops once its Newton step is below 1e-4 and takes that step
    unevaluated (error about 1e-8 relative; the held-out NLL is then exact to ~1e-16).
    """
    s, s_y, _ = problem
    beta, _, hit = _minimize_beta(lambda b: _member_eval(s, s_y, b), 1.0 / bounds[1], 1.0 / bounds[0],
                                  1.0 if beta0 is None else beta0, _CV_RTOL, polish=True)
    if hit:
        beta = 1.0 / (bounds[0] if beta > 1.0 else bounds[1])
    return beta, hit


def _member_heldout_nll(problem, beta) -> float:
    """``per_member``: NLL of the temperature-scaled prediction on a held-out half."""
    s, s_y, _ = problem
    return _member_eval(s, s_y, beta, order=0)[0]


def _cv_cll(problem, placement, bounds, perms) -> float:
    """Mean held-out CLL over the folds of the halvings ``perms`` (no other metric): the member-curve path."""
    if placement == "post":
        s, s_y, _ = problem
        fits = _post_fold_fits(s, s_y, perms, bounds)
        half, total = s_y.shape[0] // 2, 0.0
        for r, perm in enumerate(perms):
            (beta_a, _), (beta_b, _) = fits[2 * r], fits[2 * r + 1]
            nll = _post_heldout(s, s_y, perm, beta_a, beta_b)[0]
            total -= nll[perm[half:]].mean() + nll[perm[:half]].mean()
        return total / len(fits)
    total, n_folds, beta = 0.0, 0, None
    for fit_half, eval_half, _ in _member_halves(problem, perms):
        beta, _ = _member_fit_half(fit_half, bounds, beta)
        total -= _member_heldout_nll(eval_half, beta)
        n_folds += 1
    return total / n_folds


def _post_fold_fits(s, s_y, perms, bounds) -> list[tuple[float, bool]]:
    """(1/T, hit_bound) of every fold (order of :func:`cv_splits`) for ``post``, from shared per-row statistics.

    The folds' optima lie close together, so one pass over the classes at a common ``beta0`` (a fit on a strided
    sub-sample) gives each row's log-partition cumulants (``_row_cumulants``); a fold's NLL derivatives near
    ``beta0`` are then means of them over its fit rows, and its 1/T is the root of that Taylor model
    (``_root_from_cumulants``: certified to a relative 1e-7, else None). Folds left uncertain get up to two more
    passes, each at the whole set's optimum estimated from the last model, and any still uncertain fold (e.g. an
    optimum at a bound, separable data, few rows) is fitted exactly by the safeguarded Newton solver on its rows.
    """
    n = s_y.shape[0]
    half = n // 2
    beta_lo, beta_hi = 1.0 / bounds[1], 1.0 / bounds[0]
    folds = []
    for perm in perms:
        folds += [(perm[:half], perm[half:]), (perm[half:], perm[:half])]
    out: list = [None] * len(folds)
    beta0 = None
    if half >= _CUMULANT_MIN_ROWS:
        stride = max(1, n // _CUMULANT_START_ROWS)
        s_sub, s_y_sub = np.ascontiguousarray(s[::stride]), s_y[::stride]  # contiguous: streamed 2-3x faster
        beta0, _, hit = _minimize_beta(lambda b: _post_eval(s_sub, s_y_sub, b, None), beta_lo, beta_hi, 1.0, 1e-3)
        del s_sub, s_y_sub  # 2,048 x C float64 (16 MB at C = 1,000), not to sit beside the cumulants (issue #29)
        weights = np.zeros((len(folds) + 1, n))  # row i: the mean over fold i's fit rows; last row: all rows
        for i, (fit_rows, _) in enumerate(folds):
            weights[i, fit_rows] = 1.0 / fit_rows.shape[0]
        weights[-1] = 1.0 / n
        for _ in range(3 if not hit else 0):
            kap = _row_cumulants(s, beta0, _CUMULANT_ORDER)
            kap[1] -= s_y  # kappa_1 - s_y: the per-row gradient of the NLL
            g = weights @ kap[1:].T  # (folds + 1, order): every fold's model coefficients in one product
            for i in range(len(folds)):
                if out[i] is None:
                    beta = _root_from_cumulants(g[i], beta0, beta_lo, beta_hi, _RTOL)
                    out[i] = None if beta is None else (beta, False)
            if all(o is not None for o in out):
                break
            # re-expand at the whole set's optimum (estimated from this model): the folds scatter around it
            beta0 = _root_from_cumulants(g[-1], beta0, beta_lo, beta_hi, None)
            if beta0 is None:
                break
    for i, (fit_rows, _) in enumerate(folds):
        if out[i] is None:
            rows = np.sort(fit_rows)
            beta, _, hit = _minimize_beta(lambda b: _post_eval(s, s_y[rows], b, rows), beta_lo, beta_hi,
                                          1.0 if beta0 is None else beta0, _CV_RTOL, polish=True)
            if hit:
                beta = 1.0 / (bounds[0] if beta > 1.0 else bounds[1])
            out[i] = (beta, bool(hit))
    return out


def _heldout_betas(n: int, perm, beta_a, beta_b) -> NDArray[np.float64]:
    """Every row's 1/T in one halving: that of the fold that holds it out (``beta_a`` is fitted on
    ``perm[:n // 2]`` and scores the rest)."""
    half = n // 2
    b = np.empty(n)
    b[perm[half:]] = beta_a
    b[perm[:half]] = beta_b
    return b


def _post_heldout(s, s_y, perm, beta_a, beta_b, scores=None):
    """Per row, scored at the 1/T of the fold that holds it out (fit on the other half): (NLL, max q, sum q**2,
    q_y) of q = softmax(b_i s_i); ``scores`` = ``(log_z, sq)`` of :func:`_scaled_row_scores` when computed
    already (:func:`_scaled_row_scores_multi` does every halving in one pass)."""
    b = _heldout_betas(s_y.shape[0], perm, beta_a, beta_b)
    log_z, sq = _scaled_row_scores(s, b) if scores is None else scores
    log_qy = b * s_y - log_z
    return -log_qy, np.exp(-log_z), sq, np.exp(log_qy)


def _label_values_blocked(s, labels: NDArray) -> NDArray[np.float64]:
    """``s[i, labels[i]]`` (N,) read block by block (``s`` may be a :class:`ShiftedLogs`)."""
    n, c = s.shape
    out = np.empty(n)
    step = max(1, (1 << 17) // c)
    for a in range(0, n, step):
        b = min(a + step, n)
        out[a:b] = _label_values(s[a:b], labels[a:b])
    return out


def _top1_arrays(probs: NDArray, labels: NDArray):
    pred = np.argmax(probs, axis=1)
    conf = probs[np.arange(probs.shape[0]), pred].astype(np.float64)
    return conf, (pred == labels).astype(np.float64)


def _check_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; found {value!r}")
    return int(value)


def _check_seed(seed) -> int:
    return _check_int(seed, "seed", 0)


def _check_inputs(member_probs, labels, with_mean: bool = False):
    """Validated (member_probs, labels), and with ``with_mean`` the float64 member mean (one read of the stack)."""
    if with_mean:
        member_probs, mean = check_member_probs_mean(member_probs)
    else:
        member_probs = check_member_probs(member_probs)
    labels = check_labels(labels, member_probs.shape[2])
    check_n_samples(member_probs, "member_probs", labels, "labels", a_axis=1)
    if labels.shape[0] < 2:
        raise ValueError(f"labels must have at least 2 samples to be halved; found {labels.shape[0]}")
    return (member_probs, labels, mean) if with_mean else (member_probs, labels)


# ---------------------------------------------------------------------------------------------------------------
# public API


def cross_validated_calibration(
    member_probs: ArrayLike, labels: ArrayLike, *, placement: str = "post", n_repeats: int = 5, seed: int = 0,
    eps: float = DEFAULT_EPS, n_bins: int = DEFAULT_BINS, bounds: tuple[float, float] = DEFAULT_TEMPERATURE_BOUNDS,
) -> CalibratedCV:
    r"""Test-time cross-validated temperature scaling and the calibrated log-likelihood (CLL).

    Parameters
    ----------
    member_probs : ndarray of shape (n_members, n_samples, n_classes), float32 or float64, rows on the simplex
        A single model is ``probs[None]``.
    labels : ndarray of shape (n_samples,), integers in ``[0, n_classes)``; at least 2 samples
    placement : {"post", "per_member"}, default="post"
        Where the temperature acts (see :func:`ubench.metrics.temperature.fit_ensemble_temperature`).
    n_repeats : int >= 1, default=5
        Random halvings; each gives two folds.
    seed : int >= 0, default=0
        Seed of ``np.random.default_rng`` that draws the halvings (:func:`cv_splits`); recorded in the result.
    eps : float, default=1e-12
        Log floor: ``log(p + eps)`` for the fit and for NLL before scaling.
    n_bins : int, default=15
        Equal-width bins of the top-1 ECE.
    bounds : (float, float), default=(0.01, 100)
        Temperature search interval.

    Returns
    -------
    CalibratedCV
        ``cll`` <= 0, temperatures and metrics before/after scaling averaged over ``2 * n_repeats`` folds.

    Raises
    ------
    TypeError, ValueError
        Invalid arrays, fewer than 2 samples, or invalid settings.

    Notes
    -----
    .. math:: \mathrm{CLL} = \frac{1}{2R}\sum_{r=1}^{R}\sum_{(A,B)} \frac{1}{|B|}\sum_{i\in B}
              \log \hat p_{T^*_A}(y_i \mid x_i), \qquad T^*_A = \arg\min_T \mathrm{NLL}_A(T)

    Before scaling, NLL is ``-mean log(eps + p_y)`` of the ensemble mean; after, the NLL of the scaled
    prediction (Brier summed over classes, range [0, 2]; ECE top-1, bins ``(lo, hi]``).

    Convention: the Pitfalls paper (Sec. 2.6) halves the test set 5 times, as here; single-split protocols
    (Guo et al.) fit on a separate validation set and report one number.

    References
    ----------
    .. [1] A. Ashukha, A. Lyzhov, D. Molchanov, D. Vetrov (2020), Pitfalls of In-Domain Uncertainty Estimation
       and Ensembling in Deep Learning, ICLR, Sec. 2.6 and 3.1.

    Examples
    --------
    >>> import numpy as np
    >>> p = np.array([[[0.9, 0.1], [0.9, 0.1], [0.9, 0.1], [0.9, 0.1]]])
    >>> res = cross_validated_calibration(p, np.array([0, 0, 0, 1]), n_repeats=1)
    >>> res.to_dict()["n_folds"], res.accuracy
    (2, 0.75)
    """
    member_probs, labels, mean = _check_inputs(member_probs, labels, with_mean=True)
    placement, eps, bounds = _check_placement(placement), _check_eps(eps), _check_bounds(bounds)
    n_bins, n_repeats, seed = _check_n_bins(n_bins), _check_int(n_repeats, "n_repeats", 1), _check_seed(seed)
    return _calibrated_cv(member_probs, mean, labels, placement=placement, n_repeats=n_repeats, seed=seed, eps=eps,
                          n_bins=n_bins, bounds=bounds)


def _calibrated_cv(member_probs, mean, labels, *, placement: str, n_repeats: int, seed: int, eps: float,
                   n_bins: int, bounds: tuple[float, float] = DEFAULT_TEMPERATURE_BOUNDS) -> CalibratedCV:
    """:func:`cross_validated_calibration` on validated input: ``mean`` (N, C) float64 is the member mean
    (``post`` reads only it, in row blocks, and ``member_probs`` may be None; a report passes its split's mean
    without another copy or check)."""
    if labels.shape[0] < 2:
        raise ValueError(f"labels must have at least 2 samples to be halved; found {labels.shape[0]}")
    # Per-sample scores of the uncalibrated ensemble: every fold averages its rows (ECE re-bins its rows).
    nll0, brier0 = _nll_per_sample(mean, labels, eps), _brier_per_sample(mean, labels)
    conf0, hit0 = _top1_arrays(mean, labels)
    perms = _halving_perms(labels.shape[0], n_repeats, np.random.default_rng(seed))
    if placement == "post":
        rows, temps, hits = _post_cv_rows(mean, labels, eps, bounds, perms, n_bins, (nll0, brier0, conf0, hit0))
    else:
        rows, temps, hits = _member_cv_rows(member_probs, labels, eps, bounds, perms, n_bins,
                                            (nll0, brier0, conf0, hit0))
    m = np.mean(np.array(rows), axis=0)
    t = np.array(temps)
    return CalibratedCV(
        cll=float(m[0]), temperature=float(t.mean()), temperature_std=float(t.std()),
        cv_nll_before=float(m[1]), calibrated_nll=float(-m[0]), accuracy=float(m[2]), calibrated_accuracy=float(m[3]),
        cv_brier_before=float(m[4]), calibrated_brier=float(m[5]), cv_ece_before=float(m[6]),
        calibrated_ece=float(m[7]),
        n_hit_bound=int(hits), temperatures=tuple(float(x) for x in temps), n_folds=2, n_repeats=n_repeats,
        seed=seed, placement=placement, eps=eps, n_bins=n_bins, bounds=bounds,
    )


def _fold_row(cll, eval_rows, before, calibrated, n_bins):
    """One fold's metrics (the order of ``CalibratedCV``'s fields) from per-sample scores on its held-out rows."""
    nll0, brier0, conf0, hit0 = before
    conf1, hit1, brier1 = calibrated
    return (cll, float(nll0[eval_rows].mean()), float(hit0[eval_rows].mean()), float(hit1.mean()),
            float(brier0[eval_rows].mean()), float(brier1.mean()),
            _equal_width_error(conf0[eval_rows], hit0[eval_rows], n_bins), _equal_width_error(conf1, hit1, n_bins))


def _post_cv_rows(mean, labels, eps, bounds, perms, n_bins, before):
    """Fold metrics for ``post``: fits from shared per-row statistics (:func:`_post_fold_fits`), then one pass
    over the classes per halving scores every row at the 1/T of the fold that holds it out."""
    s = ShiftedLogs(mean, eps)  # never the whole (N, C) float64 at once when it is large
    s_y = _label_values_blocked(s, labels)
    fits = _post_fold_fits(s, s_y, perms, bounds)
    hit0 = before[3]
    n = labels.shape[0]
    half = n // 2
    betas = np.stack([_heldout_betas(n, perm, fits[2 * r][0], fits[2 * r + 1][0]) for r, perm in enumerate(perms)])
    log_z, sq_all = _scaled_row_scores_multi(s, betas)  # one pass over the classes for every halving
    del betas  # per-sample arrays are the peak memory of a large split's report (issue #29): each goes when done
    rows = []
    for r, perm in enumerate(perms):
        (beta_a, _), (beta_b, _) = fits[2 * r], fits[2 * r + 1]
        nll, conf, sq, q_y = _post_heldout(s, s_y, perm, beta_a, beta_b, (log_z[r], sq_all[r]))
        brier = np.maximum(sq - 2.0 * q_y + 1.0, 0.0)
        for eval_rows in (perm[half:], perm[:half]):
            # a temperature keeps the argmax (post): the calibrated hits are the uncalibrated ones
            calibrated = (conf[eval_rows], hit0[eval_rows], brier[eval_rows])
            rows.append(_fold_row(-float(nll[eval_rows].mean()), eval_rows, before, calibrated, n_bins))
        del nll, conf, q_y, brier, calibrated  # not alive beside the next halving's
    return rows, [1.0 / b for b, _ in fits], sum(h for _, h in fits)


def _member_cv_rows(member_probs, labels, eps, bounds, perms, n_bins, before):
    """Fold metrics for ``per_member``: each fold fitted on its half and scored on the other."""
    problem = _ts_problem(member_probs, labels, eps)
    rows, temps, hits, beta = [], [], 0, None
    for fit_half, eval_half, eval_rows in _member_halves(problem, perms):
        beta, hit = _member_fit_half(fit_half, bounds, beta)
        temps.append(1.0 / beta)
        hits += hit
        q = _softmax_scaled(eval_half[0], beta).mean(axis=0)
        y = labels[eval_rows]
        conf1, hit1 = _top1_arrays(q, y)
        rows.append(_fold_row(-_member_heldout_nll(eval_half, beta), eval_rows, before,
                              (conf1, hit1, _brier_per_sample(q, y)), n_bins))
    return rows, temps, hits


def _member_orders(n_members: int, n_orders: int, seed: int) -> NDArray[np.int64]:
    """``n_orders`` permutations of the members from ``default_rng([seed, 1])`` (the CV halvings use ``seed``)."""
    rng = np.random.default_rng([seed, 1])
    return np.stack([rng.permutation(n_members) for _ in range(n_orders)]).astype(np.int64)


def _prefix_curves(member_probs, labels, orders, n_repeats, seed, placement, eps, bounds, *, with_scores: bool,
                   progress=None):
    """CLL (and accuracy, Brier of the uncalibrated mean) of every prefix of every order: (R, M) arrays.

    ``post`` keeps a running float64 sum along each order (prefix k+1 = prefix k + member); ``per_member``
    re-uses the members' log-probabilities, computed once.
    """
    r, m = orders.shape
    cll, acc, brier = np.zeros((r, m)), np.zeros((r, m)), np.zeros((r, m))
    member_problem = _ts_problem(member_probs, labels, eps) if placement == "per_member" else None
    halvings = np.random.default_rng(seed)  # one stream: order 0 gets cv_splits(seed)'s halvings, order 1 the next
    for i, order in enumerate(orders):
        perms = _halving_perms(labels.shape[0], n_repeats, halvings)
        total = np.zeros(member_probs.shape[1:], dtype=np.float64)
        for k, j in enumerate(order):
            total += member_probs[j]
            mean = total / (k + 1)
            if placement == "post":
                problem = _ts_problem(mean, labels, eps)
            else:
                s, s_y, lse1 = member_problem
                sub = np.sort(order[: k + 1])
                problem = (s[sub], s_y[sub], lse1[sub])
            cll[i, k] = _cv_cll(problem, placement, bounds, perms)
            if with_scores:
                acc[i, k] = float(np.mean(np.argmax(mean, axis=1) == labels))
                brier[i, k] = float(_brier_per_sample(mean, labels).mean())
            if progress is not None:
                progress(i * m + k + 1, r * m)
    return cll, acc, brier


def member_curves(
    member_probs: ArrayLike, labels: ArrayLike, *, n_orders: int = 5, seed: int = 0, placement: str = "post",
    n_repeats: int = 5, eps: float = DEFAULT_EPS, bounds: tuple[float, float] = DEFAULT_TEMPERATURE_BOUNDS,
    progress=None,
) -> MemberCurves:
    r"""CLL, accuracy and Brier of the ensemble of the first k members, k = 1..M, over random member orders.

    Parameters
    ----------
    member_probs : ndarray of shape (n_members, n_samples, n_classes), rows on the simplex
    labels : ndarray of shape (n_samples,), integers in ``[0, n_classes)``; at least 2 samples
    n_orders : int >= 1, default=5
        Member orders R; order r is a permutation and its prefixes are nested.
    seed : int >= 0, default=0
        Orders come from ``np.random.default_rng([seed, 1])``. The CV halvings are redrawn per order from one
        stream ``np.random.default_rng(seed)``: order r uses permutations ``r * n_repeats`` to
        ``(r + 1) * n_repeats - 1`` for all its prefixes, so order 0 uses ``cv_splits(n_samples,
        n_repeats=n_repeats, seed=seed)`` and its full-ensemble point equals
        :func:`cross_validated_calibration`'s ``cll`` with this seed.
    placement : {"post", "per_member"}, default="post"
    n_repeats : int >= 1, default=5
    eps : float, default=1e-12
    bounds : (float, float), default=(0.01, 100)
    progress : callable, optional
        ``progress(done, total)`` after each of the ``n_orders * M`` prefixes (a cross-validated fit each).

    Returns
    -------
    MemberCurves
        (n_orders, M) arrays and their mean/std over orders.

    Notes
    -----
    .. math:: \bar p^{(r,k)} = \frac{1}{k}\sum_{j=1}^{k} p_{\pi_r(j)}, \qquad
              \mathrm{CLL}_{\mathrm{mean}}(k) = \frac{1}{R}\sum_r \mathrm{CLL}\big(\bar p^{(r,k)}\big)

    Convention: as the Pitfalls code (``ens/ens-deepens.py``, ``utils/utils.py:add_metrics_ts``,
    ``metrics.py:metrics_kfold``): each of its 5 tries permutes the members and every CV call draws fresh
    ``KFold(2, shuffle=True)`` halvings, so the spread over tries holds both the member order and the halving,
    and the std at k = M is not 0. ubench redraws the halvings per order (seeded; the code redraws them per
    prefix too, which gives the same spread at each k but a jagged curve along k) and reports the sample std
    over orders (ddof=1, pandas' default in the DEE notebook).

    References
    ----------
    .. [1] A. Ashukha et al. (2020), Pitfalls of In-Domain Uncertainty Estimation and Ensembling in Deep
       Learning, ICLR, Sec. 3.1.

    Examples
    --------
    >>> import numpy as np
    >>> mp = np.array([[[0.9, 0.1], [0.2, 0.8]], [[0.6, 0.4], [0.4, 0.6]]])
    >>> curves = member_curves(mp, np.array([0, 1]), n_orders=2, n_repeats=1)
    >>> curves.n_members.tolist(), curves.accuracy_mean.tolist()
    ([1, 2], [1.0, 1.0])
    """
    member_probs, labels = _check_inputs(member_probs, labels)
    placement, eps, bounds = _check_placement(placement), _check_eps(eps), _check_bounds(bounds)
    n_orders, n_repeats, seed = _check_int(n_orders, "n_orders", 1), _check_int(n_repeats, "n_repeats", 1), \
        _check_seed(seed)
    orders = _member_orders(member_probs.shape[0], n_orders, seed)
    cll, acc, brier = _prefix_curves(
        member_probs, labels, orders, n_repeats, seed, placement, eps, bounds, with_scores=True, progress=progress
    )
    return MemberCurves(
        n_members=np.arange(1, member_probs.shape[0] + 1, dtype=np.int64), cll=cll, accuracy=acc, brier=brier,
        orders=orders, n_orders=n_orders, n_repeats=n_repeats, seed=seed, placement=placement, eps=eps,
    )
