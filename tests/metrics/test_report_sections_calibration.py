# SPDX-License-Identifier: MIT
"""The report's calibration sections (``metrics/report_sections.py``: ``calibrators_section``,
``member_curves_section``, ``dee_cll``) hand the protocol's settings to the library functions they wrap, on the
members smoothed as (1 - s) p + s / C (by hand here), and DEE's CLL is the full ensemble's point of the member
curves (Ashukha et al. 2020, Sec. 3.1: a deep ensemble gets DEE = K), computed without the prefixes."""

from __future__ import annotations

import numpy as np
import pytest

from ubench.metrics.calibrators import cross_validated_calibrators
from ubench.metrics.protocol import member_curves
from ubench.metrics.report_sections import calibrators_section, dee_cll, member_curves_section, split_arrays

S = 0.1


def _data(n=90, m=3, c=4, seed=5):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, c, n)
    z = rng.normal(0, 1.5, (1, n, c)) + rng.normal(0, 0.8, (m, n, c))
    z[:, np.arange(n), y] += 1.5
    p = np.exp(z - z.max(axis=2, keepdims=True))
    return p / p.sum(axis=2, keepdims=True), y


def test_calibrators_section_is_the_calibrators_on_the_smoothed_mean_with_the_protocols_settings():
    members, y = _data()
    smoothed = (1 - S) * members.mean(axis=0) + S / 4
    names = ("histogram", "isotonic")
    got = calibrators_section(split_arrays(members), y, names=names, repeats=2, seed=3, bins=7, eps=1e-9,
                              smoothing=S)
    want = cross_validated_calibrators(smoothed, y, names, n_repeats=2, seed=3, eps=1e-9, n_bins=7)
    assert sorted(got) == sorted(names)
    for name in names:
        w = want[name]
        assert got[name] == {"nll": pytest.approx(w.nll, rel=1e-12), "brier": pytest.approx(w.brier, rel=1e-12),
                             "ece": pytest.approx(w.ece, rel=1e-12), "unconverged_folds": w.unconverged_folds}
    assert calibrators_section(split_arrays(members[:, :1]), y[:1], names=names, repeats=2, seed=3, bins=7,
                               eps=1e-9, smoothing=S) is None


@pytest.mark.parametrize("placement", ["none", "per_member"])
def test_member_curves_section_and_dee_cll_by_the_protocols_settings(placement):
    """The section is ``member_curves`` of the smoothed members (post-hoc placement when the protocol has none),
    as lists, with progress calls up to the total; ``dee_cll`` equals the last point of its CLL mean (``None`` for
    per-member calibration without the members)."""
    members, y = _data()
    smoothed = (1 - S) * members + S / 4
    calls = []
    got = member_curves_section(members, y, placement=placement, orders=2, repeats=2, seed=1, eps=1e-9,
                                smoothing=S, progress=lambda done, total: calls.append((done, total)))
    want = member_curves(smoothed, y, n_orders=2, seed=1, placement="post" if placement == "none" else placement,
                         n_repeats=2, eps=1e-9)
    assert got["n_members"] == [1, 2, 3] and got["placement"] == want.placement
    assert got["orders"] == want.orders.tolist()
    for name in ("cll", "accuracy", "brier"):
        for stat in ("mean", "std"):
            assert got["metrics"][name][stat] == pytest.approx(getattr(want, f"{name}_{stat}").tolist(), rel=1e-12)
    assert calls and calls[-1][0] == calls[-1][1]
    cll = dee_cll(split_arrays(members, smoothing=S, keep_members=True), y,
                  placement="post" if placement == "none" else placement, orders=2, repeats=2, seed=1, eps=1e-9,
                  smoothing=S)
    assert cll == pytest.approx(got["metrics"]["cll"]["mean"][-1], rel=1e-9)
    if placement == "per_member":  # which needs the members: without them, no CLL
        assert dee_cll(split_arrays(members, smoothing=S), y, placement=placement, orders=2, repeats=2, seed=1,
                       eps=1e-9, smoothing=S) is None
