# SPDX-License-Identifier: MIT
"""The validator's value checks (``archive_schema/validator.py``) read in blocks: the first bad value of a dataset
is named with its member, sample and class whatever block it falls in, each dataset gets at most one finding and
every dataset is checked; block sizes by hand; edge values (-0.0, float32 sums past the float32 range); duplicate
sample ids and unfinished producer runs, against hand computations."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from plain_writer import softmax, write_plain_archive
from ubench.archive_schema import ReadLimits, validate_archive
from ubench.archive_schema.scan import Scan
from ubench.archive_schema.validator import block_rows, check_logits_block, check_probs_block, probs_problem

M, N, C = 2, 40, 4
#: 640 bytes: 10 samples of (2 members x 4 classes) float64 per probs block, 5 per logits block (half each)
SMALL = ReadLimits(block_bytes=640)


def _errors(path, limits=SMALL):
    return [(f.path, f.check, f.message) for f in validate_archive(path, limits) if f.severity == "error"]


def _split(probs, **extra):
    rng = np.random.default_rng(1)
    return {"test": dict(role="in_domain", dataset="digits", probs=probs, labels=rng.integers(0, C, N),
                         sample_ids=np.arange(N, dtype=np.int64), **extra)}


@pytest.mark.parametrize(("m", "c", "block_bytes", "want"), [
    (2, 10, 1600, 10),      # 1600 // (8 * 2 * 10)
    (1, 1000, 100, 1),      # less than one row: one row, not two
    (0, 10, 800, 10),       # no members counts as one
    (1, 10, 800, 10),
    (3, 7, 10_000, 59),
])
def test_block_rows_by_hand(m, c, block_bytes, want):
    assert block_rows(m, c, block_bytes) == want


def test_probs_problem_names_the_place_and_its_edges():
    """Defaults start = member_offset = 0; a float32 block whose float64 sum is finite but float32 sum is not is a
    range problem, not a non-finite one; -0.0 is a probability of 0 (no problem); +inf and -inf summing to NaN
    warn nothing."""
    block = np.full((1, 2, 2), 0.5)
    block[0, 1, 0] = -0.25
    assert probs_problem(block) == ("range", "probability -0.25 outside [0, 1] at member 0, sample 1, class 0")
    assert probs_problem(block, start=7, member_offset=3)[1].endswith("at member 3, sample 8, class 0")
    big = np.full((1, 2, 2), 3e38, dtype=np.float32)
    assert probs_problem(big)[0] == "range"
    zero = np.array([[[1.0, -0.0], [0.5, 0.5]]])
    assert probs_problem(zero) is None and probs_problem(zero.astype(np.float32)) is None
    both = np.array([[[np.inf, -np.inf], [0.5, 0.5]]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert probs_problem(both) == ("finite", "non-finite value inf at member 0, sample 0, class 0")


def test_block_checks_name_the_block_s_first_member_and_sample():
    """check_probs_block / check_logits_block: False and one finding naming member_offset + m and start + i for a
    bad block, True and nothing for a good one."""
    scan = Scan("x.h5", ReadLimits())
    z = np.zeros((2, 3, 2))
    probs = softmax(z)
    assert check_probs_block(scan, "/p", 4, probs, member_offset=6) and check_logits_block(scan, "/l", 4, z, probs,
                                                                                         member_offset=6)
    assert scan.findings == []
    bad_p, bad_z = probs.copy(), z.copy()
    bad_p[1, 2, 0], bad_z[1, 2, 1] = -1.0, np.inf
    assert not check_probs_block(scan, "/p", 4, bad_p, member_offset=6)
    assert not check_logits_block(scan, "/l", 4, bad_z, probs, member_offset=6)
    assert [(f.path, f.check, f.message) for f in scan.findings] == [
        ("/p", "range", "probability -1.0 outside [0, 1] at member 7, sample 6, class 0"),
        ("/l", "finite", "non-finite logit inf at member 7, sample 6, class 1")]


def test_probs_checked_in_blocks_one_finding_per_dataset(tmp_path):
    """Four blocks of 10 samples: the first bad value (member 1, sample 23) is named, the second one (member 1,
    sample 25, same block) and a later block's (a NaN at sample 38) are not; the labels of the same split are
    still checked."""
    probs = softmax(np.random.default_rng(0).normal(size=(M, N, C)))
    probs[0, 3] = [1.0, -0.0, 0.0, 0.0]  # a valid zero
    probs[1, 23, 2] = 2.0
    probs[1, 25, 0] = -1.0
    probs[0, 38, 3] = np.nan
    split = _split(probs)
    split["test"]["labels"][5] = 9
    got = _errors(write_plain_archive(tmp_path / "a.h5", n_classes=C, splits=split))
    assert sorted(got) == [
        ("/splits/test/labels", "label-range", "labels must be in [0, 4); found 9 at index 5"),
        ("/splits/test/probs", "range", "probability 2.0 outside [0, 1] at member 1, sample 23, class 2"),
    ]


def test_logits_checked_in_blocks_one_finding_per_dataset(tmp_path):
    """Logits blocks of 5 samples: the first non-finite logit (member 1, sample 22) is named, once, even with a
    later bad one; the first sample (row 0) is checked too; the split's labels and scores still are."""
    z = np.random.default_rng(2).normal(size=(M, N, C))
    probs = softmax(z)
    bad = z.copy()
    bad[1, 22, 3] = np.nan
    bad[0, 31, 0] = np.inf
    split = _split(probs, logits=bad, scores={"mahalanobis": (np.r_[np.zeros(N - 1), np.nan], "uncertainty")})
    split["test"]["labels"][6] = -1
    got = _errors(write_plain_archive(tmp_path / "a.h5", n_classes=C, splits=split))
    assert sorted(got) == [
        ("/splits/test/labels", "label-range", "labels must be in [0, 4); found -1 at index 6"),
        ("/splits/test/logits", "finite", "non-finite logit nan at member 1, sample 22, class 3"),
        ("/splits/test/scores/mahalanobis", "finite", "non-finite score nan at sample 39"),
    ]
    first = z.copy()
    first[0, 0, 1] += 5.0  # softmax no longer the probs, at sample 0
    got = _errors(write_plain_archive(tmp_path / "b.h5", n_classes=C, splits=_split(probs, logits=first)))
    assert [(p, c) for p, c, _ in got] == [("/splits/test/logits", "logits-softmax")]
    assert "of member 0, sample 0 differs" in got[0][2]
    assert _errors(write_plain_archive(tmp_path / "c.h5", n_classes=C, splits=_split(probs, logits=z))) == []


def test_a_repeated_sample_id_is_named_at_its_first_repeat(tmp_path):
    """The message names the smallest index whose id occurred before (a loop over the ids): 1003 ids where 500,
    7 and 999 come back at indices 1000, 1001, 1002 name index 1000 (an unstable sort can name 999)."""
    ids = np.r_[np.arange(1000), 500, 7, 999].astype(np.int64)
    seen, first = set(), None
    for i, v in enumerate(ids.tolist()):
        if v in seen:
            first = i
            break
        seen.add(v)
    n = ids.size
    probs = softmax(np.random.default_rng(3).normal(size=(1, n, C)))
    split = {"test": dict(role="in_domain", dataset="digits", probs=probs, labels=np.zeros(n, dtype=np.int64),
                          sample_ids=ids)}
    got = _errors(write_plain_archive(tmp_path / "a.h5", n_classes=C, splits=split), ReadLimits())
    assert got == [("/splits/test/sample_ids", "unique", f"sample ids must be unique; 500 repeats at index {first}")]
    assert first == 1000


def test_an_unfinished_producer_run_is_one_finding_counting_its_members(tmp_path):
    """``<out>.partial`` with a header and two finished members (files named by digits, ``.h5``; a temporary
    file and an upper-case suffix are not members) is the one error 'partial-run' about the whole file."""
    partial = tmp_path / "run.h5.partial"
    (partial / "members").mkdir(parents=True)
    (partial / "header.h5").write_bytes(b"")
    for name in ("000000.h5", "000001.h5", ".000002.h5.tmp", "000003.H5", "notes.h5"):
        (partial / "members" / name).write_bytes(b"")
    findings = validate_archive(partial)
    assert [(f.path, f.check, f.severity, f.message) for f in findings] == [(
        "<file>", "partial-run", "error",
        f"{partial} is an unfinished producer run with 2 finished member(s); re-run the producer's command to "
        "resume it, or `ubench finalize` it to write the archive")]


def test_probs_problem_points_at_the_value_out_of_range_and_row_sums_with_negative_zero():
    """The named value is the first one < 0 or > 1 (not a 0 or a 1 before it, nor only values > 2); a block that
    fails the bit test only for a -0.0 goes on to the row sums, named with its offsets."""
    block = np.array([[[0.0, 1.0], [1.0, 0.0], [0.5, 1.5]]])
    assert probs_problem(block) == ("range", "probability 1.5 outside [0, 1] at member 0, sample 2, class 1")
    sums = np.array([[[1.0, -0.0], [0.5, 0.5]], [[0.5, 0.5], [0.25, 0.25]]])
    tol = 1e-4 + 2 * 2.0**-23
    assert probs_problem(sums, start=5, member_offset=3) == (
        "row-sum", f"row of member 4, sample 6 sums to 0.5 (rows must sum to 1 within {tol:.1e})")


def test_root_format_attributes_as_bytes_and_the_header_messages(tmp_path):
    """ubench_format / ubench_format_version stored as fixed-length UTF-8 strings (bytes in h5py) are read as
    text; bytes that are not UTF-8, or a number, are the one 'format' error; a 'created' without a zone and a
    newer minor version (a note at '/') get their messages."""
    def as_bytes(value):
        return lambda f: f.attrs.create("ubench_format", np.array(value, dtype=f"S{len(value)}"))

    ok = write_plain_archive(tmp_path / "ok.h5", mutate=as_bytes(b"prediction-archive"))
    assert _errors(ok, ReadLimits()) == []
    fmt = ("root attributes 'ubench_format' and 'ubench_format_version' must be (UTF-8) strings; this is not a "
           "ubench prediction archive")
    latin = write_plain_archive(tmp_path / "latin.h5", mutate=as_bytes(b"pr\xe9diction"))
    assert _errors(latin, ReadLimits()) == [
        ("/", "encoding", "attribute 'ubench_format': byte 0xe9 at byte offset 2 is not valid UTF-8"),
        ("/", "format", fmt)]
    version = write_plain_archive(tmp_path / "latin_version.h5", mutate=lambda f: f.attrs.create(
        "ubench_format_version", np.array(b"1.\xff", dtype="S3")))
    assert _errors(version, ReadLimits()) == [
        ("/", "encoding", "attribute 'ubench_format_version': byte 0xff at byte offset 2 is not valid UTF-8"),
        ("/", "format", fmt)]
    number = write_plain_archive(tmp_path / "int.h5",
                                 mutate=lambda f: f.attrs.__setitem__("ubench_format_version", 3))
    assert _errors(number, ReadLimits()) == [("/", "format", fmt)]
    created = write_plain_archive(tmp_path / "created.h5", root={"created": "2026-11-22T03:21:31"})
    assert _errors(created, ReadLimits()) == [("/", "created", "attribute 'created' must be an ISO 8601 date and "
                                               "time with a zone, e.g. '2026-11-22T03:21:31+00:00'; found "
                                               "'2026-11-22T03:21:31'")]
    newer = write_plain_archive(tmp_path / "newer.h5", root={"ubench_format_version": "1.9"})
    notes = [(f.path, f.check) for f in validate_archive(newer) if f.severity == "note"]
    assert notes == [("/", "version")] and _errors(newer, ReadLimits()) == []


def test_check_values_false_reads_the_structure_only(tmp_path):
    """inspect_file(check_values=False) parses a structurally valid archive whatever its values (the readers
    check them block by block later); the default checks them."""
    from ubench.archive_schema.validator import inspect_file

    probs = softmax(np.random.default_rng(4).normal(size=(M, N, C)))
    probs[0, 1, 1] = 1.5
    path = write_plain_archive(tmp_path / "a.h5", n_classes=C, splits=_split(probs))
    parsed, f, findings = inspect_file(path, check_values=False)
    try:
        assert parsed is not None and [x for x in findings if x.severity == "error"] == []
    finally:
        f.close()
    parsed, f, findings = inspect_file(path)
    assert parsed is None and f is None and [x.check for x in findings] == ["range"]


def test_a_directory_with_a_header_but_no_partial_suffix_is_not_a_partial_run(tmp_path):
    run = tmp_path / "run.h5"
    (run / "members").mkdir(parents=True)
    (run / "header.h5").write_bytes(b"")
    assert "partial-run" not in [f.check for f in validate_archive(run)]
    assert [f.check for f in validate_archive(tmp_path / "run.h5.partial")] != ["partial-run"]  # no such dir
