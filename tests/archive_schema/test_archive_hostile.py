# SPDX-License-Identifier: MIT
"""Hostile archives: every file of the corpus is refused with its finding, and nothing outside it is opened."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from hostile_corpus import CASES, VALID_CASES, Built, archive_dir, build_tiny_chunks, outside_dir
from inotify_watch import IN_ACCESS, IN_OPEN, FileWatch
from plain_writer import default_splits, softmax, write_plain_archive
from ubench.archive_schema import (
    InvalidArchiveError,
    ReadLimits,
    UnreadableArchiveError,
    UnsupportedArchiveError,
    open_archive,
    read_archive,
    validate_archive,
)
from ubench.archive_schema.scan import UNREADABLE_CHECKS

DOCUMENTED = (InvalidArchiveError, UnreadableArchiveError, UnsupportedArchiveError)


def _errors(findings):
    return [f for f in findings if f.severity == "error"]


def test_hostile_file_gets_its_finding_first(hostile: Built):
    """For every hostile file, validate_archive returns (never raises) and its first error is the expected
    (check, HDF5 path), with the offending index or reason in the message."""
    findings = validate_archive(hostile.path)
    errors = _errors(findings)
    assert errors, f"{hostile.path.name} was accepted: {findings}"
    first = errors[0]
    assert (first.check, first.path) == (hostile.check, hostile.hpath), [str(f) for f in findings]
    assert hostile.match in first.message, str(first)


def test_hostile_file_raises_only_documented_errors(hostile: Built):
    """read_archive and open_archive raise only ubench's documented errors, carrying the same finding; files that
    are not archives at all raise UnreadableArchiveError."""
    for opener in (read_archive, open_archive):
        with pytest.raises(DOCUMENTED) as info:
            opener(hostile.path)
        if hostile.check in UNREADABLE_CHECKS:
            assert isinstance(info.value, UnreadableArchiveError)
        else:
            assert type(info.value) is InvalidArchiveError
        assert any((f.check, f.path) == (hostile.check, hostile.hpath) for f in info.value.findings)


def test_one_dataset_over_the_size_limit_is_one_finding(tmp_path):
    """A dataset declaring more than the total limit gives one size-limit finding, not one per later dataset."""
    big = (2, 2**22, 1024)  # 32 GiB declared, over a 16 GiB limit

    def mutate(f):
        g = f["splits"].create_group("aaa_huge")  # sorts first: walked after the members group only
        g.attrs.update({"ubench_kind": "split", "role": "ood", "dataset": "void", "n_samples": np.int64(big[1])})
        g.create_dataset("probs", shape=big, dtype="<f4", chunks=(1, 1024, 1024))

    p = write_plain_archive(archive_dir(tmp_path) / "a.h5", mutate=mutate)
    findings = validate_archive(p, ReadLimits(max_total_bytes=16 * 2**30))
    size = [f for f in findings if f.check == "size-limit"]
    assert [f.path for f in size] == ["/splits/aaa_huge/probs"], [str(f) for f in findings]


# -- no file outside the archive is opened ----------------------------------------------------------------------
REACHING_OUT = ["external_link_probs", "external_link_group", "vds_outside", "external_storage", "symlink"]


@pytest.mark.parametrize("name", REACHING_OUT)
def test_no_file_outside_the_archive_is_opened(name, tmp_path):
    """Validating, opening or reading a file whose links, virtual sources, external storage or symlink point
    outside it opens and reads nothing outside it (inotify sees no IN_OPEN/IN_ACCESS there); then, as a positive
    control, opening the target ourselves is seen by the same watcher."""
    built = CASES[name](tmp_path)
    assert built.outside
    watched = [outside_dir(tmp_path), *built.outside]
    with FileWatch(watched) as watch:
        assert _errors(validate_archive(built.path))
        with pytest.raises(DOCUMENTED):
            read_archive(built.path)
        with pytest.raises(DOCUMENTED):
            open_archive(built.path, check_values=False)
        assert watch.events() == []
        with open(built.outside[0], "rb") as fh:  # positive control: the watcher does see opens and reads
            fh.read(1)
        seen = watch.events()
    assert any(p == built.outside[0] and mask & IN_OPEN for p, mask, _ in seen)
    assert any(p == built.outside[0] and mask & IN_ACCESS for p, mask, _ in seen)


_PLUGIN_CHILD = {
    # ubench first: HDF5_PLUGIN_PRELOAD=:: is set before libhdf5 starts.
    "ubench-first": "import ubench.archive_schema as a\nfrom ubench.archive_schema.safe_h5py import h5py\n",
    # h5py imported by someone else first: ubench must switch plugin loading off through H5PLset_loading_state.
    "h5py-first": "import h5py\nimport ubench.archive_schema as a\n",
    # control: plain h5py, no ubench. HDF5 searches the plugin directory and dlopens what it finds there.
    "control": "import h5py\n",
}


@pytest.mark.parametrize("mode", sorted(_PLUGIN_CHILD))
def test_unknown_filter_never_loads_a_plugin(mode, tmp_path):
    """Even reading the data of a dataset whose filter id is unknown (past validation, with raw h5py) makes no
    process that imported ubench look into HDF5_PLUGIN_PATH; without ubench HDF5 opens the planted library."""
    built = CASES["filter_unregistered"](tmp_path)
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    planted = plugins / "libfilter31999.so"
    planted.write_bytes(b"\x7fELF not really a library")
    code = _PLUGIN_CHILD[mode] + textwrap.dedent("""
        import sys
        if "a" in dir():
            findings = a.validate_archive(sys.argv[1])
            assert findings and findings[0].check == "filter", findings
        f = h5py.File(sys.argv[1], "r")
        try:
            f["splits/test/probs"][()]
        except OSError as exc:
            print("read failed:", exc)
        else:
            print("read succeeded")
        """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HDF5_PLUGIN")}
    env["HDF5_PLUGIN_PATH"] = str(plugins)
    with FileWatch([plugins, planted]) as watch:
        run = subprocess.run([sys.executable, "-c", code, str(built.path)], env=env, capture_output=True,
                             text=True, timeout=120)
        events = watch.events()
    assert run.returncode == 0, run.stderr
    assert "read failed" in run.stdout
    if mode == "control":
        assert any(p == planted and mask & IN_OPEN for p, mask, _ in events), events
    else:
        assert events == [], events
        assert "plugins disabled" in run.stdout


# -- attributes: missing ones and (attribute, bad value) tables ---------------------------------------------------
REQUIRED_ROOT = ["ubench_kind", "method", "model", "dataset", "n_classes", "created", "writer"]


@pytest.mark.parametrize("attr", REQUIRED_ROOT)
def test_missing_required_root_attribute(attr, tmp_path):
    """Each required root attribute of SPEC.md §2, when missing, is named in a missing-attribute finding at '/'."""
    p = write_plain_archive(tmp_path / "a.h5", omit_root=(attr,))
    errors = _errors(validate_archive(p))
    assert [(f.path, f.check) for f in errors] == [("/", "missing-attribute")], errors
    assert repr(attr) in errors[0].message


@pytest.mark.parametrize("attr", ["ubench_format", "ubench_format_version"])
def test_missing_format_attribute(attr, tmp_path):
    """Without the format attributes the file is not a ubench archive: one 'format' finding naming both."""
    p = write_plain_archive(tmp_path / "a.h5", omit_root=(attr,))
    errors = _errors(validate_archive(p))
    assert [(f.path, f.check) for f in errors] == [("/", "format")]
    assert attr in errors[0].message
    with pytest.raises(InvalidArchiveError):
        read_archive(p)


@pytest.mark.parametrize("where, attr", [
    ("/members", "ubench_kind"), ("/splits", "ubench_kind"), ("/splits/test", "ubench_kind"),
    ("/splits/test", "role"), ("/splits/test", "dataset"), ("/splits/test", "n_samples"),
    ("/splits/rot_15", "shift_kind"), ("/splits/rot_15", "shift_intensity"),
])
def test_missing_group_attribute(where, attr, tmp_path):
    """Each required group attribute (SPEC.md §1, §4), when missing, gives a finding at that group naming it."""
    p = write_plain_archive(tmp_path / "a.h5", mutate=lambda f: f[where].attrs.__delitem__(attr))
    errors = _errors(validate_archive(p))
    assert errors and errors[0].path == where and errors[0].check == "missing-attribute", errors
    assert attr in errors[0].message


BAD_VALUES = [
    # (HDF5 path, attribute, bad value, check, text the message must contain)
    ("/", "n_classes", "4", "attribute-type", "'n_classes'"),
    ("/", "n_classes", np.int64(1), "value", "found 1"),
    ("/", "n_classes", np.float64(4.0), "attribute-type", "'n_classes'"),
    ("/", "ubench_kind", "split", "value", "found 'split'"),
    ("/", "method", np.int64(3), "attribute-type", "'method'"),
    ("/", "config", "{not json", "json", "'config'"),
    ("/", "config", "[1, 2]", "json", "JSON object"),
    ("/splits/test", "role", "train", "value", "found 'train'"),
    ("/splits/test", "ubench_kind", "splits", "value", "found 'splits'"),
    ("/splits/test", "n_samples", "12", "attribute-type", "'n_samples'"),
    ("/splits/rot_15", "shift_intensity", np.float64(np.nan), "missing-attribute", "shift_intensity"),
    ("/splits/rot_15", "shift_intensity", "strong", "missing-attribute", "shift_intensity"),
    ("/members", "ubench_kind", "member", "value", "found 'member'"),
]


@pytest.mark.parametrize("where, attr, value, check, text", BAD_VALUES,
                         ids=[f"{w}:{a}={v!r}" for w, a, v, _, _ in BAD_VALUES])
def test_bad_attribute_value(where, attr, value, check, text, tmp_path):
    """An (attribute, bad value) pair gives a finding at that path whose message names the attribute or value."""
    p = write_plain_archive(tmp_path / "a.h5", mutate=lambda f: f[where].attrs.__setitem__(attr, value))
    errors = _errors(validate_archive(p))
    assert errors and (errors[0].path, errors[0].check) == (where, check), [str(f) for f in errors]
    assert text in errors[0].message


def test_n_samples_disagreeing_with_probs(tmp_path):
    """n_samples must equal the probs' N: the finding is on probs and names both numbers."""
    p = write_plain_archive(tmp_path / "a.h5", mutate=lambda f: f["splits/test"].attrs.__setitem__("n_samples", 13))
    errors = _errors(validate_archive(p))
    assert [(f.path, f.check) for f in errors][0] == ("/splits/test/probs", "shape")
    assert "12 samples but n_samples is 13" in errors[0].message


def test_bad_member_kind(tmp_path):
    def mutate(f):
        del f["members/kind"]
        f["members"].create_dataset("kind", data=np.array(["independent", "magic"], dtype=object),
                                    dtype=h5py.string_dtype())

    errors = _errors(validate_archive(write_plain_archive(tmp_path / "a.h5", mutate=mutate)))
    assert (errors[0].path, errors[0].check) == ("/members/kind", "value")
    assert "'magic' at index 1" in errors[0].message


# -- format versions ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", ["2.0", "0.9", "10.1"])
def test_unknown_major_version_is_refused(version, tmp_path):
    """An unknown major: validate_archive reports a 'version' error; read_archive raises UnsupportedArchiveError
    naming the file, the version found, the versions this ubench reads and 'upgrade ubench'."""
    p = write_plain_archive(tmp_path / "a.h5", root={"ubench_format_version": version})
    errors = _errors(validate_archive(p))
    assert [(f.path, f.check) for f in errors] == [("/", "version")]
    with pytest.raises(UnsupportedArchiveError) as info:
        read_archive(p)
    msg = str(info.value)
    assert str(p) in msg and version in msg and "versions 1.0" in msg and "upgrade ubench" in msg


@pytest.mark.parametrize("version", ["1", "1.x", "one", ""])
def test_malformed_version_is_refused(version, tmp_path):
    p = write_plain_archive(tmp_path / "a.h5", root={"ubench_format_version": version})
    with pytest.raises(UnsupportedArchiveError, match="1.0"):
        read_archive(p)
    assert [f.check for f in _errors(validate_archive(p))] == ["version"]


def test_other_format_is_refused(tmp_path):
    p = write_plain_archive(tmp_path / "a.h5", root={"ubench_format": "anndata"})
    with pytest.raises(UnsupportedArchiveError, match="anndata"):
        read_archive(p)


def test_newer_minor_version_reads_with_a_note(tmp_path):
    """Same major, newer minor ('1.7'): read by the newest 1.x reader (1.1), with a 'version' note naming both
    versions, and objects the 1.1 spec does not name are ignored."""

    def mutate(f):
        f["splits/test"].create_dataset("logits_added_in_1_7", data=np.zeros((2, 12, 4), "<f4"))
        f.attrs["new_root_attr"] = "ignored"

    p = write_plain_archive(tmp_path / "a.h5", root={"ubench_format_version": "1.7"}, mutate=mutate)
    findings = validate_archive(p)
    assert not _errors(findings)
    notes = [f for f in findings if f.check == "version"]
    assert len(notes) == 1 and notes[0].severity == "note" and "1.7" in notes[0].message and "read as 1.1" in notes[0].message
    archive = read_archive(p)
    assert archive.header.format_version == "1.7"
    np.testing.assert_array_equal(archive.probs["test"], default_splits()["test"]["probs"])


# -- issue 16 items 1, 3, 4, 8, 10 (reader-limits): strings, budgets, chunk counts, byte order ---------------------
def test_attribute_values_count_against_the_metadata_budget(tmp_path):
    """Decoded attribute values are charged to one per-file budget: a 3,000-byte config under a 2,000-byte
    budget is refused at '/', naming the attribute."""
    p = write_plain_archive(tmp_path / "a.h5", root={"config": '{"pad": "' + "x" * 2990 + '"}'})
    errors = _errors(validate_archive(p, ReadLimits(max_metadata_bytes=2000)))
    assert (errors[0].path, errors[0].check) == ("/", "metadata-budget"), [str(f) for f in errors]
    assert "'config'" in errors[0].message
    assert not _errors(validate_archive(p))


def test_variable_length_attribute_arrays_are_refused_unread(tmp_path):
    """A variable-length attribute of several values could reference one heap object from every element; it is
    refused from its shape, before it is read."""

    def mutate(f):
        f["scalability"].attrs.create("hosts", np.array(["a", "b"], dtype=object), dtype=h5py.string_dtype())

    errors = _errors(validate_archive(write_plain_archive(tmp_path / "a.h5", mutate=mutate)))
    assert (errors[0].path, errors[0].check) == ("/scalability", "attribute-shape"), [str(f) for f in errors]
    assert "'hosts'" in errors[0].message


@pytest.mark.parametrize("name", sorted(VALID_CASES))
def test_valid_files_of_once_breaking_classes_read_natively_and_score(name, tmp_path):
    """Big-endian probs, labels and ids (SPEC.md allows them) validate, read back as native arrays with the same
    values, and score under every placement and with member curves (per-member placement and member curves
    used to raise TypeError on '>f4')."""
    import dataclasses

    from ubench.scoring.protocols import Protocol
    from ubench.scoring.score import run_score

    p = VALID_CASES[name](tmp_path)
    assert not _errors(validate_archive(p))
    archive = read_archive(p)
    with h5py.File(p, "r") as f:
        for split, probs in archive.probs.items():
            stored = f[f"splits/{split}/probs"][()]
            assert probs.dtype.isnative and probs.dtype.itemsize == stored.dtype.itemsize
            np.testing.assert_array_equal(probs, stored)
    for placement, curves in (("post", False), ("per_member", False), ("post", True), ("none", True)):
        protocol = dataclasses.replace(Protocol.preset("pitfalls"), placement=placement, member_curves=curves)
        report = run_score(p, protocol=protocol)
        assert report["in_domain"]["test"]


def _chunks_touched(start: int, rows: int, shape, chunks) -> int:
    m, _, c = shape
    cm, cn, cc = chunks
    return -(-m // cm) * ((start + rows - 1) // cn - start // cn + 1) * -(-c // cc)


@st.composite
def byte_order_splits(draw):
    """One in-domain split: softmax of bounded logits in float32/float64 of either byte order, labels and ids of
    either byte order, and a chunk shape (or contiguous storage)."""
    m, n, c = draw(st.integers(1, 3)), draw(st.integers(1, 30)), draw(st.integers(2, 5))
    order, precision = draw(st.sampled_from("<>")), draw(st.sampled_from(["f4", "f8"]))
    logits = draw(arrays(np.float64, (m, n, c), elements=st.floats(-30, 30)))
    probs = softmax(logits).astype(order + precision)
    labels = draw(arrays(draw(st.sampled_from(["<i4", ">i4", ">i8", ">u2"])), n, elements=st.integers(0, c - 1)))
    ids = np.arange(n, dtype=draw(st.sampled_from(["<i8", ">i8", ">u4"])))
    chunks = draw(st.one_of(st.none(), st.tuples(st.integers(1, m), st.integers(1, n), st.integers(1, c))))
    split = dict(role="in_domain", dataset="digits", probs=probs, labels=labels, sample_ids=ids)
    if chunks is not None:
        split["options"] = {"chunks": chunks}
    return split, draw(st.integers(2, 12))


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(spec=byte_order_splits())
def test_any_byte_order_reads_back_native_in_chunk_bounded_blocks(spec, tmp_path):
    """For any byte order, precision and chunk shape: read_archive and iter_probs give native arrays equal to the
    stored values, and no block touches more than ``max_chunks_per_read`` chunks — or, when one sample row already
    spans more chunks than that, the archive is refused with a chunk-shape finding."""
    split, max_chunks = spec
    probs = split["probs"]
    p = write_plain_archive(tmp_path / "a.h5", n_classes=probs.shape[2], splits={"test": split})
    limits = ReadLimits(max_chunks_per_read=max_chunks)
    chunks = split.get("options", {}).get("chunks")
    span = 0 if chunks is None else -(-probs.shape[0] // chunks[0]) * -(-probs.shape[2] // chunks[2])
    if span > max_chunks:
        errors = _errors(validate_archive(p, limits))
        assert (errors[0].path, errors[0].check) == ("/splits/test/probs", "chunk-shape"), errors
        return
    archive = read_archive(p, limits)
    for got, want in ((archive.probs["test"], probs), (archive.labels["test"], split["labels"]),
                      (archive.sample_ids["test"], split["sample_ids"])):
        assert got.dtype.isnative
        np.testing.assert_array_equal(got, want)
    with open_archive(p, limits) as r:
        assert r.probs_dtype("test") == np.dtype(probs.dtype.str[1:])
        seen = []
        for start, block in r.iter_probs("test"):
            assert block.dtype.isnative
            if chunks is not None:
                assert _chunks_touched(start, block.shape[1], probs.shape, chunks) <= max_chunks
            seen.append(block)
        np.testing.assert_array_equal(np.concatenate(seen, axis=1), probs)


# VmHWM, not ru_maxrss: Linux carries the pre-exec image's peak (here: pytest's) into ru_maxrss.
_RSS_CHILD = """
import sys
from ubench.archive_schema import validate_archive
def status_kib(key):
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith(key))
base = status_kib("VmRSS")
findings = validate_archive(sys.argv[1])
assert not [f for f in findings if f.severity == "error"], findings
print((status_kib("VmHWM") - base) // 1024)
"""


@pytest.mark.slow
def test_tiny_chunks_are_read_in_chunk_bounded_blocks(tmp_path):
    """A valid archive of 60,000 one-element chunks (under the small-chunk refusal) validates within 128 MiB
    above the interpreter's footprint: libhdf5 keeps several KiB per chunk of a read, and the one 64 MiB block
    used to touch every chunk at once (about 6 KiB each, measured: 1M chunks took 6.4 GiB)."""
    p = build_tiny_chunks(tmp_path / "a.h5", n=15_000)
    run = subprocess.run([sys.executable, "-c", _RSS_CHILD, str(p)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert int(run.stdout) < 128, f"validate grew by {run.stdout.strip()} MiB"


def test_inspect_prints_at_most_20_class_names(tmp_path):
    """`ubench inspect` lists the first 20 class names and how many it left out, never all C of them."""
    from click.testing import CliRunner

    from ubench.cli import cli

    c = 25
    names = [f"class_{i:02d}" for i in range(c)]
    p = write_plain_archive(tmp_path / "a.h5", n_classes=c, splits={"test": default_splits(c=c)["test"]},
                            class_names=names)
    res = CliRunner().invoke(cli, ["inspect", str(p)])
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if x.startswith("classes"))
    assert "class_19" in line and "class_20" not in line and "(5 more)" in line
