# SPDX-License-Identifier: MIT
"""The calibrated protocol, member curves and DEE in reports: the numbers equal the metrics functions'."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from ubench.archive_schema import InvalidArchiveError, ReadLimits
from ubench.archive_schema.safe_h5py import h5py
from ubench.cli import cli
from ubench.metrics import ensemble_mean_probs
from ubench.metrics.dee import dee_curve, dee_score
from ubench.metrics.protocol import cross_validated_calibration, member_curves
from ubench.scoring.dee import DeeUnavailableError, dee_between, dee_of_report
from ubench.scoring.protocols import Protocol
from ubench.scoring.score import score_archive

from scoring_archives import build_archive

PITFALLS = Protocol.preset("pitfalls")


def test_calibrated_section_equals_cross_validated_calibration(archive):
    """post placement: the report's CLL and temperatures are those of test-time CV on the ensemble mean."""
    path, data = archive
    cal = score_archive(path)["in_domain"]["test"]["calibrated"]
    cv = cross_validated_calibration(ensemble_mean_probs(data["probs"]["test"])[None], data["labels"], seed=0)
    assert cal["cll"] == cv.cll and cal["temperatures"] == list(cv.temperatures)
    assert cal["calibrated_nll"] == cv.nll_after == -cal["cll"]
    assert cal["calibrated_ece"] == cv.ece_after and cal["placement"] == "post" and cal["folds"] == 2


def test_per_member_placement_uses_the_members(archive):
    path, data = archive
    report = score_archive(path, protocol=PITFALLS.replace(placement="per_member"))
    cv = cross_validated_calibration(data["probs"]["test"], data["labels"], placement="per_member", seed=0)
    assert report["in_domain"]["test"]["calibrated"]["cll"] == cv.cll
    assert report["summary"]["cll"] == cv.cll


def test_member_curves_equal_the_protocol_function(archive):
    """With member curves on, the report's curve is member_curves() of the stack; order 0's k = M point uses the
    report's halvings (seed 0), so it equals the report's CLL."""
    path, data = archive
    report = score_archive(path, protocol=PITFALLS.replace(member_curves=True, orders=3))
    mc = report["in_domain"]["test"]["member_curves"]
    ref = member_curves(data["probs"]["test"], data["labels"], n_orders=3, seed=0)
    assert mc["n_members"] == [1, 2, 3, 4]
    assert mc["metrics"]["cll"]["mean"] == ref.cll_mean.tolist()
    assert mc["metrics"]["accuracy"]["std"] == ref.accuracy_std.tolist()
    assert mc["metrics"]["cll"]["std"] == ref.cll_std.tolist()
    assert ref.cll[0, -1] == pytest.approx(report["summary"]["cll"], abs=1e-12)
    assert "member_curves" not in score_archive(path)["in_domain"]["test"]  # off by default


def test_member_curves_skipped_with_a_note_beyond_the_member_budget(archive):
    path, _ = archive
    report = score_archive(path, protocol=PITFALLS.replace(member_curves=True), limits=ReadLimits(block_bytes=512))
    assert "member_curves" not in report["in_domain"]["test"]
    assert any("member budget" in n for n in report["notes"])


def test_dee_of_an_ensemble_against_itself_is_its_size(tmp_path):
    """Every order of all K members gives the same ensemble, so the full ensemble's DEE is exactly K."""
    path, _ = build_archive(tmp_path / "de.h5", m=5)
    ens = score_archive(path, protocol=PITFALLS.replace(member_curves=True))
    result = dee_between(ens, ens)
    assert [p["n_members"] for p in result["curve"]] == [1, 2, 3, 4, 5]
    assert result["dee"] == pytest.approx(5.0)
    mean = ens["in_domain"]["test"]["member_curves"]["metrics"]["cll"]["mean"]
    std = ens["in_domain"]["test"]["member_curves"]["metrics"]["cll"]["std"]
    assert [p["dee"] for p in result["curve"]] == dee_curve(mean, mean, std).dee.tolist()
    single = score_archive(build_archive(tmp_path / "one.h5", m=1, seed=3)[0])
    s = dee_score(single["summary"]["cll"], mean, std)
    assert s.below_reference  # this single model is worse than one member of the ensemble
    assert dee_of_report(single, ens)["dee"] is None and dee_of_report(single, ens)["below_reference"]


def test_a_dee_below_one_member_is_reported_as_below_one_never_as_one(tmp_path):
    """A method whose CLL is under one deep-ensemble member's (a single model worse than the ensemble's average
    member): ``summary.dee`` is null with ``dee_below_one`` and a note, the ``dee`` curve's points are null with
    ``below_reference``, and every view prints "< 1"; before, it read 1 with bounds [1, 1] (issue #28 item 5).
    A method above one member keeps its number and ``dee_below_one`` false."""
    from ubench.scoring.dee import attach_dee
    from ubench.scoring.html import render_html
    from ubench.scoring.tables import format_compare, format_dee, format_score

    path, _ = build_archive(tmp_path / "de.h5", m=5)
    ens = score_archive(path, protocol=PITFALLS.replace(member_curves=True))
    one = build_archive(tmp_path / "one.h5", m=1, seed=3)[0]
    ens_cll1 = ens["in_domain"]["test"]["member_curves"]["metrics"]["cll"]["mean"][0]
    for curve in (False, True):
        rep = score_archive(one)
        assert rep["summary"]["cll"] < ens_cll1
        attach_dee(rep, ens, curve=curve)
        assert rep["summary"]["dee"] is None and rep["summary"]["dee_below_one"] is True
        assert any(n.startswith("DEE below 1") for n in rep["notes"])
        assert "dee" in rep["comparability"]["undefined"]
        row = format_compare([rep], ["sgd"]).splitlines()[2]
        assert "< 1" in row
        if curve:
            point = rep["dee"]["curve"][-1]
            assert point["dee"] is None and point["below_reference"] and point["dee_lower"] is None
            assert "< 1 (bounds" in format_score(rep) and "below one deep-ensemble member" in format_score(rep)
            assert "< 1" in format_dee(rep["dee"]).splitlines()[4]
            assert "<div class='hv'>&lt; 1</div>" in render_html(rep)
    better = score_archive(path, protocol=PITFALLS.replace(dee_point=True))
    attach_dee(better, ens, curve=False)
    assert better["summary"]["dee"] == pytest.approx(5.0) and better["summary"]["dee_below_one"] is False


def test_dee_point_is_the_member_curves_full_ensemble_point(tmp_path):
    """``dee_point`` computes the curves' k = M point alone: the CV CLL over orders x repeats halvings of the
    curves' stream, which equals the mean over orders of each order's full-ensemble CLL (oracle: order r's point is
    cross_validated_calibration on halvings r*repeats.. of the stream, recomputed here from cv_splits)."""
    from ubench.metrics.protocol import cv_splits

    path, data = build_archive(tmp_path / "de.h5", m=4, seed=4)
    rep = score_archive(path, protocol=PITFALLS.replace(dee_point=True, orders=3))
    point = rep["in_domain"]["test"]["calibrated"]["dee_cll"]
    mean = ensemble_mean_probs(data["probs"]["test"])
    n = len(data["labels"])
    splits = cv_splits(n, n_repeats=15, seed=0)  # 3 orders x 5 repeats, two folds each
    fold_cll = []
    for fit, held in splits:
        from scipy.optimize import minimize_scalar
        from scipy.special import log_softmax

        logp = np.log(mean + 1e-12)
        nll = lambda t, rows: -log_softmax(logp[rows] / t, axis=1)[np.arange(len(rows)), data["labels"][rows]].mean()
        t = minimize_scalar(lambda t: nll(t, fit), bounds=(0.01, 100), method="bounded",
                            options={"xatol": 1e-10}).x
        fold_cll.append(-nll(t, held))
    assert point == pytest.approx(np.mean(fold_cll), abs=1e-7)
    ens = score_archive(path, protocol=PITFALLS.replace(member_curves=True, orders=3))
    assert point == pytest.approx(ens["in_domain"]["test"]["member_curves"]["metrics"]["cll"]["mean"][-1],
                                  abs=1e-12)
    assert "dee_cll" not in score_archive(path)["in_domain"]["test"]["calibrated"]  # off by default


def test_a_deep_ensemble_read_off_its_own_curve_has_dee_k_exactly(tmp_path):
    """The reference curve's k = K point averages the CV halvings of 5 orders; the single-seed CLL does not, and
    here (seed 4) it lies below that point, so reading DEE at it gave 3.91 for a 4-member ensemble."""
    path, _ = build_archive(tmp_path / "de.h5", m=4, seed=4)
    ens = score_archive(path, protocol=PITFALLS.replace(member_curves=True))
    rep = score_archive(path, protocol=PITFALLS.replace(dee_point=True))
    d = dee_of_report(rep, ens)
    assert d["dee"] == 4.0 and d["cll_source"] == "dee_point"
    assert dee_of_report(ens, ens)["cll_source"] == "member_curves"
    plain = dee_of_report(score_archive(path), ens)
    assert plain["cll_source"] == "cll" and plain["dee"] < 4.0  # the single-seed point, said so


def test_compare_leaderboard_and_dee_give_one_dee(tmp_path):
    de, _ = build_archive(tmp_path / "de.h5", m=4, seed=4)
    other, _ = build_archive(tmp_path / "mc.h5", m=3, seed=1)
    res = CliRunner().invoke(cli, ["compare", str(other), str(de), "--ensemble", str(de), "--json"])
    assert res.exit_code == 0, res.output
    reports = json.loads(res.stdout)["reports"]
    assert reports[1]["summary"]["dee"] == 4.0
    res = CliRunner().invoke(cli, ["dee", str(other), "--ensemble", str(de), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["dee"] == pytest.approx(reports[0]["summary"]["dee"], rel=1e-12)
    uploads = tmp_path / "uploads"
    uploads.mkdir()
    for p in (de, other):
        (uploads / p.name).write_bytes(p.read_bytes())
    res = CliRunner().invoke(cli, ["leaderboard", str(uploads), "--reference", _reference(tmp_path, de),
                                   "--out", str(tmp_path / "board"), "--ensemble", str(de), "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["archive"]: r for r in json.loads(res.stdout)["rows"]}
    assert rows["de.h5"]["metrics"]["dee"] == 4.0


def _reference(tmp_path, archive) -> str:
    out = tmp_path / "ref.h5"
    res = CliRunner().invoke(cli, ["reference", str(archive), "--out", str(out)])
    assert res.exit_code == 0, res.output
    return str(out)


def test_dee_refuses_different_tasks_and_missing_curves(tmp_path):
    a = score_archive(build_archive(tmp_path / "a.h5", n=120)[0], protocol=PITFALLS.replace(member_curves=True))
    b = score_archive(build_archive(tmp_path / "b.h5", n=100)[0], protocol=PITFALLS.replace(member_curves=True))
    with pytest.raises(DeeUnavailableError, match="100 in-domain samples"):
        dee_between(b, a)
    with pytest.raises(DeeUnavailableError, match="no member curves"):
        dee_between(a, score_archive(tmp_path / "a.h5"))


def test_dee_and_compare_commands(tmp_path):
    de, _ = build_archive(tmp_path / "de.h5", m=4)
    other, _ = build_archive(tmp_path / "mc.h5", m=3, seed=1)
    res = CliRunner().invoke(cli, ["dee", str(other), "--ensemble", str(de), "--json", "--orders", "2",
                                   "--plot", str(tmp_path / "dee.svg")])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert [p["n_members"] for p in out["curve"]] == [1, 2, 3]
    for p in out["curve"]:  # a value below one member is null, its flag set; every number is in [1, K]
        assert (p["dee"] is None) == p["below_reference"]
        values = [v for v in (p["dee_lower"], p["dee"], p["dee_upper"]) if v is not None]
        assert values == sorted(values) and all(1.0 <= v <= 4.0 for v in values)
    assert out["curve"][-1]["dee"] is not None
    assert (tmp_path / "dee.svg").read_text().lstrip().startswith("<")
    res = CliRunner().invoke(cli, ["compare", str(other), str(de), "--ensemble", str(de), "--json"])
    assert res.exit_code == 0, res.output
    reports = json.loads(res.stdout)["reports"]
    assert reports[1]["summary"]["dee"] == pytest.approx(4.0)
    assert 1.0 <= reports[0]["summary"]["dee"] <= 4.0
    assert CliRunner().invoke(cli, ["dee", str(other), "--ensemble", str(de), "--protocol", "shift"]).exit_code == 2


def test_corrupt_compressed_chunk_is_a_finding_not_an_oserror(tmp_path):
    path, _ = build_archive(tmp_path / "z.h5", compression="deflate")
    with h5py.File(path, "r") as f:
        info = f["splits/test/probs"].id.get_chunk_info(0)
    body = bytearray(path.read_bytes())
    body[info.byte_offset + info.size // 2] ^= 0xFF
    bad = tmp_path / "bad.h5"
    bad.write_bytes(bytes(body))
    for limits in (ReadLimits(), ReadLimits(block_bytes=512)):  # whole blocks, and member by member
        with pytest.raises(InvalidArchiveError) as err:
            score_archive(bad, limits=limits)
        assert [(f.path, f.check) for f in err.value.findings if f.severity == "error"] == [
            ("/splits/test/probs", "hdf5-read")]


def test_score_with_ensemble_adds_the_dee_curve_to_json_and_html(tmp_path):
    de, _ = build_archive(tmp_path / "de.h5", m=4)
    other, _ = build_archive(tmp_path / "mc.h5", m=3, seed=1)
    html = tmp_path / "r.html"
    res = CliRunner().invoke(cli, ["score", str(other), "--ensemble", str(de), "--json", "--html", str(html)])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert [p["n_members"] for p in report["dee"]["curve"]] == [1, 2, 3]
    assert report["summary"]["dee"] == report["dee"]["curve"][-1]["dee"]
    assert "Deep Ensemble Equivalent" in html.read_text() and "Metrics against members" in html.read_text()
