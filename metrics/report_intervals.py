# SPDX-License-Identifier: MIT
"""What :class:`~ubench.metrics.report.ReportBuilder` hands to the intervals: it collects each split's per-sample
statistics as the builder scores the split, and at the end adds the report's ``intervals`` (and, on request,
``samples``: the per-sample columns that paired comparisons and rank intervals resample later).

The settings come from the protocol: ``intervals`` (on/off), ``confidence`` (the level), ``bootstrap`` (B),
``seed``, ``sample_stats`` (also return ``samples``). ``units`` maps split names to the sha256 of their sample ids
(set by ``scoring/score.py``), which decides the resampling units (:func:`~ubench.metrics.intervals.resampling_unit`).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .decision import _check_cost, cost_matrix_preset
from .ensemble import _smooth
from .intervals import (
    SAMPLE_ENCODING,
    LabelledStatistics,
    OODStatistics,
    encode_samples,
    report_intervals,
    resample,
    resampling_unit,
)
from .protocol_bootstrap import cv_influence

__all__ = ["IntervalCollector", "SAMPLE_COLUMNS"]

#: Columns of the primary split in ``samples`` (besides the detection scores ``score_<name>``): each a per-sample
#: value whose weighted mean is the metric (``cll`` and ``calibrated_brier`` with the first-order refit).
SAMPLE_COLUMNS = ("accuracy", "nll", "brier", "cll", "calibrated_brier")


class IntervalCollector:
    """Per-split statistics gathered while a report is built; :meth:`finish` adds ``intervals`` / ``samples``.

    A split's statistics are resampled soon after it is added, :data:`BATCH` splits at a time (each unit's counts
    drawn once for them, the splits evaluated on two threads; :meth:`settle`), and then dropped: what stays per
    split is its replicate values (B per key) and, when ``samples`` are asked for, its exported columns, so the
    memory of a
    report does not grow with its number of splits beyond those (issue #29 item 2). The numbers are those of
    resampling every split at once: each unit's counts come from its own generator, and every call cuts the
    replicates into the same blocks (``block_n``). A Dask worker's collector (:attr:`resampling` off) resamples
    nothing: :meth:`split_result` hands the statistics to the report's collector, which resamples them as they
    arrive, beside the workers (``scoring/score_parallel.py``).

    With :attr:`overlap` set (by ``scoring/score.py``, for splits small enough that memory is not what binds:
    :data:`~ubench.scoring.memory_plan.OVERLAP_MAX_MEAN_BYTES`), a batch is resampled on a thread of its own
    while the next splits are read and scored: the scoring of a split leaves most of the second core idle, and the
    resampling fills it, on one kernel thread (two would make three busy threads on two cores). A batch goes as
    soon as it is full, or at once when it holds a split with sorted kernels (the in-domain split, an OOD split:
    most of the resampling's work, which should start first; so without the overlap too, for the same batches). The batches run one after another (each thread waits for the one before),
    at most :data:`IN_FLIGHT` of them handed off and not yet taken in, so the scoring waits only when the
    resampling falls that far behind. The replicate values are taken in, in batch order, by the thread that called
    :meth:`settle`; the numbers are the same either way (tested).
    """

    #: Splits resampled together: as many as :func:`~ubench.metrics.intervals.resample` evaluates at once.
    BATCH = 2
    #: With :attr:`overlap`: batches handed to their threads and not yet taken in (the one running, the next).
    IN_FLIGHT = 2

    def __init__(self, protocol: Any, *, scores, cost_preset, cost_matrix, primary: str | None = None):
        p = protocol
        self.p = p
        self.enabled = bool(getattr(p, "intervals", False))
        self.export = bool(getattr(p, "sample_stats", False))
        self.scores = tuple(scores)
        self.primary = primary
        self.cost = None
        if cost_preset is not None or cost_matrix is not None:
            cost = cost_matrix_preset(cost_preset) if cost_preset is not None else np.asarray(cost_matrix, np.float64)
            self.cost = cost
        #: split name -> sha256 of its sample ids, and the samples that size the replicate blocks (the report's
        #: largest split); both set by ``scoring/score.py`` before the first split is added.
        self.units: dict[str, str | None] = {}
        self.block_n: int | None = None
        self.roles: dict[str, str] = {}
        self.sizes: dict[str, tuple[str, int]] = {}  # split -> (resampling unit, n)
        self.replicates: dict[str, dict[str, NDArray]] = {}
        self.columns: dict[str, dict[str, NDArray]] = {}  # split -> its ``samples`` columns (export only)
        self._pending: dict[str, Any] = {}
        #: resample a full batch on a thread of its own beside the next split (see the class docstring)
        self.overlap = False
        #: False on a Dask worker (``scoring/score_parallel.py``): its split's statistics wait for
        #: :meth:`split_result`, the report's collector resamples them
        self.resampling = True
        self._running: list[_Resampling] = []  # handed off, in batch order
        #: each resampling unit's count blocks, drawn once for the report's batches (with :attr:`overlap` only:
        #: up to ``KEEP_CELLS`` bytes, which the memory plan counts then)
        self._counts: dict[str, list[NDArray]] = {}

    @property
    def active(self) -> bool:
        return self.enabled or self.export

    def _unit(self, role: str, name: str) -> str:
        return resampling_unit(role, name, self.units.get(name))

    def add_labelled(self, role: str, name: str, arrays: Any, labels: NDArray, section: Mapping[str, Any]) -> None:
        """An in-domain or shift split that was scored (``section`` its report section)."""
        if not self.active:
            return
        p = self.p
        influence = None
        cal = section.get("calibrated")
        if role == "in_domain" and cal:
            if p.placement == "per_member":
                members = _smooth(arrays.member_probs, p.smoothing) if p.smoothing else arrays.member_probs
            else:  # the mean as it is (cv_influence reads its rows in blocks: it may be a split read in passes)
                members = (_smooth(arrays.mean_probs, p.smoothing) if p.smoothing else arrays.mean_probs,)
            influence = cv_influence(members, labels, placement=p.placement, n_repeats=p.repeats, seed=p.seed,
                                     eps=p.eps, n_bins=p.bins)
        cost = None
        if role == "in_domain" and "decision_cost" in section and self.cost is not None:
            cost = _check_cost(self.cost, arrays.mean_probs.shape[1])
        stat = LabelledStatistics(
            arrays, labels, unit=self._unit(role, name), bins=p.bins, eps=p.eps, smoothing=p.smoothing, tpr=p.tpr,
            full=role == "in_domain", scores=self.scores if role == "in_domain" else (), cost=cost,
            cost_reduction=section.get("cost_reduction", "mean"), protocol=influence)
        self.roles[name], self.sizes[name] = role, (stat.unit, stat.n)
        if self.export and (role == "shift" or name == self.primary):
            # the primary's columns and detection scores, a shift split's accuracy (SAMPLE_COLUMNS)
            wanted = SAMPLE_COLUMNS if name == self.primary else ("accuracy",)
            cols = {k: stat.cols.column(k) for k in wanted if k in stat.cols}
            if role == "in_domain":
                cols.update({f"score_{s}": arrays.score(s) for s in self.scores})
            self.columns[name] = cols
        self._add(name, stat)

    def add_ood(self, name: str, in_arrays: Any, ood_arrays: Any, primary: str) -> None:
        if not self.active:
            return
        stat = OODStatistics(in_arrays, ood_arrays, unit=self._unit("ood", name), against=self.sizes[primary][0],
                             tpr=self.p.tpr, scores=self.scores)
        self.roles[name], self.sizes[name] = "ood", (stat.unit, stat.n)
        if self.export:
            self.columns[name] = {f"score_{s}": ood_arrays.score(s) for s in self.scores}
        self._add(name, stat)

    def _add(self, name: str, stat: Any) -> None:
        if not self.enabled:
            return
        self._pending[name] = stat

    def settle(self) -> None:
        """Resample the waiting splits once they fill a batch, or at once when they hold sorted kernels: called
        when no split's (N, C) arrays are held (by ``scoring/score.py`` after each split, so that the replicate
        blocks never sit beside a split's mean); with :attr:`overlap`, on a thread of its own, after taking in the
        oldest batch when :data:`IN_FLIGHT` are out. The batches are the same either way, and so are the numbers
        (tested)."""
        if not self.resampling or len(self._pending) < self.BATCH and not any(
                getattr(s, "sorted_kernels", False) for s in self._pending.values()):
            return
        if not self.overlap:
            self.flush()
            return
        while len(self._running) >= self.IN_FLIGHT:
            self._take_oldest()
        batch, self._pending = self._pending, {}
        after = self._running[-1] if self._running else None
        # one kernel thread: the scoring thread goes on beside it (measured, M = 5, 7 splits of 10,000 x 100, at
        # idle: 1.56-1.58 s against 1.63-1.72 s with two kernel threads, three busy threads on the two cores)
        self._running.append(_Resampling(partial(self._resample, threads=1), batch, self._units(batch), after))

    def flush(self) -> None:
        """Resample the splits added since the last flush; keep their replicate values, drop their statistics."""
        while self._running:
            self._take_oldest()
        if self._pending:
            batch, self._pending = self._pending, {}
            self.replicates.update(self._resample(batch, self._units(batch)))

    def _take_oldest(self) -> None:
        """Wait for the oldest batch resampled on its own thread and take its replicate values in (its error, if
        it failed, is raised here, the later batches still taken in by the next call)."""
        self.replicates.update(self._running.pop(0).result())

    def _units(self, batch: Mapping[str, Any]) -> dict[str, int]:
        """The resampling units a batch's statistics read, with their sample counts (read on the calling thread:
        :attr:`sizes` grows as splits are added)."""
        sizes = dict(self.sizes.values())
        return {u: sizes[u] for stat in batch.values() for u in (stat.unit, getattr(stat, "against", stat.unit))}

    def _resample(self, batch: Mapping[str, Any], units: Mapping[str, int], threads: int | None = None
                  ) -> dict[str, dict[str, NDArray]]:
        return resample(batch, units, n_replicates=self.p.bootstrap, seed=self.p.seed, block_n=self.block_n,
                        counts=self._counts if self.overlap else None, threads=threads)

    def split_result(self, name: str) -> tuple | None:
        """What split ``name`` left in a collector given only that split (its statistics, not yet resampled: one
        split is less than a batch; and its exported columns), for :meth:`absorb` into the report's collector
        (``ReportBuilder.split_result``)."""
        if name not in self.roles:
            return None
        return self.roles[name], self.sizes[name], self._pending.pop(name, None), self.columns.get(name)

    def absorb(self, name: str, part: tuple | None) -> None:
        """Take a :meth:`split_result` (``None``: nothing to take); its statistics are resampled with the next
        batch. The order of absorbing changes no number and no key order."""
        if part is None:
            return
        self.roles[name], self.sizes[name], stat, cols = part
        if cols is not None:
            self.columns[name] = cols
        if stat is not None:
            self._add(name, stat)
            self.settle()

    def finish(self, report: dict[str, Any]) -> None:
        """Add ``intervals`` (when on) and ``samples`` (when asked) to ``report``."""
        self.flush()
        if not self.roles:
            return
        p = self.p
        if self.enabled:
            report["intervals"] = report_intervals(report, self.replicates, level=p.confidence,
                                                   n_replicates=p.bootstrap, seed=p.seed)
        if self.export:
            report["samples"] = self._samples(report)

    def _samples(self, report: Mapping[str, Any]) -> dict[str, Any] | None:
        primary = report.get("primary_split")
        if primary not in self.columns:
            return None
        order = [*report["in_domain"], *report["shift"], *report["ood"]]  # as added in one process
        splits = {name: {"role": self.roles[name], "unit": self.sizes[name][0], "n": self.sizes[name][1],
                         "columns": encode_samples(self.columns[name])} for name in order if name in self.columns}
        return {"encoding": SAMPLE_ENCODING, "seed": int(self.p.seed), "primary": primary,
                "scores": list(self.scores), "splits": splits}


class _Resampling(threading.Thread):
    """``fn(batch, units)`` on a thread of its own, once the thread ``after`` (the batch before, or None) is
    done: one batch's replicate blocks and kernel threads at a time. :meth:`result` joins it and returns its value
    or raises its error."""

    def __init__(self, fn, batch, units, after: threading.Thread | None = None):
        super().__init__(name="ubench-resample", daemon=True)
        self._fn, self._batch, self._units, self._after = fn, batch, units, after
        self._value: Any = None
        self._error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            if self._after is not None:
                self._after.join()
                self._after = None
            self._value = self._fn(self._batch, self._units)
        except BaseException as e:  # noqa: BLE001 - handed to the caller of result()
            self._error = e
        finally:
            self._batch = None  # the statistics go as soon as they are resampled

    def result(self) -> Any:
        self.join()
        if self._error is not None:
            raise self._error
        return self._value
