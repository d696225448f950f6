# SPDX-License-Identifier: MIT
"""Shift summaries: per-split rows and quartiles over kinds per intensity."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ubench.metrics.shift import shift_summary


def _splits():
    out = []
    for s in (1, 2):
        for kind, base in (("blur", 0.1), ("noise", 0.4), ("fog", 0.2), ("snow", 0.3)):
            out.append({"kind": kind, "intensity": s, "ece": base * s, "accuracy": 1 - base * s})
    return out


def test_worked_example():
    summary = shift_summary(_splits())
    q = summary.quartiles[1]["ece"]
    # values 0.1, 0.2, 0.3, 0.4: linear quantiles
    assert (q["min"], q["q25"], q["median"], q["q75"], q["max"]) == pytest.approx((0.1, 0.175, 0.25, 0.325, 0.4))
    assert q["mean"] == pytest.approx(0.25) and q["n_kinds"] == 4
    assert summary.quartiles[2]["accuracy"]["max"] == pytest.approx(0.8)
    assert summary.intensities == (1, 2) and summary.kinds == ("blur", "fog", "noise", "snow")
    assert summary.metrics == ("ece", "accuracy")
    assert [(r["intensity"], r["kind"]) for r in summary.rows][:2] == [(1, "blur"), (1, "fog")]
    d = summary.to_dict()
    assert d["quartiles"][0]["intensity"] == 1 and d["quantile_method"] == "linear"


def test_none_values_are_skipped_and_counted():
    splits = _splits()
    splits[0]["ece"] = None
    q = shift_summary(splits).quartiles[1]["ece"]
    assert q["n_kinds"] == 3 and q["min"] == pytest.approx(0.2)
    only_none = [{"kind": "a", "intensity": 1, "auroc": None}]
    assert shift_summary(only_none).quartiles[1]["auroc"] == {
        "min": None, "q25": None, "median": None, "q75": None, "max": None, "mean": None, "n_kinds": 0}


@given(st.lists(st.floats(0, 1), min_size=1, max_size=12), st.randoms(use_true_random=False))
def test_properties(values, rnd):
    """For any values over kinds: min <= q25 <= median <= q75 <= max, and input order does not matter."""
    splits = [{"kind": f"k{i}", "intensity": 3, "brier": v} for i, v in enumerate(values)]
    q = shift_summary(splits).quartiles[3]["brier"]
    assert q["min"] <= q["q25"] <= q["median"] <= q["q75"] <= q["max"]
    assert q["median"] == pytest.approx(float(np.median(values)))
    shuffled = list(splits)
    rnd.shuffle(shuffled)
    assert shift_summary(shuffled) == shift_summary(splits)


@pytest.mark.parametrize(
    ("splits", "exc", "match"),
    [
        ([], ValueError, "split_metrics"),
        ({"kind": "a"}, TypeError, "split_metrics"),
        ([{"intensity": 1, "ece": 0.1}], ValueError, "kind"),
        ([{"kind": "a", "ece": 0.1}], ValueError, "intensity"),
        ([{"kind": "a", "intensity": np.nan, "ece": 0.1}], ValueError, "intensity"),
        ([{"kind": "a", "intensity": 1, "ece": np.inf}], ValueError, "ece"),
        ([{"kind": "a", "intensity": 1, "ece": "x"}], ValueError, "ece"),
        ([{"kind": "a", "intensity": 1, "ece": 0.1}, {"kind": "a", "intensity": 1, "ece": 0.2}], ValueError,
         r"split_metrics\[1\] repeats"),
        ([{"kind": "a", "intensity": 1, "ece": 0.1}, {"kind": "b", "intensity": 1, "nll": 0.2}], ValueError,
         r"split_metrics\[1\]"),
        ([3], TypeError, r"split_metrics\[0\]"),
    ],
)
def test_errors_name_the_split(splits, exc, match):
    with pytest.raises(exc, match=match):
        shift_summary(splits)


def test_to_dict_holds_every_field():
    s = shift_summary(_splits()[:2])
    d = s.to_dict()
    assert set(d) == {"rows", "quartiles", "metrics", "intensities", "kinds", "quantile_method"}
    assert d["rows"] == [{"kind": "blur", "intensity": 1, "ece": 0.1, "accuracy": 0.9},
                         {"kind": "noise", "intensity": 1, "ece": 0.4, "accuracy": 0.6}]
    assert (d["metrics"], d["intensities"], d["kinds"]) == (["ece", "accuracy"], [1], ["blur", "noise"])


@pytest.mark.parametrize(
    ("splits", "message"),
    [
        ([], "split_metrics is empty: it has 0 splits"),
        ({"kind": "a"}, "split_metrics must be a sequence of mappings; found dict"),
        (5, "split_metrics must be a sequence of mappings; found int"),
        ([3], "split_metrics[0] must be a mapping; found int"),
        ([{"kind": "", "intensity": 1}], "split_metrics[0]['kind'] must be a non-empty string; found ''"),
        ([{"kind": 7, "intensity": 1}], "split_metrics[0]['kind'] must be a non-empty string; found 7"),
        ([{"kind": "a", "intensity": True}], "split_metrics[0]['intensity'] must be a finite number; found True"),
        ([{"kind": "a", "intensity": 1, "ece": 0.1}, {"kind": "b", "intensity": 2, "ece": 0.2},
          {"kind": "a", "intensity": 1, "ece": 0.3}],
         "split_metrics[2] repeats (kind, intensity) ('a', 1) of split_metrics[0]"),
    ],
)
def test_errors_say_what_and_where(splits, message):
    with pytest.raises((ValueError, TypeError)) as ei:
        shift_summary(splits)
    assert str(ei.value) == message
