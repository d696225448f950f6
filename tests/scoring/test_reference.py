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
