# SPDX-License-Identifier: MIT
"""Coverage of the bootstrap intervals (issue #26 item 8): over many simulated test sets from a model whose
population values are known (``interval_model.py``), the 95 % intervals cover the truth at a rate within binomial
error of 0.95, for accuracy, NLL, Brier, the test-time cross-validated CLL, calibrated Brier and temperature (the
protocol refits its temperatures in every replicate, to first order), and the OOD AUROC (stratified resampling).

The oracle is the population, not the code: accuracy, NLL, Brier and the calibrated values are expectations in
closed form over the label given the logits, averaged over 400,000 draws; the temperature that minimises the
population NLL is the model's own miscalibration ``TAU`` (the log-likelihood is proper), and the OOD AUROC is the
Mann-Whitney probability on 400,000 draws of each.
"""

from __future__ import annotations

import numpy as np
import pytest

from interval_model import draw, population
from ubench.metrics.bootstrap import percentile_interval
from ubench.metrics.intervals import LabelledStatistics, OODStatistics, resample
from ubench.metrics.protocol_bootstrap import cv_influence
from ubench.metrics.report_sections import split_arrays

#: simulated test sets, their size (in-domain and OOD each) and bootstrap replicates
SETS, N, B = 300, 300, 200
KEYS = ("accuracy", "nll", "brier", "cll", "calibrated_brier", "temperature", "ood_auroc_total")


def _intervals(rng: np.random.Generator, seed: int) -> dict[str, list[float]]:
    probs, labels, ood = draw(rng, N, N)
    in_arrays, ood_arrays = split_arrays(probs[None]), split_arrays(ood[None])
    stats = {"test": LabelledStatistics(in_arrays, labels, unit="test", bins=15, eps=1e-12, smoothing=0.0,
                                        full=False, protocol=cv_influence(probs[None], labels)),
             "ood": OODStatistics(in_arrays, ood_arrays, unit="ood", against="test", scores=("total",))}
    reps = resample(stats, {"test": N, "ood": N}, n_replicates=B, seed=seed)
    values = {**reps["test"], **reps["ood"]}
    return {k: percentile_interval(values[k], 0.95) for k in KEYS}


def test_95_percent_intervals_cover_the_population_values_at_the_nominal_rate():
    """For every key, the share of the 300 simulated test sets whose interval holds the population value lies
    within three binomial standard errors of 0.95 ([0.912, 0.988]); a 90 % interval (0.90) or an interval that
    ignores the temperature refit (the temperature's would have width 0) fails."""
    truth = population()
    rng = np.random.default_rng(2026)
    covered = {k: 0 for k in KEYS}
    for s in range(SETS):
        for k, (lo, hi) in _intervals(rng, s).items():
            covered[k] += lo <= truth[k] <= hi
    rates = {k: v / SETS for k, v in covered.items()}
    tol = 3.0 * np.sqrt(0.95 * 0.05 / SETS)
    assert all(abs(r - 0.95) <= tol for r in rates.values()), rates


def test_population_values_of_the_model_are_what_the_closed_forms_say():
    """A fixed worked check of the oracle itself: the accuracy equals the share of correct labels on drawn samples,
    and the temperature fitted on a large sample recovers TAU (the model is miscalibrated by exactly TAU)."""
    from ubench.metrics import fit_temperature

    truth = population(n_draws=200_000, seed=3)
    probs, labels, _ = draw(np.random.default_rng(4), 200_000)
    assert np.mean(np.argmax(probs, axis=1) == labels) == pytest.approx(truth["accuracy"], abs=4e-3)
    assert fit_temperature(probs, labels).temperature == pytest.approx(truth["temperature"], rel=0.02)
    assert -np.mean(np.log(probs[np.arange(labels.size), labels])) == pytest.approx(truth["nll"], abs=0.01)
