# SPDX-License-Identifier: MIT
"""The primary split (the headline's and the OOD scores' in-domain split): the first labelled in-domain split in
the order given (issue #16.6: with a reference, the reference's order), else none."""

from ubench.metrics.report import primary_split


def test_the_first_labelled_split_in_the_order_given():
    assert primary_split(["val", "test"], {"test", "val"}) == "val"
    assert primary_split(["test", "val"], {"test", "val"}) == "test"


def test_unlabelled_splits_are_passed_over():
    assert primary_split(["unlabelled", "test", "val"], {"val", "test"}) == "test"
    assert primary_split(["a", "b"], {"b", "shift_only"}) == "b"


def test_none_without_a_labelled_in_domain_split():
    assert primary_split(["a", "b"], {"c"}) is None
    assert primary_split([], {"a"}) is None
    assert primary_split(["a"], set()) is None
