# SPDX-License-Identifier: MIT
"""Weighted rank statistics of bootstrap replicates: detection (AUROC, AP, FPR@TPR) and selective classification
(AURC, AUGRC, risk at a coverage, coverage at a risk), each replicate a count vector over the samples, every
replicate of a block from one sort of the scores and one cumulative sum of the counts (``metrics/bootstrap.py``
holds the counts and the means; this module the statistics that need an order).

The counts are gathered and summed as integers (exact, and several times faster than float cumulative sums);
products and ratios are formed in float64 from those exact integers. The kernels work on row chunks of
:data:`CHUNK_CELLS` counts so that their temporaries stay in cache; each replicate's value is computed from its
own row alone."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = ["weighted_detection", "weighted_selective"]


@dataclass(frozen=True)
class _Sorted:
    """Positive and negative scores sorted ascending, the permutations, and the tie bookkeeping that the weighted
    kernels need: for each positive (in sorted order) the number of negatives strictly below / at most its score,
    and the first index of its tie group among positives."""

    pos: NDArray
    pos_order: NDArray[np.intp]
    neg: NDArray
    neg_order: NDArray[np.intp]
    neg_below: NDArray[np.intp]
    neg_upto: NDArray[np.intp]
    pos_first: NDArray[np.intp]
    neg_ties: bool  # some positive ties a negative
    pos_ties: bool  # some positives tie each other

    @classmethod
    def of(cls, pos_scores: NDArray, neg_scores: NDArray) -> _Sorted:
        po = np.argsort(pos_scores, kind="stable")
        no = np.argsort(neg_scores, kind="stable")
        pos, neg = pos_scores[po], neg_scores[no]
        below, upto = np.searchsorted(neg, pos, side="left"), np.searchsorted(neg, pos, side="right")
        first = np.searchsorted(pos, pos, side="left")
        return cls(pos, po, neg, no, below, upto, first, not np.array_equal(below, upto),
                   not np.array_equal(first, np.arange(pos.size)))

    @property
    def thresholds(self) -> NDArray:
        """The scores the FPR's threshold is read from: the sorted positives, or +inf alone when there is no
        positive sample (``clip(j, 0, -1)`` then reads it; every replicate's statistics are NaN then)."""
        return self.pos if self.pos.size else np.full(1, np.inf)


#: Cells (replicates x samples) the sorted kernels work on at once: row chunks whose temporaries stay in cache.
CHUNK_CELLS = 1 << 18


def _in_chunks(kernel, n: int, *blocks: NDArray, **kwargs) -> dict[str, NDArray]:
    """``kernel(*blocks, **kwargs)`` over row chunks of :data:`CHUNK_CELLS` cells (``n`` samples per row),
    concatenated (every row is computed on its own: the same values as in one call)."""
    rows = max(1, CHUNK_CELLS // max(n, 1))
    if blocks[0].shape[0] <= rows:
        return kernel(*blocks, **kwargs)
    parts = [kernel(*(b[a:a + rows] for b in blocks), **kwargs) for a in range(0, blocks[0].shape[0], rows)]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _exclusive_cumsum(w: NDArray) -> NDArray:
    """(B, n + 1) cumulative sums of integer counts (B, n), starting at 0: int32 (numpy adds integers along a row
    several times faster than floats, whose adds form one dependent chain), int64 when a row could pass 2**30
    (the kernels add two such sums) or the whole block's sum 2**31."""
    rows, n = w.shape
    bound = _row_bound(w)
    dtype = np.int32 if bound < 1 << 30 and rows * bound < 1 << 31 else np.int64
    # one cumulative sum of the whole block, each row's start taken off after: numpy holds the GIL while it sums
    # along an axis of a 2-D array but not along a contiguous 1-D one, and the kernels run beside the draws
    # (measured: two threads summing rows side by side took 2.3x one thread's time, the flat way 1.07x)
    out = np.zeros((rows, n + 1), dtype=dtype)
    if n:
        flat = np.cumsum(w.astype(dtype).reshape(-1), dtype=dtype).reshape(rows, n)
        start = np.zeros((rows, 1), dtype=dtype)
        start[1:, 0] = flat[:-1, -1]
        np.subtract(flat, start, out=out[:, 1:])
    return out


def _row_bound(w: NDArray) -> int:
    """An upper bound of the row sums of the counts ``w`` (B, n): n times the largest count."""
    return w.shape[1] * int(w.max()) if w.size else 0


def _as_counts(w: NDArray) -> NDArray:
    """Counts as integers: integer arrays as they are (``bootstrap_counts`` draws int16 or int32), others (float
    counts, e.g. all ones) converted to int64. The weights must be non-negative integers (the kernels' contract)."""
    w = np.asarray(w)
    return w if w.dtype.kind in "iu" else w.astype(np.int64)


def _row_dot(a: NDArray, b: NDArray, bound: float) -> NDArray[np.float64]:
    """Row-wise dot products of non-negative integer arrays, exact: summed as int32 when every row's sum is at most
    ``bound`` < 2**31 (then no product or partial sum overflows), else in float64 (exact below 2**53)."""
    if bound < 1 << 31 and a.dtype.itemsize <= 4 and b.dtype.itemsize <= 4:
        return np.einsum("bj,bj->b", a, b, dtype=np.int32).astype(np.float64)
    return np.einsum("bj,bj->b", a, b, dtype=np.float64)


#: Row length up to which :func:`_last_at_most` compares every entry (one vectorised pass) rather than searching
#: each row (a Python call per row); measured on chunks of 2**18 cells: 600 entries 72 against 541 us, 3,000
#: 130 against 153 us, 10,000 53 against 23 us.
SEARCH_ROW_MIN = 4096


def _last_at_most(rows: NDArray, x: NDArray) -> NDArray[np.intp]:
    """Per row b, the last index j with ``rows[b, j] <= x[b]`` (-1 when none); every row non-decreasing."""
    if rows.shape[1] <= SEARCH_ROW_MIN:
        return np.count_nonzero(rows <= x[:, None], axis=1) - 1
    return np.array([np.searchsorted(rows[b], x[b], side="right") - 1 for b in range(rows.shape[0])], dtype=np.intp)


def _smallest_count(total: NDArray, tpr: float) -> NDArray:
    """Smallest integer k with k / total >= tpr, per replicate (the rounding fix of ``ranking._fpr_at_tpr_sorted``)."""
    k = np.ceil(tpr * total)
    k = np.where((k > 1) & ((k - 1) / np.maximum(total, 1) >= tpr), k - 1, k)
    k = np.where((k < total) & (k / np.maximum(total, 1) < tpr), k + 1, k)
    return np.maximum(k, 1)


def weighted_detection(pos_scores: NDArray, neg_scores: NDArray, pos_weights: NDArray, neg_weights: NDArray, *,
                       tpr: float = 0.95, order: _Sorted | None = None) -> dict[str, NDArray]:
    r"""AUROC, average precision and FPR at ``tpr`` of each replicate, from one sort of the scores.

    Parameters
    ----------
    pos_scores, neg_scores : ndarray (n_pos,), (n_neg,); higher = more positive
    pos_weights, neg_weights : ndarray (B, n_pos), (B, n_neg) of non-negative integer counts
    tpr : float in (0, 1]
    order : the sort of the scores (``_Sorted.of``), when the caller reuses it across blocks

    Returns
    -------
    dict with ``auroc``, ``aupr``, ``fpr`` of shape (B,); NaN where a replicate has no positive or no negative.

    Notes
    -----
    A replicate is the multiset in which sample i appears :math:`w_i` times, so each statistic is the unweighted
    one on that multiset:

    .. math:: \mathrm{AUROC}(w) = \frac{\sum_{i \in +} w_i \sum_{j \in -} w_j
              (\mathbb{1}[s_i > s_j] + \tfrac12 \mathbb{1}[s_i = s_j])}{\sum_{+} w \sum_{-} w}

    The inner sum is a cumulative sum of the negatives' weights in sorted order read at each positive's rank;
    AP reads the cumulative weights of positives and negatives above each positive (ties as one threshold); the
    FPR threshold is the k-th largest positive of the multiset, k the fewest counts reaching ``tpr`` (the
    conventions of :mod:`ubench.metrics.ranking`, which all-ones weights reproduce exactly).
    """
    o = order if order is not None else _Sorted.of(pos_scores, neg_scores)
    return _in_chunks(_detection, o.pos.size + o.neg.size, pos_weights, neg_weights, o=o, tpr=tpr)


def _detection(pos_weights: NDArray, neg_weights: NDArray, *, o: _Sorted, tpr: float) -> dict[str, NDArray]:
    wp = np.take(_as_counts(pos_weights), o.pos_order, axis=1)
    wn = np.take(_as_counts(neg_weights), o.neg_order, axis=1)
    cp, cn = _exclusive_cumsum(wp), _exclusive_cumsum(wn)  # integers: every sum below is exact
    int_p, int_n = cp[:, -1], cn[:, -1]
    tot_p, tot_n = int_p.astype(np.float64), int_n.astype(np.float64)
    below = np.take(cn, o.neg_below, axis=1)  # negatives' weight strictly below each positive
    bound = float(int_p.max(initial=0)) * float(int_n.max(initial=0))  # sum_j wp_j below_j <= tot_p tot_n
    with np.errstate(invalid="ignore", divide="ignore"):
        if o.neg_ties:
            auroc = _row_dot(wp, below + np.take(cn, o.neg_upto, axis=1), 2.0 * bound) / (2.0 * tot_p * tot_n)
        else:
            auroc = _row_dot(wp, below, bound) / (tot_p * tot_n)
        # positives (tp) and all samples (tp + fp) scoring >= each positive: tp + fp >= 1 wherever tp > 0
        lower = np.take(cp, o.pos_first, axis=1) if o.pos_ties else cp[:, :-1]
        tp = int_p[:, None] - lower
        both = (int_p + int_n)[:, None] - lower
        both -= below
        np.maximum(both, 1, out=both)
        aupr = np.einsum("bj,bj->b", wp, np.divide(tp, both)) / tot_p
        k = _smallest_count(tot_p, tpr)
        # the k-th largest positive of the multiset: the last sorted index j with cp[j] <= total - k
        reach = (tot_p - k).astype(cp.dtype)
        j = _last_at_most(cp[:, :-1], reach)
        threshold = o.thresholds[np.clip(j, 0, o.pos.size - 1)]
        rank = np.searchsorted(o.neg, threshold, side="left")
        fpr = (tot_n - cn[np.arange(cn.shape[0]), rank]) / tot_n
    bad = (tot_p == 0) | (tot_n == 0)
    for a in (auroc, aupr, fpr):
        a[bad] = np.nan
    return {"auroc": auroc, "aupr": aupr, "fpr": fpr}


def _harmonic_table(n: int) -> tuple[NDArray, NDArray]:
    """H[m] = sum_{q<=m} 1/q and G[m] = sum_{q=0}^{m-1} H[q], m = 0..n (float64)."""
    h = np.zeros(n + 1)
    np.cumsum(1.0 / np.arange(1, n + 1), out=h[1:])
    g = np.zeros(n + 1)
    np.cumsum(h[:-1], out=g[1:])
    return h, g


@dataclass(frozen=True)
class _Ranked:
    """Samples sorted by increasing uncertainty with their tie groups (start index of each group)."""

    order: NDArray[np.intp]
    group_starts: NDArray[np.intp]
    tied: bool

    @classmethod
    def of(cls, uncertainty: NDArray) -> _Ranked:
        order = np.argsort(uncertainty, kind="stable")
        u = uncertainty[order]
        starts = np.r_[0, np.flatnonzero(np.diff(u)) + 1]
        return cls(order, starts, starts.size != u.size)


def weighted_selective(errors: NDArray, weights: NDArray, ranked: _Ranked, *, coverage: float = 0.8,
                       risk: float = 0.05, tables: tuple[NDArray, NDArray] | None = None,
                       detection_tpr: float | None = None) -> dict[str, NDArray]:
    r"""Selective-classification areas and points of each replicate (accept the least uncertain first).

    Parameters
    ----------
    errors : ndarray (N,) of 0/1, top-1 errors
    weights : ndarray (B, N) of integer counts
    ranked : the samples sorted by increasing uncertainty, with their tie groups (``_Ranked.of(uncertainty)``)
    coverage, risk : the levels of ``risk_at_cov`` (risk of the ``max(1, ceil(coverage n))`` least uncertain)
        and ``cov_at_risk`` (largest coverage whose risk is <= ``risk``; NaN when none)
    tables : ``_harmonic_table(n)`` for the largest replicate size n, when the caller reuses it
    detection_tpr : also return misclassification detection by the same uncertainty (positive = error):
        ``auroc``, ``aupr``, ``fpr`` as :func:`weighted_detection` computes them, from the same cumulative sum

    Returns
    -------
    dict with ``aurc``, ``augrc``, ``risk_at_cov``, ``cov_at_risk`` of shape (B,).

    Notes
    -----
    With the n samples of a replicate in order of increasing uncertainty, :math:`e_{(p)}` the error at position
    p and :math:`E(k) = \sum_{p \le k} e_{(p)}`, both areas are linear rank statistics:

    .. math:: \mathrm{AURC} = \frac1n \sum_{k=1}^n \frac{E(k)}{k} = \frac1n \sum_p e_{(p)} (H_n - H_{p-1}),
              \qquad \mathrm{AUGRC} = \frac{1}{n^2} \sum_{k=1}^n E(k) = \frac{1}{n^2} \sum_p e_{(p)}(n - p + 1)

    (:math:`H` the harmonic numbers). A sample drawn :math:`w` times occupies :math:`w` consecutive positions,
    whose weights sum in closed form (``G[m] = sum_{q<m} H_q``); tied uncertainties share their group's
    positions, each position holding the group's mean error, the expectation over the order of the ties that
    :func:`ubench.metrics.rejection_curve` and :mod:`ubench.metrics.selective` use. Only the groups holding an
    error contribute, so after one cumulative sum of the weights the work is over the errors alone;
    :math:`E(k)` is linear inside each group, which gives the two points exactly.
    """
    return _in_chunks(_selective, ranked.order.size, weights, at=_ErrorGroups.of(errors, ranked), ranked=ranked,
                      coverage=coverage, risk=risk, tables=tables, detection_tpr=detection_tpr)


@dataclass(frozen=True)
class _ErrorGroups:
    """Where the errors sit in a ranking: their sorted positions ``pos``; the bounds ``lo_at``, ``hi_at`` (in
    sorted positions) of each tie group holding an error; with ties, each such group's first error (``first``,
    an index into ``pos``) and each error's group (``of_error``); without, None (one group per error)."""

    pos: NDArray[np.intp]
    lo_at: NDArray[np.intp]
    hi_at: NDArray[np.intp]
    first: NDArray[np.intp] | None
    of_error: NDArray[np.intp] | None

    @classmethod
    def of(cls, errors: NDArray, ranked: _Ranked) -> _ErrorGroups:
        r = ranked
        pos = np.flatnonzero(np.asarray(errors)[r.order] > 0)
        if not r.tied:
            return cls(pos, pos, pos + 1, None, None)
        group = np.repeat(np.arange(r.group_starts.size), np.diff(np.r_[r.group_starts, r.order.size]))
        err_groups, first, of_error = np.unique(group[pos], return_index=True, return_inverse=True)
        bounds = np.r_[r.group_starts, r.order.size]
        return cls(pos, bounds[err_groups], bounds[err_groups + 1], first, of_error)


def _selective(weights: NDArray, *, at: _ErrorGroups, ranked: _Ranked, coverage: float, risk: float,
               tables: tuple[NDArray, NDArray] | None, detection_tpr: float | None) -> dict[str, NDArray]:
    w = np.take(_as_counts(weights), ranked.order, axis=1)
    w_err = w[:, at.pos]  # the errors' weights, in sorted order
    c = _exclusive_cumsum(w)  # weight of the samples before each sorted position
    total = c[:, -1].astype(np.float64)
    ce = _exclusive_cumsum(w_err)  # ... and of the errors before each error
    # a tie group's weights are read at its bounds in c (no pass over the samples by group)
    lo, hi = c[:, at.lo_at].astype(np.float64), c[:, at.hi_at].astype(np.float64)
    we = None if at.first is None else ce[:, np.r_[at.first[1:], at.pos.size]] - ce[:, at.first]
    w_g = hi - lo
    share = np.ones_like(w_g) if we is None else np.divide(we, w_g, out=np.zeros(we.shape), where=w_g > 0)
    h, g = tables if tables is not None else _harmonic_table(int(total.max()))
    tot_i = total.astype(np.intp)[:, None]
    aurc = np.einsum("bj,bj->b", share, w_g * h[tot_i] - (g[hi.astype(np.intp)] - g[lo.astype(np.intp)])) / total
    augrc = np.einsum("bj,bj->b", share, w_g * (total[:, None] + 1.0) - 0.5 * (hi * (hi + 1.0) - lo * (lo + 1.0)))
    augrc /= total**2
    contrib = share * w_g  # errors in each error group
    e_lo = np.zeros_like(contrib)
    np.cumsum(contrib[:, :-1], axis=1, out=e_lo[:, 1:])
    e_hi = e_lo + contrib
    k = np.maximum(1.0, np.ceil(total * coverage))
    risk_at = np.sum(share * np.clip(k[:, None] - lo, 0.0, w_g), axis=1) / k
    # largest k with E(k) <= risk k: E is flat between error groups (the largest k of a flat stretch is its end)
    # and rises inside them (the crossing, when the group starts feasible)
    with np.errstate(invalid="ignore", divide="ignore"):
        nxt = np.concatenate([lo[:, 1:], total[:, None]], axis=1)  # the flat stretch after each group ends here
        end_ok = e_hi / np.maximum(nxt, 1.0) <= risk
        inner = np.floor((share * lo - e_lo) / (share - risk))
        inner_ok = (share > risk) & (inner >= np.maximum(lo, 1.0)) & (inner < hi) & (e_lo <= risk * lo)
    cand = np.where(end_ok, nxt, 0.0)
    cand = np.maximum(cand, np.where(inner_ok, inner, 0.0))
    first = lo[:, 0] if lo.shape[1] else total
    best = np.maximum(np.max(cand, axis=1, initial=0.0), first)
    cov_at = np.where(best >= 1, best / total, np.nan)
    out = {"aurc": aurc, "augrc": augrc, "risk_at_cov": risk_at, "cov_at_risk": cov_at}
    if detection_tpr is not None:
        out.update(_errors_detected(total, lo, hi, w_err, ce, at.first, at.of_error, detection_tpr))
    return out


def _errors_detected(total: NDArray, lo: NDArray, hi: NDArray, w_err: NDArray, ce: NDArray, first: NDArray | None,
                     of_error: NDArray | None, tpr: float) -> dict[str, NDArray]:
    """Misclassification AUROC, AP and FPR@TPR (positive = error, higher uncertainty = more positive) read off the
    selective kernel's cumulative weights: ``total`` (B,) and ``lo``, ``hi`` (B, groups) the weight of all samples
    below / up to each tie group holding an error, ``w_err`` (B, errors) the errors' weights in sorted order and
    ``ce`` their exclusive cumulative sum;
    with ties, ``first`` the index of each such group's first error and ``of_error`` each error's group (None:
    no ties, one group per error). Every term is the one :func:`weighted_detection` computes for that positive
    (negatives tied with it counted half for AUROC, its whole tie group as one threshold), summed in its order."""
    n_err = w_err.shape[1]
    if first is None:  # no ties: errors strictly below each error, and up to it
        e_below, e_upto, lo_e, hi_e = ce[:, :-1], ce[:, 1:], lo, hi
    else:
        ends = np.r_[first[1:], n_err]
        e_below, e_upto = ce[:, first[of_error]], ce[:, ends[of_error]]
        lo_e, hi_e = lo[:, of_error], hi[:, of_error]
    tot_p = ce[:, -1].astype(np.float64)
    tot_n = total - tot_p
    below = lo_e - e_below  # correct samples strictly less uncertain than each error
    upto = hi_e - e_upto  # ... and at most as uncertain
    wf = w_err.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        # sum_j w_j (below_j + upto_j) is an integer below 2**53: exact in float64, as 2 x the tie-free sum
        auroc = np.einsum("bj,bj->b", wf, below + upto) / (2.0 * tot_p * tot_n)
        tp = tot_p[:, None] - e_below
        both = tot_n[:, None] - below
        both += tp
        np.maximum(both, 1.0, out=both)
        aupr = np.einsum("bj,bj->b", wf, np.divide(tp, both, out=tp)) / tot_p
        k = _smallest_count(tot_p, tpr)
        reach = (tot_p - k).astype(ce.dtype)
        j = _last_at_most(ce[:, :-1], reach)
        j = np.clip(j, 0, max(n_err - 1, 0))
        rows = np.arange(ce.shape[0])
        fpr = (tot_n - below[rows, j]) / tot_n if n_err else np.full(ce.shape[0], np.nan)
    bad = (tot_p == 0) | (tot_n == 0)
    for a in (auroc, aupr, fpr):
        a[bad] = np.nan
    return {"auroc": auroc, "aupr": aupr, "fpr": fpr}
