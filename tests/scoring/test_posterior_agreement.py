# SPDX-License-Identifier: MIT
"""``ubench compare --reference-posterior``: agreement and total variation with an HMC archive, by hand, and the
refusal of a reference whose chains have not converged (issue #30)."""

import json

import numpy as np
from click.testing import CliRunner

from ubench.archive_schema import ArchiveWriter, SplitSpec
from ubench.cli import cli
from ubench.producers.chain_diagnostics import diagnostics_summary


def _write(path, member_probs, labels, method, log_posterior=None, diagnostics=None):
    """An archive; with ``log_posterior`` (one per member) a one-chain sampler's with the /diagnostics computed from
    its members, or with the given ``diagnostics``."""
    m, n, c = member_probs.shape
    w = ArchiveWriter(path, method=method, model="mlp", dataset="toy", n_classes=c,
                      splits={"test": SplitSpec(role="in_domain", dataset="toy", labels=labels,
                                                sample_ids=np.arange(n))})
    infos = [{} if log_posterior is None else {"chain": 0, "log_posterior": float(log_posterior[k])}
             for k in range(m)]
    for k in range(m):
        w.add_member({"test": member_probs[k]}, seed=k, info=infos[k])
    if log_posterior is not None:
        diagnostics = diagnostics_summary(infos, member_probs, labels, split="test")
    if diagnostics is not None:
        w.set_diagnostics(diagnostics)
    return w.finalize()


#: What a converged chain's /diagnostics say (written as such; tests/producers/test_chains.py checks that samplers
#: compute them from their members).
CONVERGED = {"chains": 1, "draws_per_chain": 400, "log_posterior": {"rhat": 1.003, "ess_bulk": 380.0},
             "probe": {"split": "test", "size": 40, "quantity": "p(label)", "rhat_max": 1.02, "rhat_median": 1.001,
                       "ess_bulk_min": 210.0, "ess_bulk_median": 390.0}}


def _converged_reference(path, labels, rng):
    return _write(path, rng.dirichlet(np.ones(3), size=(6, len(labels))), labels, "hmc", diagnostics=CONVERGED)


def test_compare_reports_agreement_and_total_variation_with_the_reference_posterior(tmp_path):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 40)
    a = _converged_reference(tmp_path / "hmc.h5", labels, rng)
    from ubench.archive_schema import read_archive

    hmc = read_archive(a).probs["test"].astype(np.float64)
    method = rng.dirichlet(np.ones(3), size=(2, 40))
    b = _write(tmp_path / "m.h5", method, labels, "swag")
    res = CliRunner().invoke(cli, ["compare", str(b), str(a), "--reference-posterior", str(a), "--json"])
    assert res.exit_code == 0, res.output
    reports = json.loads(res.output)["reports"]
    p, q = method.mean(0), hmc.mean(0)
    expected_agree = np.mean(p.argmax(1) == q.argmax(1))
    expected_tv = np.mean(0.5 * np.abs(p - q).sum(1))
    assert abs(reports[0]["summary"]["posterior_agreement"] - expected_agree) < 1e-12
    assert abs(reports[0]["summary"]["posterior_total_variation"] - expected_tv) < 1e-6
    assert reports[1]["summary"]["posterior_agreement"] == 1.0
    assert reports[1]["summary"]["posterior_total_variation"] < 1e-7
    assert "posterior_agreement" in reports[0]["comparability"]["comparable"]


def test_other_samples_give_null_with_a_note_and_uploads_are_refused(tmp_path):
    rng = np.random.default_rng(1)
    a = _converged_reference(tmp_path / "hmc.h5", rng.integers(0, 3, 40), rng)
    b = _write(tmp_path / "m.h5", rng.dirichlet(np.ones(3), size=(2, 30)), rng.integers(0, 3, 30), "swag")
    res = CliRunner().invoke(cli, ["compare", str(b), "--reference-posterior", str(a), "--json"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.output)["reports"][0]
    assert r["summary"]["posterior_agreement"] is None
    assert any("reference posterior" in n for n in r["notes"])
    res = CliRunner().invoke(cli, ["compare", str(b), "--reference-posterior", str(a), "--sandbox"])
    assert res.exit_code == 2 and "--no-sandbox" in res.output


def test_an_unconverged_reference_is_refused_naming_its_diagnostics_unless_allowed(tmp_path):
    """A chain whose log-posterior drifts (R-hat > 1.05) and whose draws are few (ESS < 100) is refused with exit 1
    naming both numbers; --allow-unconverged scores it, with converged false and a note in every report."""
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 3, 40)
    drift = np.cumsum(rng.normal(size=30)) + np.linspace(0, 30, 30)
    a = _write(tmp_path / "hmc.h5", rng.dirichlet(np.ones(3), size=(30, 40)), labels, "hmc", log_posterior=drift)
    b = _write(tmp_path / "m.h5", rng.dirichlet(np.ones(3), size=(2, 40)), labels, "swag")
    refused = CliRunner().invoke(cli, ["compare", str(b), "--reference-posterior", str(a), "--json"])
    assert refused.exit_code == 1
    assert "has not converged" in refused.output and "--allow-unconverged" in refused.output
    assert "log-posterior R-hat" in refused.output and "log-posterior bulk ESS" in refused.output
    assert "probe p(label) bulk ESS (worst sample)" in refused.output  # 30 draws cannot give ESS 100
    allowed = CliRunner().invoke(cli, ["compare", str(b), "--reference-posterior", str(a), "--json",
                                       "--allow-unconverged"])
    assert allowed.exit_code == 0, allowed.output
    out = json.loads(allowed.output)
    assert out["reference_posterior"]["converged"] is False and out["reference_posterior"]["path"] == str(a)
    assert any(p.startswith("log-posterior R-hat") for p in out["reference_posterior"]["problems"])
    assert any("UNCONVERGED reference posterior" in n for n in out["reports"][0]["notes"])
    assert out["reports"][0]["summary"]["posterior_agreement"] is not None


def test_a_reference_without_diagnostics_is_refused(tmp_path):
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 3, 40)
    a = _write(tmp_path / "hmc.h5", rng.dirichlet(np.ones(3), size=(3, 40)), labels, "hmc")
    res = CliRunner().invoke(cli, ["compare", str(a), "--reference-posterior", str(a)])
    assert res.exit_code == 1 and "records no convergence diagnostics" in res.output


def test_a_converged_reference_is_recorded_as_converged(tmp_path):
    rng = np.random.default_rng(4)
    labels = rng.integers(0, 3, 40)
    a = _converged_reference(tmp_path / "hmc.h5", labels, rng)
    b = _write(tmp_path / "m.h5", rng.dirichlet(np.ones(3), size=(2, 40)), labels, "swag")
    res = CliRunner().invoke(cli, ["compare", str(b), "--reference-posterior", str(a), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["reference_posterior"] == {"path": str(a), "converged": True, "problems": []}
    assert not any("UNCONVERGED" in n for n in json.loads(res.output)["reports"][0]["notes"])
    # One probe sample under the bar is enough to refuse.
    worst = {**CONVERGED, "probe": {**CONVERGED["probe"], "ess_bulk_min": 99.0}}
    c = _write(tmp_path / "hmc2.h5", rng.dirichlet(np.ones(3), size=(6, 40)), labels, "hmc", diagnostics=worst)
    res = CliRunner().invoke(cli, ["compare", str(b), "--reference-posterior", str(c)])
    assert res.exit_code == 1 and "probe p(label) bulk ESS (worst sample) 99 < 100" in res.output


def test_a_nan_r_hat_is_written_as_null_and_refused(tmp_path):
    """A short chain whose halves each repeat one point (rejected proposals) has a NaN split-R-hat: the sampler's
    archive still gets written (strict JSON: null), and compare refuses it as unconverged. Probe samples whose R-hat
    is NaN are left out of the probe's summary, and a probe with no finite R-hat gives null."""
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 3, 40)
    stuck = np.array([-50.0, -50.0, -50.0, -48.0, -48.0, -48.0])
    probs = np.repeat(rng.dirichlet(np.ones(3), size=(1, 40)), 6, axis=0)
    probs[3:] = rng.dirichlet(np.ones(3), size=(1, 40))  # every probe sample: one value per half
    a = _write(tmp_path / "hmc.h5", probs, labels, "hmc", log_posterior=stuck)
    d = diagnostics_summary([{"chain": 0, "log_posterior": v} for v in stuck], probs, labels, split="test")
    assert d["log_posterior"]["rhat"] is None and d["log_posterior"]["ess_bulk"] > 0
    assert d["probe"]["rhat_max"] is None and d["probe"]["rhat_median"] is None
    assert d["probe"]["ess_bulk_min"] > 0
    mixed = probs.copy()
    mixed[:3, 0] = rng.dirichlet(np.ones(3), size=3)  # one probe sample moves in both halves: its R-hat is finite
    d = diagnostics_summary([{"chain": 0, "log_posterior": v} for v in stuck], mixed, labels, split="test")
    assert d["probe"]["rhat_max"] == d["probe"]["rhat_median"] and np.isfinite(d["probe"]["rhat_max"])
    res = CliRunner().invoke(cli, ["compare", str(a), "--reference-posterior", str(a)])
    assert res.exit_code == 1 and "log-posterior R-hat None > 1.05" in res.output
