# SPDX-License-Identifier: MIT
"""An archive written with plain h5py from archive_schema/SPEC.md alone validates and reads back exactly.

``plain_writer.py`` follows the text section by section and uses freedoms ubench's writer does not use; each
variant here exercises one more sentence of SPEC.md.
"""

from __future__ import annotations

import numpy as np
import pytest

from plain_writer import default_splits, softmax, write_plain_archive
from ubench.archive_schema import read_archive, validate_archive
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
