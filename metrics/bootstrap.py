# SPDX-License-Identifier: MIT
"""Vectorised bootstrap over test samples: replicate weights, percentile intervals, and the weighted kernels that
turn per-sample statistics into replicate values without a Python loop over replicates.

A bootstrap replicate of a test set of N samples is N draws with replacement; it is represented by its count
vector ``w`` (how often each sample was drawn, summing to N). ``bootstrap_counts`` draws a (B, N) block of them
from a seeded ``numpy.random.Generator`` (one ``integers(0, N, N)`` per replicate, counted with ``bincount``: the
same counts whatever the block size), as integers: the sorted kernels gather and cumulatively sum them exactly,
and numpy adds integers along a row several times faster than floats. Every statistic is then a function of
``w`` evaluated for a whole block at once: a mean is ``W @ x / W.sum(1)`` (:class:`LinearColumns` stacks every
mean of a split into one matrix product),
a binned calibration error ``sum_k |W @ g_k| / W.sum(1)`` with the bins fixed by the per-sample values, AUROC, AP
and FPR@TPR a few cumulative sums over ONE sort of the scores, AURC and AUGRC the same over one sort
(``metrics/bootstrap_ranking.py``). A replicate with all counts 1 gives the point estimate exactly;
the tests pin each kernel that way and against the statistic recomputed on the explicitly resampled arrays.

Intervals are percentile intervals (Efron & Tibshirani 1993, Ch. 13): the ``(1 - level) / 2`` and
``(1 + level) / 2`` quantiles (numpy's linear rule) of the replicate values. Chosen over BCa because BCa's
acceleration needs a jackknife of every statistic, i.e. N refits of the test-time cross-validated protocol, and for
the means of bounded per-sample losses reported here the percentile interval's coverage is already within
binomial error of nominal at a few hundred samples (``tests/metrics/test_interval_coverage.py``).

References
----------
.. [1] B. Efron, R. Tibshirani (1993), An Introduction to the Bootstrap, Chapman & Hall, Ch. 6, 13.
.. [2] A. C. Davison, D. V. Hinkley (1997), Bootstrap Methods and their Application, Cambridge, Sec. 2.7
   (weights as counts), 3.2 (stratified resampling).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "Partition",
    "BOOTSTRAP_METHOD",
    "DEFAULT_LEVEL",
    "DEFAULT_REPLICATES",
    "bootstrap_counts",
    "count_blocks",
    "interval_rng",
    "percentile_interval",
    "percentile_intervals",
    "LinearColumns",
    "OneHot",
    "weighted_binned_error",
]

BOOTSTRAP_METHOD = "percentile"
DEFAULT_LEVEL = 0.95
DEFAULT_REPLICATES = 1000
#: Weights per replicate block (rows x N): 16 MiB of float64 (about 200 replicates at N = 10,000), large enough
#: for efficient matrix products, small enough to bound the memory whatever N.
BLOCK_CELLS = 1 << 21
#: Draws (int64) per call of the generator when counting: 1 MiB, reused from cache instead of a fresh (B, N) block.
DRAW_CELLS = 1 << 17
#: Stream of ``np.random.default_rng([seed, STREAM, key])`` the intervals draw from (CV halvings use ``seed``
#: itself and member orders ``[seed, 1]``).
STREAM = 2


def interval_rng(seed: int, key: int) -> np.random.Generator:
    """The generator of resampling unit ``key`` (a split, or a stratum of one) under ``seed``."""
    return np.random.default_rng([int(seed), STREAM, int(key)])


def bootstrap_counts(n: int, n_replicates: int, rng: np.random.Generator) -> NDArray[np.integer]:
    """(n_replicates, n) counts of n draws with replacement from n samples, one replicate after another.

    The draws are ``rng.integers(0, n, (n_replicates, n))``, which consumes the generator exactly as one
    ``integers(0, n, n)`` per replicate does, so the counts of replicate b do not depend on how the replicates
    are cut into blocks (tested). Integer counts, int16 below 2**15 samples (a count is at most n) else int32:
    the sorted kernels gather and add them as integers, exact and several times faster than floats.
    """
    dtype = count_dtype(n)
    if n >= 4096:  # one bincount per replicate, a few replicates' draws at a time (a buffer that stays in cache)
        out = np.empty((n_replicates, n), dtype=dtype)
        step = max(1, DRAW_CELLS // n)
        for start in range(0, n_replicates, step):
            idx = rng.integers(0, n, (min(step, n_replicates - start), n))
            for b in range(idx.shape[0]):
                out[start + b] = np.bincount(idx[b], minlength=n)
        return out
    idx = rng.integers(0, n, (n_replicates, n))
    idx += (np.arange(n_replicates) * n)[:, None]
    return np.bincount(idx.ravel(), minlength=n_replicates * n).reshape(n_replicates, n).astype(dtype)


def count_dtype(n: int) -> type:
    """The integer type :func:`bootstrap_counts` gives counts of ``n`` draws: int16 below 2**15, else int32."""
    return np.int16 if n < 1 << 15 else np.int32


def count_blocks(n_replicates: int, n: int) -> Iterator[tuple[int, int]]:
    """(start, stop) of replicate blocks holding about :data:`BLOCK_CELLS` weights each."""
    rows = max(1, min(n_replicates, BLOCK_CELLS // max(n, 1)))
    for start in range(0, n_replicates, rows):
        yield start, min(n_replicates, start + rows)


def percentile_interval(values: NDArray, level: float) -> list[float] | None:
    """``[low, high]``: the ``(1 -+ level) / 2`` quantiles of the replicate ``values`` (numpy's linear rule);
    ``None`` when any replicate is undefined (NaN), e.g. a resample without a positive of a detection task."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0 or not np.all(np.isfinite(values)):
        return None
    lo, hi = np.quantile(values, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return [float(lo), float(hi)]


def percentile_intervals(columns: Mapping[str, NDArray], level: float) -> dict[str, list[float] | None]:
    """:func:`percentile_interval` of each column of equal-length replicates, ``{key: [low, high] or None}``, with
    one ``np.quantile`` over the stacked columns (a report holds hundreds of intervals over a few thousand
    replicates each, where the per-call overhead of ``np.quantile`` outweighs the sort). The same numbers: the
    quantiles along an axis are the 1-D ones row by row (tested bit for bit)."""
    keys = list(columns)
    if not keys:
        return {}
    stack = np.asarray([np.asarray(columns[k], dtype=np.float64) for k in keys], dtype=np.float64)
    if stack.shape[1] == 0:
        return dict.fromkeys(keys)
    ok = np.isfinite(stack).all(axis=1)
    out: dict[str, list[float] | None] = dict.fromkeys(keys)
    if ok.any():
        rows = np.flatnonzero(ok)
        lo, hi = np.quantile(stack[rows], [(1.0 - level) / 2.0, (1.0 + level) / 2.0], axis=1)
        for j, i in enumerate(rows.tolist()):
            out[keys[i]] = [float(lo[j]), float(hi[j])]
    return out


@dataclass(frozen=True)
class OneHot:
    """An (N, width) block of one-hot columns kept as its nonzeros: each entry ``(columns, values)`` puts
    ``values[i]`` (``None``: 1) in row i at column ``columns[i]``, the entries' columns disjoint. 16 bytes per
    sample and entry instead of ``8 * width`` per sample: the block is written out only for the matrix product,
    when the resampling runs (after the split's (N, C) arrays are freed, ``report_intervals``)."""

    width: int
    entries: tuple[tuple[NDArray[np.intp], NDArray[np.float64] | None], ...]

    def write(self, out: NDArray[np.float64]) -> None:
        """Fill ``out`` (N, width) with the block."""
        out[...] = 0.0
        rows = np.arange(out.shape[0])
        for cols, values in self.entries:
            out[rows, cols] = 1.0 if values is None else values


class LinearColumns:
    """Per-sample columns whose weighted means are statistics; every mean of a block in one matrix product.

    ``add(name, x)`` registers the column ``x`` (N,); ``add_block(name, X)`` a raw (N, k) block whose weighted
    sums a caller post-processes; ``add_cells``/``add_one_hot`` one-hot blocks, kept as their nonzeros
    (:class:`OneHot`) until the product. ``apply(W)`` returns ``{name: values}`` for a (rows, N) block;
    ``apply(W, sums)`` the same from ``sums = W @ M`` computed by the caller, ``M`` the (N, width) matrix that
    :meth:`write` fills (``resample`` stacks the columns of every split of a resampling unit into one product).
    """

    def __init__(self, n: int):
        self.n = int(n)
        self._cols: list[NDArray | OneHot] = []
        self._slices: dict[str, tuple[str, slice]] = {}
        self.width = 0
        self._matrix: NDArray | None = None

    def _push(self, name: str, kind: str, block: NDArray | OneHot) -> None:
        if name in self._slices:
            raise ValueError(f"column {name!r} registered twice")
        if not isinstance(block, OneHot):
            block = np.asarray(block, dtype=np.float64).reshape(self.n, -1)
        k = block.width if isinstance(block, OneHot) else block.shape[1]
        self._slices[name] = (kind, slice(self.width, self.width + k))
        self._cols.append(block)
        self.width += k

    def add(self, name: str, x: NDArray) -> None:
        self._push(name, "mean", x)

    def add_block(self, name: str, x: NDArray) -> None:
        self._push(name, "sums", x)

    def add_cells(self, name: str, cells: NDArray, n_cells: int, *values: NDArray | None) -> None:
        """Per-cell weighted sums of each of ``values`` (None: of the weights) as one (N, n_cells * len(values))
        block of one-hot columns: ``apply`` returns them side by side. For a handful of cells (calibration bins)
        the matrix product is cheaper than gathering the weights by cell."""
        cells = np.asarray(cells, dtype=np.intp)
        self.add_one_hot(name, n_cells * len(values),
                         [(j * n_cells + cells, None if v is None else np.asarray(v, dtype=np.float64))
                          for j, v in enumerate(values)])

    def add_one_hot(self, name: str, width: int,
                    entries: Sequence[tuple[NDArray[np.intp], NDArray[np.float64] | None]]) -> None:
        """A raw one-hot block (weighted sums, like :meth:`add_block`) given as :class:`OneHot` entries."""
        self._push(name, "sums", OneHot(int(width), tuple(entries)))

    def __contains__(self, name: str) -> bool:
        return name in self._slices

    def column(self, name: str) -> NDArray[np.float64]:
        """The per-sample values registered as ``name`` (a mean's column)."""
        return self._cols[list(self._slices).index(name)][:, 0]

    def write(self, out: NDArray[np.float64]) -> None:
        """Fill ``out`` (N, width) with the product's matrix: every registered block in column order."""
        start = 0
        for block in self._cols:
            if isinstance(block, OneHot):
                block.write(out[:, start:start + block.width])
                start += block.width
            else:
                out[:, start:start + block.shape[1]] = block
                start += block.shape[1]

    def matrix(self) -> NDArray[np.float64]:
        """The (N, width) matrix of every registered block (:meth:`write` into a new array)."""
        out = np.empty((self.n, self.width))
        self.write(out)
        return out

    def apply(self, weights: NDArray, sums: NDArray | None = None) -> dict[str, NDArray]:
        """``{name: values}`` of the (rows, N) block ``weights``; ``sums`` = ``weights @ matrix()`` when the
        caller has it (``resample`` stacks several splits' blocks), else computed here (the stacked matrix
        kept for the next block)."""
        if not self._slices:
            return {}
        if sums is None:
            if self._matrix is None or self._matrix.shape[1] != self.width:
                self._matrix = self.matrix()
            sums = weights @ self._matrix
        total = weights.sum(axis=1)
        out = {}
        for name, (kind, sl) in self._slices.items():
            part = sums[:, sl]
            out[name] = part[:, 0] / total if kind == "mean" else part
        return out


@dataclass(frozen=True)
class Partition:
    """Samples grouped by a cell index (a calibration bin, or a bin within a CV half): weighted per-cell sums in
    one gather and one ``reduceat`` per value, instead of a matrix product with a one-hot (N, cells) matrix."""

    order: NDArray[np.intp]
    starts: NDArray[np.intp]
    cells: NDArray[np.intp]
    n_cells: int

    @classmethod
    def of(cls, cell: NDArray, n_cells: int) -> Partition:
        order = np.argsort(cell, kind="stable")
        c = cell[order]
        starts = np.r_[0, np.flatnonzero(np.diff(c)) + 1] if c.size else np.zeros(0, np.intp)
        return cls(order, starts, c[starts].astype(np.intp), int(n_cells))

    def sums(self, weights: NDArray, values: NDArray | None = None, *, gathered: NDArray | None = None) -> NDArray:
        """(B, n_cells) sums of ``weights * values`` (``values`` None: of the weights) per cell; ``gathered`` is
        ``weights[:, order]`` when the caller already has it."""
        w = weights[:, self.order] if gathered is None else gathered
        x = w if values is None else w * values[self.order]
        out = np.zeros((w.shape[0], self.n_cells))
        if self.starts.size:
            out[:, self.cells] = np.add.reduceat(x, self.starts, axis=1, dtype=np.float64)
        return out


def weighted_binned_error(bins: NDArray[np.intp], gaps: NDArray, n_bins: int, weights: NDArray) -> NDArray:
    r"""Binned calibration error of each replicate: :math:`\sum_k |\sum_{i \in k} w_i g_i| / \sum_i w_i`.

    ``bins`` (N,) is each sample's bin (fixed by its own value, so a resample only changes the weights) and
    ``gaps`` (N,) its ``hit - confidence`` (or ``error - uncertainty``); ``weights`` (B, N). With all weights 1
    this is the ECE (UCE) of the full set.
    """
    return np.abs(Partition.of(bins, n_bins).sums(weights, np.asarray(gaps, np.float64))).sum(axis=1) \
        / weights.sum(axis=1)
