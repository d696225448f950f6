# SPDX-License-Identifier: MIT
"""One archive open several times in one process: a Dask worker whose profiler still holds a frame of the
previous open, ``serve`` and the CLI in one interpreter, a notebook. libhdf5 shares a dataset open through any
handle of a file; it refused a second open with other external-file prefixes (CI: a cluster-scoring test failed
once in twenty runs), and ``H5Drefresh`` under the other handle corrupted the library (then a segfault)."""

from __future__ import annotations

import numpy as np
import pytest

from ubench.archive_schema import ArchiveWriter, SplitSpec, open_archive, validate_archive
from ubench.archive_schema.safe_h5py import h5py
from ubench.archive_schema.scan import open_dataset


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    rng = np.random.default_rng(3)
    n, c = 50, 4
    y = rng.integers(0, c, n)
    splits = {"test": SplitSpec(role="in_domain", dataset="toy", labels=y, sample_ids=np.arange(n)),
              "far": SplitSpec(role="ood", dataset="noise", sample_ids=np.arange(n))}
    w = ArchiveWriter(tmp_path_factory.mktemp("twice") / "a.h5", method="deep_ensemble", model="mlp",
                      dataset="toy", n_classes=c, splits=splits)
    for j in range(2):
        w.add_member({k: rng.dirichlet(np.ones(c), n).astype(np.float32) for k in splits}, seed=j)
    return w.finalize()


def test_two_readers_validate_read_and_release(archive):
    with open_archive(archive) as one:  # validated values: every dataset was read and refreshed once
        first = one.probs("test")
        with open_archive(archive) as two:
            assert np.array_equal(two.probs("test"), first)
            two.release("test")
            one.release("test")
            assert np.array_equal(one.probs("test"), first) and np.array_equal(two.probs("test"), first)
            assert np.array_equal(two.labels("test"), one.labels("test"))
        assert np.array_equal(one.probs("far"), np.concatenate([b for _, b in one.iter_probs("far")], axis=1))
    assert validate_archive(archive) == []


@pytest.mark.parametrize("held_by", ["plain h5py", "the walk's access properties"])
def test_a_reader_opens_while_another_handle_holds_the_datasets(archive, held_by):
    with h5py.File(archive, "r", locking=False) as f:
        g = f["splits/test"]
        held = [g[k] if held_by == "plain h5py" else open_dataset(g, k) for k in ("probs", "labels", "sample_ids")]
        with open_archive(archive) as reader:
            assert np.array_equal(reader.probs("test"), held[0][()])
            reader.release("test")
            assert np.array_equal(reader.labels("test"), held[1][()])
        assert np.array_equal(held[2][()], np.arange(50))
