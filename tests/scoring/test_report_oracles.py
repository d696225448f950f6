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


def _members(rng, n, c, strength, labels):
    z = rng.normal(0, 1.5, (1, n, c)) + rng.normal(0, 0.3, (3, n, c))
    if labels is not None:
        z[:, np.arange(n), labels] += strength
    p = np.exp(z - z.max(axis=2, keepdims=True))
    return p / p.sum(axis=2, keepdims=True)


def _splits(c=4, n=150):
    """(name, role, members, labels, kind, intensity) in scoring order: two labelled in-domain splits (one named
    as a validation split), an unlabelled one, an OOD split, two labelled shift splits and an unlabelled one."""
    rng = np.random.default_rng(21)
    y = rng.integers(0, c, n)
    out = [("test", "in_domain", _members(rng, n, c, 2.5, y), y, None, None),
           ("val_split", "in_domain", _members(rng, n, c, 2.5, y), y, None, None),
           ("unlabelled", "in_domain", _members(rng, n, c, 0.0, None), None, None, None),
           ("far", "ood", _members(rng, n, c, 0.0, None), None, None, None)]
    out += [(f"blur_{k}", "shift", _members(rng, n, c, 2.5 - k, y), y, "blur", float(k)) for k in (1, 2)]
    return out + [("noise_1", "shift", _members(rng, n, c, 1.0, None), None, "noise", 1.0)]


def _add(builder, name, role, members, labels, kind, intensity):
    from ubench.metrics.report_sections import split_arrays

    arrays = split_arrays(members, keep_members=True)
    if role == "in_domain":
        builder.add_in_domain(name, arrays, labels)
    elif role == "ood":
        builder.add_ood(name, arrays)
    else:
        builder.add_shift(name, arrays, labels, kind=kind, intensity=intensity)


def _builder(protocol):
    from ubench.metrics.report import ReportBuilder

    b = ReportBuilder(protocol, n_members=3, n_classes=4, dataset="toy", primary="test")
    b.intervals.units = {name: f"ids-{name}" for name, *_ in _splits()}
    return b


def test_shift_temperature_is_fitted_on_the_validation_split_and_applied_by_hand():
    """With a split named as a validation split, the shift temperature is the NLL minimiser on its ensemble mean
    (scipy's bounded scalar search on log p / T, by hand), said to be fitted there (no note about the test
    split), and each labelled shift split's ``temperature_scaled`` NLL is scikit-learn's log loss of its mean
    scaled by it; the unlabelled shift split is skipped with a note."""
    from scipy import optimize, special

    protocol = NO_TS.replace(shift_temperature=True, intervals=False)
    b = _builder(protocol)
    for s in _splits():
        _add(b, *s)
    r = b.finish()
    split = {name: (members, labels) for name, _, members, labels, *_ in _splits()}
    mean, y = split["val_split"][0].mean(axis=0), split["val_split"][1]
    logp = np.log(mean)
    t = optimize.minimize_scalar(lambda t: -special.log_softmax(logp / t, axis=1)[np.arange(y.size), y].mean(),
                                 bounds=(0.05, 20), method="bounded", options={"xatol": 1e-10}).x
    ts = r["shift_summary"]["temperature"]
    assert (ts["fitted_on"], ts["fitted_on_kind"], ts["n_samples"], ts["hit_bound"]) == ("val_split", "validation",
                                                                                         150, False)
    assert ts["temperature"] == pytest.approx(t, rel=1e-5)
    for name in ("blur_1", "blur_2"):
        shifted, ys = split[name][0].mean(axis=0), split[name][1]
        scaled = special.softmax(np.log(shifted) / ts["temperature"], axis=1)
        assert r["shift"][name]["temperature_scaled"]["nll"] == pytest.approx(skm.log_loss(ys, scaled), rel=1e-9)
    assert "noise_1" not in r["shift"] and any("'noise_1' has no labels" in note for note in r["notes"])
    assert not any("fitted on the in-domain test split" in note for note in r["notes"])


def test_shift_temperature_without_a_labelled_in_domain_split_is_left_out_with_a_note():
    """No labelled in-domain split of two samples or more: no shift split gets ``temperature_scaled`` and a note
    says why; asked twice, it is still fitted (and noted) once."""
    from ubench.metrics.report import ReportBuilder

    protocol = NO_TS.replace(shift_temperature=True, intervals=False)
    b = ReportBuilder(protocol, n_members=3, n_classes=4, dataset="toy", primary=None)
    for s in _splits():
        if s[1] == "shift" or s[0] == "unlabelled":
            _add(b, *s)
    assert b.shift_temperature() is None and b.shift_temperature() is None
    r = b.finish()
    assert all("temperature_scaled" not in sec for sec in r["shift"].values())
    assert r["notes"].count("shift temperature scaling needs a labelled in-domain split of 2 or more samples; none "
                            "was found, so no shift split has temperature_scaled") == 1


def test_splits_scored_apart_and_merged_give_the_one_builder_report():
    """The cluster's path by hand (``scoring/score_parallel.py``): each split added to a builder of its own
    (notes cleared, nothing resampled there), the shift splits after the shift temperature fitted from the merged
    in-domain splits is handed to them, each ``split_result`` merged in scoring order (its interval statistics
    first) gives the report of one builder given every split, byte for byte, intervals and notes included; with
    only the test split as a source, the temperature is fitted there and said so."""
    import json

    for names in (None, {"test", "unlabelled", "far", "blur_1", "blur_2", "noise_1"}):
        splits = [s for s in _splits() if names is None or s[0] in names]
        protocol = NO_TS.replace(shift_temperature=True, bootstrap=40)
        one = _builder(protocol)
        for s in splits:
            _add(one, *s)
        want = one.finish()
        merged = _builder(protocol)
        for wave in ([s for s in splits if s[1] != "shift"], [s for s in splits if s[1] == "shift"]):
            fitted = (merged.shift_temperature() or {}) if wave[0][1] == "shift" else None
            results = {}
            for s in wave:
                worker = _builder(protocol)
                worker.notes.clear()
                worker.intervals.resampling = False
                if fitted is not None:
                    worker.shift_temperature(fitted)
                _add(worker, *s)
                results[s[0]] = worker.split_result(s[0])
            for name in reversed(list(results)):  # interval statistics in any order
                merged.intervals.absorb(name, results[name].pop("intervals"))
            for s in wave:
                merged.absorb(s[0], results[s[0]])
        got = merged.finish()
        assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)
        assert got["shift_summary"]["temperature"]["fitted_on"] == ("val_split" if names is None else "test")
        note = ("shift temperature scaling: the temperature was fitted on the in-domain test split 'test' (the "
                "archive has no validation split), as the shift paper's Temp Scaling fits it on in-domain data")
        assert (note in got["notes"]) == (names is not None)
