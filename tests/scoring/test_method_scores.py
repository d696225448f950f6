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


# --- the functions themselves, against scikit-learn and hand computations -----------------------------------

def _fpr95_oracle(y, s, tpr=0.95):
    """FPR at the first ROC point whose TPR reaches ``tpr`` (scikit-learn's curve, every threshold kept)."""
    from sklearn.metrics import roc_curve

    fpr, t, _ = roc_curve(y, s, drop_intermediate=False)
    return float(fpr[np.argmax(t >= tpr)])


def _labelled(seed=0, n=60, c=4):
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.ones(c), n)
    labels = rng.integers(0, c, n)
    return probs, labels, rng.normal(size=n)  # a continuous score: no ties


def test_method_score_uncertainty_negates_a_confidence_only():
    from ubench.metrics.method_scores import MethodScore

    v = np.array([0.5, -1.0, 2.0])
    assert MethodScore(v, "uncertainty").uncertainty is v
    np.testing.assert_array_equal(MethodScore(v, "confidence").uncertainty, -v)
    assert MethodScore(v, "confidence").method_specific is True


def test_logit_scores_by_hand_in_float64_and_streamed():
    """energy = -log sum_c exp(mean_m z_mc) and max_logit = max_c mean_m z_mc, the mean taken in float64 (float32
    logits near 1e4 lose their differences in a float32 mean); the accumulator fed in blocks gives the same numbers,
    marked not method-specific, energy an uncertainty and max_logit a confidence."""
    from ubench.metrics.method_scores import LOGIT_SCORES, LogitScoreAccumulator

    rng = np.random.default_rng(1)
    z = (1e4 + rng.normal(0, 3, (3, 11, 5))).astype(np.float32)
    mean = z.astype(np.float64).sum(axis=0) / 3
    top = mean.max(axis=1)
    energy = -(top + np.log(np.exp(mean - top[:, None]).sum(axis=1)))
    out = logit_scores(z)
    np.testing.assert_allclose(out["energy"], energy, rtol=1e-14)
    np.testing.assert_allclose(out["max_logit"], top, rtol=1e-14)
    acc = LogitScoreAccumulator(11)
    for start in (0, 4, 9):
        acc.add(start, z[:, start:{0: 4, 4: 9, 9: 11}[start]])
    res = acc.result()
    assert set(res) == set(LOGIT_SCORES) == {"energy", "max_logit"}
    np.testing.assert_array_equal(res["energy"].values, out["energy"])
    np.testing.assert_array_equal(res["max_logit"].values, out["max_logit"])
    assert (res["energy"].direction, res["max_logit"].direction) == ("uncertainty", "confidence")
    assert not res["energy"].method_specific and not res["max_logit"].method_specific


@pytest.mark.parametrize("direction", ["uncertainty", "confidence"])
def test_in_domain_section_equals_sklearn_and_the_rejection_curve_by_hand(direction):
    """Misclassification detection (positive = top-1 error) by the score as an uncertainty equals scikit-learn's
    AUROC / AP / ROC at 95 % TPR; the rejection curve rejects the most uncertain first (accuracy of the k most
    certain, k = N - r), aurc is 1 - its mean, and the kept points are round(i N / points) for i < points."""
    from ubench.metrics.method_scores import MethodScore, method_scores_in_domain

    probs, labels, s = _labelled()
    u = s if direction == "uncertainty" else -s
    sec, notes = method_scores_in_domain(probs, labels, {"s": MethodScore(s, direction)}, points=7)
    assert notes == []
    got = sec["s"]
    errors = (probs.argmax(1) != labels).astype(int)
    assert (got["direction"], got["method_specific"]) == (direction, True)
    assert got["misclassification_auroc"] == pytest.approx(roc_auc_score(errors, u), abs=1e-12)
    assert got["misclassification_aupr"] == pytest.approx(average_precision_score(errors, u), abs=1e-12)
    assert got["misclassification_fpr95"] == pytest.approx(_fpr95_oracle(errors, u), abs=1e-12)
    correct = 1.0 - errors[np.argsort(u)]  # most certain first
    n = labels.shape[0]
    acc = np.array([correct[: n - r].mean() for r in range(n)])
    assert got["aurc"] == pytest.approx(1.0 - acc.mean(), abs=1e-12)
    idx = [round(i * n / 7) for i in range(7)]  # 0, 9, 17, 26, 34, 43, 51
    assert got["rejection_curve"]["rejected_fraction"] == pytest.approx([i / n for i in idx], abs=1e-15)
    assert got["rejection_curve"]["accuracy"] == pytest.approx(acc[idx].tolist(), abs=1e-12)


def test_in_domain_section_with_no_error_has_null_detection_and_one_note():
    """Every prediction right: misclassification detection is undefined (None, all three) for every score, one
    note says so; the rejection curve is all ones (aurc 0) and its points stop at N - 1 (no duplicates)."""
    from ubench.metrics.method_scores import MethodScore, method_scores_in_domain

    probs = np.eye(3)[[0, 1, 2, 0, 1]] * 0.8 + 0.2 / 3
    labels = np.array([0, 1, 2, 0, 1])
    scores = {"a": MethodScore(np.arange(5.0), "uncertainty"), "b": MethodScore(np.ones(5), "confidence")}
    sec, notes = method_scores_in_domain(probs, labels, scores, points=101)
    for name in ("a", "b"):
        assert [sec[name][k] for k in ("misclassification_auroc", "misclassification_aupr",
                                       "misclassification_fpr95")] == [None, None, None]
        assert sec[name]["aurc"] == 0.0
        assert sec[name]["rejection_curve"]["rejected_fraction"] == [0.0, 0.2, 0.4, 0.6, 0.8]
    assert len(notes) == 1 and notes[0].startswith("misclassification detection by method scores undefined: ")


def test_ood_section_equals_sklearn_and_skips_scores_missing_in_domain():
    from ubench.metrics.method_scores import MethodScore, method_scores_ood

    rng = np.random.default_rng(2)
    neg, pos = rng.normal(0, 1, 40), rng.normal(0.7, 1, 25)
    ind = {"c": MethodScore(neg, "confidence")}
    ood = {"only_ood": MethodScore(pos, "uncertainty"), "c": MethodScore(pos, "confidence", method_specific=False)}
    out = method_scores_ood(ind, ood, tpr=0.8)
    assert list(out) == ["c"]
    y, u = np.r_[np.zeros(40), np.ones(25)], -np.r_[neg, pos]  # confidence: negated
    assert out["c"]["ood_auroc"] == pytest.approx(roc_auc_score(y, u), abs=1e-12)
    assert out["c"]["ood_aupr"] == pytest.approx(average_precision_score(y, u), abs=1e-12)
    assert out["c"]["ood_fpr95"] == pytest.approx(_fpr95_oracle(y, u, 0.8), abs=1e-12)
    assert (out["c"]["direction"], out["c"]["method_specific"]) == ("confidence", False)


def test_summary_means_over_ood_splits_and_keeps_the_in_domain_numbers():
    """Per score: the in-domain aurc and misclassification AUROC (None without the split or the score there),
    the mean of each OOD number over the splits holding the score (None in none); names in in-domain order, then
    those only in OOD splits, described by the first section holding them."""
    from ubench.metrics.method_scores import method_scores_summary

    d = {"direction": "uncertainty", "method_specific": True}
    ind = {"a": {**d, "aurc": 0.3, "misclassification_auroc": 0.7}}
    ood = {"o1": {"a": {**d, "ood_auroc": 0.6, "ood_aupr": 0.5, "ood_fpr95": 0.4},
                  "z": {"direction": "confidence", "method_specific": False, "ood_auroc": 0.9, "ood_aupr": 0.8,
                        "ood_fpr95": 0.1}},
           "o2": {"a": {**d, "ood_auroc": 0.8, "ood_aupr": 0.7, "ood_fpr95": 0.2}}}
    out = method_scores_summary(ind, ood)
    assert list(out) == ["a", "z"]
    assert out["a"] == {**d, "aurc": 0.3, "misclassification_auroc": 0.7, "ood_auroc": pytest.approx(0.7),
                        "ood_aupr": pytest.approx(0.6), "ood_fpr95": pytest.approx(0.3)}
    assert out["z"] == {"direction": "confidence", "method_specific": False, "aurc": None,
                        "misclassification_auroc": None, "ood_auroc": 0.9, "ood_aupr": 0.8, "ood_fpr95": 0.1}
    alone = method_scores_summary(ind, {})
    assert alone["a"]["ood_auroc"] is None and alone["a"]["ood_aupr"] is None and alone["a"]["ood_fpr95"] is None
    assert method_scores_summary(None, {"o1": ood["o1"]})["a"]["aurc"] is None


def test_in_domain_and_ood_sections_default_to_95_percent_tpr_and_101_points():
    """The defaults: FPR at 95 % TPR and 101 rejection-curve points; another tpr is used where given."""
    from ubench.metrics.method_scores import MethodScore, method_scores_in_domain, method_scores_ood

    probs, labels, s = _labelled(seed=3, n=250)
    errors = (probs.argmax(1) != labels).astype(int)
    sec = method_scores_in_domain(probs, labels, {"s": MethodScore(s, "uncertainty")})[0]["s"]
    assert sec["misclassification_fpr95"] == pytest.approx(_fpr95_oracle(errors, s, 0.95), abs=1e-12)
    assert len(sec["rejection_curve"]["rejected_fraction"]) == 101
    at80 = method_scores_in_domain(probs, labels, {"s": MethodScore(s, "uncertainty")}, tpr=0.8)[0]["s"]
    assert at80["misclassification_fpr95"] == pytest.approx(_fpr95_oracle(errors, s, 0.8), abs=1e-12)
    assert at80["misclassification_fpr95"] != sec["misclassification_fpr95"]
    neg, pos = s[:120], s[120:] + 0.5
    ood = method_scores_ood({"s": MethodScore(neg, "uncertainty")}, {"s": MethodScore(pos, "uncertainty")})
    y, u = np.r_[np.zeros(120), np.ones(130)], np.r_[neg, pos]
    assert ood["s"]["ood_fpr95"] == pytest.approx(_fpr95_oracle(y, u, 0.95), abs=1e-12)


@pytest.mark.parametrize("tpr", [0.0, 1.5, -0.1])
def test_method_scores_refuse_a_tpr_outside_0_1(tpr):
    """Above 1 the FPR's threshold index would wrap round to a positive from the other end."""
    from ubench.metrics.method_scores import MethodScore, method_scores_in_domain, method_scores_ood

    u = {"s": MethodScore(np.array([0.1, 0.7, 0.3, 0.9]), "uncertainty")}
    with pytest.raises(ValueError, match=r"tpr must be in \(0, 1\]"):
        method_scores_in_domain(np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.3, 0.7]]), np.array([0, 0, 1, 1]),
                                u, tpr=tpr)
    with pytest.raises(ValueError, match=r"tpr must be in \(0, 1\]"):
        method_scores_ood(u, u, tpr=tpr)
