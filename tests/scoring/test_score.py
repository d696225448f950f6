# SPDX-License-Identifier: MIT
"""score_archive: the report carries exactly the numbers the metric functions give on the same arrays."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ubench.archive_schema import InvalidArchiveError, ReadLimits
from ubench.metrics import (accuracy_score, brier_loss, ensemble_mean_probs, expected_calibration_error,
                            misclassification_scores, nll_loss, ood_detection_scores, tace_error, uce_error)
from ubench.metrics.decision import cost_matrix_preset, decision_cost
from ubench.scoring.protocols import Protocol
from ubench.scoring.score import score_archive

from scoring_archives import build_archive, member_predictions, write_plain_archive

NO_TS = Protocol.preset("pitfalls").replace(placement="none")


def _dumps(report):
    return json.dumps(report, indent=2, sort_keys=True, allow_nan=False)


def test_in_domain_numbers_equal_direct_calls(archive):
    """For the in-domain split, every core metric in the report equals the public function on the ensemble mean."""
    path, data = archive
    report = score_archive(path, protocol=NO_TS)
    sec = report["in_domain"]["test"]
    mean = ensemble_mean_probs(data["probs"]["test"])
    y = data["labels"]
    assert sec["accuracy"] == accuracy_score(mean, y)
    assert sec["nll"] == pytest.approx(nll_loss(mean, y), rel=1e-12)
    assert sec["brier"] == pytest.approx(brier_loss(mean, y), rel=1e-12)
    assert sec["ece"] == pytest.approx(expected_calibration_error(mean, y, n_bins=15), rel=1e-12)
    assert sec["tace"] == pytest.approx(tace_error(mean, y, n_bins=15), rel=1e-12)
    assert sec["uce"] == pytest.approx(uce_error(mean, y, n_bins=15), rel=1e-12)
    mis = misclassification_scores(data["probs"]["test"], y)
    assert sec["misclassification_auroc_total"] == pytest.approx(mis["entropy"].auroc, rel=1e-12)
    assert sec["misclassification_auroc_confidence"] == pytest.approx(mis["confidence"].auroc, rel=1e-12)
    assert sec["misclassification_auroc_knowledge"] == pytest.approx(mis["mutual_information"].auroc, rel=1e-12)
    assert report["summary"]["accuracy"] == sec["accuracy"]
    assert report["labels"]["source"] == "archive"
    assert any("labels were taken from the archive" in n for n in report["notes"])
    _dumps(report)  # JSON-able with allow_nan=False


def test_ood_numbers_equal_direct_calls(archive):
    path, data = archive
    report = score_archive(path, protocol=NO_TS)
    ood = report["ood"]["ood"]
    ref = ood_detection_scores(data["probs"]["test"], data["probs"]["ood"])
    assert ood["against"] == "test"
    assert ood["ood_auroc_total"] == pytest.approx(ref["entropy"].auroc, rel=1e-12)
    assert ood["ood_aupr_total"] == pytest.approx(ref["entropy"].average_precision, rel=1e-12)
    assert ood["ood_fpr95_total"] == pytest.approx(ref["entropy"].fpr_at_tpr, rel=1e-12)
    assert ood["ood_auroc_knowledge"] == pytest.approx(ref["mutual_information"].auroc, rel=1e-12)
    assert ood["ood_auroc_confidence"] == pytest.approx(ref["confidence"].auroc, rel=1e-12)
    assert report["summary"]["ood_auroc_total"] == ood["ood_auroc_total"]


def test_shift_sections_and_quartiles(archive):
    path, data = archive
    report = score_archive(path, protocol=NO_TS)
    shift = report["shift"]
    assert sorted(shift) == ["blur_1", "blur_2", "noise_1"]
    for name, sec in shift.items():
        mean = ensemble_mean_probs(data["probs"][name])
        assert sec["accuracy"] == accuracy_score(mean, data["labels"])
        assert sec["ece"] == pytest.approx(expected_calibration_error(mean, data["labels"]), rel=1e-12)
    summ = report["shift_summary"]
    assert [r["intensity"] for r in summ["by_kind"]["blur"]] == [1.0, 2.0]
    assert [g["kinds"] for g in summ["groups"]] == [["noise"], ["blur"]]  # grids {1} and {1, 2} differ
    at1 = summ["groups"][1]["by_intensity"]["1"]
    assert at1["n_splits"] == 1 and at1["accuracy"]["median"] == shift["blur_1"]["accuracy"]


def test_shift_quartiles_pool_kinds_of_one_intensity_grid(tmp_path):
    """Kinds on the same grid (two corruptions at levels 1, 2) are pooled per level; another grid stays apart."""
    shifts = ((("blur", 1.0), 1.5), (("blur", 2.0), 0.8), (("noise", 1.0), 1.2), (("noise", 2.0), 0.5),
              (("rotate", 15.0), 1.0))
    path, _ = build_archive(tmp_path / "g.h5", shifts=shifts)
    report = score_archive(path, protocol=NO_TS)
    shift, groups = report["shift"], report["shift_summary"]["groups"]
    assert [(g["kinds"], g["intensities"]) for g in groups] == [(["rotate"], [15.0]),
                                                               (["blur", "noise"], [1.0, 2.0])]
    at2 = groups[1]["by_intensity"]["2"]
    accs = sorted([shift["blur_2"]["accuracy"], shift["noise_2"]["accuracy"]])
    assert at2["n_splits"] == 2 and (at2["accuracy"]["min"], at2["accuracy"]["max"]) == tuple(accs)
    assert at2["accuracy"]["median"] == pytest.approx(sum(accs) / 2)


def test_streaming_blocks_equal_one_block(archive):
    """Blockwise scoring (tiny blocks) gives the same report as one block per split."""
    path, _ = archive
    big = score_archive(path, protocol=NO_TS)
    small = score_archive(path, protocol=NO_TS, limits=ReadLimits(block_bytes=4 * 8 * 5 * 7))
    big.pop("limits"), small.pop("limits")
    assert _dumps(big) == _dumps(small)


def test_smoothing_and_decision_cost_ursabench(tmp_path):
    """The ursabench preset: smoothing 1e-4 in NLL, decision cost as a sum; equal to direct calls."""
    path, data = build_archive(tmp_path / "mnist.h5", c=10, n=80, shifts=())
    protocol = Protocol.preset("ursabench").replace(cost_preset="mnist")
    report = score_archive(path, protocol=protocol)
    sec = report["in_domain"]["test"]
    mean = ensemble_mean_probs(data["probs"]["test"])
    y = data["labels"]
    assert sec["nll"] == pytest.approx(nll_loss(mean, y, smoothing=1e-4), rel=1e-12)
    d = decision_cost(mean, y, cost_matrix_preset("mnist"), smoothing=1e-4)
    assert sec["decision_cost"] == pytest.approx(d.total) and sec["decision_cost_mean"] == pytest.approx(d.mean)
    assert report["protocol"]["name"] == "ursabench" and report["protocol"]["smoothing"] == 1e-4
    assert report["protocol"]["overrides"] == ["cost_preset"]
    assert "calibrated" not in sec


def test_cost_matrix_of_wrong_size_is_a_value_error(tmp_path):
    path, _ = build_archive(tmp_path / "a.h5", c=5, n=40, shifts=())
    with pytest.raises(ValueError, match="cost_matrix"):
        score_archive(path, protocol=NO_TS.replace(cost_preset="mnist"))


def test_plain_h5py_archive_scores(tmp_path):
    """An archive written with plain h5py from SPEC.md scores like the same arrays through the functions."""
    rng = np.random.default_rng(3)
    y = rng.integers(0, 4, 60)
    probs = {"test": member_predictions(rng, 60, 4, y, 3, 2.0).astype(np.float64),
             "far": member_predictions(rng, 30, 4, None, 3, 0.0).astype(np.float64),
             "rot15": member_predictions(rng, 60, 4, y, 3, 1.0).astype(np.float64)}
    path = write_plain_archive(tmp_path / "plain.h5", probs, {"test": y, "rot15": y},
                               {"test": "in_domain", "far": "ood", "rot15": "shift"}, 4,
                               shift={"rot15": ("rotate", 15.0)})
    report = score_archive(path, protocol=NO_TS)
    mean = ensemble_mean_probs(probs["test"])
    assert report["in_domain"]["test"]["nll"] == pytest.approx(nll_loss(mean, y), rel=1e-12)
    assert report["shift"]["rot15"]["shift_intensity"] == 15.0
    assert report["ood"]["far"]["ood_auroc_total"] == pytest.approx(
        ood_detection_scores(probs["test"], probs["far"])["entropy"].auroc, rel=1e-12)
    assert report["archive"]["method"] == "mc_dropout" and len(report["archive"]["sha256"]) == 64


def test_bad_probs_raise_the_validators_findings(tmp_path):
    """Values are checked on the streamed blocks: a row off the simplex gives the validator's finding."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 20)
    p = member_predictions(rng, 20, 3, y, 2, 1.0)
    p[1, 7] *= 0.5
    path = write_plain_archive(tmp_path / "bad.h5", {"test": p}, {"test": y}, {"test": "in_domain"}, 3)
    with pytest.raises(InvalidArchiveError) as info:
        score_archive(path, protocol=NO_TS)
    [f] = [f for f in info.value.findings if f.severity == "error"]
    assert f.check == "row-sum" and f.path == "/splits/test/probs" and "member 1, sample 7" in f.message


def test_report_records_archive_and_settings(archive):
    path, _ = archive
    report = score_archive(path, protocol=NO_TS.replace(bins=10, seed=3))
    assert report["ubench_version"] and report["report_schema"] == "1.2"
    assert report["archive"]["format_version"] == "1.0" and report["archive"]["n_members"] == 4
    assert report["protocol"]["bins"] == 10 and report["protocol"]["seed"] == 3
    assert report["protocol"]["overrides"] == ["placement", "bins", "seed"]
    assert len(report["in_domain"]["test"]["reliability"]["edges"]) == 11
    assert "nll" in report["comparability"]["not_comparable"] and "cll" in report["comparability"]["comparable"]


# --- issue 9 items 1, 2, 6; issue 16 items 11, 12 (branch fid-report) ----------------------------------------------

def _with_dataset(path, dataset):
    import h5py

    with h5py.File(path, "a") as f:
        f.attrs["dataset"] = dataset
    return path


#: Two members whose mean is URSA_MEAN; each top-1 confidence in its own 1/15 bin, the last one wrong.
URSA_MEAN = np.array([[0.9, 0.1], [0.62, 0.38], [0.3, 0.7], [0.82, 0.18]])
URSA_Y = np.array([0, 0, 1, 1])


def test_ursabench_smooths_only_nll_scores_and_decisions(tmp_path):
    """URSABench's tasks/prediction.py takes Brier and ECE of the unsmoothed ensemble mean and smooths (gamma = 1e-4)
    only before the log of NLL. Hand-computed: 1 - p_y = (0.1, 0.38, 0.3, 0.82), so Brier (summed over the two
    classes) = 2 * (0.01 + 0.1444 + 0.09 + 0.6724) / 4 = 0.4584, and with one sample per ECE bin
    ECE = (0.1 + 0.38 + 0.3 + 0.82) / 4 = 0.4 (smoothing the mean would make it 0.4 + gamma * 0.1)."""
    d = np.array([0.05, -0.05])
    members = np.stack([URSA_MEAN + d, URSA_MEAN - d])
    path = write_plain_archive(tmp_path / "u.h5", {"test": members}, {"test": URSA_Y}, {"test": "in_domain"}, 2)
    report = score_archive(path, protocol=Protocol.preset("ursabench"))
    sec = report["in_domain"]["test"]
    g = 1e-4
    assert sec["accuracy"] == 0.75
    assert sec["brier"] == pytest.approx(0.4584, abs=1e-12)
    assert sec["ece"] == pytest.approx(0.4, abs=1e-12)
    p_true = URSA_MEAN[np.arange(4), URSA_Y]
    assert sec["nll"] == pytest.approx(-np.mean(np.log(1e-12 + (1 - g) * p_true + g / 2)), rel=1e-12)
    # TACE, UCE and the reliability diagrams are calibration data like ECE: the same as without smoothing.
    plain = score_archive(path, protocol=Protocol.preset("shift"))["in_domain"]["test"]
    for key in ("tace", "uce", "reliability"):
        assert sec[key] == plain[key], key
    # the one error (confidence 0.82) outranks one of the three right ones (0.9) by -confidence: AUROC 1/3
    assert sec["misclassification_auroc_confidence"] == pytest.approx(1 / 3, abs=1e-12)


def _ursabench_decision_oracle(members, labels, critical, fn_cost):
    """URSABench tasks/decision_making.py by hand: C[true, decided] = 0.1 off the diagonal, rows of the critical
    classes fn_cost, 0 on the diagonal; each member smoothed (gamma 1e-4), risk = mean_m p_m @ C, decision =
    argmin, cost = sum_i C[y_i, d_i]."""
    c = members.shape[2]
    cost = np.full((c, c), 0.1)
    cost[list(critical)] = fn_cost
    np.fill_diagonal(cost, 0.0)
    smoothed = (1 - 1e-4) * members.astype(np.float64) + 1e-4 / c
    risk = np.mean(smoothed @ cost, axis=0)
    return float(cost[labels, risk.argmin(axis=1)].sum())


@pytest.mark.parametrize("dataset, preset, critical, fn_cost", [
    ("CIFAR-10", "cifar10", (0, 1, 8, 9), 1.0), ("cifar_10", "cifar10", (0, 1, 8, 9), 1.0),
    ("MNIST", "mnist", (3, 7), 100.0)])
def test_ursabench_reports_decision_cost_of_the_archives_dataset(tmp_path, dataset, preset, critical, fn_cost):
    """Under the ursabench preset the decision cost is reported without asking, under the matrix URSABench uses
    for the archive's dataset, as a sum over samples (checked against the task's code re-done in numpy)."""
    path, data = build_archive(tmp_path / "a.h5", c=10, n=90, shifts=(), ood=False)
    _with_dataset(path, dataset)
    report = score_archive(path, protocol=Protocol.preset("ursabench"))
    sec = report["in_domain"]["test"]
    assert sec["cost_preset"] == preset and sec["cost_reduction"] == "sum"
    oracle = _ursabench_decision_oracle(data["probs"]["test"], data["labels"], critical, fn_cost)
    assert sec["decision_cost"] == pytest.approx(oracle, rel=1e-12)
    assert report["summary"]["decision_cost"] == sec["decision_cost"]
    assert report["protocol"]["cost_preset"] == "auto" and report["protocol"]["overrides"] == []


@pytest.mark.parametrize("dataset, c, why", [("fashion-mnist", 10, "none of those"), ("digits", 10, "none of those"),
                                             ("mnist", 5, "has 10 classes, but the archive has 5")])
def test_ursabench_without_a_matching_cost_matrix_says_so(tmp_path, dataset, c, why):
    path, _ = build_archive(tmp_path / "a.h5", c=c, n=40, shifts=(), ood=False)
    report = score_archive(_with_dataset(path, dataset), protocol=Protocol.preset("ursabench"))
    assert "decision_cost" not in report["in_domain"]["test"]
    assert any(n.startswith("no decision cost") and why in n for n in report["notes"]), report["notes"]


KNOWLEDGE_KEYS = ("misclassification_auroc_knowledge", "misclassification_aupr_knowledge",
                  "misclassification_fpr95_knowledge", "aurc_knowledge", "ood_auroc_knowledge", "ood_aupr_knowledge",
                  "ood_fpr95_knowledge")


def test_single_member_has_null_knowledge_scores_marked_undefined(tmp_path):
    """With M = 1 the mutual information is 0 everywhere: no AUROC 0.5 / FPR95 1.0 placeholders, but null, a note,
    and never comparable (the leaderboard row has no such column value)."""
    from ubench.scoring.leaderboard import BoardConfig, build_board

    path, _ = build_archive(tmp_path / "sgd.h5", m=1)
    report = score_archive(path, protocol=NO_TS)
    summary = report["summary"]
    for key in KNOWLEDGE_KEYS:
        assert key in summary and summary[key] is None, key
    assert report["ood"]["ood"]["ood_auroc_knowledge"] is None
    assert "knowledge" not in report["ood"]["ood"]["histograms"]
    assert "knowledge" not in report["in_domain"]["test"]["rejection_curves"]
    assert summary["ood_auroc_total"] is not None and summary["misclassification_auroc_total"] is not None
    comp = report["comparability"]
    assert "ood_auroc_knowledge" not in comp["comparable"] and "ood_auroc_knowledge" in comp["undefined"]
    assert "misclassification_auroc_knowledge" not in comp["not_comparable"]
    assert any(n.startswith("one member") for n in report["notes"])
    board = build_board([{"archive": "sgd.h5", "outcome": {"status": "ok", "report": report}}],
                        BoardConfig(protocol=NO_TS.to_dict()))
    assert not any(k.endswith("_knowledge") for k in board["rows"][0]["metrics"])
    assert not any(c["key"].endswith("_knowledge") for c in board["columns"])
    _dumps(report)


def test_one_sample_in_domain_split_scores_with_a_note(tmp_path):
    """N = 1: test-time cross-validation cannot halve one sample, so cll and the calibrated numbers are null with a
    note, and member curves (on with --html) are skipped with a note instead of rejecting the upload."""
    rng = np.random.default_rng(1)
    y = np.array([2])
    probs = {"test": member_predictions(rng, 1, 4, y, 3, 2.0).astype(np.float64),
             "far": member_predictions(rng, 5, 4, None, 3, 0.0).astype(np.float64)}
    path = write_plain_archive(tmp_path / "n1.h5", probs, {"test": y}, {"test": "in_domain", "far": "ood"}, 4)
    report = score_archive(path, protocol=Protocol.preset("pitfalls").replace(member_curves=True))
    assert report["summary"]["cll"] is None and "cll" in report["comparability"]["undefined"]
    assert report["in_domain"]["test"]["calibrated"] is None
    assert "member_curves" not in report["in_domain"]["test"]
    assert any("has 1 sample: test-time cross-validation needs at least 2" in n for n in report["notes"])
    assert any("has 1 sample: no member curves" in n for n in report["notes"])
    assert report["ood"]["far"]["ood_auroc_total"] == pytest.approx(
        ood_detection_scores(probs["test"], probs["far"])["entropy"].auroc, rel=1e-12)
    from ubench.scoring.html import render_html

    assert "has 1 sample" in render_html(report)


def test_cli_score_html_accepts_a_one_sample_split(tmp_path):
    from click.testing import CliRunner

    from ubench.cli import cli

    rng = np.random.default_rng(2)
    y = np.array([0])
    path = write_plain_archive(tmp_path / "n1.h5", {"test": member_predictions(rng, 1, 3, y, 2, 2.0)}, {"test": y},
                               {"test": "in_domain"}, 3)
    result = CliRunner().invoke(cli, ["score", str(path), "--html", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    assert "cll and the calibrated metrics are null" in result.output


def _scored_cases():
    """The scorer's hostile cases from tests/archive_schema/hostile_corpus.py (that folder's modules import each
    other by name, so it goes on sys.path the way pytest puts it there for its own tests)."""
    import importlib
    import sys
    from pathlib import Path

    folder = str(Path(__file__).resolve().parents[1] / "archive_schema")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module("hostile_corpus").SCORED_CASES


def _comparable_numbers(report):
    """Every number of a report except where the file is and what its rows summed to, and the debiased L2
    calibration error: its equal-mass bin edges are midpoints of neighbouring confidences, so at a handful of
    samples (the 100k-class case has 6) a float32 rounding that breaks a tie moves a sample to another bin."""
    out = {k: v for k, v in report.items() if k not in ("archive", "row_sums", "notes", "limits")}
    out = json.loads(_dumps(out))
    for sec in [*out["in_domain"].values(), *out["shift"].values(), *(out.get("intervals") or {}).get(
            "splits", {}).values(), out["summary"], (out.get("intervals") or {}).get("summary", {})]:
        sec.pop("l2_ce_debiased", None)
    return out


def _assert_same_numbers(a, b, rel, where=""):
    if isinstance(a, dict):
        assert sorted(a) == sorted(b), where
        for k in a:
            _assert_same_numbers(a[k], b[k], rel, f"{where}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same_numbers(x, y, rel, f"{where}[{i}]")
    elif isinstance(a, float) and not isinstance(a, bool):
        assert a == pytest.approx(b, rel=rel, abs=rel), where
    else:
        assert a == b, where


@pytest.mark.parametrize("name", sorted(_scored_cases()))
def test_inflated_rows_score_like_their_normalised_twin(tmp_path, name):
    """Rows that sum to more than 1 within the spec's tolerance are renormalised before scoring: the upload scores
    like its honest twin, and row_sums records the largest correction and where."""
    from ubench.archive_schema import validate_archive

    case = _scored_cases()[name](tmp_path)
    assert not [f for f in validate_archive(case.path) if f.severity == "error"]  # within the spec
    protocol = Protocol.preset(case.protocol)
    hostile, twin = score_archive(case.path, protocol=protocol), score_archive(case.twin, protocol=protocol)
    _assert_same_numbers(_comparable_numbers(hostile), _comparable_numbers(twin), case.rel)
    assert twin["row_sums"]["n_renormalised"] == 0 and twin["row_sums"]["max_deviation"] < 2.0**-20
    rs = hostile["row_sums"]
    assert rs["n_renormalised"] > 0 and rs["max_deviation"] > 2.0**-20 and rs["split"] in hostile["archive"]["splits"]
    assert any("divided by their sums before scoring" in n for n in hostile["notes"])


def test_compare_shows_no_knowledge_score_for_a_single_model(tmp_path):
    """In `ubench compare`, a one-member archive's OOD-AUROC(kn) cell is empty, whatever the order of archives;
    the column stays marked comparable for the ensemble."""
    from ubench.scoring.tables import format_compare

    single = score_archive(build_archive(tmp_path / "sgd.h5", m=1)[0], protocol=NO_TS)
    ensemble = score_archive(build_archive(tmp_path / "de.h5", m=4)[0], protocol=NO_TS)
    for reports in ([single, ensemble], [ensemble, single]):
        names = ["sgd" if r is single else "de" for r in reports]
        lines = format_compare(reports, names).splitlines()
        header = lines[0].split()
        col = header.index("OOD-AUROC(kn)↑*")
        row = {ln.split()[0]: ln.split() for ln in lines[2:4]}
        assert row["sgd"][col] == "-" and row["de"][col] != "-"


def test_member_by_member_reading_renormalises_too():
    """Both streaming paths (whole blocks, and member rows when a chunk exceeds the block budget) divide rows that
    are off by more than 2**-20 by their sums and leave the others bit-identical."""
    from ubench.metrics.report import SplitAccumulator

    rng = np.random.default_rng(7)
    honest = member_predictions(rng, 9, 5, rng.integers(0, 5, 9), 3, 1.0).astype(np.float64)
    honest /= honest.sum(-1, keepdims=True)
    inflated = honest.copy()
    inflated[1, 4] *= 1 + 9e-5
    inflated[2, 7] *= 1 - 5e-5
    results = []
    for probs in (honest, inflated):
        whole = SplitAccumulator(3, 9, 5, dtype=np.float64)
        whole.add(0, probs)
        rows = SplitAccumulator(3, 9, 5, dtype=np.float64)
        for start in range(0, 9, 4):
            for m in range(3):
                rows.add_member_rows(start, m, probs[m, start:start + 4])
        results.append((whole.result(), rows.result()))
    for a in (*results[0], *results[1]):
        np.testing.assert_allclose(a.mean_probs, honest.mean(axis=0), rtol=1e-14)
    for whole, rows in results:
        assert whole.row_sums == rows.row_sums
    assert results[0][0].row_sums.n_renormalised == 0
    rs = results[1][0].row_sums
    assert rs.n_renormalised == 2 and (rs.member, rs.sample) == (1, 4) and rs.max_deviation == pytest.approx(9e-5)


def test_report_content_is_decided_by_the_builder_alone(archive):
    """score_archive adds only the envelope (archive, labels, protocol, limits, versions) to what
    metrics.report.ReportBuilder returns for the same arrays; the report's shift summary and the metrics' shift
    quartiles have distinct names."""
    import ubench.metrics.report as R
    from ubench.metrics.shift import shift_summary
    from ubench.scoring.blas import one_blas_thread

    path, data = archive
    protocol = Protocol.preset("pitfalls")
    report = score_archive(path, protocol=protocol)
    b = R.ReportBuilder(protocol, n_members=4, n_classes=5, dataset="toy", primary="test")
    # score_archive tells the builder which splits share sample ids (they are resampled together for intervals)
    b.intervals.units = {name: s["sample_ids_sha256"] for name, s in report["archive"]["splits"].items()}
    b.note("labels were taken from the archive itself (no --reference): fine for your own runs, not for untrusted "
           "uploads")
    with one_blas_thread():  # as score_archive multiplies (BLAS products' last bits depend on their threads)
        b.add_in_domain("test", R.split_arrays(data["probs"]["test"]), data["labels"])
        b.add_ood("ood", R.split_arrays(data["probs"]["ood"]))
        for name in ("blur_1", "blur_2", "noise_1"):
            kind, level = name.split("_")
            b.add_shift(name, R.split_arrays(data["probs"][name]), data["labels"], kind=kind,
                        intensity=float(level))
        body = b.finish()
    envelope = {"ubench_version", "report_schema", "archive", "labels", "protocol", "limits"}
    assert set(report) == set(body) | envelope
    assert _dumps({k: report[k] for k in body}) == _dumps(body)
    assert not hasattr(R, "shift_summary") and R.shift_summary_section is not shift_summary
