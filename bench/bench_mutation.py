# SPDX-License-Identifier: MIT
"""Mutation testing with mutmut, sharded by module and incremental: the share of mutants the tests kill.

    python bench/bench_mutation.py                       # every unit whose source changed since its last run
    python bench/bench_mutation.py metrics/calibration.py archive_schema/validator.py
    python bench/bench_mutation.py --list                # the units, their shard and last score
    python bench/bench_mutation.py --force serve/app.py  # rerun although the source did not change
    python bench/bench_mutation.py --collect metrics/calibration.py  # record an interrupted run's verdicts
    python bench/bench_mutation.py --survivors scoring/reference.py  # re-test the survivors after new tests

Why mutmut (3.x) rather than cosmic-ray: mutmut runs the tests once to record which tests reach which function,
then forks the warm pytest process for each mutant and runs only those tests (``-x``), all mutants of a module
being switchable at run time (trampolines); cosmic-ray rewrites the file and starts a fresh test command per
mutant, which at ubench's pytest start-up (numpy, scipy, hypothesis: seconds) and several thousand mutants is
days on the 2-core machine rather than hours. mutmut also keeps every verdict and re-tests only what changed.

How: the repository (its git-tracked and untracked, not ignored files) is copied to ``<workdir>/<shard>/ubench``
so that mutmut's module names (``ubench.metrics.calibration``) are the ones the tests import; the
``[tool.mutmut]`` section of pyproject.toml, with the shard's source paths and tests, is written to
``<workdir>/<shard>/pyproject.toml``; mutmut runs there with ``UBENCH_MUTATION=1`` (tests/conftest.py then skips
its source-tree guard: mutmut writes into its copy) and ``HYPOTHESIS_PROFILE=mutation`` (derandomized, no
database). Every unit of a shard is mutated (trampolined) in every run, so that mutmut's one stats run (the shard's
tests, once) records which tests reach every function of the shard; a run is restricted to the chosen units by
naming their mutants, all in one ``mutmut run`` (its clean run of their tests happens once). Processes the tests
start (``ubench serve``, ``python -m ubench.cli``) import the mutated tree too (``<shard>/mutants`` on PYTHONPATH;
the trampolines read ``MUTANT_UNDER_TEST``, inherited, at call time), and report the functions they reach in the
stats run (:data:`SITECUSTOMIZE`, tests/conftest.py): without that, serve/app.py's routes, which only a server
subprocess runs, would have no tests at all. Under a mutant, tests/conftest.py orders the tests by their duration
in the stats run (fast killers first; the same tests run). A unit is one module; each unit's source sha256,
counts, score and mutant-testing minutes go to ``bench/results/bench_mutation.json`` (its row replaced, the
others kept), rendered by ``bench/render.py``.

Verdicts outlive the work folder: after each run (or ``--collect``) every unit's verdicts and test times are written
to ``bench/results/mutation/verdicts.json`` (by function, with mutmut's hash of its source), and a run on a fresh
work folder puts them back into mutmut's tables for the functions whose hash is unchanged, so it tests only what
changed or was never checked (plus the shard's stats run).

Score: killed / (mutants - equivalent). "No tests" (no selected test reaches the function) and timeouts count as
not killed. :data:`EQUIVALENT` lists the mutants judged equivalent (no input can tell them apart), each with why;
mutmut's names number the mutants of a function, so an entry is re-checked when its function changes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import RESULTS_DIR, Recorder, loadavg  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = RESULTS_DIR / "bench_mutation.json"

#: shard -> (its units: repository-relative module paths, the tests mutmut selects from, repository-relative).
#: One stats run (the selected tests, once) serves every unit of a shard.
SHARDS = {
    "metrics": (sorted(str(p.relative_to(ROOT)) for p in (ROOT / "metrics").glob("*.py")
                       if p.name not in ("__init__.py", "method_scores.py", "report_intervals.py", "intervals.py",
                                         "report.py")),
                ["tests/metrics"]),
    # Units whose tests are mostly under tests/scoring (through the scorer) get shards of their own: mutmut 3.8
    # resets every verdict of a shard when its test selection changes, so the metrics shard's stays tests/metrics.
    "method_scores": (["metrics/method_scores.py"], ["tests/scoring/test_method_scores.py"]),
    # the report's intervals: two tests/metrics tests reach them, the interval tests are tests/scoring's
    "report_intervals": (["metrics/report_intervals.py"], ["tests/scoring/test_intervals_report.py",
                                                           "tests/scoring/test_interval_overlap.py",
                                                           "tests/metrics/test_shift_paper_outputs.py"]),
    # the per-split statistics and resample(): the kernels' tests are tests/metrics', the report's use
    # (protocol columns, decision cost, batches) tests/scoring's (the slow coverage simulation left out)
    "intervals": (["metrics/intervals.py"], ["tests/metrics/test_bootstrap.py", "tests/metrics/test_bootstrap_parts.py",
                                             "tests/scoring/test_intervals_report.py",
                                             "tests/scoring/test_interval_overlap.py"]),
    # the archive tests that validate in-process (the crash tests' children import the installed ubench instead)
    # the report builder: only the scorer's tests reach it (tests/metrics reaches primary_split alone)
    "report": (["metrics/report.py"], ["tests/scoring/test_score.py", "tests/scoring/test_report_oracles.py",
                                       "tests/scoring/test_known_splits.py", "tests/scoring/test_calibrated_and_dee.py",
                                       "tests/metrics/test_primary_split.py"]),
    "validator": (["archive_schema/validator.py"], [f"tests/archive_schema/test_archive_{t}.py" for t in
                                                    ("hostile", "spec_plain", "frozen", "describe", "roundtrip",
                                                     "values", "v1_1")]),
    "reference": (["scoring/reference.py"], [f"tests/scoring/test_reference{t}.py" for t in ("", "_compare", "_files")]),
    "serve": (["serve/app.py"], ["tests/serve"]),
}

#: Target: at least 90 % of the non-equivalent mutants killed in metrics/ and in the serve routes (issue #27):
#: area -> (the folder whose units count towards it, whatever their shard, the share).
TARGETS = {"metrics": ("metrics/", 0.90), "serve": ("serve/", 0.90)}

#: mutant name -> why no input tells it apart from the original.
EQUIVALENT: dict[str, str] = {
    **{f"ubench.metrics.calibration.x__equal_count_abs_gaps_counting__mutmut_{k}":
       "astype(None) is astype(float64), and copy=None/True/default only decides whether a read-only result is a "
       "copy" for k in (2, 3, 5, 7, 9, 10, 12, 14)},
    **{f"ubench.metrics.calibration.x__equal_count_abs_gaps_counting__mutmut_{k}":
       "searchsorted's default side is 'left'" for k in (31, 50)},
    **{f"ubench.metrics.calibration.x__classwise_ece__mutmut_{k}":
       "np.zeros' default dtype and astype(None) are float64" for k in (6, 8, 12, 14, 29)},
    "ubench.metrics.calibration.x__classwise_ece__mutmut_38": "searchsorted's default side is 'left'",
    **{f"ubench.metrics.calibration.x__classwise_ece__mutmut_{k}":
       "the upper clip of the bin index: searchsorted(edges, p, 'left') - 1 <= n_bins - 1 for every p <= 1, and "
       "validated probabilities are <= 1" for k in (44, 51)},
    "ubench.metrics.calibration.x__uce__mutmut_4": "astype(None) is astype(float64)",
    "ubench.metrics.calibration.x__classwise_uce__mutmut_4": "astype(None) is astype(float64)",
    "ubench.metrics.calibration.x_adaptive_calibration_error__mutmut_10":
        "conf_dtype float64 instead of the input's: the float32 confidences are exact in float64 and the (value, "
        "hit) order and the float64 sums are the same",
    "ubench.metrics.calibration.x_max_calibration_error__mutmut_15":
        "nonempty=None: indexing with None adds an axis, and an empty bin's gap |0 - 0| = 0 never raises the max",
    "ubench.metrics.calibration.x_max_calibration_error__mutmut_16":
        "counts >= 0 keeps the empty bins, whose gap |0 - 0| = 0 never raises the max",
    **{f"ubench.metrics.calibration.x__equal_count_abs_gaps__mutmut_{k}":
       "sends the input to the counting kernel (or keeps zeros there), which computes the same (value, hit)-sorted "
       "equal-count gaps exactly: the two kernels are two exact implementations of one definition"
       for k in (17, 18, 19, 20, 22, 24, 25)},
    **{f"ubench.metrics.calibration.x__equal_count_abs_gaps__mutmut_{k}":
       "astype(None) is float64: the hit counts and value sums are exact either way" for k in (41, 54)},
    **{f"ubench.metrics.calibration.x__top1_checked__mutmut_{k}":
       "the buffers' dtype (float64 by default instead of intp or the input's float32): predictions are only "
       "compared with labels, and float32 confidences are exact in float64" for k in (4, 6, 9, 11, 12, 13)},
    **{f"ubench.metrics.calibration.x_checked_top1__mutmut_{k}":
       "conf_dtype None or float64: float32 confidences are exact in float64, so every sort and sum agrees"
       for k in (24, 28)},
    "ubench.metrics.calibration.x__equal_width_bin_index__mutmut_11":
        "the product in float32 for float32 input: it is off by less than a bin, and the two corrections against "
        "the float64 edges that follow put every value in its (lo, hi] bin (tests/metrics/test_bin_index.py)",
    "ubench.metrics.calibration.x__equal_width_bin_index__mutmut_8":
        "np.multiply(..., dtype=None): float64 input multiplies in float64 anyway, and float32 input in float32 is "
        "mutant 11 (the corrections against the float64 edges fix it)",
    "ubench.metrics.calibration.x__equal_width_bin_index__mutmut_31":
        "the lower correction skipped at idx = 1: idx = 1 needs fl(v n) > 1, while v <= edges[1] = fl(1/n) gives "
        "v n <= 1 + 2^-53 exactly, which rounds to 1.0 (a tie to even); so at idx = 1 the correction never fires",
    "ubench.metrics.calibration.x__equal_width_bin_index__mutmut_23":
        "clipping the first index to 1: the lower correction that follows moves every value <= edges[1] back",
    "ubench.metrics.calibration.x__equal_width_error__mutmut_7":
        "bincount without minlength: the missing trailing bins are empty and add 0 to the sum of |gaps|",
    **{f"ubench.metrics.calibration.x__top1__mutmut_{k}": "astype(None) is astype(float64)" for k in (4, 7)},
    "ubench.metrics.calibration.x__top1_checked__mutmut_53": "astype(None) is astype(float64)",
    "ubench.metrics.calibration.x__top1_checked__mutmut_14":
        "confidences kept as float32 where float64 was asked: the bins compare them with float64 edges and the "
        "gaps are summed in float64, exactly as their float64 copies",
    "ubench.metrics.calibration.x__top1_checked__mutmut_20":
        "blocks of at least 2 rows instead of 1 (only past 2^18 classes): blocking does not change any value",
    **{f"ubench.metrics.calibration.x__top1_checked__mutmut_{k}":
       "the value check without the precomputed block max: it computes the same max itself (speed only)"
       for k in (44, 46)},
    **{f"ubench.metrics.calibration.x__tace__mutmut_{k}":
       "a TACE group's values gathered as float64 (float32 values are exact in it) or its hits as float 0/1 "
       "(only compared and summed): the same (value, hit) pairs" for k in (33, 35, 41, 43)},
    **{f"ubench.metrics.calibration.x__tace__mutmut_{k}":
       "the class keys sorted as int64 or float64 instead of uint16 (or uint16 exactly up to 65,536 classes, "
       "where every class index fits it): the same order of the same integers, a slower sort; numpy reads "
       "'STABLE' as 'stable'" for k in (47, 48, 50, 51, 75, 77)},
    **{f"ubench.metrics.calibration.x__tace__mutmut_{k}":
       "an unstable sort of a block's entries by class: each entry still lands in its class's run with its own "
       "hit, and _equal_count_abs_gaps sorts a run by (value, hit), so the run's order does not matter"
       for k in (72, 74)},
    **{f"ubench.metrics.calibration.x__tace__mutmut_{k}":
       "the gathered values read by fancy indexing, or by flat indices from the C-order copy that reshape makes "
       "of a non-contiguous block, or reshape(-2) (numpy 2 reads it as -1): the same values" for k in (93, 94, 97)},
    # metrics/classification.py
    **{f"ubench.metrics.classification.x_{f}__mutmut_{k}": "np.empty's default dtype is float64"
       for f in ("_log_softmax_true", "_row_sum_squares") for k in (4, 6, 11, 13)},
    **{f"ubench.metrics.classification.x_{f}__mutmut_23":
       "range(0, n) instead of range(0, n, step): a block starts at every row, and each row's value is written "
       "last by a block that holds it, computed as before (only slower)"
       for f in ("_log_softmax_true", "_row_sum_squares")},
    **{f"ubench.metrics.classification.x__row_sum_squares__mutmut_{k}":
       "which C-contiguous rows are summed in place and which through the float64 buffer (a float64 copy, or "
       "float32 read by einsum into its float64 out, which casts as it reads: the same bits, checked for the "
       "uncertainty kernels), the buffer's default float64 dtype, a block starting at every row, 'IJ,IJ->I': the "
       "same einsum loop on the same float64 values" for k in (9, 10, 12, 14, 17, 19, 29, 47)},
    "ubench.metrics.classification.x__row_sum_squares__mutmut_39":
        "einsum 'IJ,IJ->I' is the same contraction as 'ij,ij->i' (subscripts are letters of either case)",
    **{f"ubench.metrics.classification.x__{f}__mutmut_{k}": "astype(None) is astype(float64)"
       for f, k in (("brier_decomposition", 5), ("dot_with_cell_rows", 14))},
    **{f"ubench.metrics.classification.x__brier_decomposition__mutmut_{k}":
       "the 'divide' error state: a cell's joint counts sum to its count, so a zero count divides only zeros "
       "(0/0 is 'invalid', never 'divide')" for k in (25, 27)},
    "ubench.metrics.classification.x__brier_decomposition__mutmut_42":
        "an empty cell's frequencies (1 instead of 0) are weighted by its count 0 and never indexed by a "
        "prediction, so no term sees them",
    **{f"ubench.metrics.classification.x__block_rows__mutmut_{k}":
       "a block of at least 2 rows (past 2^17 classes) or rows counted for 2 classes when there is 1: blocking "
       "changes no value" for k in (5, 11)},
    "ubench.metrics.classification.x__true_class_probs__mutmut_1": "astype(None) is astype(float64)",
    # metrics/ranking.py
    "ubench.metrics.ranking.x__fpr_at_tpr__mutmut_1": "the default tpr: its only caller (fpr_at_tpr) passes tpr",
    **{f"ubench.metrics.ranking.x_{f}__mutmut_{k}":
       "0/1 labels as float64 instead of int8: they are only read as booleans (labels.astype(bool))"
       for f, ks in (("misclassification_scores", (31,)), ("ood_detection_scores", (44, 46, 49, 51))) for k in ks},
    "ubench.metrics.ranking.x__detection_scores__mutmut_1": "the default tpr: every caller passes tpr",
    **{f"ubench.metrics.ranking.x__average_precision_sorted__mutmut_{k}": "searchsorted's default side is 'left'"
       for k in (19, 34)},
    **{f"ubench.metrics.ranking.x__auroc_sorted__mutmut_{k}":
       "sum(dtype=None) of searchsorted's intp counts is int64 on a 64-bit machine" for k in (15, 27)},
    **{f"ubench.metrics.ranking.x__{f}__mutmut_{k}": "searchsorted's default side is 'left'"
       for f, k in (("auroc_sorted", 21), ("fpr_at_tpr_sorted", 39))},
    **{f"ubench.metrics.ranking.x__fpr_at_tpr_sorted__mutmut_{k}":
       "the descent only moves the start of the final climb, which stops at the smallest k with k / n_pos >= tpr "
       "from any start at or below it (ceil(tpr / n_pos) = 1; descending to 1 with 'or', '(k - 1) * n_pos', "
       "'(k + 1) / n_pos'; setting k = 1; stepping by 2)" for k in (5, 6, 9, 10, 13, 15)},
    "ubench.metrics.ranking.x__fpr_at_tpr_sorted__mutmut_7":
        "k >= 1 instead of k > 1 in the descent: at k = 1 it would need 0 / n_pos >= tpr, and tpr > 0",
    "ubench.metrics.ranking.x__fpr_at_tpr_sorted__mutmut_8":
        "k > 2 in the descent differs only if it starts at 2 with answer 1, i.e. ceil(tpr * n_pos) = 2 while "
        "tpr <= 1 / n_pos; float products are monotone and (1 / n) * n <= 1 for every n, so it starts at 1",
    "ubench.metrics.ranking.x__fpr_at_tpr_sorted__mutmut_17":
        "k <= n_pos in the climb: past k = n_pos it would need 1.0 < tpr, and tpr <= 1",
    # metrics/temperature.py
    "ubench.metrics.temperature.x_fit_temperature_from_logits__mutmut_3":
        "check_logits(finite=None): None is falsy like False, the same branch",
    **{f"ubench.metrics.temperature.x_fit_temperature__mutmut_{k}":
       "the fused path's kind None/'XXprobsXX'/'PROBS' instead of 'probs': temperature_solver only asks "
       "kind == 'logits', so every one of them takes the probabilities branch" for k in (31, 39, 40)},
    # metrics/uncertainty.py
    **{f"ubench.metrics.uncertainty.x_{f}__mutmut_{k}":
       "np.empty's and np.zeros' default dtype and astype(None) are float64"
       for f, ks in (("_confidence", (7,)), ("_entropy_rows", (9, 11, 29, 31)), ("_expected_entropy", (3, 5)),
                     ("_uncertainty_decomposition", (5, 7, 10, 12, 30, 32, 35, 37, 40, 42))) for k in ks},
    **{f"ubench.metrics.uncertainty.x_{f}__mutmut_{k}":
       "a float64 scratch copy of float64 terms (or of the float64 mean) where the buffer itself was used: the "
       "same values, one more copy" for f, ks in (("_entropy_rows", (25,)), ("_uncertainty_decomposition", (26, 44)))
       for k in ks},
    **{f"ubench.metrics.uncertainty.x_{f}__mutmut_{k}":
       "the float32 p log p terms handed to einsum without the float64 copy: einsum into a float64 out computes in "
       "float64 (the operand is cast as it is read), the same bits as the copy (checked bit for bit on float32 "
       "terms of every magnitude, C = 2 to 1000)" for f, ks in (("_entropy_rows", (26, 27)),
                                                              ("_uncertainty_decomposition", (27, 28))) for k in ks},
    "ubench.metrics.uncertainty.x__entropy_rows__mutmut_34":
        "a block copied into a buffer of its own dtype before the log: the same values, and clear() is the same "
        "check as clear_sums() with the range read off the log (speed only)",
    **{f"ubench.metrics.uncertainty.x__entropy_rows__mutmut_{k}":
       "the check of a block cast to another log dtype: no caller passes both a check and a log dtype other than "
       "the input's (the only cast caller, the report's member-at-a-time path, passes no check)" for k in (57, 58)},
    **{f"ubench.metrics.uncertainty.x_{f}__mutmut_{k}":
       "when a thread switches to the guarded log (or starts guarded, or keeps recomputing the NaN rows): the "
       "guard leaves every finite log unchanged (log p >= log of the smallest subnormal > -max float), so a row "
       "gets the same bits either way (speed only)"
       for f, ks in (("_entropy_rows", (40, 41, 79, 82, 83, 84)),
                     ("_uncertainty_decomposition", (112, 113, 148, 151, 152, 153))) for k in ks},
    "ubench.metrics.uncertainty.x__entropy_rows__mutmut_89":
        "einsum without an out buffer returns a new array, assigned to the same rows",
    **{f"ubench.metrics.uncertainty.x__entropy_step__mutmut_{k}":
       "at least 2 rows per block (only past 2^16 classes) or a block size halved for one class: blocking changes "
       "no value" for k in (5, 11)},
    "ubench.metrics.uncertainty.x__finish_entropy__mutmut_9":
        "the lower clip at 0: every p log p term is <= 0 (p in [0, 1]), so their float sum is <= 0 and 0 - sum >= 0",
    **{f"ubench.metrics.uncertainty.x__n_threads__mutmut_{k}":
       "the thread count (at least 2, more than the cores or the blocks, or one): every row goes through the same "
       "block code whichever thread holds it, so no value changes (tests/metrics/test_metrics_fused.py)"
       for k in (6, 8, 13, 17, 18, 19, 20)},
    **{f"ubench.metrics.uncertainty.x__n_threads__mutmut_{k}":
       "the core count when os.sched_getaffinity is missing: Linux always has it (and the count changes no value)"
       for k in (2, 3, 4)},
    **{f"ubench.metrics.uncertainty.x__normalized_entropy__mutmut_{k}":
       "the clip at 1 after H / log C: H is already clipped to <= log C, and a correctly rounded division of "
       "x <= y by y is <= 1" for k in (9, 12, 13)},
    **{f"ubench.metrics.uncertainty.x__plogp__mutmut_{k}":
       "in_range False (or False for a block holding a 1.0, whose log is 0): the check then runs the whole-array "
       "reference checks once, with the same errors and the same acceptance (speed only)" for k in (17, 20, 21)},
    **{f"ubench.metrics.uncertainty.x_{f}__mutmut_{k}":
       "einsum 'IJ->I' is the same contraction as 'ij->i' (subscripts are letters of either case)"
       for f, k in (("_rowsum64", 10), ("_uncertainty_decomposition", 111))},
    **{f"ubench.metrics.uncertainty.x__run_blocks__mutmut_{k}":
       "failed.append(None/False): the list is non-empty either way, which is all 'while not failed' reads"
       for k in (24, 25)},
    **{f"ubench.metrics.uncertainty.x__run_blocks__mutmut_{k}":
       "one thread run in a pool of one, or two threads' blocks run in the calling thread, or a pool with more "
       "workers than tasks: the same blocks through the same code, no value changes" for k in (31, 32, 34)},
    # metrics/dee.py
    **{f"ubench.metrics.dee.x_dee_curve__mutmut_{k}":
       "method_cll read without the float64 cast: each value goes through float() (and np.isfinite), which gives "
       "every real numeric dtype's value the same float64 as the cast" for k in (3, 5)},
    **{f"ubench.metrics.dee.x_dee_curve__mutmut_{k}": "np.arange of Python ints is int64 on a 64-bit machine"
       for k in (56, 59)},
    **{f"ubench.metrics.dee.x_dee_curve__mutmut_{k}":
       "np.array of a non-empty list of Python bools is bool without dtype=bool"
       for k in (67, 69, 71, 73, 75, 77, 79, 81, 83, 85, 87, 89)},
    "ubench.metrics.dee.x_dee_reference__mutmut_16": "member_curves' default placement is 'post'",
    **{f"ubench.metrics.dee.x__check_reference__mutmut_{k}":
       "std read without the float64 cast: it is only compared with 0, printed, and added to the float64 mean, "
       "which promotes every real dtype to the same float64 values" for k in (8, 10)},
    # metrics/conformal.py
    "ubench.metrics.conformal.x__has_ties__mutmut_11":
        "always looking for ties: the correction then runs on every block, and it changes only rows with more "
        "kept entries than larger ones + 1 (a tie at the label), so no rank changes",
    **{f"ubench.metrics.conformal.x__true_scores__mutmut_{k}":
       "the tie correction over more rows (every row, or rows with kept >= larger + 1): it subtracts the tied "
       "classes with a larger index, none for a row without a tie at its label" for k in (38, 40, 41)},
    **{f"ubench.metrics.conformal.x_{f}__mutmut_{k}":
       "row_blocks with other arguments: another block size, and blocking changes no value"
       for f in ("_true_scores", "_set_sizes") for k in (10, 11)},
    "ubench.metrics.conformal.x_conformal_quantile__mutmut_19": "float('INF') is float('inf')",
    **{f"ubench.metrics.conformal.x_conformal_quantile__mutmut_{k}":
       "scores sorted without the float64 cast: float() of the k-th gives the same value for every real dtype"
       for k in (4, 6)},
    **{f"ubench.metrics.conformal.x_conformal_scores__mutmut_{k}":
       "axis=+1 or the default axis (-1) of argsort/take_along_axis/put_along_axis/shape on the 2-D scores is "
       "axis -1; numpy reads kind='STABLE' as 'stable'" for k in (18, 21, 24, 35, 36, 38, 60, 65, 73, 76)},
    **{f"ubench.metrics.conformal.x__prefix_set_sizes__mutmut_{k}":
       "another cut-off for a row's ranked prefix (every class, the first cut-off skipped, p > instead of >=, "
       "2 * -e, 3**-e, float ones as the mask, which np.flatnonzero reads alike): any set of the classes above "
       "a value is a prefix of the ranking, and a prefix is only used once certified on its exact running sums, "
       "else the next cut-off (finally the whole row) is tried: the same sizes, other speed"
       for k in (102, 104, 106, 107, 108, 110, 111)},
    **{f"ubench.metrics.conformal.x__prefix_set_sizes__mutmut_{k}":
       "a smaller bound on the next class's score (the penalty subtracted or for one rank less, or none for "
       "APS and RAPS alike): fewer prefixes certified, the rest ranked further, the same sizes"
       for k in (121, 128, 25, 28, 29)},
    "ubench.metrics.conformal.x__prefix_set_sizes__mutmut_134":
        "certifying at after == q_max + margin too: the next class then scores >= q_max + margin > q_max, "
        "outside every set, so the certificate still holds",
    **{f"ubench.metrics.conformal.x__prefix_set_sizes__mutmut_{k}":
       "the rows a prefix did not certify are counted too (or the filtered group keeps rows=None / counts=None, "
       "which nothing reads after the filter): those rows are in 'later' and recounted at the next cut-off, "
       "which overwrites them" for k in (138, 140, 143)},
    **{f"ubench.metrics.conformal.x__prefix_set_sizes__mutmut_{k}":
       "'later' is never empty after a pass (every kept row of the todo rows lands in a group, and each group "
       "appends), so the else branch is unreachable" for k in (185, 188)},
    **{f"ubench.metrics.conformal.x__prefix_set_sizes__mutmut_{k}":
       "more rows taken as 'alone' (a larger penalty bound, >=, or q_max - margin) or all finite rows in todo: "
       "todo is computed with the unmutated bound, so every row that is not alone there is recounted exactly "
       "afterwards, overwriting the shortcut's size" for k in (39, 40, 41, 42, 43, 79, 82)},
    **{f"ubench.metrics.conformal.x__prefix_set_sizes__mutmut_{k}":
       "rank 1 as float ones instead of intp: penalty * max(1.0 - kreg, 0) is the same number"
       for k in (61, 63)},
    "ubench.metrics.conformal.x__prefix_set_sizes__mutmut_96": "p[todo] for all rows is a copy of p: same values",
    # metrics/calibrators.py
    **{f"ubench.metrics.calibrators.x_{f}__mutmut_{k}": "astype(None) is astype(float64)"
       for f, ks in (("_fit_affine", (12, 27)), ("_fit_bbq", (8, 22, 27)), ("_fit_histogram", (48,)),
                     ("_fit_isotonic", (2, 8, 13)), ("_isotonic_1d", (23,)), ("select_odir", (27,)),
                     ("_bbq_class", (73,))) for k in ks},
    **{f"ubench.metrics.calibrators.x_{f}__mutmut_{k}": "searchsorted's default side is 'left'"
       for f, ks in (("_bbq_class", (65,)), ("_fit_bbq", (48,)), ("_fit_histogram", (33, 71))) for k in ks},
    **{f"ubench.metrics.calibrators.x__affine_fit__mutmut_{k}":
       "the c > 1 test of the ODIR normalisation (or its else value): validated probabilities have c >= 2"
       for k in (13, 18, 20)},
    **{f"ubench.metrics.calibrators.x__affine_fit__mutmut_{k}":
       "the log-softmax cache never hits (a key of None, or read under another name): it is recomputed, the same "
       "values" for k in (23, 24, 25, 34, 36)},
    "ubench.metrics.calibrators.x__affine_fit__mutmut_132":
        "3 mu instead of 2 mu in the Hessian-vector product's bias block: the Hessian only steers Newton-CG's "
        "steps, the gradient (exact) decides where it stops",
    **{f"ubench.metrics.calibrators.x__affine_fit__mutmut_{k}":
       "scipy.optimize.minimize lower-cases the method name" for k in (153, 154)},
    **{f"ubench.metrics.calibrators.x__bbq_class__mutmut_{k}":
       "the one-bin fallback's edges: with one bin every score maps to bin 0 whatever the edges"
       for k in (144, 146, 147)},
    "ubench.metrics.calibrators.x__bbq_class__mutmut_28":
        "break instead of continue when a binning has < 2 edges: that happens only when every score is equal, "
        "and then for every B",
    **{f"ubench.metrics.calibrators.x_{f}__mutmut_{k}":
       "the clip of the bin index (below at 0, above at nb - 1, or nb + 1): scores in [0, 1] lie strictly inside "
       "the widened outer edges -1e-5 and 1 + 1e-5, so the index is already in [0, nb - 1]"
       for f, ks in (("_bbq_class", (54, 55, 70)), ("_fit_bbq", (37, 38, 53))) for k in ks},
    **{f"ubench.metrics.calibrators.x__bbq_class__mutmut_{k}":
       "bincount without minlength: the last equal-frequency bin holds the largest score, so the counts have "
       "length nb anyway" for k in (77, 84)},
    **{f"ubench.metrics.calibrators.x__isotonic_1d__mutmut_{k}":
       "isotonic_regression's default is increasing=True; the clip to [0, 1] of a weighted least-squares fit of "
       "0/1 targets, which lies in [0, 1]" for k in (22, 26, 27, 32)},
    **{f"ubench.metrics.calibrators.x__odir_settings__mutmut_{k}":
       "the default of odir_mu when 'odir_mu' is in options: _odir_value reads the given value then, never the "
       "default" for k in (27, 28)},
    **{f"ubench.metrics.calibrators.x_cross_validated_calibrators__mutmut_{k}":
       "the early check of the dirichlet options skipped: the dirichlet fit raises the same ValueError itself, "
       "after the calibrators before it (no result is returned either way)" for k in (19, 20)},
    # metrics/selective.py
    "ubench.metrics.selective.x__checked_risks__mutmut_6":
        "confidences as float64 (checked_top1's default) instead of the input's dtype: float32 values are exact in "
        "float64, so the order and the ties are the same",
    "ubench.metrics.selective.x__risk_by_kept__mutmut_2": "astype(None) is astype(float64)",
    **{f"ubench.metrics.selective.x_generalized_risk_coverage_auc__mutmut_{k}":
       "the coverage k / N from an int arange: the division gives the same float64 values" for k in (14, 17)},
    "ubench.metrics.selective.x__integrate__mutmut_14": "float('NAN') is nan",
    # metrics/rejection.py
    **{f"ubench.metrics.rejection.x__accuracy_by_kept__mutmut_{k}":
       "np.empty's default dtype is float64, and the cumulative sum of float64 0/1 values (every caller passes "
       "them) is float64 without dtype=" for k in (8, 10, 17, 20)},
    **{f"ubench.metrics.rejection.x__accuracy_by_kept__mutmut_{k}":
       "runs of one score marked tied too: a run of length 1 has no k strictly inside it, so nothing is "
       "interpolated for it" for k in (55, 56)},
    **{f"ubench.metrics.rejection.x__rejection_curve__mutmut_{k}":
       "astype(None) is float64; an int arange divided by n gives the same float64 fractions" for k in (2, 13, 15)},
    # metrics/decision.py
    **{f"ubench.metrics.decision.x_{f}__mutmut_1": "the default gamma: every caller passes it"
       for f in ("_bayes_decisions", "_decision_cost")},
    **{f"ubench.metrics.decision.x__bayes_decisions__mutmut_{k}":
       "np.finfo(None) is np.finfo(float64); astype(None) is astype(float64)" for k in (16, 23, 34)},
    "ubench.metrics.decision.x__bayes_decisions__mutmut_31":
        "a block starting at every row: each row's decision is written last by a block that holds it, computed "
        "as before (only slower)",
    "ubench.metrics.decision.x__bayes_decisions__mutmut_43":
        "risk < min + tol instead of <=: tol = C eps max|cost| exceeds half an ulp of every risk (<= max|cost|), "
        "so min + tol > min and the minimum is always near it",
    **{f"ubench.metrics.decision.x__check_cost__mutmut_{k}":
       "'X' is no dtype kind; astype(None) is float64; copy=True/None/default only decides whether the float64 "
       "cost matrix is a copy, and nothing writes to it" for k in (4, 8, 9, 11, 12)},
    **{f"ubench.metrics.decision.x_cost_matrix__mutmut_{k}":
       "'X' is no dtype kind; np.full with a Python float fills float64" for k in (13, 38, 41)},
    "ubench.metrics.decision.x_dataset_key__mutmut_6":
        "also dropping 'X': the name is lower-cased first, so it holds no 'X'",
    # metrics/shift.py
    **{f"ubench.metrics.shift.x__stats__mutmut_{k}":
       "np.asarray of lists of Python floats is float64; np.quantile's default method is 'linear'"
       for k in (17, 19, 28)},
    **{f"ubench.metrics.shift.x_shift_summary__mutmut_{k}":
       "the splits at an intensity sorted by the whole (kind, intensity, values) tuple: their kinds differ "
       "(a repeated (kind, intensity) is refused), so the kind alone decides the order" for k in (57, 59)},
    # metrics/ensemble.py
    **{f"ubench.metrics.ensemble.x__ensemble_mean__mutmut_{k}":
       "another row-block size (at least 2 rows, a divisor of at least 2, the product over no axis = 1 row "
       "element, np.prod's default int64) or a block starting at every row: each row's mean is the same member "
       "sum in the same order whatever block holds it" for k in (15, 21, 24, 26, 27, 33)},
    **{f"ubench.metrics.ensemble.x_{f}__mutmut_{k}":
       "np.empty's and np.zeros' default dtype and astype(None) are float64"
       for f, ks in (("_ensemble_mean", (6, 8, 56, 58, 67)), ("_smooth", (2,))) for k in ks},
    "ubench.metrics.ensemble.x_ensemble_mean_probs__mutmut_26":
        "|sum - 1| >= 1e-9 instead of > 1e-9: near 1 the difference sum - 1 is exact and a multiple of 2**-53, "
        "and the double 1e-9 is not one, so the two never meet",
    **{f"ubench.metrics.ensemble.x_ensemble_mean_probs__mutmut_{k}":
       "weights read without the float64 cast: integer or float weights times the float64 members give the same "
       "float64 mean" for k in (7, 9)},
    # metrics/paired.py
    **{f"ubench.metrics.paired.x_{f}__mutmut_{k}":
       "np.asarray without the float64 cast of float values (or Python floats), astype(None) of floored "
       "quantiles read back through int(): the same numbers"
       for f, ks in (("bootstrap_p_value", (3, 5)), ("group_runs", (4, 6, 10, 12)), ("holm", (3, 5)),
                     ("paired_comparisons", (26, 28)), ("rank_intervals", (27, 29, 31, 45)),
                     ("replicate_ranks", (3, 5))) for k in ks},
    "ubench.metrics.paired.x_group_runs__mutmut_18": "rng.integers(k) is rng.integers(0, k)",
    **{f"ubench.metrics.paired.x_holm__mutmut_{k}":
       "the sort of the p-values unstable: tied p-values get the same adjusted value whichever comes first "
       "(the running maximum carries the first one's to the next)" for k in (9, 11, 13)},
    **{f"ubench.metrics.paired.x_paired_comparisons__mutmut_{k}":
       "the sign scaled by 2 in the choice of the best: max over (2 x value, -index) picks the same method"
       for k in (7, 9)},
    **{f"ubench.metrics.paired.x__evaluate__mutmut_{k}":
       "weighted_detection given its order reads the scores from it (pos/neg None), or without it sorts the same "
       "scores again: the same order, only slower" for k in (15, 16, 20, 26)},
    "ubench.metrics.paired.x_sample_replicates__mutmut_49":
        "max(..., default=2): the default only sizes the replicate blocks when there are no reports, whose loop "
        "then computes nothing and returns []",
    **{f"ubench.metrics.paired.x_sample_replicates__mutmut_{k}":
       "split('|') / rsplit('|', 1) / split('|', 2) of 'report|key': report indices and the report keys "
       "(PAIRED_KEYS, shift:j) hold no '|', so every variant cuts at the one '|'" for k in (75, 76, 78, 83, 84, 86)},
    **{f"ubench.metrics.paired.x_replicate_ranks__mutmut_{k}":
       "argsort/take_along_axis along the default axis -1 of the 2-D (B, rows) array is axis 1" for k in (19, 27)},
    # metrics/agreement.py, metrics/row_stats.py
    **{f"ubench.metrics.agreement.x_total_variation__mutmut_{k}": "astype(None) is astype(float64)"
       for k in (16, 17)},
    "ubench.metrics.agreement.x__pair__mutmut_5": "check_probs' default name is 'probs'",
    **{f"ubench.metrics.diversity.x_{f}__mutmut_4": "astype(None) is astype(float64)"
       for f in ("disagreement_per_sample", "variation_ratio_per_sample")},
    "ubench.metrics.diversity.x_vote_agreement__mutmut_6": "np.sort's default axis -1 of the 2-D (N, M) votes is 1",
    **{f"ubench.metrics.diversity.x_vote_agreement__mutmut_{k}":
       "new_run as float ones instead of bool: its entries are set from a bool comparison and only read as the "
       "condition of np.where, where 1.0/0.0 are True/False" for k in (12, 14)},
    **{f"ubench.metrics.row_ranking.x__padded__mutmut_{k}":
       "np.negative into a new array instead of in place: the same values, and the negated buffer is not read "
       "again" for k in (28, 30)},
    "ubench.metrics.row_ranking.x_ranked_prefix__mutmut_36":
        "not stopping at a group limit equal to C: the groups after it need counts > C, and no row keeps more "
        "than its C entries, so they are empty",
    **{f"ubench.metrics.row_stats.x_scaled_top1_entropy__mutmut_{k}":
       "another row-block size (the function's rows are row-local: blocking changes no value)"
       for k in (13, 14, 15, 16, 17)},
    **{f"ubench.metrics.row_stats.x_scaled_top1_entropy__mutmut_{k}":
       "_prep_probs' with_lse only adds a second result; [0], the log-probabilities, is the same"
       for k in (25, 28, 29)},
    # metrics/_validation.py
    **{f"ubench.metrics._validation.x__first_bad_simplex_row_nonneg__mutmut_{k}":
       "reshape(-2) is reshape(-1) in numpy 2; einsum 'IJ->I' is 'ij->i'; axis=+1 of the 2-D rows is axis -1"
       for k in (7, 18, 50)},
    **{f"ubench.metrics._validation.x_first_bad_simplex_row__mutmut_{k}":
       "reshape(-2) is reshape(-1) in numpy 2; axis=+1 of the 2-D rows is axis -1" for k in (11, 14)},
    **{f"ubench.metrics._validation.x__first_bad_simplex_row_nonneg__mutmut_{k}":
       "a wider screening margin (c / u, max(|sum|, 2), c / eps), every row unsure (|approx + 1|), or a row "
       "exactly at tol - margin unsure too: more rows go to the exact float64 check, which decides alone "
       "(same answer, slower)" for k in (25, 31, 32, 39, 41)},
    **{f"ubench.metrics._validation.x__check_simplex__mutmut_{k}":
       "when min/max are recomputed: the only caller (_check_probs_values) passes both, and recomputing them "
       "from the array gives the same values" for k in (1, 2, 3, 4)},
    **{f"ubench.metrics._validation.x__check_probs_values__mutmut_{k}":
       "lo or hi not handed on: _check_simplex recomputes both from the array, the same values"
       for k in (8, 9, 12, 13)},
    **{f"ubench.metrics._validation.x_{f}__mutmut_{k}":
       "|sum - 1| >= tol instead of > tol: near tol a float64 sum lies in [0.5, 2], so sum - 1 is exact and a "
       "multiple of 2**-53, and simplex_tolerance(C) = 1e-4 + C 2**-23 is none (checked for every C up to 200,000)"
       for f, k in (("first_bad_simplex_row", 20), ("_first_bad_simplex_row_nonneg", 56))},
    "ubench.metrics._validation.x__first_bad_simplex_row_nonneg__mutmut_24":
        "the screen's margin divided instead of multiplied by max(|approx|, 1): a row it can clear has |approx| <= "
        "1 + tol, so the margin shrinks by under 0.05 %, and it is twice the proven bound ((C - 1) u sum for each "
        "of the two sums, u = eps / 2)",
    **{f"ubench.metrics._validation.x__sums_clear__mutmut_{k}":
       "a stricter (or never passing) cheap test of a block's row sums: an uncleared block goes to the reference "
       "checks, which decide alone (speed only)" for k in (7, 8, 11, 12, 13, 14, 16)},
    "ubench.metrics._validation.x__sums_room__mutmut_2":
        "the float64 term added instead of subtracted: the room stays inside the proven bound (float32 rows: "
        "2 C eps32 - C eps64 > (C - 1) (u32 + u64) sum; float64 rows: tol - C eps64 plus both sums' errors "
        "(C - 1) eps64 sum stays below tol)",
    **{f"ubench.metrics._validation.x__sums_room__mutmut_{k}":
       "a smaller room (3 C eps, C / eps, 2 C / eps): fewer blocks cleared cheaply, the reference decides the "
       "rest (speed only)" for k in (3, 5, 8)},
    "ubench.metrics._validation.x_check_labels__mutmut_6": "'X' is no dtype kind: the same kinds pass",
    **{f"ubench.metrics._validation.x__scan_probs_values__mutmut_{k}":
       "reshape(-2) (numpy 2: -1), 2 rows per block (past 2**16 classes), a block at every row or empty blocks "
       "(in_unit_interval of an empty block is False, so the reference runs at once): the same checks decide"
       for k in (7, 15, 28, 32)},
    "ubench.metrics._validation.xǁ_BlockedProbsCheckǁ__init____mutmut_15": "done = None is falsy like False",
    **{f"ubench.metrics._validation.xǁ_BlockedProbsCheckǁ{f}__mutmut_{k}":
       "the reference checks re-run for a later block the cheap test cannot clear (done not kept, or 'or' for "
       "'and'): they passed once on the whole array and pass again (speed only)"
       for f, k in (("_reference", 5), ("_reference", 6), ("clear", 1), ("clear_sums", 1))},
    **{f"ubench.metrics._validation.x_check_member_probs_mean__mutmut_{k}":
       "2 rows per block (past 2**18 classes), blocks starting at every row (each row's mean recomputed from its "
       "members by the last block holding it), row sums in a float64 buffer (einsum then sums in float64, within "
       "the float32 margin), 'IJ->I', or a stricter inlined cheap test (bits < one, min - 2, >, +room, max + 1, "
       "< room, or always deferring to check.clear, which repeats it): the reference checks decide every block "
       "not cleared, the mean is the same" for k in (23, 27, 29, 39, 59, 64, 66, 68, 69, 70, 71, 73)},
    # metrics/shift_paper.py
    **{f"ubench.metrics.shift_paper.x__top_k__mutmut_{k}":
       "another row-block size (row_blocks' arguments): the rows are independent" for k in (36, 37, 38, 39, 40)},
    **{f"ubench.metrics.shift_paper.x__top_k__mutmut_{k}":
       "a lower or equal cut (column 0 left out of the group maxima, the k-th group maximum also when there are "
       "exactly k groups, the row's minimum, np.partition's default last axis): the cut only has "
       "to be at most the k-th largest entry, and every entry at or above it is ranked exactly (slower)"
       for k in (21, 56, 63, 71)},
    "ubench.metrics.shift_paper.x__top_k__mutmut_93":
        "the tie correction also for rows without a tie at the label: it adds the tied smaller classes, none",
    **{f"ubench.metrics.shift_paper.x__top_k__mutmut_{k}":
       "another partition of the columns into groups (one column each, none: the cut is then the row's minimum, "
       "or groups of other sizes): any partition's k-th largest group maximum (or the row minimum) bounds the k-th "
       "largest entry from below, and every entry at or above the cut is ranked exactly (speed only)"
       for k in (16, 17, 18, 19, 20, 26, 27, 29)},
    **{f"ubench.metrics.shift_paper.x__top_k__mutmut_{k}":
       "hits as float 0/1 instead of bool: every caller only asks .any() or hands them to binned_calibration_error, "
       "which casts to float64" for k in (11, 13)},
    **{f"ubench.metrics.shift_paper.x__top_k__mutmut_{k}":
       "float32 probabilities ranked without the float64 cast: the comparisons and the stored values (written "
       "into the float64 values array) are the same" for k in (43, 45)},
    **{f"ubench.metrics.shift_paper.x__top_k__mutmut_{k}":
       "the tie correction also for rows without a tie at the label (above - 1 < n_ge, or n_ge summed over the "
       "block): it adds the tied smaller classes, none" for k in (91, 94)},
    **{f"ubench.metrics.shift_paper.x__confidence_curves__mutmut_{k}":
       "thresholds kept in their dtype (compared by searchsorted with the float64 confidences, and written out "
       "through float()), or searchsorted's default side 'left': the same counts" for k in (3, 5, 16, 43)},
    **{f"ubench.metrics.shift_paper.x_{f}__mutmut_{k}": "astype(None) is astype(float64)"
       for f, k in (("confidence_curves", 5), ("quantile_bin_edges", 3))},
    **{f"ubench.metrics.shift_paper.x__quantile_ece__mutmut_{k}":
       "outer quantile edges 1 (first) or 2 (last) instead of 0 and 1: binned_calibration_error clips the bin "
       "index to [0, n_bins - 1], so a confidence <= the second edge lands in bin 0 whatever searchsorted makes "
       "of the first edge (it probes index 0 only for such values), and none exceeds 1" for k in (38, 39)},
    **{f"ubench.metrics.shift_paper.x_binned_calibration_error__mutmut_{k}":
       "values, hits or edges kept in their dtype: the gaps h - v are float64 once either is (the other cast), "
       "searchsorted compares promoted values, and bools and ints give the same numbers"
       for k in (3, 5, 8, 10, 13, 15)},
    **{f"ubench.metrics.shift_paper.x_binned_calibration_error__mutmut_{k}":
       "searchsorted's default side 'left'; bincount's minlength dropped, one longer or two shorter: empty bins add "
       "|0| and bincount grows to the largest index anyway" for k in (29, 43, 45, 47)},
    # metrics/diagnostics.py
    **{f"ubench.metrics.diagnostics.x__autocovariance__mutmut_{k}":
       "a longer FFT (2 << or 3 n: more zero padding than the 2 n a linear autocovariance needs), irfft's default "
       "length (2 (m - 1) = the even size) or the default last axis (= axis 1): the same lags"
       for k in (13, 18, 25, 29, 32, 33)},
    "ubench.metrics.diagnostics.x__split__mutmut_8": "np.concatenate's default axis is 0",
    "ubench.metrics.diagnostics.x__rank_normalise__mutmut_6": "scipy's rankdata ranks with method='average' by default",
    **{f"ubench.metrics.diagnostics.x_{f}__mutmut_8": "float('NAN') is nan"
       for f in ("split_rhat", "bulk_ess")},
    "ubench.metrics.diagnostics.x_split_rhat__mutmut_28": "float('NAN') is nan",
    "ubench.metrics.diagnostics.x__classic_rhat__mutmut_30": "float('NAN') is nan",
    **{f"ubench.metrics.diagnostics.x_chain_diagnostics__mutmut_{k}":
       "values kept in their dtype: selecting and stacking each chain's draws does not depend on it, and "
       "split_rhat / bulk_ess cast the stacked draws to float64 (_as_draws)" for k in (3, 5)},
    "ubench.metrics.diagnostics.x__ess__mutmut_18": "m >= 1 instead of m > 1: m = 2 x chains >= 2",
    "ubench.metrics.diagnostics.x__ess__mutmut_92":
        "even >= 0 instead of > 0: for even = 0.0, rho[max_t + 1] already holds 0.0 (zero-initialised, or the "
        "even lag the last pair stored)",
    "ubench.metrics.diagnostics.x__ess__mutmut_107":
        "the monotone step also for equal pair sums: the pair is replaced by two halves of the same sum (x / 2 + "
        "x / 2 = x exactly), so every later comparison sees the same sums; only the float total's last bit can move",
    **{f"ubench.metrics.diagnostics.x_split_rhat__mutmut_{k}":
       "the tail R-hat of constant folded draws computed instead of NaN: every draw then has the average rank, "
       "(r - 3/8) / (S + 1/4) is exactly 1/2, ndtri(1/2) = 0, W = 0 and _classic_rhat returns NaN itself"
       for k in (20, 24)},
    # metrics/bootstrap.py
    **{f"ubench.metrics.bootstrap.x_bootstrap_counts__mutmut_{k}":
       "which counting path (the threshold n >= 4096) or how many replicates' draws per generator call: both "
       "draw integers(0, n, (B, n)) in the same order and count each replicate's row, the same counts (speed "
       "only)" for k in (3, 4, 15)},
    **{f"ubench.metrics.bootstrap.x_percentile_intervals__mutmut_{k}":
       "one float64 cast (of each column, or of the stacked list) is enough: the same float64 stack"
       for k in (6, 8, 10, 12)},
    "ubench.metrics.bootstrap.xǁLinearColumnsǁ_push__mutmut_14": "reshape(n, -2) is reshape(n, -1) in numpy 2",
    **{f"ubench.metrics.bootstrap.xǁLinearColumnsǁ{f}__mutmut_{k}":
       "another kind than 'sums' for a block: apply only asks kind == 'mean', so every other kind is returned "
       "as raw sums" for f in ("add_block", "add_one_hot") for k in (2, 7, 8)},
    **{f"ubench.metrics.bootstrap.xǁLinearColumnsǁadd_cells__mutmut_{k}":
       "a cell block's values kept in their dtype: OneHot writes them into the float64 matrix, the same values"
       for k in (19, 21)},
    "ubench.metrics.bootstrap.xǁPartitionǁof__mutmut_7": "numpy reads kind='STABLE' as 'stable'",
    "ubench.metrics.bootstrap.xǁPartitionǁsums__mutmut_3":
        "gathered ignored (weights[:, order] recomputed): no caller passes it",
    **{f"ubench.metrics.bootstrap.xǁPartitionǁsums__mutmut_{k}":
       "reduceat without dtype=float64: numpy sums integer counts in int64 (its default for small integers, no "
       "wrap: tests/metrics/test_bootstrap_parts.py) and float64 products in float64" for k in (17, 21)},
    # metrics/smooth_calibration.py
    **{f"ubench.metrics.smooth_calibration.x__convolve_valid__mutmut_{k}":
       "irfft's default length 2 (m - 1) for the m = n // 2 + 1 bins of an even n is n" for k in (3, 5)},
    **{f"ubench.metrics.smooth_calibration.x__fft_size__mutmut_{k}":
       "another FFT length of at least the reflected signal's (twice as long, one more bit, or L - 2 when L - 2 is "
       "a power of two): a circular convolution of length n >= a_len wraps only into the first k - 1 outputs, "
       "which the valid part drops; the same numbers up to the FFT's rounding (1e-16 relative)" for k in (2, 3, 5)},
    **{f"ubench.metrics.smooth_calibration.xǁ_Smootherǁ_grid_spectra__mutmut_{k}":
       "the length of the second reflected grid: both grids are reflected from `points` nodes, the same length"
       for k in (30, 33)},
    "ubench.metrics.smooth_calibration.x__to_grid__mutmut_7":
        "no lower clip of the grid index: positions f (points - 1) are >= 0 for confidences in [0, 1]",
    **{f"ubench.metrics.smooth_calibration.x__top1_pairs__mutmut_{k}":
       "the clip of the confidences to [0, 1] (one end dropped, or 2 as the upper): the top-1 probabilities of "
       "validated probs already lie in [0, 1]" for k in (7, 8, 13)},
    "ubench.metrics.smooth_calibration.xǁ_Smootherǁ_ece_at__mutmut_8":
        "max(2001, ...) instead of max(2000, ...) before // 2: 2000 // 2 == 2001 // 2, the same grid",
    "ubench.metrics.smooth_calibration.xǁ_Smootherǁ_ece_at__mutmut_46":
        "the valid part cut at the end of the convolution instead of at a_len: the [half, half + points) slice "
        "taken next lies inside the first 2 points - 1 = a_len - k + 1 outputs either way",
    "ubench.metrics.smooth_calibration.x__smooth_ece__mutmut_8":
        "sigma <= eps instead of <: the bandwidths tried are 1 and bisection midpoints (dyadic), never 1e-3",
    "ubench.metrics.smooth_calibration.x__smooth_ece__mutmut_12":
        "the first bandwidth tried 2 instead of 1: smECE < 1 always (|r| <= density, and the density is offset by "
        "1e-4), so neither is small enough and the same bisection on (0, 1] runs",
    # metrics/method_scores.py
    **{f"ubench.metrics.method_scores.x_{f}__mutmut_1":
       "the default tpr 1.95 instead of 0.95: _fpr_at_tpr_sorted's k = ceil(1.95 n) indexes pos[n - k], which wraps "
       "to the entry tpr 0.95 picks (checked for every positive count below 5,000)"
       for f in ("method_scores_in_domain", "method_scores_ood")},
    "ubench.metrics.method_scores.x_method_scores_in_domain__mutmut_23":
        "linspace(endpoint=None): None is falsy like False",
    **{f"ubench.metrics.method_scores.x_{f}__mutmut_{k}":
       "0/1 labels as float64 instead of int8: the detection kernels read them as booleans"
       for f, ks in (("method_scores_in_domain", (6,)), ("method_scores_ood", (9, 11, 14, 16))) for k in ks},
    **{f"ubench.metrics.method_scores.xǁLogitScoreAccumulatorǁ__init____mutmut_{k}":
       "np.empty's default dtype is float64" for k in (3, 5)},
    # metrics/report_intervals.py
    **{f"ubench.metrics.report_intervals.xǁIntervalCollectorǁ__init____mutmut_{k}":
       "the protocol's cost matrix (a list of numbers) read without the float64 dtype: the decision-cost column "
       "is cast to float64 when added, and the Bayes decisions compare the same numbers" for k in (38, 40)},
    **{f"ubench.metrics.report_intervals.xǁIntervalCollectorǁadd_labelled__mutmut_{k}":
       "another default for a missing cost_reduction: a section holds cost_reduction whenever it holds "
       "decision_cost, and without decision_cost no cost column is added, so the default is never used"
       for k in (98, 100, 103, 104)},
    **{f"ubench.metrics.report_intervals.xǁIntervalCollectorǁ__init____mutmut_{k}":
       "getattr's default None instead of False for a protocol without the setting: bool(None) is False too"
       for k in (7, 18)},
    "ubench.metrics.report_intervals.xǁIntervalCollectorǁ__init____mutmut_28":
        "no cost matrix kept as '' instead of None: add_labelled reads it only for a section with decision_cost, "
        "which the report writes only when it named a cost matrix, and then the collector keeps that matrix",
    "ubench.metrics.report_intervals.xǁIntervalCollectorǁ__init____mutmut_43":
        "block_n '' instead of None: resample reads 'block_n or the largest unit', and '' is falsy like None",
    "ubench.metrics.report_intervals.xǁIntervalCollectorǁ__init____mutmut_49":
        "overlap None instead of False: only read as a truth value (settle, _resample)",
    "ubench.metrics.report_intervals.xǁIntervalCollectorǁadd_labelled__mutmut_24":
        "the post-hoc mean smoothed with gamma 0: _smooth returns a float64 copy of the float64 mean, unchanged",
    "ubench.metrics.report_intervals.xǁIntervalCollectorǁadd_labelled__mutmut_45":
        "the cost matrix handed to a shift split too (or to an in-domain split without decision_cost): a shift "
        "split is not full and returns before its cost is read, and the report writes decision_cost whenever it "
        "named the matrix the collector holds",
    "ubench.metrics.report_intervals.xǁIntervalCollectorǁadd_labelled__mutmut_85":
        "resampling_unit(None, ...) for an in-domain or shift split: only role == 'ood' is asked, the same unit",
    "ubench.metrics.report_intervals.xǁIntervalCollectorǁadd_labelled__mutmut_93":
        "scores handed to a shift split too: it is not full and returns before its scores are read",
    **{f"ubench.metrics.report_intervals.xǁIntervalCollectorǁsettle__mutmut_{k}":
       "getattr's default for sorted_kernels (None, none, True): every statistic the collector holds "
       "(LabelledStatistics, OODStatistics) defines it" for k in (9, 12, 15)},
    **{f"ubench.metrics.report_intervals.xǁIntervalCollectorǁ{f}__mutmut_{k}":
       "another number of kernel threads for a batch (resample's default, 2, or the caller's None): every value "
       "comes from the same counts by the same kernel whichever thread runs it (speed only)"
       for f, ks in (("settle", (34, 36, 37)), ("_resample", (7, 14))) for k in ks},
    **{f"ubench.metrics.report_intervals.xǁ_Resamplingǁ{f}__mutmut_{k}":
       "a placeholder '' instead of None: _value is set before result() reads it (or an error is raised instead), "
       "and _after and _batch are never read again once cleared (they only let the objects go)"
       for f, k in (("__init__", 9), ("run", 2), ("run", 9))},
    # metrics/bootstrap_ranking.py
    **{f"ubench.metrics.bootstrap_ranking.{f}__mutmut_{k}":
       "the order inside a run of equal scores (an unstable sort, or numpy's reading of 'STABLE' as 'stable'): "
       "every statistic reads a run of ties as a whole (weights strictly below it, its bounds, its mean error "
       "share), never a position inside it" for f, ks in (("xǁ_Sortedǁof", (3, 5, 7, 10, 12, 14)),
                                                         ("xǁ_Rankedǁof", (3, 5, 7))) for k in ks},
    **{f"ubench.metrics.bootstrap_ranking.{f}__mutmut_{k}":
       "no harmonic table handed down, or always rebuilt: _harmonic_table(total.max()) is the same cumulative "
       "sums bit for bit (speed only)" for f, k in (("x_weighted_selective", 10), ("x__selective", 47))},
    **{f"ubench.metrics.bootstrap_ranking.{f}__mutmut_{k}": "astype(None) is astype(float64)"
       for f, ks in (("x__selective", (14, 20, 21)), ("x__errors_detected", (13, 23, 81))) for k in ks},
    **{f"ubench.metrics.bootstrap_ranking.{f}__mutmut_{k}":
       "einsum 'BJ,BJ->B' is the same contraction as 'bj,bj->b' (subscripts are letters of either case)"
       for f, ks in (("x__selective", (63, 77)), ("x__errors_detected", (41, 68))) for k in ks},
    **{f"ubench.metrics.bootstrap_ranking.x__errors_detected__mutmut_{k}":
       "the 'divide' error state: every division there is by tot_p, tot_n or their product, whose numerators are "
       "0 when they are (no weight, no sum), so a zero divisor gives 0/0 ('invalid'), never x/0"
       for k in (25, 27)},
    **{f"ubench.metrics.bootstrap_ranking.x__errors_detected__mutmut_{k}":
       "np.divide into a new array instead of into tp: tp is not read again" for k in (71, 74)},
    **{f"ubench.metrics.bootstrap_ranking.x__errors_detected__mutmut_{k}":
       "the clip of the FPR threshold's index (no lower or upper bound, n_err + 1, at least 1): j is the last "
       "index of the exclusive cumulative sum ce[:, :-1] (n_err entries, ce[:, 0] = 0) at most reach >= 0, "
       "so 0 <= j <= n_err - 1 already, and without errors the FPR is NaN without reading j"
       for k in (92, 93, 102, 104)},
    "ubench.metrics.bootstrap_ranking.x__errors_detected__mutmut_124":
        "a[bad] = None on a float64 array stores NaN",
    **{f"ubench.metrics.bootstrap_ranking.x__selective__mutmut_{k}":
       "the crossing point inside a tie group at its own start (inner = lo: lo >= 2 instead of 1, or "
       "e_lo < risk lo instead of <=) or end (inner <= hi): those coverages are a group end already, the "
       "previous group's (or this one's) end_ok candidate with the same E(k) / k, and the first group starts "
       "at 0 with no errors before it" for k in (174, 175, 176)},
    **{f"ubench.metrics.bootstrap_ranking.xǁ_Sortedǁof__mutmut_{k}": "searchsorted's default side is 'left'"
       for k in (22, 39)},
    **{f"ubench.metrics.bootstrap_ranking.xǁ_Sortedǁof__mutmut_{k}":
       "a tie flag set when there is no tie (np.array_equal with None is False): the tie branches read the same "
       "counts (neg_upto = neg_below, pos_first = arange) and give the same values, only slower"
       for k in (61, 62, 66, 67)},
    **{f"ubench.metrics.bootstrap_ranking.x__row_dot__mutmut_{k}":
       "which exact integer sum computes the rank sum (float64 always, int32 for int32 counts too, the promoted "
       "integer type, float64 of an exact integer): below 2^31 every one of them is exact, the same value "
       "(test_detection_sums_past_int32_are_exact pins the bound)" for k in (4, 7, 8, 9, 10, 11, 15, 19, 25, 29)},
    **{f"ubench.metrics.bootstrap_ranking.x__row_dot__mutmut_{k}":
       "einsum 'BJ,BJ->B' is the same contraction as 'bj,bj->b'" for k in (21, 31)},
    "ubench.metrics.bootstrap_ranking.x_weighted_detection__mutmut_22":
        "another sample count to size the row chunks (n_pos - n_neg; at least one row): every row is computed on "
        "its own, so the chunks change no value",
    **{f"ubench.metrics.bootstrap_ranking.x__detection__mutmut_{k}": "astype(None) is astype(float64), and the "
       "integer reach compared as float64 is exact (counts far below 2^53)" for k in (28, 29, 130)},
    **{f"ubench.metrics.bootstrap_ranking.x__detection__mutmut_{k}":
       "max(initial=None or 1) of the replicates' totals: there is always a replicate, and a bound of 1 instead "
       "of 0 keeps the (exact) int32 sum of zeros" for k in (41, 42, 44, 45)},
    **{f"ubench.metrics.bootstrap_ranking.x__detection__mutmut_{k}":
       "the 'divide' error state: a zero total divides a zero sum (0/0 is 'invalid'), and AP divides by "
       "max(both, 1)" for k in (47, 49)},
    "ubench.metrics.bootstrap_ranking.x__detection__mutmut_71":
        "a larger bound (3 instead of 2 times) only sends more rank sums to the float64 path, exact too",
    "ubench.metrics.bootstrap_ranking.x__detection__mutmut_86":
        "the tie branch's lower bounds without ties: np.take(cp, arange) is cp[:, :-1]",
    "ubench.metrics.bootstrap_ranking.x__detection__mutmut_119": "einsum 'BJ,BJ->B' is 'bj,bj->b'",
    "ubench.metrics.bootstrap_ranking.x__detection__mutmut_141":
        "no lower clip of j: _last_at_most over cp[:, :-1] (cp[:, 0] = 0) at reach >= 0 is >= 0 already",
    **{f"ubench.metrics.bootstrap_ranking.x__smallest_count__mutmut_{k}":
       "the descent from ceil(tpr n) changed so that the one climb step after it repairs it: descending also from "
       "k = 1 or only from k > 2 (at k = 2 the answer 1 needs 1 / n >= tpr, so tpr n <= 1 and its rounding "
       "<= 1: ceil gives 1 already), on a test that always holds ((k - 1) n >= tpr, (k + 1) / n >= tpr: down "
       "one, and back up when k - 1 falls short), two steps down where one is right (the climb adds it back), "
       "or max(n, 2) (at n = 1, k = ceil(tpr) = 1 never descends)" for k in (11, 12, 13, 14, 15, 21, 24)},
    **{f"ubench.metrics.bootstrap_ranking.x__detection__mutmut_{k}":
       "no upper clip of j (or pos.size + 1): _last_at_most over cp[:, :-1], pos.size entries, is <= pos.size - 1"
       for k in (142, 147)},
    "ubench.metrics.bootstrap_ranking.x__detection__mutmut_155": "searchsorted's default side is 'left'",
    "ubench.metrics.bootstrap_ranking.x__detection__mutmut_169": "a[bad] = None on a float64 array stores NaN",
    **{f"ubench.metrics.bootstrap_ranking.x__in_chunks__mutmut_{k}":
       "another chunk size (at least 2 rows, n counted as 2 when 1, one chunk less often, the samples axis "
       "deciding whether to chunk) or the keys read off the second chunk (every chunk has the same keys): every "
       "row is computed on its own, the same values" for k in (6, 12, 14, 15, 32)},
    **{f"ubench.metrics.bootstrap_ranking.x__exclusive_cumsum__mutmut_{k}":
       "the running sums in another exact type (numpy's default int64 for int32, float64 of integers below 2^53) "
       "or reshape(-2) (numpy 2 reads it as -1): the same integers" for k in (30, 32, 34, 36)},
    "ubench.metrics.bootstrap_ranking.x__row_bound__mutmut_6":
        "a bound of 1 instead of 0 for no weights: the int32 type is chosen either way",
    **{f"ubench.metrics.bootstrap_ranking.x__as_counts__mutmut_{k}":
       "counts kept or cast (to int64, or float64) by another rule: integer counts and their float64 copies are "
       "the same numbers, and every sum of them is exact (the type only picks an exact path)"
       for k in (3, 4, 5, 6, 7, 8)},
    "ubench.metrics.bootstrap_ranking.x__last_at_most__mutmut_2":
        "the count of rows <= x instead of searchsorted at exactly SEARCH_ROW_MIN columns: the same index",
    **{f"ubench.metrics.bootstrap_ranking.x__last_at_most__mutmut_{k}": "np.array of Python ints is intp (int64)"
       for k in (12, 14)},
    "ubench.metrics.bootstrap_ranking.x__selective__mutmut_168":
        "share == risk admitted: the crossing (share lo - e_lo) / 0 is +-inf or NaN, never < hi, so nothing changes",
    "ubench.metrics.bootstrap_ranking.x__selective__mutmut_169":
        "inner = lo excluded: that coverage is the previous group's end, an end_ok candidate with the same E(k) / k",
    # metrics/report.py
    "ubench.metrics.report.xǁReportBuilderǁsplit_result__mutmut_20":
        "a worker's primary arrays handed over for every split: a builder given one other split holds None there, "
        "and absorb skips None",
    # metrics/intervals.py
    "ubench.metrics.intervals.x__unit_key__mutmut_4": "Python reads the codec name 'UTF-8' as 'utf-8'",
    **{f"ubench.metrics.intervals.xǁLabelledStatisticsǁ__init____mutmut_{k}":
       "another default cost_reduction ('XXmeanXX', 'MEAN'): linear() only asks == 'sum', so every other value "
       "is the mean" for k in (3, 4)},
    **{f"ubench.metrics.intervals.xǁLabelledStatisticsǁ__init____mutmut_{k}":
       "astype(None) is astype(float64)" for k in (11, 14, 179, 197)},
    **{f"ubench.metrics.intervals.xǁLabelledStatisticsǁ__init____mutmut_{k}":
       "detection and ranked first set to None: a full split sets both again below, and a shift split (not "
       "full) returns first but never reads them (jobs() and sorted_kernels ask self.full first)" for k in (92, 93)},
    "ubench.metrics.intervals.xǁLabelledStatisticsǁ__init____mutmut_140": "searchsorted's default side is 'left'",
    "ubench.metrics.intervals.xǁLabelledStatisticsǁ__init____mutmut_165":
        "getattr without a default on a SplitArrays: every field exists (None when absent), so it never raises",
    **{f"ubench.metrics.intervals.xǁLabelledStatisticsǁ__init____mutmut_{k}":
       "the confidence ranking rebuilt when it is already there: _Ranked.of of the same neg_confidence, the same "
       "order and tie groups" for k in (219, 220)},
    **{f"ubench.metrics.intervals.{f}__mutmut_{k}":
       "no harmonic table handed to weighted_selective: it builds _harmonic_table(n) itself for the replicate "
       "size n (every replicate sums to n), the same cumulative sums bit for bit (speed only)"
       for f, k in (("xǁLabelledStatisticsǁ__init__", 228), ("xǁLabelledStatisticsǁ_selective", 7),
                    ("xǁLabelledStatisticsǁ_selective", 12))},
    "ubench.metrics.intervals.xǁLabelledStatisticsǁ_selective__mutmut_15":
        "the detection kernel run for a score that is not detected: its values are computed but never read",
    "ubench.metrics.intervals.xǁLabelledStatisticsǁjobs__mutmut_3":
        "jobs of a shift split (not full): its ranked is empty, so the list is empty either way",
    **{f"ubench.metrics.intervals.{f}__mutmut_{k}":
       "the linear columns' product computed by LinearColumns.apply instead of resample: the same integer "
       "counts cast to float64 times the same matrix, the same bits" for f, ks in
       (("xǁLabelledStatisticsǁlinear", (3, 5)), ("x_resample", (80, 82, 84, 86))) for k in ks},
    **{f"ubench.metrics.intervals.xǁOODStatisticsǁ_detection__mutmut_{k}":
       "weighted_detection given its sort (order=) never reads the raw scores" for k in (3, 4)},
    **{f"ubench.metrics.intervals.x_resample__mutmut_{k}":
       "another number of pool threads (None: Python's default; threads ignored; 2 or 3 at least; one): every "
       "job computes its values from the same counts whichever thread runs it" for k in
       (10, 11, 12, 13, 18, 23, 24, 25, 87)},
    "ubench.metrics.intervals.x_resample__mutmut_37":
        "max(..., default=2) for no units: no statistic then reads a block, so its size is never used",
    "ubench.metrics.intervals.x_resample__mutmut_60":
        "kept counts read back as float64 instead of their integer dtype: small integers, exact in float64, and "
        "every kernel computes the same bits from them (test_counts_kept_from_one_call_to_the_next... compares "
        "exactly)",
    **{f"ubench.metrics.intervals.x_resample__mutmut_{k}":
       "how the sorted kernels' rows are split between jobs (one half empty, one job for the whole block, "
       "slice(None, h) for slice(0, h), at 2 or 3 rows), or which statistics run on whole blocks: every value "
       "is a function of its own replicate's counts (row by row), so any split of the rows gives the same values"
       for k in (99, 100, 101, 102, 104, 110, 115, 116, 117, 118, 119, 139, 145, 146, 147, 148, 149)},
    "ubench.metrics.intervals.x_encode_samples__mutmut_10": "Python reads the codec name 'ASCII' as 'ascii'",
    "ubench.metrics.intervals.x_decode_samples__mutmut_18": "astype(None) is astype(float64)",
    **{f"ubench.metrics.intervals.x_decode_samples__mutmut_{k}":
       "frombuffer's default dtype is float64 in the machine's byte order, little-endian on every machine "
       "ubench runs on (x86-64, arm64)" for k in (20, 22)},
    # metrics/calibration_debiased.py
    **{f"ubench.metrics.calibration_debiased.x__bin_sums__mutmut_{k}":
       "astype(None) is float64; searchsorted's default side is 'left'; bincount without minlength: the last bin "
       "(up to the edge 1.0) holds the largest confidence, so every bincount has length k anyway"
       for k in (7, 12, 16, 22, 28)},
    "ubench.metrics.calibration_debiased.x_debiased_squared_error__mutmut_15":
        "the placeholder count of bins under 2 samples (3 instead of 2): those bins' terms are masked to 0",
    # metrics/vector_scaling.py
    **{f"ubench.metrics.vector_scaling.x_fit_vector_scaling__mutmut_{k}":
       "L-BFGS-B picked by scipy for a bounded problem without method=, or named in lower case (scipy lower-cases "
       "it); np.asarray(res.x) of L-BFGS-B's float64 x is float64" for k in (52, 59, 65, 78, 80)},
    "ubench.metrics.vector_scaling.x_apply_vector_scaling__mutmut_9": "'X' is no dtype kind",
    "ubench.metrics.vector_scaling.x_apply_vector_scaling__mutmut_16":
        "astype(None) is float64 for the integer and float temperatures the dtype check lets through",
    **{f"ubench.metrics.vector_scaling.x_fit_vector_scaling__mutmut_{k}":
       "the fallback to the start is unreachable: L-BFGS-B only accepts steps of sufficient decrease, so the "
       "NLL at res.x, recomputed by the same function, is <= nll0 (and finite for validated input)"
       for k in (90, 91)},
    "ubench.metrics.vector_scaling.x__vector_nll_grad__mutmut_34":
        "einsum 'IJ,IJ->J' is the same contraction as 'ij,ij->j'",
    # archive_schema/validator.py
    **{f"ubench.archive_schema.validator.x_iter_logit_blocks__mutmut_{k}":
       "another number of rows per logits block (half of max_chunks_per_read cut otherwise, the sample count for "
       "the member count, a third of block_bytes, chunk_bounded_rows' default bound): the same values are checked "
       "block after block and the first bad one is named the same (block sizes only bound memory)"
       for k in (6, 8, 16, 19, 25, 26, 31, 32)},
    "ubench.archive_schema.validator.x_iter_logit_blocks__mutmut_40":
        "a logits block starting at every row: the first block holding the first bad value names it at the same "
        "sample (start + i), and the check stops there (only slower)",
    "ubench.archive_schema.validator.x_iter_logit_blocks__mutmut_42":
        "blocks running to the end of the split: the first bad value is found at the same sample (more memory)",
    **{f"ubench.archive_schema.validator.x_check_split_values__mutmut_{k}":
       "another block size for probs (the sample count for the member count, iter_blocks' or read_all's default "
       "chunk bound or block bytes): the same values checked in the same order, the same first bad one"
       for k in (13, 18, 19, 61, 70)},
    "ubench.archive_schema.validator.x_check_split_values__mutmut_96": "numpy reads kind='STABLE' as 'stable'",
    **{f"ubench.archive_schema.validator.x_check_split_values__mutmut_{k}":
       "the probs' chunk cache of a logits split not dropped after it (the `finally` clause): memory only"
       for k in (126, 127)},
    # metrics/temperature_solver.py
    **{f"ubench.metrics.temperature_solver.x__prep_logits__mutmut_{k}": "np.empty's default dtype is float64"
       for k in (4, 6)},
    **{f"ubench.metrics.temperature_solver.{f}__mutmut_{k}":
       "the rows of a block (1 or 2 at least, or 1 when the step is dropped): each row's numbers are computed "
       "alone, the same in any block" for f, k in (("x__row_cumulants", 12), ("x__row_cumulants", 32),
                                                   ("x__scaled_row_scores", 10), ("x__scaled_row_scores", 25))},
    "ubench.metrics.temperature_solver.x__row_cumulants__mutmut_6":
        "one more raw-moment row, never written and never read (the cumulants use rows 0..order)",
    "ubench.metrics.temperature_solver.x__scaled_row_scores__mutmut_60":
        "einsum labels in upper case ('IJ,IJ->I') name the same contraction",
    "ubench.metrics.temperature_solver.x__mean_cumulants__mutmut_24": "astype(None) is astype(float64)",
    **{f"ubench.metrics.temperature_solver.x__softmax_scaled__mutmut_{k}":
       "the max over every axis instead of the classes': every row of s has max 0 and beta > 0, so every row of "
       "beta * s, and the whole array, has max 0" for k in (10, 12)},
    "ubench.metrics.temperature_solver.x__root_from_cumulants__mutmut_2":
        "every coefficient of the model halved (fact starts at 2): the same Newton iterates, and each certificate "
        "test compares two quantities that both halve (tol = rtol * beta * coef[1]); halving is exact in binary",
    "ubench.metrics.temperature_solver.x__fit_scalar__mutmut_28":
        "beta >= 1.0 instead of > 1.0 at a bound: _check_bounds keeps t_min < 1 < t_max, so a bound's beta is never 1",
    "ubench.metrics.temperature_solver.x__shifted_pass__mutmut_29":
        "z1 allocated when with_t1 is False: it is never written or read then (memory only)",
    **{f"ubench.metrics.temperature_solver.{f}__mutmut_{k}":
       "blocks of at least 2 rows (only past 2^15 or 2^17 classes) or a block starting at every row: each row's "
       "numbers are computed alone, the same in any block (a row written twice gets the same value twice)"
       for f, k in (("x__shifted_pass", 8), ("x__scaled_row_scores_multi", 12), ("x__scaled_row_scores_multi", 27))},
    # metrics/protocol.py
    **{f"ubench.metrics.protocol.{f}__mutmut_{k}":
       "beta >= 1.0 instead of > 1.0 at a bound: _check_bounds keeps t_min < 1 < t_max, so a bound's beta is never 1"
       for f, k in (("x__member_fit_half", 39), ("x__post_fold_fits", 154))},
    **{f"ubench.metrics.protocol.x__post_fold_fits__mutmut_{k}":
       "the start of a safeguarded Newton solve on the post NLL, which is convex in 1/T (log-sum-exp minus a linear "
       "term): the same optimum from any start, to the solver's tolerance" for k in (48, 144, 145)},
    **{f"ubench.metrics.protocol.x__post_fold_fits__mutmut_{k}":
       "every coefficient of the folds' Taylor models scaled by one positive factor (2, or the row count squared): "
       "the same roots, and the certificate's tolerance rtol * beta * g1 scales with them" for k in (56, 57, 62, 63)},
    "ubench.metrics.protocol.x__post_fold_fits__mutmut_53":
        "one more row of weights, left zero and never read (g[i] for the folds, g[-1] the all-rows row)",
    "ubench.metrics.protocol.x__post_fold_fits__mutmut_76": "_row_cumulants' default order is 5, _CUMULANT_ORDER",
    "ubench.metrics.protocol.x__post_fold_fits__mutmut_114":
        "the re-expansion point (the last fold's estimated optimum instead of the whole set's): every fold is then "
        "certified from it or fitted exactly, so only the number of passes could change, and in the sets of "
        "tests/metrics/test_protocol_fold_fit_path.py (which counts them) it does not",
    "ubench.metrics.protocol.x__member_halves__mutmut_4": "s_y is always 2-D: shape[+1] is shape[-1]",
    "ubench.metrics.protocol.x__member_heldout_nll__mutmut_9":
        "the default order 2 only adds derivatives; element [0], the NLL, is the same",
    "ubench.metrics.protocol.x__post_cv_rows__mutmut_61": "s is not read when the scores are given",
    **{f"ubench.metrics.protocol.x__label_values_blocked__mutmut_{k}":
       "the rows of a block (any step, or every block running to the end): each row's label value is read alone"
       for k in (9, 11, 12, 13, 19, 21)},
    **{f"ubench.metrics.protocol.{f}__mutmut_{k}": "dtype=None and astype(None) are float64"
       for f, k in (("x__prefix_curves", 31), ("x__prefix_curves", 33), ("x__top1_arrays", 8), ("x__top1_arrays", 11))},
    **{f"ubench.metrics.protocol.x_member_curves__mutmut_{k}":
       "np.arange of Python ints is int64 on numpy 2 (dtype=None or dropped)" for k in (87, 90)},
    # metrics/report_sections.py (helper rs40's analysis)
    **{f"ubench.metrics.report_sections.{f}__mutmut_{k}":
       "smoothing 0 taken as smoothing: _smooth(p, 0) is a float64 copy of the same values"
       for f, k in (("x_calibrated_reliability", 8), ("x_calibrated_reliability", 32), ("x_calibrated_section", 7),
                    ("x_calibrated_section", 29), ("x_calibrators_section", 7), ("x_member_curves_section", 3))},
    **{f"ubench.metrics.report_sections.{f}__mutmut_{k}": "astype(None) and dtype=None are float64"
       for f, k in (("x_calibrated_reliability", 45), ("x__reliability_from_rows", 2), ("x_core_metrics", 2),
                    ("x_core_metrics", 61), ("x_misclassification_section", 2), ("x_peer_section", 14),
                    ("x_peer_section", 17), ("x_peer_section", 32), ("x_peer_section", 77), ("x__float_list", 3),
                    ("x__float_list", 5), ("xǁSplitAccumulatorǁadd_member_rows", 29),
                    ("xǁSplitAccumulatorǁadd_member_rows", 31), ("xǁSplitAccumulatorǁadd_member_rows", 45),
                    ("xǁSplitAccumulatorǁadd_member_rows", 47))},
    **{f"ubench.metrics.report_sections.x_ood_section__mutmut_{k}":
       "the OOD labels as float64 instead of int8: read only as a 0/1 mask" for k in (4, 6, 8, 10)},
    **{f"ubench.metrics.report_sections.xǁSplitAccumulatorǁadd_member_rows__mutmut_{k}": why
       for k, why in ((37, "votes stored as floats are exact integers, only sorted and compared"),
                      (39, "votes stored as floats are exact integers, only sorted and compared"),
                      (74, "axis=+1 of a 2-D array is axis=-1"),
                      (124, "the partial-row marker is reset before it is read"))},
    **{f"ubench.metrics.report_sections.x_ood_roc_curves__mutmut_{k}":
       "the sort kind: ties are collapsed to their last index, so their order does not matter" for k in (22, 24, 27)},
    **{f"ubench.metrics.report_sections.x_ood_roc_curves__mutmut_{k}":
       "the guard at the last grid point, where the weight is 0 (the grid ends at FPR 1, the last FPR)"
       for k in (84, 86, 94)},
    **{f"ubench.metrics.report_sections.xǁSplitAccumulatorǁ_mean_rows__mutmut_{k}":
       "when the scratch block is (re)allocated and how many rows it has: it always has at least the range's rows, "
       "and only its first stop - start rows are used" for k in (4, 5, 6, 9)},
    "ubench.metrics.report_sections.x_dee_cll__mutmut_19": "the bins only change the ECE, which dee_cll discards",
    **{f"ubench.metrics.report_sections.x_calibrators_section__mutmut_{k}":
       "the 'fixed' ODIR default renamed: only 'cv' changes what is done" for k in (1, 2)},
    **{f"ubench.metrics.report_sections.{f}__mutmut_{k}":
       "the 'aps' default renamed: the conformal kernel takes anything but 'thr'/'raps' as APS, and Protocol "
       "validates the name" for f, k in (("x_in_domain_section", 3), ("x_in_domain_section", 4),
                                        ("x_shift_split_section", 1), ("x_shift_split_section", 2))},
    **{f"ubench.metrics.report_sections.x_decision_section__mutmut_{k}":
       "the cost matrix's dtype: _check_cost casts a numeric matrix to float64" for k in (10, 12)},
    "ubench.metrics.report_sections.x_entropy_histogram__mutmut_27":
        "a clip to edges[-2] instead of edges[-1] still lands in the last bin",
    **{f"ubench.metrics.report_sections.x_peer_section__mutmut_{k}":
       "a clip of the confidence to [0, 1]: a validated mean's confidence is already there" for k in (27, 28, 35)},
    "ubench.metrics.report_sections.x_rejection_section__mutmut_17": "linspace's endpoint=None behaves as False",
    # serve/app.py
    **{f"ubench.serve.app.x__html__mutmut_{k}":
       "a security header's name in another case: HTTP field names are case-insensitive (RFC 9110, 5.1), and "
       "starlette sends them lower-cased whatever the case given" for k in (9, 10, 12, 13, 17, 18)},
    "ubench.serve.app.x__team_of__mutmut_7": "headers.get('AUTHORIZATION'): starlette's Headers look a name up lower-cased",
    "ubench.serve.app.x__team_of__mutmut_8":
        "a missing Authorization header read as 'XXXX' instead of '': neither starts with 'bearer ', so no team",
    "ubench.serve.app.x__hidden__mutmut_4":
        "now <= hidden_until instead of <: they differ only in the one microsecond where now equals it",
    **{f"ubench.serve.app.x_create_app__mutmut_{k}":
       "the board's version or status counts re-read more often (never kept, or kept one tick less): every read "
       "returns the database's current value, which the cache only saves a query for" for k in (49, 50, 53, 55)},
    **{f"ubench.serve.app.x_create_app__mutmut_{k}":
       "the page cache never hits (cleared on every call, its version or a page stored under another key or as "
       "None, looked up as None, or never stored) or holds one page more (<= 256, < 257): a miss reads the page "
       "from the stored board, the same bytes a hit would have served for that version (only slower)"
       for k in (68, 69, 70, 72, 73, 74, 75, 76, 110, 111, 112, 114, 115, 116)},
    **{f"ubench.serve.app.x_create_app__mutmut_{k}":
       "the board version's key in the recent-reads cache (None, 'XXversionXX', 'VERSION' for 'version'): any key "
       "other than the counts' keeps the two values apart" for k in (59, 65, 66)},
    **{f"ubench.serve.app.x__leaderboard__mutmut_{k}":
       "the status counts' key in the recent-reads cache (None, 'XXcountsXX', 'COUNTS' for 'counts'): any key "
       "other than the version's keeps the two values apart" for k in (71, 77, 78)},
    "ubench.serve.app.x__leaderboard__mutmut_51":
        "board_page(html=None): falsy like False, so the JSON rows, cached under a key of their own",
    "ubench.serve.app.x__leaderboard__mutmut_112":
        "media_type 'APPLICATION/JSON': media type names are case-insensitive (RFC 9110, 8.3.1), and starlette adds "
        "a charset to text/ types only, so neither answer gets one",
    "ubench.serve.app.x__report_page__mutmut_44": "read_text(encoding='UTF-8'): codec names are case-insensitive",
    "ubench.serve.app.x__submit__mutmut_41":
        "stored = '' before the try: the only call that raises SQLAlchemyError (complete_upload) comes after "
        "receive_upload set stored, so the 'stored is not None' branch never sees the initial value",
    **{f"ubench.serve.app.x__submit__mutmut_{k}":
       "unlink(missing_ok=None/False): a missing file raises FileNotFoundError, an OSError the enclosing "
       "contextlib.suppress(SQLAlchemyError, OSError) swallows: the same outcome" for k in (121, 122)},
    "ubench.serve.app.x__submit__mutmut_33":
        "a reservation's ttl one second longer (upload timeout + 61 s): it only decides when the reservation of "
        "a server killed mid-upload stops counting, one second later",
    **{f"ubench.serve.app.x__status__mutmut_{k}":
       "the outcome's default None instead of {}: every stored record has an outcome (Database.finish stores "
       "record['outcome']['status']), and without a record only a rejection's findings are read, from the row"
       for k in (58, 60)},
    **{f"ubench.scoring.reference.x_read_reference__mutmut_{k}":
       "required=None instead of False for an optional attribute: both falsy, the same branch"
       for k in (31, 45, 74, 111, 127, 209, 223, 258, 272)},
    "ubench.scoring.reference.x_write_reference__mutmut_8":
        "open_archive(check_values=None): the validator only asks 'check_values and ...', None is falsy like False",
    "ubench.scoring.reference.x__read_ints__mutmut_11":
        "dtype.kind not in 'XXiuXX': 'X' is no dtype kind, so the same kinds pass",
    "ubench.scoring.reference.x__attr__mutmut_15":
        "skips the bytes branch: archive_schema.scan.read_attr returns text as str (strict UTF-8), never bytes",
    "ubench.scoring.reference.x__attr__mutmut_17":
        "skips .item() of numpy scalars: every numeric attribute is converted by its caller (int(), float()) and "
        "a numpy scalar in a text attribute compares unequal to every role or kind either way",
}

#: Written as ``<shard>/site/sitecustomize.py``, on the PYTHONPATH of mutmut and so of the processes the tests
#: start (``ubench serve``, ``python -m ubench.cli``): PYTHONPATH's ``<shard>/mutants`` makes them import mutmut's
#: mutated tree, whose trampolines read ``MUTANT_UNDER_TEST`` (inherited) at call time, so a mutant is active in
#: them too. During mutmut's stats run a child cannot report its hits itself (mutmut's state lives in the test
#: process): this appends each function it reaches to ``$UBENCH_MUTATION_HITS/<pid>``, once per test (the test
#: process bumps the mtime of ``$UBENCH_MUTATION_HITS/epoch`` after each test), and tests/conftest.py adds them to
#: the test that ran.
#:
#: mutmut mutates top-level functions only: a route of serve/app.py is a closure inside ``create_app``, whose
#: trampoline runs once, when the server starts. A test that only sends requests to a server an earlier test
#: started (a module-scoped fixture) would then not count as reaching ``create_app``, and its mutants would not
#: run it. In the shards of :data:`NESTED_HITS` the children also report, through a profile hook (stats run only:
#: it slows every call), each call of a function nested in a mutated one (``x_f__mutmut_orig.<locals>.g``) as a
#: hit of that one, once per test.
SITECUSTOMIZE = """\
import os

_HITS = os.environ.get("UBENCH_MUTATION_HITS")
if _HITS and os.environ.get("MUTANT_UNDER_TEST") == "stats":
    import mutmut.mutation.trampoline as _trampoline

    _seen = set()

    def _record(name, caller=None):
        try:
            key = (os.stat(os.path.join(_HITS, "epoch")).st_mtime_ns, name)
        except OSError:
            key = (None, name)
        if key not in _seen:
            _seen.add(key)
            with open(os.path.join(_HITS, str(os.getpid())), "a") as f:
                f.write(name + "\\n")

    _trampoline.record_trampoline_hit = _record

    if os.environ.get("UBENCH_MUTATION_NESTED"):
        import sys
        import threading

        _outer = {}  # code object -> the mangled name of the mutated function it is nested in, or ""

        def _profile(frame, event, arg):
            if event != "call":
                return
            code = frame.f_code
            name = _outer.get(code)
            if name is None:
                head, sep, _ = code.co_qualname.partition("__mutmut_orig.<locals>.")
                name = _outer[code] = f"{frame.f_globals.get('__name__', '')}.{head}" if sep else ""
            if name:
                _record(name)

        sys.setprofile(_profile)
        threading.setprofile(_profile)
"""

#: Shards whose children report calls of nested functions (closures) as hits of the mutated function around
#: them (see :data:`SITECUSTOMIZE`): serve/app.py's routes are closures of ``create_app``.
NESTED_HITS = {"serve"}

KILLED = {1, 3}
TIMEOUT = {36, -24, 24, 152, 255}


def _unit_of(shard: str, module: str) -> str:
    return "ubench." + module[: -len(".py")].replace("/", ".")


def _repo_files() -> set[str]:
    """The repository's files (git-tracked and untracked, not ignored), repository-relative."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    return {f for f in listed if f and (ROOT / f).is_file()}


def _also_copy(units: list[str]) -> list[str]:
    """What mutmut copies into its tree besides the mutated units: beside each folder on a unit's path, every
    other file and folder of the repository (folders whole), under the staging's ``ubench/``.

    Not the whole ``ubench`` folder: mutmut copies it over its mutants on every run, which makes it re-mutate
    every unit each time (minutes for metrics/); this way a unit is re-mutated only when its source changed."""
    units = set(units)
    folders = {str(Path(u).parent) for u in units} | {str(p) for u in units for p in Path(u).parents}
    out = set()
    for rel in _repo_files():
        if rel in units:
            continue
        parts = Path(rel).parts
        # the shortest prefix of rel that is not a folder on a unit's path (its parent is one, or the root)
        for k in range(1, len(parts) + 1):
            prefix = str(Path(*parts[:k]))
            if prefix not in folders:
                out.add(prefix)
                break
    return sorted(f"ubench/{p}" for p in out)


def _sync(dest: Path) -> None:
    """Copy the repository's files to ``dest`` (git-tracked and untracked, not ignored), keeping mtimes, and drop
    files that left the repository; unchanged files (same size and mtime) are not rewritten."""
    wanted = _repo_files()
    for rel in wanted:
        src, dst = ROOT / rel, dest / rel
        st = src.stat()
        if dst.exists() and dst.stat().st_size == st.st_size and dst.stat().st_mtime_ns == st.st_mtime_ns:
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    for path in dest.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts and str(path.relative_to(dest)) not in wanted:
            path.unlink()


def _toml_list(items) -> str:
    return "[" + ", ".join(json.dumps(str(x)) for x in items) + "]"


def _write_config(shard_dir: Path, modules: list[str], tests: list[str]) -> None:
    base = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]
    # also_copy: the rest of the package and its tests (see _also_copy)
    conf = dict(base, source_paths=[f"ubench/{m}" for m in modules], also_copy=_also_copy(modules),
                pytest_add_cli_args_test_selection=[f"ubench/{t}" for t in tests])
    lines = ["[tool.mutmut]"]
    for key, value in conf.items():
        lines.append(f"{key} = {_toml_list(value) if isinstance(value, list) else json.dumps(value)}")
    (shard_dir / "pyproject.toml").write_text("\n".join(lines) + "\n")


def _sha(module: str) -> str:
    return hashlib.sha256((ROOT / module).read_bytes()).hexdigest()


def _verdicts(shard_dir: Path, module: str) -> dict[str, int | None]:
    meta = _meta_path(shard_dir, module)
    return json.loads(meta.read_text())["exit_code_by_key"] if meta.exists() else {}


#: Every unit's verdicts, kept in the repository so that a run on a fresh machine (an empty workdir) re-tests only
#: what changed: unit -> function (mutmut's key) -> {"hash": mutmut's hash of its source, "codes": exit code of
#: mutant k + 1 (None: not checked), "seconds": its test time}. Restored into mutmut's table only where the
#: function's hash is unchanged, as mutmut itself keeps a verdict; tests added since can only turn a survivor into
#: a kill, which ``--survivors`` re-tests.
VERDICTS = RESULTS_DIR / "mutation" / "verdicts.json"


def _meta_path(shard_dir: Path, module: str) -> Path:
    return shard_dir / "mutants" / "ubench" / (module + ".meta")


def _split_key(module: str, key: str) -> tuple[str, int]:
    """'ubench.serve.app.x__page__mutmut_12' -> ('x__page', 12)."""
    function, number = key.removeprefix(_unit_of("", module) + ".").rsplit("__mutmut_", 1)
    return function, int(number)


def _load_verdicts() -> dict:
    return json.loads(VERDICTS.read_text()) if VERDICTS.exists() else {}


def _save_verdicts(shard_dir: Path, module: str) -> None:
    """Record the unit's verdicts and test times from mutmut's table (the unit's entry replaced; a mutant the
    table has no verdict for keeps its recorded one while its function's hash is unchanged)."""
    meta = json.loads(_meta_path(shard_dir, module).read_text())
    everything = _load_verdicts()
    recorded = everything.get(module, {})
    functions: dict[str, dict] = {}
    for key, code in sorted(meta["exit_code_by_key"].items(), key=lambda kv: _split_key(module, kv[0])):
        function, number = _split_key(module, key)
        f = functions.setdefault(function, {"hash": meta["hash_by_function_name"].get(function), "codes": [],
                                            "seconds": []})
        f["codes"] += [None] * (number - len(f["codes"]))
        f["seconds"] += [None] * (number - len(f["seconds"]))
        seconds = meta.get("durations_by_key", {}).get(key)
        old = recorded.get(function)
        if code is None and old is not None and old["hash"] == f["hash"] and number <= len(old["codes"]):
            code, seconds = old["codes"][number - 1], old["seconds"][number - 1]
        f["codes"][number - 1] = code
        f["seconds"][number - 1] = None if seconds is None else round(seconds, 1)
    everything[module] = functions
    VERDICTS.parent.mkdir(parents=True, exist_ok=True)
    VERDICTS.write_text(json.dumps(everything, sort_keys=True, separators=(",", ":")) + "\n")


def _restore_verdicts(shard_dir: Path, module: str) -> int:
    """Fill mutmut's table with the recorded verdicts of the functions whose hash is unchanged, for the mutants it
    has none for; returns how many were filled."""
    path = _meta_path(shard_dir, module)
    recorded = _load_verdicts().get(module)
    if not (recorded and path.exists()):
        return 0
    meta = json.loads(path.read_text())
    durations = meta.setdefault("durations_by_key", {})
    filled = 0
    for key, code in meta["exit_code_by_key"].items():
        function, number = _split_key(module, key)
        f = recorded.get(function)
        if (code is not None or f is None or f["hash"] != meta["hash_by_function_name"].get(function)
                or number > len(f["codes"]) or f["codes"][number - 1] is None):
            continue
        meta["exit_code_by_key"][key] = f["codes"][number - 1]
        if f["seconds"][number - 1] is not None:
            durations[key] = f["seconds"][number - 1]
        filled += 1
    path.write_text(json.dumps(meta))
    return filled


def _row(shard: str, module: str, codes: dict, minutes: float, before: list[float]) -> dict:
    equivalent = [k for k in codes if k in EQUIVALENT]
    counted = {k: v for k, v in codes.items() if k not in EQUIVALENT}
    killed = sum(v in KILLED for v in counted.values())
    survived = sorted(k for k, v in counted.items() if v == 0)
    no_tests = sum(v in (5, 33) for v in counted.values())
    timeout = sum(v in TIMEOUT for v in counted.values())
    unchecked = sum(v is None for v in counted.values())
    return {"module": module, "shard": shard, "mutants": len(codes), "equivalent": len(equivalent),
            "killed": killed, "survived": len(survived), "no_tests": no_tests, "timeout": timeout,
            "not_checked": unchecked,
            "score": round(killed / (len(counted) - unchecked), 4) if len(counted) > unchecked else None,
            "minutes": round(minutes, 1), "load_before": before[0], "load_after": loadavg()[0],
            "date": time.strftime("%Y-%m-%d", time.gmtime()), "sha256": _sha(module)[:16],
            "survivors": survived}


def _load_rows() -> list[dict]:
    return json.loads(RESULTS.read_text())["rows"] if RESULTS.exists() else []


def _summary(rows: list[dict]) -> list[dict]:
    out = []
    for area, (folder, target) in TARGETS.items():
        mine = [r for r in rows if r["module"].startswith(folder)]
        all_units = sorted(m for modules, _ in SHARDS.values() for m in modules if m.startswith(folder))
        units = len(all_units)
        counted = sum(r["mutants"] - r["equivalent"] - r["not_checked"] for r in mine)
        unchecked = sum(r["not_checked"] for r in mine)
        killed = sum(r["killed"] for r in mine)
        score = killed / counted if counted else None
        result = (f"{killed} of {counted} killed ({score:.1%}) in {len(mine)} of {units} modules"
                  + (f", {unchecked} mutants not yet checked" if unchecked else "")
                  if counted else f"not run: python bench/bench_mutation.py {all_units[0]}")
        complete = len(mine) == units and not unchecked
        out.append({"what": f"mutants killed in {area}", "workload": "mutmut, non-equivalent mutants",
                    "result": result, "target": f">= {target:.0%}", "met": score >= target if complete else None})
    return out


def _generate(shard_dir: Path, env: dict, max_children: int) -> None:
    """mutmut's mutant generation alone (its ``run`` starts with the same steps), so that each unit's verdict table
    (``<module>.meta``) is current before its mutants are chosen: a function whose source changed has its
    verdicts reset to None there, the others keep theirs."""
    code = ("import os; from mutmut.__main__ import copy_src_dir, copy_also_copy_files, create_mutants; "
            f"os.makedirs('mutants', exist_ok=True); copy_src_dir(); copy_also_copy_files(); create_mutants({max_children})")
    res = subprocess.run([sys.executable, "-c", code], cwd=shard_dir, env=env, stdout=subprocess.DEVNULL)
    if res.returncode != 0:
        raise SystemExit(f"mutmut could not generate the mutants in {shard_dir} (exit {res.returncode})")


def _names_to_run(module: str, codes: dict, *, force: bool, survivors: bool) -> list[str]:
    """The mutant names (or one glob for the whole unit) to pass to ``mutmut run``.

    Every unit of a shard is mutated (trampolined) in every run, so that one stats run records which tests reach
    every function of the shard; a run is then restricted to one unit by naming its mutants. mutmut re-tests a
    named mutant even when it has a verdict, so an incremental run names only those without one (new, changed or
    interrupted; not those in :data:`EQUIVALENT`), ``--survivors`` those that survived, met no test or timed out,
    ``--force`` all of them (the glob)."""
    glob = _unit_of("", module) + ".*"
    if force:
        return [glob]
    if survivors:  # survived, met no test or timed out (all not killed), and not judged equivalent
        return sorted(k for k, v in codes.items() if (v in (0, 5, 33) or v in TIMEOUT) and k not in EQUIVALENT)
    # mutants judged equivalent are not tested (they do not count); a serve mutant that survives runs every
    # server test (minutes)
    todo = sorted(k for k, v in codes.items() if v is None and k not in EQUIVALENT)
    return [glob] if todo and len(todo) == len(codes) else todo


def _run_shard(shard: str, modules: list[str], workdir: Path, max_children: int, recorder: Recorder,
               rows: list[dict], *, force: bool = False, collect: bool = False, survivors: bool = False) -> None:
    units, tests = SHARDS[shard]
    shard_dir = workdir / shard
    site, hits = shard_dir / "site", shard_dir / "hits"
    env = dict(os.environ, UBENCH_MUTATION="1", HYPOTHESIS_PROFILE="mutation", PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=os.pathsep.join([str(shard_dir / "mutants"), str(site)]), UBENCH_MUTATION_HITS=str(hits),
               **({"UBENCH_MUTATION_NESTED": "1"} if shard in NESTED_HITS else {}))
    if not collect:
        site.mkdir(parents=True, exist_ok=True)
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
        hits.mkdir(exist_ok=True)
        _sync(shard_dir / "ubench")
        _write_config(shard_dir, units, tests)
        # mutmut's test statistics (which tests reach which function) are collected in full once, then only for
        # new tests: a function added or changed since keeps the tests that reached its old version (or none), so
        # its mutants meet too few tests and survive untested. A stats file from another set of source paths, or
        # from another version of a unit's source, is dropped: mutmut then collects them anew (minutes).
        marker, stats = shard_dir / "source_paths.json", shard_dir / "mutants" / "mutmut-stats.json"
        sources = {m: _sha(m) for m in units}
        if not marker.exists() or json.loads(marker.read_text()) != sources:
            stats.unlink(missing_ok=True)
            marker.write_text(json.dumps(sources))
        _generate(shard_dir, env, max_children)
        for module in units:
            filled = _restore_verdicts(shard_dir, module)
            if filled:
                print(f"[{shard}] {module}: {filled} verdicts restored from {VERDICTS.relative_to(ROOT)}", flush=True)
    before = loadavg()
    if not collect:
        # One mutmut run for all the chosen units: its clean run of their tests (and the check that a forced
        # failure fails) then happens once, not once per unit.
        names = [n for m in modules
                 for n in _names_to_run(m, _verdicts(shard_dir, m), force=force, survivors=survivors)]
        print(f"[{shard}] {', '.join(modules)}: {len(names)} mutants (or globs) to test", flush=True)
        if names:
            res = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", str(max_children),
                                  *names], cwd=shard_dir, env=env)
            if res.returncode != 0:
                raise SystemExit(f"mutmut failed on {', '.join(modules)} (exit {res.returncode}); see its output "
                                 f"above (record what it did with --collect)")
    for module in modules:
        codes = _verdicts(shard_dir, module)
        if not codes:
            print(f"[{shard}] {module}: no verdicts in {shard_dir} yet", flush=True)
            continue
        _save_verdicts(shard_dir, module)
        row = _row(shard, module, codes, _minutes(shard_dir, module, max_children), before)
        previous = next((r for r in _load_rows() if r["module"] == module), None)
        if collect and previous is not None and all(previous[k] == row[k] for k in ("sha256", "killed", "survived",
                                                                                  "no_tests", "not_checked")):
            # nothing ran: keep the last run's load and date (not those of a run over another version of the source,
            # nor those of an earlier run when this one, on a fresh work folder, decided other mutants)
            row.update({k: previous[k] for k in ("load_before", "load_after", "date")})
        # merge into the rows on disk now: another shard may have written its rows since this run started
        rows[:] = sorted([r for r in _load_rows() if r["module"] != module] + [row],
                         key=lambda r: (r["shard"], r["module"]))
        recorder.write(rows, _summary(rows), settings={"max_children": max_children, "tool": "mutmut " + _mutmut_version()})
        print(f"[{shard}] {module}: score {row['score']} ({row['killed']} killed, {row['survived']} survived, "
              f"{row['no_tests']} without tests, {row['not_checked']} not checked)", flush=True)


def _minutes(shard_dir: Path, module: str, max_children: int) -> float:
    """The unit's mutant-testing time: mutmut's wall time per mutant (its last verdict), summed, over the
    ``max_children`` run at once; without the shard's shared stats and clean runs."""
    meta = _meta_path(shard_dir, module)
    durations = json.loads(meta.read_text()).get("durations_by_key", {}) if meta.exists() else {}
    return sum(durations.values()) / max_children / 60


def _mutmut_version() -> str:
    from importlib.metadata import version

    return version("mutmut")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("modules", nargs="*", help="repository-relative module paths (default: every stale unit)")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/ubench-mutation"))
    ap.add_argument("--max-children", type=int, default=2)
    ap.add_argument("--force", action="store_true", help="rerun units whose source did not change")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--survivors", action="store_true",
                    help="re-test only the mutants that survived, met no test or timed out (after writing tests that "
                         "kill them)")
    ap.add_argument("--collect", action="store_true",
                    help="only record the verdicts mutmut has so far (an interrupted run), without running it")
    args = ap.parse_args(argv)
    rows = _load_rows()
    last = {r["module"]: r for r in rows}
    if args.list:
        for shard, (modules, tests) in SHARDS.items():
            for m in modules:
                r = last.get(m)
                state = "never run" if r is None else (f"score {r['score']}, {r['mutants']} mutants"
                                                       + ("" if r["sha256"] == _sha(m)[:16] else ", source changed"))
                print(f"{shard:10s} {m:40s} {state}")
        return 0
    known = {m: shard for shard, (modules, _) in SHARDS.items() for m in modules}
    unknown = [m for m in args.modules if m not in known]
    if unknown:
        raise SystemExit(f"not a mutation unit: {', '.join(unknown)} (see --list)")
    chosen = args.modules or [m for m in known if known[m] != "serve"]
    if not (args.force or args.collect or args.survivors):
        chosen = [m for m in chosen if m not in last or last[m]["sha256"] != _sha(m)[:16] or args.modules]
    recorder = Recorder(__file__, "mutmut")
    for shard in SHARDS:
        mine = [m for m in chosen if known[m] == shard]
        if mine:
            _run_shard(shard, mine, args.workdir, args.max_children, recorder, rows, force=args.force,
                       collect=args.collect, survivors=args.survivors)
    return 0


if __name__ == "__main__":
    sys.exit(main())
