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


# --- issue 9 items 1, 2, 8 (branch fid-report) -----------------------------------------------------------------------

@pytest.mark.parametrize("name, preset", [
    ("mnist", "mnist"), ("MNIST", "mnist"), ("cifar10", "cifar10"), ("CIFAR-10", "cifar10"), ("cifar_10", "cifar10"),
    ("CIFAR 100", "cifar100"), ("cifar-100", "cifar100"), ("ImageNet", "imagenet"), ("imagenet-1k", "imagenet"),
    ("ILSVRC2012", "imagenet"), ("fashion-mnist", None), ("FashionMNIST", None), ("kmnist", None), ("svhn", None),
    ("digits", None), ("cifar10-c", None), ("", None)])
def test_cost_preset_of_dataset_spellings(name, preset):
    """URSABench's decision task knows torchvision's MNIST, CIFAR10 and CIFAR100 classes exactly (FashionMNIST, a
    subclass of MNIST, raises there) and the paper adds ImageNet; spellings differ only in case and separators."""
    from ubench.metrics.decision import cost_preset_for_dataset

    assert cost_preset_for_dataset(name) == preset


def test_ursabench_preset_asks_for_the_datasets_cost_matrix():
    u = Protocol.preset("ursabench")
    assert u.cost_preset == "auto" and u.cost_matrix is None
    assert u.replace(cost_preset="mnist").overrides == ("cost_preset",)
    m = u.replace(cost_matrix=((0.0, 1.0), (1.0, 0.0)))
    assert m.cost_preset is None and m.overrides == ("cost_matrix", "cost_preset")
    assert Protocol.preset("pitfalls").cost_preset is None  # the other presets report no decision cost


def test_ursabench_smoothing_is_described_once_and_agrees():
    """The protocol docstring is the one description; REPORT_KEYS.md and the README point to it and say the same:
    Brier and ECE on the unsmoothed mean."""
    from pathlib import Path

    import ubench.scoring.protocols as protocols

    root = Path(protocols.__file__).resolve().parent.parent
    doc = " ".join(protocols.__doc__.split())
    assert "accuracy, Brier and ECE on the *unsmoothed* ensemble mean" in doc
    keys = " ".join((root / "scoring" / "REPORT_KEYS.md").read_text(encoding="utf-8").split())
    assert "unsmoothed" in keys and "scoring/protocols.py" in keys
    assert "NLL, Brier, ECE, TACE, UCE, detection scores" not in keys  # the old, wrong sentence
    readme = " ".join((root / "README.md").read_text(encoding="utf-8").split())
    assert "unsmoothed" in readme


def test_misclassification_docstring_says_errors_are_positive_as_in_the_pitfalls_code():
    """bayesgroup/pytorch-ensembles metrics.py: get_misclass_auroc labels 1 - correct, i.e. errors positive."""
    from ubench.metrics import misclassification_scores

    doc = " ".join(misclassification_scores.__doc__.split())
    assert "positive = error, as in the Pitfalls code" in doc
    assert "positive = correct" not in doc
