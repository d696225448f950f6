# SPDX-License-Identifier: MIT
"""A producer that writes members slowly, run as a child process by test_archive_crash.py and killed with -9.

``python slow_producer.py OUT SIZE MODE`` writes members 0, 1, 2, … of the run ``make_writer(OUT, SIZE)``,
printing ``member k done`` after each ``add_member`` returns. MODE says where it then stalls, so that the
parent's SIGKILL lands at a known place:

``after-2``   stalls (sleeps) after member 1 is reported, between members;
``inside-2``  stalls inside ``add_member`` of member 2, after part of that member's file is written (the dataset
              write is split into slices; ``member 2 writing`` is printed after the first one);
``rename-2``  stalls, in the unpatched writer, when member 2's complete temporary file is about to be renamed into
              place (``member 2 renaming`` is printed; the file is whole, its final name absent);
``renamed-2`` stalls right after that rename, when the writer opens the members directory to fsync it
              (``member 2 renamed`` is printed; the final name exists).

The last two change no ubench code: an audit hook (:func:`sys.addaudithook`) sees the writer's ``os.replace``
(event ``os.rename``) and ``os.open`` (event ``open``) and stalls there, so the kill lands at one exact point.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from ubench.archive_schema import ArchiveWriter, SplitSpec

SIZES = {"small": (300, 10), "large": (20_000, 100)}  # (N of split 'test', C)


def member_probs(k: int, size: str) -> dict[str, np.ndarray]:
    """Member k's predictions: deterministic in k, so the parent can rebuild them bit for bit."""
    n, c = SIZES[size]
    rng = np.random.default_rng(1000 + k)
    out = {}
    for name, rows in (("test", n), ("ood", n // 2)):
        z = rng.normal(0.0, 3.0, (rows, c))
        e = np.exp(z - z.max(axis=1, keepdims=True))
        out[name] = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
    return out


def make_writer(out, size: str, **changes) -> ArchiveWriter:
    n, c = SIZES[size]
    labels = np.random.default_rng(7).integers(0, c, n)
    kwargs = dict(method="deep_ensemble", model="mlp", dataset="toy", n_classes=c,
                  splits={"test": SplitSpec(role="in_domain", dataset="toy", labels=labels),
                          "ood": SplitSpec(role="ood", dataset="noise", n_samples=n // 2)},
                  config={"lr": 0.01, "epochs": 2})
    kwargs.update(changes)
    return ArchiveWriter(out, **kwargs)


def _slow_dataset_writes() -> None:
    """Write member datasets in slices; stall forever inside the first member-2 write after one slice."""
    from ubench.archive_schema.safe_h5py import h5py

    original = h5py.Group.create_dataset

    def create_dataset(self, name, data=None, **kwargs):
        if data is None or not str(name).startswith("probs/"):
            return original(self, name, data=data, **kwargs)
        ds = original(self, name, shape=data.shape, dtype=data.dtype, **kwargs)
        step = max(1, len(data) // 4)
        for start in range(0, len(data), step):
            ds[start : start + step] = data[start : start + step]
            if STATE["member"] == 2:
                self.file.flush()
                print("member 2 writing", flush=True)
                time.sleep(3600)
        return ds

    h5py.Group.create_dataset = create_dataset


def _stall_at_member_2_rename(after: bool) -> None:
    """Stall (print, then sleep) at the rename of member 2's file (``after``: at the directory fsync that follows)."""
    seen = {"renamed": False}

    def hook(event: str, args: tuple) -> None:
        if event == "os.rename" and Path(str(args[1])).name == "000002.h5":
            if not after:
                print("member 2 renaming", flush=True)
                time.sleep(3600)
            seen["renamed"] = True
        elif event == "open" and after and seen["renamed"] and Path(str(args[0])).name == "members":
            print("member 2 renamed", flush=True)
            time.sleep(3600)

    sys.addaudithook(hook)


STATE = {"member": 0}

if __name__ == "__main__":
    out, size, mode = sys.argv[1:4]
    if mode == "inside-2":
        _slow_dataset_writes()
    elif mode in ("rename-2", "renamed-2"):
        _stall_at_member_2_rename(after=mode == "renamed-2")
    w = make_writer(out, size)
    for k in range(w.n_members, 5):
        STATE["member"] = k
        w.add_member(member_probs(k, size), seed=k, epoch=2, info={"k": k})
        print(f"member {k} done", flush=True)
        time.sleep(3600 if (mode == "after-2" and k == 1) else 0.05)
    w.finalize()
    print("finalized", flush=True)
