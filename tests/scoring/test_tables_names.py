# SPDX-License-Identifier: MIT
"""The terminal tables name metrics as the HTML pages do, say which direction is better, and show CLL once
(issue #28 item 7)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from strategies import softmax64

from ubench.scoring.html import HEADLINE
from ubench.scoring.leaderboard_html import _LABELS
from ubench.scoring.score import score_arrays
from ubench.scoring.tables import (DISPLAY_NAMES, HIGHER_IS_BETTER, LOWER_IS_BETTER, _LEADERBOARD_NAMES,
                                   format_compare, format_leaderboard, format_score)


def _report(good: bool, seed: int = 0) -> dict:
    """A 3-member ensemble on 400 samples of 5 classes and 200 OOD samples, the float64 softmax of logits of
    scale 2 plus 6 on one class: in-domain the label (``good``) or the next class; OOD a class of its own for
    every member (``good``: the members disagree there) or the same class for all."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 5, 400)
    z = rng.normal(size=(3, 400, 5)) * 2.0
    z[:, np.arange(400), y if good else (y + 1) % 5] += 6.0
    zo = rng.normal(size=(3, 200, 5)) * 2.0
    for m in range(3):  # a class per member and sample (members disagree), or one per sample (they agree)
        zo[m, np.arange(200), rng.integers(0, 5, 200) if good or m == 0 else classes] += 6.0
        classes = zo[0].argmax(axis=1)
    return score_arrays(softmax64(z), y, ood=softmax64(zo), protocol="pitfalls")


def test_arrows_point_to_the_better_value():
    """Oracle: a model confident in the label whose members disagree on OOD data, against one confident in a
    wrong class whose members agree on OOD data: every key marked ↑ is larger for the first and every key marked
    ↓ smaller."""
    good, bad = _report(True)["summary"], _report(False)["summary"]
    checked = 0
    for key in sorted(HIGHER_IS_BETTER | LOWER_IS_BETTER):
        if good.get(key) is None or bad.get(key) is None:
            continue
        if key in HIGHER_IS_BETTER:
            assert good[key] > bad[key], key
        else:
            assert good[key] < bad[key], key
        checked += 1
    assert checked >= 15
    assert not HIGHER_IS_BETTER & LOWER_IS_BETTER


def test_score_table_shows_display_names_with_arrows_and_cll_once():
    text = format_score(_report(True))
    rows = text.split("in-domain split test")[1].split("\n\n")[0].splitlines()[3:]
    names = [re.split(r"\s{2,}", r.strip())[0] for r in rows]  # a value cell may read "0.12 [0.11, 0.13]"
    assert "CLL (calibrated log-likelihood) ↑" in names and "NLL ↓" in names and "accuracy ↑" in names
    assert "temperature T" in names  # no better direction, no arrow
    assert not any("_" in n for n in names), names  # no raw report key
    assert not any("calibrated NLL" in n or "calibrated_nll" in n for n in names)  # = -CLL: shown once, as CLL
    assert "↑ higher is better, ↓ lower is better" in text
    assert "AUROC tot ↑" in text and "FPR95 tot ↓" in text


def test_names_are_the_html_pages_names():
    """The score page's headline labels and the leaderboard page's column labels are the tables' names."""
    for key, label in HEADLINE:
        assert DISPLAY_NAMES[key] == label
    for key, label in _LEADERBOARD_NAMES.items():
        assert _LABELS[key] == label
    board = {"columns": [{"key": k} for k in ("cll", "dee", "accuracy", "ood_auroc_total")],
             "rows": [{"rank": 1, "archive": "a.h5", "status": "ok",
                       "metrics": {"cll": -0.1, "dee": 2.0, "accuracy": 0.9, "ood_auroc_total": 0.8}}]}
    header = re.split(r"\s{2,}", format_leaderboard(board).splitlines()[0].strip())
    assert header[header.index("status") + 1:] == ["CLL ↑", "DEE ↑", "accuracy ↑", "OOD AUROC ↑"]


@pytest.mark.parametrize("key, arrow", [("cll", "↑"), ("nll", "↓"), ("temperature", "")])
def test_compare_headers_carry_the_direction(key, arrow):
    header = format_compare([_report(True)], ["de"]).splitlines()[0]
    column = {"cll": "CLL", "nll": "NLL", "temperature": "T"}[key]
    assert f" {column}{arrow}{'*' if key == 'cll' else ''} " in header + " "
