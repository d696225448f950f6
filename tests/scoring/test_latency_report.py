# SPDX-License-Identifier: MIT
"""Latency recorded into archives (SPEC.md 5.2, ``ubench latency --record-into``) shows in ``score``, ``compare``
and ``compare --html`` as URSABench's accuracy-against-latency table and Pareto plot (issue #13 item 3)."""

from __future__ import annotations

import json

import h5py
import pytest
from click.testing import CliRunner

from ubench.archive_schema import read_archive
from ubench.cli import cli
from ubench.edge.record import record_latency
from ubench.scoring.plots import pareto_front

from html_pages import read_page
from scoring_archives import build_archive

EVIL = "<script>alert(1)</script>"


def _result(p50, members, fused=None):
    return {"backend": "onnxruntime", "precision": "fp32", "sampling": "none", "threads": 1, "n_members": members,
            "model_bytes": 2**20 * members, "peak_rss_bytes": 10**8, "call_overhead_us": 7.5,
            "batches": [{"batch_size": 1, "p50_ms": p50, "p95_ms": 2 * p50, "mean_ms": 1.1 * p50,
                         "throughput_per_s": 1000.0 / p50},
                        {"batch_size": 128, "p50_ms": 50 * p50, "p95_ms": 60 * p50, "mean_ms": 55 * p50,
                         "throughput_per_s": 128e3 / (55 * p50)}],
            **({"fused": {"batches": [{"batch_size": 1, "p50_ms": fused}]}} if fused else {})}


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    d = tmp_path_factory.mktemp("latency")
    a, _ = build_archive(d / "a.h5", m=4, seed=0)
    b, _ = build_archive(d / "b.h5", m=2, seed=0)
    evil, _ = build_archive(d / "evil.h5", m=3, seed=0)
    with h5py.File(evil, "r+") as f:
        f.attrs["method"] = EVIL
    record_latency(a, _result(0.4, 4, fused=0.25))
    record_latency(b, _result(0.2, 2))
    record_latency(evil, _result(0.3, 3, fused=0.2))
    return a, b, evil


def test_recorded_archives_validate_and_score_shows_the_latency(archives):
    a, _, _ = archives
    assert read_archive(a).scalability["latency_p50_ms"] == 0.4
    res = CliRunner().invoke(cli, ["score", str(a), "--json", "--placement", "none"])
    lat = json.loads(res.stdout)["archive"]["latency"]
    assert lat["latency_p50_ms"] == 0.4 and lat["latency_fused_p50_ms"] == 0.25 and lat["latency_batch_size"] == 1
    assert lat["latency_throughput_batch_size"] == 128 and lat["latency_members"] == 4
    text = CliRunner().invoke(cli, ["score", str(a), "--placement", "none"]).stdout
    assert "accuracy against latency" in text and "0.25" in text


def test_recording_again_replaces_the_old_numbers(tmp_path):
    a, _ = build_archive(tmp_path / "a.h5", m=2, seed=0)
    record_latency(a, _result(0.4, 2, fused=0.25))
    record_latency(a, _result(0.9, 2))
    s = read_archive(a).scalability
    assert s["latency_p50_ms"] == 0.9 and "latency_fused_p50_ms" not in s


def test_wrongly_typed_latency_attributes_are_left_out(tmp_path):
    a, _ = build_archive(tmp_path / "a.h5", m=2, seed=0)
    with h5py.File(a, "r+") as f:
        g = f.create_group("scalability")
        g.attrs["latency_p50_ms"] = "fast"
        g.attrs["latency_p95_ms"] = 1.0
    res = CliRunner().invoke(cli, ["score", str(a), "--json", "--placement", "none"])
    assert res.exit_code == 0 and "latency" not in json.loads(res.stdout)["archive"]


def test_pareto_front_by_hand():
    # (latency, accuracy): 1 dominates 3 (faster and as accurate); 0, 1, 2 trade one for the other
    pts = [(1.0, 0.80), (0.5, 0.70), (2.0, 0.90), (0.6, 0.70), (3.0, 0.85)]
    assert pareto_front(pts) == [1, 0, 2]


def test_compare_table_and_pareto_plot_with_hostile_names(archives, tmp_path):
    a, b, evil = archives
    page_path = tmp_path / "cmp.html"
    res = CliRunner().invoke(cli, ["compare", str(a), str(b), str(evil), "--html", str(page_path), "--json"])
    assert res.exit_code == 0, res.output
    names = json.loads(res.stdout)["methods"]
    text = page_path.read_text(encoding="utf-8")
    assert "<script" not in text
    page = read_page(text)
    (fig,) = [f for f in page.figures if f.caption == "Accuracy against latency, Pareto front (URSABench)"]
    for name in names:
        assert fig.has(name), name
    assert fig.has("Pareto front (sequential)")
    table = next(t for t in page.tables if [h for _, h in t[0]][:3] == ["method", "acc", "NLL"])
    rows = {r[0][1]: [c for _, c in r] for r in table[1:]}
    assert set(rows) == set(names) and rows[names[0]][5] == "0.4000" and rows[names[0]][7] == "0.2500"
    plain = CliRunner().invoke(cli, ["compare", str(a), str(b), str(evil)]).stdout
    assert "accuracy against latency" in plain and "fused p50 ms" in plain


def test_compare_csv_carries_the_latency_columns(archives):
    import csv
    import io

    a, b, _ = archives
    out = CliRunner().invoke(cli, ["compare", str(a), str(b), "--csv"]).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [float(r["latency_p50_ms"]) for r in rows] == [0.4, 0.2]
    assert rows[0]["latency_fused_p50_ms"] == "0.25" and rows[1]["latency_fused_p50_ms"] == ""
    assert rows[0]["latency_backend"] == "onnxruntime"


def test_score_html_shows_the_latency_table_escaped(archives, tmp_path):
    _, b, evil = archives
    for path, members, fused in ((evil, "3", "0.2000"), (b, "2", "-")):
        page_path = tmp_path / f"{path.stem}.html"
        res = CliRunner().invoke(cli, ["score", str(path), "--html", str(page_path), "--placement", "none"])
        assert res.exit_code == 0, res.output
        text = page_path.read_text(encoding="utf-8")
        assert "<script" not in text
        table = next(t for t in read_page(text).tables if [h for _, h in t[0]][:3] == ["method", "acc", "NLL"])
        (row,) = [[c for _, c in r] for r in table[1:]]
        assert row[3] == members and row[7] == fused
    plain = build_archive(tmp_path / "plain.h5", m=2, seed=3)[0]
    page_path = tmp_path / "plain.html"
    assert CliRunner().invoke(cli, ["score", str(plain), "--html", str(page_path)]).exit_code == 0
    assert "Accuracy against latency" not in page_path.read_text(encoding="utf-8")
