# SPDX-License-Identifier: MIT
"""A report holds one split's (N, C) arrays at a time (issue #29 item 2): the peak memory of scoring does not grow
with the number of splits (traced allocations, not wall-clock; bench/bench_memory.py measures the peak RSS)."""

from __future__ import annotations

import tracemalloc

import numpy as np

from ubench.archive_schema import ArchiveWriter, SplitSpec
from ubench.scoring.protocols import Protocol
from ubench.scoring.score import run_score

N, C = 1500, 200
MEAN_BYTES = 8 * N * C


def _archive(path, n_ood: int, n_shift: int, n: int = N, c: int = C):
    rng = np.random.default_rng(0)
    y = rng.integers(0, c, n)
    splits = {"test": SplitSpec(role="in_domain", dataset="bench", labels=y, sample_ids=np.arange(n))}
    splits.update({f"ood{k}": SplitSpec(role="ood", dataset=f"o{k}", sample_ids=np.arange(n)) for k in range(n_ood)})
    splits.update({f"blur{k}": SplitSpec(role="shift", dataset="bench", labels=y, sample_ids=np.arange(n),
                                         shift_kind="blur", shift_intensity=k + 1) for k in range(n_shift)})
    w = ArchiveWriter(path, method="m", model="m", dataset="bench", n_classes=c, splits=splits, overwrite=True)
    for j in range(2):
        out = {}
        for name in splits:
            z = rng.normal(0, 2, (n, c))
            p = np.exp(z - z.max(1, keepdims=True))
            out[name] = (p / p.sum(1, keepdims=True)).astype(np.float32)
        w.add_member(out, seed=j)
    return w.finalize()


def _peak(path, intervals: bool = False) -> int:
    tracemalloc.start()
    try:
        # no temperature scaling and (unless asked for) no bootstrap intervals: the splits' arrays are measured
        run_score(path, protocol=Protocol.preset("shift").replace(intervals=intervals, bootstrap=100))
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_peak_does_not_grow_with_splits(tmp_path):
    """Scoring 4 OOD and 4 shift splits peaks within half of one split's mean of scoring 1 and 1: what is kept
    of a scored split is its (N,) scores (OOD splits used to be held whole until the end: 3 means more)."""
    few = _peak(_archive(tmp_path / "few.h5", 1, 1))
    many = _peak(_archive(tmp_path / "many.h5", 4, 4))
    assert many - few < MEAN_BYTES / 2, (few, many)


def test_sandbox_reports_the_childs_own_peak(tmp_path):
    """The sandboxed child's peak RSS is its own (``VmHWM``, read from a file opened before Landlock): a host
    holding 256 MiB does not show up in it (``ru_maxrss`` carries the parent's pages over fork and exec)."""
    from pathlib import Path

    from ubench.scoring.sandbox import SandboxLimits, SandboxTask, run_sandboxed

    example = Path(__file__).resolve().parents[2] / "examples" / "digits_deep_ensemble.h5"
    held = np.ones(256 * 2**20 // 8)  # resident in this (the parent) process while the child starts
    out = run_sandboxed(SandboxTask("validate", str(example)), SandboxLimits())
    assert out.status == "ok" and held[-1] == 1.0
    assert out.peak_rss_bytes < 200 * 2**20, out.peak_rss_bytes / 2**20


def test_interval_statistics_are_not_kept_per_split(tmp_path, monkeypatch):
    """With the bootstrap intervals on, a shift split's per-sample statistics (its columns, the binned ones kept
    as their nonzeros, and its scores: about 7 float64 per sample) are resampled and dropped a batch at a time.
    The memory still held after each split (read once the resampling threads are done, so the same on every run)
    swings by one shift split's statistics over the 6 shift splits (a batch waiting or not); kept until the end,
    they would add one more per split (5 in all).

    Not the peak: that moves by about 3 splits' statistics from run to run with how the two resampling threads'
    temporaries overlap (seen in CI), more than the difference to be caught."""
    from ubench.metrics.report_intervals import IntervalCollector

    n, c = 10_000, 10
    per_split = 7 * 8 * n
    held = []
    settle = IntervalCollector.settle

    def settle_and_measure(self):
        settle(self)
        while self._running:  # the batches resampled beside the next splits (overlap): what they leave, once done
            self._take_oldest()
        held.append(tracemalloc.get_traced_memory()[0])

    monkeypatch.setattr(IntervalCollector, "settle", settle_and_measure)
    _peak(_archive(tmp_path / "many.h5", 0, 6, n, c), intervals=True)
    assert len(held) == 7  # the in-domain split, then the 6 shift splits
    shift = held[1:]
    assert max(shift) - min(shift) < 2 * per_split, [(h - min(shift)) / per_split for h in shift]


_STREAM_SPLITS = r"""
import ctypes
import sys

from ubench.archive_schema import open_archive
from ubench.archive_schema.safe_h5py import h5py

def rss():  # what is live: the heap freed by numpy's blocks is given back first (glibc)
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS"))

def streamed(names, stream, dataset):  # resident growth over streaming every split, all kept open
    grew = []
    for name in names:
        stream(name)
        grew.append(rss())
    return grew[-1] - grew[0], dataset(name).id.get_access_plist().get_chunk_cache()[1]

def whole_chunks(ds):
    for start in range(0, ds.shape[1], ds.chunks[1]):
        ds[:, start : start + ds.chunks[1]]

with open_archive(sys.argv[1], check_values=False) as reader:
    names = list(reader.header.splits)
    print(*streamed(names, lambda name: list(reader.iter_checked_probs(name, reader.chunk_rows(name))),
                    reader.dataset))
with h5py.File(sys.argv[1], "r") as f:  # h5py's defaults: a chunk cache per open dataset
    datasets = {name: f[f"splits/{name}/probs"] for name in names}
    print(*streamed(names, lambda name: whole_chunks(datasets[name]), datasets.get))
before = rss()
with open_archive(sys.argv[1]) as reader:  # validated: every value read while the file stays open
    print(rss() - before)
"""


def test_streamed_splits_leave_no_chunk_cache_behind(tmp_path):
    """HDF5 keeps up to its chunk cache (8 MiB in HDF5 2.0) of every open dataset, and an open archive holds every
    split's datasets open (what an ImageNet-C-shaped archive kept: 8 MiB per split). The safe reader opens files
    without one: streaming 10 splits of 8 MiB grows the resident memory by less than a quarter of a cache per
    split, where h5py's defaults grow it by at least half a cache per split; the validator, which reads every
    split while the file stays open, too."""
    import subprocess
    import sys

    n, c, k = 2048, 1024, 10
    splits = {f"s{i}": SplitSpec(role="ood", dataset=f"o{i}", sample_ids=np.arange(n)) for i in range(k)}
    w = ArchiveWriter(tmp_path / "flat.h5", method="m", model="m", dataset="d", n_classes=c, splits=splits,
                      overwrite=True)
    w.add_member(dict.fromkeys(splits, np.full((n, c), 1 / c, dtype=np.float32)), seed=0)
    path = w.finalize()
    out = subprocess.run([sys.executable, "-c", _STREAM_SPLITS, str(path)], capture_output=True, text=True,
                         check=True).stdout.split()
    streamed, no_cache, kept, cache, validated = (int(x) for x in out)
    cache = min(cache, 4 * n * c)
    assert no_cache == 0
    assert kept > (k - 1) * cache / 2, (streamed, kept, cache)  # what the defaults keep
    assert streamed < (k - 1) * cache / 4, (streamed, kept, cache)
    assert validated < (k - 1) * cache / 4, (validated, cache)


_CHUNK_INDEX = r"""
import ctypes
import sys

from ubench.archive_schema.safe_h5py import h5py
from ubench.archive_schema.scan import Scan, open_readonly
from ubench.archive_schema.spec import ReadLimits

def rss():
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS"))

h5py.File(sys.argv[1], "r").close()  # what the first open of a file maps (HDF5's own start) is not measured
for safe in (True, False):
    before = rss()
    f = open_readonly(Scan(sys.argv[1], ReadLimits())) if safe else h5py.File(sys.argv[1], "r")
    f["x"].id.get_num_chunks()  # the scan counts every chunked dataset's chunks: the whole chunk index is read
    print(rss() - before)
    f.close()
"""


def test_chunk_index_is_not_kept_in_memory(tmp_path):
    """The scan walks every chunk index (it counts the chunks), and HDF5's metadata cache keeps the index's
    B-tree nodes: 20,000 chunks (an archive of 200 members) left 7.5 MiB resident with HDF5's defaults, so that
    the peak memory of scoring grew with M. The safe reader caps that cache (``scan.METADATA_CACHE_BYTES``): under
    a third of it (measured 1.2 MiB)."""
    import subprocess
    import sys

    import h5py

    with h5py.File(tmp_path / "chunks.h5", "w") as f:
        f.create_dataset("x", data=np.zeros((200, 1000, 4), np.float32), chunks=(1, 10, 4))
    capped, default = (int(x) for x in subprocess.run([sys.executable, "-c", _CHUNK_INDEX, str(tmp_path / "chunks.h5")],
                                                       capture_output=True, text=True, check=True).stdout.split())
    assert default > 3 * 2**20, default  # what the index costs uncapped
    assert capped < default / 3, (capped, default)


def _uniform_archive(path, m: int, n: int = 2000, c: int = 100):
    y = np.arange(n) % c
    w = ArchiveWriter(path, method="m", model="m", dataset="bench", n_classes=c, overwrite=True,
                      splits={"test": SplitSpec(role="in_domain", dataset="bench", labels=y, sample_ids=np.arange(n))})
    p = np.random.default_rng(0).dirichlet(np.ones(c), n).astype(np.float32)
    for j in range(m):
        w.add_member({"test": np.roll(p, j, axis=1)}, seed=j)
    return w.finalize()


def test_validating_holds_one_block_whatever_m(tmp_path):
    """The validator reads a split in blocks of the scorer's size (``STREAM_BLOCK_BYTES`` as float64, whole
    chunks) and drops each block before it reads the next: its traced peak at M = 24 (a 19 MB split) stays
    within 1.25 float32 blocks, as at M = 2 (1.6 MB); it read blocks of ``ReadLimits.block_bytes`` (64 MiB), and
    held two at once (validate's peak RSS went from 96 to 153 MiB at M = 5 to 200)."""
    from ubench.archive_schema import validate_archive
    from ubench.archive_schema.blocks import STREAM_BLOCK_BYTES

    for m in (2, 24):
        path = _uniform_archive(tmp_path / f"m{m}.h5", m)
        tracemalloc.start()
        try:
            assert [f for f in validate_archive(path) if f.severity == "error"] == []
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 1.25 * STREAM_BLOCK_BYTES / 2, (m, peak / 2**20)


def _no_hash(monkeypatch):
    """The file's sha256 is computed on a thread beside the scoring, its 1 MiB buffer alive at any moment of it:
    left out where traced memory is compared."""
    from ubench.archive_schema.reader import ArchiveReader

    monkeypatch.setattr(ArchiveReader, "sha256", lambda self: "0" * 64)


def test_scoring_peak_does_not_grow_with_m(tmp_path, monkeypatch):
    """Scoring streams one block of members at a time and drops it before the next is read (the reader's
    generator and the scorer's loop each held the last block while the next one was read): the traced peak at
    M = 48 (a 38 MB split) stays within an eighth of a block of M = 2's (one more block is 8 MB here; measured
    +0.6 MiB). Both after a first score, so that neither counts the modules the sections import."""
    from ubench.archive_schema.blocks import STREAM_BLOCK_BYTES

    _no_hash(monkeypatch)
    protocol = Protocol.preset("pitfalls").replace(intervals=False)
    paths = {m: _uniform_archive(tmp_path / f"m{m}.h5", m) for m in (2, 48)}
    run_score(paths[2], protocol=protocol)
    peaks = {}
    for m, path in paths.items():
        tracemalloc.start()
        try:
            run_score(path, protocol=protocol)
            peaks[m] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peaks[48] - peaks[2] < STREAM_BLOCK_BYTES / 8, {m: p / 2**20 for m, p in peaks.items()}


def test_labels_are_read_as_each_split_is_scored(tmp_path, monkeypatch):
    """The memory held when the first split is scored does not grow with the number of splits: each split's labels
    are read as it is scored (all were read up front and held to the end: 8 MiB for an ImageNet-C-shaped
    archive's 21 splits). 12 shift splits hold less than one split's labels more than 1 does."""
    import ubench.scoring.score as score

    _no_hash(monkeypatch)
    held = {}
    real = score.score_split

    def measure(reader, name, *args, **kwargs):
        held.setdefault(len(reader.header.splits), tracemalloc.get_traced_memory()[0])
        return real(reader, name, *args, **kwargs)

    monkeypatch.setattr(score, "score_split", measure)
    n = 20_000
    for k in (1, 12):
        path = _archive(tmp_path / f"shift{k}.h5", 0, k, n, 4)
        _peak(path)
    assert held[13] - held[2] < 8 * n, {k: v / 2**20 for k, v in held.items()}


def test_score_releases_every_split(tmp_path, monkeypatch):
    """``run_score`` releases each split once, after its sections (it may re-read the split until then)."""
    from ubench.archive_schema.reader import ArchiveReader

    released = []
    monkeypatch.setattr(ArchiveReader, "release", lambda self, name: released.append(name))
    path = _archive(tmp_path / "few.h5", 1, 1)
    run_score(path, protocol=Protocol.preset("shift").replace(intervals=False))
    assert released == ["test", "ood0", "blur0"]


def test_planned_interval_memory_grows_by_replicates_per_split():
    """The memory plan counts the interval statistics of one batch of splits (the largest), not of every split:
    40 splits of 50,000 samples plan only their replicate values (B per key) more than 2 do, not 38 x 150 MB."""
    from ubench.metrics.report_intervals import IntervalCollector
    from ubench.scoring.memory_plan import REPLICATE_BYTES, working_bytes

    def plan(k: int) -> int:
        return working_bytes({f"s{i}": 50_000 for i in range(k)}, 1000, bootstrap=1000)

    assert IntervalCollector.BATCH == 2
    assert plan(40) - plan(2) == 38 * REPLICATE_BYTES * 1000
    assert working_bytes({"a": 10, "b": 50_000, "c": 20_000}, 10, bootstrap=1000) - working_bytes(
        {"b": 50_000, "c": 20_000}, 10, bootstrap=1000) == REPLICATE_BYTES * 1000  # the two largest are counted


def test_validator_reads_member_by_member_when_a_chunk_row_exceeds_a_block(tmp_path):
    """Where one chunk row of all members exceeds a block (here chunks of 5 rows, blocks of 4), the validator reads
    one member's chunk row at a time: the archive validates, and a bad value in the last member is named by member and sample as the
    whole-block reading names it."""
    import sys
    from pathlib import Path

    from ubench.archive_schema import validate_archive
    from ubench.archive_schema.spec import ReadLimits

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "archive_schema"))
    from plain_writer import default_splits, write_plain_archive

    splits = default_splits(m=3, n=12, c=4)
    path = write_plain_archive(tmp_path / "ok.h5", splits=splits, probs_options={"chunks": (1, 5, 4)})
    small, whole = ReadLimits(block_bytes=8 * 3 * 4 * 4), ReadLimits()
    assert [f for f in validate_archive(path, small) if f.severity == "error"] == []
    bad = splits["test"]["probs"].copy()
    bad[2, 7, 2] = 1.5  # the last member, sample 7 (the second chunk row)
    splits["test"]["probs"] = bad
    path = write_plain_archive(tmp_path / "bad.h5", splits=splits, probs_options={"chunks": (1, 5, 4)})
    found = [(f.check, f.message) for f in validate_archive(path, small) if f.severity == "error"]
    assert found == [(f.check, f.message) for f in validate_archive(path, whole) if f.severity == "error"]
    assert len(found) == 1 and "member 2, sample 7" in found[0][1], found
