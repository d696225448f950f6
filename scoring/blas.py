# SPDX-License-Identifier: MIT
"""BLAS on one thread while ubench scores.

Scoring runs threads of its own: the sorted kernels of the bootstrap on two, the resampling of a batch of splits
beside the next split, the archive's sha256 beside the reading. OpenBLAS starts its own threads for every large
product on top of them, and those busy-wait between products on the same two cores. Measured on the 2-core
machine (``ubench score``, 5 members): at N = 10,000, C = 100 with intervals, 3.2 CPU-s with OpenBLAS's threads
against 2.3 with one, and 3.3-4.2 s of wall time against 1.9-2.8; at ImageNet's N = 50,000, C = 1,000, 18.2
against 12.1 CPU-s. Dask does the same on its workers (``OPENBLAS_NUM_THREADS=1`` and its siblings), so one
process and a cluster's workers now multiply on one BLAS thread alike: the products' last bits no longer depend
on where a split was scored, nor on how many cores the host has. What this gives up: on a many-core host the
largest product (the bootstrap's linear columns, 1,000 x N x 259 for an in-domain split) would run faster on
BLAS's threads; it now runs as one job beside the sorted kernels (``metrics/intervals.py``).

:func:`threadpoolctl.threadpool_limits` sets the limit for the BLAS libraries loaded when it is entered and
restores the caller's on exit. A sandboxed child (``scoring/sandbox.py``), which Landlock keeps from reading
``/proc/self/maps``, gets one thread from its environment instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["one_blas_thread"]


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Within it, the loaded BLAS libraries use one thread (the caller's setting restored on exit)."""
    from threadpoolctl import threadpool_limits

    try:
        limits = threadpool_limits(limits=1, user_api="blas")
    except OSError:  # the libraries cannot be listed (the sandbox's child may not read /proc/self/maps), and
        yield  # there the environment has set one thread already (OPENBLAS_NUM_THREADS, scoring/sandbox.py)
        return
    with limits:
        yield
