# SPDX-License-Identifier: MIT
"""Round trips through ArchiveWriter and read_archive, and streaming reads."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from strategies import labels_for, member_stacks
from ubench import __version__
from ubench.archive_schema import (
    ArchiveHeader,
    ArchiveWriter,
    MemberInfo,
    PredictionArchive,
    SplitInfo,
    SplitSpec,
    open_archive,
    read_archive,
    validate_archive,
)
from ubench.archive_schema.spec import MEMBER_KINDS

# No NUL: HDF5 variable-length strings are NUL-terminated (see test_nul_in_a_string_is_refused_cleanly).
TEXT = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=12)
JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), TEXT,
                         st.floats(allow_nan=False, allow_infinity=False))
JSON_OBJECTS = st.dictionaries(TEXT, st.one_of(JSON_SCALARS, st.lists(JSON_SCALARS, max_size=3)), max_size=4)
SPLIT_NAMES = ["test", "val.1", "ood_svhn", "rot-15", "A", "..", "_", "9"]


@st.composite
def archive_inputs(draw):
    """Everything ArchiveWriter takes, plus the member arrays: the expected archive is built from this."""
    m = draw(st.integers(1, 5))
    c = draw(st.integers(2, 6))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    names = draw(st.lists(st.sampled_from(SPLIT_NAMES), min_size=1, max_size=3, unique=True))
    splits = {}
    shifts = set()  # SPEC.md §4: each (shift_kind, shift_intensity) at most once
    for name in names:
        n = draw(st.integers(1, 15))
        role = draw(st.sampled_from(["in_domain", "ood", "shift"]))
        labels = draw(st.none() | labels_for(n, c))
        ids = draw(st.none() | st.lists(st.integers(-(2**62), 2**62), min_size=n, max_size=n, unique=True))
        shift = (draw(TEXT.filter(bool)), draw(st.floats(-1e6, 1e6))) if role == "shift" else (None, None)
        if role == "shift":
            if (shift[0], float(shift[1])) in shifts:
                shift = (shift[0] + name, shift[1])  # split names are unique, so this pair is new
            shifts.add((shift[0], float(shift[1])))
        splits[name] = dict(
            spec=SplitSpec(role=role, dataset=draw(TEXT), labels=labels,
                           sample_ids=None if ids is None else np.array(ids, dtype=np.int64),
                           n_samples=n if labels is None and ids is None else None,
                           shift_kind=shift[0], shift_intensity=shift[1]),
            n=n,
            probs=draw(member_stacks(m=m, n=n, c=c)),  # float32 or float64 input, stored as `dtype`
        )
    members = [dict(seed=draw(st.integers(-(2**63), 2**63 - 1)), epoch=draw(st.integers(-1, 10**6)),
                    step=draw(st.integers(-1, 10**9)), kind=draw(st.sampled_from(MEMBER_KINDS)),
                    info=draw(JSON_OBJECTS)) for _ in range(m)]
    scal = draw(st.none() | st.fixed_dictionaries(
        {}, optional={"n_parameters": st.integers(0, 10**12), "train_seconds": st.floats(0, 1e6),
                      "device": TEXT.filter(bool), "flops": st.integers(0, 10**15)}))
    return dict(
        m=m, c=c, dtype=dtype, splits=splits, members=members, scalability=scal,
        class_names=draw(st.none() | st.lists(TEXT, min_size=c, max_size=c)),
        config=draw(JSON_OBJECTS), compression=draw(st.sampled_from(["deflate", None])),
        method=draw(TEXT), model=draw(TEXT), dataset=draw(TEXT), framework=draw(TEXT),
        framework_version=draw(TEXT), description=draw(TEXT),
    )


def write(path, x) -> None:
    w = ArchiveWriter(path, method=x["method"], model=x["model"], dataset=x["dataset"], n_classes=x["c"],
                      splits={k: s["spec"] for k, s in x["splits"].items()}, class_names=x["class_names"],
                      config=x["config"], framework=x["framework"], framework_version=x["framework_version"],
                      description=x["description"], dtype=x["dtype"], compression=x["compression"])
    for k, mem in enumerate(x["members"]):
        w.add_member({name: s["probs"][k] for name, s in x["splits"].items()}, **mem)
    if x["scalability"] is not None:
        w.set_scalability(**x["scalability"])
    w.finalize()


def expected(path, x) -> PredictionArchive:
    """The archive the inputs describe, built without the reader."""
    provenance = {"writer": f"ubench {__version__}"}
    provenance.update({k: x[k] for k in ("framework", "framework_version") if x[k]})
    splits = {
        name: SplitInfo(name, s["spec"].role, s["spec"].dataset, s["n"], s["spec"].shift_kind,
                        None if s["spec"].shift_intensity is None else float(s["spec"].shift_intensity),
                        s["spec"].labels is not None, s["spec"].sample_ids is not None)
        for name, s in x["splits"].items()
    }
    header = ArchiveHeader(
        path=str(path), format_version="1.0", method=x["method"], model=x["model"], dataset=x["dataset"],
        n_classes=x["c"], n_members=x["m"], splits=splits,
        members=tuple(MemberInfo(**mem) for mem in x["members"]),
        class_names=None if x["class_names"] is None else tuple(x["class_names"]),
        provenance=provenance, config=x["config"], scalability=x["scalability"] or None,
        description=x["description"],
    )
    return PredictionArchive(
        header=header,
        probs={k: s["probs"].astype(x["dtype"]) for k, s in x["splits"].items()},
        labels={k: None if s["spec"].labels is None else np.asarray(s["spec"].labels, np.int64)
                for k, s in x["splits"].items()},
        sample_ids={k: s["spec"].sample_ids for k, s in x["splits"].items()},
    )


@given(x=archive_inputs())
def test_round_trip(x, tmp_path_factory):
    """For any members, splits (roles in_domain/ood/shift, with or without labels and ids), dtype, compression
    and metadata, writing with ArchiveWriter then reading with read_archive gives an equal archive, bit for bit
    in the stored dtype, and the file validates with no error or warning beyond 'no in_domain split'."""
    path = tmp_path_factory.mktemp("rt") / "run.h5"
    write(path, x)
    findings = validate_archive(path)
    assert all(f.check == "no-in-domain" for f in findings), findings
    got = read_archive(path)
    want = expected(path, x)
    assert got.header == want.header or got == want  # the header comparison gives the readable diff
    assert got == want
    for name, p in got.probs.items():
        assert p.dtype == np.dtype(x["dtype"])


def test_round_trip_worked_example(tmp_path):
    """A fixed archive: every field read back, and PredictionArchive.__eq__ notices a one-ulp change."""
    x = dict(m=2, c=3, dtype=np.float32, compression="deflate", class_names=["cat", "dog", "émeu"],
             config={"lr": 0.1, "seeds": [1, 2]}, method="deep_ensemble", model="mlp", dataset="toy",
             framework="numpy", framework_version="2", description="worked",
             members=[dict(seed=1, epoch=5, step=50, kind="independent", info={"a": 1}),
                      dict(seed=2, epoch=5, step=50, kind="independent", info={})],
             scalability={"n_parameters": 10, "device": "cpu", "train_seconds": 1.5},
             splits={"test": dict(n=2, spec=SplitSpec(role="in_domain", dataset="toy", labels=[0, 2],
                                                      sample_ids=np.array([7, 3])),
                                  probs=np.array([[[0.5, 0.25, 0.25], [0.1, 0.1, 0.8]],
                                                  [[0.6, 0.2, 0.2], [0.0, 0.0, 1.0]]])),
                     "rot": dict(n=1, spec=SplitSpec(role="shift", dataset="toy", n_samples=1, shift_kind="rotate",
                                                     shift_intensity=30),
                                 probs=np.array([[[1 / 3] * 3], [[0.2, 0.3, 0.5]]]))})
    write(tmp_path / "a.h5", x)
    got = read_archive(tmp_path / "a.h5")
    want = expected(tmp_path / "a.h5", x)
    assert got == want
    assert got.splits["rot"].shift_intensity == 30.0 and got.class_names == ("cat", "dog", "émeu")
    assert got.scalability == {"n_parameters": 10, "device": "cpu", "train_seconds": 1.5}
    assert got.probs["test"][1, 1].tolist() == [0.0, 0.0, 1.0]
    off = {k: v.copy() for k, v in want.probs.items()}
    off["test"][0, 0, 0] = np.nextafter(off["test"][0, 0, 0], np.float32(1))
    assert got != PredictionArchive(want.header, off, want.labels, want.sample_ids)


@given(x=archive_inputs(), rows=st.integers(1, 20))
def test_iter_probs_blocks_concatenate_to_probs(x, rows, tmp_path_factory):
    """For any archive and block size, open_archive(...).iter_probs(split, rows) yields (start, block) with
    start = 0, rows, 2*rows, … and the blocks concatenated along samples equal read_archive(...).probs[split]."""
    path = tmp_path_factory.mktemp("it") / "run.h5"
    write(path, x)
    whole = read_archive(path).probs
    with open_archive(path) as r:
        for name in x["splits"]:
            blocks = list(r.iter_probs(name, rows=rows))
            assert [s for s, _ in blocks] == list(range(0, whole[name].shape[1], rows))
            assert all(b.shape[1] <= rows for _, b in blocks)
            got = np.concatenate([b for _, b in blocks], axis=1)
            assert got.dtype == whole[name].dtype
            np.testing.assert_array_equal(got, whole[name])
            np.testing.assert_array_equal(np.concatenate([b for _, b in r.iter_probs(name)], axis=1),
                                          whole[name])


def _splits_named(name):
    return {name: SplitSpec(role="in_domain", dataset="d", n_samples=2)}


def test_split_named_dot_is_refused_cleanly(tmp_path):
    """'.' matches the split-name pattern but HDF5 cannot hold a group of that name: the writer raises
    ValueError naming the split and leaves no partial directory that would block the next run."""
    out = tmp_path / "a.h5"
    with pytest.raises(ValueError, match="'.'"):
        ArchiveWriter(out, method="m", model="x", dataset="d", n_classes=2, splits=_splits_named("."))
    assert not (tmp_path / "a.h5.partial").exists()
    ArchiveWriter(out, method="m", model="x", dataset="d", n_classes=2, splits=_splits_named("test"))


def test_nul_in_a_string_is_refused_cleanly(tmp_path):
    """A string HDF5 cannot store (embedded NUL) raises ValueError and leaves no partial directory, so the same
    output can be written right after."""
    out = tmp_path / "a.h5"
    with pytest.raises(ValueError):
        ArchiveWriter(out, method="m\x00", model="x", dataset="d", n_classes=2, splits=_splits_named("t"))
    assert not (tmp_path / "a.h5.partial").exists()
    w = ArchiveWriter(out, method="m", model="x", dataset="d", n_classes=2, splits=_splits_named("t"))
    w.add_member({"t": np.full((2, 2), 0.5)}, seed=0)
    w.finalize()
    assert read_archive(out).method == "m"


@pytest.mark.parametrize("name", ["test\n", "test\r\n", "\ntest", "."])
def test_split_name_is_matched_whole(name, tmp_path):
    """SPEC.md §4: the whole name matches [A-Za-z0-9_.-]{1,128} (a trailing newline is not 'end of string')."""
    with pytest.raises(ValueError, match="split name"):
        ArchiveWriter(tmp_path / "a.h5", method="m", model="x", dataset="d", n_classes=2, splits=_splits_named(name))
    assert not (tmp_path / "a.h5.partial").exists()


def test_writer_refuses_two_shift_splits_with_one_kind_and_intensity(tmp_path):
    """SPEC.md §4: each (shift_kind, shift_intensity) occurs once; 30 and 30.0 are the same intensity."""
    splits = {"rot30": SplitSpec(role="shift", dataset="d", n_samples=2, shift_kind="rotate", shift_intensity=30),
              "rot30b": SplitSpec(role="shift", dataset="d", n_samples=2, shift_kind="rotate", shift_intensity=30.0)}
    with pytest.raises(ValueError, match="'rot30' and 'rot30b'"):
        ArchiveWriter(tmp_path / "a.h5", method="m", model="x", dataset="d", n_classes=2, splits=splits)
    splits["rot30b"] = SplitSpec(role="shift", dataset="d", n_samples=2, shift_kind="rotate", shift_intensity=45)
    ArchiveWriter(tmp_path / "a.h5", method="m", model="x", dataset="d", n_classes=2, splits=splits)


@pytest.mark.parametrize("change, error, words", [
    (lambda p: p.__setitem__((3, 1), np.nan), ValueError, "non-finite value nan at member 1, sample 3, class 1"),
    (lambda p: p.__setitem__((2, 0), -0.25), ValueError, "probability -0.25 outside [0, 1] at member 1, sample 2"),
    (lambda p: p.__setitem__(4, p[4] * 1.01), ValueError, "row of member 1, sample 4 sums to 1.01"),
    (lambda p: p.astype(np.float16), TypeError, "float32 or float64; found dtype float16"),
    (lambda p: p[:, :2], ValueError, "must have shape (6, 3); found (6, 2)"),
])
def test_writer_checks_members_against_the_spec_itself(change, error, words, tmp_path):
    """The writer refuses a member the validator would refuse, naming split, member, sample and class (it checks
    with archive_schema's own rules, not the metrics core's)."""
    w = ArchiveWriter(tmp_path / "a.h5", method="m", model="x", dataset="d", n_classes=3,
                      splits={"test": SplitSpec(role="in_domain", dataset="d", n_samples=6)})
    good = np.full((6, 3), 1 / 3)
    w.add_member({"test": good}, seed=0)
    bad = good.copy()
    changed = change(bad)  # in place (returns None) or a new array
    bad = bad if changed is None else changed
    with pytest.raises(error) as info:
        w.add_member({"test": bad}, seed=1)
    assert "probs['test']" in str(info.value) and words in str(info.value)
    assert w.n_members == 1


@pytest.mark.parametrize("labels, error, words", [
    (np.array([0, 1, 3]), ValueError, "must be in [0, 3); found 3 at index 2"),
    (np.array([0.0, 1.0, 2.0]), TypeError, "integer dtype"),
    (np.zeros((3, 1), dtype=np.int64), ValueError, "shape"),
])
def test_writer_checks_labels_against_the_spec_itself(labels, error, words, tmp_path):
    with pytest.raises(error, match="labels of split 'test'") as info:
        ArchiveWriter(tmp_path / "a.h5", method="m", model="x", dataset="d", n_classes=3,
                      splits={"test": SplitSpec(role="in_domain", dataset="d", labels=labels)})
    assert words in str(info.value)
