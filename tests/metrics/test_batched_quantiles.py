# SPDX-License-Identifier: MIT
"""The batched quantiles of a report (issue #29 item 5: one ``np.quantile`` over stacked columns instead of one
per interval or per shift metric) give the numbers of the 1-D ``np.quantile`` column by column, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from ubench.metrics.bootstrap import percentile_intervals
from ubench.metrics.shift import QUANTILES, shift_summary


@pytest.mark.parametrize("level", [0.95, 0.9, 0.5])
def test_percentile_intervals_are_the_one_column_quantiles(level):
    rng = np.random.default_rng(3)
    cols = {f"k{i}": rng.normal(size=501) * 10.0 ** rng.uniform(-6, 6) for i in range(12)}
    cols["ties"] = np.round(rng.normal(size=501), 1)
    cols["nan"] = np.r_[rng.normal(size=500), np.nan]  # an undefined replicate: no interval
    cols["inf"] = np.r_[np.inf, rng.normal(size=500)]
    cols["last"] = rng.uniform(size=501)  # after the undefined ones: rows and keys stay aligned
    got = percentile_intervals(cols, level)
    assert list(got) == list(cols)
    for k, v in cols.items():
        if np.all(np.isfinite(v)):
            want = np.quantile(v, [(1 - level) / 2, (1 + level) / 2])
            assert got[k] == [float(want[0]), float(want[1])], k  # exact, not approx
        else:
            assert got[k] is None, k


def test_percentile_intervals_edges():
    assert percentile_intervals({}, 0.95) == {}
    assert percentile_intervals({"a": np.empty(0), "b": np.empty(0)}, 0.95) == {"a": None, "b": None}
    assert percentile_intervals({"a": np.array([np.nan, 1.0])}, 0.95) == {"a": None}
    assert percentile_intervals({"a": np.array([2.0])}, 0.95) == {"a": [2.0, 2.0]}


def test_shift_quartiles_are_the_one_metric_quantiles():
    rng = np.random.default_rng(5)
    kinds = [f"kind{i}" for i in range(7)]
    rows = []
    for s in (1, 2, 3):
        for j, kind in enumerate(kinds):
            row = {"kind": kind, "intensity": s, "a": float(rng.normal()), "b": float(rng.uniform()),
                   # undefined on some kinds: metrics with different counts are stacked apart
                   "c": None if j % 3 == 0 else float(rng.normal() * 1e3),
                   "d": None if j < 6 else float(rng.normal()),
                   "e": None}
            rows.append(row)
    out = shift_summary(rows)
    for s in (1, 2, 3):
        for m in ("a", "b", "c", "d", "e"):
            vals = [r[m] for r in sorted(rows, key=lambda r: r["kind"]) if r["intensity"] == s and r[m] is not None]
            got = out.quartiles[s][m]
            assert list(got) == ["min", "q25", "median", "q75", "max", "mean", "n_kinds"]
            assert got["n_kinds"] == len(vals)
            if not vals:
                assert all(got[k] is None for k in ("min", "median", "max", "mean")), m
                continue
            q = np.quantile(np.asarray(vals), QUANTILES, method="linear")
            assert [got[k] for k in ("min", "q25", "median", "q75", "max")] == [float(x) for x in q], m
            assert got["mean"] == float(np.mean(vals)), m
            assert all(type(got[k]) is float for k in ("min", "q25", "median", "q75", "max", "mean"))
