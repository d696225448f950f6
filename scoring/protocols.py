# SPDX-License-Identifier: MIT
"""Named scoring protocols: the settings a report is computed under, one frozen dataclass per run.

A protocol fixes every choice that changes a number (temperature-scaling placement, test-time cross-validation
folds and repeats, seed, calibration bins, smoothing, member-curve orders, decision costs), and the report records
``Protocol.to_dict()`` verbatim. Three presets reproduce the conventions of the papers ubench is built from:

``pitfalls`` (the default; Ashukha et al., 2020)
    Temperature scaling after averaging (``placement="post"``), fitted by test-time cross-validation: the
    in-domain split is halved at random, the temperature fitted on one half is applied to the other, both ways,
    5 repeats (10 fits); seed 0; 15 equal-width bins for ECE/UCE and 15 equal-count bins for TACE; no smoothing.
    The calibrated log-likelihood (CLL) is the comparable headline number.
``ursabench`` (Vadera et al., 2020)
    What URSABench's code does (``URSABench/tasks/prediction.py``, ``ood_detection.py``,
    ``decision_making.py``): no temperature scaling; central smoothing ``(1 - 1e-4) p + 1e-4 / C`` of every
    member before every log and every decision, i.e. before NLL, the uncertainty scores of misclassification and
    OOD detection (entropy, mutual information, confidence) and the Bayes decisions; accuracy, Brier and ECE on the
    *unsmoothed* ensemble mean, and so are TACE, UCE and the reliability diagrams (URSABench computes neither; as
    calibration errors they follow ECE). The decision cost is always reported (``cost_preset="auto"``), under the
    cost matrix URSABench's ``decision_making.py`` uses for the archive's ``dataset`` (mnist, cifar10, cifar100;
    imagenet from the paper's Appendix A; any spelling such as ``CIFAR-10``, see
    ``metrics.decision.cost_preset_for_dataset``), as a sum over samples; a note says when no matrix matches.
    15 bins. This paragraph is the one description of the preset: ``scoring/REPORT_KEYS.md`` and the README
    point here.
``shift`` (Ovadia et al., 2019)
    No temperature scaling; Brier, NLL, ECE with 15 bins; no smoothing; per-intensity tables with quartiles.

Individual settings override a preset: ``Protocol.preset("pitfalls").replace(bins=20)``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..metrics.calibrators import CALIBRATORS

#: How ``dirichlet`` sets its ODIR strengths (``Protocol.odir``).
ODIR_MODES = ("fixed", "cv")
from ..metrics.conformal import CONFORMAL_METHODS

__all__ = ["Protocol", "PRESETS", "PLACEMENTS", "COST_PRESETS", "COST_REDUCTIONS"]

#: Temperature-scaling placements; ``None`` (stored as the string ``"none"``) means no temperature scaling.
PLACEMENTS = ("post", "per_member", "none")
#: Decision-cost presets (URSABench's cost matrices per dataset); ``"auto"`` picks one from the archive's
#: ``dataset`` attribute when the report is built (``metrics.decision.cost_preset_for_dataset``).
COST_PRESETS = ("mnist", "cifar10", "cifar100", "imagenet", "auto")
#: How per-sample decision costs are reduced.
COST_REDUCTIONS = ("sum", "mean")


@dataclass(frozen=True)
class Protocol:
    """Every setting a report depends on. Build with :meth:`preset`, adjust with :meth:`replace`.

    Attributes
    ----------
    name : preset the protocol started from (``"custom"`` is never produced; overrides are listed in
        ``overrides``).
    placement : ``"post"``, ``"per_member"`` or ``"none"`` (no temperature scaling).
    folds : parts the in-domain split is cut into for test-time cross-validation (2 = halves).
    repeats : random re-splits of the test-time cross-validation.
    seed : seed of every random choice (fold splits, member orders).
    bins : bins of ECE, TACE, UCE and the reliability diagrams.
    smoothing : central smoothing weight applied to every member before NLL, detection scores and decisions (never
        before accuracy, Brier, ECE, TACE, UCE; see the ``ursabench`` preset above).
    orders : random member orders averaged in the metric-against-members and DEE curves.
    member_curves : compute the metric-against-members curves of the main in-domain split (a cross-validated
        temperature fit per prefix of every order: the slow part of a report, so on request; ``--html`` and
        ``ubench dee`` turn it on).
    dee_point : also compute ``calibrated.dee_cll`` on the main in-domain split: the full ensemble's point of the
        member curves (test-time CV CLL averaged over ``orders`` x ``repeats`` halvings, drawn as the curves draw
        them), which DEE reads off the deep-ensemble curve. A deep ensemble then has DEE = K against its own
        curve, and ``compare``/``leaderboard`` agree with ``ubench dee``. Turned on where an ensemble is given.
    eps : floor inside every log (``log(p + eps)``).
    tpr : true-positive rate of FPR@TPR (FPR95 uses 0.95).
    cost_preset : named decision-cost matrix, ``"auto"`` (the matrix of the archive's dataset), or ``None``.
    cost_matrix : explicit (C, C) cost matrix as nested tuples (row = true class, column = decision), or ``None``.
    cost_source : where ``cost_matrix`` came from (a file path), recorded in the report.
    cost_reduction : ``"sum"`` or ``"mean"`` of per-sample decision costs.
    conformal_method : split-conformal score of ``conformal_coverage`` / ``conformal_set_size``: ``"thr"``,
        ``"aps"`` or ``"raps"`` (``ubench.metrics.conformal``), fitted and evaluated over the test-time CV halves.
    conformal_alpha : mis-coverage level of the conformal sets (0.1: 90 % sets).
    calibrators : post-hoc calibrators (``ubench.metrics.calibrators``) also fitted on the primary in-domain split
        under the same test-time CV as temperature scaling; the report's ``calibrators`` gives their held-out NLL,
        Brier and ECE. Empty: none.
    odir : how ``dirichlet`` among ``calibrators`` sets its ODIR strengths: ``"fixed"`` (λ = μ = 1e-3) or ``"cv"``
        (λ and μ chosen in each fold by an inner 5-fold cross-validation of the fitting half over Kull et al.'s grid,
        then refitted on the whole half: ``ubench.metrics.calibrators.select_odir``; the report's
        ``calibrators.dirichlet.selected`` gives the choices).
    shift_temperature : the shift paper's "Temp Scaling" method: one temperature fitted on the in-domain data (a
        validation-named in-domain split when the archive has one, else the primary test split, said in a note)
        and applied to every shifted split, whose ``temperature_scaled`` section then holds accuracy, NLL, Brier
        and ECE (``shift_ts_*_median`` in the summary). Off by default; meant for the ``shift`` preset.
    intervals : add the report's ``intervals``: a percentile bootstrap interval over the test samples beside every
        number that has one (``metrics/intervals.py`` says what each covers). On by default.
    confidence : the intervals' level (0.95: 95 % intervals).
    bootstrap : bootstrap replicates B of the intervals (and of ``compare``'s paired differences and the
        leaderboard's rank intervals); drawn from ``default_rng([seed, 2, crc32(unit)])``.
    sample_stats : also return ``samples``, the primary split's per-sample statistics (and the OOD and shift
        splits' needed for the comparable keys), so that ``compare`` and ``leaderboard`` can resample several
        archives with the same counts; off by default (they ask for it).
    overrides : names of the settings changed from the preset, in the order they were set.
    """

    name: str = "pitfalls"
    placement: str = "post"
    folds: int = 2
    repeats: int = 5
    seed: int = 0
    bins: int = 15
    smoothing: float = 0.0
    orders: int = 5
    member_curves: bool = False
    dee_point: bool = False
    eps: float = 1e-12
    tpr: float = 0.95
    cost_preset: str | None = None
    cost_matrix: tuple[tuple[float, ...], ...] | None = None
    cost_source: str | None = None
    cost_reduction: str = "mean"
    conformal_method: str = "aps"
    conformal_alpha: float = 0.1
    calibrators: tuple[str, ...] = ()
    odir: str = "fixed"
    shift_temperature: bool = False
    intervals: bool = True
    confidence: float = 0.95
    bootstrap: int = 1000
    sample_stats: bool = False
    overrides: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}; found {self.placement!r}")
        if self.folds != 2:
            raise ValueError(f"folds must be 2 (random halves, the Pitfalls protocol); found {self.folds}")
        unknown = [c for c in self.calibrators if c not in CALIBRATORS]
        if unknown:
            raise ValueError(f"unknown calibrator {unknown[0]!r}; known: {', '.join(CALIBRATORS)}")
        if self.odir not in ODIR_MODES:
            raise ValueError(f"odir must be one of {ODIR_MODES}; found {self.odir!r}")
        if self.conformal_method not in CONFORMAL_METHODS:
            raise ValueError(f"conformal_method must be one of {CONFORMAL_METHODS}; found {self.conformal_method!r}")
        if not 0.0 < self.conformal_alpha < 1.0:
            raise ValueError(f"conformal_alpha must lie in (0, 1); found {self.conformal_alpha!r}")
        if self.repeats < 1:
            raise ValueError(f"repeats must be at least 1; found {self.repeats}")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError(f"confidence must lie in (0, 1); found {self.confidence!r}")
        if self.bootstrap < 10:
            raise ValueError(f"bootstrap must be at least 10 replicates; found {self.bootstrap}")
        if self.bins < 1:
            raise ValueError(f"bins must be at least 1; found {self.bins}")
        if not (0.0 <= self.smoothing < 1.0):
            raise ValueError(f"smoothing must be in [0, 1); found {self.smoothing!r}")
        if self.orders < 1:
            raise ValueError(f"orders must be at least 1; found {self.orders}")
        if not (0.0 < self.eps < 0.01):
            raise ValueError(f"eps must be in (0, 0.01); found {self.eps!r}")
        if not (0.0 < self.tpr <= 1.0):
            raise ValueError(f"tpr must be in (0, 1]; found {self.tpr!r}")
        if self.cost_preset is not None and self.cost_preset not in COST_PRESETS:
            raise ValueError(f"cost_preset must be one of {COST_PRESETS}; found {self.cost_preset!r}")
        if self.cost_preset is not None and self.cost_matrix is not None:
            raise ValueError("give cost_preset or cost_matrix, not both")
        if self.cost_reduction not in COST_REDUCTIONS:
            raise ValueError(f"cost_reduction must be one of {COST_REDUCTIONS}; found {self.cost_reduction!r}")

    @property
    def temperature_scaling(self) -> bool:
        return self.placement != "none"

    @classmethod
    def preset(cls, name: str) -> Protocol:
        """The named preset (``pitfalls``, ``ursabench``, ``shift``); raises ``ValueError`` for another name."""
        try:
            return PRESETS[name]
        except KeyError:
            raise ValueError(f"unknown protocol {name!r}; presets: {sorted(PRESETS)}") from None

    def replace(self, **changes: Any) -> Protocol:
        """A copy with ``changes`` applied and recorded in ``overrides`` (``None`` values are ignored)."""
        changes = {k: v for k, v in changes.items() if v is not None}
        if "cost_matrix" in changes:
            changes["cost_matrix"] = tuple(tuple(float(x) for x in row) for row in changes["cost_matrix"])
            changes.setdefault("cost_preset", None)
        if "cost_preset" in changes and changes["cost_preset"] is not None:
            changes.setdefault("cost_matrix", None)
            changes.setdefault("cost_source", None)
        changed = tuple(k for k, v in changes.items() if k != "overrides" and getattr(self, k) != v)
        overrides = self.overrides + tuple(k for k in changed if k not in self.overrides)
        return dataclasses.replace(self, **changes, overrides=overrides)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able settings; ``cost_matrix`` becomes nested lists."""
        d = dataclasses.asdict(self)
        d["cost_matrix"] = None if self.cost_matrix is None else [list(r) for r in self.cost_matrix]
        d["overrides"] = list(self.overrides)
        d["temperature_scaling"] = self.temperature_scaling
        d["description"] = self.describe()
        return d

    def describe(self) -> str:
        """One line naming the settings that produced a number (printed on every figure and table)."""
        ts = (f"TS {self.placement}, test-time CV {self.folds}x{self.repeats}" if self.temperature_scaling
              else "no TS")
        s = f"protocol {self.name}: {ts}, seed {self.seed}, {self.bins} bins, smoothing {self.smoothing:g}"
        if self.overrides:
            s += f" (overrides: {', '.join(self.overrides)})"
        return s


PRESETS: dict[str, Protocol] = {
    "pitfalls": Protocol(name="pitfalls"),
    "ursabench": Protocol(name="ursabench", placement="none", smoothing=1e-4, cost_preset="auto",
                          cost_reduction="sum"),
    "shift": Protocol(name="shift", placement="none"),
}


def load_cost_matrix(path: str) -> tuple[tuple[float, ...], ...]:
    """Read a (C, C) cost matrix, ``cost[true, decided]``, from ``.npy`` (no pickles) or ``.csv`` (comma-separated,
    one row per true class, no header). Raises ``ValueError`` naming the file when it is not a finite square
    numeric matrix."""
    import numpy as np

    try:
        if str(path).endswith(".npy"):
            arr = np.load(path, allow_pickle=False)
        elif str(path).endswith(".csv"):
            arr = np.loadtxt(path, delimiter=",", ndmin=2)
        else:
            raise ValueError("the file name must end in .npy or .csv")
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read cost matrix {path}: {exc}") from None
    if arr.dtype.kind not in "fiu" or arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
        raise ValueError(f"cost matrix {path} must be a square numeric matrix; found shape {arr.shape}, "
                         f"dtype {arr.dtype}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"cost matrix {path} must be finite")
    return tuple(tuple(float(x) for x in row) for row in arr)
