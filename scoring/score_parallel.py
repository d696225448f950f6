# SPDX-License-Identifier: MIT
"""One archive's splits scored on a Dask cluster (issue #29 item 4): ``ubench score --scheduler ADDRESS`` or
``--workers N``.

Each split is one task: a worker opens the archive itself (the workers must see the same path, as for
``leaderboard``), streams the split and computes its sections with a :class:`~ubench.metrics.report.ReportBuilder`
of its own, and returns what that split added (``ReportBuilder.split_result``: sections and (N,) scores, never an
(N, C) array). The client merges the results in scoring order (``ReportBuilder.absorb``) and finishes the report,
which is the one :func:`~ubench.scoring.score.run_score` writes in one process, number for number. With the shift
temperature on, the in-domain and OOD splits go first: the shift splits need the temperature fitted on them.

The bootstrap intervals' replicates are computed by the client, from the per-sample statistics each result
carries (a few (N,) columns), as the results arrive: the client's resampling runs beside the workers' scoring,
not after it. Workers and client multiply on one BLAS thread (``scoring/blas.py``; Dask sets the same on its
workers): BLAS products round differently with the number of threads, and the report must be the one-process
report to the last bit.

A split is never divided between workers: its metrics make several passes over its (N, C) mean, which lives in
the worker that streamed it (moving it would cost more than computing it, 400 MB for ImageNet). Each worker plans
its own memory (:mod:`ubench.scoring.memory_plan`), so a split that does not fit a worker is read in passes there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..archive_schema.spec import ReadLimits

__all__ = ["score_splits_parallel", "score_split_task"]


def score_split_task(path: str, name: str, labels: np.ndarray | None, unit: str | None, *, protocol,
                     limits: ReadLimits, primary: str | None, shift_ts: dict[str, Any] | None,
                     memory_bytes: int | None) -> dict[str, Any]:
    """On a worker: score split ``name`` of the archive at ``path`` alone (``unit``: the digest of its sample
    ids); its ``split_result``."""
    from ..archive_schema import open_archive
    from ..metrics.report import ReportBuilder
    from .blas import one_blas_thread
    from .memory_plan import memory_budget, plan_split, working_bytes
    from .score import score_split

    with open_archive(path, limits, check_values=False) as reader, one_blas_thread():  # as in one process
        h = reader.header
        builder = ReportBuilder(protocol, n_members=h.n_members, n_classes=h.n_classes, dataset=h.dataset,
                                primary=primary)
        builder.notes.clear()  # the report's builder has the constructor's notes already
        builder.intervals.units = {name: unit}  # the split's resampling unit
        builder.intervals.resampling = False  # the client resamples it
        if shift_ts is not None:
            builder.shift_temperature(shift_ts)
        extra = working_bytes({name: h.splits[name].n_samples}, h.n_classes, bootstrap=None)  # intervals: client
        plan = plan_split(name, h.n_members, h.splits[name].n_samples, h.n_classes,
                          budget=memory_budget(memory_bytes), block_bytes=limits.block_bytes, extra_bytes=extra)
        score_split(reader, name, builder, labels, limits, plan)
        return builder.split_result(name)


def score_splits_parallel(path, reader, builder, labels: Mapping[str, np.ndarray | None], limits: ReadLimits, *,
                          scheduler: str | None, workers: int, memory_bytes: int | None, progress=None) -> None:
    """Score every split of the open ``reader`` on the cluster (the scheduler at ``scheduler``, else a local
    cluster of ``workers`` processes) and merge them into ``builder`` in scoring order."""
    import contextlib

    from .distributed import local_cluster, map_unordered
    from .score import _scoring_order

    h = reader.header
    order = _scoring_order(h)
    first = [n for n in order if h.splits[n].role != "shift"] if builder.p.shift_temperature else order
    waves = [first, [n for n in order if n not in first]]
    done = 0
    with contextlib.ExitStack() as stack:
        address = scheduler if scheduler is not None else stack.enter_context(local_cluster(workers))
        for k, wave in enumerate(waves):
            if not wave:
                continue
            # the shift splits' temperature is fitted here once, from the in-domain splits merged so far
            shift_ts = (builder.shift_temperature() or {}) if k == 1 else None
            results: dict[str, dict] = {}
            items = [(str(path), n, labels[n], builder.intervals.units.get(n)) for n in wave]
            for i, result in map_unordered(_task, items, scheduler=address, protocol=builder.p, limits=limits,
                                           primary=builder.primary, shift_ts=shift_ts, memory_bytes=memory_bytes):
                # resampled here as they arrive, while the workers score the next splits
                builder.intervals.absorb(wave[i], result.pop("intervals"))
                results[wave[i]] = result
                done += 1
                if progress is not None:
                    progress("splits", done, len(order))
            for name in wave:
                builder.absorb(name, results[name])


def _task(item: tuple[str, str, np.ndarray | None, str | None], **kwargs) -> dict[str, Any]:
    return score_split_task(*item, **kwargs)
