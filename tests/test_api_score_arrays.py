# SPDX-License-Identifier: MIT
"""``score_arrays`` takes what users of torch-uncertainty, netcal or scikit-learn have at hand (issue #28 item 11):
one model's ``(N, C)`` array, and logits with ``kind="logits"``."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import logsumexp
from sklearn.metrics import accuracy_score, brier_score_loss, log_loss

from ubench import score_arrays

RNG = np.random.default_rng(7)
N, C = 300, 4
Y = RNG.integers(0, C, N)
Z = RNG.normal(size=(N, C)) * 1.5
Z[np.arange(N), Y] += 1.0
Z_OOD = RNG.normal(size=(80, C)) * 0.5


def _softmax(z):
    """The oracle's softmax: exp(z - logsumexp(z)), written here, not ubench's."""
    return np.exp(z - logsumexp(z, axis=-1, keepdims=True))


def test_one_models_n_by_c_array_is_a_one_member_stack():
    p = _softmax(Z)
    flat = score_arrays(p, Y, ood=_softmax(Z_OOD))
    stacked = score_arrays(p[None], Y, ood=_softmax(Z_OOD)[None])
    assert flat == stacked
    assert flat["archive"]["n_members"] == 1


def test_logits_are_scored_as_their_softmax_and_match_scikit_learn():
    """Oracle: the same report for the probabilities computed here, and scikit-learn's log loss, accuracy and
    (one-vs-rest summed) Brier score of those probabilities."""
    from_logits = score_arrays(Z, Y, ood=Z_OOD, kind="logits")
    p = _softmax(Z)
    from_probs = score_arrays(p, Y, ood=_softmax(Z_OOD))
    for key, value in from_probs["summary"].items():
        got = from_logits["summary"][key]
        assert got == value if value is None else got == pytest.approx(value, rel=1e-9, abs=1e-12), key
    s = from_logits["summary"]
    assert s["nll"] == pytest.approx(log_loss(Y, p, labels=range(C)), rel=1e-10)
    assert s["accuracy"] == accuracy_score(Y, Z.argmax(1))
    assert s["brier"] == pytest.approx(sum(brier_score_loss(Y == k, p[:, k]) for k in range(C)), rel=1e-10)
    assert any("kind='logits'" in n for n in from_logits["notes"])
    assert not any("kind='logits'" in n for n in from_probs["notes"])
    members = score_arrays(np.stack([Z, Z + 0.3 * RNG.normal(size=Z.shape)]), Y, kind="logits")
    assert members["archive"]["n_members"] == 2


def test_logits_are_never_guessed_and_bad_ones_are_named():
    with pytest.raises(ValueError, match="member_probs"):  # logits are not probabilities unless kind says so
        score_arrays(Z, Y)
    with pytest.raises(ValueError, match="kind must be 'probs' or 'logits'"):
        score_arrays(Z, Y, kind="log-probs")
    with pytest.raises(TypeError, match=r"member_probs\[0\] \(logits\) must be float32 or float64"):
        score_arrays(Z.astype(np.int64), Y, kind="logits")
    bad = np.stack([Z, Z])
    bad[1, 17, 2] = np.inf
    with pytest.raises(ValueError, match=r"member_probs\[1\] \(logits\).*17"):
        score_arrays(bad, Y, kind="logits")
    with pytest.raises(ValueError, match=r"or, for one model, \(n_samples, n_classes\)"):
        score_arrays(Z[:, 0], Y, kind="logits")
    with pytest.raises(ValueError, match=r"ood\['ood'\]\[0\] \(logits\)"):
        score_arrays(Z, Y, ood=np.full((5, C), np.nan), kind="logits")
