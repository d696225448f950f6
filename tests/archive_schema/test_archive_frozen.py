# SPDX-License-Identifier: MIT
"""Frozen archives of released format versions are read by every later ubench, with exactly their values.

The files live in tests/data/archives/ (README.md there holds the script that made each one, once). A file here
is never regenerated: its sha256 is pinned so that rewriting it (instead of adding a new file) fails.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from ubench.archive_schema import MemberInfo, SplitInfo, open_archive, read_archive, validate_archive

DATA = Path(__file__).parent.parent / "data" / "archives"
V1_0 = DATA / "v1_0.h5"
V1_0_SHA256 = "ba3b4c56a70c7a777976cbc65a465fc43c8961e6cf649639daa0df9c3a14f348"


def test_v1_0_file_is_the_frozen_one():
    assert hashlib.sha256(V1_0.read_bytes()).hexdigest() == V1_0_SHA256, "never rewrite a frozen archive"


def test_v1_0_validates_without_findings():
    assert validate_archive(V1_0) == []


def test_v1_0_reads_with_exact_values():
    """Every field of the 1.0 archive written by ubench 0.1.0, value for value."""
    a = read_archive(V1_0)
    assert a.format_version == "1.0"
    assert (a.method, a.model, a.dataset, a.n_classes, a.n_members) == ("deep_ensemble", "mlp", "toy3", 3, 2)
    assert a.class_names == ("cat", "dog", "émeu")
    assert a.config == {"lr": 0.05, "epochs": 3, "seeds": [1, 2]}
    assert a.scalability == {"n_parameters": 123, "train_seconds": 1.5, "device": "cpu"}
    assert a.description == "frozen v1.0 test archive"
    assert a.provenance == {"writer": "ubench 0.1.0", "framework": "numpy", "framework_version": "2.4.6",
                            "created": "2026-11-22T03:33:04+00:00"}
    assert a.members == (MemberInfo(1, 3, 30, "independent", {"member": 0}),
                         MemberInfo(2, 3, 30, "independent", {"member": 1}))
    assert a.splits == {
        "test": SplitInfo("test", "in_domain", "toy3", 3, None, None, True, True),
        "noise": SplitInfo("noise", "ood", "uniform", 2, None, None, False, False),
        "rot_30": SplitInfo("rot_30", "shift", "toy3", 1, "rotate", 30.0, True, False),
    }
    assert a.header.splits_with_role("in_domain") == ["test"]
    expected = {
        "test": [[[0.5, 0.25, 0.25], [0.125, 0.125, 0.75], [0.0, 0.0, 1.0]],
                 [[0.625, 0.125, 0.25], [0.25, 0.5, 0.25], [0.0625, 0.0625, 0.875]]],
        "noise": [[[0.375, 0.375, 0.25], [0.5, 0.5, 0.0]], [[0.25, 0.25, 0.5], [1.0, 0.0, 0.0]]],
        "rot_30": [[[0.75, 0.125, 0.125]], [[0.5, 0.25, 0.25]]],
    }
    for name, values in expected.items():
        assert a.probs[name].dtype == np.float32
        assert a.probs[name].tolist() == values  # all dyadic: exact in float32
    assert a.labels["test"].tolist() == [0, 1, 2] and a.labels["rot_30"].tolist() == [0]
    assert a.labels["noise"] is None
    assert a.sample_ids["test"].tolist() == [10, 11, 12] and a.sample_ids["rot_30"] is None
    assert a.labels["test"].dtype == np.int64


def test_v1_0_streams_like_it_reads():
    with open_archive(V1_0) as r:
        blocks = list(r.iter_probs("test", rows=2))
    assert [s for s, _ in blocks] == [0, 2]
    np.testing.assert_array_equal(np.concatenate([b for _, b in blocks], axis=1), read_archive(V1_0).probs["test"])


V1_1 = DATA / "v1_1.h5"
V1_1_SHA256 = "d429ccf7fa4e225b09f06d1a0c60b3e3c3729783a92450e958b8f60d4f8a7aeb"


def test_v1_1_file_is_the_frozen_one():
    assert hashlib.sha256(V1_1.read_bytes()).hexdigest() == V1_1_SHA256, "never rewrite a frozen archive"


def test_v1_1_reads_with_exact_values():
    """The 1.1 archive (float16 logits, two method scores): every new field value for value."""
    assert validate_archive(V1_1) == []
    a = read_archive(V1_1)
    assert a.format_version == "1.1" and a.method == "sngp" and a.n_members == 2
    assert a.splits["test"] == SplitInfo("test", "in_domain", "toy3", 3, None, None, True, True, None, True,
                                         {"log_density": "confidence", "variance": "uncertainty"})
    assert a.splits["noise"].has_logits and a.splits["noise"].scores == a.splits["test"].scores
    assert a.logits["test"].dtype == np.float16 and a.logits["test"].shape == (2, 3, 3)
    assert a.logits["test"][0, 0].tolist() == [0.0, -0.693359375, -0.693359375]
    assert a.logits["noise"][1, 1].tolist() == [0.0, -20.796875, -20.796875]
    assert a.scores["test"]["variance"].tolist() == [0.5, 0.25, 2.0]
    assert a.scores["test"]["variance"].dtype == np.float64
    assert a.scores["noise"]["log_density"].tolist() == [-64.0, -32.0]
    assert a.scores["noise"]["log_density"].dtype == np.float32
    assert a.probs["test"][1].tolist() == [[0.625, 0.125, 0.25], [0.25, 0.5, 0.25], [0.0625, 0.0625, 0.875]]


def test_v1_1_file_reads_with_the_frozen_v1_0_reader():
    """A reader that knows only 1.0 reads the 1.1 file (the note says so) and ignores the logits and scores:
    the 1.0 reader, frozen, is run on the file as an older ubench would run it."""
    from ubench.archive_schema import registry
    from ubench.archive_schema.spec import V1_0

    newest = {s: f for s, f in registry.READERS.items()}
    try:
        registry.READERS.clear()
        registry.READERS[V1_0] = newest[V1_0]
        findings = validate_archive(V1_1)
        assert [(f.check, f.severity) for f in findings] == [("version", "note")]
        a = read_archive(V1_1)
    finally:
        registry.READERS.clear()
        registry.READERS.update(newest)
    assert not a.splits["test"].has_logits and a.splits["test"].scores == {}
    assert a.logits == {"test": None, "noise": None} and a.scores == {"test": {}, "noise": {}}
    assert a.probs["test"][0].tolist() == [[0.5, 0.25, 0.25], [0.125, 0.125, 0.75], [0.0, 0.0, 1.0]]
