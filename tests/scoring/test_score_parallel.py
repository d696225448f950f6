# SPDX-License-Identifier: MIT
"""One archive's splits scored on a Dask cluster (issue #29 item 4): the report of ``run_score(scheduler=...)``
and of ``ubench score --scheduler`` is the one-process report, number for number, note for note."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest

from ubench.archive_schema import ArchiveWriter, SplitSpec
from ubench.scoring.protocols import Protocol
from ubench.scoring.score import run_score


def _archive(path, *, m=3, n=400, c=12):
    rng = np.random.default_rng(5)
    y = rng.integers(0, c, n)
    splits = {"test": SplitSpec(role="in_domain", dataset="bench", labels=y, sample_ids=np.arange(n)),
              "val": SplitSpec(role="in_domain", dataset="bench", labels=y, sample_ids=np.arange(n) + n),
              "far": SplitSpec(role="ood", dataset="noise", sample_ids=np.arange(n))}
    for k in (1, 2, 3):
        splits[f"noise{k}"] = SplitSpec(role="shift", dataset="bench", labels=y, sample_ids=np.arange(n),
                                        shift_kind="noise", shift_intensity=k)
    # unlabelled splits add notes: in scoring order the in-domain one's comes first, in name order last
    splits["zz_unlabelled"] = SplitSpec(role="in_domain", dataset="bench", sample_ids=np.arange(n) + 2 * n)
    splits["aa_blur"] = SplitSpec(role="shift", dataset="bench", sample_ids=np.arange(n), shift_kind="blur",
                                  shift_intensity=1)
    w = ArchiveWriter(path, method="deep_ensemble", model="mlp", dataset="bench", n_classes=c, splits=splits,
                      overwrite=True)
    for j in range(m):
        out = {}
        for name, spec in splits.items():
            z = rng.normal(0, 2, (n, c))
            if spec.labels is not None:
                z[np.arange(n), y] += 3.0 - 0.6 * (spec.shift_intensity or 0)
            p = np.exp(z - z.max(1, keepdims=True))
            out[name] = (p / p.sum(1, keepdims=True)).astype(np.float32)
        w.add_member(out, seed=j)
    return w.finalize()


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    return _archive(tmp_path_factory.mktemp("parallel") / "run.h5")


@pytest.fixture(scope="module")
def cluster():
    pytest.importorskip("distributed")  # the test extra installs it (pyproject.toml)
    from ubench.scoring.distributed import local_cluster

    with contextlib.ExitStack() as stack:
        with pytest.MonkeyPatch.context() as mp:
            # what a cluster started earlier in this process with Dask's defaults leaves in os.environ (the nanny
            # writes its pre-spawn variables there), and which overrides Dask's configuration
            mp.setenv("MALLOC_TRIM_THRESHOLD_", "65536")
            address = stack.enter_context(local_cluster(2))  # the cluster `score --workers 2` starts
        yield address


def test_local_cluster_workers_run_with_the_malloc_settings(cluster):
    """The workers of ``local_cluster`` see :data:`WORKER_MALLOC_ENV` in a task, not Dask's
    ``MALLOC_TRIM_THRESHOLD_=65536`` (which pins glibc's mmap threshold at 128 KiB: 230x the page faults), even
    where an earlier cluster of the process left that value in ``os.environ``."""
    import os

    from distributed import Client

    from ubench.scoring.distributed import WORKER_MALLOC_ENV

    with Client(cluster, set_as_default=False) as client:
        seen = client.gather(client.map(lambda k, _: os.environ.get(k), ["MALLOC_MMAP_THRESHOLD_",
                                                                          "MALLOC_TRIM_THRESHOLD_"] * 2,
                                        range(4), pure=False))
        workers = client.run(lambda: {k: os.environ.get(k) for k in WORKER_MALLOC_ENV})
    assert seen == [WORKER_MALLOC_ENV["MALLOC_MMAP_THRESHOLD_"], WORKER_MALLOC_ENV["MALLOC_TRIM_THRESHOLD_"]] * 2
    assert len(workers) == 2 and all(w == WORKER_MALLOC_ENV for w in workers.values())


@pytest.mark.parametrize("preset,settings", [("pitfalls", {"shift_temperature": True, "dee_point": True,
                                                          "sample_stats": True}),
                                             ("ursabench", {})])
def test_cluster_report_equals_the_one_process_report(archive, cluster, preset, settings):
    """For any protocol, the splits scored on two worker processes and merged in scoring order give the same
    report as one process: every number, section, summary key and note, in the same order (the shift
    temperature, which the shift splits need, is fitted between the two waves; the intervals' replicates are
    computed by the client as results arrive, and ``samples`` lists the splits in scoring order)."""
    protocol = Protocol.preset(preset).replace(**settings)
    one = json.dumps(run_score(archive, protocol=protocol))  # key order kept: the order of splits and notes too
    many = json.dumps(run_score(archive, protocol=protocol, scheduler=cluster))
    assert many == one
    if settings:
        assert "temperature_scaled" in json.loads(many)["shift"]["noise1"]


def test_cli_scheduler_and_its_usage_errors(archive, cluster):
    """`ubench score --scheduler ADDRESS --json` prints the one-process report; --sandbox with it is a usage
    error (exit 2)."""
    from click.testing import CliRunner

    from ubench.cli import cli

    res = CliRunner().invoke(cli, ["score", str(archive), "--json", "--scheduler", cluster])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == json.loads(json.dumps(run_score(archive)))
    both = CliRunner().invoke(cli, ["score", str(archive), "--json", "--scheduler", cluster, "--sandbox"])
    assert both.exit_code == 2 and "drop --sandbox" in both.output


def test_results_merged_in_any_arrival_order_give_the_one_process_report(archive, monkeypatch):
    """The client resamples each split's interval statistics as its result arrives, in whatever order the workers
    finish: with every wave's results arriving last first (the tasks run in a spawned process: HDF5 does not open
    an archive twice in one), the report is still the one-process report, ``samples`` in scoring order
    included."""
    import contextlib
    import functools
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    import ubench.scoring.distributed as distributed

    def last_first(fn, items, *, scheduler=None, **kwargs):
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            done = list(pool.map(functools.partial(fn, **kwargs), items))
        yield from reversed(list(enumerate(done)))

    monkeypatch.setattr(distributed, "map_unordered", last_first)
    monkeypatch.setattr(distributed, "local_cluster", lambda n: contextlib.nullcontext("in-process"))
    protocol = Protocol.preset("pitfalls").replace(shift_temperature=True, sample_stats=True)
    one = json.dumps(run_score(archive, protocol=protocol))
    assert json.dumps(run_score(archive, protocol=protocol, workers=2)) == one
