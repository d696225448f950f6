# SPDX-License-Identifier: MIT
"""Run one function over many items: serially, on a local Dask cluster, or on a Dask scheduler elsewhere.

Dask (``pip install "ubench[scale]"``) is imported only here and only when asked for. The function must be
importable by name on every worker (``ubench.scoring.leaderboard.score_one`` is) and idempotent: when a worker
dies, the scheduler runs its unfinished tasks again elsewhere, so the same item can start twice; the leaderboard's
content-addressed result files make a second run a cache hit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

__all__ = ["map_unordered", "local_cluster", "worker_environ", "WORKER_MALLOC_ENV", "SchedulerClient"]

#: glibc malloc settings of the worker processes a local cluster starts. Dask starts its workers with
#: ``MALLOC_TRIM_THRESHOLD_=65536`` (``distributed.nanny.pre-spawn-environ``: give freed memory back to the system
#: at once), which also pins glibc's mmap threshold at 128 KiB: every block of a scoring kernel above that is then
#: mapped and unmapped again, one page fault per 4 KiB each time. Measured on the ImageNet-C-shaped archive (21
#: splits of 50,000 x 1,000): 7x the page faults of one process and 15-25 % more CPU per split. These values give
#: the workers glibc's behaviour in one process (blocks up to 32 MiB reused from the heap; the heap's free top
#: given back beyond 64 MiB): a split's (N, C) arrays are still mapped and unmapped whole, so a worker's memory
#: between splits stays what one process keeps.
WORKER_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 * 2**20), "MALLOC_TRIM_THRESHOLD_": str(64 * 2**20)}


@contextlib.contextmanager
def worker_environ() -> Iterator[None]:
    """Within it, a ``LocalCluster`` (or ``Nanny``) created starts its workers with :data:`WORKER_MALLOC_ENV`.

    A nanny reads Dask's ``distributed.nanny.pre-spawn-environ`` when it is created, each variable overridden by
    the creating process's ``os.environ``, and keeps the result for every worker it (re)starts, writing it into
    ``os.environ`` before each spawn: a cluster started earlier in this process with Dask's defaults has left
    ``MALLOC_TRIM_THRESHOLD_=65536`` there. So both are set here; ``os.environ`` is restored on exit (Dask writes
    the values again when a nanny restarts its worker)."""
    import os

    import dask

    environ = {**dask.config.get("distributed.nanny.pre-spawn-environ", default={}), **WORKER_MALLOC_ENV}
    saved = {k: os.environ.get(k) for k in WORKER_MALLOC_ENV}
    os.environ.update(WORKER_MALLOC_ENV)
    try:
        with dask.config.set({"distributed.nanny.pre-spawn-environ": environ}):
            yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def local_cluster(n_workers: int) -> Iterator[str]:
    """A ``LocalCluster`` of ``n_workers`` single-threaded worker processes on 127.0.0.1 whose malloc is set as
    :data:`WORKER_MALLOC_ENV`; yields its address."""
    try:
        from distributed import LocalCluster
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError('parallel scoring needs Dask: pip install "ubench[scale]"') from exc

    with worker_environ():
        cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                               dashboard_address=None, silence_logs=40)
    with cluster:
        yield cluster.scheduler_address


def map_unordered(fn: Callable[..., Any], items: Sequence[Any], *, workers: int = 1, scheduler: str | None = None,
                  **kwargs: Any) -> Iterator[tuple[int, Any]]:
    """Yield ``(index, fn(item, **kwargs))`` as results finish.

    ``scheduler`` is a Dask scheduler address (``tcp://host:8786``); without one, ``workers == 1`` runs in this
    process and ``workers > 1`` starts a local cluster for the duration of the call. An exception raised by
    ``fn`` propagates (the leaderboard's ``score_one`` turns every problem with an archive into a result, so an
    exception here means the board directory or the cluster itself failed).
    """
    if scheduler is None and workers <= 1:
        for i, item in enumerate(items):
            yield i, fn(item, **kwargs)
        return
    with contextlib.ExitStack() as stack:
        address = scheduler if scheduler is not None else stack.enter_context(local_cluster(workers))
        try:
            from distributed import Client, as_completed
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise RuntimeError('distributed scoring needs Dask: pip install "ubench[scale]"') from exc
        client = stack.enter_context(Client(address, set_as_default=False))
        futures = client.map(fn, list(items), pure=False, **kwargs)
        index = {f.key: i for i, f in enumerate(futures)}
        for future in as_completed(futures, loop=client.loop):
            yield index[future.key], future.result()


class SchedulerClient:
    """A long-lived client of the Dask scheduler at ``address`` for callers that hand over one item at a time
    (``ubench serve --scheduler``: each scoring thread blocks in :meth:`call` while a worker of the cluster runs
    the item). Thread-safe: Dask's ``Client`` may be used from several threads. The workers must see the same
    paths as the caller (the same machine or a shared filesystem)."""

    def __init__(self, address: str, *, timeout: float = 30):
        try:
            from distributed import Client
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise RuntimeError('--scheduler needs Dask: pip install "ubench[scale]"') from exc
        self.address = address
        self.client = Client(address, set_as_default=False, timeout=timeout)

    def n_threads(self) -> int:
        """Worker threads the cluster has now (at least 1)."""
        return max(1, sum(self.client.nthreads().values()))

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` on a worker; its result (its exception is raised here)."""
        return self.client.submit(fn, *args, pure=False, **kwargs).result()

    def close(self) -> None:
        self.client.close()
