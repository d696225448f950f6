# SPDX-License-Identifier: MIT
"""compare_to_reference, the whole list at once: every difference of every split, in the documented order, and
the one-line message that joins them (mutation survivors of scoring/reference.py, issue #27 item 8)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ubench.scoring.reference import Reference, ReferenceMismatchError, ReferenceSplit, compare_to_reference


def _ref_split(role, n, **kw):
    return ReferenceSplit(role=role, dataset="toy", labels=None if role == "ood" else np.zeros(n, np.int64),
                          sample_ids=np.arange(n, dtype=np.int64), **kw)


def _split(role, n, **kw):
    """An archive header's split: the attributes compare_to_reference reads."""
    return SimpleNamespace(**({"role": role, "n_samples": n, "inputs_sha256": None, "shift_kind": None,
                               "shift_intensity": None} | kw))


def test_every_split_is_checked_after_a_differing_one():
    """A split missing from the archive, a differing role, size or missing sample ids stop the checks of that
    split only: every later split is still checked (shift kind and intensity, size, sample ids) and every line
    kept, in order; extra splits are listed comma-separated; the error's message is the archive, the reference
    and every line joined by '; '."""
    ref = Reference(path="ref.h5", dataset="toy", n_classes=3, splits={
        "gone": _ref_split("in_domain", 2),
        "test": _ref_split("in_domain", 4),
        "blur_1": _ref_split("shift", 4, shift_kind="blur", shift_intensity=1.0),
        "ood": _ref_split("ood", 5),
        "other": _ref_split("in_domain", 3),
    })
    header = SimpleNamespace(n_classes=3, splits={
        "test": _split("ood", 4),
        "blur_1": _split("shift", 4, shift_kind="noise", shift_intensity=2.0),
        "ood": _split("ood", 6),
        "other": _split("in_domain", 3),
        "x": _split("in_domain", 3),
        "y": _split("ood", 3),
    })
    ids = {"test": np.arange(4), "ood": np.arange(6), "other": np.array([0, 2, 1])}  # none for blur_1
    diffs = compare_to_reference(header, ids, ref)
    assert diffs == [
        "split(s) missing from the archive: gone",
        "extra split(s) not in the reference: x, y",
        "split 'test': role differs (archive 'ood', reference 'in_domain')",
        "split 'blur_1': shift_kind differs (archive 'noise', reference 'blur')",
        "split 'blur_1': shift_intensity differs (archive 2.0, reference 1.0)",
        "split 'blur_1': the archive has no sample_ids to match against the reference",
        "split 'ood': N differs (archive 6, reference 5)",
        "split 'other': sample ids differ first at index 1 (archive 2, reference 1; 2 differ in all)",
    ]
    err = ReferenceMismatchError("up.h5", "ref.h5", diffs)
    assert str(err) == "up.h5 does not match reference ref.h5: " + "; ".join(diffs)
    assert err.differences == diffs
    assert compare_to_reference(header, ids, Reference(path="r", dataset="toy", n_classes=3, splits={
        "other": _ref_split("in_domain", 3)})) == [
        "extra split(s) not in the reference: test, blur_1, ood, x, y",
        "split 'other': sample ids differ first at index 1 (archive 2, reference 1; 2 differ in all)"]


def test_inputs_fingerprints_differ_only_when_both_sides_have_one():
    """SPEC.md 4.2: a split predicted on other inputs is a difference only when the archive and the reference
    both carry an inputs_sha256 and they differ; the line shows the first 12 hex digits of each."""
    a, b = "a" * 12 + "1" * 52, "b" * 12 + "2" * 52
    ref = Reference(path="r", dataset="toy", n_classes=3, splits={
        "both": _ref_split("in_domain", 2, inputs_sha256=a),
        "same": _ref_split("in_domain", 2, inputs_sha256=a),
        "ref_only": _ref_split("in_domain", 2, inputs_sha256=a),
        "archive_only": _ref_split("in_domain", 2),
        "neither": _ref_split("in_domain", 2),
    })
    header = SimpleNamespace(n_classes=3, splits={
        "both": _split("in_domain", 2, inputs_sha256=b), "same": _split("in_domain", 2, inputs_sha256=a),
        "ref_only": _split("in_domain", 2), "archive_only": _split("in_domain", 2, inputs_sha256=b),
        "neither": _split("in_domain", 2)})
    ids = {name: np.arange(2) for name in header.splits}
    assert compare_to_reference(header, ids, ref) == [
        "split 'both': predicted on other inputs: inputs_sha256 bbbbbbbbbbbb... differs from the reference's "
        "aaaaaaaaaaaa... (SPEC.md section 4.2)"]
