# SPDX-License-Identifier: MIT
r"""Confidence intervals over the test samples for the numbers of a report: per-sample statistics in, the report's
``intervals`` object out. Pure (numpy/scipy only).

Every split's per-sample statistics are computed once (:class:`LabelledStatistics` for in-domain and shift
splits, :class:`OODStatistics` for OOD splits); :func:`resample` then draws B bootstrap replicates as count
matrices (:mod:`ubench.metrics.bootstrap`) in blocks and evaluates every statistic of every split on each block.
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
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .bootstrap import BOOTSTRAP_METHOD, LinearColumns, bootstrap_counts, count_blocks, interval_rng, percentile_interval
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
            cols.add_block("_cells", protocol.cell_columns())
        self.detection, self.ranked = {}, {}
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
        err = self.errors.astype(bool)
        if 0 < int(err.sum()) < n:
            for name in scores:
                sc = getattr(arrays, SCORE_NAMES[name])
                self.detection[name] = (np.flatnonzero(err), np.flatnonzero(~err), _Sorted.of(sc[err], sc[~err]))
        self.ranked = {name: _Ranked.of(getattr(arrays, SCORE_NAMES[name])) for name in scores}
        if "confidence" not in self.ranked:
            self.ranked["confidence"] = _Ranked.of(arrays.neg_confidence)
        self.scores = tuple(scores)
        self.tables = _harmonic_table(n)

    def replicates(self, weights: Mapping[str, NDArray]) -> dict[str, NDArray]:
        w = weights[self.unit]
        out = self.cols.apply(w)
        total = w.sum(axis=1)
        for key in self.binned:
            out[key] = np.abs(out[key]).sum(axis=1) / total
        if self.protocol is not None:
            out["calibrated_ece"] = self.protocol.calibrated_ece(w, out.pop("_folds"), out.pop("_cells"))
        if not self.full:
            return out
        sums = out.pop("_l2")
        k = sums.shape[1] // 3
        sq = debiased_squared_error(sums[:, :k], sums[:, k:2 * k], sums[:, 2 * k:])
        out["l2_ce_debiased"] = np.sqrt(np.maximum(sq, 0.0))
        if "decision_cost_mean" in out:
            out["decision_cost_sum"] = out["decision_cost_mean"] * total
            out["decision_cost"] = out["decision_cost" + ("_sum" if self.cost_reduction == "sum" else "_mean")]
        w32 = weights.get(f"{self.unit}|f32", w)
        for name, ranked in self.ranked.items():
            detect = name in self.detection and not ranked.tied  # then detection shares the selective sort
            sel = weighted_selective(self.errors, w32, ranked, tables=self.tables,
                                     detection_tpr=self.tpr if detect else None)
            if name in self.detection:
                pos, neg, order = self.detection[name]
                d = sel if detect else weighted_detection(order.pos, order.neg, w32[:, pos], w32[:, neg],
                                                          tpr=self.tpr, order=order)
                for key in ("auroc", "aupr", "fpr"):
                    out[f"misclassification_{'fpr95' if key == 'fpr' else key}_{name}"] = d[key]
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

    def replicates(self, weights: Mapping[str, NDArray]) -> dict[str, NDArray]:
        wp, wn = weights.get(f"{self.unit}|f32", weights[self.unit]), weights.get(f"{self.against}|f32",
                                                                                   weights[self.against])
        out = {}
        for name, o in self.order.items():
            d = weighted_detection(o.pos, o.neg, wp, wn, tpr=self.tpr, order=o)
            for key, v in d.items():
                out[f"ood_{'fpr95' if key == 'fpr' else key}_{name}"] = v
        return out


def resample(statistics: Mapping[str, Any], units: Mapping[str, int], *, n_replicates: int, seed: int,
             threads: int | None = None, block_n: int | None = None) -> dict[str, dict[str, NDArray]]:
    """Replicate values of every split's statistics: ``{split: {key: (n_replicates,)}}``.

    ``units`` maps each resampling unit to its sample count; each unit's counts come from its own generator
    (:func:`resampling_unit`), drawn in blocks of replicates; every statistic sees the counts of its units. The
    splits of a block are evaluated on ``threads`` threads (default: up to 2, as many as there are CPUs; numpy
    releases the GIL in the kernels), which changes no number: each split's values come from the same counts.
    The blocks hold :func:`~ubench.metrics.bootstrap.count_blocks` replicates of ``block_n`` samples (default: the
    largest unit): the matrix products' last bits depend on the block's rows, so a caller that resamples a
    report's splits a few at a time passes the report's largest unit to get the numbers of resampling them all
    at once.
    """
    import os
    from concurrent.futures import ThreadPoolExecutor

    rngs = {u: interval_rng(seed, _unit_key(u)) for u in units}
    parts: dict[str, dict[str, list]] = {name: {} for name in statistics}
    workers = threads if threads is not None else max(1, min(2, os.cpu_count() or 1, len(statistics)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for start, stop in count_blocks(n_replicates, block_n or max(units.values(), default=1)):
            weights = {u: bootstrap_counts(n, stop - start, rngs[u]) for u, n in units.items()}
            # the sorted kernels stream float32 counts (exact below 2**24): converted once per unit and block
            weights.update({f"{u}|f32": w.astype(np.float32) for u, w in weights.items() if w.shape[1] < 1 << 20})
            done = pool.map(lambda item: (item[0], item[1].replicates(weights)), list(statistics.items()))
            for name, values in done:
                for key, v in values.items():
                    parts[name].setdefault(key, []).append(v)
    return {name: {k: np.concatenate(v) for k, v in d.items()} for name, d in parts.items()}


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
            splits[name] = {k: percentile_interval(reps[k], level) for k in sorted(values) if k in reps}
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
    summary = {k: percentile_interval(summary_reps[k], level)
               for k, v in sorted(report["summary"].items()) if _is_number(v) and k in summary_reps}
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
