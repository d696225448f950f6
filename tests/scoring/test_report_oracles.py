# SPDX-License-Identifier: MIT
"""The numbers in a score report equal independent computations on the archive's arrays: scikit-learn
(accuracy, log loss, Brier, AUROC, AP, ROC curve), scipy (entr, rel_entr) and hand-made bins (tests/oracles.py),
never the ubench functions the report was built with.

Pitfalls preset without temperature scaling and without smoothing, so every number is a plain function of the
float64 ensemble mean (or of the members, for the uncertainties).
"""

from __future__ import annotations

import numpy as np
import oracles
import pytest
from scoring_archives import build_archive
from sklearn import metrics as skm

from ubench.scoring.protocols import Protocol
from ubench.scoring.score import score_archive

NO_TS = Protocol.preset("pitfalls").replace(placement="none")


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    path, data = build_archive(tmp_path_factory.mktemp("oracles") / "run.h5", m=4, n=400, c=5, seed=11)
    return score_archive(path, protocol=NO_TS), data


def _scores(member_probs):
    total, _, knowledge = oracles.decomposition(member_probs)
    return {"total": total, "knowledge": knowledge,
            "confidence": -member_probs.astype(np.float64).mean(axis=0).max(axis=1)}


# The float64 mean of float32 members sums to 1 only within ~1e-7, which scikit-learn warns about.
@pytest.mark.filterwarnings("ignore:The y_prob values do not sum to one")
def test_in_domain_core_metrics_equal_sklearn_and_hand_bins(scored):
    """accuracy, NLL, Brier equal scikit-learn on the float64 ensemble mean; ECE, TACE and UCE equal the hand
    bins of tests/oracles.py (15 bins, TACE threshold 1e-3)."""
    report, data = scored
    sec = report["in_domain"]["test"]
    y = data["labels"]
    mean = data["probs"]["test"].astype(np.float64).mean(axis=0)
    assert sec["accuracy"] == skm.accuracy_score(y, mean.argmax(axis=1))
    assert sec["nll"] == pytest.approx(skm.log_loss(y, mean, labels=range(5)), rel=1e-9)
    assert sec["brier"] == pytest.approx(skm.brier_score_loss(y, mean, labels=range(5)), rel=1e-9)
    assert sec["ece"] == pytest.approx(oracles.ece(mean, y, 15), abs=1e-12)
    assert sec["tace"] == pytest.approx(oracles.tace(mean, y, 15, 1e-3), abs=1e-12)
    assert sec["uce"] == pytest.approx(oracles.uce(mean, y, 15), abs=1e-9)
    assert report["summary"]["accuracy"] == sec["accuracy"] and report["summary"]["ece"] == sec["ece"]


def test_reliability_diagram_equals_hand_bins(scored):
    """The reliability section's counts, mean confidence and accuracy per bin are the hand bins of the mean."""
    report, data = scored
    rel = report["in_domain"]["test"]["reliability"]
    conf, hit = oracles.top1(data["probs"]["test"].astype(np.float64).mean(axis=0), data["labels"])
    k, v, h = map(np.array, zip(*oracles.hand_bins(conf, hit, 15)))
    assert rel["confidence"]["counts"] == k.tolist() and sum(rel["confidence"]["counts"]) == 400
    np.testing.assert_allclose(rel["confidence"]["mean_confidence"], v, rtol=1e-12, atol=0)
    np.testing.assert_allclose(rel["confidence"]["accuracy"], h, rtol=1e-12, atol=0)


def test_uncertainties_detection_and_rejection_equal_independent_scores(scored):
    """Mean total/data/knowledge uncertainty equal entr/rel_entr of the members (float32 logs: 1e-6); the
    misclassification AUROC/AUPR/FPR95 of each score equal scikit-learn with positive = top-1 error of the mean;
    the AURC of each score equals the accuracy-rejection curve computed by a loop."""
    report, data = scored
    sec = report["in_domain"]["test"]
    mp, y = data["probs"]["test"], data["labels"]
    total, dat, knowledge = oracles.decomposition(mp)
    assert sec["mean_total_uncertainty"] == pytest.approx(total.mean(), abs=1e-6)
    assert sec["mean_data_uncertainty"] == pytest.approx(dat.mean(), abs=1e-6)
    assert sec["mean_knowledge_uncertainty"] == pytest.approx(knowledge.mean(), abs=1e-6)
    correct = mp.astype(np.float64).mean(axis=0).argmax(axis=1) == y
    assert 0 < correct.sum() < 400  # both classes of the detection task are present
    for name, score in _scores(mp).items():
        expected = oracles.detection(score, (~correct).astype(int))
        got = (sec[f"misclassification_auroc_{name}"], sec[f"misclassification_aupr_{name}"],
               sec[f"misclassification_fpr95_{name}"])
        assert got == pytest.approx(expected, abs=1e-12), name
        assert sec[f"aurc_{name}"] == pytest.approx(oracles.aurc(correct, score), abs=1e-12), name


def test_ood_scores_equal_sklearn(scored):
    """OOD detection against the in-domain split (positive = OOD) equals scikit-learn on scores computed from
    entr/rel_entr of both splits' members; the headline is the mean over the one OOD split."""
    report, data = scored
    ood = report["ood"]["ood"]
    s_in, s_ood = _scores(data["probs"]["test"]), _scores(data["probs"]["ood"])
    positive = np.r_[np.zeros(400, int), np.ones(200, int)]
    for name in s_in:
        expected = oracles.detection(np.concatenate([s_in[name], s_ood[name]]), positive)
        got = (ood[f"ood_auroc_{name}"], ood[f"ood_aupr_{name}"], ood[f"ood_fpr95_{name}"])
        assert got == pytest.approx(expected, abs=1e-12), name
    assert report["summary"]["ood_auroc_total"] == ood["ood_auroc_total"]


def test_shift_splits_and_medians_equal_sklearn(scored):
    """Each shift split's accuracy, NLL and ECE equal scikit-learn / hand bins on its own ensemble mean, and the
    headline medians are numpy medians of those independent values."""
    report, data = scored
    y = data["labels"]
    acc, nll, ece = {}, {}, {}
    for name in ("blur_1", "blur_2", "noise_1"):
        mean = data["probs"][name].astype(np.float64).mean(axis=0)
        acc[name] = skm.accuracy_score(y, mean.argmax(axis=1))
        nll[name] = skm.log_loss(y, mean, labels=range(5))
        ece[name] = oracles.ece(mean, y, 15)
        sec = report["shift"][name]
        assert sec["accuracy"] == acc[name]
        assert sec["nll"] == pytest.approx(nll[name], rel=1e-9)
        assert sec["ece"] == pytest.approx(ece[name], abs=1e-12)
    summary = report["summary"]
    assert summary["shift_accuracy_median"] == pytest.approx(np.median(list(acc.values())), abs=1e-15)
    assert summary["shift_nll_median"] == pytest.approx(np.median(list(nll.values())), rel=1e-9)
    assert summary["shift_ece_median"] == pytest.approx(np.median(list(ece.values())), abs=1e-12)
