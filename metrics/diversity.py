# SPDX-License-Identifier: MIT
"""How much the members of an ensemble (or posterior samples) disagree in their top-1 votes: pairwise
disagreement and the variation ratio."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._validation import UndefinedMetricError, check_member_probs

__all__ = ["top1_votes", "vote_agreement", "disagreement_per_sample", "variation_ratio_per_sample",
           "disagreement", "variation_ratio"]


def top1_votes(member_probs: NDArray) -> NDArray[np.intp]:
    """(M, N): every member's top-1 class per sample (ties go to the lowest class, as ``argmax``)."""
    return np.argmax(member_probs, axis=-1)


def vote_agreement(votes: NDArray) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    r"""(pairs, modal) per sample from the votes (M, N): ``pairs`` = :math:`\sum_c n_c (n_c - 1)`, the ordered
    pairs of distinct members that agree, and ``modal`` = :math:`\max_c n_c`, where :math:`n_c` counts the
    members voting for class c. Sorts the M votes of each sample (never an (N, C) count matrix): in a run of L
    equal votes the k-th (0-based) agrees with the k before it, and those sum to L (L - 1) / 2."""
    m, n = votes.shape
    v = np.sort(votes.T, axis=1)  # (N, M)
    k = np.arange(m)
    new_run = np.ones((n, m), dtype=bool)
    new_run[:, 1:] = v[:, 1:] != v[:, :-1]
    run_start = np.maximum.accumulate(np.where(new_run, k, 0), axis=1)
    behind = k - run_start  # members of the same run before this one
    return 2 * behind.sum(axis=1), behind.max(axis=1) + 1


def disagreement_per_sample(pairs: NDArray, n_members: int) -> NDArray[np.float64]:
    """Share of member pairs whose votes differ: ``1 - Σ_c n_c (n_c - 1) / (M (M - 1))`` per sample (M ≥ 2), from
    ``pairs`` of :func:`vote_agreement`."""
    return 1.0 - pairs.astype(np.float64) / (n_members * (n_members - 1.0))


def variation_ratio_per_sample(modal: NDArray, n_members: int) -> NDArray[np.float64]:
    """Share of members not voting for the modal class: ``1 - max_c n_c / M`` per sample, from ``modal`` of
    :func:`vote_agreement`."""
    return 1.0 - modal.astype(np.float64) / n_members


def _agreement(member_probs: ArrayLike) -> tuple[tuple[NDArray, NDArray], int]:
    mp = check_member_probs(member_probs)
    if mp.shape[0] < 2:
        raise UndefinedMetricError("disagreement needs at least 2 members")
    return vote_agreement(top1_votes(mp)), mp.shape[0]


def disagreement(member_probs: ArrayLike) -> float:
    r"""Mean pairwise top-1 disagreement of the members.

    Parameters
    ----------
    member_probs : ndarray of shape (n_members, n_samples, n_classes), n_members ≥ 2

    Returns
    -------
    float in ``[0, 1]``

    Notes
    -----
    With :math:`n_{ic}` the number of members whose top class for sample :math:`i` is :math:`c`,

    .. math:: \mathrm{D} = \frac{1}{N}\sum_i \Big(1 - \frac{\sum_c n_{ic}(n_{ic}-1)}{M(M-1)}\Big),

    the probability that two distinct members drawn at random disagree; equal to torch-uncertainty's
    ``Disagreement`` (Fort et al. 2019's function-space diversity).

    Examples
    --------
    >>> import numpy as np
    >>> a, b = [0.9, 0.1], [0.2, 0.8]
    >>> disagreement(np.array([[a], [a], [b]]))  # 2 of the 3 pairs disagree
    0.6666666666666667
    """
    (pairs, _), m = _agreement(member_probs)
    return float(disagreement_per_sample(pairs, m).mean())


def variation_ratio(member_probs: ArrayLike) -> float:
    r"""Mean variation ratio of the members' top-1 votes (Freeman 1965; Gal 2016, Sec. 3.3.1).

    Notes
    -----
    :math:`\mathrm{VR} = \frac{1}{N}\sum_i (1 - \max_c n_{ic} / M)`, the classic vote-based definition.
    torch-uncertainty's ``VariationRatio`` defaults to ``probabilistic=True``, which averages the members'
    probabilities of the mean's top class and so equals ``1 - max_c p̄_ic``, one minus the ensemble's confidence;
    its ``probabilistic=False`` is this one (votes compared with the mean's top class, which can differ from the
    modal vote; ubench takes the modal vote, as Gal defines it).

    Examples
    --------
    >>> import numpy as np
    >>> a, b = [0.9, 0.1], [0.2, 0.8]
    >>> round(variation_ratio(np.array([[a], [a], [b]])), 6)
    0.333333
    """
    (_, modal), m = _agreement(member_probs)
    return float(variation_ratio_per_sample(modal, m).mean())
