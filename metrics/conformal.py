# SPDX-License-Identifier: MIT
"""Split-conformal prediction sets (THR, APS, RAPS) under test-time cross-validation.

Each fold of :func:`~ubench.metrics.cv_splits` (the same 2 x 5 halvings as cross-validated temperature scaling)
calibrates the conformal threshold on one half and evaluates coverage and set size on the other; the report is the
mean over folds. With exchangeable samples every fold's expected coverage lies in
``[1 - α, 1 - α + 1/(n_cal + 1))`` (Vovk et al. 2005; Angelopoulos & Bates 2023, Thm. 1).

How :func:`cross_validated_conformal` computes APS/RAPS without sorting whole rows (issue #29): the true label's
score is the running sum of the classes ranked at or above it, so only those are ranked; a row's score is
non-decreasing along its ranking (``s_k - s_{k-1} = u p_{k-1} + (1 - u) p_k + λ[k > k_reg] >= 0``), so a set is
a prefix of the ranking and ends before the first class whose running sum before it already exceeds the
threshold; only the classes above a cut-off whose kept mass exceeds the row's largest threshold are ranked
(:mod:`ubench.metrics.row_ranking`). The running sums are those of the full sort bit for bit, so coverage and set
sizes equal :func:`conformal_scores` + :func:`conformal_sets` exactly (pinned in
``tests/metrics/test_conformal_fast.py``, also against MAPIE). Two passes over the rows, memory one row block.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .classification import _check_probs_labels
from .protocol import cv_splits
from .row_ranking import RankedPrefix, ranked_prefix, row_blocks

__all__ = ["CONFORMAL_METHODS", "ConformalResult", "conformal_scores", "conformal_quantile", "conformal_sets",
           "cross_validated_conformal"]

#: Non-conformity scores: ``thr`` (LAC; Sadinle, Lei & Wasserman 2019), ``aps`` (Romano, Sesia & Candès 2020),
#: ``raps`` (Angelopoulos, Bates, Malik & Jordan 2021).
CONFORMAL_METHODS = ("thr", "aps", "raps")

#: RAPS regularisation: torch-uncertainty 0.13's defaults (penalty λ = 0.1, k_reg = 1); the RAPS paper's code picks
#: them per data set on held-out data, which a scorer of fixed predictions cannot do without a third split.
RAPS_PENALTY = 0.1
RAPS_KREG = 1


def conformal_scores(probs: NDArray, method: str, *, penalty: float = RAPS_PENALTY, kreg: int = RAPS_KREG,
                     noise: NDArray | None = None) -> NDArray[np.float64]:
    r"""Non-conformity score of every (sample, class) pair, shape (N, C); assumes validated probabilities.

    ``thr``: :math:`1 - p_c`. ``aps``: the mass of the classes ranked above and at ``c``,
    :math:`\sum_{j:\,\rho_j \le \rho_c} p_j` (ranks :math:`\rho` by decreasing probability, ties by class index),
    minus :math:`u\,p_c` when uniform ``noise`` u (N,) is given (randomised APS). ``raps``: APS plus
    :math:`\lambda\,(\rho_c - k_{reg})_+`.
    """
    p = np.asarray(probs, dtype=np.float64)
    if method == "thr":
        return 1.0 - p
    if method not in CONFORMAL_METHODS:
        raise ValueError(f"method must be one of {CONFORMAL_METHODS}, got {method!r}")
    order = np.argsort(-p, axis=-1, kind="stable")
    cum = np.cumsum(np.take_along_axis(p, order, axis=-1), axis=-1)
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(1, p.shape[-1] + 1)[None, :].repeat(p.shape[0], 0), axis=-1)
    scores = np.take_along_axis(cum, ranks - 1, axis=-1)
    if noise is not None:
        scores = scores - noise[:, None] * p
    if method == "raps":
        scores = scores + penalty * np.maximum(ranks - kreg, 0)
    return scores


def conformal_quantile(cal_scores: ArrayLike, alpha: float) -> float:
    r"""The conformal threshold: the :math:`\lceil (n+1)(1-\alpha) \rceil`-th smallest calibration score
    (``inf`` when that exceeds n). torch-uncertainty instead takes ``torch.quantile(scores, 1 - α)`` (linear
    interpolation), which under-covers by up to :math:`1/(n+1)` and has no finite-sample guarantee."""
    s = np.sort(np.asarray(cal_scores, dtype=np.float64))
    k = math.ceil((s.shape[0] + 1) * (1.0 - alpha))
    return float("inf") if k > s.shape[0] else float(s[k - 1])


def conformal_sets(scores: NDArray, threshold: float) -> NDArray[np.bool_]:
    """Membership (N, C) of every class in its sample's prediction set: ``score <= threshold``."""
    return scores <= threshold


@dataclass(frozen=True)
class ConformalResult:
    """Mean held-out coverage and set size over the folds (see :func:`cross_validated_conformal`)."""

    method: str
    alpha: float
    coverage: float
    set_size: float
    coverages: tuple[float, ...]
    set_sizes: tuple[float, ...]
    thresholds: tuple[float, ...]


def _check_alpha(alpha: float) -> float:
    a = float(alpha)
    if not 0.0 < a < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
    return a


def cross_validated_conformal(probs: ArrayLike, labels: ArrayLike, *, method: str = "aps", alpha: float = 0.1,
                              n_repeats: int = 5, seed: int = 0, randomized: bool = True,
                              penalty: float = RAPS_PENALTY, kreg: int = RAPS_KREG) -> ConformalResult:
    r"""Split-conformal coverage and mean set size at level ``1 - alpha``, fitted and evaluated under test-time CV.

    Parameters
    ----------
    probs : ndarray of shape (n_samples, n_classes), rows summing to 1
    labels : ndarray of shape (n_samples,)
    method : {"thr", "aps", "raps"}
    alpha : mis-coverage level in (0, 1); default 0.1 (90 % sets)
    n_repeats, seed : the halvings of :func:`~ubench.metrics.cv_splits` (2 x ``n_repeats`` folds)
    randomized : APS/RAPS with the uniform term :math:`u\,p_c` (Romano et al. 2020's randomised sets, and
        torch-uncertainty's default), u drawn per sample from ``np.random.default_rng(seed)``; ``False`` gives the
        deterministic score, whose sets are much larger for a confident model (coverage ≥ 1 - α still holds)

    Returns
    -------
    ConformalResult
        ``coverage``: mean over folds of the share of held-out samples whose label is in its set;
        ``set_size``: mean over folds of the mean set size.

    Notes
    -----
    Fold f calibrates :math:`\hat q_f` = :func:`conformal_quantile` of the fit half's true-class scores and
    evaluates :math:`\mathcal C(x) = \{c : s(x, c) \le \hat q_f\}` on the held-out half. Sets may be empty (THR
    at small α is allowed to abstain); ubench does not add a fallback class, unlike torch-uncertainty's
    ``conformal()``, which returns the arg-min class for an empty set.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> p = rng.dirichlet(np.ones(5), size=400)
    >>> y = np.array([rng.choice(5, p=row) for row in p])  # calibrated by construction
    >>> r = cross_validated_conformal(p, y, method="thr", alpha=0.2)
    >>> 0.75 < r.coverage < 0.86
    True
    """
    probs, labels = _check_probs_labels(probs, labels)
    if method not in CONFORMAL_METHODS:
        raise ValueError(f"method must be one of {CONFORMAL_METHODS}, got {method!r}")
    return _cross_validated_conformal(probs, labels, method=method, alpha=_check_alpha(alpha), n_repeats=n_repeats,
                                      seed=seed, randomized=randomized, penalty=penalty, kreg=kreg)


def _cross_validated_conformal(probs, labels, *, method: str, alpha: float, n_repeats: int, seed: int,
                               randomized: bool = True, penalty: float = RAPS_PENALTY, kreg: int = RAPS_KREG
                               ) -> ConformalResult:
    """:func:`cross_validated_conformal` on validated input: two passes over row blocks of ``probs`` (the true
    scores, then every row's set sizes at the thresholds of the folds that hold it out), never an (N, C)
    temporary; ``probs`` need only support ``probs[a:b]`` (e.g. a split re-read from its archive)."""
    n = labels.shape[0]
    noise = np.random.default_rng(seed).random(n) if randomized else None
    true = _true_scores(probs, labels, method, noise, penalty, kreg)
    folds = cv_splits(n, n_repeats=n_repeats, seed=seed)
    thresholds = [conformal_quantile(true[fit], alpha) for fit, _ in folds]
    per_row = np.empty((n, len(folds) // 2))  # each row is held out once per repeat
    for f, (_, held) in enumerate(folds):
        per_row[held, f // 2] = thresholds[f]
    sizes_by_row = _set_sizes(probs, per_row, method, noise, penalty, kreg)
    coverages, sizes = [], []
    for f, (_, held) in enumerate(folds):
        coverages.append(float(np.mean(true[held] <= thresholds[f])))
        sizes.append(float(sizes_by_row[held, f // 2].mean()))
    return ConformalResult(method=method, alpha=alpha, coverage=float(np.mean(coverages)),
                           set_size=float(np.mean(sizes)), coverages=tuple(coverages), set_sizes=tuple(sizes),
                           thresholds=tuple(thresholds))


#: Rows per block of the conformal kernels (2 MiB of float64 per block).
_CONFORMAL_BLOCK_ENTRIES = 1 << 18
#: A set's prefix is certified complete when the bound on the next class's score exceeds every threshold by
#: this much (a few ulps of the running sum would do; the rare row inside the margin is ranked whole).
_PREFIX_MARGIN = 1e-9
#: Cut-offs tried for a row's set prefix: classes with p >= max_c p * 2**-e, for e in this order, then all (on
#: ImageNet-like predictions 2/3 of the rows need only the first, nearly all the rest the second).
_CUTOFF_EXPONENTS = (4, 10, 16)


def _finish_scores(cum: NDArray, values: NDArray, ranks: NDArray, noise_rows: NDArray | None, method: str,
                   penalty: float, kreg: int) -> NDArray[np.float64]:
    """Scores from running sums in rank order, with the operations (and rounding) of :func:`conformal_scores`:
    ``(cum - u p) + penalty * max(rank - kreg, 0)``."""
    scores = cum if noise_rows is None else cum - noise_rows * values
    if method == "raps":
        scores = scores + penalty * np.maximum(ranks - kreg, 0)
    return scores


def _true_scores(probs, labels: NDArray, method: str, noise: NDArray | None, penalty: float, kreg: int
                 ) -> NDArray[np.float64]:
    """Each sample's score at its label, (N,): ``1 - p_y`` (THR), else the running sum of the classes ranked at
    or above the label (only those are ranked) with the APS/RAPS terms of :func:`conformal_scores`."""
    n, c = probs.shape
    out = np.empty(n)
    cols = np.arange(c)
    for a, b in row_blocks(n, c, _CONFORMAL_BLOCK_ENTRIES):
        p = np.asarray(probs[a:b], dtype=np.float64)
        y = labels[a:b]
        py = p[np.arange(b - a), y]
        if method == "thr":
            out[a:b] = 1.0 - py
            continue
        keep = p >= py[:, None]
        groups, kept = ranked_prefix(p, keep)
        # The label's rank: the larger classes, and the tied ones with a class index up to its own (ties are
        # rare: only rows with a kept entry equal to the label's value but not the label are looked at again).
        rank = kept.copy()
        tied = np.flatnonzero(kept > (p > py[:, None]).sum(axis=1) + 1) if _has_ties(groups, py) else ()
        if len(tied):
            rank[tied] -= ((p[tied] == py[tied, None]) & (cols[None, :] > y[tied, None])).sum(axis=1)
        for g in groups:
            # the running sum at the label's rank (within a run of ties every value is the label's)
            at = (np.arange(g.rows.shape[0]), rank[g.rows] - 1)
            out[a + g.rows] = _finish_scores(g.cum[at], g.values[at], rank[g.rows],
                                             None if noise is None else noise[a + g.rows], method, penalty, kreg)
    return out


def _has_ties(groups, py: NDArray) -> bool:
    """Whether a row's ranked prefix (every class at or above its label) ends in more than one entry equal to
    the label's probability: the smallest kept value is the label's, so a tie shows as the second smallest."""
    for g in groups:
        second = g.counts >= 2
        if second.any():
            k = np.flatnonzero(second)
            if np.any(g.values[k, g.counts[k] - 2] == py[g.rows[k]]):
                return True
    return False


def _set_sizes(probs, thresholds: NDArray, method: str, noise: NDArray | None, penalty: float, kreg: int
               ) -> NDArray[np.float64]:
    """``|{c : s(x_i, c) <= thresholds[i, r]}|`` for every row i and column r, (N, R) float64, as
    :func:`conformal_sets` would count them.

    THR compares ``1 - p`` directly. APS/RAPS rank only a prefix of each row: the classes with ``p >= t`` for
    the first cut-off ``t`` (of ``max p * 2**-e``) whose kept mass, plus the RAPS penalty the next class would
    pay, exceeds the row's largest finite threshold by :data:`_PREFIX_MARGIN`; the next class's score is at
    least that (scores are non-decreasing along the ranking), so no class beyond the prefix is in any of the
    row's sets. The bound is re-checked on the exact running sums; a row that fails it is ranked whole.
    """
    n, c = probs.shape
    r_count = thresholds.shape[1]
    out = np.empty((n, r_count))
    for a, b in row_blocks(n, c, _CONFORMAL_BLOCK_ENTRIES):
        p = np.asarray(probs[a:b], dtype=np.float64)
        q = thresholds[a:b]
        if method == "thr":
            s = 1.0 - p
            for r in range(r_count):
                out[a:b, r] = (s <= q[:, r : r + 1]).sum(axis=1)
            continue
        out[a:b] = _prefix_set_sizes(p, q, None if noise is None else noise[a:b], method, penalty, kreg)
    return out


def _prefix_set_sizes(p: NDArray, q: NDArray, noise: NDArray | None, method: str, penalty: float, kreg: int
                      ) -> NDArray[np.float64]:
    """:func:`_set_sizes` of one block of APS/RAPS rows: ``p`` (k, C), ``q`` (k, R)."""
    c = p.shape[1]
    sizes = np.full(q.shape, float(c))  # an infinite threshold takes every class
    finite = np.isfinite(q)
    q_max = np.where(finite, q, -np.inf).max(axis=1)
    top = p.max(axis=1)
    pen = penalty if method == "raps" else 0.0
    # Rows whose top class alone passes every threshold (a confident prediction) need no ranking at all.
    alone = np.flatnonzero(top + pen * max(2 - kreg, 0) > q_max + _PREFIX_MARGIN)
    if alone.size:
        v = top[alone][:, None]
        scores = _finish_scores(v, v, np.ones((1, 1), dtype=np.intp), None if noise is None else noise[alone][:, None],
                                method, penalty, kreg)
        sizes[alone] = np.where(finite[alone], scores <= q[alone], c)
    todo = np.flatnonzero(np.isfinite(q_max) & ~(top + pen * max(2 - kreg, 0) > q_max + _PREFIX_MARGIN))
    for e in (*_CUTOFF_EXPONENTS, None):
        if not todo.size:
            break
        rows = p if todo.size == p.shape[0] else p[todo]
        keep = np.ones(rows.shape, dtype=bool) if e is None else rows >= (top[todo] * 2.0**-e)[:, None]
        groups, _ = ranked_prefix(rows, keep)
        later = []
        for g in groups:
            i = todo[g.rows]  # rows of the block
            # The class after the prefix scores at least the prefix's running sum plus the RAPS penalty it
            # would pay (scores are non-decreasing along the ranking): above every threshold, the prefix holds
            # every set; otherwise try a lower cut-off.
            after = g.cum[g.last] + pen * np.maximum(g.counts + 1 - kreg, 0)
            done = (g.counts == c) | (after > q_max[i] + _PREFIX_MARGIN)
            later.append(i[~done])
            if not done.all():
                g = RankedPrefix(g.rows[done], g.values[done], g.cum[done], g.counts[done])
                i = i[done]
            ranks = np.arange(1, g.values.shape[1] + 1)[None, :]
            scores = _finish_scores(g.cum, g.values, ranks, None if noise is None else noise[i][:, None], method,
                                    penalty, kreg)
            # Padding repeats the prefix's running sum (values 0), which exceeds every threshold of a certified
            # row: it is never counted.
            for r in range(q.shape[1]):
                fin = finite[i, r]  # an infinite threshold stays at C (set above)
                sizes[i[fin], r] = (scores[fin] <= q[i[fin], r][:, None]).sum(axis=1)
        todo = np.sort(np.concatenate(later)) if later else todo[:0]  # sorted: all rows is then arange
    return sizes
