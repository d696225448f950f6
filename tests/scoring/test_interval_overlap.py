# SPDX-License-Identifier: MIT
"""Resampling a batch of splits beside the next split (``IntervalCollector.overlap``, issue #26 item 9): the
same report as resampling after each batch, the replicate values taken in, an error on the resampling thread
raised by the scoring, and no overlap for splits too large for it (``memory_plan.OVERLAP_MAX_MEAN_BYTES``)."""

from __future__ import annotations

import json

import numpy as np

import pytest

from scoring_archives import build_archive
from ubench.metrics import report_intervals
from ubench.scoring import memory_plan
from ubench.scoring.protocols import Protocol
from ubench.scoring.score import run_score

FAST = Protocol.preset("pitfalls").replace(bootstrap=200)
SHIFTS = tuple(((("blur", float(k)), 2.0 - 0.3 * k)) for k in range(1, 6))


@pytest.fixture()
def threads(monkeypatch):
    """The batches resampled on a thread of their own, counted."""
    started = []

    class Counted(report_intervals._Resampling):
        def __init__(self, *args):
            started.append(args[1].keys())
            super().__init__(*args)

    monkeypatch.setattr(report_intervals, "_Resampling", Counted)
    return started


def test_overlap_gives_the_report_of_resampling_after_each_batch(tmp_path, threads, monkeypatch):
    """An in-domain, an OOD and 5 shift splits: the in-domain and the OOD split (sorted kernels) each on their
    own thread as soon as they are scored, the shift splits in batches of 2, the last one at the end. The report,
    intervals included, equals the one scored with the overlap off, byte for byte."""
    path, _ = build_archive(tmp_path / "a.h5", n=300, shifts=SHIFTS)
    overlapped = run_score(path, protocol=FAST)
    assert [sorted(b) for b in threads] == [["test"], ["ood"], ["blur_1", "blur_2"], ["blur_3", "blur_4"]]
    monkeypatch.setattr(memory_plan, "OVERLAP_MAX_MEAN_BYTES", 0)
    threads.clear()
    after = run_score(path, protocol=FAST)
    assert threads == []
    assert json.dumps(overlapped) == json.dumps(after)
    assert set(overlapped["intervals"]["splits"]) == {"test", "ood", *(f"blur_{k}" for k in range(1, 6))}


def test_an_error_on_the_resampling_thread_is_raised_by_the_scoring(tmp_path, threads, monkeypatch):
    """The second batch fails on its thread: the scoring raises that error (not a report without its
    intervals, not a hang)."""
    path, _ = build_archive(tmp_path / "a.h5", n=120, shifts=SHIFTS)
    calls = []
    resample = report_intervals.resample

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise FloatingPointError("replicate 7 of the second batch")
        return resample(*args, **kwargs)

    monkeypatch.setattr(report_intervals, "resample", failing)
    with pytest.raises(FloatingPointError, match="second batch"):
        run_score(path, protocol=FAST)
    assert len(threads) >= 2


def test_the_scoring_goes_on_while_a_batch_is_resampled_and_batches_run_one_at_a_time(tmp_path, monkeypatch):
    """The in-domain split's resampling is held until a later split is being scored: the scoring does not wait
    for it (with one batch out of IN_FLIGHT = 2, the OOD split's batch is handed off behind it), and no two
    batches are resampled at the same time (each thread waits for the one before)."""
    import threading

    path, _ = build_archive(tmp_path / "a.h5", n=200, shifts=SHIFTS)
    scoring_later = threading.Event()
    active, most, released = [], [], []
    resample = report_intervals.resample

    def held(statistics, *args, **kwargs):
        active.append(1)
        most.append(len(active))
        try:
            if "test" in statistics:
                released.append(scoring_later.wait(timeout=120))
            return resample(statistics, *args, **kwargs)
        finally:
            active.pop()

    def progress(task, done, total):
        if task == "blur_1":
            scoring_later.set()

    monkeypatch.setattr(report_intervals, "resample", held)
    report = run_score(path, protocol=FAST, progress=progress)
    assert released == [True]
    assert max(most) == 1
    assert report["intervals"]["splits"]["test"]["accuracy"] is not None


def test_splits_too_large_for_the_overlap_wait_for_their_batch(tmp_path, threads, monkeypatch):
    """With the threshold just below the splits' mean (N x C float64), every batch is resampled on the scoring
    thread; just above, on a thread of its own."""
    path, _ = build_archive(tmp_path / "a.h5", n=200, c=5, shifts=SHIFTS)
    mean = 8 * 200 * 5
    monkeypatch.setattr(memory_plan, "OVERLAP_MAX_MEAN_BYTES", mean - 1)
    run_score(path, protocol=FAST)
    assert threads == []
    monkeypatch.setattr(memory_plan, "OVERLAP_MAX_MEAN_BYTES", mean)
    run_score(path, protocol=FAST)
    assert len(threads) == 4


def test_overlap_is_dropped_when_it_would_put_a_split_in_passes(tmp_path, threads):
    """Under a memory limit that holds each split's mean with the intervals' blocks after it, but not with a
    batch's blocks beside it, the splits are scored in memory without the overlap (no note of passes)."""
    from ubench.archive_schema.spec import ReadLimits
    from ubench.scoring.memory_plan import RESERVE_SHARE, MemoryBudgetError, plan_split, working_bytes

    m, n, c = 4, 300, 5
    path, _ = build_archive(tmp_path / "a.h5", m=m, n=n, c=c, shifts=SHIFTS)
    sizes = {name: n if name != "ood" else n // 2 for name in ("test", "ood", *(f"s{k}" for k in range(5)))}
    block = ReadLimits().block_bytes
    serial = working_bytes(sizes, c, bootstrap=FAST.bootstrap)
    budget = -(-(plan_split("x", m, n, c, budget=None, block_bytes=block, extra_bytes=serial).mean_bytes
                 + plan_rest(m, n, c, block, serial)) * 8 // 7) + 8
    beside = working_bytes(sizes, c, bootstrap=FAST.bootstrap, overlap=True)
    assert RESERVE_SHARE == 1 / 8
    with pytest.raises(MemoryBudgetError):  # with a batch's blocks beside it, not even in passes
        plan_split("x", m, n, c, budget=budget, block_bytes=block, extra_bytes=beside)
    assert plan_split("x", m, n, c, budget=budget, block_bytes=block, extra_bytes=serial).in_memory
    report = run_score(path, protocol=FAST, memory_bytes=budget)
    assert threads == []
    assert not any("did not fit" in note for note in report["notes"])


def plan_rest(m, n, c, block, extra):
    """What :func:`~ubench.scoring.memory_plan.plan_split` needs beside a split's mean."""
    from ubench.scoring.memory_plan import VECTOR_BYTES_PER_SAMPLE, WORKING_BLOCKS

    return VECTOR_BYTES_PER_SAMPLE * n + WORKING_BLOCKS * min(block, 8 * m * n * c) + extra


def test_a_splits_replicates_do_not_depend_on_the_splits_resampled_with_it(tmp_path):
    """The in-domain split resampled alone and in one batch with a shift split of the same samples: the same
    replicate values to the last bit (a matrix product of both splits' columns side by side rounds a few
    hundred of the in-domain split's sums differently, and a report's numbers would depend on its batches)."""
    import numpy as np

    import ubench.metrics.report as R
    from scoring_archives import member_predictions

    rng = np.random.default_rng(3)
    n, c = 2_000, 10
    y = rng.integers(0, c, n)
    test, shifted = member_predictions(rng, n, c, y, 4, 2.0), member_predictions(rng, n, c, y, 4, 1.0)
    protocol = Protocol.preset("pitfalls").replace(bootstrap=300)
    alone, batched = (R.ReportBuilder(protocol, n_members=4, n_classes=c, dataset="toy", primary="test")
                      for _ in range(2))
    for b in (alone, batched):
        b.intervals.units = {"test": "ids", "blur_1": "ids"}
        b.add_in_domain("test", R.split_arrays(test), y)
    batched.add_shift("blur_1", R.split_arrays(shifted), y, kind="blur", intensity=1.0)
    alone.intervals.flush()
    batched.intervals.flush()
    one, two = alone.intervals.replicates["test"], batched.intervals.replicates["test"]
    assert "blur_1" in batched.intervals.replicates and one.keys() == two.keys()
    assert [k for k in one if not np.array_equal(one[k], two[k], equal_nan=True)] == []


def _members(seed, m, n, c):
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 1.5, (m, n, c)) + rng.normal(0, 1.5, (1, n, c))
    p = np.exp(z - z.max(axis=2, keepdims=True))
    return p / p.sum(axis=2, keepdims=True), rng.integers(0, c, n)


@pytest.mark.parametrize("placement", ["per_member", "post"])
def test_collector_resamples_with_the_protocols_settings_and_units(placement):
    """An in-domain split with its calibrated section and an OOD split, through ``IntervalCollector``: their
    replicates are those of statistics built by hand from the protocol's settings (the members smoothed as
    (1 - s) p + s / C before the per-member or post-hoc calibration's influence columns, that protocol's repeats,
    seed, eps and bins, its TPR and scores), resampled as the units named by the splits' sample ids (the OOD
    split its own unit)."""
    from ubench.metrics.intervals import LabelledStatistics, OODStatistics, resample
    from ubench.metrics.protocol_bootstrap import cv_influence
    from ubench.metrics.report_intervals import IntervalCollector
    from ubench.metrics.report_sections import split_arrays

    p = FAST.replace(bootstrap=30, smoothing=0.1, placement=placement, repeats=3, seed=4, eps=1e-6, bins=7, tpr=0.8)
    members, labels = _members(1, 3, 60, 4)
    ood, _ = _members(2, 3, 40, 4)
    arrays = split_arrays(members, smoothing=p.smoothing, keep_members=True)
    ood_arrays = split_arrays(ood, smoothing=p.smoothing)
    coll = IntervalCollector(p, scores=("total", "confidence"), cost_preset=None, cost_matrix=None, primary="test")
    coll.units = {"test": "d1", "svhn": "d2"}
    coll.add_labelled("in_domain", "test", arrays, labels, {"calibrated": {"cll": -0.5}})
    coll.add_ood("svhn", arrays, ood_arrays, "test")
    coll.flush()

    smoothed = 0.9 * members + 0.1 / 4
    influence = cv_influence(smoothed if placement == "per_member" else (smoothed.mean(axis=0),), labels,
                             placement=placement, n_repeats=3, seed=4, eps=1e-6, n_bins=7)
    want = resample({"test": LabelledStatistics(arrays, labels, unit="ids:d1", bins=7, eps=1e-6, smoothing=0.1,
                                                tpr=0.8, scores=("total", "confidence"), protocol=influence),
                     "svhn": OODStatistics(arrays, ood_arrays, unit="ood:d2", against="ids:d1", tpr=0.8,
                                           scores=("total", "confidence"))},
                    {"ids:d1": 60, "ood:d2": 40}, n_replicates=30, seed=4)
    assert sorted(coll.replicates) == ["svhn", "test"]
    for name in want:
        assert sorted(coll.replicates[name]) == sorted(want[name]), name
        for key, v in want[name].items():
            np.testing.assert_allclose(coll.replicates[name][key], v, rtol=1e-12, atol=1e-15, err_msg=key)
    assert "calibrated_ece" in want["test"] and "ood_auroc_total" in want["svhn"]


def test_collector_exports_only_when_asked_and_a_worker_hands_its_splits_over():
    """Without ``sample_stats`` no columns are kept; with it, the primary split's SAMPLE_COLUMNS and scores and a
    shift split's accuracy alone (its 0/1 hits). A protocol that names neither setting is inactive. A Dask
    worker's collector (``resampling`` off) resamples nothing and hands each split over (``split_result``, None
    for a split it never saw; only its columns without intervals); absorbed, it gives the replicates and columns
    of adding it directly. The overlap is off until ``scoring/score.py`` turns it on."""
    from types import SimpleNamespace

    from ubench.metrics.report_intervals import SAMPLE_COLUMNS, IntervalCollector
    from ubench.metrics.report_sections import split_arrays

    assert not IntervalCollector(SimpleNamespace(), scores=(), cost_preset=None, cost_matrix=None).active
    members, labels = _members(3, 2, 50, 3)
    shifted, _ = _members(4, 2, 50, 3)
    arrays, shift_arrays = split_arrays(members), split_arrays(shifted)
    section = {"calibrated": {"cll": -0.5}}

    def collector(export, resampling=True):
        c = IntervalCollector(FAST.replace(bootstrap=20, sample_stats=export), scores=("total",), cost_preset=None,
                              cost_matrix=None, primary="test")
        c.resampling = resampling
        return c

    plain = collector(False)
    plain.add_labelled("in_domain", "test", arrays, labels, section)
    plain.add_labelled("shift", "blur", shift_arrays, labels, {})
    assert plain.columns == {}

    direct = collector(True)
    direct.add_labelled("in_domain", "test", arrays, labels, section)
    direct.add_labelled("shift", "blur", shift_arrays, labels, {})
    direct.flush()
    assert sorted(direct.columns["test"]) == sorted([k for k in SAMPLE_COLUMNS] + ["score_total"])
    hits = (shift_arrays.mean_probs.argmax(axis=1) == labels).astype(float)
    assert list(direct.columns["blur"]) == ["accuracy"]
    np.testing.assert_array_equal(direct.columns["blur"]["accuracy"], hits)

    main = collector(True)
    for name, role, arr, sec in (("test", "in_domain", arrays, section), ("blur", "shift", shift_arrays, {})):
        worker = collector(True, resampling=False)
        getattr(worker, "add_labelled")(role, name, arr, labels, sec)
        worker.settle()
        assert worker.replicates == {} and worker.split_result("other") is None
        main.absorb(name, worker.split_result(name))
    main.absorb("nothing", None)
    main.flush()
    assert main.overlap is False and main.resampling is True  # score.py turns the overlap on, for small splits
    # a worker exporting samples without intervals: its split's columns, no statistics
    worker = IntervalCollector(FAST.replace(intervals=False, sample_stats=True), scores=("total",), cost_preset=None,
                               cost_matrix=None, primary="test")
    worker.add_labelled("shift", "blur", shift_arrays, labels, {})
    role, size, stat, cols = worker.split_result("blur")
    assert (role, size[1], stat) == ("shift", 50, None) and list(cols) == ["accuracy"]
    assert sorted(main.replicates) == ["blur", "test"] and sorted(main.columns) == ["blur", "test"]
    for name in ("test", "blur"):
        assert sorted(main.replicates[name]) == sorted(direct.replicates[name])
        for key, v in direct.replicates[name].items():
            np.testing.assert_array_equal(main.replicates[name][key], v, err_msg=key)
        for key, v in direct.columns[name].items():
            np.testing.assert_array_equal(main.columns[name][key], v, err_msg=key)


def test_at_most_in_flight_batches_are_out_and_the_counts_are_kept_only_with_the_overlap(drawn_counts):
    """With the overlap, each batch goes to a daemon thread named ``ubench-resample``, at most ``IN_FLIGHT``
    batches are out after any ``settle`` (the oldest is taken in first), and the in-domain unit's counts are
    drawn once for all of the OOD splits against it; without it nothing is kept between batches."""
    import threading

    from ubench.metrics.report_intervals import IntervalCollector
    from ubench.metrics.report_sections import split_arrays

    members, labels = _members(5, 2, 40, 3)
    arrays = split_arrays(members)
    oods = [split_arrays(_members(6 + k, 2, 30, 3)[0]) for k in range(4)]
    drawn = drawn_counts
    for overlap in (True, False):
        coll = IntervalCollector(FAST.replace(bootstrap=20), scores=("total",), cost_preset=None, cost_matrix=None,
                                 primary="test")
        coll.overlap = overlap
        seen, resample_of = [], coll._resample

        def traced(*args, **kw):
            t = threading.current_thread()
            seen.append((t.name, t.daemon))
            return resample_of(*args, **kw)

        coll._resample = traced
        coll.units = {f"o{k}": f"d{k}" for k in range(4)}
        drawn.clear()
        coll.add_labelled("shift", "test", arrays, labels, {})
        coll.flush()
        out = []
        for k, ood in enumerate(oods):
            coll.add_ood(f"o{k}", arrays, ood, "test")
            coll.settle()
            out.append(len(coll._running))
        coll.flush()
        assert sorted(coll.replicates) == ["o0", "o1", "o2", "o3", "test"]
        if overlap:
            assert out == [1, 2, 2, 2] and all(s == ("ubench-resample", True) for s in seen[1:])
            assert drawn.count(40) == 1  # kept from the first batch for the four OOD splits
        else:
            assert out == [0, 0, 0, 0] and coll._counts == {} and drawn.count(40) == 5
