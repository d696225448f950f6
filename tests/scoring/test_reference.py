# SPDX-License-Identifier: MIT
"""Reference label files: written from a trusted archive; an upload is checked against them exactly."""

from __future__ import annotations

import numpy as np
import pytest
from scoring_archives import build_archive, member_predictions, write_plain_archive

from ubench.metrics import accuracy_score, ensemble_mean_probs
from ubench.scoring.protocols import Protocol
from ubench.scoring.reference import (ReferenceError, ReferenceMismatchError, read_reference,
                                      write_reference)
from ubench.scoring.score import score_archive

NO_TS = Protocol.preset("pitfalls").replace(placement="none")


@pytest.fixture
def trusted(tmp_path):
    path, data = build_archive(tmp_path / "trusted.h5")
    return write_reference(path, tmp_path / "ref.h5"), data


def test_round_trip(trusted, tmp_path):
    ref_path, data = trusted
    ref = read_reference(ref_path)
    assert ref.n_classes == 5 and sorted(ref.splits) == ["blur_1", "blur_2", "noise_1", "ood", "test"]
    assert np.array_equal(ref.splits["test"].labels, data["labels"])
    assert ref.splits["ood"].labels is None and ref.splits["ood"].role == "ood"
    assert ref.splits["blur_2"].shift_intensity == 2.0
    with pytest.raises(ReferenceError, match="exists"):
        write_reference(tmp_path / "trusted.h5", ref_path)


def test_labels_come_only_from_the_reference(trusted, tmp_path):
    """An upload whose own labels are tampered with is scored with the reference's labels, with a note."""
    ref_path, data = trusted
    y = data["labels"]
    rng = np.random.default_rng(1)
    fake = {"test": y.copy()}
    fake["test"][:10] = (fake["test"][:10] + 1) % 5
    p = member_predictions(rng, 120, 5, y, 3, 2.0)
    up = write_plain_archive(tmp_path / "up.h5", {"test": p}, fake, {"test": "in_domain"}, 5)
    # the reference for this upload: only the test split
    only_test = tmp_path / "ref_test.h5"
    write_reference(write_plain_archive(tmp_path / "t.h5", {"test": p}, {"test": y}, {"test": "in_domain"}, 5),
                    only_test)
    report = score_archive(up, reference=only_test, protocol=NO_TS)
    assert report["labels"]["source"] == "reference"
    assert report["labels"]["reference"]["path"] == str(only_test)
    assert report["in_domain"]["test"]["accuracy"] == accuracy_score(ensemble_mean_probs(p), y)
    assert any("differ from the reference at 10 sample(s) (first at index 0)" in n for n in report["notes"])


@pytest.mark.parametrize("change, expected", [
    ({"shifts": ()}, "split(s) missing from the archive: blur_1, blur_2, noise_1"),
    ({"c": 6}, "n_classes differs: archive has C = 6, reference has C = 5"),
    ({"n": 100}, "split 'test': N differs (archive 100, reference 120)"),
    ({"ids_offset": 1}, "split 'test': sample ids differ first at index 0 (archive 1, reference 0"),
])
def test_mismatch_says_exactly_what_differs(trusted, tmp_path, change, expected):
    ref_path, _ = trusted
    up, _ = build_archive(tmp_path / "up.h5", **change)
    with pytest.raises(ReferenceMismatchError) as info:
        score_archive(up, reference=ref_path, protocol=NO_TS)
    assert any(expected in d for d in info.value.differences), info.value.differences


def test_extra_split_and_first_differing_id(trusted, tmp_path):
    ref_path, data = trusted
    rng = np.random.default_rng(0)
    y = data["labels"]
    p = member_predictions(rng, 120, 5, y, 2, 1.0)
    path = tmp_path / "x.h5"
    write_plain_archive(path, {"test": p, "extra": p}, {"test": y, "extra": y}, {"test": "in_domain",
                                                                                 "extra": "in_domain"}, 5)
    with pytest.raises(ReferenceMismatchError) as info:
        score_archive(path, reference=ref_path, protocol=NO_TS)
    assert "extra split(s) not in the reference: extra" in info.value.differences


def test_bad_reference_file(tmp_path, archive):
    path, _ = archive
    (tmp_path / "junk.h5").write_bytes(b"not hdf5")
    with pytest.raises(ReferenceError, match="not an HDF5 file"):
        score_archive(path, reference=tmp_path / "junk.h5")
    with pytest.raises(ReferenceError, match="not a ubench reference file"):
        score_archive(path, reference=path)


# -- issue #16 item 6: the reference, not the upload's link order, picks the primary split ------------------------
def _two_in_domain(path, p, y, order):
    """An archive (plain h5py, SPEC.md) with in-domain splits 'alpha' and 'beta' created in ``order`` under a
    creation-ordered /splits group, so the reader lists them in that order; 'beta' holds worse predictions."""
    import h5py

    m, n, c = p["alpha"].shape
    with h5py.File(path, "w") as f:
        f.attrs.update({"ubench_format": "prediction-archive", "ubench_format_version": "1.0",
                        "ubench_kind": "archive", "method": "mc_dropout", "model": "lenet", "dataset": "toy",
                        "n_classes": np.int64(c), "created": "2026-11-22T03:21:31+00:00", "writer": "test 1.0"})
        g = f.create_group("members")
        g.attrs["ubench_kind"] = "members"
        for key in ("seed", "epoch", "step"):
            g[key] = np.arange(m, dtype=np.int64)
        g.create_dataset("kind", data=["mc_sample"] * m, dtype=h5py.string_dtype())
        g.create_dataset("info", data=["{}"] * m, dtype=h5py.string_dtype())
        s = f.create_group("splits", track_order=True)
        s.attrs["ubench_kind"] = "splits"
        for name in order:
            sg = s.create_group(name)
            sg.attrs.update({"ubench_kind": "split", "role": "in_domain", "dataset": "toy", "n_samples": np.int64(n)})
            sg["probs"] = p[name]
            sg["labels"] = y
            sg["sample_ids"] = np.arange(n, dtype=np.int64)
    return path


@pytest.fixture
def two_in_domain(tmp_path):
    rng = np.random.default_rng(3)
    y = rng.integers(0, 5, 100)
    p = {"alpha": member_predictions(rng, 100, 5, y, 2, 3.0), "beta": member_predictions(rng, 100, 5, y, 2, 0.2)}
    return {order: _two_in_domain(tmp_path / f"{'-'.join(order)}.h5", p, y, order)
            for order in (("alpha", "beta"), ("beta", "alpha"))}, p, y


def test_primary_split_is_the_references_not_the_uploads_order(two_in_domain, tmp_path):
    """Identical predictions written in two link orders get the same primary split and the same headline under
    one reference; the default primary is the trusted archive's first in-domain split (accuracy checked against
    the predictions directly)."""
    archives, p, y = two_in_domain
    ref = write_reference(archives[("alpha", "beta")], tmp_path / "ref.h5")
    reports = [score_archive(a, reference=ref, protocol=NO_TS) for a in archives.values()]
    assert [r["primary_split"] for r in reports] == ["alpha", "alpha"]
    assert reports[0]["summary"] == reports[1]["summary"]
    assert reports[1]["summary"]["accuracy"] == accuracy_score(ensemble_mean_probs(p["alpha"]), y)
    assert read_reference(ref).primary == "alpha"


def test_reference_primary_option_and_version_1_0_files(two_in_domain, tmp_path):
    """`ubench reference --primary beta` stores the choice; a version 1.0 reference (no attribute) uses its own
    first in-domain split; a primary that is not an in-domain split is refused."""
    import h5py
    from click.testing import CliRunner

    from ubench.cli import cli

    archives, p, y = two_in_domain
    ref = tmp_path / "ref_beta.h5"
    res = CliRunner().invoke(cli, ["reference", str(archives[("alpha", "beta")]), "--out", str(ref),
                                   "--primary", "beta"])
    assert res.exit_code == 0, res.output
    report = score_archive(archives[("alpha", "beta")], reference=ref, protocol=NO_TS)
    assert report["primary_split"] == "beta"
    assert report["summary"]["accuracy"] == accuracy_score(ensemble_mean_probs(p["beta"]), y)
    with h5py.File(ref, "r+") as f:  # as ubench 1.0 wrote it
        del f.attrs["primary"]
        f.attrs["ubench_format_version"] = "1.0"
    assert read_reference(ref).primary == "alpha"  # name order of the 1.0 file's /splits
    with pytest.raises(ReferenceError, match="'ood' is not an in-domain split"):
        write_reference(archives[("alpha", "beta")], tmp_path / "bad.h5", primary="ood")


# -- issue #16 item 7: shift labels are checked against the reference ------------------------------------------
@pytest.mark.parametrize("attrs, expected", [
    ({"shift_kind": "noise"}, "split 'blur_2': shift_kind differs (archive 'noise', reference 'blur')"),
    ({"shift_intensity": 3.0}, "split 'blur_2': shift_intensity differs (archive 3.0, reference 2.0)"),
])
def test_relabelled_shift_split_is_a_mismatch(trusted, tmp_path, attrs, expected):
    """An upload that relabels blur@2 (kind or intensity) is rejected with a difference naming the split."""
    import h5py

    ref_path, _ = trusted
    up, _ = build_archive(tmp_path / "up.h5")
    with h5py.File(up, "r+") as f:
        f["splits/blur_2"].attrs.update(attrs)
    with pytest.raises(ReferenceMismatchError) as info:
        score_archive(up, reference=ref_path, protocol=NO_TS)
    assert expected in info.value.differences, info.value.differences


def test_float32_intensity_matches(trusted, tmp_path):
    """An intensity stored as float32 (0.1 -> 0.100000001) matches the reference's float64."""
    import h5py

    up, _ = build_archive(tmp_path / "up.h5", shifts=((("blur", 0.1), 1.0),))
    ref = write_reference(up, tmp_path / "r01.h5")
    with h5py.File(up, "r+") as f:
        f["splits/blur_0.1"].attrs["shift_intensity"] = np.float32(0.1)
    assert score_archive(up, reference=ref, protocol=NO_TS)["shift"]["blur_0.1"]["shift_intensity"] == pytest.approx(0.1)


# -- issue #16 item 13: a hostile reference is read like an upload --------------------------------------------
def test_reference_with_an_external_link_is_refused(trusted, tmp_path):
    """A reference whose labels are an external link to another file is refused by the container walk, naming
    the reference and the link, before anything is read from the other file."""
    import h5py

    ref_path, data = trusted
    outside = tmp_path / "outside.h5"
    with h5py.File(outside, "w") as f:
        f["labels"] = data["labels"].astype(np.int64)
    with h5py.File(ref_path, "r+") as f:
        del f["splits/test/labels"]
        f["splits/test/labels"] = h5py.ExternalLink(str(outside), "labels")
    with pytest.raises(ReferenceError) as info:
        read_reference(ref_path)
    message = str(info.value)
    assert str(ref_path) in message and "/splits/test/labels" in message and "external-link" in message


# -- issue #27 item 4: labels equal to C or negative never get into, or out of, a reference --------------------
def _labelled(tmp_path, y, c=5):
    rng = np.random.default_rng(4)
    p = member_predictions(rng, len(y), c, np.clip(y, 0, c - 1), 2, 2.0)
    return write_plain_archive(tmp_path / "a.h5", {"test": p}, {"test": y}, {"test": "in_domain"}, c), p


@pytest.mark.parametrize("bad", [5, -1, 6])
def test_a_reference_is_not_written_from_labels_outside_0_to_c(tmp_path, bad):
    """The archive's labels are value-checked before the reference is written (it used to copy them: the archive
    is opened without the value checks), so label C (= 5) or -1 at index 7 is refused, naming index and value."""
    from ubench.archive_schema import InvalidArchiveError

    y = np.tile(np.arange(5), 10)
    y[7] = bad
    archive, _ = _labelled(tmp_path, y)
    with pytest.raises(InvalidArchiveError, match=rf"found {bad} at index 7"):
        write_reference(archive, tmp_path / "ref.h5")
    assert not (tmp_path / "ref.h5").exists()


@pytest.mark.parametrize("bad", [5, -1])
def test_a_reference_file_with_a_label_outside_0_to_c_is_refused(tmp_path, bad):
    """A reference file whose labels were edited to C or -1 is refused when read and when scored against, naming
    the first bad index and value; labels 0 and C - 1 (both present) read back as written."""
    y = np.tile(np.arange(5), 10)
    archive, _ = _labelled(tmp_path, y)
    ref = write_reference(archive, tmp_path / "ref.h5")
    assert set(read_reference(ref).splits["test"].labels) == {0, 1, 2, 3, 4}
    import h5py

    with h5py.File(ref, "a") as f:
        labels = f["splits/test/labels"][()]
        labels[[9, 30]] = bad
        f["splits/test/labels"][...] = labels
    message = rf"/splits/test/labels must be in \[0, 5\); found {bad} at index 9 \(2 outside in all\)"
    with pytest.raises(ReferenceError, match=message):
        read_reference(ref)
    with pytest.raises(ReferenceError, match=message):
        score_archive(archive, reference=ref)
