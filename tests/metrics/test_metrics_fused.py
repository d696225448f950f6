# SPDX-License-Identifier: MIT
"""The fused, cache-blocked kernels: validation inside the entropy pass raises exactly what the whole-array
checks raise, and results depend neither on the block size nor on how rows are split between threads."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import entr

from ubench import metrics as M
from ubench.metrics import _validation as V
from ubench.metrics import ensemble as E
from ubench.metrics import uncertainty as U
from ubench.metrics.report_sections import SplitAccumulator, split_arrays


def _probs(rng, n, c, dtype=np.float32):
    z = rng.normal(scale=3.0, size=(n, c))
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return p.astype(dtype)


def _reference_message(arr, name):
    with pytest.raises((ValueError, TypeError)) as ei:
        V._check_probs_values(arr, name)
    return str(ei.value)


@pytest.fixture(params=[(1 << 17, 4, 4), (300, 1, 4), (1000, 1, 2)], ids=["default", "tiny-4threads", "small-2"])
def blocking(request, monkeypatch):
    elems, min_blocks, threads = request.param
    monkeypatch.setattr(U, "_ENTROPY_BLOCK_ELEMS", elems)
    monkeypatch.setattr(U, "_MIN_BLOCKS_PER_THREAD", min_blocks)
    monkeypatch.setattr(U, "_MAX_THREADS", threads)
    monkeypatch.setattr(U.os, "sched_getaffinity", lambda pid: set(range(threads)), raising=False)
    monkeypatch.setattr(V, "_SCAN_BLOCK_ELEMS", elems)
    return request.param


CORRUPTIONS = {
    "nan late": lambda p: p.__setitem__((-3, 5), np.nan),
    "inf": lambda p: p.__setitem__((40, 0), np.inf),
    "negative": lambda p: p.__setitem__((77, 2), -0.25),
    "above one": lambda p: p.__setitem__((150, 1), 1.5),
    "row sum": lambda p: p.__setitem__((90, 3), p[90, 3] + 0.01),
    # A bad sum early and a NaN later: the whole-array order (finite first) decides the message.
    "sum then nan": lambda p: (p.__setitem__((5, 3), p[5, 3] + 0.01), p.__setitem__((180, 1), np.nan)),
    "range then sum": lambda p: (p.__setitem__((10, 3), p[10, 3] + 0.01), p.__setitem__((170, 1), 1.5)),
    # Within the row-sum tolerance, so only the range check can catch them (the entropy kernels read it off
    # the sign of log p): one ulp above 1 in a one-hot row, and the smallest negative subnormal.
    "one ulp above one": lambda p: (p.__setitem__(60, 0), p.__setitem__((60, 2), np.nextafter(p.dtype.type(1), 2))),
    "negative subnormal": lambda p: p.__setitem__((120, 4), -np.nextafter(p.dtype.type(0), 1)),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_fused_validation_raises_the_reference_error(blocking, case, dtype):
    rng = np.random.default_rng(0)
    p = _probs(rng, 200, 7, dtype)
    CORRUPTIONS[case](p)
    msg = _reference_message(p, "probs")
    for fn in (M.predictive_entropy, V.check_probs, M.normalized_entropy):
        with pytest.raises(ValueError) as ei:
            fn(p)
        assert str(ei.value) == msg
    members = np.stack([_probs(rng, 200, 7, dtype), p, _probs(rng, 200, 7, dtype)])
    msg = _reference_message(members, "member_probs")
    for fn in (M.mutual_information, M.uncertainty_decomposition, V.check_member_probs, M.ensemble_mean_probs):
        with pytest.raises(ValueError) as ei:
            fn(members)
        assert str(ei.value) == msg


def test_fused_validation_accepts_rows_the_screen_cannot_clear(blocking):
    # Off by more than the cheap screen's room but within tol: the reference checks run and pass.
    rng = np.random.default_rng(1)
    p = _probs(rng, 200, 7, np.float64)
    tol = V.simplex_tolerance(7)
    p[123, 0] += 0.99 * tol
    np.testing.assert_array_equal(M.predictive_entropy(p), U._entropy_rows(p))
    V.check_probs(p)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_results_independent_of_block_size_and_threads(monkeypatch, dtype):
    rng = np.random.default_rng(2)
    p = _probs(rng, 1037, 13, dtype)
    p[::7, 3] = 0.0  # exact zeros in some blocks (the max(p, tiny) path), none in others
    p /= p.sum(axis=1, keepdims=True, dtype=np.float64).astype(dtype)
    members = np.stack([_probs(rng, 1037, 13, dtype) for _ in range(3)])
    results = []
    # (13 * 400, 1, 4): 3 blocks of 400 rows for up to 4 threads: the block count (not the cores) sets 3 threads
    for elems, min_blocks, threads in [(1 << 17, 4, 1), (13, 1, 1), (13 * 50, 1, 3), (13 * 333, 1, 2),
                                       (13 * 400, 1, 4)]:
        monkeypatch.setattr(U, "_ENTROPY_BLOCK_ELEMS", elems)
        monkeypatch.setattr(U, "_MIN_BLOCKS_PER_THREAD", min_blocks)
        monkeypatch.setattr(U, "_MAX_THREADS", threads)
        monkeypatch.setattr(U.os, "sched_getaffinity", lambda pid: set(range(4)), raising=False)
        monkeypatch.setattr(E, "_MEAN_BLOCK_ELEMS", elems)
        d = M.uncertainty_decomposition(members)
        results.append((M.predictive_entropy(p), d.total, d.data, d.knowledge, M.ensemble_mean_probs(members)))
    for r in results[1:]:
        for a, b in zip(results[0], r):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_kernels_match_float64_reference(dtype):
    rng = np.random.default_rng(3)
    members = np.stack([_probs(rng, 3000, 10, dtype) for _ in range(4)])
    members[1, ::5, 2] = 0.0
    members[1] /= members[1].sum(axis=1, keepdims=True, dtype=np.float64).astype(dtype)
    m64 = members.astype(np.float64)
    mean = m64.mean(axis=0)
    total = entr(mean).sum(axis=1)
    data = entr(m64).sum(axis=2).mean(axis=0)
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    d = M.uncertainty_decomposition(members)
    np.testing.assert_allclose(d.total, total, rtol=rtol, atol=1e-6)
    np.testing.assert_allclose(d.data, data, rtol=rtol, atol=1e-6)
    assert (d.knowledge >= 0).all()
    np.testing.assert_allclose(M.predictive_entropy(members[1]), entr(m64[1]).sum(axis=1), rtol=rtol, atol=1e-6)
    # The ensemble mean: the same float64 sums as a reduction over members, bit for bit.
    ref = np.add.reduce(members, axis=0, dtype=np.float64)
    ref /= members.shape[0]
    np.testing.assert_array_equal(M.ensemble_mean_probs(members), ref)


def test_identical_members_and_rows_over_threads(monkeypatch):
    monkeypatch.setattr(U, "_ENTROPY_BLOCK_ELEMS", 10 * 37)
    monkeypatch.setattr(U, "_MIN_BLOCKS_PER_THREAD", 1)
    monkeypatch.setattr(U.os, "sched_getaffinity", lambda pid: set(range(4)), raising=False)
    rng = np.random.default_rng(4)
    p = _probs(rng, 1000, 10)
    p[::3] = p[0]
    member = np.stack([p] * 5)
    assert (M.mutual_information(member) == 0).all()
    h = M.predictive_entropy(p)
    assert (h[::3] == h[0]).all()
    assert ((h >= 0) & (h <= np.log(10))).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_zeros_negative_zeros_and_subnormals_over_blockings(monkeypatch, dtype):
    """Rows with exact zeros (+0.0 and -0.0) and subnormals, in every block or only some: the guarded recompute
    and the guarded mode give the same bits wherever a row sits, and equal entr (0 log 0 = 0) on the values."""
    rng = np.random.default_rng(6)
    p = _probs(rng, 997, 11, dtype)
    tiny = np.finfo(dtype).tiny
    p[::2, 0] = 0.0  # half the rows: past the share that switches a range to the guarded log
    p[1::9, 1] = -0.0
    p[::5, 2] = tiny / 8  # subnormal
    p /= p.sum(axis=1, keepdims=True, dtype=np.float64).astype(dtype)
    p[1::9, 1] = -0.0
    assert np.signbit(p[1, 1]) and p[5, 2] < tiny
    members = np.stack([p, np.roll(p, 3, axis=0), _probs(rng, 997, 11, dtype)])
    members[2, ::3] = np.eye(11, dtype=dtype)[rng.integers(0, 11, 333)]  # one-hot rows: zeros in every class
    results = []
    for elems, threads in [(1 << 17, 1), (11, 1), (11 * 40, 3), (11 * 301, 2)]:
        monkeypatch.setattr(U, "_ENTROPY_BLOCK_ELEMS", elems)
        monkeypatch.setattr(U, "_MIN_BLOCKS_PER_THREAD", 1)
        monkeypatch.setattr(U, "_MAX_THREADS", threads)
        monkeypatch.setattr(U.os, "sched_getaffinity", lambda pid: set(range(4)), raising=False)
        d = M.uncertainty_decomposition(members)
        results.append((M.predictive_entropy(p), d.total, d.data, d.knowledge))
    for r in results[1:]:
        for a, b in zip(results[0], r):
            np.testing.assert_array_equal(a, b)
    m64 = members.astype(np.float64)
    tol = 2e-6 if dtype == np.float32 else 1e-12
    h, total, data, knowledge = results[0]
    np.testing.assert_allclose(h, entr(p.astype(np.float64)).sum(axis=1), rtol=0, atol=tol)
    np.testing.assert_allclose(total, entr(m64.mean(axis=0)).sum(axis=1), rtol=0, atol=tol)
    np.testing.assert_allclose(data, entr(m64).sum(axis=2).mean(axis=0), rtol=0, atol=tol)
    assert np.isfinite(knowledge).all() and (knowledge >= 0).all()


def test_member_at_a_time_uncertainties_equal_the_one_pass_kernel():
    """The report's member-at-a-time path (memory N x C whatever M) logs the float64 ensemble mean in the members'
    float32, as the one-pass kernel does: the same total and mean to the last bit, the same data and knowledge to
    rounding (the member entropies are summed in another order), and both equal entr on the float64 values."""
    rng = np.random.default_rng(8)
    members = np.stack([_probs(rng, 600, 9) for _ in range(3)])
    members[1, ::4, 0] = 0.0
    members[1] /= members[1].sum(axis=1, keepdims=True, dtype=np.float64).astype(np.float32)
    whole = split_arrays(members)
    acc = SplitAccumulator(*members.shape, dtype=members.dtype)
    for start in range(0, 600, 250):
        for j in range(3):
            acc.add_member_rows(start, j, members[j, start : start + 250])
    rows = acc.result()
    np.testing.assert_array_equal(rows.mean_probs, whole.mean_probs)
    np.testing.assert_array_equal(rows.total, whole.total)
    np.testing.assert_allclose(rows.data, whole.data, rtol=1e-14)
    np.testing.assert_allclose(rows.knowledge, whole.knowledge, rtol=1e-9, atol=1e-15)
    m64 = members.astype(np.float64)
    np.testing.assert_allclose(rows.total, entr(m64.mean(axis=0)).sum(axis=1), rtol=0, atol=2e-6)
    np.testing.assert_allclose(rows.data, entr(m64).sum(axis=2).mean(axis=0), rtol=0, atol=2e-6)
