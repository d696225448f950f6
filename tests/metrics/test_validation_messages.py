# SPDX-License-Identifier: MIT
"""The probability checks' messages (``metrics/_validation.py``) name the first bad entry or row by hand: the
first value outside [0, 1] (not a 0 or a 1 before it), the row of a (members, samples, classes) array that does
not sum to 1, and the tolerance of its class count (1e-4 + C 2^-23), also for float32."""

from __future__ import annotations

import numpy as np
import pytest

from ubench.metrics._validation import check_member_probs, check_probs, simplex_tolerance


def test_the_first_value_outside_the_unit_interval_is_named():
    with pytest.raises(ValueError) as ei:
        check_probs(np.array([[0.0, 1.0], [1.0, 0.0], [0.5, 1.5]]))
    assert str(ei.value) == ("probs must be probabilities in [0, 1]; found 1.5 at index (2, 1) (were logits "
                             "passed as probabilities?)")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_bad_row_of_member_probs_is_named_with_the_class_count_tolerance(dtype):
    """2 members x 3 samples x 1000 classes: member 1's sample 2 sums to 0.99; the tolerance is that of 1000
    classes (2.2e-04), not of 3 samples (1.0e-04)."""
    mp = np.random.default_rng(0).dirichlet(np.ones(1000), size=(2, 3))
    mp[1, 2] *= 0.99
    assert f"{simplex_tolerance(1000):.1e}" == "2.2e-04"
    with pytest.raises(ValueError) as ei:
        check_member_probs(mp.astype(dtype))
    assert str(ei.value) == "member_probs rows must sum to 1 (tol 2.2e-04); row (1, 2) sums to 0.99"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_first_bad_row_on_rows_at_the_tolerance_edge(dtype):
    """Rows whose sums straddle 1 + tol by less than float32 rounding: the fast screen and the plain float64 check
    both name the first row whose exactly rounded sum (math.fsum of the float64 values) is off by more than tol;
    rows the screen cannot clear that are fine (before a bad one) are not named."""
    import math

    from ubench.metrics._validation import _first_bad_simplex_row_nonneg, first_bad_simplex_row

    rng = np.random.default_rng(0)
    c = 100
    tol = simplex_tolerance(c)
    rows = rng.dirichlet(np.ones(c), size=400)
    target = 1.0 + tol + rng.uniform(-3e-7, 3e-7, size=(400, 1))
    rows = (rows * (target / rows.sum(axis=1, keepdims=True))).astype(dtype)
    bad = [abs(math.fsum(r.astype(np.float64)) - 1.0) > tol for r in rows]
    assert 0 < sum(bad) < len(bad)
    for k in range(0, 400, 7):  # every seventh row as the first, so fine rows precede bad ones
        block = rows[k:]
        want = next((i for i, b in enumerate(bad[k:]) if b), None)
        assert first_bad_simplex_row(block, tol) == want
        assert _first_bad_simplex_row_nonneg(block, tol) == want
        assert _first_bad_simplex_row_nonneg(block.reshape(1, *block.shape), tol) == want  # (M, N, C) too


def _shape_errors():
    from ubench.metrics._validation import (check_binary_labels, check_labels, check_logits,
                                            check_member_probs_mean, check_scores)
    from ubench.metrics.uncertainty import mutual_information, predictive_entropy

    i64 = np.zeros(2, dtype=np.int64)
    return [
        # public functions that validate through the shape checks' default names
        (lambda: predictive_entropy(np.ones((3, 1))), ValueError, "probs must have at least 2 classes; found 1"),
        (lambda: mutual_information(np.full((2, 3, 1), 1.0)), ValueError,
         "member_probs must have at least 2 classes; found 1"),
        # a caller's own name reaches every message
        (lambda: check_probs(np.ones((3, 1)), "p"), ValueError, "p must have at least 2 classes; found 1"),
        (lambda: check_member_probs(np.ones((2, 3, 1)), "stack"), ValueError,
         "stack must have at least 2 classes; found 1"),
        (lambda: check_member_probs_mean(np.ones((2, 3, 1)), "stack"), ValueError,
         "stack must have at least 2 classes; found 1"),
        (lambda: check_member_probs(np.zeros((0, 3, 4))), ValueError, "member_probs is empty: shape (0, 3, 4)"),
        (lambda: check_member_probs(np.zeros((2, 0, 4))), ValueError, "member_probs is empty: shape (2, 0, 4)"),
        (lambda: check_labels(np.zeros((2, 2), dtype=int), 3), ValueError,
         "labels must have shape (n_samples,); found shape (2, 2)"),
        (lambda: check_labels(np.zeros(0, dtype=int), 3), ValueError, "labels is empty: it has 0 samples"),
        (lambda: check_binary_labels(np.array([0, 2]), "is_ood"), ValueError,
         "is_ood must be in [0, 2); found 2 at index 1"),
        (lambda: check_logits(np.zeros(2), "z"), ValueError,
         "z must have shape (n_samples, n_classes); found ndim 1, shape (2,)"),
        (lambda: check_logits(np.zeros((0, 3))), ValueError, "logits is empty: it has 0 samples"),
        (lambda: check_logits(np.zeros((3, 0))), ValueError, "logits is empty: it has 0 classes"),
        (lambda: check_logits(np.zeros((2, 2), dtype=np.int64), "z"), TypeError,
         "z must be float32 or float64; found dtype int64"),
        (lambda: check_scores(np.zeros(0)), ValueError, "scores is empty: it has 0 samples"),
        (lambda: check_scores(i64, "u"), TypeError, "u must be float32 or float64; found dtype int64"),
    ]


@pytest.mark.parametrize("case", range(15))
def test_shape_and_dtype_errors_name_the_argument_and_what_is_wrong(case):
    """Each shape/dtype refusal, with the exact message: the argument's name (the caller's, or the default of the
    public function), what is wrong and the value found (a dropped name, detail or check fails here)."""
    call, exc, message = _shape_errors()[case]
    with pytest.raises(exc) as ei:
        call()
    assert str(ei.value) == message


def test_logits_with_no_class_column_are_refused_whatever_the_finiteness_scan():
    """An (N, 0) logits array is refused by name, also when the finiteness scan is left out (without the check,
    the scan failed with numpy's "zero-size array to reduction" message)."""
    from ubench.metrics._validation import check_logits

    with pytest.raises(ValueError, match="^logits is empty: it has 0 classes$"):
        check_logits(np.zeros((3, 0)), finite=False)


def test_the_bad_row_sum_is_reported_in_float64_for_float32_rows():
    """The message's sum is that of the row's float32 values in float64 (here float32 arithmetic would say
    2.25845)."""
    row = np.array([[0.8735226392745972, 0.47230035066604614, 0.9126219153404236]], dtype=np.float32)
    with pytest.raises(ValueError) as ei:
        check_probs(row)
    assert str(ei.value) == "probs rows must sum to 1 (tol 1.0e-04); row 0 sums to 2.25844"


def test_float64_rows_straddling_the_tolerance_by_rounding_get_the_reference_verdict():
    """float64 rows whose sums lie within 2e-15 of 1 + tol: the fast screen (einsum sums) and check_probs name
    exactly the rows the plain float64 check (first_bad_simplex_row) names; some rows are inside by einsum's
    rounding and outside by the reference's, so a screen without its rounding margin passes them."""
    from ubench.metrics._validation import _first_bad_simplex_row_nonneg, first_bad_simplex_row

    rng = np.random.default_rng(0)
    c = 100
    tol = simplex_tolerance(c)
    rows = rng.dirichlet(np.ones(c), size=3000)
    rows *= (1.0 + tol + rng.uniform(-2e-15, 2e-15, size=(3000, 1))) / rows.sum(axis=1, keepdims=True)
    fast_inside = np.abs(np.einsum("ij->i", rows) - 1.0) <= tol
    ref_outside = np.abs(rows.sum(axis=1) - 1.0) > tol
    assert (fast_inside & ref_outside).any()
    for k in np.flatnonzero(fast_inside & ref_outside)[:5]:
        block = rows[k:]
        want = first_bad_simplex_row(block, tol)
        assert want == 0
        assert _first_bad_simplex_row_nonneg(block, tol) == want
        with pytest.raises(ValueError, match=r"row 0 sums to"):
            check_probs(block)
    good = rows[~ref_outside][:50]
    assert first_bad_simplex_row(good, tol) is None and check_probs(good) is good


@pytest.mark.parametrize("shape", [(40, 100), (2, 3, 1000), (2, 2000, 3)])
@pytest.mark.parametrize("excess", [1e-5, -1e-5])
def test_rows_just_beyond_the_tolerance_are_refused_by_every_check(shape, excess):
    """float32 rows on the simplex but one that misses it by tol + 1e-5 (above or below): check_probs,
    check_member_probs and check_member_probs_mean all refuse it and name it; the tolerance is that of the class
    count (the last axis), whichever of samples or classes is larger."""
    from ubench.metrics._validation import check_member_probs_mean

    rng = np.random.default_rng(1)
    c = shape[-1]
    tol = simplex_tolerance(c)
    p = rng.dirichlet(np.ones(c), size=shape[:-1])
    bad = (0,) * (len(shape) - 2) + (shape[-2] - 2,)
    p[bad] *= 1.0 + np.sign(excess) * (tol + abs(excess))
    p = p.astype(np.float32)
    where = str(bad[0]) if len(bad) == 1 else str(bad)
    checks = [check_probs] if len(shape) == 2 else [check_member_probs, check_member_probs_mean]
    for check in checks:
        with pytest.raises(ValueError) as ei:
            check(p)
        assert f"(tol {tol:.1e}); row {where} sums to" in str(ei.value), check.__name__
        p_ok = p.copy()
        p_ok[bad] = p[(0,) * (len(shape) - 2) + (0,)]
        check(p_ok)


def test_rows_that_sum_to_one_in_pairs_are_still_bad_rows():
    """Rows of 0.25 + 0.25 (summing to 0.5) are refused although any two of them sum to 1: the value scan adds
    along the class axis only (probs and member probs)."""
    with pytest.raises(ValueError) as ei:
        check_probs(np.full((8, 2), 0.125))
    assert str(ei.value).endswith("row 0 sums to 0.25")
    with pytest.raises(ValueError) as ei:
        check_member_probs(np.full((1, 4, 2), 0.25))
    assert str(ei.value).endswith("row (0, 0) sums to 0.5")


@pytest.mark.parametrize("shape", [(5, 1000), (4, 3, 1000)])
def test_a_row_whose_float32_sum_hides_its_excess_is_refused(shape):
    """A float32 row of 8 large entries and 992 of 2.5e-9: float32 row sums (SIMD lanes already near 1/8) drop the
    small entries and put the row 1.1e-6 inside 1 + tol, while its float64 sum is 1.4e-6 outside. The blocked
    checks clear a block on float32 sums only with a rounding margin for the row's class count (1000 here, not
    its 3 samples): they refuse the row and name it, like the plain float64 check."""
    from ubench.metrics._validation import check_member_probs_mean, first_bad_simplex_row

    c = shape[-1]
    tol = simplex_tolerance(c)
    row = np.full(c, 2.5e-9, dtype=np.float32)
    row[:8] = np.float32((1.0 + tol - 1e-6) / 8)
    assert row.sum(dtype=np.float64) - 1.0 > tol >= float(np.einsum("ij->i", row[None])[0]) - 1.0 + 1e-6
    p = np.random.default_rng(3).dirichlet(np.ones(c), size=shape[:-1]).astype(np.float32)
    bad = (3,) if len(shape) == 2 else (2, 1)
    p[bad] = row
    assert first_bad_simplex_row(p, tol) == int(np.ravel_multi_index(bad, shape[:-1]))
    for check in [check_probs] if len(shape) == 2 else [check_member_probs, check_member_probs_mean]:
        with pytest.raises(ValueError) as ei:
            check(p)
        assert str(ei.value).endswith(f"row {bad[0] if len(bad) == 1 else bad} sums to 1.00022"), check.__name__
