# SPDX-License-Identifier: MIT
r"""Confidence intervals over the test samples for the numbers of a report: per-sample statistics in, the report's
``intervals`` object out. Pure (numpy/scipy only).

Every split's per-sample statistics are computed once (:class:`LabelledStatistics` for in-domain and shift
splits, :class:`OODStatistics` for OOD splits); :func:`resample` then draws B bootstrap replicates as count
matrices (:mod:`ubench.metrics.bootstrap`) in blocks and evaluates every statistic of every split on each block:
the sorted kernels (one job per score, on up to two threads) as the blocks are drawn, and beside them each
split's linear columns in one matrix product per block.
Resampling units: an in-domain split is one unit, and so is every shift split with the same sample ids (the
corrupted copies of the same test images are resampled together, so a replicate's shift median is over the same
images); each OOD split is a unit of its own, resampled independently of the in-domain samples it is detected
against (stratified: the in-domain and OOD sizes stay fixed). A unit's counts come from
``default_rng([seed, 2, crc32(unit)])``, so two archives predicting the same samples are resampled with the same
counts: their paired differences (:mod:`ubench.metrics.paired`) and the intervals of ``ubench score`` agree.

What each interval covers (all percentile intervals of B replicates, ``metrics/bootstrap.py``):

- means of per-sample values (accuracy, NLL, Brier, mean uncertainties, vote diversity, top-5 accuracy, decision
  cost): the population mean, the textbook case.
- binned ECE and UCE: the sampling distribution of the *binned estimator* at this N, bins fixed by
  each sample's own value (equal-width bins: exact). Those estimators are biased upward (a perfectly calibrated
  model has ECE > 0 at any finite N), so the interval is around the biased value and need not cover the
  population calibration error; ``l2_ce_debiased`` (Kumar et al. 2019) is the estimate whose square is unbiased,
  its interval computed with its equal-mass bin edges held at those of the full set.
- detection (AUROC, AUPR, FPR95), selective areas (AURC, AUGRC) and points (risk at 80 % coverage, coverage at
  5 % risk): the population value, from the resampled multiset (ties and duplicates as the point estimates
  treat them).
- the test-time cross-validated protocol (CLL, calibrated NLL/Brier/ECE/accuracy, temperature): the population
  value under the protocol, with the temperature refitted in every fold of every replicate to first order
  (:mod:`ubench.metrics.protocol_bootstrap`).
- summary means over OOD splits and medians/quartiles over shift splits: computed per replicate from the splits'
  replicates, so they carry every split's sampling error.

Shift splits get intervals for ``accuracy``, ``nll``, ``brier``, ``ece`` (what the summary's medians and
quartiles need) and ``mean_total_uncertainty``: with many shift splits the other keys would multiply the cost.

No interval (the key is left out): top-5 ECE, TACE (re-binning N x C class probabilities per replicate costs
O(B N C); ``l2_ce_debiased`` and ECE carry the calibration intervals), smooth ECE, the conformal coverage and set
size, ``ece_quantile`` (each refits per fold an object that the bootstrap would have to refit too), the shift
temperature's ``shift_ts_*`` and DEE (``ubench compare --ensemble`` gives DEE its interval).
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .bootstrap import (BOOTSTRAP_METHOD, LinearColumns, bootstrap_counts, count_blocks, count_dtype,
                        interval_rng, percentile_intervals)
from .bootstrap_ranking import _harmonic_table, _Ranked, _Sorted, weighted_detection, weighted_selective
from .calibration import _equal_width_bin_index
from .calibration_debiased import debiased_squared_error, equal_mass_edges
from .classification import _brier_per_sample, _nll_per_sample, _predictions
from .decision import _bayes_decisions
from .shift_paper import _top_k
from .uncertainty import _normalized_entropy

__all__ = ["LabelledStatistics", "OODStatistics", "resample", "resampling_unit", "report_intervals",
           "encode_samples", "decode_samples", "SAMPLE_ENCODING", "SCORE_NAMES"]

#: Uncertainty scores of the detection keys: report name -> ``SplitArrays`` field (higher = more uncertain).
SCORE_NAMES = {"total": "total", "knowledge": "knowledge", "confidence": "neg_confidence"}
#: How ``samples`` columns are stored in JSON: little-endian float64, base64 (exact, a third larger than binary).
SAMPLE_ENCODING = "base64-float64-le"
#: Counts (cells of replicates x samples, a byte each) :func:`resample` keeps from one call to the next when
#: asked (``counts``); more are drawn again instead (the same counts, from a fresh generator).
KEEP_CELLS = 1 << 26
#: Shift keys whose medians and quartiles over shift splits are summary keys.
SHIFT_SUMMARY_KEYS = ("accuracy", "nll", "brier", "ece")


def resampling_unit(role: str, name: str, ids_digest: str | None) -> str:
    """The unit a split is resampled as: in-domain and shift splits by their sample ids (the same ids: the same
    counts), else by name; an OOD split always on its own (its samples are not the in-domain ones)."""
    if role == "ood":
        return f"ood:{ids_digest or name}"
    return f"ids:{ids_digest}" if ids_digest else f"split:{name}"


def _unit_key(unit: str) -> int:
    return zlib.crc32(unit.encode("utf-8"))


class LabelledStatistics:
    """Per-sample statistics of a labelled in-domain or shift split, computed once.

    Parameters
    ----------
    arrays : the split's ``SplitArrays`` (ensemble mean, uncertainty scores, vote diversity).
    labels : (N,) integer labels.
    unit : the resampling unit (:func:`resampling_unit`).
    bins, eps, smoothing, tpr : the protocol's settings (as the report computes each key).
    full : every key of an in-domain section; otherwise (a shift split) only accuracy, NLL, Brier, ECE and the
        mean total uncertainty (what the summary's medians and quartiles need), and ``protocol``'s keys.
    scores : detection scores to resample (``total``, ``knowledge``, ``confidence``).
    cost : (C, C) decision-cost matrix or None; ``cost_reduction`` which reduction ``decision_cost`` is.
    protocol : a :class:`~ubench.metrics.protocol_bootstrap.CVInfluence` of the split, or None.
    """

    def __init__(self, arrays: Any, labels: NDArray, *, unit: str, bins: int, eps: float, smoothing: float,
                 tpr: float = 0.95, full: bool = True, scores: Sequence[str] = (), cost: NDArray | None = None,
                 cost_reduction: str = "mean", protocol: Any = None):
        probs = arrays.mean_probs
        n, c = probs.shape
        self.unit, self.n, self.tpr, self.full = unit, n, tpr, full
        pred = _predictions(probs)
        hit = (pred == labels).astype(np.float64)
        conf = probs[np.arange(n), pred].astype(np.float64)
        self.errors = 1.0 - hit
        cols = self.cols = LinearColumns(n)
        cols.add("accuracy", hit)
        cols.add("nll", _nll_per_sample(probs, labels, eps, smoothing))
        cols.add("brier", _brier_per_sample(probs, labels))
        cols.add("mean_total_uncertainty", arrays.total)
        # binned errors: per-bin sums of the per-sample gaps, as one-hot columns of the matrix product
        self.binned = ["ece"]
        cols.add_cells("ece", _equal_width_bin_index(conf, bins), bins, hit - conf)
        self.protocol = protocol
        if protocol is not None:
            for key, psi in protocol.psi.items():
                cols.add(key, psi)
            cols.add_block("_folds", protocol.fold_columns)
            cols.add_one_hot("_cells", *protocol.cell_entries())
        self.detection: set[str] = set()
        self.ranked: dict[str, _Ranked] = {}
        if not full:
            return
        if c >= 2:
            u = _normalized_entropy(probs)
            self.binned.append("uce")
            cols.add_cells("uce", _equal_width_bin_index(u, bins), bins, self.errors - u)
        edges = equal_mass_edges(conf, bins)
        cols.add_cells("_l2", np.searchsorted(edges, conf, side="left"), edges.shape[0], None, conf, hit)
        for key, field in (("mean_knowledge_uncertainty", "knowledge"), ("mean_data_uncertainty", "data"),
                           ("disagreement", "disagreement"), ("variation_ratio", "variation_ratio")):
            values = getattr(arrays, field, None)
            if values is not None:
                cols.add(key, values)
        if c > 5:  # the report's top-5 kernel: its ties and its blocks (no (N, C) temporary)
            cols.add("top5_accuracy", _top_k(probs, labels, 5)[1].any(axis=1).astype(np.float64))
        if cost is not None:
            cols.add("decision_cost_mean", cost[labels, _bayes_decisions(probs, cost, smoothing)].astype(np.float64))
            self.cost_reduction = cost_reduction
        # misclassification detection by each score (positive = error), read off its selective kernel
        self.detection = set(scores) if 0 < int(self.errors.sum()) < n else set()
        self.ranked = {name: _Ranked.of(getattr(arrays, SCORE_NAMES[name])) for name in scores}
        if "confidence" not in self.ranked:
            self.ranked["confidence"] = _Ranked.of(arrays.neg_confidence)
        self.scores = tuple(scores)
        self.tables = _harmonic_table(n)

    @property
    def sorted_kernels(self) -> bool:
        """Whether :meth:`jobs` has work (selective classification and detection by score: the full statistics)."""
        return self.full and bool(self.ranked)

    def jobs(self, weights: Mapping[str, NDArray]) -> list[Callable[[], dict]]:
        """The sorted kernels of a block, one job per score, to run in any order or thread (the linear columns'
        values come from :meth:`linear`)."""
        w = weights[self.unit]
        return [lambda name=name: self._selective(w, name) for name in self.ranked] if self.full else []

    def replicates(self, weights: Mapping[str, NDArray]) -> dict[str, NDArray]:
        out = self.linear(weights[self.unit])
        for job in self.jobs(weights):
            out.update(job())
        return out

    def linear(self, w: NDArray, sums: NDArray | None = None) -> dict[str, NDArray]:
        """The values that come from the linear columns, for the counts ``w`` of this split's unit; ``sums`` =
        ``w @ cols.matrix()`` when the caller has it."""
        out = self.cols.apply(w, sums)
        total = w.sum(axis=1)
        for key in self.binned:
            out[key] = np.abs(out[key]).sum(axis=1) / total
        if self.protocol is not None:
            out["calibrated_ece"] = self.protocol.calibrated_ece(w, out.pop("_folds"), out.pop("_cells"))
        if not self.full:
            return out
        l2 = out.pop("_l2")
        k = l2.shape[1] // 3
        sq = debiased_squared_error(l2[:, :k], l2[:, k:2 * k], l2[:, 2 * k:])
        out["l2_ce_debiased"] = np.sqrt(np.maximum(sq, 0.0))
        if "decision_cost_mean" in out:
            out["decision_cost_sum"] = out["decision_cost_mean"] * total
            out["decision_cost"] = out["decision_cost" + ("_sum" if self.cost_reduction == "sum" else "_mean")]
        return out

    def _selective(self, w: NDArray, name: str) -> dict[str, NDArray]:
        detect = name in self.detection
        sel = weighted_selective(self.errors, w, self.ranked[name], tables=self.tables,
                                 detection_tpr=self.tpr if detect else None)
        out = {}
        if detect:
            for key in ("auroc", "aupr", "fpr"):
                out[f"misclassification_{'fpr95' if key == 'fpr' else key}_{name}"] = sel[key]
        if name in self.scores:
            out[f"aurc_{name}"] = sel["aurc"]
        if name == "confidence":
            out.update(augrc=sel["augrc"], risk_at_80_cov=sel["risk_at_cov"], cov_at_5_risk=sel["cov_at_risk"])
        return out


class OODStatistics:
    """Per-sample scores of an OOD split and of the in-domain split it is detected against (positive = OOD)."""

    def __init__(self, in_arrays: Any, ood_arrays: Any, *, unit: str, against: str, tpr: float = 0.95,
                 scores: Sequence[str] = tuple(SCORE_NAMES)):
        self.unit, self.against, self.tpr = unit, against, tpr
        self.n = ood_arrays.n_samples
        self.order = {name: _Sorted.of(ood_arrays.score(name), in_arrays.score(name)) for name in scores}

    cols = None  # no linear columns
    sorted_kernels = True  # a detection kernel per score

    def jobs(self, weights: Mapping[str, NDArray]) -> list[Callable[[], dict]]:
        """One detection kernel per score (:meth:`LabelledStatistics.jobs`)."""
        wp, wn = weights[self.unit], weights[self.against]
        return [lambda name=name: self._detection(wp, wn, name) for name in self.order]

    def replicates(self, weights: Mapping[str, NDArray]) -> dict[str, NDArray]:
        return {k: v for job in self.jobs(weights) for k, v in job().items()}

    def _detection(self, wp: NDArray, wn: NDArray, name: str) -> dict[str, NDArray]:
        o = self.order[name]
        d = weighted_detection(o.pos, o.neg, wp, wn, tpr=self.tpr, order=o)
        return {f"ood_{'fpr95' if key == 'fpr' else key}_{name}": v for key, v in d.items()}


def resample(statistics: Mapping[str, Any], units: Mapping[str, int], *, n_replicates: int, seed: int,
             threads: int | None = None, block_n: int | None = None,
             counts: MutableMapping[str, list[NDArray]] | None = None) -> dict[str, dict[str, NDArray]]:
    """Replicate values of every split's statistics: ``{split: {key: (n_replicates,)}}``.

    ``units`` maps each resampling unit to its sample count; each unit's counts come from its own generator
    (:func:`resampling_unit`), drawn in blocks of replicates; every statistic sees the counts of its units.
    Per block, every statistic's sorted kernels (:meth:`LabelledStatistics.jobs`, one job per score, each on
    one half of the block's rows and then the other: their values are row by row) run on ``threads`` threads
    (default: up to 2, as many as there are CPUs; numpy releases the GIL in the kernels) beside the next block's
    draws, one job per unit (each unit has its own generator); on the same threads, each split's linear columns
    are summed in a matrix product of their own (scoring multiplies on one BLAS thread, ``scoring/blas.py``, so
    a product is one more job among the kernels). A statistic without ``sorted_kernels`` has its ``jobs`` (or
    its ``replicates``) run on whole blocks. Not one product of all of a unit's splits side by side: a
    product's last bits change with the columns beside a split's (measured: 339 of 51,800 values of a 259-column
    split alone and beside a 19-column one), so a split's numbers would depend on the batch it was resampled in.
    Threads change no number: each value comes from the same counts by the same kernel. The blocks hold
    :func:`~ubench.metrics.bootstrap.count_blocks` replicates of ``block_n`` samples (default: the largest unit):
    the matrix products' last bits depend on the block's rows, so a caller that resamples a report's splits a few
    at a time passes the report's largest unit to get the numbers of resampling them all at once.

    ``counts``, when given, keeps each unit's count blocks from one call to the next (a byte per cell, within
    :data:`KEEP_CELLS` cells in all): a unit found there is not drawn again. A report resampled a batch of splits
    at a time draws its in-domain unit, which its shift splits share, once instead of once per batch.
    """
    import os
    from concurrent.futures import Future, ThreadPoolExecutor

    rngs = {u: interval_rng(seed, _unit_key(u)) for u in units}
    parts: dict[str, dict[str, list]] = {name: {} for name in statistics}
    linear = _linear_columns(statistics)
    workers = threads if threads is not None else max(1, min(2, os.cpu_count() or 1))
    blocks = list(count_blocks(n_replicates, block_n or max(units.values(), default=1)))

    index = {start: i for i, (start, _) in enumerate(blocks)}
    if counts is not None:  # the units to keep (within KEEP_CELLS cells with those kept already), drawn once
        for u in [u for u, kept_u in counts.items() if len(kept_u) != len(blocks)]:
            del counts[u]  # left incomplete by a call that failed
        room = KEEP_CELLS - sum(b.size for kept_u in counts.values() for b in kept_u)
        for u in units:
            if u not in counts and n_replicates * units[u] <= room:
                counts[u], room = [], room - n_replicates * units[u]

    def draw(u: str, start: int, stop: int) -> NDArray:
        cached = None if counts is None else counts.get(u)
        if cached is not None and len(cached) == len(blocks):  # drawn by an earlier call
            return cached[index[start]].astype(count_dtype(units[u]))
        w = bootstrap_counts(units[u], stop - start, rngs[u])
        if cached is not None:
            cached.append(_as_bytes(w))
        return w

    def add(name: str, values: Mapping[str, NDArray]) -> None:
        for key, v in values.items():
            parts[name].setdefault(key, []).append(v)

    def products(u: str, w: NDArray) -> list[tuple[str, dict[str, NDArray]]]:
        wf = np.asarray(w, dtype=np.float64)  # once for all of the unit's splits
        return [(name, statistics[name].linear(w, wf @ matrix)) for name, matrix in linear[u]]

    with ThreadPoolExecutor(max_workers=workers) as pool:
        def draws(i: int) -> dict[str, Future]:  # each unit's block i on a pool thread of its own
            return {u: pool.submit(draw, u, *blocks[i]) for u in units}

        def halves(weights: Mapping[str, NDArray]) -> list[slice | None]:
            # sorted kernels run on each half of the block's rows (their values are row by row, the same), so
            # that the two threads share them beside the draws; None: the other statistics, on the whole block
            rows = next(iter(weights.values())).shape[0] if weights else 0
            return [None, slice(0, rows // 2), slice(rows // 2, rows)] if rows >= 2 else [None, slice(0, rows)]

        pending = draws(0) if blocks else {}
        for i in range(len(blocks)):
            weights = {u: f.result() for u, f in pending.items()}
            sums = [pool.submit(products, u, weights[u]) for u in linear]  # first: the longest jobs
            futures = [(name, pool.submit(job)) for rows in halves(weights) for name, stat in statistics.items()
                       if getattr(stat, "sorted_kernels", False) == (rows is not None)
                       for job in _jobs(stat, weights if rows is None else {u: w[rows] for u, w in weights.items()})]
            if i + 1 < len(blocks):
                pending = draws(i + 1)
            for name, future in futures:
                add(name, future.result())
            for future in sums:
                for name, values in future.result():
                    add(name, values)
    return {name: {k: np.concatenate(v) for k, v in d.items()} for name, d in parts.items()}


def _as_bytes(w: NDArray) -> NDArray:
    """Counts as uint8 when every count is below 256 (a byte per cell while kept), else as they are."""
    return w.astype(np.uint8) if w.size and int(w.max()) < 256 else w


def _jobs(stat: Any, weights: Mapping[str, NDArray]) -> list[Callable[[], dict]]:
    """A statistic's jobs for a block: its ``jobs`` (the sorted kernels; its linear columns come apart), or, for
    one that only has ``replicates`` (and no ``cols``), that as one job."""
    jobs = getattr(stat, "jobs", None)
    return jobs(weights) if jobs is not None else [lambda: stat.replicates(weights)]


def _linear_columns(statistics: Mapping[str, Any]) -> dict[str, list[tuple[str, NDArray]]]:
    """Per resampling unit: each of its statistics' linear columns as an (N, width) matrix, the one-hot blocks
    written out only now (kept as their nonzeros until here)."""
    out: dict[str, list[tuple[str, NDArray]]] = {}
    for name, stat in statistics.items():
        cols = getattr(stat, "cols", None)
        if cols is not None and cols.width:
            out.setdefault(stat.unit, []).append((name, cols.matrix()))
    return out


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _flat_section(sec: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in sec.items() if _is_number(v)}
    out.update({k: v for k, v in (sec.get("calibrated") or {}).items() if _is_number(v)})
    return out


def report_intervals(report: Mapping[str, Any], replicates: Mapping[str, Mapping[str, NDArray]], *, level: float,
                     n_replicates: int, seed: int) -> dict[str, Any]:
    """The report's ``intervals``: ``{level, method, replicates, seed, summary, splits}``.

    ``splits[name][key]`` is ``[low, high]`` for every number of the split's section (its ``calibrated`` keys
    included) that has replicates; ``summary[key]`` the same for the summary's keys (the primary split's, the mean
    over OOD splits of each ``ood_*`` key, the median and quartiles over shift splits). ``null`` where a
    replicate is undefined (a resample without an error for misclassification detection).
    """
    splits: dict[str, dict[str, Any]] = {}
    for role in ("in_domain", "ood", "shift"):
        for name, sec in report[role].items():
            reps = replicates.get(name)
            if not reps:
                continue
            values = _flat_section(sec)
            splits[name] = percentile_intervals({k: reps[k] for k in sorted(values) if k in reps}, level)
    summary_reps: dict[str, NDArray] = {}
    primary = report.get("primary_split")
    if primary in replicates:
        summary_reps.update(replicates[primary])
    ood = [replicates[n] for n in report["ood"] if n in replicates]
    if ood:
        for key in ood[0]:
            summary_reps[key] = np.mean([r[key] for r in ood], axis=0)
    shift = [replicates[n] for n in report["shift"] if n in replicates]
    if shift:
        for key in SHIFT_SUMMARY_KEYS:
            stack = np.stack([r[key] for r in shift])
            summary_reps[f"shift_{key}_median"] = np.median(stack, axis=0)
            q25, q75 = np.percentile(stack, [25, 75], axis=0)
            summary_reps[f"shift_{key}_q25"], summary_reps[f"shift_{key}_q75"] = q25, q75
    summary = percentile_intervals({k: summary_reps[k] for k, v in sorted(report["summary"].items())
                                    if _is_number(v) and k in summary_reps}, level)
    return {"level": float(level), "method": BOOTSTRAP_METHOD, "replicates": int(n_replicates), "seed": int(seed),
            "summary": summary, "splits": splits}


def encode_samples(columns: Mapping[str, NDArray]) -> dict[str, str]:
    """Columns as :data:`SAMPLE_ENCODING` strings."""
    return {k: base64.b64encode(np.ascontiguousarray(v, dtype="<f8").tobytes()).decode("ascii")
            for k, v in columns.items()}


def decode_samples(columns: Mapping[str, str], n: int, where: str = "samples") -> dict[str, NDArray]:
    """:func:`encode_samples` reversed; ``ValueError`` naming the column when one is not ``n`` finite float64."""
    out = {}
    for k, text in columns.items():
        try:
            raw = base64.b64decode(text, validate=True)
        except (ValueError, TypeError):
            raise ValueError(f"{where}: column {k!r} is not base64") from None
        if len(raw) != 8 * n:
            raise ValueError(f"{where}: column {k!r} holds {len(raw) // 8} values, not {n}")
        v = np.frombuffer(raw, dtype="<f8").astype(np.float64)
        if not np.all(np.isfinite(v)):
            raise ValueError(f"{where}: column {k!r} has a non-finite value at index "
                             f"{int(np.flatnonzero(~np.isfinite(v))[0])}")
        out[k] = v
    return out
