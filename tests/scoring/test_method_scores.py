# SPDX-License-Identifier: MIT
"""Method scores and logit scores in a score report (issue #31): every declared score and the energy and
max-logit scores of the logits get OOD detection, misclassification detection and rejection curves beside the
softmax-derived ones, marked method-specific or not.

Oracles: torch-uncertainty's ``EnergyCriterion`` / ``MaxLogitCriterion`` on the same logits, scikit-learn's
``roc_auc_score`` / ``average_precision_score`` on the scores, and the in-domain rejection curve of the softmax
confidence when the declared score *is* that confidence.
"""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from sklearn.metrics import average_precision_score, roc_auc_score

from scoring_archives import build_archive
from ubench.archive_schema import InvalidArchiveError
from ubench.cli import cli
from ubench.metrics.method_scores import logit_scores
from ubench.scoring.score import score_archive


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ms")
    path, data = build_archive(tmp / "a.h5", m=3, n=90, logits=True,
                               scores={"variance": "uncertainty", "density": "confidence"})
    return path, data, score_archive(path)


def _auroc_oracle(neg, pos):
    y = np.r_[np.zeros(len(neg)), np.ones(len(pos))]
    s = np.r_[neg, pos]
    return roc_auc_score(y, s), average_precision_score(y, s)


def test_logit_scores_equal_torch_uncertainty_criteria():
    """energy = -logsumexp and max_logit = max of the members' mean logits, as torch-uncertainty's criteria
    (inputs (batch, members, classes); its MaxLogitCriterion returns -max)."""
    torch = pytest.importorskip("torch")
    from torch_uncertainty.ood_criteria import EnergyCriterion, MaxLogitCriterion

    z = np.random.default_rng(0).normal(0, 5, (4, 50, 7))
    ours = logit_scores(z)
    zt = torch.from_numpy(z).permute(1, 0, 2)
    np.testing.assert_allclose(ours["energy"], EnergyCriterion()(zt).numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ours["max_logit"], -MaxLogitCriterion()(zt).numpy(), rtol=1e-12, atol=1e-12)


def test_report_scores_every_declared_and_logit_score(scored):
    path, data, report = scored
    ms = report["method_scores"]
    assert {k: (v["direction"], v["method_specific"]) for k, v in ms.items()} == {
        "variance": ("uncertainty", True), "density": ("confidence", True),
        "energy": ("uncertainty", False), "max_logit": ("confidence", False)}
    ood = report["ood"]["ood"]["method_scores"]
    lz = {s: logit_scores(data["logits"][s]) for s in ("test", "ood")}
    for name, neg, pos in (
        ("variance", data["scores"]["variance"]["test"], data["scores"]["variance"]["ood"]),
        ("density", -data["scores"]["density"]["test"], -data["scores"]["density"]["ood"]),  # confidence: negated
        ("energy", lz["test"]["energy"], lz["ood"]["energy"]),
        ("max_logit", -lz["test"]["max_logit"], -lz["ood"]["max_logit"]),
    ):
        auroc, ap = _auroc_oracle(neg, pos)
        assert ood[name]["ood_auroc"] == pytest.approx(auroc, abs=1e-12), name
        assert ood[name]["ood_aupr"] == pytest.approx(ap, abs=1e-12), name
        assert ms[name]["ood_auroc"] == ood[name]["ood_auroc"]  # one OOD split: the mean is itself
    sec = report["in_domain"]["test"]["method_scores"]
    errors = (data["probs"]["test"].astype(np.float64).mean(0).argmax(1) != data["labels"]).astype(int)
    auroc = roc_auc_score(errors, data["scores"]["variance"]["test"])
    assert sec["variance"]["misclassification_auroc"] == pytest.approx(auroc, abs=1e-12)
    assert len(sec["energy"]["rejection_curve"]["accuracy"]) == 90  # 101 points over 90 samples: each once
    assert "method_scores" not in report["shift"]["blur_1"]


def test_a_declared_confidence_equal_to_max_p_scores_like_the_softmax_confidence(tmp_path):
    """Declare, as a method score, exactly max p̄ (direction confidence): its OOD AUROC, AURC and
    misclassification AUROC are the report's own ``*_confidence`` numbers (a sign slip would give 1 - AUROC)."""
    path, data = build_archive(tmp_path / "a.h5", m=2, n=70, shifts=())
    from ubench.archive_schema import ArchiveWriter, SplitSpec

    mean = {k: v.astype(np.float64).mean(0) for k, v in data["probs"].items()}
    w = ArchiveWriter(tmp_path / "b.h5", method="x", model="mlp", dataset="toy", n_classes=5,
                      splits={"test": SplitSpec("in_domain", "toy", labels=data["labels"]),
                              "ood": SplitSpec("ood", "noise", n_samples=35)})
    for j in range(2):
        w.add_member({k: v[j] for k, v in data["probs"].items()}, seed=j)
    w.set_scores("maxp", {k: v.max(1) for k, v in mean.items()}, direction="confidence")
    report = score_archive(w.finalize())
    test, ood = report["in_domain"]["test"], report["ood"]["ood"]
    assert ood["method_scores"]["maxp"]["ood_auroc"] == pytest.approx(ood["ood_auroc_confidence"], abs=1e-12)
    assert ood["method_scores"]["maxp"]["ood_fpr95"] == pytest.approx(ood["ood_fpr95_confidence"], abs=1e-12)
    assert test["method_scores"]["maxp"]["aurc"] == pytest.approx(test["aurc_confidence"], abs=1e-12)
    assert test["method_scores"]["maxp"]["misclassification_auroc"] == pytest.approx(
        test["misclassification_auroc_confidence"], abs=1e-12)
    assert report["method_scores"]["maxp"]["method_specific"] is True


def test_archive_without_logits_or_scores_has_null_method_scores(tmp_path):
    report = score_archive(build_archive(tmp_path / "a.h5", m=2, n=30)[0])
    assert report["method_scores"] is None
    assert "method_scores" not in report["in_domain"]["test"] and "method_scores" not in report["ood"]["ood"]


def test_streamed_logits_that_are_not_the_probs_are_refused_by_score(tmp_path):
    """``score`` opens without a full validation and streams the logits: a row whose softmax is not the probs
    stops it with the finding (member, sample), as validate would."""
    import h5py

    path, _ = build_archive(tmp_path / "a.h5", m=2, n=40, logits=True)
    with h5py.File(path, "r+") as f:
        z = f["splits/ood/logits"]
        row = z[1, 7, :]
        row[0] += 3.0
        z[1, 7, :] = row
    with pytest.raises(InvalidArchiveError, match="member 1, sample 7"):
        score_archive(path)


def test_cli_text_and_html_show_the_method_scores(scored, tmp_path):
    path, _, _ = scored
    runner = CliRunner()
    res = runner.invoke(cli, ["score", str(path), "--no-sandbox"])
    assert res.exit_code == 0, res.output
    assert "method-specific" in res.stdout
    assert any(line.strip().startswith("variance *") for line in res.stdout.splitlines())
    assert any(line.strip().startswith("energy ") for line in res.stdout.splitlines())
    from ubench.scoring.html import render_html

    page = render_html(scored[2])  # the figures are drawn by the sandbox (tests/scoring/test_html*.py)
    assert "Method and logit scores" in page and "<td>density *</td>" in page and "<td>max_logit</td>" in page
