# SPDX-License-Identifier: MIT
"""How a split is scored within the memory it may use (issue #29 item 3): its (N, C) mean held in memory, re-read
from the archive in passes, or refused before any prediction is read.

A report holds one split's arrays at a time: the (N, C) float64 ensemble mean and about 30 per-sample float64
vectors (uncertainties, scores, conformal thresholds and set sizes, CV fold statistics), plus working blocks of
``block_bytes`` (a block being read, a TACE class group, a scaled block). When the mean does not fit, the split
is scored from :class:`~ubench.scoring.archive_mean.ArchiveMean`, which recomputes mean rows from the archive for
each pass (same numbers; see the README's *Scoring beyond memory* for which metrics take how many passes). When
not even the per-sample vectors and the working blocks fit, scoring stops up front with :class:`MemoryBudgetError`
naming the size it would need.

The budget: ``memory_bytes`` when the caller gives one, else what the process may still map under its
address-space limit (``RLIMIT_AS``, as the sandbox sets it) or, without one, the memory the kernel reports
available (``MemAvailable``); an eighth of it is kept back for what the interpreter maps as it runs
(:data:`RESERVE_SHARE`). Both are read from ``/proc``, which a sandboxed child can no longer open once Landlock
closes the file system: it calls :func:`keep_proc_open` before, and the budget is read through those descriptors
(without them the child saw no budget at all and planned every split in memory: a 4 GB split under a 1.6 GiB
limit ended in a bare ``memory-limit`` instead of passes).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MemoryBudgetError", "keep_proc_open", "SplitPlan", "plan_split", "memory_budget", "VECTOR_BYTES_PER_SAMPLE",
           "WORKING_BLOCKS", "RESERVE_SHARE"]

#: Per-sample float64 vectors a split's sections keep at once (27 counted at the in-domain split's peak; twice that
#: for the temporaries of the reductions over them).
VECTOR_BYTES_PER_SAMPLE = 64 * 8
#: Share of the budget kept back for what the interpreter maps as it runs: thread stacks and malloc arenas (an
#: address-space limit counts their reservations), HDF5's chunk caches (measured: a 4 GB split planned without it
#: ran out of a 2 GiB sandbox).
RESERVE_SHARE = 1 / 8
#: Working blocks alive at once besides the arrays, each ``block_bytes`` at most (the block being read with its
#: float64 temporaries, a kernel's gathered entries); a split smaller than a block needs only its own size.
WORKING_BLOCKS = 2
#: Bytes per gathered entry of TACE's class groups (``metrics/calibration.py``: value, class, hit, their lists,
#: the concatenation, the sort order and the sorted copies), a working set of fixed size beside the blocks:
#: measured, a 20,000 x 500 split in passes mapped 205 MiB beyond the plan's start, 138 MiB of it planned without
#: this term.
TACE_BYTES_PER_ENTRY = 48
#: Bootstrap intervals (``metrics/intervals.py``), computed a batch of splits at a time as they are scored
#: (``IntervalCollector.BATCH``): their replicate blocks and the two threads' kernel temporaries take a fixed
#: share, measured as 30 float64 per cell of a block of ``BLOCK_CELLS`` (480 MiB of address space beyond the
#: plan's start for 4 splits of 2,000 samples), the statistics of the splits of a batch about 3 KiB per sample
#: (705 MiB for 4 x 20,000), and every split's replicate values (:data:`REPLICATE_BYTES` per replicate).
INTERVAL_CELL_BYTES = 30 * 8
#: Bytes per bootstrap replicate a split keeps until the report is finished: one float64 for each of its keys
#: with an interval (52 for an in-domain split with the calibrated protocol; 64 with room).
REPLICATE_BYTES = 64 * 8
#: What a report maps beside all of the above whatever the split's size (HDF5's chunk caches, the results kept
#: for the report, small temporaries): measured, a 3,000 x 200 split in passes mapped 50 MiB beyond the plan's
#: start, 29 MiB of it planned without this term.
FIXED_BYTES = 32 * 2**20
INTERVAL_BYTES_PER_SAMPLE = 3 * 2**10
#: Splits whose (N, C) float64 mean is at most this are resampled a batch at a time *beside* the next split
#: (``IntervalCollector.overlap``): the scoring of a split this small keeps about one core busy, and resampling
#: on the other takes the intervals' cost mostly off the wall clock (``bench/bench_intervals.py``). Larger splits
#: (ImageNet's 50,000 x 1,000 is 400 MB) wait for the batch to be done: there the replicate blocks beside a
#: split's arrays would cost the bounded peak memory of issue #29 its margin.
OVERLAP_MAX_MEAN_BYTES = 64 * 2**20


def overlaps(splits: dict[str, int], n_classes: int) -> bool:
    """Whether a report's batches of bootstrap replicates are resampled beside the next split: every split's
    mean within :data:`OVERLAP_MAX_MEAN_BYTES`."""
    return 8 * max(splits.values(), default=0) * n_classes <= OVERLAP_MAX_MEAN_BYTES


def working_bytes(splits: dict[str, int], n_classes: int, *, bootstrap: int | None, overlap: bool = False) -> int:
    """Bytes a report maps beside any one split's arrays and blocks, for splits of ``splits[name]`` samples:
    TACE's class groups (at most a split's N x C entries) and, with ``bootstrap`` replicates (None: no
    intervals), the bootstrap's replicate blocks (at most ``bootstrap`` x N cells), the statistics of one batch
    of splits (the largest ones) and every split's replicate values; and :data:`FIXED_BYTES`. With ``overlap``
    (:func:`overlaps`), batches are resampled while the next splits are scored: the replicate blocks come on top
    of TACE's groups instead of after them, the statistics of ``IntervalCollector.IN_FLIGHT`` batches handed off
    and of the one filling are alive, and the units' counts are kept from one batch to the next (a byte per
    replicate and sample, at most ``KEEP_CELLS``)."""
    from ..metrics.bootstrap import BLOCK_CELLS
    from ..metrics.calibration import _TACE_GROUP_ENTRIES
    from ..metrics.intervals import KEEP_CELLS
    from ..metrics.report_intervals import IntervalCollector

    largest = max(splits.values(), default=0)
    tace = TACE_BYTES_PER_ENTRY * min(_TACE_GROUP_ENTRIES, largest * n_classes)
    if bootstrap is None:
        return FIXED_BYTES + tace
    cells = min(BLOCK_CELLS, bootstrap * largest)
    in_flight = 1 + IntervalCollector.IN_FLIGHT if overlap else 1  # the batches handed off, and the one filling
    batch = sum(sorted(splits.values(), reverse=True)[:IntervalCollector.BATCH * in_flight])
    blocks = tace + INTERVAL_CELL_BYTES * cells if overlap else max(tace, INTERVAL_CELL_BYTES * cells)
    kept = min(KEEP_CELLS, bootstrap * sum(splits.values())) if overlap else 0  # the units' counts, a byte each
    return (FIXED_BYTES + blocks + INTERVAL_BYTES_PER_SAMPLE * batch + REPLICATE_BYTES * bootstrap * len(splits)
            + kept)


class MemoryBudgetError(ValueError):
    """A split cannot be scored within the memory it may use, not even in passes over its archive.

    ``needed`` is the bytes it needs in passes, ``left`` the bytes that were left for it (both after
    :data:`RESERVE_SHARE`); :meth:`limit_needed` turns them into the address-space limit that would do."""

    def __init__(self, message: str, *, needed: int = 0, left: int = 0):
        super().__init__(message)
        self.needed, self.left = needed, left

    def limit_needed(self, limit: int) -> int:
        """The address-space limit under which the split would be scored in passes, given the one it had."""
        return limit + int(-(-(self.needed - self.left) // (1 - RESERVE_SHARE)))


@dataclass(frozen=True)
class SplitPlan:
    """``in_memory``: hold the split's mean; ``mean_bytes`` its size; ``budget`` the bytes left for it beside the
    per-sample arrays and the working memory."""

    in_memory: bool
    mean_bytes: int
    budget: int | None


#: ``/proc`` files kept open by :func:`keep_proc_open` (path -> binary file object).
_KEPT: dict[str, object] = {}


def keep_proc_open() -> None:
    """Open ``/proc/self/statm`` and ``/proc/meminfo`` now and read the budget through them from then on: for a
    process about to lose access to ``/proc`` (the sandbox child before Landlock). The files are re-read from
    the start each time, so they give the values of the moment, not of the opening."""
    for path in ("/proc/self/statm", "/proc/meminfo"):
        if path not in _KEPT:
            try:
                _KEPT[path] = open(path, "rb")  # noqa: SIM115 - kept open for the process's lifetime
            except OSError:
                pass


def _read_proc(path: str) -> str:
    kept = _KEPT.get(path)
    if kept is None:
        with open(path, "rb") as f:
            return f.read().decode()
    kept.seek(0)
    return kept.read().decode()


def _address_space_left() -> int | None:
    """Bytes this process may still map under its ``RLIMIT_AS`` soft limit (None without a limit)."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY:
            return None
        mapped = int(_read_proc("/proc/self/statm").split()[0]) * resource.getpagesize()
        return max(0, soft - mapped)
    except (ImportError, OSError, ValueError):
        return None


def _memory_available() -> int | None:
    try:
        for line in _read_proc("/proc/meminfo").splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def memory_budget(memory_bytes: int | None = None) -> int | None:
    """The bytes a split may use: ``memory_bytes`` if given, else the address space left under ``RLIMIT_AS``,
    else ``MemAvailable`` (None when none is known: then every split is held in memory, as before)."""
    if memory_bytes is not None:
        return int(memory_bytes)
    left = _address_space_left()
    return left if left is not None else _memory_available()


def plan_split(name: str, n_members: int, n_samples: int, n_classes: int, *, budget: int | None,
               block_bytes: int, extra_bytes: int = 0) -> SplitPlan:
    """Hold split ``name``'s mean if the mean, its per-sample vectors and the working blocks fit ``budget`` (less
    :data:`RESERVE_SHARE`); else read it in passes if the vectors and blocks fit; else raise
    :class:`MemoryBudgetError`. ``extra_bytes`` is what the report needs beside the split
    (:func:`working_bytes`). The plan's ``budget`` is what is left for the mean beside them."""
    mean = 8 * n_samples * n_classes
    block = min(block_bytes, 8 * n_members * n_samples * n_classes)
    rest = VECTOR_BYTES_PER_SAMPLE * n_samples + WORKING_BLOCKS * block + int(extra_bytes)
    if budget is None:
        return SplitPlan(True, mean, budget)
    budget = int(budget * (1 - RESERVE_SHARE))
    if mean + rest <= budget:
        return SplitPlan(True, mean, budget - rest)
    if rest <= budget:
        return SplitPlan(False, mean, budget - rest)
    raise MemoryBudgetError(
        f"split {name!r} ({n_samples:,} samples x {n_classes:,} classes) cannot be scored within the memory "
        f"limit: it needs at least {_mib(rest)} in passes over the archive ({_mib(mean + rest)} with its mean in "
        f"memory) and {_mib(budget)} are left", needed=rest, left=budget)


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"
