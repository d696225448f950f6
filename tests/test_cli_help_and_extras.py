# SPDX-License-Identifier: MIT
"""What a newcomer reads from the command line (issue #28 items 3 and 9): every command's help lists its exit
codes; a missing extra is one line with its ``pip install``, exit 1, for every command and extra; findings name
the file, and a rejection says so once and points only to a command that checks what failed."""

from __future__ import annotations

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from ubench.cli import cli
from ubench.extras import EXTRAS, MissingExtraError, require

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "digits_deep_ensemble.h5"
REFERENCE = ROOT / "examples" / "digits_reference.h5"


def _commands(cmd: click.Command, path: tuple[str, ...] = ()):
    yield path, cmd
    if isinstance(cmd, click.Group):  # list/get_command: the lazily imported commands included (cli._Cli)
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):
            yield from _commands(cmd.get_command(ctx, name), (*path, name))


def test_every_command_help_lists_its_exit_codes():
    paths = [p for p, _ in _commands(cli)]
    assert len(paths) >= 18 and ("serve", "team", "add") in paths
    for path in paths:
        res = CliRunner().invoke(cli, [*path, "--help"], terminal_width=200)
        assert res.exit_code == 0, (path, res.output)
        assert "Exit codes: 0 " in res.output, f"ubench {' '.join(path)} --help has no exit codes"


def test_import_help_says_when_dataset_is_required():
    res = CliRunner().invoke(cli, ["import", "--help"], terminal_width=200)
    line = " ".join(res.output.split("--dataset", 1)[1].split())
    assert "required for npz, npy, torch and ovadia" in line


# -- extras -----------------------------------------------------------------------------------------------------

def test_the_extras_are_the_pyprojects():
    """Every extra ubench names is one pyproject.toml declares (a renamed extra would print a pip line that fails)."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(EXTRAS) <= set(declared)
    with pytest.raises(ValueError, match="unknown extras"):
        require("nope", what="x")


def _cases(tmp: Path) -> list[tuple[str, str, list[str]]]:
    """(extra, module blocked, command): each extra under each command that needs it."""
    out = str(tmp / "a.h5")
    return [
        ("torch", "torch", ["produce", "sgd", "--out", out]),
        ("jax", "optax", ["produce", "sgd", "--framework", "jax", "--out", out]),
        ("jax", "blackjax", ["produce", "hmc", "--framework", "jax", "--out", out]),
        ("edge", "onnx", ["produce", "sgd", "--save-models", "--out", out]),
        ("edge", "onnxruntime", ["latency", str(tmp)]),
        ("torch", "torch", ["latency", str(tmp), "--backend", "torch"]),
        ("edge-trt", "tensorrt", ["latency", str(tmp), "--backend", "tensorrt"]),
        ("edge", "onnxruntime", ["distill", str(EXAMPLE), "--out", out]),
        ("scale", "distributed", ["leaderboard", str(tmp), "--reference", str(REFERENCE), "--out",
                                  str(tmp / "board"), "--workers", "2"]),
        ("serve", "uvicorn", ["serve", "--reference", str(REFERENCE), "--data-dir", str(tmp / "srv")]),
        ("serve", "sqlalchemy", ["serve", "team", "add", "t", "--data-dir", str(tmp / "srv")]),
        ("postgres", "psycopg", ["serve", "team", "add", "t", "--data-dir", str(tmp / "srv"), "--db",
                                 "postgresql+psycopg://u@127.0.0.1:1/db"]),
        ("tune", "optuna", ["tune", "sgd", "--trials", "1", "--out", str(tmp / "best.json")]),
        ("mlflow", "mlflow", ["score", str(EXAMPLE), "--mlflow"]),
        ("torch", "torch", ["import", "torch", str(EXAMPLE), "--out", out]),
    ]


@pytest.mark.parametrize("case", range(15))
def test_a_missing_extra_is_one_line_with_its_pip_install_and_exit_1(case, tmp_path, monkeypatch):
    """The module is made missing honestly: its ``sys.modules`` entry is None, so ``import`` raises ImportError.
    The command stops before doing any work: nothing is written, and the line names the extra."""
    extra, module, args = _cases(tmp_path)[case]
    monkeypatch.setitem(sys.modules, module, None)
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 1, (args, res.output)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), res.stderr
    assert f"pip install 'ubench[{extra}" in lines[0] and module in lines[0] and "Traceback" not in res.output
    assert not (tmp_path / "a.h5").exists() and not (tmp_path / "srv").exists()


def test_python_api_extras_say_the_same(monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    from ubench import report_frame

    with pytest.raises(MissingExtraError, match=r"report_frame needs the frame extra .*pip install 'ubench\[frame\]'"):
        report_frame([])
    monkeypatch.setitem(sys.modules, "lightning", None)
    monkeypatch.delitem(sys.modules, "ubench.integrations.lightning", raising=False)
    with pytest.raises(ImportError, match=r"pip install 'ubench\[lightning"):
        importlib.import_module("ubench.integrations.lightning")


_BLOCKED = ("import sys; sys.modules[{module!r}] = None\n"
            "from ubench.cli import main\n"
            "sys.argv[0] = 'ubench'\n"
            "main()\n")


@pytest.mark.parametrize("module, args, extra", [
    ("uvicorn", ["serve", "--reference", str(REFERENCE), "--data-dir", "srv"], "serve"),
    ("onnxruntime", ["distill", str(EXAMPLE), "--out", "s.h5"], "edge"),
])
def test_serve_and_distill_without_their_extra_in_a_real_process(module, args, extra, tmp_path):
    """The two commands that ended in ModuleNotFoundError, run as a user runs them (a fresh interpreter whose
    import of the module fails)."""
    res = subprocess.run([sys.executable, "-c", _BLOCKED.format(module=module), *args], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr.splitlines() == [f"Error: ubench {args[0]} needs the {extra} extra ({module} not installed): "
                                       f"pip install 'ubench[{extra}]'"], res.stderr
    assert list(tmp_path.iterdir()) == []


# -- findings and rejections ------------------------------------------------------------------------------------

def test_findings_about_the_whole_file_name_the_file(tmp_path):
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"not hdf5")
    for args in (["validate", str(junk)], ["score", str(junk)]):
        res = CliRunner().invoke(cli, args)
        assert res.exit_code == 2, res.output
        assert "<file>" not in res.output and f"error: {junk}: [not-hdf5]" in res.output
    res = CliRunner().invoke(cli, ["validate", str(junk), "--json"])
    assert '"path": "<file>"' in res.stdout  # the JSON keeps the documented placeholder


def test_a_sandboxed_rejection_says_it_once_and_points_to_what_checks_it(tmp_path):
    """A reference mismatch is not something `ubench validate` checks: the last line says the archive does not
    match the reference, with no validate hint; an unreadable upload names its status once ("rejected (rejected;
    ..." before) and points to `validate --sandbox`, which does check it."""
    sys.path.insert(0, str(ROOT / "tests" / "scoring"))
    from scoring_archives import build_archive

    other, _ = build_archive(tmp_path / "other.h5")
    res = CliRunner().invoke(cli, ["score", str(other), "--reference", str(REFERENCE)])
    assert res.exit_code == 1, res.output
    last = res.stderr.strip().splitlines()[-1]
    assert last == f"{other}: rejected: it does not match the reference (every difference is listed above)"
    assert "ubench validate" not in res.stderr and "[reference]" in res.stderr
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"not hdf5")
    res = CliRunner().invoke(cli, ["score", str(junk), "--reference", str(REFERENCE)])
    last = res.stderr.strip().splitlines()[-1]
    assert res.exit_code == 2 and last.count("unreadable") == 1 and "rejected (rejected" not in res.stderr
    assert f"`ubench validate {junk} --sandbox`" in last
