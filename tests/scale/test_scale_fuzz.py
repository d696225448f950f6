# SPDX-License-Identifier: MIT
"""Hostile input, tried for real: flipped bytes, truncations and resizes of a valid archive are validated and
scored in the sandbox; every outcome is a clean finding or a clean score, and no other file is opened."""

from __future__ import annotations

import ctypes
import os
import shutil
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ubench.scoring.sandbox import SandboxLimits, SandboxTask, run_sandboxed_batch

#: Landlock off: this test checks that the reader itself opens nothing else, not that the kernel stops it.
LIMITS = SandboxLimits(memory_bytes=2 * 2**30, cpu_seconds=10, timeout_seconds=60, landlock=False)
# cpu-limit is a clean outcome: libhdf5 2.0 can spin forever decoding a corrupted attribute message (found by
# this test: flips at bytes 350 and 2750 of the small archive), which only a process limit can stop.
CLEAN = {"ok", "rejected", "unreadable", "crashed", "memory-limit", "cpu-limit"}
IN_OPEN = 0x20


class OpenWatch:
    """inotify IN_OPEN events of the files in one directory."""

    def __init__(self, directory):
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        if self.libc.inotify_add_watch(self.fd, os.fsencode(directory), IN_OPEN) < 0:
            raise OSError(ctypes.get_errno(), "inotify_add_watch")

    def opened(self) -> set[str]:
        names = set()
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                return names
            i = 0
            while i < len(buf):
                _wd, _mask, _cookie, n = struct.unpack_from("iIII", buf, i)
                names.add(buf[i + 16 : i + 16 + n].rstrip(b"\0").decode())
                i += 16 + n

    def close(self):
        os.close(self.fd)


@pytest.fixture(scope="module")
def watched(tmp_path_factory, valid_archive):
    """A directory holding the upload-to-be and decoys (a copy of the valid archive, a text file)."""
    d = tmp_path_factory.mktemp("fuzz")
    shutil.copy(valid_archive, d / "decoy.h5")
    (d / "secret.txt").write_text("do not read")
    watch = OpenWatch(d)
    yield d, watch, Original(valid_archive.read_bytes())
    watch.close()


class Original(bytes):
    """The valid archive's bytes, with a short repr (hypothesis prints fixtures of a failing example)."""

    def __repr__(self) -> str:
        return f"<valid archive, {len(self)} bytes>"


@st.composite
def mutations(draw, size: int):
    ops = draw(st.lists(st.one_of(
        st.tuples(st.just("flip"), st.integers(0, size - 1), st.integers(1, 255)),
        st.tuples(st.just("flip-head"), st.integers(0, min(size, 4096) - 1), st.integers(1, 255)),
        st.tuples(st.just("truncate"), st.integers(0, size - 1), st.just(0)),
        st.tuples(st.just("grow"), st.integers(1, 4096), st.integers(0, 255)),
        st.tuples(st.just("zero"), st.integers(0, size - 1), st.integers(1, 512)),
    ), min_size=1, max_size=4))
    return ops


def mutate(data: bytes, ops) -> bytes:
    b = bytearray(data)
    for op, a, v in ops:
        if op in ("flip", "flip-head") and a < len(b):
            b[a] ^= v
        elif op == "truncate":
            del b[a:]
        elif op == "grow":
            b += bytes([v]) * a
        elif op == "zero":
            b[a : a + v] = bytes(len(b[a : a + v]))
    return bytes(b)


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
          deadline=None)
@given(data=st.data())
def test_mutated_archives_give_clean_outcomes(watched, reference_file, data):
    """For any byte flips, truncation or growth of a valid archive, validate and score in the sandbox end in a
    finding or a score (never an internal error or a timeout), score never accepts what validate rejects, and
    no file beside the upload is opened."""
    directory, watch, original = watched
    upload = directory / "upload.h5"
    upload.write_bytes(mutate(original, data.draw(mutations(len(original)))))
    watch.opened()  # drop the events of writing the upload
    v, s = run_sandboxed_batch([SandboxTask("validate", str(upload)),
                                SandboxTask("score", str(upload), str(reference_file))], LIMITS)
    assert v.status in CLEAN, v
    assert s.status in CLEAN, s
    if v.exit_code != 0:
        assert s.exit_code != 0, (v, s)
    for o in (v, s):
        assert all(f["message"] and "Traceback" not in f["message"] for f in o.findings)
        assert (o.report is not None) == (o.status == "ok" and o is s)
    assert watch.opened() <= {"upload.h5"}


def test_fixed_corruptions(watched, reference_file):
    """Deterministic cases: empty file, signature only, header cut, tail cut, a zeroed superblock."""
    directory, watch, original = watched
    cases = {"empty": b"", "signature": original[:8], "head": original[:100], "tail": original[:-1],
             "superblock": bytes(64) + original[64:]}
    tasks = []
    for name, body in cases.items():
        (directory / f"{name}.h5").write_bytes(body)
        tasks += [SandboxTask("validate", str(directory / f"{name}.h5")),
                  SandboxTask("score", str(directory / f"{name}.h5"), str(reference_file))]
    watch.opened()
    outcomes = run_sandboxed_batch(tasks, LIMITS)
    assert all(o.status in CLEAN and o.exit_code in (1, 2) for o in outcomes), outcomes
    assert watch.opened() <= {f"{name}.h5" for name in cases}


def test_corrupt_compressed_probs_are_a_finding_when_scored(watched, reference_file, valid_archive):
    """One flipped byte inside a deflated chunk of probs: validate reports ``hdf5-read``; score must reject the
    upload with a finding too (not an OSError escaping ``score_archive``)."""
    from ubench.archive_schema.safe_h5py import h5py

    directory, watch, original = watched
    with h5py.File(valid_archive, "r") as f:
        info = f["splits/test/probs"].id.get_chunk_info(0)
    body = bytearray(original)
    body[info.byte_offset + info.size // 2] ^= 1
    upload = directory / "flipped.h5"
    upload.write_bytes(bytes(body))
    v, s = run_sandboxed_batch([SandboxTask("validate", str(upload)),
                                SandboxTask("score", str(upload), str(reference_file))], LIMITS)
    assert (v.status, v.exit_code) == ("rejected", 1)
    assert s.status == "rejected", s.findings


# -- structural fuzzing (issue #16 item 15, branch reader-limits) ---------------------------------------------------
# A SPEC-valid archive with one field mutated through h5py: an attribute set to a value of any type (bytes that are
# not UTF-8, huge or non-finite numbers, arrays), an attribute or object deleted, a dataset replaced by one of
# another dtype, shape, chunking or compression, a link renamed to arbitrary bytes, one probability overwritten.
# The outcome must be what `ubench score` turns into exit 0 or 1: a valid archive and a report that is valid JSON,
# or findings / a documented error. Mutations are plain JSON, so every crash is kept as a file of
# tests/archive_schema/fuzz_corpus/ and replayed by test_fuzz_corpus_replays_cleanly.
FUZZ_CORPUS = Path(__file__).resolve().parents[1] / "archive_schema" / "fuzz_corpus"
GROUPS = ["/", "/members", "/splits", "/splits/test", "/splits/noise", "/scalability"]
DATASETS = ["/members/seed", "/members/kind", "/members/info", "/splits/test/probs", "/splits/test/labels",
            "/splits/test/sample_ids", "/splits/noise/probs"]
ATTRS = ["ubench_format", "ubench_format_version", "ubench_kind", "method", "model", "dataset", "n_classes",
         "created", "writer", "config", "description", "role", "n_samples", "shift_kind", "shift_intensity",
         "n_parameters", "device"]
DTYPES = ["<f4", ">f8", "<f2", "<i1", ">u8", "<i8", "|b1", "S5", "vlen"]

_values = st.one_of(
    st.tuples(st.just("bytes"), st.binary(max_size=40).map(bytes.hex)),
    st.tuples(st.just("text"), st.text(max_size=40)),
    st.tuples(st.just("int"), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just("float"), st.sampled_from(["nan", "inf", "-inf", "1e308", "-0.0", "0.5", "3"])),
    st.tuples(st.just("array"), st.lists(st.integers(-5, 5), min_size=0, max_size=4)),
    st.tuples(st.just("json"), st.sampled_from(['{"a": NaN}', '{"a": 1e999}', "[]", "{", '{"a": {"b": [1, 2]}}'])),
)

#: (object, attribute) pairs of the base archive: most attribute mutations hit one that the reader reads.
ATTR_SITES = [("/", a) for a in ("config", "created", "dataset", "description", "framework", "framework_version",
                                 "method", "model", "n_classes", "ubench_format", "ubench_format_version",
                                 "ubench_kind", "writer")] + \
             [(g, a) for g in ("/splits/test", "/splits/noise") for a in ("dataset", "n_samples", "role",
                                                                           "ubench_kind")] + \
             [("/members", "ubench_kind"), ("/splits", "ubench_kind")]

mutations_structural = st.one_of(
    st.builds(lambda site, value: ("attr", site[0], site[1], value), st.sampled_from(ATTR_SITES), _values),
    st.tuples(st.just("attr"), st.sampled_from(GROUPS + DATASETS), st.sampled_from(ATTRS), _values),
    st.tuples(st.just("strings"), st.sampled_from(["/members/kind", "/members/info"]), st.integers(0, 1),
              st.binary(max_size=24).map(bytes.hex)),
    st.tuples(st.just("del_attr"), st.sampled_from(GROUPS), st.sampled_from(ATTRS)),
    st.tuples(st.just("del"), st.sampled_from(DATASETS + GROUPS[1:])),
    st.tuples(st.just("dataset"), st.sampled_from(DATASETS), st.sampled_from(DTYPES),
              st.lists(st.integers(0, 7), min_size=0, max_size=3), st.booleans(), st.booleans()),
    st.tuples(st.just("move"), st.sampled_from(DATASETS + GROUPS[1:]), st.binary(min_size=1, max_size=12).map(bytes.hex)),
    st.tuples(st.just("value"), st.sampled_from(["/splits/test/probs", "/splits/noise/probs"]), st.integers(0, 500),
              st.sampled_from(["nan", "inf", "-1", "2", "0", "1", "1e-45"])),
)


def _py_value(kind: str, v):
    import h5py
    import numpy as np

    if kind == "bytes":
        return np.array(bytes.fromhex(v), dtype=h5py.string_dtype())  # stored as variable-length UTF-8
    if kind in ("text", "json"):
        return v
    if kind == "int":
        return np.int64(v)
    if kind == "float":
        return np.float64(float(v))
    return np.array(v, dtype=np.int64)


def apply_mutation(path: Path, op) -> None:
    """Apply one JSON-described mutation to the archive at ``path`` with plain h5py; an op that h5py itself
    refuses (an object that a previous op removed, a name HDF5 will not take) leaves the file as it was."""
    import h5py
    import numpy as np

    with h5py.File(path, "r+") as f:
        kind, where = op[0], op[1]
        try:
            if kind == "attr":
                f[where].attrs[op[2]] = _py_value(*op[3])
            elif kind == "del_attr":
                if op[2] in f[where].attrs:
                    del f[where].attrs[op[2]]
            elif kind == "del":
                del f[where]
            elif kind == "dataset":
                dtype, dims, chunked, gzip = op[2], op[3], op[4], op[5]
                shape = tuple(dims)
                del f[where]
                n = int(np.prod(shape)) if shape else 1
                if dtype == "vlen":
                    data = np.array([f"s{i}" for i in range(n)], dtype=object).reshape(shape)
                    f.create_dataset(where, data=data, dtype=h5py.string_dtype())
                else:
                    data = (np.arange(n) % 3).reshape(shape).astype(dtype if dtype != "S5" else "S5")
                    kw = {}
                    if chunked and shape and 0 not in shape:
                        kw["chunks"] = tuple(max(1, s // 2) for s in shape)
                        if gzip:
                            kw["compression"] = "gzip"
                    f.create_dataset(where, data=data, **kw)
            elif kind == "strings":  # one element of a variable-length string column set to raw bytes
                values = [bytes(v) for v in f[where][()]]
                values[op[2] % len(values)] = bytes.fromhex(op[3])
                del f[where]
                f.create_dataset(where, data=np.array(values, dtype=object), dtype=h5py.string_dtype())
            elif kind == "move":
                parent = where.rsplit("/", 1)[0] or "/"
                f[parent].move(where.rsplit("/", 1)[1], bytes.fromhex(op[2]))
            elif kind == "value":
                ds = f[where]
                i = op[2] % int(np.prod(ds.shape))
                idx = np.unravel_index(i, ds.shape)
                ds[idx] = float(op[3])
        except (KeyError, ValueError, TypeError, OSError, RuntimeError, ZeroDivisionError):
            pass


def clean_outcome(path: Path) -> str:
    """'valid', 'rejected' or 'unscorable'; raises (failing the test) on anything else."""
    import json

    from ubench.archive_schema import ArchiveError, validate_archive
    from ubench.scoring.protocols import Protocol
    from ubench.scoring.score import score_archive

    findings = validate_archive(path)
    assert all(f.message and isinstance(f.message, str) for f in findings)
    for f in findings:
        f.message.encode("utf-8")  # no lone surrogate reaches a message (it would crash the board)
        f.path.encode("utf-8")
    protocol = Protocol.preset("pitfalls")
    try:
        report = score_archive(path, protocol=protocol)
    except ArchiveError:
        return "rejected"
    except ValueError:
        return "unscorable"  # `ubench score`: "cannot be scored", exit 1
    assert not [f for f in findings if f.severity == "error"], "score accepted what validate rejected"
    # ensure_ascii=False then UTF-8, as the leaderboard page and the HTML report write it: a lone surrogate
    # from an archive string raises here (issue #16 item 1).
    json.dumps(report, allow_nan=False, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return "valid"


def _fuzz_base(directory: Path) -> Path:
    from scale_archives import make_archive

    return make_archive(directory / "base.h5", m=2, n=24, c=3, compression=None)


@pytest.mark.slow
@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
          deadline=None)
@given(ops=st.lists(mutations_structural, min_size=1, max_size=2))
def test_structurally_mutated_archives_give_clean_outcomes(ops, tmp_path_factory):
    """For any one or two structural mutations of a valid archive, validate returns findings (never raises) and
    score either reports valid JSON, or rejects with a documented error; never a traceback."""
    import shutil

    d = tmp_path_factory.mktemp("structural")
    base = _fuzz_base(d)
    upload = d / "upload.h5"
    shutil.copy(base, upload)
    for op in ops:
        apply_mutation(upload, op)
    clean_outcome(upload)


def _corpus_files():
    return sorted(FUZZ_CORPUS.glob("*.json")) if FUZZ_CORPUS.is_dir() else []


@pytest.mark.parametrize("case", _corpus_files(), ids=lambda p: p.stem)
def test_fuzz_corpus_replays_cleanly(case, tmp_path):
    """Every mutation the fuzzer once crashed on (tests/archive_schema/fuzz_corpus/*.json: the ops and the outcome
    they must now give) replays to that clean outcome."""
    import json

    spec = json.loads(case.read_text())
    upload = _fuzz_base(tmp_path)
    for op in spec["ops"]:
        apply_mutation(upload, op)
    assert clean_outcome(upload) == spec["outcome"]
