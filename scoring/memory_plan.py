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
(:data:`RESERVE_SHARE`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MemoryBudgetError", "SplitPlan", "plan_split", "memory_budget", "VECTOR_BYTES_PER_SAMPLE",
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


class MemoryBudgetError(ValueError):
    """A split cannot be scored within the memory it may use, not even in passes over its archive."""


@dataclass(frozen=True)
class SplitPlan:
    """``in_memory``: hold the split's mean; ``mean_bytes`` its size; ``budget`` the bytes it could use."""

    in_memory: bool
    mean_bytes: int
    budget: int | None


def _address_space_left() -> int | None:
    """Bytes this process may still map under its ``RLIMIT_AS`` soft limit (None without a limit)."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY:
            return None
        with open("/proc/self/statm") as f:
            mapped = int(f.read().split()[0]) * resource.getpagesize()
        return max(0, soft - mapped)
    except (ImportError, OSError, ValueError):
        return None


def _memory_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
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
               block_bytes: int) -> SplitPlan:
    """Hold split ``name``'s mean if the mean, its per-sample vectors and the working blocks fit ``budget`` (less
    :data:`RESERVE_SHARE`); else read it in passes if the vectors and blocks fit; else raise
    :class:`MemoryBudgetError`. The plan's ``budget`` is what was left for the split."""
    mean = 8 * n_samples * n_classes
    block = min(block_bytes, 8 * n_members * n_samples * n_classes)
    rest = VECTOR_BYTES_PER_SAMPLE * n_samples + WORKING_BLOCKS * block
    if budget is None:
        return SplitPlan(True, mean, budget)
    budget = int(budget * (1 - RESERVE_SHARE))
    if mean + rest <= budget:
        return SplitPlan(True, mean, budget)
    if rest <= budget:
        return SplitPlan(False, mean, budget)
    raise MemoryBudgetError(
        f"split {name!r} ({n_samples:,} samples x {n_classes:,} classes) cannot be scored within the memory "
        f"limit: it needs at least {_mib(rest)} in passes over the archive ({_mib(mean + rest)} with its mean in "
        f"memory) and {_mib(budget)} are left")


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"
