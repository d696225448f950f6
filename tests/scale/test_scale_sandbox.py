# SPDX-License-Identifier: MIT
"""The sandbox: a crash, a memory or CPU overrun or a hang in the child becomes a finding; the parent lives on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from ubench.cli import cli
from ubench.scoring.sandbox import (SANDBOX_CHECKS, SandboxLimits, SandboxTask, parse_size, run_sandboxed,
                                    run_sandboxed_batch)

FAST = SandboxLimits(cpu_seconds=2, timeout_seconds=20)


def checks(outcome) -> list[str]:
    return [f["check"] for f in outcome.findings if f["severity"] == "error"]


def test_valid_archive_validates_and_scores(valid_archive, reference_file):
    """A valid archive validates with exit 0 and scores to a report whose labels come from the reference."""
    v, s = run_sandboxed_batch([SandboxTask("validate", str(valid_archive)),
                                SandboxTask("score", str(valid_archive), str(reference_file))], FAST)
    assert (v.status, v.exit_code) == ("ok", 0)
    assert (s.status, s.exit_code) == ("ok", 0)
    assert s.report["labels"]["source"] == "reference"
    assert 0 <= s.report["summary"]["accuracy"] <= 1
    assert s.peak_rss_bytes > 0


@pytest.mark.parametrize("fault", ["segv", "abort"])
def test_a_signal_in_the_child_is_the_hdf5_crash_finding(valid_archive, child_faults, fault):
    """A child killed by a real signal (a C null-pointer read, an abort) gives the crash finding, exit code 1,
    and the tasks after it in the batch run normally in a fresh child."""
    crashed, after = run_sandboxed_batch([SandboxTask("validate", str(child_faults(fault))),
                                          SandboxTask("validate", str(valid_archive))], FAST)
    assert (crashed.status, crashed.exit_code) == ("crashed", 1)
    assert checks(crashed) == ["hdf5-crash"]
    assert "crashed the HDF5 reader" in crashed.findings[0]["message"]
    assert (after.status, after.exit_code) == ("ok", 0)


def test_memory_limit_is_a_finding(child_faults):
    """Allocating 1.5 GiB (untouched: it costs no memory, only address space) under a 1 GiB RLIMIT_AS raises
    MemoryError in the child: the memory-limit finding. Without the limit the allocation succeeds on any machine
    and the archive validates (the old 1 TiB allocation failed with or without it)."""
    out = run_sandboxed(SandboxTask("validate", str(child_faults(f"memory:{3 * 2**29}"))),
                        SandboxLimits(memory_bytes=1 * 2**30, cpu_seconds=5, timeout_seconds=20))
    assert (out.status, out.exit_code, checks(out)) == ("memory-limit", 1, ["memory-limit"])


def test_the_childs_own_limits_hold_inside_it(child_faults):
    """Issue #25 item 17: each limit the child sets on itself is tried from inside it, after Landlock: a byte
    written to a memfd fails with EFBIG (RLIMIT_FSIZE = 0), descriptors run out at max_open_files, an untouched
    mapping of memory_bytes is refused (RLIMIT_AS), no-new-privileges is set and cores are off. Dropping any of
    these from ``_limit_self`` fails one assertion."""
    limits = SandboxLimits(memory_bytes=1 * 2**30, max_open_files=48, cpu_seconds=5, timeout_seconds=30)
    out = run_sandboxed(SandboxTask("validate", str(child_faults(f"probe:{2**30}"))), limits)
    assert (out.status, out.exit_code) == ("ok", 0), out.findings
    assert out.report == {"file_write": "EFBIG", "open_files": 48, "address_space": "ENOMEM", "no_new_privs": 1,
                          "core": [0, 0]}


def test_validate_sandboxed_counts_the_finished_members_of_a_partial_run(tmp_path):
    """Issue #25 item 14: `validate --sandbox run.h5.partial` reported "0 finished member(s)" (Landlock let the
    child read the directory's files but not list it); it reports what the in-process validator does."""
    from ubench.archive_schema import ArchiveWriter, SplitSpec

    w = ArchiveWriter(tmp_path / "run.h5", method="m", model="x", dataset="d", n_classes=3,
                      splits={"test": SplitSpec(role="in_domain", dataset="d", labels=np.arange(12) % 3)})
    for k in range(2):
        w.add_member({"test": np.full((12, 3), 1 / 3)}, seed=k)
    boxed = CliRunner().invoke(cli, ["validate", str(w.partial_dir), "--sandbox", "--json", "--timeout", "60"])
    plain = CliRunner().invoke(cli, ["validate", str(w.partial_dir), "--json"])
    assert boxed.exit_code == plain.exit_code == 1, boxed.output
    found = json.loads(boxed.output)["findings"]
    assert found == json.loads(plain.output)["findings"]
    assert found[0]["check"] == "partial-run" and "with 2 finished member(s)" in found[0]["message"]


def test_cpu_limit_is_a_finding(child_faults):
    """A busy loop past RLIMIT_CPU is stopped by SIGXCPU: the cpu-limit finding."""
    out = run_sandboxed(SandboxTask("validate", str(child_faults("spin"))),
                        SandboxLimits(cpu_seconds=1, timeout_seconds=60))
    assert (out.status, out.exit_code, checks(out)) == ("cpu-limit", 1, ["cpu-limit"])


def test_timeout_kills_the_child(child_faults):
    """A child that sleeps past the wall-clock limit is killed with its process group: the timeout finding."""
    out = run_sandboxed(SandboxTask("validate", str(child_faults("sleep"))),
                        SandboxLimits(cpu_seconds=5, timeout_seconds=1.0))
    assert (out.status, out.exit_code, checks(out)) == ("timeout", 1, ["timeout"])


def test_unexpected_exception_is_reported_not_raised(child_faults):
    out = run_sandboxed(SandboxTask("validate", str(child_faults("raise"))), FAST)
    assert (out.status, out.exit_code, checks(out)) == ("internal-error", 1, ["internal-error"])
    assert "injected test fault" in out.findings[0]["message"]


def test_production_code_reads_no_test_switch():
    """Issue #9 item 14: faults and hold points are injected from the tests (``sandbox_faults.py``,
    ``board_hooks.py``); no scoring module reads a test-only environment variable or honours a fault field."""
    import dataclasses
    import re

    import ubench.scoring as scoring

    assert "fault" not in {f.name for f in dataclasses.fields(SandboxTask)}
    for source in Path(scoring.__file__).parent.glob("*.py"):
        text = source.read_text(encoding="utf-8")
        assert not re.search(r"UBENCH_\w*TEST|_test_hook|_inject\(", text), source.name


@pytest.mark.slow
def test_a_big_report_is_collected_whole(child_faults):
    """Issue #16 item 10: a 48 MiB answer (under the default 128 MiB cap) arrives intact; the parent collects it
    in linear time (one bytearray, each byte searched for a newline once)."""
    size = 48 * 2**20
    out = run_sandboxed(SandboxTask("validate", str(child_faults(f"report:{size}"))), FAST)
    assert (out.status, out.exit_code) == ("ok", 0)
    assert len(out.report["padding"]) == size


def test_a_report_over_the_cap_is_a_finding_not_a_timeout(child_faults):
    """A report larger than ``max_report_bytes`` is cut off with the report-size finding (exit 1): the parent
    kills the child instead of buffering it or calling it a timeout."""
    limits = SandboxLimits(cpu_seconds=20, timeout_seconds=120, max_report_bytes=2**20)
    out = run_sandboxed(SandboxTask("validate", str(child_faults(f"report:{8 * 2**20}"))), limits)
    assert (out.status, out.exit_code, checks(out)) == ("report-limit", 1, ["report-size"])
    assert "1048576 bytes" in out.findings[0]["message"]


def test_line_collector_splits_records_across_chunks():
    """The parent's record splitter: records cut at any chunk boundary come out whole and in order."""
    from ubench.scoring.sandbox import ReportTooLarge, _Lines

    data = b"".join(json.dumps({"i": i, "pad": "y" * (i * 37 % 500)}).encode() + b"\n" for i in range(200))
    for step in (1, 7, 4096):
        lines, got = _Lines(2**20), []
        for k in range(0, len(data), step):
            got += lines.feed(data[k:k + step])
        assert [json.loads(x)["i"] for x in got] == list(range(200))
    with pytest.raises(ReportTooLarge):
        _Lines(2**16).feed(b"z" * (2**16 + 1))


def test_unreadable_and_rejected_keep_the_reader_exit_codes(tmp_path, valid_archive, reference_file):
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"not an archive")
    link = tmp_path / "link.h5"
    link.symlink_to(valid_archive)
    a, b = run_sandboxed_batch([SandboxTask("score", str(junk), str(reference_file)),
                                SandboxTask("score", str(link), str(reference_file))], FAST)
    assert (a.status, a.exit_code, checks(a)) == ("unreadable", 2, ["not-hdf5"])
    assert (b.status, b.exit_code, checks(b)) == ("unreadable", 2, ["not-regular-file"])
    assert not set(checks(a) + checks(b)) & SANDBOX_CHECKS


def test_reference_mismatch_is_a_rejection(tmp_path, reference_file):
    from scale_archives import make_archive

    other = make_archive(tmp_path / "other.h5", n=30)
    out = run_sandboxed(SandboxTask("score", str(other), str(reference_file)), FAST)
    assert (out.status, out.exit_code) == ("rejected", 1)
    assert checks(out) and set(checks(out)) == {"reference"}


def test_child_environment_and_filesystem_are_closed(valid_archive, tmp_path):
    """The child runs with plugins off, and after Landlock it can read no file but the archive (where the kernel
    supports Landlock) and write none."""
    decoy = tmp_path / "decoy.txt"
    decoy.write_text("secret")
    code = f"""
import json, os
from ubench.scoring import sandbox as s
s._preimport({{"validate"}})
ok = s._landlock([{str(valid_archive)!r}])
res = {{"landlock": ok, "plugins": os.environ.get("HDF5_PLUGIN_PRELOAD")}}
for name, fn in [("decoy", lambda: open({str(decoy)!r}).read()),
                 ("write", lambda: open({str(tmp_path / 'out.txt')!r}, "w")),
                 ("archive", lambda: open({str(valid_archive)!r}, "rb").read(8))]:
    try:
        fn(); res[name] = "opened"
    except OSError as exc:
        res[name] = "denied"
print(json.dumps(res))
"""
    env = {"PATH": "/usr/bin:/bin", "HDF5_PLUGIN_PRELOAD": "::"}
    out = json.loads(subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, env=env,
                                    check=True).stdout)
    assert out["archive"] == "opened"
    if not out["landlock"]:
        pytest.skip("this kernel has no Landlock")
    assert out["decoy"] == "denied" and out["write"] == "denied"
    assert not (tmp_path / "out.txt").exists()


def test_parse_size():
    assert parse_size("4G") == 4 * 2**30
    assert parse_size("512MiB") == 512 * 2**20
    assert parse_size("1000") == 1000
    with pytest.raises(ValueError, match="size"):
        parse_size("lots")


def test_cli_score_sandboxed_matches_unsandboxed(valid_archive, reference_file):
    """`ubench score --reference` runs sandboxed by default; its numbers equal the in-process path's."""
    runner = CliRunner()
    boxed = runner.invoke(cli, ["score", str(valid_archive), "--reference", str(reference_file), "--json"])
    plain = runner.invoke(cli, ["score", str(valid_archive), "--reference", str(reference_file), "--json",
                                "--no-sandbox"])
    assert boxed.exit_code == 0 and plain.exit_code == 0, boxed.output + plain.output
    a, b = json.loads(boxed.stdout), json.loads(plain.stdout)
    assert a["summary"] == b["summary"]


def test_cli_score_sandbox_exit_codes(tmp_path, reference_file):
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"\x89HDF\r\n\x1a\n" + os.urandom(600))
    res = subprocess.run([sys.executable, "-m", "ubench.cli", "score", str(junk), "--reference",
                          str(reference_file), "--timeout", "30", "--memory-limit", "2G"],
                         capture_output=True, text=True)
    assert res.returncode == 2, res.stderr
    assert res.stdout == ""
    assert "Traceback" not in res.stderr
    usage = CliRunner().invoke(cli, ["score", str(junk), "--sandbox", "--memory-limit", "lots"])
    assert usage.exit_code == 2


# -- issue #16 item 14: compare, dee and inspect read archives in the sandbox too ----------------------------------
def test_inspect_sandboxed_matches_in_process_and_contains_a_crash(valid_archive, child_faults):
    """`inspect --sandbox` prints the same description as in-process; an archive that crashes the reader
    (a real SIGSEGV in the child) is the hdf5-crash finding with exit 1, and the command survives it."""
    runner = CliRunner()
    boxed = runner.invoke(cli, ["inspect", str(valid_archive), "--sandbox", "--json"])
    plain = runner.invoke(cli, ["inspect", str(valid_archive), "--json"])
    assert boxed.exit_code == plain.exit_code == 0, boxed.output + plain.output
    assert json.loads(boxed.stdout) == json.loads(plain.stdout)
    crash = runner.invoke(cli, ["inspect", str(child_faults("segv")), "--sandbox", "--timeout", "60"])
    assert crash.exit_code == 1 and "hdf5-crash" in crash.stderr, crash.output


@pytest.mark.parametrize("command", ["compare", "dee"])
def test_compare_and_dee_with_a_reference_are_sandboxed_by_default(valid_archive, reference_file, child_faults,
                                                                   command):
    """With --reference, compare and dee read every archive in the sandbox unless --no-sandbox: an archive
    that crashes the reader there gives the hdf5-crash finding and exit 1 instead of taking the command down."""
    crashing = str(child_faults("segv"))
    args = {"compare": ["compare", str(valid_archive), crashing],
            "dee": ["dee", crashing, "--ensemble", str(valid_archive)]}[command]
    res = CliRunner().invoke(cli, args + ["--reference", str(reference_file), "--timeout", "60"])
    assert res.exit_code == 1 and "hdf5-crash" in res.stderr, res.output
    plain = CliRunner().invoke(cli, args + ["--reference", str(reference_file), "--no-sandbox", "--json"])
    assert plain.exit_code == 0, plain.output  # in-process, the injected fault never runs
