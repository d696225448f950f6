# SPDX-License-Identifier: MIT
"""The solvers behind ``metrics.temperature``: NLL of a softmax of ``beta * s`` over the inverse temperature.

``s`` is a floored log-probability (or logit) matrix shifted per row (a softmax ignores per-row constants). For
one softmax the NLL is convex in ``beta`` (its second derivative is a mean of variances), so a safeguarded
Newton/Halley iteration inside a bracket finds the optimum or proves that it lies at a bound. A pass costs one
``exp`` per entry in row blocks that stay in cache. Large inputs get one pass over the raw array instead:
probabilities ``_fit_post_fused``, logits ``_fit_logits_fast`` (one scalar shift; the partition at ``T = 1`` and
the moments at a sub-sample start in the same pass; the root of the per-row Taylor model, certified to
``_RTOL``). Kernels trust their input: the public functions in ``temperature.py`` validate first (the logits
path lets its own pass expose non-finite entries, then runs the scan before any fallback).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import NDArray

_BLOCK_ENTRIES = 1 << 15  # entries per row block: a few float64 temporaries of this size stay in L2
_ROW_STAT_BLOCK_ENTRIES = 1 << 17  # the per-row statistics kernels: two 1 MiB float64 buffers (measured best)
_RTOL = 1e-7  # stop when the Newton step in beta is below this fraction of beta
_WARM_START_ROWS = 4096  # fits on 4x as many rows or more start from a fit on about this many
_MAX_ITER = 100
_FAST_ORDER = 5  # raw moments per row in the logits pass: the Taylor model of dNLL/dbeta is quartic in h


@dataclass(frozen=True)
class TemperatureFit:
    """A fitted temperature: ``temperature`` in ``bounds``; NLLs at ``T = 1`` and at the fit, on the fit data.

    ``hit_bound`` is True when the optimum lies at (or beyond) an end of the search interval, e.g. a separable
    fit split, whose NLL keeps falling as ``T -> 0``. ``path`` says which solver produced it: ``"newton"`` (the
    float64 safeguarded Newton iteration), ``"one_pass"`` (:func:`_fit_post_fused`, large probability input) or
    ``"logit_passes"`` (:func:`_fit_logits_fast`, large logits); the two fast paths fall back to ``"newton"``
    whenever they cannot certify their answer.
    """

    temperature: float
    nll_before: float
    nll_after: float
    hit_bound: bool
    path: str = "newton"

    def to_dict(self) -> dict:
        return asdict(self)




# ---------------------------------------------------------------------------------------------------------------
# kernels (trust their input). ``s`` holds log-probabilities minus their row max (so every row's max is 0 and
# sum_c exp(beta s_c) >= 1 for any beta > 0: no overflow, no log 0); ``rows`` selects fold rows by index, gathered
# block by block so a fold is never copied whole.


def _row_blocks(n_rows: int, n_cols: int):
    """Yield (start, stop) of row blocks holding about ``_BLOCK_ENTRIES`` entries each."""
    step = max(1, _BLOCK_ENTRIES // max(1, n_cols))
    for start in range(0, n_rows, step):
        yield start, min(start + step, n_rows)


def _prep_probs(probs: NDArray, eps: float, with_lse: bool = True):
    """(s, lse1): ``log(p + eps)`` minus its row max (float64, shape of probs) and log sum_c exp(s) per row
    (None without ``with_lse``: a row sum saved per block)."""
    c = probs.shape[-1]
    flat = probs.reshape(-1, c)
    s = np.empty(flat.shape, dtype=np.float64)
    lse1 = np.empty(flat.shape[0]) if with_lse else None
    for a, b in _row_blocks(flat.shape[0], c):
        blk = s[a:b]
        np.add(flat[a:b], eps, out=blk, dtype=np.float64)
        if with_lse:
            total = blk.sum(axis=1)  # sum_c (p + eps): exp(s) needs no exp here
        np.log(blk, out=blk)
        top = blk.max(axis=1)
        blk -= top[:, None]
        if with_lse:
            lse1[a:b] = np.log(total) - top
    return s.reshape(probs.shape), None if lse1 is None else lse1.reshape(probs.shape[:-1])


class ShiftedLogs:
    """``s = log(p + eps)`` minus its row max (what :func:`_prep_probs` returns) for the rows of ``probs`` (N, C),
    computed when a block of rows is asked for instead of held whole (N x C float64: 400 MB at ImageNet size).

    ``s[a:b]``, ``s[::k]`` and ``s[rows]`` (an index array) give the same float64 bits as ``_prep_probs(probs)``
    at those rows (every operation is element-wise or a row max). ``probs`` needs only ``probs[a:b]`` when
    contiguous row slices are asked for (a split re-read from its archive). When the whole of ``s`` fits
    ``cache_bytes`` it is computed once and sliced, as before (small splits pay no log per pass).
    """

    def __init__(self, probs, eps: float, *, cache_bytes: int = 64 * 2**20):
        self.probs, self.eps = probs, eps
        self.shape, self.ndim = tuple(probs.shape), 2
        small = isinstance(probs, np.ndarray) and 8 * probs.shape[0] * probs.shape[1] <= cache_bytes
        self._whole = _prep_probs(probs, eps, with_lse=False)[0] if small else None

    def __getitem__(self, rows) -> NDArray[np.float64]:
        if self._whole is not None:
            return self._whole[rows]
        if isinstance(rows, slice) and rows.step not in (None, 1):
            rows = np.arange(*rows.indices(self.shape[0]))
        if isinstance(rows, slice):
            return _prep_probs(self.probs[rows], self.eps, with_lse=False)[0]
        block = np.take(self.probs, rows, axis=0) if isinstance(self.probs, np.ndarray) else self.probs.take_rows(rows)
        return _prep_probs(block, self.eps, with_lse=False)[0]


def _prep_logits(logits: NDArray):
    """(s, lse1) for logits (N, C): ``logits`` minus the row max, float64, and log sum_c exp(s) per row."""
    n, c = logits.shape
    s = np.empty((n, c), dtype=np.float64)
    lse1 = np.empty(n)
    ones = np.ones(c)
    with np.errstate(over="ignore"):  # a row range beyond float64 is refused below, by name
        for a, b in _row_blocks(n, c):
            blk = s[a:b]
            blk[...] = logits[a:b]
            blk -= blk.max(axis=1, keepdims=True)
            lse1[a:b] = np.log(np.exp(blk) @ ones)
    if not np.isfinite(lse1.sum()) or not np.isfinite(s.min()):
        raise ValueError("logits differences within a row overflow float64; found a row range above 1.8e308")
    return s, lse1


def _label_values(s: NDArray, labels: NDArray) -> NDArray[np.float64]:
    """``s[..., i, labels[i]]`` as float64, for ``s`` (N, C) or (M, N, C)."""
    idx = labels.reshape((1,) * (s.ndim - 2) + (-1, 1))
    return np.take_along_axis(s, idx, axis=-1)[..., 0].astype(np.float64)


def _moments(s: NDArray, beta: float, rows: NDArray | None, order: int):
    """Row sums of ``exp(beta s) * s**k``, k = 0..order (float64), over ``s[rows]`` (all rows when None).

    Row blocks stay in cache; the row sums are matrix-vector products (BLAS), the costly part is one exp per
    entry.
    """
    c = s.shape[1]
    n = s.shape[0] if rows is None else rows.shape[0]
    out = [np.empty(n) for _ in range(order + 1)]
    step = max(1, _BLOCK_ENTRIES // c)
    e_buf = np.empty((min(step, n), c))
    es_buf = np.empty((min(step, n), c)) if order >= 1 else None
    es2_buf = np.empty((min(step, n), c)) if order >= 3 else None
    ones = np.ones(c)
    for a, b in _row_blocks(n, c):
        k = b - a
        if rows is None:
            blk = s[a:b]
        elif isinstance(s, np.ndarray):
            blk = np.take(s, rows[a:b], axis=0)  # (np.take with out= is several times slower)
        else:
            blk = s[rows[a:b]]
        e = e_buf[:k]
        np.multiply(blk, beta, out=e)
        np.exp(e, out=e)
        np.matmul(e, ones, out=out[0][a:b])
        if order >= 1:
            es = es_buf[:k]
            np.multiply(e, blk, out=es)
            np.matmul(es, ones, out=out[1][a:b])
            if order == 2:
                out[2][a:b] = np.einsum("ij,ij->i", es, blk)
            elif order >= 3:
                es2 = es2_buf[:k]
                np.multiply(es, blk, out=es2)
                np.matmul(es2, ones, out=out[2][a:b])
                out[3][a:b] = np.einsum("ij,ij->i", es2, blk)
    return out


def _post_eval(s, s_y, beta, rows, order=3):
    """(nll, d/dbeta, d2/dbeta2, d3/dbeta3) of the NLL of softmax(beta s) at the labels.

    ``s_y``: label entries of the rows. The NLL is the mean log-partition minus ``beta * mean(s_y)``, so its
    derivatives are the mean cumulants of ``s`` under softmax(beta s): mean, variance, third central moment.
    """
    mom = _moments(s, beta, rows, order)
    nll = float(np.mean(np.log(mom[0])) - beta * np.mean(s_y))
    if order == 0:
        return nll, 0.0, 0.0, None
    m1 = mom[1] / mom[0]
    m2 = mom[2] / mom[0]
    grad = float(np.mean(m1) - np.mean(s_y))
    curv = float(np.mean(np.maximum(m2 - m1 * m1, 0.0)))
    third = float(np.mean(mom[3] / mom[0] - m1 * (3.0 * m2 - 2.0 * m1 * m1))) if order >= 3 else None
    return nll, grad, curv, third


def _member_eval(s, s_y, beta, order=2):
    """As ``_post_eval`` for mean_m softmax(beta s_m) over all rows; ``s`` (M, N, C), ``s_y`` (M, N)."""
    m, n, c = s.shape
    mom = [x.reshape(m, n) for x in _moments(s.reshape(m * n, c), beta, None, order)]
    log_a = beta * s_y - np.log(mom[0])  # log softmax(beta s_m) at the label
    from scipy.special import logsumexp  # here: scipy.special costs `ubench score` a fifth of its start-up

    log_sum = logsumexp(log_a, axis=0)
    nll = float(np.log(m) - np.mean(log_sum))
    if order == 0:
        return nll, 0.0, 0.0, None
    mean = mom[1] / mom[0]
    var = np.maximum(mom[2] / mom[0] - mean * mean, 0.0)
    w = np.exp(log_a - log_sum)  # posterior weight of each member at the label; sums to 1 over members
    d = s_y - mean  # d log_a / d beta
    wd = np.sum(w * d, axis=0)
    grad = float(-np.mean(wd))
    curv = float(np.mean(np.sum(w * var, axis=0) - (np.sum(w * d * d, axis=0) - wd * wd)))
    return nll, grad, curv, None


def _minimize_beta(evaluate, beta_lo: float, beta_hi: float, beta0: float, rtol: float, polish: bool = False):
    """Safeguarded Newton for dNLL/dbeta = 0 on ``[beta_lo, beta_hi]``; returns (beta, nll, hit_bound).

    ``evaluate(beta) -> (nll, d1, d2, d3)`` (derivatives in beta; ``d3`` may be None). Works in ``u = log beta``:
    Newton in u where the NLL is convex in u (Halley's correction when ``d3`` is known and the correction factor
    lies in [0.5, 2]), else Newton in beta (the NLL of one softmax is convex in beta), else bisection of the
    bracket; steps are capped at a factor e**2 and a bracket
    ``lo < root < hi`` shrinks with every evaluation. Stops when the step is below ``rtol`` (relative in beta),
    or at a bound whose derivative still points outward. Deterministic. With ``polish`` the final step is taken
    without another evaluation (its error is about the square of a step below ``rtol``; the returned NLL is
    then that of the previous point), for callers that need only the temperature.
    """
    u_min, u_max = np.log(beta_lo), np.log(beta_hi)
    lo, hi, lo_known, hi_known = u_min, u_max, False, False
    u = float(np.clip(np.log(beta0), u_min, u_max))
    best = (np.inf, u)
    for _ in range(_MAX_ITER):
        beta = float(np.exp(u))
        nll, grad, curv, third = evaluate(beta)
        best = min(best, (nll, u))
        if grad == 0.0:  # flat to underflow; at a bound this is the separable limit
            return beta, nll, bool(u <= u_min or u >= u_max)
        if grad < 0:
            lo, lo_known = u, True
            if u >= u_max:
                return beta, nll, True  # NLL still falling at the smallest temperature (e.g. separable data)
        else:
            hi, hi_known = u, True
            if u <= u_min:
                return beta, nll, True  # NLL still falling at the largest temperature
        d1, d2 = beta * grad, beta * beta * curv + beta * grad  # derivatives in u
        if d2 > 0:
            step = -d1 / d2
            if third is not None:
                d3 = beta**3 * third + 3.0 * beta * beta * curv + beta * grad
                factor = 1.0 + 0.5 * step * d3 / d2  # Halley: step / (1 - d1 d3 / (2 d2^2))
                if 0.5 <= factor <= 2.0:
                    step /= factor
        elif curv > 0 and -grad / (curv * beta) > -1.0:
            step = float(np.log1p(-grad / (curv * beta)))
        else:
            step = -2.0 * np.sign(grad)
        if abs(step) <= rtol:
            if polish and lo < u + step < hi:
                return float(np.exp(u + step)), nll, False
            return beta, nll, False
        if abs(d1 * step) <= 1e-15 * max(1.0, abs(nll)):
            # The predicted gain is below rounding: the NLL is flat here (e.g. a separable fit split, where it
            # approaches its infimum as T -> 0 at a geometric rate). Test the bound it drifts to, else stop.
            if step > 0 and not hi_known:
                u = u_max
                continue
            if step < 0 and not lo_known:
                u = u_min
                continue
            break
        target = u + float(np.clip(step, -2.0, 2.0))
        if lo < target < hi:
            u = target
        elif target >= hi and not hi_known:
            u = u_max  # test the bound before bisecting towards it
        elif target <= lo and not lo_known:
            u = u_min
        else:
            u = 0.5 * (lo + hi)
        if lo_known and hi_known and hi - lo <= rtol:
            break
    nll, u = best
    return float(np.exp(u)), nll, bool(u <= u_min or u >= u_max)


def _fit_scalar(evaluate, nll_one: float, bounds, beta0: float = 1.0) -> TemperatureFit:
    """Run the solver; the fit never reports an NLL above the one at T = 1 (the start is always feasible)."""
    t_lo, t_hi = bounds
    beta, nll, hit = _minimize_beta(evaluate, 1.0 / t_hi, 1.0 / t_lo, beta0, _RTOL)
    if not nll < nll_one:  # T = 1 is optimal to rounding (or the non-convex per-member fit went astray)
        beta, nll, hit = 1.0, nll_one, False
    temperature = (t_lo if beta > 1.0 else t_hi) if hit else 1.0 / beta  # report a bound exactly
    return TemperatureFit(temperature=float(temperature), nll_before=nll_one, nll_after=nll, hit_bound=bool(hit))


def _fit_post(s, s_y, lse1, bounds) -> TemperatureFit:
    """Temperature for softmax(s / T) over all rows; ``s_y``, ``lse1`` are (N,) arrays."""
    nll_one = float(np.mean(lse1) - np.mean(s_y))
    n = s_y.shape[0]
    beta0 = 1.0
    if n >= 4 * _WARM_START_ROWS:
        # Warm start from a strided sub-sample (deterministic): the full-data Newton then needs about three
        # passes instead of five; the answer still satisfies the full-data stopping rule.
        stride = n // _WARM_START_ROWS
        s_sub = s[::stride]
        beta0, _, _ = _minimize_beta(
            lambda b: _post_eval(s_sub, s_y[::stride], b, None), 1.0 / bounds[1], 1.0 / bounds[0], 1.0, 1e-3
        )
    return _fit_scalar(lambda b: _post_eval(s, s_y, b, None), nll_one, bounds, beta0)


def _fused_pass(x: NDArray, labels: NDArray, beta: float, eps: float):
    """One pass over raw probabilities ``x`` (N, C) in ``x``'s dtype, prep done per row block.

    Returns (nll_one, s_y, mom): the NLL at ``T = 1``, the label entries of ``s = log(x + eps)`` and the row sums
    of ``exp(beta s) s**k``, k = 0..4, as float64. ``s <= 0`` with row max >= -log C lives only per block: no
    full-size float64 copy. Float32 input is exponentiated in float32 (values in (0, 1]: no overflow), about 3x
    cheaper than float64. (Large logits take :func:`_fit_logits_fast` instead.)
    Row sums over the C classes stay in the input's precision (BLAS matrix-vector products): float64 sums cost
    4-6x more per block (measured), the means over rows are float64, and the fit is pinned against a float64
    minimisation to 1e-6 in ``tests/metrics/test_temperature_fused.py``; the full float64 solver takes over
    whenever the one-pass answer cannot be certified.
    """
    n, c = x.shape
    dt = x.dtype
    step = max(1, _BLOCK_ENTRIES // c)
    k0 = min(step, n)
    sb, e = np.empty((k0, c), dt), np.empty((k0, c), dt)
    ones = np.ones(c, dt)
    row_sum = np.empty(n, dt)
    mom = [np.empty(n, dt) for _ in range(5)]
    for a, b in _row_blocks(n, c):
        k = b - a
        s, ek = sb[:k], e[:k]
        np.add(x[a:b], dt.type(eps), out=s)
        np.matmul(s, ones, out=row_sum[a:b])  # sum_c (p + eps)
        np.log(s, out=s)
        np.multiply(s, dt.type(beta), out=ek)
        np.exp(ek, out=ek)
        np.matmul(ek, ones, out=mom[0][a:b])
        for j in range(1, 5):
            np.multiply(ek, s, out=ek)
            np.matmul(ek, ones, out=mom[j][a:b])
    s_y = np.log(x[np.arange(n), labels].astype(np.float64) + eps)
    nll_one = float(np.mean(np.log(row_sum.astype(np.float64))) - np.mean(s_y))
    return nll_one, s_y, [m.astype(np.float64) for m in mom]


def _fit_post_fused(x: NDArray, labels: NDArray, eps: float, bounds) -> TemperatureFit | None:
    """One-pass temperature fit on large probabilities ``x`` (N >= 4 * _WARM_START_ROWS), or None when it cannot
    certify.

    A strided sub-sample gives a start ``beta0`` near the optimum; one fused pass at ``beta0`` yields the NLL
    and its first four derivatives (mean cumulants of ``s``), and the root of the cubic Taylor model of the
    derivative is the answer when the model's last term moves ``beta`` by less than ``_RTOL`` (its error is
    below the next, smaller term). Otherwise (or on any non-finite value) None: the caller runs the full solver.
    """
    n = x.shape[0]
    beta_lo, beta_hi = 1.0 / bounds[1], 1.0 / bounds[0]
    stride = n // _WARM_START_ROWS
    s_sub, _ = _prep_probs(x[::stride], eps)
    s_y_sub = _label_values(s_sub, labels[::stride])
    beta0 = 1.0
    for sub in (8, 1):  # a coarse fit on every 8th sub-sample row, then about one step on all of them
        s_k, s_y_k = np.ascontiguousarray(s_sub[::sub]), s_y_sub[::sub]  # contiguous rows stream 2-3x faster
        beta0, _, hit = _minimize_beta(lambda b: _post_eval(s_k, s_y_k, b, None), beta_lo, beta_hi, beta0, 1e-3)
        if hit:
            return None
    with np.errstate(all="ignore"):
        nll_one, s_y, mom = _fused_pass(x, labels, beta0, eps)
        r1, r2, r3, r4 = (m / mom[0] for m in mom[1:])
        mu2 = np.maximum(r2 - r1 * r1, 0.0)
        mu3 = r3 - r1 * (3.0 * r2 - 2.0 * r1 * r1)
        mu4 = r4 - r1 * (4.0 * r3 - r1 * (6.0 * r2 - 3.0 * r1 * r1))
        mean_sy = float(np.mean(s_y))
        nll0 = float(np.mean(np.log(mom[0])) - beta0 * mean_sy)
        g0 = float(np.mean(r1) - mean_sy)
        g1 = float(np.mean(mu2))
        g2 = float(np.mean(mu3))
        g3 = float(np.mean(mu4 - 3.0 * mu2 * mu2))
    if not (np.isfinite([nll_one, nll0, g0, g1, g2, g3]).all() and g1 > 0):
        return None
    h = -g0 / g1
    for _ in range(8):  # Newton on the cubic model g0 + g1 h + g2 h^2 / 2 + g3 h^3 / 6 from the Newton step
        f = g0 + h * (g1 + h * (0.5 * g2 + h * g3 / 6.0))
        df = g1 + h * (g2 + 0.5 * h * g3)
        if not df > 0:
            return None
        h -= f / df
    beta = beta0 + h
    f = g0 + h * (g1 + h * (0.5 * g2 + h * g3 / 6.0))
    if not (abs(h) <= 0.05 * beta0 and abs(f) / g1 <= _RTOL * beta0 and abs(g3 * h**3 / 6.0) / g1 <= _RTOL * beta0
            and beta_lo < beta < beta_hi):
        return None
    nll = nll0 + h * (g0 + h * (0.5 * g1 + h * (g2 / 6.0 + h * g3 / 24.0)))
    if not nll < nll_one:
        return None
    return TemperatureFit(temperature=float(1.0 / beta), nll_before=nll_one, nll_after=float(nll), hit_bound=False,
                          path="one_pass")


# ---------------------------------------------------------------------------------------------------------------
# logits: one scalar shift, exponentials in the input's precision, re-expansion passes instead of a float64 solve


def _mean_cumulants(mom: NDArray, rows: int = 1 << 13) -> tuple[NDArray[np.float64], float, float]:
    """(g, mean log mom[0], mean r2): ``g[k-1]`` the mean over rows of cumulant k (1..K, K <= 5) of ``s`` under
    the tilted softmax, from raw row sums ``mom[k] = sum_c e s**k`` (any float dtype; float64 from here on);
    ``r2 = mom[2] / mom[0]`` is the scale of the rounding error of a row's variance (``kappa_2 = r2 - r1**2``).

    Central moments by Horner in ``r1`` (``r_k = mom[k] / mom[0]``), kappa_4 = mu_4 - 3 mu_2**2, kappa_5 =
    mu_5 - 10 mu_3 mu_2. One moment row at a time in chunks of 8192 rows keeps every temporary at 64 KB:
    whole-length float64 temporaries (400 KB at N = 50,000) measured 3-4x slower (allocation).
    """
    order = mom.shape[0] - 1
    acc = np.zeros(order + 2)
    for a in range(0, mom.shape[1], rows):
        sl = slice(a, a + rows)
        m0 = mom[0, sl].astype(np.float64)
        inv = 1.0 / m0
        acc[0] += np.log(m0).sum()
        r1 = mom[1, sl] * inv
        acc[1] += r1.sum()
        if order < 2:
            continue
        r2 = mom[2, sl] * inv
        acc[-1] += r2.sum()
        sq = r1 * r1
        mu2 = r2 - sq
        acc[2] += np.maximum(mu2, 0.0).sum()
        if order < 3:
            continue
        r3 = mom[3, sl] * inv
        mu3 = r3 - r1 * (3.0 * r2 - 2.0 * sq)
        acc[3] += mu3.sum()
        if order < 4:
            continue
        r4 = mom[4, sl] * inv
        t = 6.0 * r2
        t -= 3.0 * sq
        t *= r1
        t = 4.0 * r3 - t
        t *= r1
        mu4 = r4 - t
        acc[4] += (mu4 - 3.0 * mu2 * mu2).sum()
        if order < 5:
            continue
        t = 10.0 * r2
        t -= 4.0 * sq
        t *= r1
        t = 10.0 * r3 - t
        t *= r1
        t = 5.0 * r4 - t
        t *= r1
        mu5 = mom[5, sl] * inv - t
        acc[5] += (mu5 - 10.0 * mu3 * mu2).sum()
    acc /= mom.shape[1]
    return acc[1:-1], float(acc[0]), float(acc[-1])


def _block_moments(s: NDArray, beta, e: NDArray, p: NDArray, ones: NDArray, mom: NDArray, order: int) -> None:
    """Into ``mom[k] = sum_c exp(beta s) s**k`` (k = 0..order) for one row block ``s``, with ``e``, ``p`` as
    scratch of ``s``'s shape: one exp per entry, the row sums as BLAS matrix-vector products."""
    np.multiply(s, beta, out=e)
    np.exp(e, out=e)
    np.matmul(e, ones, out=mom[0])
    np.multiply(e, s, out=p)
    np.matmul(p, ones, out=mom[1])
    for k in range(2, order + 1):
        np.multiply(p, s, out=p)
        np.matmul(p, ones, out=mom[k])


def _shifted_pass(x: NDArray, c, beta: float, order: int, with_t1: bool):
    """One streamed pass over ``x`` (N, C) in its own dtype with ``s = x - c`` (``c`` one scalar for all rows).

    Returns (z1, mom): ``z1[i] = sum_c exp(s_ic)`` (the partition at ``T = 1``; None unless ``with_t1``) and
    ``mom[k, i] = sum_c exp(beta s_ic) s_ic**k``, k = 0..order, as row sums in ``x``'s dtype (BLAS
    matrix-vector products). Row blocks of ``_BLOCK_ENTRIES`` keep ``s``, the exponentials and the powers in L2,
    so ``x`` is read once and every other operation works in cache.
    """
    n, nc = x.shape
    dt = x.dtype
    step = max(1, _BLOCK_ENTRIES // nc)
    k0 = min(step, n)
    s_buf, e_buf, p_buf = (np.empty((k0, nc), dt) for _ in range(3))
    ones = np.ones(nc, dt)
    z1 = np.empty(n, dt) if with_t1 else None
    mom = np.empty((order + 1, n), dt)
    c, beta = dt.type(c), dt.type(beta)
    for a in range(0, n, step):
        b = min(a + step, n)
        s, e, p = s_buf[: b - a], e_buf[: b - a], p_buf[: b - a]
        np.subtract(x[a:b], c, out=s)
        if with_t1:
            np.exp(s, out=e)
            np.matmul(e, ones, out=z1[a:b])
        _block_moments(s, beta, e, p, ones, mom[:, a:b], order)
    return z1, mom


def _start_from_subsample(x: NDArray, labels: NDArray, beta_lo: float, beta_hi: float):
    """(beta0, c): a start for the whole-set fit from about ``_WARM_START_ROWS`` strided rows, and the shift.

    ``c``, the mean of those rows' maxima, is the one shift of every pass (exponents stay near 0); the rows are
    read in place (a strided view: no copy). A bracketed Newton/Halley fit on every 8th of them
    (``_minimize_beta``, to 1e-3), then one step of the quadratic model of the gradient on all of them: the
    start need only be within a few per cent, the whole-set pass certifies. None (the caller runs the full
    solver) when a sampled row's maximum lies more than 80 from ``c`` (a single shift could overflow or
    underflow ``exp``), or when the sub-sample's optimum lies at a bound.
    """
    stride = max(1, x.shape[0] // _WARM_START_ROWS)
    xs, ys = x[::stride], labels[::stride]
    top = xs.max(axis=1).astype(np.float64)
    c = float(top.mean())
    if not (np.isfinite(c) and np.abs(top - c).max() <= 80.0):
        return None
    s_y = np.subtract(xs[np.arange(ys.shape[0]), ys], x.dtype.type(c)).astype(np.float64)

    def cumulants(rows_x, rows_sy, beta, order):
        g, mean_log_z, _ = _mean_cumulants(_shifted_pass(rows_x, c, beta, order, False)[1])
        g[0] -= rows_sy.mean()
        return mean_log_z - beta * rows_sy.mean(), g

    def evaluate(beta):
        nll, g = cumulants(xs[::8], s_y[::8], beta, 3)
        return nll, float(g[0]), float(g[1]), float(g[2])

    beta, _, hit = _minimize_beta(evaluate, beta_lo, beta_hi, 1.0, 1e-3, polish=True)
    if hit:
        return None
    _, g = cumulants(xs, s_y, beta, 3)
    beta = _root_from_cumulants(g, beta, beta_lo, beta_hi, None) or beta
    return beta, c


def _fit_logits_fast(x: NDArray, labels: NDArray, bounds, max_passes: int = 4) -> TemperatureFit | None:
    """Temperature fit on large logits (N >= 4 * _WARM_START_ROWS) in ``x``'s dtype, or None when uncertified.

    ``s = x - c`` with one scalar ``c`` (a softmax ignores per-row constants, and so does the temperature's
    NLL: ``log sum_c exp(beta x_ic) - beta x_iy`` is unchanged by ``x_i -> x_i - c``). The first pass computes
    the partition at ``T = 1`` (``nll_before``) and, at the sub-sample start ``beta0``, the raw moments of ``s``
    to order 5, from which each row's cumulants give the Taylor model of dNLL/dbeta (quartic in ``h``: the
    start's sampling error is about 1 % of ``beta`` with 4096 rows, where a cubic model's last term is still
    several times the tolerance) around ``beta0``; its root is the answer when ``_root_from_cumulants`` certifies it (step within 10 % of
    ``beta0``; the model's residual and its last term each move ``beta`` by less than ``_RTOL``). Otherwise the
    model's root is the centre of another pass (one ``exp`` per entry, no ``T = 1`` part), up to ``max_passes``
    in all. None (the caller validates fully and runs the float64 solver) when a pass is not finite (a NaN or
    an infinite logit, which every pass exposes: ``exp`` of NaN/+inf and ``0 * -inf`` are not finite), when a
    row's exponentials would lose precision (a partition below 1e-30: a row far below the shift), when the mean
    variance ``g[1]`` is below 1000x the typical rounding of the row sums (``eps * sqrt(C) * mean r2``: e.g.
    separable data, where the NLL and its derivatives vanish and only rounding is left), when the optimum is at
    or near a bound, or when it does not certify.
    Float32 input is exponentiated in float32 and its row sums stay float32 (about 3x cheaper than float64);
    cumulants and means over rows are float64. Pinned against a float64 bounded minimisation to 1e-6
    (``tests/metrics/test_temperature_fused.py``).
    """
    beta_lo, beta_hi = 1.0 / bounds[1], 1.0 / bounds[0]
    start = _start_from_subsample(x, labels, beta_lo, beta_hi)
    if start is None:
        return None
    beta0, c = start
    n = x.shape[0]
    x_y = x[np.arange(n), labels]
    s_y = np.subtract(x_y, x.dtype.type(c)).astype(np.float64)  # rounded as the pass rounds s
    mean_sy = float(np.mean(s_y))
    noise = float(np.finfo(x.dtype).eps) * np.sqrt(x.shape[1])  # relative rounding of a row sum, typical
    with np.errstate(all="ignore"):
        z1, mom = _shifted_pass(x, c, beta0, _FAST_ORDER, True)
        log_z1 = np.log(z1.astype(np.float64))
        nll_one = float(np.mean(log_z1) - mean_sy)
        if not (np.isfinite(nll_one) and z1.min() > 1e-30):
            return None
        for k in range(max_passes):
            if k:
                _, mom = _shifted_pass(x, c, beta0, _FAST_ORDER, False)
            if not (np.isfinite(mom.sum()) and mom[0].min() > 1e-30):
                return None
            g, mean_log_z, r2 = _mean_cumulants(mom)
            if not g[1] > 1e3 * noise * r2:
                return None  # the curvature is at the rounding level of the row sums (e.g. separable data)
            g[0] -= mean_sy
            nll0 = mean_log_z - beta0 * mean_sy
            beta = _root_from_cumulants(g, beta0, beta_lo, beta_hi, _RTOL)
            if beta is not None:
                break
            beta0 = _root_from_cumulants(g, beta0, beta_lo, beta_hi, None)
            if beta0 is None:
                return None
        else:
            return None
    h = beta - beta0
    nll = nll0 + h * (g[0] + h * (g[1] / 2.0 + h * (g[2] / 6.0 + h * (g[3] / 24.0 + h * g[4] / 120.0))))
    if not nll < nll_one:
        return None
    return TemperatureFit(temperature=float(1.0 / beta), nll_before=nll_one, nll_after=float(nll), hit_bound=False,
                          path="logit_passes")


def _fit_per_member(s, s_y, lse1, bounds) -> TemperatureFit:
    """Temperature for mean_m softmax(s_m / T) over all rows, from T = 1; ``s`` (M, N, C), ``s_y``/``lse1`` (M, N)."""
    m = s.shape[0]
    from scipy.special import logsumexp  # at use (start-up)

    nll_one = float(np.log(m) - np.mean(logsumexp(s_y - lse1, axis=0)))
    return _fit_scalar(lambda b: _member_eval(s, s_y, b), nll_one, bounds)


def _row_cumulants(s: NDArray, beta: float, order: int = 5) -> NDArray[np.float64]:
    """Per row of ``s`` (N, C): ``log Z`` and the cumulants 1..``order`` of ``s`` under softmax(beta s), (order+1, N).

    ``log Z_i(beta + h) = log Z_i(beta) + sum_k h**k kappa_ik / k!``, so these per-row numbers give every fold's
    NLL derivatives near ``beta`` as sums over its rows, without another pass over the classes. One ``exp`` per
    entry, raw moment sums as BLAS matrix-vector products in float64 (``s`` is float64, ``-log eps <= s <= 0``
    for probabilities, so the raw-to-central conversion keeps ~1e-9 of the 5th cumulant: far below its weight).
    Single-threaded: on the 2-core bench machine row ranges in threads measured slower (GIL hand-offs).
    """
    n, c = s.shape
    mom = np.empty((order + 1, n))
    step = max(1, _ROW_STAT_BLOCK_ENTRIES // c)
    ones = np.ones(c)
    e_buf, p_buf = np.empty((min(step, n), c)), np.empty((min(step, n), c))
    for a in range(0, n, step):
        b = min(a + step, n)
        blk, e, pk = s[a:b], e_buf[: b - a], p_buf[: b - a]
        _block_moments(blk, beta, e, pk, ones, mom[:, a:b], order)
    del blk, e, pk, e_buf, p_buf
    r = mom[1:] / mom[0]
    out = np.empty((order + 1, n))
    out[0] = np.log(mom[0])
    del mom  # per-row arrays are the peak memory of a large split's report (issue #29): each goes when done
    r1 = r[0]
    mu2 = r[1] - r1 * r1
    out[1], out[2] = r1, np.maximum(mu2, 0.0)
    if order >= 3:
        mu3 = r[2] - r1 * (3.0 * r[1] - 2.0 * r1 * r1)
        out[3] = mu3
    if order >= 4:
        mu4 = r[3] - r1 * (4.0 * r[2] - r1 * (6.0 * r[1] - 3.0 * r1 * r1))
        out[4] = mu4 - 3.0 * mu2 * mu2
    if order >= 5:
        mu5 = r[4] - r1 * (5.0 * r[3] - r1 * (10.0 * r[2] - r1 * (10.0 * r[1] - 4.0 * r1 * r1)))
        out[5] = mu5 - 10.0 * mu3 * mu2
    return out


def _root_from_cumulants(g: NDArray, beta0: float, beta_lo: float, beta_hi: float, rtol: float | None
                         ) -> float | None:
    """Root ``beta0 + h`` of the Taylor model of dNLL/dbeta, ``sum_k g[k] h**k / k!``, or None when uncertain.

    ``g`` holds the mean over the fit rows of (kappa_1 - s_y, kappa_2, ..., kappa_K) at ``beta0``. The root is
    returned when the model is increasing there (the NLL is convex), the step is at most 10 % of ``beta0``, the
    Newton iteration on the model has converged, the last term of the model moves ``beta`` by less than ``rtol``
    relative (the error of the truncation is below that term) and ``beta`` lies strictly inside the bounds.
    ``rtol=None``: an estimate only (a centre for the next expansion), returned whenever the model's Newton
    iteration stays finite and increasing and ends inside the bounds.
    """
    coef, fact = [], 1.0  # model = sum coef[j] h**j (plain floats: ten tiny polynomials per call)
    for j, gj in enumerate(g):
        fact *= max(j, 1)
        coef.append(float(gj) / fact)
    g1 = coef[1]
    if not (all(np.isfinite(coef)) and g1 > 0):
        return None

    def model(h):
        f = df = 0.0
        for j in range(len(coef) - 1, 0, -1):
            f = f * h + coef[j]
            df = df * h + j * coef[j]
        return f * h + coef[0], df

    h = -coef[0] / g1
    for _ in range(10):
        f, df = model(h)
        if not df > 0:
            return None
        h -= f / df
    beta = beta0 + h
    if rtol is None:
        return float(beta) if np.isfinite(beta) and beta_lo < beta < beta_hi else None
    tol = rtol * beta * g1
    if not (abs(h) <= 0.1 * beta0 and abs(model(h)[0]) <= tol and abs(coef[-1] * h ** (len(coef) - 1)) <= tol
            and beta_lo < beta < beta_hi):
        return None
    return float(beta)


def _scaled_row_scores(s: NDArray, beta_rows: NDArray) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(log Z_i, sum_c q_ic**2) per row for q_i = softmax(b_i s_i), each row at its own inverse temperature b_i.

    ``s`` (N, C) float64 with row max 0, so ``max_c q_ic = 1 / Z_i`` exactly as the softmax computes it. One
    ``exp`` per entry; the row sums of ``e`` (BLAS) and of ``e**2`` (einsum, no temporary).
    """
    n, c = s.shape
    log_z, sq = np.empty(n), np.empty(n)
    step = max(1, _ROW_STAT_BLOCK_ENTRIES // c)
    ones = np.ones(c)
    e_buf = np.empty((min(step, n), c))
    for a in range(0, n, step):
        b = min(a + step, n)
        e = e_buf[: b - a]
        np.multiply(s[a:b], beta_rows[a:b, None], out=e)
        np.exp(e, out=e)
        np.matmul(e, ones, out=log_z[a:b])
        np.einsum("ij,ij->i", e, e, out=sq[a:b])
    sq /= log_z * log_z
    np.log(log_z, out=log_z)
    return log_z, sq


def _scaled_row_scores_multi(s, beta_rows: NDArray) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """:func:`_scaled_row_scores` at several inverse temperatures per row, ``beta_rows`` (R, N): (R, N) arrays.

    One pass over ``s`` (a :class:`ShiftedLogs` computes each block once for all R), the same blocks and
    operations per R as :func:`_scaled_row_scores`, so each row equals that function's result bit for bit.
    """
    n, c = s.shape
    r_count = beta_rows.shape[0]
    log_z, sq = np.empty((r_count, n)), np.empty((r_count, n))
    step = max(1, _ROW_STAT_BLOCK_ENTRIES // c)
    ones = np.ones(c)
    e_buf = np.empty((min(step, n), c))
    for a in range(0, n, step):
        b = min(a + step, n)
        blk = s[a:b]
        e = e_buf[: b - a]
        for r in range(r_count):
            np.multiply(blk, beta_rows[r, a:b, None], out=e)
            np.exp(e, out=e)
            np.matmul(e, ones, out=log_z[r, a:b])
            np.einsum("ij,ij->i", e, e, out=sq[r, a:b])
    sq /= log_z * log_z
    np.log(log_z, out=log_z)
    return log_z, sq


def _softmax_scaled(s: NDArray, beta) -> NDArray[np.float64]:
    """softmax(beta * s) on the last axis (``beta`` a scalar or (C,) vector), float64; rows of ``s`` max 0."""
    z = np.multiply(s, beta, dtype=np.float64)
    z -= z.max(axis=-1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=-1, keepdims=True)
    return z


# ---------------------------------------------------------------------------------------------------------------
# argument checks
