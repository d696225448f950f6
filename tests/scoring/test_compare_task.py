# SPDX-License-Identifier: MIT
"""``ubench compare`` refuses archives on another task (issue #10 item 1) and prints notes to stderr (item 2)."""

import subprocess
import sys

import numpy as np
import pytest

from ubench.archive_schema import ArchiveWriter, SplitSpec


def _write(path, *, n=60, c=3, ids=None, seed=0, method="m", dataset="toy"):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, c, n)
    w = ArchiveWriter(path, method=method, model="mlp", dataset=f"toy{c}", n_classes=c,
                      splits={"test": SplitSpec(role="in_domain", dataset=dataset, labels=labels,
                                                sample_ids=np.arange(n) if ids is None else ids)})
    for k in range(2):
        w.add_member({"test": rng.dirichlet(np.ones(c), size=n)}, seed=k)
    return w.finalize()


def _ubench(*args):
    return subprocess.run([sys.executable, "-m", "ubench.cli", *map(str, args)], capture_output=True, text=True)


@pytest.mark.parametrize("kwargs, expected", [
    ({"c": 4}, "4 classes ('toy'), not 3 ('toy')"),
    ({"n": 59}, "59 samples of 'toy' in split 'test', not 60"),
    ({"ids": np.arange(60)[::-1].copy()}, "other sample ids in split 'test' of 'toy'"),
])
def test_compare_refuses_another_task_and_names_the_difference(tmp_path, kwargs, expected):
    """Refused before anything is scored (no archive's progress line; issue #28 item 8), the difference worded by
    the datasets the splits claim."""
    a = _write(tmp_path / "a.h5")
    b = _write(tmp_path / "b.h5", seed=1, method="other", **kwargs)
    res = _ubench("compare", a, b, "--placement", "none")
    assert res.returncode == 1 and expected in res.stderr and "Traceback" not in res.stderr
    assert "error: other (b.h5) is on another task than m (a.h5)" in res.stderr
    assert "archives scored" not in res.stderr  # the progress line of a scored archive
    assert res.stdout == ""
    res = _ubench("compare", a, b, "--placement", "none", "--allow-mismatch")
    assert res.returncode == 0, res.stderr
    assert "other (b.h5) [other task]" in res.stdout and expected in res.stderr


def test_same_task_compares_with_a_dataset_column_and_notes_on_stderr(tmp_path):
    a = _write(tmp_path / "a.h5")
    b = _write(tmp_path / "b.h5", seed=1, method="other")
    res = _ubench("compare", a, b, "--placement", "none")
    assert res.returncode == 0, res.stderr
    header = res.stdout.splitlines()[0].split()
    assert header[:2] == ["method", "dataset"] and "toy3" in res.stdout
    assert "note:" not in res.stdout and "labels were taken from the archive" in res.stderr
    res = _ubench("score", a, "--placement", "none")
    assert res.returncode == 0 and "note:" not in res.stdout
    assert "note: labels were taken from the archive" in res.stderr


def test_the_task_read_before_scoring_is_the_task_of_the_report(tmp_path):
    """archive_task (metadata, labels and ids only) equals report_task of the archive's score report, so that the
    check before scoring refuses exactly what the check after it would; differences name both datasets."""
    from ubench.scoring.compare import archive_task, difference, report_task
    from ubench.scoring.score import score_archive

    a = _write(tmp_path / "a.h5")
    b = _write(tmp_path / "b.h5", n=50, dataset="fashion-mnist", method="other")
    for path in (a, b):
        assert archive_task(path) == report_task(score_archive(path, protocol="shift"))
    assert difference(archive_task(b), archive_task(a)) == \
        "dataset 'fashion-mnist' (50 samples in split 'test'), not 'toy' (60 samples)"
    assert difference(archive_task(a), archive_task(a)) is None
