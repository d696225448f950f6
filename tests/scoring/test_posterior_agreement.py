# SPDX-License-Identifier: MIT
"""``ubench compare --reference-posterior``: agreement and total variation with an HMC archive, by hand."""

import json

import numpy as np
from click.testing import CliRunner

from ubench.archive_schema import ArchiveWriter, SplitSpec
from ubench.cli import cli


def _write(path, member_probs, labels, method):
    m, n, c = member_probs.shape
    w = ArchiveWriter(path, method=method, model="mlp", dataset="toy", n_classes=c,
                      splits={"test": SplitSpec(role="in_domain", dataset="toy", labels=labels,
                                                sample_ids=np.arange(n))})
    for k in range(m):
        w.add_member({"test": member_probs[k]}, seed=k)
    return w.finalize()


def test_compare_reports_agreement_and_total_variation_with_the_reference_posterior(tmp_path):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 40)
    hmc = rng.dirichlet(np.ones(3), size=(6, 40))
    method = rng.dirichlet(np.ones(3), size=(2, 40))
    a = _write(tmp_path / "hmc.h5", hmc, labels, "hmc")
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
    a = _write(tmp_path / "hmc.h5", rng.dirichlet(np.ones(3), size=(2, 40)), rng.integers(0, 3, 40), "hmc")
    b = _write(tmp_path / "m.h5", rng.dirichlet(np.ones(3), size=(2, 30)), rng.integers(0, 3, 30), "swag")
    res = CliRunner().invoke(cli, ["compare", str(b), "--reference-posterior", str(a), "--json"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.output)["reports"][0]
    assert r["summary"]["posterior_agreement"] is None
    assert any("reference posterior" in n for n in r["notes"])
    res = CliRunner().invoke(cli, ["compare", str(b), "--reference-posterior", str(a), "--sandbox"])
    assert res.exit_code == 2 and "--no-sandbox" in res.output
