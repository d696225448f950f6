# SPDX-License-Identifier: MIT
"""Per-sample uncertainty scores: entropy of the predictive mean (total), mean member entropy (data), mutual
information (knowledge), normalized entropy and confidence.

Entropies are in nats and use 0 log 0 = 0. Logarithms are evaluated in the input's precision (float32 input:
float32 log, relative error ~1e-7 per term) and every sum is accumulated in float64; the input is read in row
blocks, so no float64 copy of a whole (N, C) array is made. Rounding that would step outside ``[0, log C]`` is
clipped back into it. The public functions validate inside that same pass (the sign of log p is the range check,
a row sum in the input's precision the simplex screen); the float32 ``np.log`` itself is about two thirds of the
time (``bench/bench_metrics.py`` records it as the floor).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._validation import (
    _BlockedProbsCheck,
    _check_member_probs_shape,
    _check_probs_shape,
    check_member_probs,
    check_probs,
)

__all__ = [
    "predictive_entropy",
    "expected_entropy",
    "mutual_information",
    "normalized_entropy",
    "confidence",
    "uncertainty_decomposition",
    "UncertaintyDecomposition",
]


#: Rows per block of the entropy kernels hold about this many elements (float32: 512 KiB, inside a core's L2 cache).
_ENTROPY_BLOCK_ELEMS = 1 << 17
#: At most this many threads per kernel call, and only with at least this many blocks per thread.
_MAX_THREADS = 4
_MIN_BLOCKS_PER_THREAD = 4


def _entropy_step(n_classes: int) -> int:
    """Rows per block of the entropy kernels."""
    return max(1, _ENTROPY_BLOCK_ELEMS // max(1, n_classes))


def _plogp(block: NDArray, t: NDArray, check: _BlockedProbsCheck | None, guard: bool) -> NDArray:
    """t = block * log(block) element-wise, in block's dtype; ``check`` validates the block on the way.

    The log doubles as the range check: log p <= 0 exactly for finite p in [0, 1] (-inf at 0 and at -0.0),
    while p > 1 (log p > 0 from the first ulp above 1), +inf, NaN and negatives (NaN) all break ``max <= 0``,
    so only the row sums need a pass of their own. 0 log 0 is NaN here unless ``guard``, which raises -inf
    to the lowest finite float first (0 times it is exactly 0; every other log is left unchanged, so a row
    without zeros gets the same bits either way). Call under ``np.errstate(divide=..., invalid="ignore")``.
    """
    np.log(block, out=t)
    if guard:
        np.maximum(t, -np.finfo(t.dtype).max, out=t)
    if check is not None and not check.done:
        check.clear_sums(block, bool(t.max() <= 0))
    np.multiply(block, t, out=t)
    return t


def _rowsum64(t: NDArray, t64: NDArray, out: NDArray[np.float64]) -> NDArray[np.float64]:
    """out = float64 row sums of t (copied into the float64 buffer t64 first unless it is t)."""
    if t64 is not t:
        t64[...] = t
    # einsum sums every row with the same loop (a BLAS dot with ones would round rows differently by
    # position, breaking ties between identical samples); it is faster than add.reduce on short rows.
    return np.einsum("ij->i", t64, out=out)


def _nan_rows(v: NDArray[np.float64]) -> NDArray[np.intp]:
    """Rows whose unguarded sum met 0 log 0 (after validation, the only source of NaN)."""
    return np.flatnonzero(np.isnan(v))


def _finish_entropy(out: NDArray[np.float64], n_classes: int) -> NDArray[np.float64]:
    """sum p log p -> H, clipped into [0, log C]."""
    np.subtract(0.0, out, out=out)  # not np.negative: 0 - 0.0 is +0.0, where -(0.0) would print as -0.
    # 0 <= H <= log C exactly; rounding (a float32 log is good to ~1e-7) may step an ulp outside, never more.
    np.clip(out, 0.0, np.log(n_classes), out=out)
    return out


#: A block whose rows with exact zeros exceed this share switches its thread to the guarded log (one
#: np.maximum pass per block) instead of recomputing those rows.
_GUARD_SHARE = 1 / 8


def _n_threads(n: int, step: int) -> int:
    """Threads for a kernel over n rows in blocks of ``step``: one per available core, within the limits."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    blocks = -(-n // step)
    return max(1, min(cores, _MAX_THREADS, blocks // _MIN_BLOCKS_PER_THREAD))


def _run_blocks(work, n: int, step: int) -> None:
    """work(blocks) in each of :func:`_n_threads` threads, all drawing (start, stop) row blocks from one queue.

    NumPy releases the GIL inside the ufuncs and einsum, so the threads run in parallel; a thread the OS holds
    back (other jobs on the machine) leaves the remaining blocks to the others instead of holding up the call.
    Every row goes through the same block code whichever thread or block holds it, so the results do not depend
    on the split. A worker's error stops the others at their next block and is re-raised.
    """
    starts = iter(range(0, n, step))
    lock = threading.Lock()
    failed = []

    def blocks():
        while not failed:
            with lock:
                start = next(starts, None)
            if start is None:
                return
            yield start, min(start + step, n)

    def guarded() -> None:
        try:
            work(blocks())
        except BaseException:
            failed.append(True)
            raise

    threads = _n_threads(n, step)
    if threads == 1:
        work(blocks())
        return
    # A pool per call: its threads end with the call, so nothing is left spinning for the next kernel.
    with ThreadPoolExecutor(max_workers=threads) as pool:
        futures = [pool.submit(guarded) for _ in range(threads)]
        for f in futures:
            f.result()


def _entropy_rows(
    probs: NDArray, log_dtype: type | None = None, *, check: _BlockedProbsCheck | None = None
) -> NDArray[np.float64]:
    """-sum_c p log p per row (0 log 0 = 0), logs in ``log_dtype`` (default: probs' dtype), sums in float64.

    With ``check``, each block is validated as it is read (the fused single pass of :func:`predictive_entropy`).
    Rows with exact zeros are summed unguarded first (NaN) and recomputed with the guarded log, or, once they
    are common, every later block of the thread is guarded; either way a row's bits depend on the row alone.
    """
    n, c = probs.shape
    dt = np.dtype(log_dtype if log_dtype is not None else probs.dtype)
    out = np.empty(n, dtype=np.float64)
    step = _entropy_step(c)

    def work(blocks) -> None:
        rows = min(step, n)
        t = np.empty((rows, c), dtype=dt)
        t64 = t if dt == np.float64 else np.empty((rows, c), dtype=np.float64)
        cast = np.empty((rows, c), dtype=dt) if probs.dtype != dt else None
        guard = False
        with np.errstate(divide="ignore", invalid="ignore"):
            for start, end in blocks:
                block = probs[start:end]
                k = block.shape[0]
                kcheck = check
                if cast is not None:
                    # A cast can round a value back into [0, 1]: the log cannot check the original here.
                    if check is not None and not check.done:
                        check.clear(block)
                    cast[:k] = block
                    block, kcheck = cast[:k], None
                o = _rowsum64(_plogp(block, t[:k], kcheck, guard), t64[:k], out[start : start + k])
                bad = _nan_rows(o) if not guard else ()
                if len(bad):
                    guard = len(bad) > _GUARD_SHARE * k
                    sub = block[bad]
                    o[bad] = _rowsum64(_plogp(sub, t[: len(bad)], None, True), t64[: len(bad)], np.empty(len(bad)))

    _run_blocks(work, n, step)
    return _finish_entropy(out, c)


def _confidence(probs: NDArray) -> NDArray[np.float64]:
    """max_c p_ic as float64, via argmax + gather (faster than a max reduction along short rows)."""
    pred = np.argmax(probs, axis=1)
    return probs[np.arange(probs.shape[0]), pred].astype(np.float64)


def _expected_entropy(member_probs: NDArray) -> NDArray[np.float64]:
    """Mean over members of each member's entropy; assumes validated input."""
    out = np.zeros(member_probs.shape[1], dtype=np.float64)
    for member in member_probs:
        out += _entropy_rows(member)
    out /= member_probs.shape[0]
    return out


@dataclass(frozen=True)
class UncertaintyDecomposition:
    """Per-sample total = data + knowledge uncertainty, in nats (see :func:`uncertainty_decomposition`)."""

    #: Entropy of the predictive mean, shape (n_samples,).
    total: NDArray[np.float64]
    #: Mean member entropy (aleatoric / data uncertainty), shape (n_samples,).
    data: NDArray[np.float64]
    #: Mutual information total - data (epistemic / knowledge uncertainty), >= 0, shape (n_samples,).
    knowledge: NDArray[np.float64]


def _uncertainty_decomposition(
    member_probs: NDArray, *, check: _BlockedProbsCheck | None = None, mean_out: NDArray | None = None
) -> UncertaintyDecomposition:
    """Total, data and knowledge uncertainty; assumes validated input unless ``check`` validates each block.

    One pass over blocks of samples: each member block is read from memory once (checked, added into the
    float64 mean, its p log p terms added element-wise into a float64 block), then the block's data term is
    one row sum of those terms / M and its total term one row sum of pbar log pbar; the float64 ensemble mean
    never exists for more than one block unless ``mean_out`` (N, C) float64 asks for it (the same bits as
    ``_ensemble_mean``, without a second pass). Rows with exact zeros are handled as in :func:`_entropy_rows`.
    """
    m, n, c = member_probs.shape
    dt = member_probs.dtype
    total = np.empty(n, dtype=np.float64)
    data = np.empty(n, dtype=np.float64)
    step = _entropy_step(c)

    def work(blocks) -> None:
        rows = min(step, n)
        t = np.empty((rows, c), dtype=dt)
        t64 = t if dt == np.float64 else np.empty((rows, c), dtype=np.float64)
        acc = np.empty((rows, c), dtype=np.float64)
        mean = np.empty((rows, c), dtype=np.float64)
        # The mean's logs are taken in the members' precision so that identical members give zero MI up to the
        # rounding of their mean (exactly zero for float32 members: their float64 sums are exact).
        mean_dt = mean if dt == np.float64 else np.empty((rows, c), dtype=dt)

        def block(get, k: int, chk, guard: bool, tot: NDArray, dat: NDArray, keep_mean: NDArray | None) -> None:
            mb, ab = mean[:k], acc[:k]
            for j in range(m):
                b = get(j)
                # Member by member, in member order: the same float64 sums as np.add.reduce over axis 0.
                if j == 0:
                    mb[...] = b
                else:
                    np.add(mb, b, out=mb)
                tj = _plogp(b, t[:k], chk, guard)
                if j == 0:
                    ab[...] = tj
                else:
                    np.add(ab, tj, out=ab)
            mb /= m
            if keep_mean is not None:
                keep_mean[...] = mb
            md = mean_dt[:k]
            if md is not mb:
                md[...] = mb
            _rowsum64(_plogp(md, t[:k], None, guard), t64[:k], tot)
            ab /= m  # before the row sum: M identical float32 members then give data == total bit for bit
            np.einsum("ij->i", ab, out=dat)

        guard = False
        with np.errstate(divide="ignore", invalid="ignore"):
            for start, end in blocks:
                k = end - start
                dat = data[start:end]
                block(lambda j: member_probs[j, start : start + k], k, check, guard, total[start : start + k], dat,
                      None if mean_out is None else mean_out[start : start + k])
                bad = _nan_rows(dat) if not guard else ()
                if len(bad):
                    guard = len(bad) > _GUARD_SHARE * k
                    sub = member_probs[:, start + bad]
                    tot_b, dat_b = np.empty(len(bad)), np.empty(len(bad))
                    block(lambda j: sub[j], len(bad), None, True, tot_b, dat_b, None)
                    total[start + bad], dat[bad] = tot_b, dat_b

    _run_blocks(work, n, step)
    _finish_entropy(total, c)
    _finish_entropy(data, c)
    knowledge = total - data
    # MI >= 0 (Jensen); a negative value is rounding of two nearly equal entropies.
    np.maximum(knowledge, 0.0, out=knowledge)
    return UncertaintyDecomposition(total=total, data=data, knowledge=knowledge)


def predictive_entropy(probs: ArrayLike) -> NDArray[np.float64]:
    r"""Shannon entropy of each predictive distribution (total uncertainty when ``probs`` is an ensemble mean).

    Parameters
    ----------
    probs : ndarray of shape (n_samples, n_classes), float32 or float64, rows summing to 1

    Returns
    -------
    ndarray of shape (n_samples,), float64, in ``[0, log C]`` nats

    Raises
    ------
    TypeError, ValueError
        If ``probs`` fails validation (dtype, shape, non-finite, off the simplex).

    Notes
    -----
    .. math:: H(p_i) = -\sum_c p_{ic} \log p_{ic}, \qquad 0 \log 0 = 0

    Convention: natural log (nats); divide by ``log(2)`` for bits or use :func:`normalized_entropy` for [0, 1].

    References
    ----------
    .. [1] Ovadia et al. (2019), Can You Trust Your Model's Uncertainty?, NeurIPS (entropy histograms).
    .. [2] Depeweg et al. (2018), Decomposition of Uncertainty in Bayesian Deep Learning, ICML.

    Examples
    --------
    >>> import numpy as np
    >>> predictive_entropy(np.array([[0.5, 0.5], [1.0, 0.0]])).round(6)
    array([0.693147, 0.      ])
    """
    probs = _check_probs_shape(probs)
    return _entropy_rows(probs, check=_BlockedProbsCheck(probs, "probs"))


def normalized_entropy(probs: ArrayLike) -> NDArray[np.float64]:
    r"""Entropy divided by its maximum ``log C``: the uncertainty measure of Laves et al. (2019).

    Parameters
    ----------
    probs : ndarray of shape (n_samples, n_classes), float32 or float64, rows summing to 1

    Returns
    -------
    ndarray of shape (n_samples,), float64, in ``[0, 1]``

    Notes
    -----
    .. math:: \tilde H(p_i) = -\frac{1}{\log C} \sum_c p_{ic} \log p_{ic}

    Convention: clipped to at most 1 (a uniform row can round a hair above); same 0 log 0 = 0 as
    :func:`predictive_entropy`.

    References
    ----------
    .. [1] Laves et al. (2019), Calibration of Model Uncertainty for Dropout Variational Inference, Eq. (3).

    Examples
    --------
    >>> import numpy as np
    >>> normalized_entropy(np.array([[0.25, 0.25, 0.25, 0.25]])).round(6)
    array([1.])
    """
    probs = check_probs(probs)
    return _normalized_entropy(probs)


def _normalized_entropy(probs: NDArray) -> NDArray[np.float64]:
    """H / log C clipped to [0, 1]; assumes validated input with C >= 2."""
    out = _entropy_rows(probs)
    out /= np.log(probs.shape[1])
    np.minimum(out, 1.0, out=out)
    return out


def confidence(probs: ArrayLike) -> NDArray[np.float64]:
    r"""Top-1 confidence ``max_c p_ic`` of each prediction.

    Parameters
    ----------
    probs : ndarray of shape (n_samples, n_classes), float32 or float64, rows summing to 1

    Returns
    -------
    ndarray of shape (n_samples,), float64, in ``[1/C, 1]``

    Notes
    -----
    .. math:: \mathrm{conf}_i = \max_c p_{ic}

    Convention: a certainty, not an uncertainty; detection functions use ``-confidence`` as the score.

    Examples
    --------
    >>> import numpy as np
    >>> confidence(np.array([[0.2, 0.8]]))
    array([0.8])
    """
    return _confidence(check_probs(probs))


def expected_entropy(member_probs: ArrayLike) -> NDArray[np.float64]:
    r"""Mean entropy of the members' predictions: data (aleatoric) uncertainty.

    Parameters
    ----------
    member_probs : ndarray of shape (n_members, n_samples, n_classes), float32 or float64, rows summing to 1

    Returns
    -------
    ndarray of shape (n_samples,), float64, in ``[0, log C]`` nats

    Notes
    -----
    .. math:: \mathbb{E}_m H(p^{(m)}_i) = -\frac{1}{M} \sum_m \sum_c p^{(m)}_{ic} \log p^{(m)}_{ic}

    Convention: members weigh equally; nats; 0 log 0 = 0.

    References
    ----------
    .. [1] Depeweg et al. (2018), ICML; Vadera et al. (2020), URSABench, Appendix B.

    Examples
    --------
    >>> import numpy as np
    >>> expected_entropy(np.array([[[1.0, 0.0]], [[0.0, 1.0]]]))
    array([0.])
    """
    return _expected_entropy(check_member_probs(member_probs))


def mutual_information(member_probs: ArrayLike) -> NDArray[np.float64]:
    r"""Mutual information between the label and the model: knowledge (epistemic) uncertainty.

    Parameters
    ----------
    member_probs : ndarray of shape (n_members, n_samples, n_classes), float32 or float64, rows summing to 1

    Returns
    -------
    ndarray of shape (n_samples,), float64, in ``[0, log C]`` nats; 0 for identical members up to rounding of their mean
        (at most a few ulp: (p + p + p) / 3 need not equal p in the last bit)

    Notes
    -----
    .. math:: I(y; \theta \mid x_i) = H\Big(\frac{1}{M}\sum_m p^{(m)}_i\Big) - \frac{1}{M}\sum_m H(p^{(m)}_i)

    Convention: rounding below zero is clipped to 0 (MI >= 0 by Jensen's inequality), so ``total = data +
    knowledge`` holds to rounding (about 1e-7 relative for float32 input).

    References
    ----------
    .. [1] Depeweg et al. (2018), ICML; Vadera et al. (2020), URSABench, Appendix B (OOD from model uncertainty).

    Examples
    --------
    >>> import numpy as np
    >>> mutual_information(np.array([[[1.0, 0.0]], [[0.0, 1.0]]])).round(6)
    array([0.693147])
    """
    member_probs = _check_member_probs_shape(member_probs)
    check = _BlockedProbsCheck(member_probs, "member_probs")
    return _uncertainty_decomposition(member_probs, check=check).knowledge


def uncertainty_decomposition(member_probs: ArrayLike) -> UncertaintyDecomposition:
    r"""Split total predictive uncertainty into data and knowledge uncertainty, per sample.

    Parameters
    ----------
    member_probs : ndarray of shape (n_members, n_samples, n_classes), float32 or float64, rows summing to 1

    Returns
    -------
    UncertaintyDecomposition
        ``total`` (:func:`predictive_entropy` of the ensemble mean), ``data`` (:func:`expected_entropy`) and
        ``knowledge`` (:func:`mutual_information`), each of shape (n_samples,).

    Notes
    -----
    .. math:: H(\bar p_i) = \mathbb{E}_m H(p^{(m)}_i) + I(y; \theta \mid x_i)

    Convention: one pass computes all three, so the identity holds to rounding; a one-member ensemble has
    ``knowledge == 0``.

    References
    ----------
    .. [1] Depeweg et al. (2018); Vadera et al. (2020), URSABench, Appendix B.

    Examples
    --------
    >>> import numpy as np
    >>> d = uncertainty_decomposition(np.array([[[0.9, 0.1]], [[0.1, 0.9]]]))
    >>> d.total.round(6), d.data.round(6), d.knowledge.round(6)  # log 2 = H(0.9, 0.1) + rest
    (array([0.693147]), array([0.325083]), array([0.368064]))
    """
    member_probs = _check_member_probs_shape(member_probs)
    check = _BlockedProbsCheck(member_probs, "member_probs")
    return _uncertainty_decomposition(member_probs, check=check)
