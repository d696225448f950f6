# SPDX-License-Identifier: MIT
"""`ubench validate`, `inspect` and `finalize`: exit codes 0/1/2, JSON output, no tracebacks; upload strings and
file names escaped on the terminal (issue #16 item 5)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent / "archive_schema"))
from hostile_corpus import ATTACK_FILE_NAME, OUTPUT_CASES, TERMINAL_ATTACK  # noqa: E402
from terminal_checks import assert_no_raw_controls  # noqa: E402
from strategies import softmax64  # noqa: E402
from ubench.archive_schema import ArchiveWriter, SplitSpec  # noqa: E402
from ubench.archive_schema.safe_h5py import h5py  # noqa: E402
from ubench.cli import cli  # noqa: E402


def _write(path, n_members=2, finalize=True):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, 30)
    w = ArchiveWriter(path, method="deep_ensemble", model="mlp", dataset="toy", n_classes=4,
                      splits={"test": SplitSpec(role="in_domain", dataset="toy", labels=y),
                              "noise": SplitSpec(role="ood", dataset="noise", n_samples=12)},
                      config={"lr": 0.1})
    for k in range(n_members):
        w.add_member({"test": softmax64(rng.normal(size=(30, 4))), "noise": softmax64(rng.normal(size=(12, 4)))},
                     seed=k)
    return w.finalize() if finalize else w


@pytest.fixture
def archive(tmp_path):
    return _write(tmp_path / "run.h5")


@pytest.fixture
def broken(tmp_path):
    path = _write(tmp_path / "bad.h5")
    with h5py.File(path, "r+") as f:
        f["splits/test/probs"][1, 7, :] = np.float32(0.5)  # row sums to 2
    return path


def test_validate_valid_exits_0_and_json_lists_no_error(archive):
    res = CliRunner().invoke(cli, ["validate", str(archive), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["valid"] is True and out["exit_code"] == 0
    assert [f for f in out["findings"] if f["severity"] == "error"] == []


def test_validate_invalid_exits_1_naming_path_and_index(broken):
    res = CliRunner().invoke(cli, ["validate", str(broken), "--json"])
    assert res.exit_code == 1
    errors = [f for f in json.loads(res.output)["findings"] if f["severity"] == "error"]
    assert errors[0]["path"] == "/splits/test/probs" and errors[0]["check"] == "row-sum"
    assert "member 1, sample 7" in errors[0]["message"]


def test_validate_unreadable_exits_2(tmp_path, archive):
    cut = tmp_path / "cut.h5"
    cut.write_bytes(archive.read_bytes()[:2000])
    res = CliRunner().invoke(cli, ["validate", str(cut)])
    assert res.exit_code == 2
    assert "hdf5-open" in res.output and "Traceback" not in res.output


def test_inspect_json_describes_splits_and_members(archive):
    res = CliRunner().invoke(cli, ["inspect", str(archive), "--json"])
    assert res.exit_code == 0, res.output
    info = json.loads(res.output)
    assert info["method"] == "deep_ensemble" and info["n_members"] == 2
    shapes = {s["name"]: s["shape"] for s in info["splits"]}
    assert shapes == {"test": [2, 30, 4], "noise": [2, 12, 4]}
    assert info["config"] == {"lr": 0.1}


def test_inspect_rejects_broken_archive_with_exit_1(broken):
    res = CliRunner().invoke(cli, ["inspect", str(broken)])
    # inspect skips the value scan, so a value error is not seen here; a structural one is
    assert res.exit_code == 0
    with h5py.File(broken, "r+") as f:
        del f["members/seed"]
    res = CliRunner().invoke(cli, ["inspect", str(broken)])
    assert res.exit_code == 1 and "/members/seed" in res.output


def test_finalize_partial_run(tmp_path):
    w = _write(tmp_path / "run.h5", n_members=3, finalize=False)
    res = CliRunner().invoke(cli, ["validate", str(w.partial_dir)])
    assert res.exit_code == 1 and "partial-run" in res.output and "3 finished member" in res.output
    res = CliRunner().invoke(cli, ["finalize", str(w.partial_dir)])
    assert res.exit_code == 0, res.output
    assert CliRunner().invoke(cli, ["validate", str(tmp_path / "run.h5")]).exit_code == 0
    assert not w.partial_dir.exists()


@pytest.mark.parametrize("kind,code", [("valid", 0), ("invalid", 1), ("unreadable", 2), ("usage", 2)])
def test_real_subprocess_exit_codes(tmp_path, archive, broken, kind, code):
    target = {"valid": archive, "invalid": broken, "unreadable": tmp_path / "nothing.h5"}.get(kind)
    if kind == "unreadable":
        target.write_bytes(b"not an hdf5 file at all")
    args = ["validate", str(target)] if kind != "usage" else ["validate"]
    proc = subprocess.run([sys.executable, "-m", "ubench.cli", *args], capture_output=True, text=True)
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


def test_validate_in_the_sandbox_gives_the_same_findings_and_exit_codes(tmp_path, archive, broken):
    cut = tmp_path / "cut.h5"
    cut.write_bytes(archive.read_bytes()[:2000])
    for path, code in ((archive, 0), (broken, 1), (cut, 2)):
        boxed = CliRunner().invoke(cli, ["validate", str(path), "--sandbox", "--json", "--timeout", "60"])
        plain = CliRunner().invoke(cli, ["validate", str(path), "--json"])
        assert boxed.exit_code == plain.exit_code == code, boxed.output
        assert json.loads(boxed.output)["findings"] == json.loads(plain.output)["findings"]


# --- upload strings on the terminal (issue #16 item 5) ---------------------------------------------------------
def _attack_named(case: str, root: Path) -> Path:
    root.mkdir()
    path = OUTPUT_CASES[case](root)
    target = os.path.join(os.fsencode(path.parent), ATTACK_FILE_NAME)
    os.rename(path, target)
    return Path(os.fsdecode(target))


@pytest.mark.parametrize("args,case,code", [
    (["inspect"], "every_string_attacks", 0),
    (["inspect", "--json"], "every_string_attacks", 0),
    (["validate"], "every_string_attacks", 0),
    (["validate"], "split_name_attacks", 1),
    (["validate", "--json"], "split_name_attacks", 1),
    (["validate", "--sandbox", "--timeout", "120"], "split_name_attacks", 1),
])
def test_inspect_and_validate_escape_upload_strings_on_a_pipe(tmp_path, args, case, code):
    """Archive strings (method, class names, /scalability, a split's dataset and shift kind), an HDF5 object name
    in a finding and the file name reach stdout and stderr with ESC, BEL, CR, LF, C1 and U+202E escaped; JSON
    carries them exactly."""
    path = _attack_named(case, tmp_path / "c")
    res = subprocess.run([sys.executable, "-m", "ubench.cli", *args[:1], str(path), *args[1:]], capture_output=True)
    assert res.returncode == code, res.stderr
    out = assert_no_raw_controls(res.stdout, "stdout")
    assert_no_raw_controls(res.stderr, "stderr")
    shown = "\\x1b[2J\\x1b]0;pwned\\x07\\r\\nforged line\\u202eevil\\x9b31m"
    if "--json" in args:
        doc = json.loads(out)
        if args[0] == "inspect":
            assert doc["method"] == "method" + TERMINAL_ATTACK and doc["path"] == str(path)
            assert doc["scalability"]["key" + TERMINAL_ATTACK] == "value" + TERMINAL_ATTACK
        else:
            assert doc["findings"][0]["path"] == "/splits/s" + TERMINAL_ATTACK
    elif args[0] == "inspect":
        assert f"method    method{shown}" in out and f"class0{shown}, class1" in out
        assert f"key{shown}=value{shown}" in out and f"rotate{shown}@15" in out
    else:
        assert "forged line \\udcff\\u202e.h5" in out
        if code == 1:
            assert f"/splits/s{shown}: [name]" in out


def test_a_missing_file_says_so_and_does_not_suggest_validate(tmp_path):
    """Issue #10 item 9: a file that does not exist is a usage error (exit 2) that says why, not an archive to
    validate."""
    missing = tmp_path / "nope.h5"
    for command in ("score", "inspect", "compare"):
        res = subprocess.run([sys.executable, "-m", "ubench.cli", command, str(missing)], capture_output=True,
                             text=True)
        assert res.returncode == 2 and "No such file or directory" in res.stderr, (command, res.stderr)
        assert "ubench validate" not in res.stderr and "Traceback" not in res.stderr
