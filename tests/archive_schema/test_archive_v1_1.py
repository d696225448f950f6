# SPDX-License-Identifier: MIT
"""Format 1.1 (issue #31): per-member logits and per-split method scores, written, read, streamed and refused.

The plain-h5py writer (``plain_writer.py``, from SPEC.md alone) is the independent side: what it writes from the
text must read back value for value, and ubench's writer must produce files the same reader accepts.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from hostile_corpus import v11_splits
from plain_writer import softmax, write_plain_archive
from ubench.archive_schema import (ArchiveWriter, InvalidArchiveError, SplitSpec, open_archive, read_archive,
                                   validate_archive)
from ubench.archive_schema.logit_scores import logits_tolerance


def _errors(findings):
    return [f for f in findings if f.severity == "error"]


def _writer(path, **kwargs):
    return ArchiveWriter(path, method="sngp", model="mlp", dataset="digits", n_classes=4,
                         splits={"test": SplitSpec("in_domain", "digits", labels=[0, 1, 2, 3, 0]),
                                 "ood": SplitSpec("ood", "noise", n_samples=3)}, **kwargs)


def _member(rng, dtype=np.float32):
    z = {"test": rng.normal(0, 4, (5, 4)), "ood": rng.normal(0, 1, (3, 4))}
    return {s: softmax(v).astype(np.float32) for s, v in z.items()}, {s: v.astype(dtype) for s, v in z.items()}


def test_plain_v1_1_file_reads_value_for_value(tmp_path):
    splits = v11_splits()
    p = write_plain_archive(tmp_path / "a.h5", splits=splits)
    assert validate_archive(p) == []
    a = read_archive(p)
    assert a.format_version == "1.1"
    for name, s in splits.items():
        assert a.splits[name].has_logits and a.splits[name].scores == {"variance": "uncertainty",
                                                                       "density": "confidence"}
        np.testing.assert_array_equal(a.logits[name], s["logits"])
        for score, (values, _) in s["scores"].items():
            np.testing.assert_array_equal(a.scores[name][score], values)
            assert a.scores[name][score].dtype == values.dtype


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_writer_round_trips_logits_and_scores(tmp_path, dtype):
    rng = np.random.default_rng(1)
    w = _writer(tmp_path / "a.h5")
    members = [_member(rng, dtype) for _ in range(3)]
    for k, (probs, logits) in enumerate(members):
        w.add_member(probs, seed=k, logits=logits)
    var = {"test": rng.random(5), "ood": rng.random(3) + 1}
    w.set_scores("variance", var, direction="uncertainty")
    w.set_scores("density", {"test": np.arange(5), "ood": np.arange(3)}, direction="confidence")  # ints -> float64
    p = w.finalize()
    assert validate_archive(p) == []
    a = read_archive(p)
    assert a.format_version == "1.1"
    for split in ("test", "ood"):
        assert a.logits[split].dtype == np.dtype(dtype)
        np.testing.assert_array_equal(a.logits[split], np.stack([m[1][split] for m in members]))
        np.testing.assert_array_equal(a.scores[split]["variance"], var[split])
        assert a.scores[split]["density"].dtype == np.float64
    assert a.splits["ood"].scores == {"variance": "uncertainty", "density": "confidence"}
    with h5py.File(p, "r") as f:
        assert f["splits/test/scores"].attrs["ubench_kind"] == "scores"
        assert f["splits/test/logits"].chunks[0] == 1  # chunked like probs: one member per chunk row


def test_writer_stamps_1_0_without_logits_or_scores(tmp_path):
    """Nothing new in the file: it stays 1.0, which every older reader reads without a note."""
    w = _writer(tmp_path / "a.h5")
    w.add_member(_member(np.random.default_rng(0))[0], seed=0)
    a = read_archive(w.finalize())
    assert a.format_version == "1.0" and a.logits == {"test": None, "ood": None}
    w = _writer(tmp_path / "b.h5")
    w.add_member(_member(np.random.default_rng(0))[0], seed=0)
    w.set_scores("variance", {"test": np.ones(5), "ood": np.ones(3)}, direction="uncertainty")
    assert read_archive(w.finalize()).format_version == "1.1"


def test_writer_refuses_logits_that_are_not_the_probs(tmp_path):
    rng = np.random.default_rng(2)
    w = _writer(tmp_path / "a.h5")
    probs, logits = _member(rng)
    logits["test"][3, 1] += 0.5
    with pytest.raises(ValueError, match=r"logits\['test'\].*member 0, sample 3"):
        w.add_member(probs, seed=0, logits=logits)
    probs, logits = _member(rng)
    w.add_member(probs, seed=0, logits=logits)
    with pytest.raises(ValueError, match="every member of an archive has logits or none"):
        w.add_member(probs, seed=1)
    with pytest.raises(TypeError, match="float16 but the earlier members' logits are float32"):
        w.add_member(probs, seed=1, logits={s: v.astype(np.float16) for s, v in logits.items()})
    with pytest.raises(ValueError, match="exactly the splits"):
        w.add_member(probs, seed=1, logits={"test": logits["test"]})
    w2 = _writer(tmp_path / "b.h5")
    w2.add_member(probs, seed=0)
    with pytest.raises(ValueError, match="no earlier member has logits"):
        w2.add_member(probs, seed=1, logits=logits)


@pytest.mark.parametrize("name, values, direction, match", [
    ("energy", None, "uncertainty", "not be one of"),
    ("bad name", None, "uncertainty", "must match"),
    ("v", None, "higher", "direction must be one of"),
    ("v", {"test": np.ones(5)}, "uncertainty", "exactly the splits"),
    ("v", {"test": np.ones(4), "ood": np.ones(3)}, "uncertainty", r"shape \(5,\)"),
    ("v", {"test": np.r_[1, 2, np.nan, 4, 5], "ood": np.ones(3)}, "uncertainty", "at sample 2"),
])
def test_writer_refuses_bad_scores(tmp_path, name, values, direction, match):
    w = _writer(tmp_path / "a.h5")
    values = values or {"test": np.ones(5), "ood": np.ones(3)}
    with pytest.raises(ValueError, match=match):
        w.set_scores(name, values, direction=direction)


def test_logits_resume_with_the_partial_run(tmp_path):
    """Logits live in the member files of the partial run: a resumed writer finalizes them with the rest."""
    rng = np.random.default_rng(3)
    members = [_member(rng) for _ in range(2)]
    w = _writer(tmp_path / "a.h5")
    w.add_member(members[0][0], seed=0, logits=members[0][1])
    del w  # the process dies here
    w = _writer(tmp_path / "a.h5")
    assert w.n_members == 1
    w.add_member(members[1][0], seed=1, logits=members[1][1])
    a = read_archive(w.finalize())
    np.testing.assert_array_equal(a.logits["ood"], np.stack([m[1]["ood"] for m in members]))


def test_more_scores_than_the_limit_are_refused(tmp_path):
    """ReadLimits.max_scores (256 by default; 2 here) bounds the scores of a split before any is read."""
    from ubench.archive_schema import ReadLimits

    p = write_plain_archive(tmp_path / "a.h5", splits=v11_splits())
    errors = _errors(validate_archive(p, ReadLimits(max_scores=1)))
    assert (errors[0].path, errors[0].check) == ("/splits/noise/scores", "size-limit")
    assert "2 scores; at most 1" in errors[0].message
    assert validate_archive(p, ReadLimits(max_scores=2)) == []


def test_float16_tolerance_is_what_half_precision_needs():
    """The tolerance's logit term is expm1(2 u max|z|): float16 logits of magnitude 8 move a softmax by up to
    ~0.8 %, float32 ones by ~1e-6; the probabilities' own term (1e-4 + C 2**-23) is always there."""
    z = np.array([[8.0, 0.0, -8.0, 0.0]])
    assert logits_tolerance(z.astype(np.float16), 4)[0] == pytest.approx(1e-4 + 4 * 2**-23 + np.expm1(16 * 2**-11))
    assert logits_tolerance(z.astype(np.float32), 4)[0] == pytest.approx(1e-4 + 4 * 2**-23 + np.expm1(16 * 2**-24))
    # the worst case of rounding to float16 stays within it, at every magnitude up to 60
    rng = np.random.default_rng(0)
    for scale in (1, 8, 30, 60):
        z = rng.normal(0, scale, (2000, 10))
        z16 = z.astype(np.float16)
        diff = np.abs(softmax(z16.astype(np.float64)) - softmax(z).astype(np.float32)).max(axis=1)
        assert (diff <= logits_tolerance(z16, 10)).all()


def test_streamed_logits_and_scores_are_checked_without_a_full_validation(tmp_path):
    """A check_values=False open (what ``score`` uses) still refuses bad logits block by block and a non-finite
    score when it is read, with the finding's path and index."""
    splits = v11_splits()
    splits["test"]["logits"][1, 10, 2] += 2.0
    n = splits["noise"]["scores"]["variance"][0].copy()
    n[4] = np.nan
    splits["noise"]["scores"]["variance"] = (n, "uncertainty")
    p = write_plain_archive(tmp_path / "a.h5", splits=splits)
    with open_archive(p, check_values=False) as r:
        assert r.header.splits["test"].has_logits
        with pytest.raises(InvalidArchiveError) as info:
            for _ in r.iter_checked_logits("test"):
                pass
        assert "member 1, sample 10" in str(info.value)
        with pytest.raises(InvalidArchiveError, match="at sample 4"):
            r.scores("noise")
        assert set(r.scores("test")) == {"variance", "density"}
