# SPDX-License-Identifier: MIT
"""The README's commands work on a fresh machine with nothing beside the clone (issue #28, "done when").

The tracked files of this checkout (tests left out) are copied to ``tmp/clone/ubench``, so nothing lies beside
the copy (no ``../shared/data``), and run from there (``PYTHONPATH`` puts the copy first; the test checks that the
copy is what runs) with an empty ``HOME`` (no ``~/.cache/ubench/data``): the set-up's ``ubench score`` of the bundled
example, then the Producers section's block as written, each ``produce`` shrunk by flags appended to it (a tiny
Fashion-MNIST in ``$UBENCH_DATA``, as the README documents, for Debian's package). MNIST and notMNIST, the default
OOD sets, are nowhere: the runs must skip them with a note that says how to add them."""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")

#: Flags appended to each README ``produce`` (a later value of an option wins): a tiny run of the same command.
SMALL = ["--train-samples", "120", "--test-samples", "60", "--shifts", "noise", "--shift-samples", "10",
         "--threads", "1"]
SHRINK = {
    "deep_ensemble": ["--members", "2", "--epochs", "1"],
    "csgld": ["--members", "2", "--set", "cycle_epochs=2", "--set", "exploration_epochs=1",
              "--set", "samples_per_cycle=1"],
}


def _producer_block() -> list[str]:
    start = README.index("From a clone, with nothing beside it")
    return re.search(r"```bash\n(.*?)```", README[start:], re.S).group(1).strip().splitlines()


def _copy_clone(dest: Path) -> None:
    """The checkout's tracked files (git ls-files), tests left out, at ``dest``; without git, its files but
    environments, caches and tests."""
    try:
        files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(".git", ".venv", "venv", "tests", "__pycache__",
                                                                  ".hypothesis", "*.egg-info", "build"))
        return
    for rel in files.decode().split("\0"):
        if not rel or rel.startswith("tests/") or not (ROOT / rel).is_file():
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest / rel)


def _fashion_mnist(root: Path) -> None:
    """A tiny Fashion-MNIST in the IDX format (magic 0x0803 / 0x0801, big-endian sizes, uint8), 200 + 100 images."""
    rng = np.random.default_rng(0)
    root.mkdir(parents=True)
    for stem, n in (("train", 200), ("t10k", 100)):
        images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        labels = (np.arange(n) % 10).astype(np.uint8)
        for kind, arr, magic in (("images-idx3", images, b"\0\0\x08\x03"), ("labels-idx1", labels, b"\0\0\x08\x01")):
            head = magic + b"".join(d.to_bytes(4, "big") for d in arr.shape)
            (root / f"{stem}-{kind}-ubyte.gz").write_bytes(gzip.compress(head + arr.tobytes()))


@pytest.mark.torch
def test_the_readme_commands_run_in_a_copy_of_the_clone_with_nothing_beside_it(tmp_path):
    pytest.importorskip("torch")
    clone = tmp_path / "clone" / "ubench"
    _copy_clone(clone)
    assert not (clone.parent / "shared").exists()
    _fashion_mnist(tmp_path / "data" / "fashion-mnist")
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "home").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("UBENCH_DATA", "PYTHONPATH")}
    env.update(PYTHONPATH=str(clone.parent), HOME=str(tmp_path / "home"), UBENCH_DATA=str(tmp_path / "data"),
               OMP_NUM_THREADS="1")

    def ubench(args, cwd):
        res = subprocess.run([sys.executable, "-m", "ubench.cli", *args], cwd=cwd, env=env, capture_output=True,
                             text=True, timeout=600)
        assert res.returncode == 0, (args, res.stderr[-3000:])
        return res

    where = subprocess.run([sys.executable, "-c", "import ubench; print(ubench.__file__)"], env=env,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).parent == clone  # the copy runs, not this checkout

    # the set-up: install and score the bundled example (the install is this environment's)
    setup = re.search(r"```bash\n(python3 -m pip install \. && ubench score .*?)\n```", README).group(1)
    ubench(setup.split("&& ubench ", 1)[1].split(), clone)

    block = _producer_block()
    assert block[0].startswith('python3 -m pip install ".[torch]"') and "dataset-fashion-mnist" in block[0]
    commands = [line.split()[1:] for line in block[1:]]
    assert [c[0] for c in commands] == ["produce", "produce", "dee"]
    for args in commands:
        if args[0] == "produce":
            res = ubench([*args, *SHRINK[args[1]], *SMALL], work)
            notes = [ln for ln in res.stderr.splitlines() if ln.startswith("note: the default OOD set")]
            assert [n.split()[5] for n in notes] == ["mnist", "notmnist"], res.stderr
            assert "add --download" in notes[0] and "--download" not in notes[1]
            assert "MNIST-format IDX copy" in notes[1]
        else:
            res = ubench(args, work)
            assert "DEE of" in res.stdout
    assert sorted(p.name for p in work.iterdir()) == ["csgld.h5", "de.h5"]
