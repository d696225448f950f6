# SPDX-License-Identifier: MIT
"""What a ubench report holds, decided in one place: splits in, a JSON-able dict out. Pure (no files, no terminal).

``scoring/score.py`` reads an archive and hands every split, as :class:`~ubench.metrics.report_sections.SplitArrays`
with its labels, to a :class:`ReportBuilder`; the builder decides which sections each split gets (by role, number
of members, number of samples and the protocol), which splits are the headline, which numbers are null and why,
and which are comparable across models. ``metrics/report_sections.py`` computes the sections; ``cli.py``,
``scoring/tables.py`` and ``scoring/html.py`` only format the dict (``scoring/dee.py`` adds the DEE of two
finished reports).

Keys are the snake_case names listed in ``scoring/REPORT_KEYS.md``. A metric that is undefined on the data
(misclassification AUROC when every prediction is right, knowledge-uncertainty scores of a single model, the CLL of
a one-sample split) is ``None`` with a note, never NaN and never a placeholder number.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from . import report_sections as _sections
from .decision import COST_PRESETS, cost_preset_for_dataset
from .report_sections import *  # noqa: F403 -- the sections stay reachable as ubench.metrics.report.<name>
from .report_sections import RENORMALISE_ABOVE, RowSums, SplitArrays, scores_for
from .method_scores import MethodScore, method_scores_in_domain, method_scores_ood, method_scores_summary
from .report_intervals import IntervalCollector
from .shift_paper import _confidence_curves
from .uncertainty import _confidence
from .ensemble import _smooth
from .temperature import apply_temperature as _apply_temperature
from .temperature import fit_temperature as _fit_temperature
from .shift import shift_summary as _shift_quartiles

__all__ = ["ReportBuilder", "primary_split", "COMPARABLE_KEYS", "NOT_COMPARABLE_KEYS", "CALIBRATED_HEADLINE", "summarize_ood",
           "shift_summary_section", "headline", "comparability", *_sections.__all__]

#: Keys of the calibrated section copied into the headline summary.
CALIBRATED_HEADLINE = ("cll", "temperature", "calibrated_accuracy", "calibrated_nll", "calibrated_brier",
                       "calibrated_ece")

#: Headline keys that may be compared across models (Ashukha et al. 2020, Sec. 2-3): calibrated metrics and
#: DEE, plus accuracy and the OOD/shift scores, whose task does not depend on the model.
COMPARABLE_KEYS = (
    "accuracy", "cll", "calibrated_brier", "dee", "ood_auroc_total", "ood_auroc_knowledge", "ood_auroc_confidence",
    "ood_aupr_total", "ood_fpr95_total", "shift_accuracy_median",
)
#: Headline keys that are not comparable across models: uncalibrated NLL/ECE/TACE depend on the temperature a
#: model happens to have, and misclassification AUROC is a different detection task for every model.
NOT_COMPARABLE_KEYS = (
    "nll", "brier", "ece", "tace", "uce", "smooth_ece", "misclassification_auroc_total", "misclassification_auroc_confidence",
    "misclassification_auroc_knowledge",
)


def summarize_ood(sections: Mapping[str, Mapping[str, Any]]) -> dict[str, float | None]:
    """Mean over OOD splits of every ``ood_*`` key (the headline numbers); ``None`` where a split has ``None``."""
    if not sections:
        return {}
    keys = [k for k in next(iter(sections.values())) if k.startswith("ood_")]
    out: dict[str, float | None] = {}
    for k in keys:
        vals = [s[k] for s in sections.values()]
        out[k] = None if any(v is None for v in vals) else float(np.mean(vals))
    return out


def shift_summary_section(sections: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The report's ``shift_summary``: shift splits by kind, and quartiles over kinds per intensity among kinds
    measured on the same scale.

    ``by_kind[kind]`` lists ``{intensity, split, accuracy, nll, brier, ece, tace, uce}`` sorted by intensity.
    Intensities are only comparable between kinds that share an intensity grid (noise and blur at levels 1-5 are;
    rotation in degrees and translation in pixels are not), so ``groups`` holds one entry per distinct grid:
    ``kinds``, ``intensities`` and ``by_intensity[str(intensity)]`` = ``{intensity, n_splits, <metric>: {min, q1,
    median, q3, max}}`` over its kinds (quartiles from :func:`ubench.metrics.shift.shift_summary`; Ovadia et al.
    2019's box plots).
    """
    metrics = ("accuracy", "nll", "brier", "ece", "tace", "uce")
    by_kind: dict[str, list] = {}
    for name, sec in sections.items():
        row = {"split": name, "intensity": sec["shift_intensity"], **{m: sec[m] for m in metrics}}
        by_kind.setdefault(sec["shift_kind"], []).append(row)
    by_kind = {k: sorted(v, key=lambda r: (r["intensity"], r["split"])) for k, v in sorted(by_kind.items())}
    grids: dict[tuple[float, ...], list[str]] = {}
    for kind, rows in by_kind.items():
        grids.setdefault(tuple(r["intensity"] for r in rows), []).append(kind)
    groups = []
    for grid, kinds in sorted(grids.items(), key=lambda g: (len(g[0]), g[0])):
        summary = _shift_quartiles([{"kind": k, "intensity": r["intensity"], **{m: r[m] for m in metrics}}
                                    for k in kinds for r in by_kind[k]])
        by_int = {}
        for i, stats in summary.quartiles.items():
            by_int[f"{i:g}"] = {"intensity": i, "n_splits": stats[metrics[0]]["n_kinds"],
                                **{m: {"min": s["min"], "q1": s["q25"], "median": s["median"], "q3": s["q75"],
                                       "max": s["max"]} for m, s in stats.items()}}
        groups.append({"kinds": kinds, "intensities": list(grid), "by_intensity": by_int})
    return {"by_kind": by_kind, "groups": groups}


def headline(report: Mapping[str, Any], primary: str | None, *, calibrated: bool = False) -> dict[str, Any]:
    """The flat headline numbers: the primary in-domain split's metrics (and calibrated ones: ``None`` when the
    protocol calibrates but the split could not be, e.g. one sample), the mean over OOD splits of every ``ood_*``
    key, and the median over shift splits of accuracy, NLL, Brier and ECE."""
    out: dict[str, Any] = {}
    if primary is not None and primary in report["in_domain"]:
        sec = report["in_domain"][primary]
        out.update({k: v for k, v in sec.items()
                    if k not in ("calibrated", "cost_preset") and (isinstance(v, (int, float)) or v is None)})
        cal = sec.get("calibrated")
        if cal:
            out.update({k: cal[k] for k in CALIBRATED_HEADLINE})
        elif calibrated:
            out.update({k: None for k in CALIBRATED_HEADLINE})
    out.update(summarize_ood(report["ood"]))
    if report["shift"]:
        for key in ("accuracy", "nll", "brier", "ece"):
            vals = [s[key] for s in report["shift"].values()]
            out[f"shift_{key}_median"] = float(np.median(vals))
            # pooled over every shifted split (Ovadia et al.'s box plots pool all kinds; numpy's linear quantiles)
            out[f"shift_{key}_q25"], out[f"shift_{key}_q75"] = (float(q) for q in np.percentile(vals, [25, 75]))
            scaled = [s["temperature_scaled"][key] for s in report["shift"].values() if "temperature_scaled" in s]
            if scaled:
                out[f"shift_ts_{key}_median"] = float(np.median(scaled))
    return out


def comparability(summary: Mapping[str, Any]) -> dict[str, list[str]]:
    """Which summary keys may be compared across models. A key whose value is ``None`` in this report (undefined
    on its data: the knowledge scores of one member, the CLL of a one-sample split) is in neither list but in
    ``undefined``, so no board or table marks an undefined number comparable."""
    undefined = sorted(k for k, v in summary.items() if v is None)
    return {"comparable": [k for k in COMPARABLE_KEYS if k not in undefined],
            "not_comparable": [k for k in NOT_COMPARABLE_KEYS if k not in undefined],
            "undefined": undefined}


def _held(arrays: SplitArrays, notes: list[str], name: str, what: str) -> bool:
    """Whether the split's mean is held in memory (an ndarray); if not (it is re-read from the archive in passes,
    ``scoring/memory_plan.py``), a note says that ``what`` needs it and was left out."""
    if isinstance(arrays.mean_probs, np.ndarray):
        return True
    notes.append(f"split {name!r} is read from its archive in passes (its mean does not fit memory): {what} "
                 "needs its mean in memory and was not computed")
    return False


def primary_split(in_domain: Sequence[str], labelled: Collection[str]) -> str | None:
    """The in-domain split behind the headline and the OOD scores: the first labelled one of ``in_domain`` (in the
    order given), or ``None``."""
    return next((s for s in in_domain if s in labelled), None)


class ReportBuilder:
    """Assemble one report from the splits of one archive, in reading order (in-domain splits first).

    Parameters
    ----------
    protocol : the settings; any object with the attributes of ``ubench.scoring.protocols.Protocol`` (``bins``,
        ``eps``, ``smoothing``, ``tpr``, ``placement``, ``temperature_scaling``, ``repeats``, ``seed``, ``orders``,
        ``member_curves``, ``cost_preset``, ``cost_matrix``, ``cost_reduction``).
    n_members, n_classes : the archive's M and C.
    dataset : the archive's ``dataset`` attribute (picks the decision-cost matrix when ``cost_preset == "auto"``).
    primary : the in-domain split behind the headline and against which OOD splits are scored (``None``: none).

    Each ``add_*`` call computes that split's section at once, so only the primary split's arrays and the OOD
    splits' scores are held until :meth:`finish`.
    """

    def __init__(self, protocol: Any, *, n_members: int, n_classes: int, dataset: str, primary: str | None):
        self.p = protocol
        self.n_members, self.n_classes = int(n_members), int(n_classes)
        self.primary = primary
        self.scores = scores_for(self.n_members)
        self.notes: list[str] = []
        self.sections: dict[str, dict[str, Any]] = {"in_domain": {}, "ood": {}, "shift": {}}
        self._primary_arrays: SplitArrays | None = None
        self._ood: dict[str, SplitArrays] = {}
        self._ood_own: dict[str, dict[str, Any]] = {}
        self._ood_resampled: set[str] = set()  # OOD splits whose interval statistics went to self.intervals
        self._rows: dict[str, RowSums] = {}
        # The shift paper's "Temp Scaling": (name, TemperatureFit, n_samples) of the splits the shift temperature
        # may be fitted on (a validation-named in-domain split, else the primary one), and the one chosen.
        self._ts_sources: dict[str, tuple[str, Any, int]] = {}
        self._shift_ts: dict[str, Any] | None = None
        self._method_scores: dict[str, Mapping[str, MethodScore]] = {}  # issue #31: split -> its method scores
        self.cost_preset, self.cost_matrix = self._decision_cost_matrix(dataset)
        # per-sample statistics for the report's confidence intervals (metrics/report_intervals.py); score.py
        # sets intervals.units to each split's sample-ids digest
        self.intervals = IntervalCollector(protocol, scores=self.scores, cost_preset=self.cost_preset,
                                           cost_matrix=self.cost_matrix, primary=primary)
        if self.n_members == 1:
            self.notes.append("one member: its knowledge uncertainty (mutual information) is 0 for every sample, "
                              "so the knowledge-based detection scores (*_knowledge, aurc_knowledge) are null")

    def _decision_cost_matrix(self, dataset: str) -> tuple[str | None, Any]:
        """The cost preset and matrix the in-domain splits are scored under; ``"auto"`` picks URSABench's matrix
        from the archive's dataset (:func:`ubench.metrics.decision.cost_preset_for_dataset`)."""
        p = self.p
        if p.cost_preset != "auto":
            return p.cost_preset, p.cost_matrix
        name = cost_preset_for_dataset(dataset)
        if name is None:
            self.notes.append(f"no decision cost: the archive's dataset {dataset!r} is none of those URSABench "
                              f"defines a cost matrix for ({', '.join(sorted(COST_PRESETS))}); name one with "
                              "--cost-preset or give --cost-matrix")
            return None, None
        if COST_PRESETS[name][0] != self.n_classes:
            self.notes.append(f"no decision cost: the archive's dataset {dataset!r} names URSABench's {name} cost "
                              f"matrix, which has {COST_PRESETS[name][0]} classes, but the archive has "
                              f"{self.n_classes}")
            return None, None
        return name, None

    def keep_members(self, name: str, n_samples: int) -> bool:
        """Whether split ``name`` needs its member stack (per-member temperature scaling or member curves)."""
        if name != self.primary or n_samples < 2:
            return False
        return self.p.placement == "per_member" or (self.p.member_curves and self.n_members > 1)

    def note(self, text: str) -> None:
        self.notes.append(text)

    def add_method_scores(self, name: str, scores: Mapping[str, MethodScore]) -> None:
        """A split's method and logit scores (``ubench.metrics.method_scores``); give them before the split's
        ``add_*`` call."""
        if scores:
            self._method_scores[name] = scores

    def add_in_domain(self, name: str, arrays: SplitArrays, labels: NDArray | None, *, progress=None) -> None:
        """An in-domain split: its metrics, calibrated protocol and member curves (only if labelled)."""
        p = self.p
        self._rows[name] = arrays.row_sums
        if labels is None:
            self.notes.append(f"in-domain split {name!r} has no labels; only its uncertainties are used")
            return
        sec = in_domain_section(arrays, labels, bins=p.bins, eps=p.eps, smoothing=p.smoothing, tpr=p.tpr,
                                cost_preset=self.cost_preset, cost_matrix=self.cost_matrix,
                                cost_reduction=p.cost_reduction, scores=self.scores,
                                conformal_method=p.conformal_method, conformal_alpha=p.conformal_alpha,
                                repeats=p.repeats, seed=p.seed)
        n = arrays.n_samples
        if p.temperature_scaling:
            if n >= 2:
                sec["calibrated"] = calibrated_section(arrays, labels, placement=p.placement, repeats=p.repeats,
                                                       seed=p.seed, bins=p.bins, eps=p.eps, smoothing=p.smoothing)
                if sec["calibrated"] is not None and p.dee_point and name == self.primary:
                    sec["calibrated"]["dee_cll"] = dee_cll(arrays, labels, placement=p.placement, orders=p.orders,
                                                           repeats=p.repeats, seed=p.seed, eps=p.eps,
                                                           smoothing=p.smoothing)
                if sec["calibrated"] is not None:
                    sec["calibrated"]["reliability"] = calibrated_reliability(
                        arrays, labels, temperature=sec["calibrated"]["temperature"], placement=p.placement,
                        bins=p.bins, eps=p.eps, smoothing=p.smoothing)
            else:
                sec["calibrated"] = None
                self.notes.append(f"split {name!r} has {n} sample: test-time cross-validation needs at least 2, "
                                  "so cll and the calibrated metrics are null")
        if p.calibrators and name == self.primary and _held(arrays, self.notes, name, "the calibrators"):
            sec["calibrators"] = calibrators_section(arrays, labels, names=p.calibrators, repeats=p.repeats,
                                                     seed=p.seed, bins=p.bins, eps=p.eps, smoothing=p.smoothing,
                                                     odir=p.odir)
            if sec["calibrators"] is None:
                self.notes.append(f"split {name!r} has {n} sample: the calibrators need at least 2 "
                                  "(test-time cross-validation), so calibrators is null")
            for cal, scores in (sec["calibrators"] or {}).items():
                if scores["unconverged_folds"]:
                    self.notes.append(
                        f"calibrator {cal!r}: the fit stopped at its iteration cap in {scores['unconverged_folds']} "
                        f"of {2 * p.repeats} folds (near-separable halves leave unpenalised directions without a "
                        "finite optimum), so its held-out numbers depend on where the solver stopped")
        if p.member_curves and self.n_members > 1 and name == self.primary:
            if n < 2:
                self.notes.append(f"split {name!r} has {n} sample: no member curves (each point is a "
                                  "cross-validated CLL, which needs at least 2)")
            elif arrays.member_probs is not None:
                task = f"{name}: member curves (prefixes)"
                sec["member_curves"] = member_curves_section(
                    arrays.member_probs, labels, placement=p.placement, orders=p.orders, repeats=p.repeats,
                    seed=p.seed, eps=p.eps, smoothing=p.smoothing,
                    progress=None if progress is None else (lambda done, total: progress(task, done, total)))
        if name in self._method_scores:
            sec["method_scores"], ms_notes = method_scores_in_domain(arrays.mean_probs, labels,
                                                                     self._method_scores[name], tpr=p.tpr)
            sec["notes"] = sec["notes"] + ms_notes
        self.sections["in_domain"][name] = sec
        self.intervals.add_labelled("in_domain", name, arrays, labels, sec)
        if name == self.primary:
            self._primary_arrays = arrays.scores_only()  # OOD splits need its scores, not its (N, C) mean
        if p.shift_temperature and n >= 2:
            role = "primary" if name == self.primary else (
                "validation" if name.lower().startswith("val") else None)
            if role is not None and role not in self._ts_sources and _held(arrays, self.notes, name,
                                                                           "the shift temperature"):
                # fitted now, so that no split's (N, C) mean is kept for it
                probs = _smooth(arrays.mean_probs, p.smoothing) if p.smoothing else arrays.mean_probs
                self._ts_sources[role] = (name, _fit_temperature(probs, labels, eps=p.eps), int(labels.shape[0]))

    def add_ood(self, name: str, arrays: SplitArrays) -> None:
        """An OOD split: scored against the primary split in :meth:`finish`."""
        self._rows[name] = arrays.row_sums
        # what needs the split's own (N, C) mean is computed now; only its (N,) scores wait for finish()
        self._ood[name] = arrays.scores_only()
        self._ood_own[name] = {**diversity_section(arrays),
                               "confidence_curves": _confidence_curves(_confidence(arrays.mean_probs), None)}
        self._ood_intervals(name)

    def _ood_intervals(self, name: str) -> None:
        """Hand OOD split ``name``'s interval statistics to the collector once the primary split's scores are here
        (its section waits for :meth:`finish`): resampled beside the splits scored after it, not at the end."""
        if name not in self._ood_resampled and self._primary_arrays is not None:
            self._ood_resampled.add(name)
            self.intervals.add_ood(name, self._primary_arrays, self._ood[name], self.primary)

    def add_shift(self, name: str, arrays: SplitArrays, labels: NDArray | None, *, kind: str,
                  intensity: float) -> None:
        """A shift split: core metrics, if labelled."""
        p = self.p
        self._rows[name] = arrays.row_sums
        if labels is None:
            self.notes.append(f"shift split {name!r} has no labels; it was skipped")
            return
        sec = shift_split_section(arrays, labels, bins=p.bins, eps=p.eps, smoothing=p.smoothing,
                                  conformal_method=p.conformal_method, conformal_alpha=p.conformal_alpha,
                                  repeats=p.repeats, seed=p.seed)
        if p.shift_temperature and _held(arrays, self.notes, name, "temperature_scaled"):
            ts = self._shift_temperature()
            if ts is not None:
                scaled = _apply_temperature(arrays.mean_probs, ts["temperature"], eps=p.eps)
                core = core_metrics(scaled, labels, bins=p.bins, eps=p.eps, smoothing=p.smoothing)
                sec["temperature_scaled"] = {k: core[k] for k in ("accuracy", "nll", "brier", "ece")}
        sec.update(shift_kind=kind, shift_intensity=float(intensity))
        self.sections["shift"][name] = sec
        self.intervals.add_labelled("shift", name, arrays, labels, sec)

    def shift_temperature(self, fitted: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """The shift temperature (fitted once, from the in-domain splits added so far: call it after all of
        them), or, with ``fitted``, adopt one fitted by another builder (a worker's, ``scoring/score_parallel.py``)
        without its note."""
        if fitted is not None:
            self._shift_ts = fitted
        return self._shift_temperature()

    def _shift_temperature(self) -> dict[str, Any] | None:
        """Fit (once) the temperature applied to every shift split: on a validation-named in-domain split when the
        archive has one, else on the primary in-domain test split (said in a note: then the in-domain numbers
        would be optimistic, but the shift splits are still unseen)."""
        if self._shift_ts is None:
            source = self._ts_sources.get("validation") or self._ts_sources.get("primary")
            if source is None:
                self._shift_ts = {}
                self.notes.append("shift temperature scaling needs a labelled in-domain split of 2 or more samples; "
                                  "none was found, so no shift split has temperature_scaled")
                return None
            name, fit, n_samples = source
            kind = "validation" if "validation" in self._ts_sources else "test"
            self._shift_ts = {"temperature": fit.temperature, "fitted_on": name, "fitted_on_kind": kind,
                              "n_samples": n_samples, "hit_bound": fit.hit_bound}
            if kind == "test":
                self.notes.append(f"shift temperature scaling: the temperature was fitted on the in-domain test "
                                  f"split {name!r} (the archive has no validation split), as the shift paper's "
                                  "Temp Scaling fits it on in-domain data")
        return self._shift_ts or None

    def split_result(self, name: str) -> dict[str, Any]:
        """What adding split ``name`` left in this builder, for a builder that was given only that split (its
        constructor's notes cleared): the part of the report a worker computes (``scoring/score_parallel.py``),
        merged into the report's builder by :meth:`absorb`. Small: sections, (N,) scores and the split's interval
        statistics (``IntervalCollector.split_result``: per-sample columns), no (N, C) array."""
        return {"notes": list(self.notes), "rows": self._rows.get(name),
                "in_domain": self.sections["in_domain"].get(name), "shift": self.sections["shift"].get(name),
                "primary": self._primary_arrays if name == self.primary else None, "ood": self._ood.get(name),
                "ood_own": self._ood_own.get(name),
                "ts_sources": {k: v for k, v in self._ts_sources.items() if v[0] == name},
                "method_scores": self._method_scores.get(name),
                "intervals": self.intervals.split_result(name)}

    def absorb(self, name: str, result: dict[str, Any]) -> None:
        """Merge a :meth:`split_result` of split ``name``; merged in scoring order, the report is the one of
        adding every split here (notes, sections and the row-sum record in the same order). Its ``intervals``
        part may be taken out and given to ``self.intervals.absorb`` before, in any order (as results arrive)."""
        self.notes.extend(result["notes"])
        if result["rows"] is not None:
            self._rows[name] = result["rows"]
        for role in ("in_domain", "shift"):
            if result[role] is not None:
                self.sections[role][name] = result[role]
        if result["primary"] is not None:
            self._primary_arrays = result["primary"]
        if result["ood"] is not None:
            self._ood[name], self._ood_own[name] = result["ood"], result["ood_own"]
            self._ood_intervals(name)
        for role, source in result["ts_sources"].items():
            self._ts_sources.setdefault(role, source)
        if result["method_scores"] is not None:
            self._method_scores[name] = result["method_scores"]
        self.intervals.absorb(name, result.get("intervals"))

    def _row_sums(self) -> dict[str, Any]:
        worst_split, worst = None, RowSums()
        for name, rs in self._rows.items():
            if worst_split is None or rs.max_deviation > worst.max_deviation:
                worst_split, worst = name, rs
        total = sum(rs.n_renormalised for rs in self._rows.values())
        if total:
            self.notes.append(f"{total} probability row(s) did not sum to 1 (largest deviation "
                              f"{worst.max_deviation:.3g}: split {worst_split!r}, member {worst.member}, sample "
                              f"{worst.sample}); they were divided by their sums before scoring, so no row adds "
                              "probability mass")
        return {"max_deviation": worst.max_deviation, "split": worst_split, "member": worst.member,
                "sample": worst.sample, "n_renormalised": total, "threshold": RENORMALISE_ABOVE}

    def finish(self) -> dict[str, Any]:
        """The report body: ``primary_split``, ``in_domain``, ``ood``, ``shift``, ``shift_summary``, ``summary``,
        ``comparability``, ``method_scores``, ``row_sums`` and ``notes``."""
        p = self.p
        report: dict[str, Any] = dict(self.sections)
        if self._ood and self._primary_arrays is None:
            self.notes.append("OOD splits need a labelled in-domain split to score against; none was found")
        elif self._ood:
            for name, arrays in self._ood.items():
                sec = ood_section(self._primary_arrays, arrays, tpr=p.tpr, scores=self.scores)
                sec.update(self._ood_own[name])
                sec.update(against=self.primary, n_samples=arrays.n_samples,
                           histograms=ood_histograms(self._primary_arrays, arrays, scores=self.scores),
                           roc_curves=ood_roc_curves(self._primary_arrays, arrays, scores=self.scores))
                if name in self._method_scores and self.primary in self._method_scores:
                    sec["method_scores"] = method_scores_ood(self._method_scores[self.primary],
                                                             self._method_scores[name], tpr=p.tpr)
                report["ood"][name] = sec
                self._ood_intervals(name)
        report["shift_summary"] = shift_summary_section(report["shift"]) if report["shift"] else None
        if report["shift_summary"] is not None and self._shift_ts:
            report["shift_summary"]["temperature"] = self._shift_ts
        primary = self.primary if self.primary in report["in_domain"] else None
        report["summary"] = headline(report, primary, calibrated=p.temperature_scaling)
        report["comparability"] = comparability(report["summary"])
        report["primary_split"] = primary
        report["method_scores"] = method_scores_summary(
            (report["in_domain"].get(primary) or {}).get("method_scores"),
            {n: sec["method_scores"] for n, sec in report["ood"].items() if "method_scores" in sec}) or None
        report["row_sums"] = self._row_sums()
        self.intervals.finish(report)
        report["notes"] = self.notes
        return report
