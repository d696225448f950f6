# SPDX-License-Identifier: MIT
"""Hostile input, tried for real: flipped bytes, truncations and resizes of a valid archive are validated and
scored in the sandbox; every outcome is a clean finding or a clean score, and no other file is opened."""

from __future__ import annotations

import ctypes
import os
import shutil
import struct

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
