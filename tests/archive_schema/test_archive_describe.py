# SPDX-License-Identifier: MIT
"""`ubench inspect --json` prints strict JSON (RFC 8259) for every valid archive (issue 16 item 11).

The oracle is Python's json parser with the non-standard constants (NaN, Infinity, -Infinity) refused, and the
values the archive holds, written with plain h5py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from plain_writer import write_plain_archive
from ubench.archive_schema import validate_archive
from ubench.archive_schema.safe_h5py import h5py
from ubench.cli import cli


def _strict_loads(text: str):
    def refuse(name):
        raise ValueError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def _odd_but_valid(f):
    """Everything SPEC.md allows that strict JSON cannot hold as is."""
    f.attrs["config"] = '{"lr": NaN, "wd": Infinity, "m": -Infinity, "big": 1e999, "ok": 0.5}'
    del f["members/info"]
    f["members"].create_dataset("info", data=np.array(['{"flops": 1e999}', '{"t": -1e999}'], dtype=object),
                                dtype=h5py.string_dtype())
    sc = f["scalability"]
    sc.attrs["train_seconds"] = np.float64(np.nan)
    sc.attrs["per_device_seconds"] = np.array([1.5, 2.5, np.inf])
    sc.attrs["shape"] = np.array([[1, 2], [3, 4]], dtype=np.int32)
    sc.attrs["impedance"] = np.complex128(1.0 + 2.0j)
    sc.attrs.create("blob", np.void(b"ab\x00\xff"))  # an HDF5 opaque attribute: h5py returns bytes


def test_inspect_json_is_strict_json_for_nan_infinity_arrays_bytes_and_complex(tmp_path):
    """NaN/Infinity become the strings "NaN"/"Infinity"/"-Infinity", arrays lists, opaque bytes an escaped
    string, complex numbers [real, imag]; the exit code is 0 and no traceback is printed."""
    p = write_plain_archive(tmp_path / "odd.h5", mutate=_odd_but_valid)
    assert [f for f in validate_archive(p) if f.severity == "error"] == []
    res = CliRunner().invoke(cli, ["inspect", str(p), "--json"])
    assert res.exit_code == 0 and res.exception is None, res.output
    info = _strict_loads(res.output)
    assert info["config"] == {"lr": "NaN", "wd": "Infinity", "m": "-Infinity", "big": "Infinity", "ok": 0.5}
    assert [m["info"] for m in info["members"]] == [{"flops": "Infinity"}, {"t": "-Infinity"}]
    assert info["scalability"] == {
        "n_parameters": 1234, "device": "cpu", "train_seconds": "NaN", "per_device_seconds": [1.5, 2.5, "Infinity"],
        "shape": [[1, 2], [3, 4]], "impedance": [1.0, 2.0], "blob": "ab\x00\\xff",
    }


def test_inspect_text_output_spells_non_finite_values_as_the_json_does(tmp_path):
    p = write_plain_archive(tmp_path / "odd.h5", mutate=_odd_but_valid)
    res = CliRunner().invoke(cli, ["inspect", str(p)])
    assert res.exit_code == 0 and res.exception is None, res.output
    assert "train_seconds=NaN" in res.output


@pytest.mark.parametrize("value, expected", [
    (float("nan"), "NaN"), (float("-inf"), "-Infinity"), (np.float32(np.inf), "Infinity"), (b"\xc3\xa9\xff", "é\\xff"),
    (np.complex64(0.5 - 1j), [0.5, -1.0]), (complex(np.nan, 1), ["NaN", 1.0]), ({1: (np.int64(2),)}, {"1": [2]}),
    (np.array([b"x"]), ["x"]), (True, True), (None, None),
])
def test_json_safe_table(value, expected):
    from ubench.archive_schema.describe import json_safe

    got = json_safe(value)
    assert got == expected
    assert _strict_loads(json.dumps(got, allow_nan=False)) == expected
