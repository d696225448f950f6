# SPDX-License-Identifier: MIT
"""Independent reference computations the tests compare ubench with (imported as ``oracles``).

Each is written from the formula in the paper or the docstring, with plain loops, scipy or scikit-learn, and
never calls ``ubench``: a test that pins ubench to one of these fails when ubench drifts from the formula.
"""

from __future__ import annotations

import numpy as np
from scipy.special import entr, log_softmax, rel_entr
from sklearn import metrics as skm


def entropy(p):
    """-sum_c p log p over the last axis, in float64 with 0 log 0 = 0 (scipy.special.entr), nats."""
    return entr(np.asarray(p, dtype=np.float64)).sum(axis=-1)


def decomposition(member_probs, gamma=0.0):
    """(total, data, knowledge) per sample after central smoothing ``(1 - g) p + g / C``: entropy of the float64
    mean, mean member entropy, and knowledge as mean_m KL(p_m || mean) (rel_entr: not total - data)."""
    p = np.asarray(member_probs, dtype=np.float64)
    if gamma:
        p = (1 - gamma) * p + gamma / p.shape[-1]
    mean = p.mean(axis=0)
    return entropy(mean), entropy(p).mean(axis=0), rel_entr(p, mean).sum(axis=-1).mean(axis=0)


def top1(probs, labels):
    """(top-1 confidence as float64, 1.0 where the arg max equals the label)."""
    p = np.asarray(probs)
    pred = p.argmax(axis=1)
    return p[np.arange(len(labels)), pred].astype(np.float64), (pred == labels).astype(np.float64)


def hand_bins(values, hits, n_bins):
    """(count, mean value, mean hit) per equal-width bin (lo, hi], a loop over the bins with edges m / n_bins; a
    value of exactly 0 goes to the first bin, one that rounding put above 1 (an entropy) to the last. Empty bins
    give (0, 0.0, 0.0)."""
    values = np.asarray(values, dtype=np.float64)
    hits = np.asarray(hits, dtype=np.float64)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    out = []
    for m in range(n_bins):
        inside = (values > edges[m]) & (values <= edges[m + 1])
        if m == 0:
            inside |= values == 0.0
        if m == n_bins - 1:
            inside |= values > 1.0
        k = int(inside.sum())
        out.append((k, values[inside].mean() if k else 0.0, hits[inside].mean() if k else 0.0))
    return out


def hand_error(values, hits, n_bins):
    """sum_m |B_m| / N |mean hit - mean value| over :func:`hand_bins` (ECE on confidence, UCE on uncertainty)."""
    return sum(k * abs(h - v) for k, v, h in hand_bins(values, hits, n_bins)) / len(values)


def ece(probs, labels, n_bins=15):
    conf, hit = top1(probs, labels)
    return hand_error(conf, hit, n_bins)


def uce(probs, labels, n_bins=15):
    """Laves et al. (2019): normalized entropy binned against the top-1 error."""
    p = np.asarray(probs, dtype=np.float64)
    _, hit = top1(p, labels)
    return hand_error(entropy(p) / np.log(p.shape[1]), 1.0 - hit, n_bins)


def tace(p, y, n_bins=15, threshold=1e-3):
    """TACE (Ashukha et al. 2020, Eq. 2) with the Pitfalls code's normalisation |B| / (N C), loops and all:
    per class, values above the threshold sorted by (value, hit) and cut into n_bins equal-count bins (the last
    takes the remainder; one bin when there are fewer values than bins)."""
    p = np.asarray(p, dtype=np.float64)
    n, c = p.shape
    total = 0.0
    for k in range(c):
        keep = p[:, k] > threshold
        vals = p[keep, k]
        hits = (y[keep] == k).astype(float)
        order = np.lexsort((hits, vals))
        vals, hits = vals[order], hits[order]
        size = len(vals) // n_bins
        bounds = [0, len(vals)] if size == 0 else [i * size for i in range(n_bins)] + [len(vals)]
        for a, b in zip(bounds[:-1], bounds[1:]):
            if b > a:
                total += (b - a) / (n * c) * abs(hits[a:b].mean() - vals[a:b].mean())
    return total


def aurc(correct, uncertainty):
    """1 - mean accuracy of the accuracy-rejection curve: reject the k most uncertain, k = 0..N-1 (no ties)."""
    order = np.argsort(-np.asarray(uncertainty), kind="stable")
    c = np.asarray(correct, dtype=np.float64)[order]
    return 1.0 - np.mean([c[k:].mean() for k in range(len(c))])


def detection(scores, positive, tpr=0.95):
    """scikit-learn's AUROC and average precision, and the FPR of the first roc_curve point with TPR >= tpr."""
    fpr, tprs, _ = skm.roc_curve(positive, scores, drop_intermediate=False)
    return (skm.roc_auc_score(positive, scores), skm.average_precision_score(positive, scores),
            fpr[np.searchsorted(tprs, tpr - 1e-12)])


def temperature_nll(log_probs, labels, t):
    """The NLL of ``softmax(log_probs / t)`` on ``labels``, in float64 with scipy's log_softmax."""
    z = np.asarray(log_probs, dtype=np.float64) / t
    return -np.mean(log_softmax(z, axis=1)[np.arange(len(labels)), labels])


def assert_same_temperature_optimum(log_probs, labels, t1, t2):
    """Two fits of one temperature objective agree: T to 1e-6 relative, or, where the NLL is flat to rounding at
    the optimum (the argmin is determined only as far as the NLL resolves it), both T give the same float64 NLL to
    1e-13."""
    if not np.isclose(t1, t2, rtol=1e-6, atol=0.0):
        a, b = temperature_nll(log_probs, labels, t1), temperature_nll(log_probs, labels, t2)
        assert abs(a - b) <= 1e-13, f"T {t1!r} vs {t2!r}: NLL {a!r} vs {b!r}"
