# SPDX-License-Identifier: MIT
"""Intervals in the reports and commands (issue #26 items 1, 5-7): ``score`` (JSON, terminal, HTML, API),
``compare`` (paired differences, Holm, marks, ``--group-by method``), ``leaderboard`` (rank intervals)."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner
from scipy import special

from scoring_archives import build_archive
from ubench.cli import cli
from ubench.scoring.protocols import Protocol
from ubench.scoring.score import score_archive, score_arrays

FAST = Protocol.preset("pitfalls").replace(bootstrap=200)


def _arrays(seed, n=240, c=4, m=3, scale=2.0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    z = rng.normal(0, 1, (n, c))
    z[np.arange(n), y] += scale
    members = special.softmax(z[None] + rng.normal(0, 0.5, (m, n, c)), axis=2)
    ood = special.softmax(rng.normal(0, 0.5, (m, 100, c)), axis=2)
    return members, y, ood


def test_score_arrays_intervals_bracket_the_values_and_follow_the_settings():
    """Every interval of a mean-type key holds its value; the settings are recorded in ``protocol`` and
    ``intervals``; the same seed gives the same intervals, another seed others; ``intervals=False`` gives none."""
    members, y, ood = _arrays(0)
    r = score_arrays(members, y, ood=ood, protocol=FAST)
    iv = r["intervals"]
    assert (iv["level"], iv["method"], iv["replicates"], iv["seed"]) == (0.95, "percentile", 200, 0)
    assert r["protocol"]["intervals"] and r["protocol"]["bootstrap"] == 200 and r["protocol"]["confidence"] == 0.95
    for key in ("accuracy", "nll", "brier", "cll", "calibrated_brier", "temperature", "ood_auroc_total",
                "misclassification_auroc_total", "aurc_confidence", "mean_total_uncertainty"):
        lo, hi = iv["summary"][key]
        assert lo <= r["summary"][key] <= hi, key
    assert iv["splits"]["test"]["cll"] == iv["summary"]["cll"] and "ood_auroc_total" in iv["splits"]["ood"]
    assert "tace" not in iv["summary"] and "samples" not in r
    assert score_arrays(members, y, ood=ood, protocol=FAST)["intervals"] == iv
    other = score_arrays(members, y, ood=ood, protocol=FAST.replace(seed=1))["intervals"]
    assert other["summary"]["accuracy"] != iv["summary"]["accuracy"]
    assert "intervals" not in score_arrays(members, y, protocol=FAST, intervals=False)
    wider = score_arrays(members, y, protocol=FAST.replace(confidence=0.99))["intervals"]["summary"]["accuracy"]
    assert wider[0] <= iv["summary"]["accuracy"][0] and wider[1] >= iv["summary"]["accuracy"][1]


def test_score_archive_resamples_shift_splits_with_the_in_domain_samples(tmp_path):
    """Shift splits with the same sample ids as the test split are resampled with its counts: a shift split that
    equals the test split gets the same accuracy interval; the summary's shift median has an interval."""
    path, _ = build_archive(tmp_path / "a.h5", n=90)
    r = score_archive(path, protocol=FAST)
    iv = r["intervals"]
    assert set(iv["splits"]) == set(r["in_domain"]) | set(r["ood"]) | set(r["shift"])
    assert set(iv["splits"]["blur_1"]) == {"accuracy", "nll", "brier", "ece", "mean_total_uncertainty"}
    lo, hi = iv["summary"]["shift_accuracy_median"]
    assert lo <= r["summary"]["shift_accuracy_median"] <= hi
    assert score_archive(path, protocol=FAST, intervals=False).get("intervals") is None


def test_cli_score_options_terminal_and_html(tmp_path):
    path, _ = build_archive(tmp_path / "a.h5", n=90, shifts=())
    runner = CliRunner()
    res = runner.invoke(cli, ["score", str(path), "--bootstrap", "150", "--confidence", "0.9", "--seed", "3"])
    assert res.exit_code == 0, res.output
    assert "90 % percentile bootstrap intervals over the test samples (150 replicates, seed 3)" in res.stdout
    line = next(ln for ln in res.stdout.splitlines() if ln.strip().startswith("accuracy"))
    assert "[" in line and "]" in line
    res = runner.invoke(cli, ["score", str(path), "--no-intervals", "--json"])
    report = json.loads(res.stdout)
    assert "intervals" not in report and report["protocol"]["intervals"] is False
    from ubench.scoring.html import render_html

    page = render_html(score_archive(path, protocol=FAST))
    assert "bootstrap intervals over the test samples" in page and "class='hi'>[" in page


def test_compare_identical_archives_differ_by_zero_and_are_not_distinguishable(tmp_path):
    """Two copies of one archive: every paired difference is exactly 0 with interval [0, 0] and p = 1, both rows
    are marked (^ the first, ~ the copy), and no report in the JSON carries its per-sample columns."""
    path, _ = build_archive(tmp_path / "a.h5", n=90)
    copy = tmp_path / "b.h5"
    shutil.copy(path, copy)
    runner = CliRunner()
    res = runner.invoke(cli, ["compare", str(path), str(copy), "--json", "--bootstrap", "100"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["paired"] and all(r["difference"] == 0.0 and r["interval"] == [0.0, 0.0] and r["p"] == 1.0
                                 for r in out["paired"])
    assert {r["metric"] for r in out["paired"]} >= {"accuracy", "cll", "ood_auroc_total", "shift_accuracy_median"}
    assert all("samples" not in r for r in out["reports"])
    assert out["paired_settings"]["adjustment"] == "holm"
    res = runner.invoke(cli, ["compare", str(path), str(copy), "--bootstrap", "100"])
    row_b = next(ln for ln in res.stdout.splitlines() if ln.startswith("deep_ensemble (b.h5)"))
    row_a = next(ln for ln in res.stdout.splitlines() if ln.startswith("deep_ensemble (a.h5)"))
    assert "^" in row_a and "~" in row_b and "~" not in row_a and "not distinguishable from the best" in res.stdout


def test_compare_marks_a_clearly_worse_method_as_distinguishable():
    """A much weaker model on the same samples: its accuracy and CLL differences to the best are significant
    (Holm p < 0.05) and it is not in ``tied``; the better one is ``best``."""
    from ubench.scoring.compare import paired_section

    strong, y, _ = _arrays(1, scale=3.0)
    rng = np.random.default_rng(9)
    weak = special.softmax(rng.normal(0, 1, strong.shape), axis=2)  # no signal at all
    p = dataclasses.replace(FAST, sample_stats=True)
    reports = [score_arrays(strong, y, protocol=p, method="strong"), score_arrays(weak, y, protocol=p, method="weak")]
    out = paired_section(reports, ["strong", "weak"], level=0.95, n_replicates=200, seed=0)
    assert out["best"]["accuracy"] == "strong" and out["tied"]["accuracy"] == ["strong"]
    row = next(r for r in out["paired"] if r["metric"] == "cll")
    assert row["distinguishable"] and row["interval"][0] > 0 and row["p"] < 0.05


def test_group_by_method_gives_mean_sd_and_a_wider_interval_than_one_run():
    from ubench.scoring.compare import grouped_section

    p = dataclasses.replace(FAST, sample_stats=True)
    reports, names = [], []
    for k, (method, scale) in enumerate([("a", 2.0), ("a", 1.2), ("a", 2.6), ("b", 0.3), ("b", 0.4)]):
        members, y, _ = _arrays(0, scale=scale)  # the same labels for every run: seed 0
        reports.append(score_arrays(members, y, protocol=p, method=method))
        names.append(f"{method}{k}")
    out = grouped_section(reports, names, level=0.95, n_replicates=200, seed=0)
    g = {x["method"]: x for x in out["groups"]}
    acc = [r["summary"]["accuracy"] for r in reports[:3]]
    assert g["a"]["n_runs"] == 3 and g["a"]["summary"]["accuracy"]["mean"] == pytest.approx(np.mean(acc))
    assert g["a"]["summary"]["accuracy"]["sd"] == pytest.approx(np.std(acc, ddof=1))
    lo, hi = g["a"]["summary"]["accuracy"]["interval"]
    one = reports[0]["intervals"]["summary"]["accuracy"]
    assert hi - lo > one[1] - one[0]
    assert out["best"]["accuracy"] == "a (3 runs)"
    from ubench.scoring.tables import format_groups

    text = format_groups(out)
    assert "a (3 runs)" in text and "±" in text


def test_board_rows_get_rank_intervals_and_tie_marks():
    """build_board on scored records: the order is by the point CLL (ties by name), ``rank_interval`` is
    [best, worst] of the rank in the replicates (rows with equal values share the best rank), a copy of the leader
    is tied with it and shares its interval [1, 1], a far worse row is [3, 3]; the page and CSV show them."""
    from ubench.scoring.leaderboard import BoardConfig, build_board
    from ubench.scoring.leaderboard_html import render_html
    from ubench.scoring.tables import leaderboard_csv

    p = dataclasses.replace(FAST, sample_stats=True)
    records = []
    for name, seed, scale in (("good.h5", 2, 3.0), ("copy.h5", 2, 3.0), ("bad.h5", 2, 0.2)):
        members, y, ood = _arrays(seed, scale=scale)
        report = score_arrays(members, y, ood=ood, protocol=p)
        records.append({"archive": name, "sha256": name, "outcome": {"status": "ok", "report": report}})
    config = BoardConfig.create(protocol=p)
    board = build_board(records, config)
    rows = {r["archive"]: r for r in board["rows"]}
    assert [r["archive"] for r in board["rows"]] == ["copy.h5", "good.h5", "bad.h5"]
    assert [r["rank"] for r in board["rows"]] == [1, 2, 3]
    assert rows["copy.h5"]["rank_interval"] == rows["good.h5"]["rank_interval"] == [1, 1]
    assert rows["good.h5"]["tied_with_leader"] and not rows["copy.h5"]["tied_with_leader"]
    assert rows["bad.h5"]["rank_interval"] == [3, 3] and not rows["bad.h5"]["tied_with_leader"]
    assert board["rank_intervals"]["metric"] == "cll" and board["rank_intervals"]["rows"] == 3
    assert "rank interval" in render_html(board) and "[3, 3]" in render_html(board)
    assert "[3, 3]" in leaderboard_csv(board)
    assert config.protocol["sample_stats"] is True


def test_dee_interval_maps_the_cll_interval_through_the_reference_band():
    """DEE's interval: the CLL interval's ends mapped through the deep-ensemble curve's optimistic (mean + std)
    and pessimistic (mean - std) curves, so it contains DEE and its paper bounds; a reference with no spread
    over orders maps the CLL interval through the mean curve alone (checked against dee_score by hand)."""
    from ubench.metrics.dee import dee_score
    from ubench.scoring.compare import dee_interval
    from ubench.scoring.dee import dee_of_report

    members, y, _ = _arrays(4, m=6, scale=1.5)
    ens = score_arrays(members, y, protocol=FAST.replace(member_curves=True, placement="post"))
    method = score_arrays(members[:2], y, protocol=FAST.replace(dee_point=True))
    dee = dee_of_report(method, ens)
    lo, hi = dee_interval(method, ens)
    assert lo <= dee["lower"] <= dee["dee"] <= dee["upper"] <= hi
    mc = ens["in_domain"]["test"]["member_curves"]["metrics"]["cll"]
    cll_lo, cll_hi = method["intervals"]["summary"]["cll"]
    # DEE reads dee_cll, not cll: move it so that the interval's low end falls between the curve's first two
    # points, and the interval follows, through the band's two curves
    shift = (mc["mean"][0] + mc["mean"][1]) / 2 - cll_lo
    method["in_domain"]["test"]["calibrated"]["dee_cll"] = method["summary"]["cll"] + shift
    want = [dee_score(cll_lo + shift, mc["mean"], mc["std"]).lower,
            dee_score(cll_hi + shift, mc["mean"], mc["std"]).upper]
    assert want[0] < dee_score(cll_lo + shift, mc["mean"], mc["std"]).dee  # the band is not empty there
    assert dee_interval(method, ens) == want


def test_sample_stats_export_names_its_encoding_seed_and_splits():
    """sample_stats on: ``samples`` holds the encoding, the protocol's seed, the primary split, the detection scores
    and per split its role, resampling unit, size and encoded columns (what compare and the board resample);
    off: no ``samples`` key."""
    from ubench.metrics.intervals import SAMPLE_ENCODING

    members, y, _ = _arrays(1)
    p = dataclasses.replace(FAST, sample_stats=True, seed=7)
    samples = score_arrays(members, y, protocol=p, method="x")["samples"]
    assert set(samples) == {"encoding", "seed", "primary", "scores", "splits"}
    assert (samples["encoding"], samples["seed"], samples["primary"]) == (SAMPLE_ENCODING, 7, "test")
    assert samples["scores"] == ["total", "knowledge", "confidence"]
    assert {k: (v["role"], v["unit"], v["n"]) for k, v in samples["splits"].items()} == {
        "test": ("in_domain", "split:test", 240)}
    assert "samples" not in score_arrays(members, y, protocol=FAST, method="x")


@pytest.mark.parametrize("how", ["matrix", "preset"])
def test_decision_cost_gets_an_interval_under_a_given_matrix_or_a_preset(how):
    """A cost matrix given as such or by a preset's name: the decision cost (its mean and its sum, the sum being
    the mean times N) gets a bootstrap interval around its value; without any cost, no such interval."""
    from ubench.metrics.decision import cost_matrix_preset

    members, y, _ = _arrays(2, c=10, n=300)
    if how == "matrix":
        cost = np.ones((10, 10)) - np.eye(10)
        cost[0, 1] = 5.0
        p = dataclasses.replace(FAST, cost_preset=None, cost_matrix=cost.tolist())
    else:
        p = dataclasses.replace(FAST, cost_preset="cifar10", cost_matrix=None)
        cost = cost_matrix_preset("cifar10")
    report = score_arrays(members, y, protocol=p, method="x")
    test = report["in_domain"]["test"]
    mean = members.mean(0)
    decided = (cost[None, :, :] * mean[:, :, None]).sum(axis=1).argmin(axis=1)  # Bayes decision: min expected cost
    assert test["decision_cost_mean"] == pytest.approx(cost[y, decided].mean(), rel=1e-12)
    summary = report["intervals"]["summary"]
    for key in ("decision_cost_mean", "decision_cost_sum"):
        lo, hi = summary[key]
        assert lo <= test[key] <= hi and lo < hi, key
    assert summary["decision_cost_sum"] == pytest.approx([v * 300 for v in summary["decision_cost_mean"]])
    none = dataclasses.replace(FAST, cost_preset=None, cost_matrix=None)
    assert not any("cost" in k for k in score_arrays(members, y, protocol=none, method="x")["intervals"]["summary"])


def test_intervals_follow_the_protocols_smoothing_tpr_and_cost_reduction():
    """Smoothing 0.2, FPR at 80 % TPR and summed decision costs: each interval brackets the value the report
    computed under those settings, which lies outside the interval of the default settings' value (smoothing
    moves the NLL, the TPR the FPR); the decision cost's interval is that of the sum."""
    members, y, _ = _arrays(2, c=10, n=300)
    p = dataclasses.replace(FAST, smoothing=0.2, tpr=0.8, cost_preset="cifar10", cost_reduction="sum")
    report = score_arrays(members, y, protocol=p, method="x")
    plain = score_arrays(members, y, protocol=dataclasses.replace(FAST, cost_preset="cifar10"), method="x")
    test, summary = report["in_domain"]["test"], report["intervals"]["summary"]
    for key in ("nll", "misclassification_fpr95_confidence"):
        lo, hi = summary[key]
        assert lo <= test[key] <= hi and not lo <= plain["in_domain"]["test"][key] <= hi, key
    assert test["decision_cost"] == test["decision_cost_sum"]
    assert summary["decision_cost"] == summary["decision_cost_sum"] != summary["decision_cost_mean"]
