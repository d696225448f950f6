# SPDX-License-Identifier: MIT
"""write_reference and read_reference on the archives and files that exercise their other branches: values that
fail the archive's value checks, splits without sample ids or labels, the inputs fingerprint, and reference
datasets of the wrong type (mutation survivors of scoring/reference.py, issue #27 item 8)."""

from __future__ import annotations

import os
import re

import h5py
import numpy as np
import pytest
from scoring_archives import build_archive, write_plain_archive

from ubench.archive_schema import ArchiveWriter, SplitSpec
from ubench.scoring.reference import ReferenceError, describe_reference, read_reference, write_reference


def test_reference_of_an_archive_whose_values_fail_their_checks(tmp_path):
    """A reference needs only labels and sample ids: write_reference reads the archive without its value checks,
    so predictions off the simplex (rows summing to 2) do not stop it."""
    y = np.array([0, 1, 2, 1])
    probs = np.full((2, 4, 3), 2.0 / 3.0)
    up = write_plain_archive(tmp_path / "bad.h5", {"test": probs}, {"test": y}, {"test": "in_domain"}, 3)
    ref = read_reference(write_reference(up, tmp_path / "ref.h5"))
    assert np.array_equal(ref.splits["test"].labels, y)
    assert np.array_equal(ref.splits["test"].sample_ids, np.arange(4))


@pytest.mark.parametrize("dataset, message", [
    ("sample_ids", "split 'test' of {path} has no sample_ids; a reference needs them"),
    ("labels", "split 'test' (in_domain) of {path} has no labels"),
])
def test_a_split_without_ids_or_labels_cannot_make_a_reference(tmp_path, dataset, message):
    up = write_plain_archive(tmp_path / "up.h5", {"test": np.full((1, 3, 2), 0.5)}, {"test": np.array([0, 1, 1])},
                             {"test": "in_domain"}, 2)
    with h5py.File(up, "a") as f:
        del f[f"splits/test/{dataset}"]
    with pytest.raises(ReferenceError, match=re.escape(message.format(path=up))):
        write_reference(up, tmp_path / "ref.h5")
    assert not (tmp_path / "ref.h5").exists()


def test_the_reference_keeps_the_inputs_fingerprint(tmp_path):
    """The fingerprint of the inputs a split was predicted on (SPEC.md 4.2) goes into the reference unchanged."""
    sha = "0123456789abcdef" * 4
    y = np.array([0, 1, 1, 0])
    w = ArchiveWriter(tmp_path / "a.h5", method="deep_ensemble", model="mlp", dataset="toy", n_classes=2,
                      splits={"test": SplitSpec(role="in_domain", dataset="toy", labels=y, sample_ids=np.arange(4),
                                                inputs_sha256=sha),
                              "ood": SplitSpec(role="ood", dataset="noise", sample_ids=np.arange(2))})
    w.add_member({"test": np.full((4, 2), 0.5, np.float32), "ood": np.full((2, 2), 0.5, np.float32)}, seed=0)
    w.finalize()
    ref = read_reference(write_reference(tmp_path / "a.h5", tmp_path / "ref.h5"))
    assert ref.splits["test"].inputs_sha256 == sha and ref.splits["ood"].inputs_sha256 is None


@pytest.mark.parametrize("data", [np.arange(120, dtype=np.float64), np.arange(120, dtype=np.int64).reshape(60, 2),
                                  np.array([b"x"] * 120)])
def test_reference_ids_must_be_a_1d_integer_dataset(tmp_path, data):
    path, _ = build_archive(tmp_path / "a.h5")
    ref = write_reference(path, tmp_path / "ref.h5")
    with h5py.File(ref, "a") as f:
        del f["splits/test/sample_ids"]
        f["splits/test/sample_ids"] = data
    with pytest.raises(ReferenceError, match=re.escape(f"{ref}: /splits/test/sample_ids must be a 1-d integer "
                                                       "dataset")):
        read_reference(ref)
    assert read_reference(write_reference(path, tmp_path / "ok.h5")).splits["test"].sample_ids.dtype == np.int64


def test_the_reference_file_layout(tmp_path):
    """The file write_reference makes: the root's format, version, kind, dataset, class count, creation time (UTC,
    to the second) and writer; /splits with each split's kind, role, dataset and size, in the archive's order
    (an archive whose splits are creation-ordered 'beta', 'alpha' keeps that order, not h5py's alphabetical one);
    read_reference returns the splits in that order, with their datasets."""
    from test_reference import _two_in_domain  # the creation-ordered plain archive of test_reference.py
    import ubench
    from ubench.scoring.reference import REFERENCE_FORMAT

    path, _ = build_archive(tmp_path / "a.h5")
    ref_path = write_reference(path, tmp_path / "ref.h5")
    order = ["blur_1", "blur_2", "noise_1", "ood", "test"]  # the writer's archive lists them alphabetically
    with h5py.File(ref_path, "r") as f:
        attrs = dict(f.attrs)
        assert (attrs["ubench_format"], attrs["ubench_format_version"]) == REFERENCE_FORMAT
        assert attrs["ubench_kind"] == "reference" and attrs["dataset"] == "toy" and attrs["n_classes"] == 5
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", attrs["created"]), attrs["created"]
        assert attrs["writer"] == f"ubench {ubench.__version__}"
        assert f["splits"].attrs["ubench_kind"] == "splits" and list(f["splits"]) == order
        sg = f["splits/ood"]
        assert dict(sg.attrs) == {"ubench_kind": "split", "role": "ood", "dataset": "noise", "n_samples": 60}
        assert dict(f["splits/blur_2"].attrs)["shift_intensity"] == 2.0
    ref = read_reference(ref_path)
    assert list(ref.splits) == order and ref.dataset == "toy"
    assert [s.dataset for s in ref.splits.values()] == ["toy", "toy", "toy", "noise", "toy"]
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 10)
    probs = {name: np.full((1, 10, 3), 1 / 3) for name in ("alpha", "beta")}
    ordered = _two_in_domain(tmp_path / "ordered.h5", probs, y, ("beta", "alpha"))
    ref_path = write_reference(ordered, tmp_path / "ordered_ref.h5")
    with h5py.File(ref_path, "r") as f:
        assert list(f["splits"]) == ["beta", "alpha"]
    assert list(read_reference(ref_path).splits) == ["beta", "alpha"]


def test_read_reference_names_what_is_wrong(tmp_path):
    """A missing file, a file that is not HDF5 (with the reader's reason), and a split without its required
    'role' attribute each get their own one-line error naming the path."""
    missing = tmp_path / "nope.h5"
    with pytest.raises(ReferenceError, match=f"^{re.escape(str(missing))}: no such reference file$"):
        read_reference(missing)
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 600)  # the signature, then nothing HDF5 can open
    with pytest.raises(ReferenceError, match=f"^{re.escape(str(junk))}: not an HDF5 file \\(.+\\)$"):
        read_reference(junk)
    path, _ = build_archive(tmp_path / "a.h5")
    ref = write_reference(path, tmp_path / "ref.h5")
    with h5py.File(ref, "a") as f:
        del f["splits/test"].attrs["role"]
    with pytest.raises(ReferenceError, match=f"^{re.escape(str(ref))}: attribute 'role' missing at /splits/test$"):
        read_reference(ref)


def test_string_attributes_stored_as_bytes_read_as_text(tmp_path):
    """HDF5 fixed-length strings come back as bytes: the reader decodes them (role, dataset, shift kind)."""
    path, _ = build_archive(tmp_path / "a.h5")
    ref = write_reference(path, tmp_path / "ref.h5")
    with h5py.File(ref, "a") as f:
        for key, value in (("role", b"shift"), ("dataset", b"toy"), ("shift_kind", b"blur")):
            f["splits/blur_1"].attrs[key] = np.bytes_(value)
    split = read_reference(ref).splits["blur_1"]
    assert (split.role, split.dataset, split.shift_kind) == ("shift", "toy", "blur")


def test_primary_split_choice_and_refusal(tmp_path):
    """Without --primary the first in-domain split in the archive's order is the primary (none when there is no
    in-domain split); a --primary that is not an in-domain split is refused, listing the in-domain splits in
    order ('none' when there are none)."""
    from test_reference import _two_in_domain

    y = np.random.default_rng(0).integers(0, 3, 10)
    probs = {name: np.full((1, 10, 3), 1 / 3) for name in ("alpha", "beta")}
    ordered = _two_in_domain(tmp_path / "ordered.h5", probs, y, ("beta", "alpha"))
    assert read_reference(write_reference(ordered, tmp_path / "r1.h5")).primary == "beta"
    with pytest.raises(ReferenceError, match=re.escape("in-domain splits: beta, alpha")):
        write_reference(ordered, tmp_path / "r2.h5", primary="gamma")
    only_ood = write_plain_archive(tmp_path / "ood.h5", {"ood": np.full((1, 4, 3), 1 / 3)}, {}, {"ood": "ood"}, 3)
    assert read_reference(write_reference(only_ood, tmp_path / "r3.h5")).primary is None
    with pytest.raises(ReferenceError, match=re.escape("is not an in-domain split of") + ".*in-domain splits: none$"):
        write_reference(only_ood, tmp_path / "r4.h5", primary="ood")


@pytest.mark.parametrize("where, name", [("/", "ubench_format"), ("/", "ubench_format_version"), ("/", "ubench_kind"),
                                         ("/", "n_classes"), ("/", "dataset"), ("/", "primary"),
                                         ("/splits/test", "role"), ("/splits/test", "dataset"),
                                         ("/splits/blur_1", "shift_kind"), ("/splits/blur_1", "shift_intensity"),
                                         ("/splits/test", "inputs_sha256")])
def test_an_oversized_attribute_is_refused_naming_where_it_is(tmp_path, where, name):
    """Every attribute is read within the limits: one over ``max_attr_bytes`` fails the read with its group and
    its name (before its value is used)."""
    from ubench.archive_schema.spec import ReadLimits

    path, _ = build_archive(tmp_path / "a.h5")
    ref = write_reference(path, tmp_path / "ref.h5", primary="test")
    with h5py.File(ref, "a") as f:
        f[where].attrs[name] = "x" * 5000
    with pytest.raises(ReferenceError, match=f"^reference {re.escape(str(ref))}: {where}: attribute '{name}' "):
        read_reference(ref, limits=ReadLimits(max_attr_bytes=4096))


@pytest.mark.parametrize("attrs, message", [
    ({"ubench_format": "prediction-archive"}, "{ref} is a prediction archive, not a ubench reference file (the label "
     "file that `ubench reference ARCHIVE --out REF.h5` writes from a trusted archive)"),
    ({"ubench_format": None}, "{ref}: not a ubench reference file (ubench_format None, version '1.1'"),
    ({"ubench_format_version": None}, "{ref}: not a ubench reference file (ubench_format 'ubench-reference', "
     "version None"),
    ({"ubench_format_version": "9.9"}, "{ref}: not a ubench reference file (ubench_format 'ubench-reference', "
     "version '9.9'"),
    ({"ubench_kind": "archive"}, "{ref}: not a ubench reference file"),
    ({"ubench_kind": None}, "{ref}: not a ubench reference file"),
])
def test_the_reference_header_is_checked(tmp_path, attrs, message):
    """The format, version and kind decide whether a file is a reference; a missing one is a wrong file, not a
    missing attribute."""
    from ubench.scoring.reference import REFERENCE_FORMAT

    path, _ = build_archive(tmp_path / "a.h5")
    ref = write_reference(path, tmp_path / "ref.h5")
    with h5py.File(ref, "a") as f:
        for key, value in attrs.items():
            if value is None:
                del f.attrs[key]
            else:
                f.attrs[key] = value
    expected = message.format(ref=ref).replace("'ubench-reference'", repr(REFERENCE_FORMAT[0])) \
        .replace("'1.1'", repr(REFERENCE_FORMAT[1]))
    with pytest.raises(ReferenceError, match="^" + re.escape(expected)):
        read_reference(ref)


@pytest.mark.parametrize("edit, message", [
    (lambda f: (f.__delitem__("splits"), f.create_dataset("splits", data=[1])), "{ref}: no /splits group"),
    (lambda f: f.__delitem__("splits"), "{ref}: no /splits group"),
    (lambda f: (f["splits"].__delitem__("ood"), f["splits"].create_dataset("ood", data=[1])),
     "{ref}: /splits/ood must be a group"),
    (lambda f: f["splits/ood"].__delitem__("sample_ids"), "{ref}: /splits/ood/sample_ids missing"),
    (lambda f: f["splits/test"].__delitem__("labels"), "{ref}: /splits/test/labels missing (required for role "
     "'in_domain')"),
    (lambda f: (f["splits/test"].__delitem__("labels"), f["splits/test"].create_dataset("labels", data=[0, 1])),
     "{ref}: /splits/test/labels must be integers of the sample_ids' shape"),
    (lambda f: (f["splits/test"].__delitem__("labels"), f["splits/test"].create_group("labels")),
     "{ref}: /splits/test/labels is not a plain dataset"),
    (lambda f: f.attrs.__setitem__("primary", "ood"), "{ref}: attribute 'primary' at / names 'ood', which is not "
     "an in-domain split of the reference; in-domain splits: test"),
    (lambda f: f["splits/test/labels"].__setitem__(np.s_[1:4], [9, 0, -2]),  # C = 5: the first bad one is named
     "{ref}: /splits/test/labels must be in [0, 5); found 9 at index 1 (2 outside in all)"),
    (lambda f: f["splits/test"].attrs.__setitem__("inputs_sha256", "AB" * 32),
     "{ref}: /splits/test: attribute 'inputs_sha256' must be 64 lower-case hex digits"),
    (lambda f: f["splits/test"].attrs.__setitem__("inputs_sha256", "ab" * 31),
     "{ref}: /splits/test: attribute 'inputs_sha256' must be 64 lower-case hex digits"),
])
def test_the_reference_splits_are_checked(tmp_path, edit, message):
    path, _ = build_archive(tmp_path / "a.h5")
    ref = write_reference(path, tmp_path / "ref.h5")
    with h5py.File(ref, "a") as f:
        edit(f)
    with pytest.raises(ReferenceError, match="^" + re.escape(message.format(ref=ref)) + "$"):
        read_reference(ref)


def test_describe_reference_shows_every_split_as_written(tmp_path):
    """describe_reference (what ``ubench inspect`` shows of a reference file): every field against the file it was
    written from."""
    rng = np.random.default_rng(0)
    p = {name: rng.dirichlet(np.ones(4), size=(2, n)) for name, n in (("test", 6), ("noisy", 5), ("far", 3))}
    labels = {"test": np.array([0, 1, 1, 3, 0, 1]), "noisy": np.array([2, 2, 2, 2, 2]), "far": None}
    roles = {"test": "in_domain", "noisy": "shift", "far": "ood"}
    up = write_plain_archive(tmp_path / "up.h5", p, labels, roles, 4, shift={"noisy": ("gaussian_noise", 3.0)})
    path = write_reference(up, tmp_path / "ref.h5")
    got = describe_reference(read_reference(path))
    assert got == {
        "kind": "reference-labels", "path": str(path), "file_bytes": os.path.getsize(path), "dataset": "toy",
        "n_classes": 4, "primary": "test",
        "splits": [  # in the file's order (the upload's, which plain h5py wrote in name order)
            {"name": "far", "role": "ood", "dataset": "toy", "shift_kind": None, "shift_intensity": None,
             "n_samples": 3, "has_labels": False, "n_labelled_classes": None},
            {"name": "noisy", "role": "shift", "dataset": "toy", "shift_kind": "gaussian_noise",
             "shift_intensity": 3.0, "n_samples": 5, "has_labels": True, "n_labelled_classes": 1},
            {"name": "test", "role": "in_domain", "dataset": "toy", "shift_kind": None, "shift_intensity": None,
             "n_samples": 6, "has_labels": True, "n_labelled_classes": 3},
        ],
    }


@pytest.mark.parametrize("value", [None, ""])
def test_a_reference_without_a_dataset_name_reads_as_empty(tmp_path, value):
    """The file's and a split's ``dataset`` attributes are optional: absent or empty, the dataset is ''."""
    path, _ = build_archive(tmp_path / "a.h5")
    ref = write_reference(path, tmp_path / "ref.h5")
    with h5py.File(ref, "a") as f:
        if value is None:
            del f.attrs["dataset"], f["splits/test"].attrs["dataset"]
        else:
            f.attrs["dataset"] = f["splits/test"].attrs["dataset"] = value
    got = read_reference(ref)
    assert got.dataset == "" and describe_reference(got)["dataset"] == ""
    assert got.splits["test"].dataset == "" and got.splits["ood"].dataset == "noise"


def test_a_finding_about_the_whole_file_names_the_file_once(tmp_path):
    """A finding whose HDF5 path is the file itself (``<file>``) reads 'reference PATH: MESSAGE (check)', without
    the '<file>: ' a finding inside the file would put before its message."""
    with pytest.raises(ReferenceError, match=f"^reference {re.escape(str(tmp_path))}: {re.escape(str(tmp_path))} is "
                                             r"not a regular file; archives must be regular files \(not-regular-file\)$"):
        read_reference(tmp_path)
    junk = tmp_path / "zeros.h5"
    junk.write_bytes(b"\0" * 64)
    with pytest.raises(ReferenceError, match=f"^reference {re.escape(str(junk))}: no HDF5 signature found: this is "
                                             r"not an HDF5 file \(not-hdf5\)$"):
        read_reference(junk)


def test_a_wrong_version_names_the_versions_read(tmp_path):
    from ubench.scoring.reference import READABLE_VERSIONS, REFERENCE_FORMAT

    path, _ = build_archive(tmp_path / "a.h5")
    ref = write_reference(path, tmp_path / "ref.h5")
    with h5py.File(ref, "a") as f:
        f.attrs["ubench_format_version"] = "9.9"
    with pytest.raises(ReferenceError, match="^" + re.escape(
            f"{ref}: not a ubench reference file (ubench_format {REFERENCE_FORMAT[0]!r}, version '9.9'; expected "
            f"{REFERENCE_FORMAT[0]!r}, one of {READABLE_VERSIONS})") + "$"):
        read_reference(ref)
