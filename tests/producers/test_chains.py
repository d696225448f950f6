# SPDX-License-Identifier: MIT
"""Samplers over several chains: members carry their chain and log-posterior, and the archive's /diagnostics holds
R-hat and ESS computed from them (checked against ubench.metrics.diagnostics on the archive's own members, which
tests/metrics/test_diagnostics.py pins to ArviZ)."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ubench.archive_schema import read_archive  # noqa: E402
from ubench.archive_schema.safe_h5py import h5py  # noqa: E402
from ubench.metrics.diagnostics import bulk_ess, split_rhat  # noqa: E402
from ubench.producers.archive_run import produce_archive  # noqa: E402
from ubench.producers.task import build_task  # noqa: E402
from ubench.producers.torch_trainer import RunSettings  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def task():
    return build_task("digits", shift_kinds=(), train_samples=300, test_samples=120)


def test_two_chains_of_sgld_write_their_diagnostics(task, tmp_path):
    settings = RunSettings(model="mlp", members=8, seed=0, chains=2)
    path = produce_archive("sgld", task, tmp_path / "c.h5", settings=settings, hyper={"burn_in_epochs": 1},
                           threads=1)
    a = read_archive(path)
    assert [m.info["chain"] for m in a.members] == [0] * 4 + [1] * 4
    assert a.config["chains"] == 2
    lp = np.array([m.info["log_posterior"] for m in a.members]).reshape(2, 4)
    d = a.diagnostics
    assert d["chains"] == 2 and d["draws_per_chain"] == 4
    assert d["log_posterior"]["rhat"] == pytest.approx(split_rhat(lp), rel=1e-12)
    assert d["log_posterior"]["ess_bulk"] == pytest.approx(bulk_ess(lp), rel=1e-12)
    p_true = a.probs["test"][:, np.arange(100), a.labels["test"][:100]].astype(np.float64)
    rhats = [split_rhat(p_true[:, i].reshape(2, 4)) for i in range(100) if np.ptp(p_true[:, i]) > 0]
    assert d["probe"]["rhat_max"] == pytest.approx(max(rhats), rel=1e-12)
    # The two chains start from different initialisations.
    assert not np.array_equal(a.probs["test"][0], a.probs["test"][4])


def test_chain_zero_is_the_single_chain_run(task, tmp_path):
    one = read_archive(produce_archive("sgld", task, tmp_path / "one.h5", hyper={"burn_in_epochs": 1}, threads=1,
                                       settings=RunSettings(model="mlp", members=4, seed=0)))
    two = read_archive(produce_archive("sgld", task, tmp_path / "two.h5", hyper={"burn_in_epochs": 1}, threads=1,
                                       settings=RunSettings(model="mlp", members=8, seed=0, chains=2)))
    np.testing.assert_array_equal(one.probs["test"], two.probs["test"][:4])
    assert "chains" not in one.config


def test_chains_need_a_sampler_and_a_multiple(task, tmp_path):
    with pytest.raises(ValueError, match="chains"):
        produce_archive("deep_ensemble", task, tmp_path / "x.h5", threads=1,
                        settings=RunSettings(model="mlp", members=4, seed=0, chains=2))
    with pytest.raises(ValueError, match="multiple"):
        produce_archive("sgld", task, tmp_path / "x.h5", threads=1,
                        settings=RunSettings(model="mlp", members=5, seed=0, chains=2))


def test_diagnostics_of_another_major_version_are_skipped_with_a_warning(task, tmp_path):
    path = produce_archive("sgld", task, tmp_path / "c.h5", hyper={"burn_in_epochs": 1}, threads=1,
                           settings=RunSettings(model="mlp", members=4, seed=0))
    with h5py.File(path, "r+") as f:
        assert json.loads(f["diagnostics"].attrs["summary"])["chains"] == 1
        f["diagnostics"].attrs["diagnostics_version"] = "2.0"
    a = read_archive(path)
    assert a.diagnostics is None
    with h5py.File(path, "r+") as f:
        f["diagnostics"].attrs["diagnostics_version"] = "1.0"
        f["diagnostics"].attrs["summary"] = "[1, 2"
    from ubench.archive_schema import validate_archive

    findings = validate_archive(path)
    assert any(x.path == "/diagnostics" and x.check == "json" for x in findings)


def test_score_report_and_html_show_the_diagnostics(task, tmp_path):
    from ubench.scoring.html import render_html
    from ubench.scoring.score import score_archive

    path = produce_archive("sgld", task, tmp_path / "c.h5", hyper={"burn_in_epochs": 1}, threads=1,
                           settings=RunSettings(model="mlp", members=8, seed=0, chains=2))
    report = score_archive(path)
    assert report["archive"]["diagnostics"] == read_archive(path).diagnostics
    page = render_html(report)
    assert "MCMC diagnostics" in page and "log_posterior.rhat" in page
