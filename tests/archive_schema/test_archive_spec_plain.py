# SPDX-License-Identifier: MIT
"""An archive written with plain h5py from archive_schema/SPEC.md alone validates and reads back exactly.

``plain_writer.py`` follows the text section by section and uses freedoms ubench's writer does not use; each
variant here exercises one more sentence of SPEC.md.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from plain_writer import default_splits, softmax, write_plain_archive
from ubench.archive_schema import UnsupportedArchiveError, read_archive, validate_archive
from ubench.archive_schema.safe_h5py import h5py


def _compact_probs(f):
    """§7: readers accept compact layout too (rewrite split 'noise' as a compact dataset)."""
    data = f["splits/noise/probs"][()]
    del f["splits/noise/probs"]
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.COMPACT)
    dsid = h5py.h5d.create(f["splits/noise"].id, b"probs", h5py.h5t.IEEE_F64LE,
                           h5py.h5s.create_simple(data.shape), dcpl=dcpl)
    dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(data))
    assert f["splits/noise/probs"].id.get_create_plist().get_layout() == h5py.h5d.COMPACT


VARIANTS = {
    "contiguous": dict(),
    "chunked-shuffle-deflate-fletcher32": dict(probs_options=dict(chunks=(1, 4, 4), shuffle=True, compression="gzip",
                                                                  compression_opts=6, fletcher32=True)),
    "compact": dict(mutate=_compact_probs),
    "big-endian-float64": dict(probs_options=dict(dtype=">f8")),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_plain_h5py_archive_from_spec_validates(variant, tmp_path):
    """§1-§7: every required object and attribute, strings fixed- and variable-length UTF-8, integers of several
    widths and signedness, an integer shift_intensity, and any allowed layout: no finding at all, and the
    reader returns exactly what was written."""
    kwargs = VARIANTS[variant]
    p = write_plain_archive(tmp_path / "plain.h5", class_names=["zero", "one", "two", "drei"], **kwargs)
    assert validate_archive(p) == []
    a = read_archive(p)
    written = default_splits()
    assert (a.method, a.model, a.dataset, a.n_classes, a.n_members) == ("deep_ensemble", "mlp", "digits", 4, 2)
    assert a.class_names == ("zero", "one", "two", "drei")
    assert a.config == {"lr": 0.1, "epochs": 3}
    assert a.scalability == {"n_parameters": 1234, "device": "cpu"}
    assert [(m.seed, m.epoch, m.step, m.kind, m.info) for m in a.members] == [
        (0, 3, -1, "independent", {"init": "he"}), (1, 3, -1, "independent", {"init": "he"})]
    assert {n: s.role for n, s in a.splits.items()} == {"test": "in_domain", "noise": "ood", "rot_15": "shift"}
    assert (a.splits["rot_15"].shift_kind, a.splits["rot_15"].shift_intensity) == ("rotate", 15.0)
    for name, s in written.items():
        np.testing.assert_array_equal(a.probs[name], s["probs"].astype(a.probs[name].dtype))
        if s.get("labels") is not None:
            np.testing.assert_array_equal(a.labels[name], s["labels"])
    np.testing.assert_array_equal(a.sample_ids["test"], np.arange(100, 112))
    assert a.sample_ids["noise"] is None and a.labels["noise"] is None


def test_spec_minimal_archive(tmp_path):
    """Only what SPEC.md says MUST be there: no classes, config, description, labels, ids or scalability."""

    def mutate(f):
        del f["scalability"]

    p = write_plain_archive(
        tmp_path / "min.h5", omit_root=("config", "description"), mutate=mutate,
        splits={"test": dict(role="in_domain", dataset="d", probs=softmax(np.zeros((1, 3, 2))))}, n_classes=2)
    assert validate_archive(p) == []
    a = read_archive(p)
    assert a.class_names is None and a.config == {} and a.scalability is None and a.labels["test"] is None


def test_spec_no_in_domain_split_is_valid_with_a_warning(tmp_path):
    """§1: an archive without an in_domain split is valid but gets a warning."""
    splits = default_splits()
    del splits["test"]
    p = write_plain_archive(tmp_path / "ood.h5", splits=splits)
    findings = validate_archive(p)
    assert [(f.check, f.severity) for f in findings] == [("no-in-domain", "warning")]
    assert read_archive(p).n_members == 2


def test_spec_unknown_objects_and_attributes_are_ignored(tmp_path):
    """§1: readers ignore objects and attributes the spec does not name."""

    def mutate(f):
        f.attrs["my_lab"] = "x"
        f["splits/test"].attrs["temperature"] = 1.5
        f["splits/test"].create_dataset("logits", data=np.zeros((2, 12, 4), "<f4"))
        f.create_group("extras").attrs["anything"] = 1

    p = write_plain_archive(tmp_path / "x.h5", mutate=mutate)
    assert validate_archive(p) == []
    assert set(read_archive(p).probs) == {"test", "noise", "rot_15"}


def test_spec_row_sum_tolerance_is_the_documented_one(tmp_path):
    """§4: rows must sum to 1 within 1e-4 + C * 2**-23: just inside passes, just outside fails."""
    c = 4
    tol = 1e-4 + c * 2.0**-23
    for factor, ok in ((1 + 0.9 * tol, True), (1 + 1.1 * tol, False)):
        probs = softmax(np.zeros((1, 3, c))) * factor
        p = write_plain_archive(tmp_path / f"t{ok}.h5", n_classes=c,
                                splits={"test": dict(role="in_domain", dataset="d", probs=probs)})
        assert (validate_archive(p) == []) is ok


# -- §1 fixed-length strings (issue 9 item 9) ----------------------------------------------------------------
STRING_TYPES = {  # (character set, padding) as the HDF5 C API spells them; MATLAB writes NULLTERM ASCII
    "ascii-nullterm": (h5py.h5t.CSET_ASCII, h5py.h5t.STR_NULLTERM),
    "ascii-nullpad": (h5py.h5t.CSET_ASCII, h5py.h5t.STR_NULLPAD),
    "ascii-spacepad": (h5py.h5t.CSET_ASCII, h5py.h5t.STR_SPACEPAD),
    "utf8-nullterm": (h5py.h5t.CSET_UTF8, h5py.h5t.STR_NULLTERM),
    "utf8-nullpad": (h5py.h5t.CSET_UTF8, h5py.h5t.STR_NULLPAD),
    "utf8-spacepad": (h5py.h5t.CSET_UTF8, h5py.h5t.STR_SPACEPAD),
}


def _fixed_type(cset, pad, width):
    t = h5py.h5t.C_S1.copy()
    t.set_size(width)
    t.set_cset(cset)
    t.set_strpad(pad)
    return t


def _padded(texts, pad, width):
    """The raw bytes a C writer stores: each string padded to ``width`` with spaces or NULs."""
    fill = b" " if pad == h5py.h5t.STR_SPACEPAD else b"\0"
    return np.array([t.encode() + fill * (width - len(t.encode())) for t in texts], dtype=f"S{width}")


def _rewrite_strings_fixed(cset, pad):
    """Rewrite every string attribute and string dataset SPEC.md allows as fixed-length strings of one
    (cset, padding), 3 bytes wider than the longest value so that the padding is really there, through the
    low-level API (what the HDF5 C API and MATLAB do: the file type is also the memory type, no conversion)."""

    def mutate(f):
        seen = []
        for obj in (f, f["members"], f["splits"], *f["splits"].values(), f["scalability"]):
            for name in list(obj.attrs):
                value = obj.attrs[name]
                if isinstance(value, bytes):
                    value = value.decode()
                if not isinstance(value, str):
                    continue
                width = len(value.encode()) + 3
                t = _fixed_type(cset, pad, width)
                del obj.attrs[name]
                aid = h5py.h5a.create(obj.id, name.encode(), t, h5py.h5s.create(h5py.h5s.SCALAR))
                aid.write(_padded([value], pad, width).reshape(()), mtype=t)
                seen.append(f"{obj.name}@{name}")
        for path in ("classes", "members/kind", "members/info"):
            texts = [s.decode() if isinstance(s, bytes) else s for s in f[path][()]]
            width = max(len(s.encode()) for s in texts) + 3
            t = _fixed_type(cset, pad, width)
            parent, name = f[path].parent, path.rsplit("/", 1)[-1]
            del parent[name]
            did = h5py.h5d.create(parent.id, name.encode(), t, h5py.h5s.create_simple((len(texts),)))
            did.write(h5py.h5s.ALL, h5py.h5s.ALL, _padded(texts, pad, width), mtype=t)
            seen.append(path)
        # every string attribute of SPEC.md §2, §4 and §5 that the archive holds was rewritten
        assert {"/@ubench_format", "/@ubench_format_version", "/@ubench_kind", "/@method", "/@model", "/@dataset",
                "/@created", "/@writer", "/@framework", "/@framework_version", "/@config", "/@description",
                "/members@ubench_kind", "/splits@ubench_kind", "/splits/rot_15@ubench_kind", "/splits/rot_15@role",
                "/splits/rot_15@dataset", "/splits/rot_15@shift_kind", "/scalability@ubench_kind",
                "/scalability@device"} <= set(seen)

    return mutate


@pytest.mark.parametrize("string_type", sorted(STRING_TYPES))
def test_fixed_length_strings_everywhere_validate_and_read_back_exactly(string_type, tmp_path):
    """§1: strings may be fixed-length, ASCII or UTF-8, NUL-terminated, NUL-padded or space-padded (HDF5 C API
    and MATLAB writers): an archive whose every string attribute and string dataset is written that way has no
    finding and reads back exactly as the same archive with variable-length strings."""
    cset, pad = STRING_TYPES[string_type]
    utf8 = cset == h5py.h5t.CSET_UTF8
    root = {"framework": "matlab", "framework_version": "R2026a", "method": "ensemble-ü" if utf8 else "ensemble"}
    names = ["zero", "one", "two", "émeu" if utf8 else "emu"]
    vlen = write_plain_archive(tmp_path / "vlen.h5", class_names=names, root=root)
    fixed = write_plain_archive(tmp_path / "fixed.h5", class_names=names, root=root,
                                mutate=_rewrite_strings_fixed(cset, pad))
    with h5py.File(fixed, "r") as f:  # the file really holds fixed-length strings of that kind
        t = f.attrs.get_id("ubench_format").get_type()
        assert (t.is_variable_str(), t.get_cset(), t.get_strpad()) == (False, cset, pad)
    assert validate_archive(fixed) == []
    a, b = read_archive(fixed), read_archive(vlen)
    assert a == b and a.provenance == b.provenance
    assert a.method == root["method"] and a.class_names == tuple(names)
    assert a.scalability == {"n_parameters": 1234, "device": "cpu"}
    assert a.provenance["created"] == "2026-11-22T03:21:31+00:00" and a.provenance["framework"] == "matlab"
    assert [m.kind for m in a.members] == ["independent"] * 2 and a.members[0].info == {"init": "he"}
    assert (a.splits["rot_15"].role, a.splits["rot_15"].shift_kind) == ("shift", "rotate")


# -- §9 version strings (issue 9 item 10) --------------------------------------------------------------------
@pytest.mark.parametrize("version", ["1.7.1", "1.0.0", "1.0\n", " 1.0", "1.0 ", "1.", ".0", "+1.0", "1.-1", "1.0a",
                                     "\u0661.0"])
def test_version_that_is_not_major_dot_minor_is_malformed(version, tmp_path):
    """§2, §9: a version is MAJOR.MINOR, two decimal integers, the whole string. Anything else is malformed: the
    finding names the attribute and the value, and it is never read as a newer minor or told to upgrade."""
    p = write_plain_archive(tmp_path / "a.h5", root={"ubench_format_version": version})
    findings = validate_archive(p)
    assert [(f.path, f.check, f.severity) for f in findings] == [("/", "version", "error")]
    msg = findings[0].message
    assert "'ubench_format_version'" in msg and "malformed" in msg and repr(version) in msg
    assert "newer" not in msg and "upgrade" not in msg
    with pytest.raises(UnsupportedArchiveError, match="malformed"):
        read_archive(p)


@pytest.mark.parametrize("version, severity, words", [("1.7", "note", "newer"), ("1.10", "note", "newer"),
                                                      ("2.0", "error", "upgrade ubench")])
def test_well_formed_newer_versions_keep_their_messages(version, severity, words, tmp_path):
    p = write_plain_archive(tmp_path / "a.h5", root={"ubench_format_version": version})
    found = [f for f in validate_archive(p) if f.check == "version"]
    assert [f.severity for f in found] == [severity] and words in found[0].message


# -- §2 created (issue 9 item 11) ----------------------------------------------------------------------------
@pytest.mark.parametrize("created", ["2026-11-22T03:21:31Z", "2026-11-22T03:21:31.250+05:30", "20261122T032131Z",
                                     "2026-11-22T03:21:31-08:00"])
def test_created_with_a_zone_is_valid(created, tmp_path):
    p = write_plain_archive(tmp_path / "a.h5", root={"created": created})
    assert validate_archive(p) == []
    assert read_archive(p).provenance["created"] == created


@pytest.mark.parametrize("created", ["2026-11-22T03:21:31", "2026-11-22", "2026-11-22 03:21:31", "yesterday", "",
                                     "2026-11-22T03:21:31+00:00\n", "2026-13-22T03:21:31Z"])
def test_created_must_be_iso8601_with_a_zone(created, tmp_path):
    """§2: created is an ISO 8601 date and time with a zone; otherwise an error naming the attribute and value."""
    p = write_plain_archive(tmp_path / "a.h5", root={"created": created})
    errors = [f for f in validate_archive(p) if f.severity == "error"]
    assert [(f.path, f.check) for f in errors] == [("/", "created")]
    assert "'created'" in errors[0].message and repr(created) in errors[0].message


# -- §4 shift splits and split names (issue 16 item 11) ------------------------------------------------------
def test_two_shift_splits_with_one_kind_and_intensity_are_one_finding_naming_both(tmp_path):
    """§4: each (shift_kind, shift_intensity) occurs once; an integer 15 and a float 15.0 are the same."""
    splits = default_splits()
    splits["rot_15_again"] = dict(splits["rot_15"], shift_intensity=15.0)
    splits["rot_30"] = dict(splits["rot_15"], shift_intensity=30.0)
    p = write_plain_archive(tmp_path / "a.h5", splits=splits)
    findings = validate_archive(p)
    assert [(f.path, f.check, f.severity) for f in findings] == [("/splits/rot_15_again", "shift-duplicate", "error")]
    assert "'rot_15' and 'rot_15_again'" in findings[0].message and "'rotate'" in findings[0].message


@pytest.mark.parametrize("name", ["test\n", "a" * 128 + "\n", "\n"])
def test_split_name_with_a_trailing_newline_is_refused(name, tmp_path):
    splits = default_splits()
    splits[name] = splits.pop("noise")
    p = write_plain_archive(tmp_path / "a.h5", splits=splits)
    errors = [f for f in validate_archive(p) if f.severity == "error"]
    assert [(f.path, f.check) for f in errors] == [(f"/splits/{name}", "name")]


# -- §4 row-sum tolerance lives in the spec (issue 9 item 17) ------------------------------------------------
def test_spec_and_metrics_row_sum_tolerances_agree():
    """The spec's constant and the metrics core's own copy are the same number (neither imports the other)."""
    from ubench.archive_schema.spec import ROW_SUM_ABS_TOL, row_sum_tolerance
    from ubench.metrics._validation import simplex_tolerance

    assert ROW_SUM_ABS_TOL == 1e-4
    for c in (2, 3, 10, 100, 1000, 100_000):
        assert row_sum_tolerance(c) == simplex_tolerance(c) == 1e-4 + c * 2.0**-23


def test_importing_archive_schema_imports_no_metrics_module():
    """archive_schema (reader, writer, validator) stands alone: a fresh interpreter importing it loads no
    ubench.metrics module."""
    code = ("import sys, ubench.archive_schema, ubench.archive_schema.describe; "
            "print(sorted(m for m in sys.modules if m.startswith('ubench.metrics')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_fixed_length_format_attribute_that_is_not_utf8_is_not_an_archive(tmp_path):
    """§1: the bytes of a fixed-length string are UTF-8; 0xff in ubench_format is refused with a finding."""

    def mutate(f):
        t = _fixed_type(h5py.h5t.CSET_ASCII, h5py.h5t.STR_NULLPAD, 19)
        del f.attrs["ubench_format"]
        aid = h5py.h5a.create(f.id, b"ubench_format", t, h5py.h5s.create(h5py.h5s.SCALAR))
        aid.write(np.array(b"prediction-archiv\xff", dtype="S19").reshape(()), mtype=t)

    findings = validate_archive(write_plain_archive(tmp_path / "a.h5", mutate=mutate))
    # The strict reader names the bad byte (encoding), then the archive is not recognised (format).
    assert [(f.path, f.check) for f in findings] == [("/", "encoding"), ("/", "format")]
    assert "ubench_format" in findings[0].message and "UTF-8" in findings[1].message
