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


def test_logits_with_no_class_column_are_not_called_empty():
    """An (N, 0) logits array has samples: the emptiness check looks at the sample axis only (the finiteness scan
    is left out here: on no element it fails with numpy's own message, reported on issue #27)."""
    from ubench.metrics._validation import check_logits

    assert check_logits(np.zeros((3, 0)), finite=False).shape == (3, 0)
