# SPDX-License-Identifier: MIT
"""Protocol presets reproduce each paper's conventions; flags override them and are recorded."""

import numpy as np
import pytest

from ubench.scoring.protocols import PRESETS, Protocol, load_cost_matrix


def test_presets():
    p = Protocol.preset("pitfalls")
    assert (p.placement, p.folds, p.repeats, p.seed, p.bins, p.smoothing) == ("post", 2, 5, 0, 15, 0.0)
    u = Protocol.preset("ursabench")
    assert (u.placement, u.smoothing, u.cost_reduction) == ("none", 1e-4, "sum") and not u.temperature_scaling
    s = Protocol.preset("shift")
    assert (s.placement, s.bins, s.smoothing) == ("none", 15, 0.0)
    assert sorted(PRESETS) == ["pitfalls", "shift", "ursabench"]
    with pytest.raises(ValueError, match="unknown protocol"):
        Protocol.preset("nope")


def test_replace_records_overrides_and_ignores_none():
    p = Protocol.preset("pitfalls").replace(bins=20, seed=None, placement="per_member")
    assert p.bins == 20 and p.seed == 0 and p.overrides == ("bins", "placement")
    assert p.replace(bins=20).overrides == ("bins", "placement")
    d = p.to_dict()
    assert d["overrides"] == ["bins", "placement"] and "per_member" in d["description"]
    with pytest.raises(ValueError, match="placement"):
        p.replace(placement="pre")
    assert Protocol(**{k: v for k, v in d.items() if k in Protocol.__dataclass_fields__ and k != "overrides"},
                    overrides=tuple(d["overrides"])) == p


def test_load_cost_matrix(tmp_path):
    np.save(tmp_path / "c.npy", np.eye(3))
    (tmp_path / "c.csv").write_text("0,1\n5,0\n")
    assert load_cost_matrix(str(tmp_path / "c.npy"))[0] == (1.0, 0.0, 0.0)
    assert load_cost_matrix(str(tmp_path / "c.csv")) == ((0.0, 1.0), (5.0, 0.0))
    (tmp_path / "bad.csv").write_text("0,1,2\n5,0,1\n")
    with pytest.raises(ValueError, match="square"):
        load_cost_matrix(str(tmp_path / "bad.csv"))
    p = Protocol.preset("pitfalls").replace(cost_matrix=load_cost_matrix(str(tmp_path / "c.csv")))
    assert p.to_dict()["cost_matrix"] == [[0.0, 1.0], [5.0, 0.0]]
