# SPDX-License-Identifier: MIT
"""Hostile and oversized importer inputs (issue #25 items 3, 12, 13; issue #28 item 2): every one is refused
from what it *declares*, before it is read or written, with one line naming the file and key, exit code 2 and
nothing left beside the sources. The inputs are built here, small on disk: sparse files, stride-0 tensors,
hand-written zip entries and ``.npy`` headers."""

from __future__ import annotations

import io
import os
import resource
import shutil
import subprocess
import sys
import tracemalloc
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner
from scipy.special import softmax

from formats import ovadia_release
from ubench.cli import cli
from ubench.importers.kinds import ImportFailure
from ubench.importers.npz import plan_npz
from ubench.importers.plan import write_plan

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "archive_schema"))
from inotify_watch import FileWatch  # noqa: E402


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def run_process(cwd: Path, *args, fsize: int | None = None) -> subprocess.CompletedProcess:
    """``ubench`` in a real process, with ``RLIMIT_FSIZE`` lowered to ``fsize`` bytes when given (Python ignores
    SIGXFSZ, so a write past it fails with EFBIG, as on a full or size-limited file system)."""

    def limit():
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, resource.RLIM_INFINITY))

    return subprocess.run([sys.executable, "-m", "ubench.cli", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, preexec_fn=limit, timeout=300)


def assert_refused(r_output: str, exit_code: int, directory: Path, sources: set[str], *pieces: str) -> str:
    """Exit 2, the last line one ``error:`` line holding ``pieces``, no traceback, nothing but ``sources`` left."""
    assert exit_code == 2, r_output
    last = r_output.strip().splitlines()[-1]
    assert last.startswith("error: "), r_output
    for piece in pieces:
        assert piece in last, (piece, last)
    assert "Traceback" not in r_output and "Exception ignored" not in r_output, r_output
    assert {p.name for p in directory.iterdir()} == sources, sorted(p.name for p in directory.iterdir())
    return last


def npy_bytes(shape: tuple, dtype: str, data: bytes) -> bytes:
    """A ``.npy`` whose header declares ``shape`` and ``dtype``, followed by ``data`` (whatever its length)."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": np.dtype(dtype).str, "fortran_order": False,
                                               "shape": shape})
    return buf.getvalue() + data


def write_npz(path: Path, arrays: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for key, raw in arrays.items():
            z.writestr(key + ".npy", raw)
    return path


@pytest.fixture
def logits():
    rng = np.random.default_rng(0)
    return rng.normal(size=(3, 400, 10)).astype(np.float32), rng.integers(0, 10, 400)


# -- issue #25 item 3: the declared size against --max-bytes, the free disk and the file-size limit -------------
def test_expanded_stride0_tensor_is_refused_before_it_is_read(tmp_path):
    """One stored value viewed as (2, 50000, 10) (``expand``): a 1.5 KB file declaring 4 MB. Refused from its
    strides, naming file and key; a contiguous tensor of the same shape imports."""
    torch = pytest.importorskip("torch")
    torch.save({"logits": torch.zeros(1).expand(2, 50_000, 10)}, tmp_path / "p.pt")
    assert (tmp_path / "p.pt").stat().st_size < 4096
    r = run("import", "torch", tmp_path / "p.pt", "--kind", "logits", "--dataset", "mnist", "--out", tmp_path / "a.h5")
    assert_refused(r.output, r.exit_code, tmp_path, {"p.pt"}, "p.pt:logits", "expanded", "(0, 0, 0)")
    torch.save({"logits": torch.zeros(2, 50_000, 10)}, tmp_path / "q.pt")
    r = run("import", "torch", tmp_path / "q.pt", "--kind", "logits", "--dataset", "mnist", "--out", tmp_path / "b.h5")
    assert r.exit_code == 0, r.output


def _sparse_npy(path: Path, shape: tuple) -> Path:
    """A float32 ``.npy`` declaring ``shape``: only its header is written (a sparse file on disk). Its zeros are
    refused as probabilities at row 0, so an import whose size check were broken fails there, writing nothing
    (as logits, it would fill the disk)."""
    header = npy_bytes(shape, "<f4", b"")
    with open(path, "wb") as fh:
        fh.write(header)
        fh.truncate(len(header) + int(np.prod(shape, dtype=object)) * 4)
    assert os.stat(path).st_blocks * 512 < 2**20
    return path


def test_declared_size_over_max_bytes_is_refused_naming_the_file(tmp_path):
    """A sparse (20, 1e6, 100) float32 ``.npy`` (8 GB declared, a few KiB on disk): refused under --max-bytes 1G
    and under the default (32 GiB) when it declares 10^10 x 10 entries, before a value is read."""
    src = _sparse_npy(tmp_path / "big.npy", (20, 1_000_000, 100))
    r = run("import", "npy", src, "--kind", "probs", "--dataset", "x", "--max-bytes", "1G", "--out", tmp_path / "a.h5")
    assert_refused(r.output, r.exit_code, tmp_path, {"big.npy"}, "big.npy", "8000000000 bytes", "--max-bytes")
    huge = _sparse_npy(tmp_path / "huge.npy", (10**10, 10))
    r = run("import", "npy", huge, "--kind", "probs", "--dataset", "x", "--out", tmp_path / "a.h5")
    assert_refused(r.output, r.exit_code, tmp_path, {"big.npy", "huge.npy"}, "huge.npy", "400000000000 bytes")


def test_an_import_larger_than_the_free_disk_is_refused_before_writing(tmp_path):
    """Declared within --max-bytes and the free disk, but not twice (members, then the archive): refused with the
    sizes, nothing written."""
    free = shutil.disk_usage(tmp_path).free
    n = int(0.2 * free) // (4 * 1000)  # 3 members of float32 x 1000 classes: 60 % of the free disk
    src = _sparse_npy(tmp_path / "big.npy", (3, n, 1000))
    r = run("import", "npy", src, "--kind", "probs", "--dataset", "x", "--max-bytes", "1000T",
            "--out", tmp_path / "a.h5")
    assert_refused(r.output, r.exit_code, tmp_path, {"big.npy"}, "a.h5", "of disk", "free")


def test_declared_sizes_are_computed_without_wrapping_around():
    """2**32 members x 2**32 samples x 2**32 classes: a product in int64 wraps to 0 and would pass any limit."""
    from ubench.importers.plan import archive_bytes, check_declared

    assert archive_bytes(2**32, [2**32], 2**32, 4) == 2**98
    with pytest.raises(ImportFailure, match=str(2**98)):
        check_declared("x.npz:p", 2**32, {"test": 2**32}, 2**32, 4, 2**35)


def test_the_file_size_limit_is_checked_before_writing(tmp_path, logits):
    """Under ``ulimit -f`` below the archive's size: refused before a byte is written (it used to end in a
    traceback and SIGSEGV inside libhdf5)."""
    z, y = logits
    np.savez(tmp_path / "p.npz", logits=z, labels=y)
    proc = run_process(tmp_path, "import", "npz", "p.npz", "--kind", "logits", "--dataset", "x", "--out", "a.h5",
                       fsize=z.nbytes // 2)
    assert_refused(proc.stderr, proc.returncode, tmp_path, {"p.npz"}, "a.h5", "file-size limit", "ulimit -f")


def test_a_write_that_fails_half_way_is_one_line_and_leaves_nothing(tmp_path):
    """The declared probabilities fit the file-size limit but the archive (with labels and metadata) does not: the
    write fails while the archive is assembled (EFBIG inside libhdf5). One line naming the file and the reason,
    exit 2 (libhdf5 would crash in its exit handler: h5py#914), no archive, no partial directory, no temp file."""
    rng = np.random.default_rng(1)
    z = rng.normal(size=(3, 20_000, 10)).astype(np.float32)
    np.savez(tmp_path / "p.npz", logits=z, labels=rng.integers(0, 10, 20_000))
    proc = run_process(tmp_path, "import", "npz", "p.npz", "--kind", "logits", "--dataset", "x", "--out", "a.h5",
                       fsize=z.nbytes + 1)
    assert_refused(proc.stderr, proc.returncode, tmp_path, {"p.npz"}, "a.h5", "File too large (errno 27)")


# -- issue #25 item 12: npz bombs, labels checked before decompression, 10^10-entry shapes -----------------------
def test_a_compressed_member_is_streamed_in_chunks_not_held(tmp_path):
    """An (1, 160_000, 100) float32 member (64 MB) deflates to ~60 KB; importing it holds a few blocks in
    memory, not the member (tracemalloc sees numpy's buffers)."""
    n, c = 160_000, 100
    np.savez_compressed(tmp_path / "bomb.npz", logits=np.zeros((1, n, c), np.float32))
    assert (tmp_path / "bomb.npz").stat().st_size < n * c * 4 / 200
    plan = plan_npz([tmp_path / "bomb.npz"], kind="logits", dataset="x")
    tracemalloc.start()
    try:
        write_plan(plan, tmp_path / "a.h5")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < n * c * 4 / 4, peak
    with h5py.File(tmp_path / "a.h5", "r") as f:
        assert f["splits/test/probs"].shape == (1, n, c)
        assert f["splits/test/probs"][0, -1, 0] == np.float32(1 / c)


def test_a_zip_entry_longer_than_its_header_declares_is_refused_unread(tmp_path):
    """The .npy header says (10, 10) float32 but the zip entry holds 1,000 rows: refused from the zip directory
    (it used to import the first 10 rows and drop the rest silently)."""
    rows = softmax(np.random.default_rng(2).normal(size=(1000, 10)), axis=1).astype("<f4")
    write_npz(tmp_path / "p.npz", {"probs": npy_bytes((10, 10), "<f4", rows.tobytes())})
    r = run("import", "npz", tmp_path / "p.npz", "--kind", "probs", "--dataset", "x", "--out", tmp_path / "a.h5")
    assert_refused(r.output, r.exit_code, tmp_path, {"p.npz"}, "p.npz:probs", "declares shape (10, 10)",
                   "holds 40000 bytes")


def test_labels_are_checked_from_their_header_before_decompression(tmp_path, logits):
    """A 16M-entry labels array (128 MB, deflated to ~125 KB) for 400 samples: refused from its declared shape;
    memory stays far below the decompressed size."""
    z, _ = logits
    np.save(tmp_path / "p.npy", z)
    np.savez_compressed(tmp_path / "y.npz", labels=np.zeros(16_000_000, np.int64))
    tracemalloc.start()
    try:
        with pytest.raises(ImportFailure, match=r"y.npz:labels: 16000000 labels for 400 samples"):
            plan_npz([tmp_path / "p.npy"], kind="logits", dataset="x", labels=tmp_path / "y.npz")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, peak
    r = run("import", "npy", tmp_path / "p.npy", "--labels", tmp_path / "y.npz", "--kind", "logits",
            "--dataset", "x", "--out", tmp_path / "a.h5")
    assert_refused(r.output, r.exit_code, tmp_path, {"p.npy", "y.npz"}, "y.npz:labels", "16000000 labels")


@pytest.mark.parametrize("key, shape", [("logits", (10**10, 10)), ("labels", (10**10,))])
def test_ten_billion_entry_shapes_in_an_npz_are_one_line(tmp_path, key, shape):
    """An .npz whose header declares 10^10 entries over a few bytes of data: one line naming file and key (these
    ended in MemoryError tracebacks)."""
    arrays = {"logits": npy_bytes((400, 10), "<f4", np.zeros((400, 10), "<f4").tobytes()),
              "labels": npy_bytes((400,), "<i8", np.zeros(400, "<i8").tobytes())}
    arrays[key] = npy_bytes(shape, "<f4" if key == "logits" else "<i8", b"\0" * 64)
    write_npz(tmp_path / "p.npz", arrays)
    r = run("import", "npz", tmp_path / "p.npz", "--kind", "logits", "--dataset", "x", "--out", tmp_path / "a.h5")
    assert_refused(r.output, r.exit_code, tmp_path, {"p.npz"}, f"p.npz:{key}", "declares shape")


# -- issue #25 item 13: release files are read through the archives' safe layer ---------------------------------
def _release_with(tmp_path: Path, mutate) -> tuple[Path, Path]:
    rng = np.random.default_rng(3)
    y = rng.integers(0, 10, 50)
    probs = {"test": softmax(rng.normal(size=(5, 50, 10)), axis=2).astype(np.float32)}
    release = ovadia_release(tmp_path / "release.hdf5", {"vanilla": probs}, {"test": np.stack([y] * 5)})
    outside = tmp_path / "outside"
    outside.mkdir()
    with h5py.File(release, "a") as f:
        mutate(f, outside)
    return release, outside


def _external_link(f, outside):
    with h5py.File(outside / "other.h5", "w") as o:
        o["probs"] = np.full((5, 50, 10), 0.1, np.float32)
    f["vanilla/fashion_mnist/probs"] = h5py.ExternalLink(str(outside / "other.h5"), "/probs")


def _external_storage(f, outside):
    raw = outside / "raw.bin"
    raw.write_bytes(np.full((5, 50, 10), 0.1, np.float32).tobytes())
    f.create_dataset("vanilla/svhn/probs", shape=(5, 50, 10), dtype="<f4", external=[(str(raw), 0, 10_000)])


@pytest.mark.parametrize("mutate, hpath, check", [(_external_link, "/vanilla/fashion_mnist/probs", "external-link"),
                                                  (_external_storage, "/vanilla/svhn/probs", "external-storage")])
def test_ovadia_release_with_an_outside_reference_is_refused_unfollowed(tmp_path, mutate, hpath, check):
    """An external link or external raw storage in a release file: refused naming the HDF5 path; inotify sees no
    open of the file outside (plain h5py followed both and imported their values)."""
    release, outside = _release_with(tmp_path, mutate)
    with FileWatch([outside]) as watch:
        r = run("import", "ovadia", release, "--dataset", "cifar10", "--out", tmp_path / "out")
        opened = watch.events()
    assert_refused(r.output, r.exit_code, tmp_path, {"release.hdf5", "outside"}, "release.hdf5", hpath, check)
    assert opened == [], opened


# -- issue #28 item 2: probabilities claimed as logits ------------------------------------------------------------
def test_probabilities_claimed_as_logits_are_refused_with_a_probs_hint(tmp_path, logits):
    """Rows in [0, 1] summing to 1 are probabilities: as logits their softmax would be nearly uniform (T ~ 0.06
    later). Refused naming file, key and evidence, with the --kind probs hint; a member with one row off the
    simplex is logits and imports."""
    z, y = logits
    p = softmax(z.astype(np.float64), axis=2)
    np.savez(tmp_path / "p.npz", preds=p, labels=y)
    r = run("import", "npz", tmp_path / "p.npz", "--kind", "logits", "--dataset", "x", "--out", tmp_path / "a.h5")
    last = assert_refused(r.output, r.exit_code, tmp_path, {"p.npz"}, "p.npz:preds[0]", "all 400 rows",
                          "--kind probs")
    assert "sums to 1" in last and "[0, 1]" in last
    q = p.copy()
    q[2, 399, 0] += 0.5  # the last row of the last member is off the simplex: these may be logits
    np.savez(tmp_path / "q.npz", preds=q, labels=y)
    r = run("import", "npz", tmp_path / "q.npz", "--kind", "logits", "--dataset", "x", "--out", tmp_path / "b.h5")
    assert r.exit_code == 2 and "p.npz" not in r.output and "q.npz:preds[0]: claimed --kind logits" in r.output
    q[:, 399, 0] += 0.5  # now in every member
    np.savez(tmp_path / "q.npz", preds=q, labels=y)
    r = run("import", "npz", tmp_path / "q.npz", "--kind", "logits", "--dataset", "x", "--out", tmp_path / "b.h5")
    assert r.exit_code == 0, r.output


def test_the_simplex_is_judged_over_every_chunk_of_a_member(tmp_path):
    """Members longer than one conversion chunk (4096 rows): off the simplex in the first chunk only is logits
    (imported); on it in every chunk is probabilities (refused)."""
    p = softmax(np.random.default_rng(5).normal(size=(5000, 3)), axis=1)
    np.save(tmp_path / "on.npy", p)
    p[10, 0] += 0.5
    np.save(tmp_path / "off.npy", p)
    r = run("import", "npy", tmp_path / "on.npy", "--kind", "logits", "--dataset", "x", "--out", tmp_path / "a.h5")
    assert r.exit_code == 2 and "all 5000 rows are probabilities" in r.output, r.output
    r = run("import", "npy", tmp_path / "off.npy", "--kind", "logits", "--dataset", "x", "--out", tmp_path / "b.h5")
    assert r.exit_code == 0, r.output
