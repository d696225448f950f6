# SPDX-License-Identifier: MIT
"""The hostile-archive corpus: each case builds one bad file with raw h5py or byte surgery into a directory.

A case starts from a valid archive written by ``plain_writer`` (from SPEC.md) and breaks exactly one thing, and
says which finding the validator must report: its ``check``, its HDF5 ``path`` and a piece of its message (for
value problems, the first offending index). ``outside`` lists files outside the archive that the hostile file
points at; the tests assert with inotify that validating the archive never opens them.

``CASES`` maps a case name to its builder; ``conftest.py`` turns it into the ``hostile`` fixture.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from plain_writer import default_splits, write_plain_archive


@dataclass
class Built:
    """A hostile file and the finding it must produce."""

    path: Path
    check: str
    hpath: str
    match: str = ""
    outside: list[Path] = field(default_factory=list)


CASES: dict[str, Callable[[Path], Built]] = {}


def case(fn: Callable[[Path], Built]) -> Callable[[Path], Built]:
    CASES[fn.__name__.lstrip("_")] = fn
    return fn


def archive_dir(root: Path) -> Path:
    d = root / "archive"
    d.mkdir(exist_ok=True)
    return d


def outside_dir(root: Path) -> Path:
    d = root / "outside"
    d.mkdir(exist_ok=True)
    return d


def _outside_h5(root: Path) -> Path:
    """An innocent HDF5 file outside the archive, holding a dataset and a group a link could point at."""
    target = outside_dir(root) / "target.h5"
    with h5py.File(target, "w") as f:
        f["data"] = np.full((2, 12, 4), 0.25, dtype=np.float32)
        f.create_group("grp").attrs["ubench_kind"] = "members"
    return target


def _replace(f: h5py.File, hpath: str, **kwargs) -> None:
    del f[hpath]
    f.create_dataset(hpath, **kwargs)


def _with_test_split(root: Path, **changes) -> Path:
    """The default archive with fields of split 'test' replaced (``probs``, ``labels``, ``sample_ids``…)."""
    splits = default_splits()
    splits["test"].update(changes)
    return write_plain_archive(archive_dir(root) / "a.h5", splits=splits)


def _probs() -> np.ndarray:
    return default_splits()["test"]["probs"].copy()


# -- not a regular HDF5 file --------------------------------------------------------------------------------
@case
def _fifo(root: Path) -> Built:
    p = archive_dir(root) / "a.h5"
    os.mkfifo(p)  # opening it for reading would block forever: the validator must only lstat it
    return Built(p, "not-regular-file", "<file>", "not a regular file")


@case
def _symlink(root: Path) -> Built:
    real = write_plain_archive(outside_dir(root) / "real.h5")
    p = archive_dir(root) / "a.h5"
    p.symlink_to(real)
    return Built(p, "not-regular-file", "<file>", "symbolic link", outside=[real])


@case
def _directory(root: Path) -> Built:
    p = archive_dir(root) / "a.h5"
    p.mkdir()
    return Built(p, "not-regular-file", "<file>", "not a regular file")


@case
def _user_block(root: Path) -> Built:
    p = write_plain_archive(archive_dir(root) / "a.h5", userblock_size=512)
    return Built(p, "user-block", "<file>", "512-byte user block")


@case
def _not_hdf5(root: Path) -> Built:
    p = archive_dir(root) / "a.h5"
    p.write_bytes(b"PK\x03\x04" + bytes(2000))
    return Built(p, "not-hdf5", "<file>", "no HDF5 signature")


@case
def _truncated(root: Path) -> Built:
    p = write_plain_archive(archive_dir(root) / "a.h5")
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    return Built(p, "hdf5-open", "<file>", "truncated")


# -- links and storage that reach outside the archive ---------------------------------------------------------
@case
def _external_link_probs(root: Path) -> Built:
    target = _outside_h5(root)

    def mutate(f):
        del f["splits/test/probs"]
        f["splits/test/probs"] = h5py.ExternalLink(str(target), "/data")

    p = write_plain_archive(archive_dir(root) / "a.h5", mutate=mutate)
    return Built(p, "external-link", "/splits/test/probs", "other files", outside=[target])


@case
def _external_link_group(root: Path) -> Built:
    """An external link where a group belongs (/members): following it to check the group's kind opens the target."""
    target = _outside_h5(root)

    def mutate(f):
        del f["members"]
        f["members"] = h5py.ExternalLink(str(target), "/grp")

    p = write_plain_archive(archive_dir(root) / "a.h5", mutate=mutate)
    return Built(p, "external-link", "/members", "other files", outside=[target])


@case
def _soft_link(root: Path) -> Built:
    def mutate(f):
        f["splits/test/probs_real"] = f["splits/test/probs"][()]
        del f["splits/test/probs"]
        f["splits/test/probs"] = h5py.SoftLink("/splits/test/probs_real")

    p = write_plain_archive(archive_dir(root) / "a.h5", mutate=mutate)
    return Built(p, "soft-link", "/splits/test/probs", "soft links")


@case
def _vds_outside(root: Path) -> Built:
    target = _outside_h5(root)

    def mutate(f):
        del f["splits/test/probs"]
        layout = h5py.VirtualLayout((2, 12, 4), np.float32)
        layout[:] = h5py.VirtualSource(str(target), "/data", shape=(2, 12, 4))
        f["splits/test"].create_virtual_dataset("probs", layout)

    p = write_plain_archive(archive_dir(root) / "a.h5", mutate=mutate)
    return Built(p, "virtual-dataset", "/splits/test/probs", "virtual datasets", outside=[target])


@case
def _vds_self(root: Path) -> Built:
    """A virtual dataset whose source file is '.', i.e. the archive itself."""

    def mutate(f):
        f["splits/test/probs_src"] = f["splits/test/probs"][()]
        del f["splits/test/probs"]
        layout = h5py.VirtualLayout((2, 12, 4), np.float32)
        layout[:] = h5py.VirtualSource(".", "/splits/test/probs_src", shape=(2, 12, 4))
        f["splits/test"].create_virtual_dataset("probs", layout)

    p = write_plain_archive(archive_dir(root) / "a.h5", mutate=mutate)
    return Built(p, "virtual-dataset", "/splits/test/probs", "virtual datasets")


@case
def _external_storage(root: Path) -> Built:
    raw = outside_dir(root) / "raw.bin"
    _probs().astype("<f4").tofile(raw)

    def mutate(f):
        del f["splits/test/probs"]
        f["splits/test"].create_dataset("probs", shape=(2, 12, 4), dtype="<f4",
                                        external=[(str(raw), 0, h5py.h5f.UNLIMITED)])

    p = write_plain_archive(archive_dir(root) / "a.h5", mutate=mutate)
    return Built(p, "external-storage", "/splits/test/probs", "external raw storage", outside=[raw])


# -- filters -------------------------------------------------------------------------------------------------
def _filtered_probs(filter_id: int) -> Callable[[h5py.File], None]:
    """Replace /splits/test/probs by one chunk whose pipeline holds ``filter_id`` (marked optional so HDF5 accepts
    an unavailable filter id in the pipeline)."""

    def mutate(f):
        data = f["splits/test/probs"][()]
        del f["splits/test/probs"]
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk(data.shape)
        dcpl.set_filter(filter_id, h5py.h5z.FLAG_OPTIONAL)
        space = h5py.h5s.create_simple(data.shape)
        dsid = h5py.h5d.create(f["splits/test"].id, b"probs", h5py.h5t.IEEE_F32LE, space, dcpl=dcpl)
        # write_direct_chunk with filter_mask 0 records the chunk as passed through every filter, so reading it
        # needs the filter itself (HDF5 would look for a plugin if plugins were enabled).
        dsid.write_direct_chunk((0,) * data.ndim, np.ascontiguousarray(data, dtype="<f4").tobytes(), filter_mask=0)

    return mutate


@case
def _filter_lzf(root: Path) -> Built:
    """Filter 32000 is registered (h5py registers lzf under it) but is not in the spec's list."""
    p = write_plain_archive(archive_dir(root) / "a.h5", mutate=_filtered_probs(32000))
    return Built(p, "filter", "/splits/test/probs", "filter id 32000")


@case
def _filter_unregistered(root: Path) -> Built:
    """Filter 31999 is registered nowhere: reading the data would make HDF5 search for a plugin."""
    p = write_plain_archive(archive_dir(root) / "a.h5", mutate=_filtered_probs(31999))
    return Built(p, "filter", "/splits/test/probs", "filter id 31999")


# -- sizes ---------------------------------------------------------------------------------------------------
_BIG = (2, 2**21, 1024)  # float32: 16 GiB declared (M = 2 like the other splits)


def _declared_only(chunked: bool) -> Callable[[h5py.File], None]:
    def mutate(f):
        g = f["splits"].create_group("huge")
        g.attrs.update({"ubench_kind": "split", "role": "ood", "dataset": "void", "n_samples": np.int64(_BIG[1])})
        g.create_dataset("probs", shape=_BIG, dtype="<f4", chunks=(1, 1024, 1024) if chunked else None)

    return mutate


@case
def _declared_16gib_chunked(root: Path) -> Built:
    p = write_plain_archive(archive_dir(root) / "a.h5", mutate=_declared_only(True))
    return Built(p, "missing-storage", "/splits/huge/probs", "but only 0 chunks are stored")


@case
def _declared_16gib_contiguous(root: Path) -> Built:
    p = write_plain_archive(archive_dir(root) / "a.h5", mutate=_declared_only(False))
    return Built(p, "missing-storage", "/splits/huge/probs", "stores only 0")


@case
def _gzip_bomb(root: Path) -> Built:
    """All-zero float32 probs (4 MB declared) under gzip 9: about 1000:1, far above the 200:1 limit."""

    def mutate(f):
        g = f["splits"].create_group("bomb")
        g.attrs.update({"ubench_kind": "split", "role": "ood", "dataset": "zeros", "n_samples": np.int64(250_000)})
        g.create_dataset("probs", shape=(2, 250_000, 4), dtype="<f4", chunks=(1, 250_000, 4),
                         compression="gzip", compression_opts=9, fillvalue=0.0, data=np.zeros((2, 250_000, 4), "<f4"))

    p = write_plain_archive(archive_dir(root) / "a.h5", mutate=mutate)
    return Built(p, "compression-ratio", "/splits/bomb/probs", "decompression bomb")


# -- values (the message names the first offending index) -----------------------------------------------------
@case
def _nan(root: Path) -> Built:
    p = _probs()
    p[1, 5, 2] = np.nan
    p[1, 9, 0] = np.nan
    return Built(_with_test_split(root, probs=p), "finite", "/splits/test/probs", "member 1, sample 5, class 2")


@case
def _inf(root: Path) -> Built:
    p = _probs()
    p[0, 3, 1] = np.inf
    return Built(_with_test_split(root, probs=p), "finite", "/splits/test/probs", "member 0, sample 3, class 1")


@case
def _negative(root: Path) -> Built:
    p = _probs()
    p[1, 4, 0] -= 0.5  # the row still sums to 1: only the range check can catch it
    p[1, 4, 1] += 0.5
    return Built(_with_test_split(root, probs=p), "range", "/splits/test/probs", "member 1, sample 4, class 0")


@case
def _unnormalised(root: Path) -> Built:
    p = _probs()
    p[0, 7] *= 0.9
    p[1, 2] *= 1.001  # within [0, 1] but sums to 1.001 (tolerance ~1e-4): a later member, an earlier sample
    return Built(_with_test_split(root, probs=p), "row-sum", "/splits/test/probs", "member 0, sample 7 sums to 0.9")


@case
def _label_too_large(root: Path) -> Built:
    y = default_splits()["test"]["labels"].copy()
    y[6], y[10] = 4, 7
    return Built(_with_test_split(root, labels=y), "label-range", "/splits/test/labels", "found 4 at index 6")


@case
def _label_negative(root: Path) -> Built:
    y = default_splits()["test"]["labels"].copy()
    y[3] = -1
    return Built(_with_test_split(root, labels=y), "label-range", "/splits/test/labels", "found -1 at index 3")


@case
def _duplicate_ids(root: Path) -> Built:
    ids = np.arange(100, 112, dtype=np.int64)
    ids[9] = ids[2]
    ids[11] = ids[10]
    return Built(_with_test_split(root, sample_ids=ids), "unique", "/splits/test/sample_ids", "102 repeats at index 9")


# -- ranks and dtypes ----------------------------------------------------------------------------------------
@case
def _float16_probs(root: Path) -> Built:
    return Built(_with_test_split(root, probs=_probs().astype(np.float16)), "dtype", "/splits/test/probs", "float16")


@case
def _int_probs(root: Path) -> Built:
    p = np.zeros((2, 12, 4), dtype=np.int32)
    p[:, :, 0] = 1
    return Built(_with_test_split(root, probs=p), "dtype", "/splits/test/probs", "int32")


@case
def _probs_2d(root: Path) -> Built:
    def mutate(f):
        _replace(f, "splits/test/probs", data=_probs()[0])

    p = write_plain_archive(archive_dir(root) / "a.h5", mutate=mutate)
    return Built(p, "rank", "/splits/test/probs", "must have 3 dimensions")


@case
def _float_labels(root: Path) -> Built:
    y = default_splits()["test"]["labels"].astype(np.float64)
    return Built(_with_test_split(root, labels=y), "dtype", "/splits/test/labels", "float64")


@case
def _labels_2d(root: Path) -> Built:
    y = default_splits()["test"]["labels"].reshape(12, 1)
    return Built(_with_test_split(root, labels=y), "rank", "/splits/test/labels", "must have 1 dimensions")


# -- integrity -----------------------------------------------------------------------------------------------
@case
def _fletcher32_flipped(root: Path) -> Built:
    """A fletcher32-protected probs chunk with one byte of its data flipped in the file."""
    splits = default_splits()
    splits["test"]["options"] = {"chunks": (1, 12, 4), "fletcher32": True}
    p = write_plain_archive(archive_dir(root) / "a.h5", splits=splits)
    with h5py.File(p, "r") as f:
        info = f["splits/test/probs"].id.get_chunk_info(1)  # member 1's chunk: offset and size in the file
    with open(p, "r+b") as fh:
        fh.seek(info.byte_offset + 17)
        b = fh.read(1)
        fh.seek(info.byte_offset + 17)
        fh.write(bytes([b[0] ^ 0x01]))  # lowest mantissa bit: the row sums stay within tolerance
    return Built(p, "hdf5-read", "/splits/test/probs", "reading the data failed")


# --- issue 16 item 11 (contract) ---------------------------------------------------------------------------
@case
def _split_name_trailing_newline(root: Path) -> Built:
    """'test\\n': the split-name pattern ended in '$', which also matches before a final newline."""
    splits = default_splits()
    splits["test\n"] = splits.pop("test")
    p = write_plain_archive(archive_dir(root) / "a.h5", splits=splits)
    return Built(p, "name", "/splits/test\n", "split names must match")


@case
def _shift_duplicate_kind_intensity(root: Path) -> Built:
    """Two shift splits with one (shift_kind, shift_intensity), 15 and 15.0: validate passed them and score
    failed with an internal error."""
    splits = default_splits()
    splits["rot_15_again"] = dict(splits["rot_15"], shift_intensity=15.0)
    p = write_plain_archive(archive_dir(root) / "a.h5", splits=splits)
    return Built(p, "shift-duplicate", "/splits/rot_15_again", "'rot_15' and 'rot_15_again'")


# --- issue 16 item 12 (fid-report) ---------------------------------------------------------------------------------
# Valid archives that attack the scorer, not the reader: the validator rightly accepts them, so they are not in
# CASES. Each builder writes the hostile file and its honest twin; tests/scoring/test_score.py asserts that both
# score the same (to ``rel``).

@dataclass
class ScoredTwin:
    """A spec-valid hostile file, the honest file it must score exactly like, the relative tolerance, and the
    protocol preset to score both under."""

    path: Path
    twin: Path
    rel: float
    what: str
    protocol: str = "pitfalls"


SCORED_CASES: dict[str, Callable[[Path], ScoredTwin]] = {}


def scored_case(fn: Callable[[Path], ScoredTwin]) -> Callable[[Path], ScoredTwin]:
    SCORED_CASES[fn.__name__.lstrip("_")] = fn
    return fn


def _inflate(splits: dict, factor: float) -> dict:
    return {k: {**s, "probs": s["probs"] * s["probs"].dtype.type(factor)} for k, s in splits.items()}


@scored_case
def _inflated_rows_float64(root: Path) -> ScoredTwin:
    """Every row of every split scaled by 1 + 0.9 * (1e-4 + C * 2**-23): within the spec's row-sum tolerance, it
    adds probability mass to the true class of every sample (NLL improves by ~9e-5 at C = 4)."""
    c = 4
    honest = {k: {**s, "probs": s["probs"].astype(np.float64) / s["probs"].astype(np.float64).sum(-1, keepdims=True)}
              for k, s in default_splits(c=c).items()}
    twin = write_plain_archive(archive_dir(root) / "twin.h5", n_classes=c, splits=honest)
    hostile = write_plain_archive(archive_dir(root) / "a.h5", n_classes=c,
                                  splits=_inflate(honest, 1 + 0.9 * (1e-4 + c * 2.0**-23)))
    return ScoredTwin(hostile, twin, 1e-12, "float64 rows inflated within tolerance")


@scored_case
def _inflated_rows_100k_classes(root: Path) -> ScoredTwin:
    """The issue's figure: at C = 100,000 the tolerance is 0.012, so float32 rows scaled by 1.0119 pass
    validation and improve NLL by 0.0118. Renormalised in float64 and rounded back to float32, they differ from
    the twin by float32 rounding only."""
    c, n = 100_000, 6
    rng = np.random.default_rng(5)
    z = rng.normal(0, 4, (1, n, c))
    p = np.exp(z - z.max(-1, keepdims=True))
    p = (p / p.sum(-1, keepdims=True)).astype(np.float32)
    y = rng.integers(0, c, n).astype(np.int64)
    p[0, np.arange(n), y] += np.float32(0.3)  # make the true class likely, then renormalise in float64
    p = (p / p.astype(np.float64).sum(-1, keepdims=True)).astype(np.float32)
    honest = {"test": dict(role="in_domain", dataset="digits", probs=p, labels=y,
                           sample_ids=np.arange(n, dtype=np.int64))}
    twin = write_plain_archive(archive_dir(root) / "twin.h5", n_classes=c, splits=honest)
    hostile = write_plain_archive(archive_dir(root) / "a.h5", n_classes=c,
                                  splits=_inflate(honest, 1 + 0.99 * (1e-4 + c * 2.0**-23)))
    # no temperature scaling: fitting it over 100,000 classes takes ~15 s and adds nothing to this check
    return ScoredTwin(hostile, twin, 1e-6, "float32 rows at C = 100,000 inflated by 1.2 %", protocol="shift")


# --- issue 16 items 1, 5, 9 (text-safety) ---
# Uploads whose strings or numbers attack what ubench writes (the terminal, the HTML report, the leaderboard page,
# the figures) rather than the reader: the reader accepts them (the invalid UTF-8 ones may get a finding once the
# reader decodes strictly, which the tests allow), so they are not in CASES. ``OUTPUT_CASES`` maps a name to
# ``builder(directory) -> path``; tests/test_cli_score.py and tests/test_cli_archive.py run them through the CLI.
import json  # noqa: E402 - this block's own imports, kept inside it for merges
from plain_writer import softmax  # noqa: E402

#: Clear screen, set the window title (OSC 0 ... BEL), carriage return, a newline that would forge a line,
#: a right-to-left override and a C1 CSI: every string of ``_every_string_attacks`` carries it.
TERMINAL_ATTACK = "\x1b[2J\x1b]0;pwned\x07\r\nforged line\u202eevil\x9b31m"
#: A file name with the same attacks and an invalid UTF-8 byte (0xff), as bytes (``os.fsencode`` of a path).
ATTACK_FILE_NAME = b"up\x1b]0;pwned\x07\nforged line \xff\xe2\x80\xae.h5"

OUTPUT_CASES: dict[str, Callable[[Path], Path]] = {}


def output_case(fn: Callable[[Path], Path]) -> Callable[[Path], Path]:
    OUTPUT_CASES[fn.__name__.lstrip("_")] = fn
    return fn


def _with_ids(splits: dict) -> dict:
    """Sample ids on every split, so a reference can be written from the archive (``ubench reference``)."""
    for s in splits.values():
        s["sample_ids"] = np.arange(np.asarray(s["probs"]).shape[1], dtype=np.int64)
    return splits


@output_case
def _every_string_attacks(root: Path) -> Path:
    """Method, model, dataset, writer, description, config, class names, a split's dataset, the shift kind, a
    /scalability key and value all carry TERMINAL_ATTACK."""
    a = TERMINAL_ATTACK
    splits = _with_ids(default_splits())
    splits["noise"]["dataset"] = "noise" + a
    splits["rot_15"]["shift_kind"] = "rotate" + a

    def mutate(f):
        f["scalability"].attrs["key" + a] = "value" + a

    return write_plain_archive(
        archive_dir(root) / "a.h5", splits=splits, class_names=[f"class{i}{a}" for i in range(4)], mutate=mutate,
        root={"method": "method" + a, "model": "model" + a, "dataset": "digits" + a, "writer": "writer" + a,
              "description": "description" + a, "config": json.dumps({"key" + a: "value" + a})})


@output_case
def _split_name_attacks(root: Path) -> Path:
    """An HDF5 group under /splits named with TERMINAL_ATTACK: the validator's finding names it."""

    def mutate(f):
        f["splits"].create_group("s" + TERMINAL_ATTACK)

    return write_plain_archive(archive_dir(root) / "a.h5", mutate=mutate)


@output_case
def _invalid_utf8_method(root: Path) -> Path:
    """``method`` written as h5py's UTF-8 string type from raw bytes holding 0xff 0xfe (h5py decodes it with
    surrogateescape, so it reaches the outputs as lone surrogates)."""

    def mutate(f):
        del f.attrs["method"]
        f.attrs.create("method", b"method\xff\xfe", dtype=h5py.string_dtype("utf-8"))

    return write_plain_archive(archive_dir(root) / "a.h5", splits=_with_ids(default_splits()), mutate=mutate)


@output_case
def _attack_file_name(root: Path) -> Path:
    """A valid archive under ATTACK_FILE_NAME (returned as the ``os.fsdecode``'d path, surrogates and all)."""
    plain = write_plain_archive(archive_dir(root) / "plain.h5", splits=_with_ids(default_splits()))
    target = os.path.join(os.fsencode(archive_dir(root)), ATTACK_FILE_NAME)
    os.rename(plain, target)
    return Path(os.fsdecode(target))


def _shift_split(kind: str, intensity: float, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return dict(role="shift", dataset="digits", shift_kind=kind, shift_intensity=intensity,
                probs=softmax(rng.normal(0, 2, (2, 5, 4))).astype("<f4"), labels=rng.integers(0, 4, 5))


@output_case
def _mathtext_kind(root: Path) -> Path:
    """A shift kind that matplotlib's mathtext cannot parse (it raised ParseSyntaxException in ``--html``)."""
    kind = r"$\frac{\frac{a}{b}}{c}$" + "$x^{" * 50
    splits = default_splits()
    splits["rot_15"]["shift_kind"] = kind
    splits["rot_30"] = _shift_split(kind, 30, 1)
    return write_plain_archive(archive_dir(root) / "a.h5", splits=splits)


@output_case
def _huge_intensity(root: Path) -> Path:
    """Shift intensities of +1e308 and -1e308 (finite, so valid): the tick locator's range overflowed."""
    splits = default_splits()
    splits["rot_15"]["shift_intensity"] = 1e308
    splits["rot_low"] = _shift_split("rotate", -1e308, 1)
    return write_plain_archive(archive_dir(root) / "a.h5", splits=splits)


@output_case
def _long_kind(root: Path) -> Path:
    """A 1,000-character shift kind on two splits, the longest a name may be since the reader caps names at 1 KiB
    (issue #16 item 3; a 100,000-character kind made ``--html`` write a 16 MB page, and is now a reader finding)."""
    kind = "k" * 1_000
    splits = default_splits()
    splits["rot_15"]["shift_kind"] = kind
    splits["rot_30"] = _shift_split(kind, 30, 1)
    return write_plain_archive(archive_dir(root) / "a.h5", splits=splits)


@output_case
def _many_ood_splits(root: Path) -> Path:
    """996 OOD splits (999 splits, the reader allows 1000): ``--html`` drew a figure for each, 354 s."""
    rng = np.random.default_rng(2)
    splits = default_splits()
    for i in range(996):
        splits[f"ood_{i:03d}"] = dict(role="ood", dataset="noise", probs=softmax(rng.normal(0, 1, (2, 7, 4))))
    return write_plain_archive(archive_dir(root) / "a.h5", splits=splits)


@output_case
def _many_shift_kinds(root: Path) -> Path:
    """60 shift kinds on one intensity grid (1, 2): one figure with a line and a legend entry per kind."""
    splits = default_splits()
    del splits["rot_15"]
    for i in range(60):
        for level in (1, 2):
            splits[f"kind{i:02d}_{level}"] = _shift_split(f"kind{i:02d}", level, 100 * i + level)
    return write_plain_archive(archive_dir(root) / "a.h5", splits=splits)


# --- issue 16 items 1, 3, 4, 8, 10 (reader-limits) ---------------------------------------------------------
# Each builder takes sizes as keywords so that bench-style measurements (issue #16's before/after figures) can
# build the same class of file at full size in /tmp; the corpus uses the small defaults.
def _patch_vlen_to_element0(path: Path, hpath: str) -> None:
    """Make every element of a contiguous variable-length dataset reference element 0's heap object.

    In the file each element is a 16-byte descriptor (4-byte length, 8-byte heap collection address, 4-byte
    object index); copying element 0's descriptor over the others makes M elements decode to M copies of one
    heap object while the file grows by nothing."""
    with h5py.File(path, "r") as f:
        ds = f[hpath]
        offset, n = ds.id.get_offset(), ds.shape[0]
    with open(path, "r+b") as fh:
        fh.seek(offset)
        first = fh.read(16)
        fh.seek(offset)
        fh.write(first * n)


def build_shared_heap_info(path: Path, *, members: int = 300, info_bytes: int = 60_000) -> Path:
    """``/members/info`` of ``members`` entries that all reference one ``info_bytes`` JSON object (valid JSON,
    so only a budget on decoded bytes can refuse it)."""
    big = '{"pad": "' + "x" * (info_bytes - 11) + '"}'

    def mutate(f):
        del f["members/info"]
        f["members"].create_dataset("info", data=np.array([big] + ["{}"] * (members - 1), dtype=object),
                                    dtype=h5py.string_dtype())

    write_plain_archive(path, splits=default_splits(m=members, n=3), mutate=mutate)
    _patch_vlen_to_element0(path, "members/info")
    return path


def build_long_fixed_classes(path: Path, *, n_classes: int = 4, name_bytes: int = 2 * 2**20, seed: int = 0) -> Path:
    """``/classes`` of fixed-length names of ``name_bytes`` each, gzip'd: runs of one letter with a random letter
    every ~256 bytes compress about 100:1, under the 200:1 bomb limit."""
    rng = np.random.default_rng(seed)
    names = []
    for _ in range(n_classes):
        b = np.full(name_bytes, ord("a"), dtype=np.uint8)
        pos = rng.integers(0, name_bytes, name_bytes // 256)
        b[pos] = rng.integers(ord("a"), ord("z") + 1, pos.size)
        names.append(b.tobytes())
    splits = default_splits(c=n_classes)

    def mutate(f):
        f.create_dataset("classes", data=np.array(names, dtype=f"S{name_bytes}"), chunks=(1,), compression="gzip")

    return write_plain_archive(path, n_classes=n_classes, splits=splits, mutate=mutate)


def build_tiny_chunks(path: Path, *, n: int = 16_400) -> Path:
    """probs (2, n, 2) float32 stored in one-element chunks: 4 bytes of data per chunk."""
    splits = default_splits(n=n, c=2)
    splits["test"]["options"] = {"chunks": (1, 1, 1)}
    return write_plain_archive(path, n_classes=2, splits=splits)


def build_big_endian(path: Path) -> Path:
    """A valid archive whose probs, labels and ids are all big-endian (SPEC.md allows ``>f4``/``>f8``)."""
    splits = default_splits(m=3, n=40)
    for s in splits.values():
        s["probs"] = np.asarray(s["probs"]).astype(np.asarray(s["probs"]).dtype.newbyteorder(">"))
        for key in ("labels", "sample_ids"):
            if s.get(key) is not None:
                s[key] = np.asarray(s[key]).astype(np.asarray(s[key]).dtype.newbyteorder(">"))
    return write_plain_archive(path, splits=splits)


def build_vlen_method(path: Path, *, size: int = 2 * 2**20 + 1) -> Path:
    """A variable-length ``method`` of ``size`` bytes: stored as a 16-byte heap reference."""
    return write_plain_archive(path, root={"method": "m" * size})


def build_many_attributes(path: Path, *, count: int = 300) -> Path:
    def mutate(f):
        for i in range(count):
            f["scalability"].attrs[f"metric_{i:06d}"] = np.float64(i)

    return write_plain_archive(path, mutate=mutate)


def build_deep_nesting(path: Path, *, depth: int = 20, name_bytes: int = 8) -> Path:
    """A chain of ``depth`` nested groups under /extra (objects the spec does not name are otherwise ignored)."""

    def mutate(f):
        g = f.create_group("extra")
        for i in range(depth):
            g = g.create_group(f"{i:0{name_bytes}d}")

    return write_plain_archive(path, mutate=mutate)


@case
def _utf8_invalid_method(root: Path) -> Built:
    """h5py decodes variable-length UTF-8 with surrogateescape: the 0xff arrives as '\\udcff' and used to pass."""
    p = write_plain_archive(archive_dir(root) / "a.h5",
                            mutate=lambda f: f.attrs.create("method", b"deep\xffensemble", dtype=h5py.string_dtype()))
    return Built(p, "encoding", "/", "'method': byte 0xff at byte offset 4")


@case
def _utf8_invalid_class_name(root: Path) -> Built:
    names = [b"cat", b"dog", b"b\xc3ird", b"fish"]  # 0xc3 starts a 2-byte sequence that 'i' does not continue
    p = write_plain_archive(archive_dir(root) / "a.h5",
                            mutate=lambda f: f.create_dataset("classes", data=np.array(names, dtype="S4")))
    return Built(p, "encoding", "/classes", "string at index 2: byte 0xc3 at byte offset 1")


@case
def _utf8_invalid_split_name(root: Path) -> Built:
    """A group name that is not UTF-8: h5py lists it as bytes, which used to end in a TypeError."""

    def mutate(f):
        f["splits"].move("noise", b"nois\xe9")

    p = write_plain_archive(archive_dir(root) / "a.h5", mutate=mutate)
    return Built(p, "encoding", "/splits/nois\\xe9", "byte 0xe9 at byte offset 4")


@case
def _shared_heap_member_info(root: Path) -> Built:
    return Built(build_shared_heap_info(archive_dir(root) / "a.h5"), "string-budget", "/members/info",
                 "strings up to index 279")


@case
def _long_fixed_class_names(root: Path) -> Built:
    return Built(build_long_fixed_classes(archive_dir(root) / "a.h5"), "string-length", "/classes",
                 "fixed-length strings of 2097152 bytes")


@case
def _tiny_chunks(root: Path) -> Built:
    return Built(build_tiny_chunks(archive_dir(root) / "a.h5"), "chunk-size", "/splits/test/probs",
                 "65600 chunks of only 4 bytes")


@case
def _vlen_method_over_attr_cap(root: Path) -> Built:
    return Built(build_vlen_method(archive_dir(root) / "a.h5"), "attribute-size", "/",
                 "'method' holds 2097153 bytes once read")


@case
def _many_attributes(root: Path) -> Built:
    return Built(build_many_attributes(archive_dir(root) / "a.h5"), "attribute-count", "/scalability",
                 "303 attributes")


@case
def _deep_nesting(root: Path) -> Built:
    return Built(build_deep_nesting(archive_dir(root) / "a.h5"), "depth",
                 "/extra/" + "/".join(f"{i:08d}" for i in range(16)), "more than 16 levels")


@case
def _long_link_name(root: Path) -> Built:
    p = write_plain_archive(archive_dir(root) / "a.h5", mutate=lambda f: f.create_group("n" * 5000))
    return Built(p, "name-length", "/" + "n" * 64 + "…", "5000 bytes")


@case
def _empty_attribute(root: Path) -> Built:
    """An ``h5py.Empty`` (null dataspace) attribute: libhdf5's own text was 'Unspecified error in
    H5Aget_storage_size' (issue #25 item 15)."""
    p = write_plain_archive(archive_dir(root) / "a.h5",
                            mutate=lambda f: f["splits/test"].attrs.__setitem__("role", h5py.Empty("f4")))
    return Built(p, "attribute-empty", "/splits/test", "attribute 'role' has no value")


#: Valid files of a class that used to break scoring (not validation): they must validate and score.
VALID_CASES: dict[str, Callable[[Path], Path]] = {
    "big_endian": lambda root: build_big_endian(archive_dir(root) / "a.h5"),
}


# --- format 1.1 (issue #31): logits and method scores --------------------------------------------------------------
def v11_splits() -> dict:
    """``default_splits`` with logits whose softmax is each split's probs and two method scores of opposite
    directions (format 1.1, SPEC.md §4.3-4.4)."""
    rng = np.random.default_rng(7)
    splits = default_splits()
    for s in splits.values():
        m, n, c = np.asarray(s["probs"]).shape
        z = rng.normal(0, 3, (m, n, c)).astype("<f4")
        s["logits"], s["probs"] = z, softmax(z).astype(np.asarray(s["probs"]).dtype)
        s["scores"] = {"variance": (rng.random(n), "uncertainty"),
                       "density": (rng.normal(size=n).astype("<f4"), "confidence")}
    return splits


def _v11_with(root: Path, split: str = "test", mutate=None, **changes) -> Path:
    splits = v11_splits()
    splits[split].update(changes)
    return write_plain_archive(archive_dir(root) / "a.h5", splits=splits, mutate=mutate)


def _test_logits() -> np.ndarray:
    return v11_splits()["test"]["logits"].copy()


def _test_scores(**changes) -> dict:
    scores = dict(v11_splits()["test"]["scores"])
    scores.update(changes)
    return scores


@case
def _logits_nan(root: Path) -> Built:
    z = _test_logits()
    z[1, 5, 2] = np.nan
    z[1, 9, 0] = np.inf
    return Built(_v11_with(root, logits=z), "finite", "/splits/test/logits", "member 1, sample 5, class 2")


@case
def _logits_not_the_probs(root: Path) -> Built:
    """Logits whose softmax is not probs (one logit moved by 1 at member 0, sample 4): energy would describe
    another model than the probabilities scored."""
    z = _test_logits()
    z[0, 4, 1] += 1.0
    z[1, 8, 0] += 1.0
    return Built(_v11_with(root, logits=z), "logits-softmax", "/splits/test/logits", "member 0, sample 4")


@case
def _logits_float16_far_off(root: Path) -> Built:
    """float16 logits get the looser tolerance of half precision, but not 0.05 of probability."""
    z = _test_logits()
    z[1, 3] = 0.0  # softmax uniform (0.25) where probs are far from uniform
    return Built(_v11_with(root, logits=z.astype("<f2")), "logits-softmax", "/splits/test/logits",
                 "member 1, sample 3")


@case
def _logits_shape(root: Path) -> Built:
    return Built(_v11_with(root, logits=_test_logits()[:, :, :3]), "shape", "/splits/test/logits",
                 "differs from probs")


@case
def _logits_int(root: Path) -> Built:
    return Built(_v11_with(root, logits=np.zeros((2, 12, 4), np.int32)), "dtype", "/splits/test/logits", "int32")


@case
def _logits_in_one_split_only(root: Path) -> Built:
    return Built(_v11_with(root, split="rot_15", logits=None), "logits-missing", "/splits/rot_15",
                 "logits are stored for every split or for none")


@case
def _score_nan(root: Path) -> Built:
    v = v11_splits()["test"]["scores"]["variance"][0].copy()
    v[7] = np.nan
    v[9] = np.inf
    return Built(_v11_with(root, scores=_test_scores(variance=(v, "uncertainty"))), "finite",
                 "/splits/test/scores/variance", "at sample 7")


@case
def _score_length(root: Path) -> Built:
    return Built(_v11_with(root, scores=_test_scores(density=(np.zeros(11), "confidence"))), "shape",
                 "/splits/test/scores/density", "11 entries but n_samples is 12")


@case
def _score_2d(root: Path) -> Built:
    return Built(_v11_with(root, scores=_test_scores(density=(np.zeros((12, 1)), "confidence"))), "rank",
                 "/splits/test/scores/density", "must have 1 dimensions")


@case
def _score_int(root: Path) -> Built:
    return Built(_v11_with(root, scores=_test_scores(density=(np.zeros(12, np.int64), "confidence"))), "dtype",
                 "/splits/test/scores/density", "int64")


@case
def _score_direction(root: Path) -> Built:
    return Built(_v11_with(root, scores=_test_scores(density=(np.zeros(12), "higher"))), "value",
                 "/splits/test/scores/density", "'higher'")


@case
def _score_without_direction(root: Path) -> Built:
    def mutate(f):
        del f["splits/test/scores/variance"].attrs["direction"]

    return Built(_v11_with(root, mutate=mutate), "missing-attribute", "/splits/test/scores/variance", "direction")


@case
def _score_reserved_name(root: Path) -> Built:
    """'energy' is what a scorer derives from the logits; a method score of that name would shadow it."""
    splits = v11_splits()
    for s in splits.values():
        s["scores"] = {"energy": (np.zeros(np.asarray(s["probs"]).shape[1]), "uncertainty")}
    return Built(write_plain_archive(archive_dir(root) / "a.h5", splits=splits), "name",
                 "/splits/noise/scores/energy", "max_logit")


@case
def _scores_differ_between_splits(root: Path) -> Built:
    """rot_15 declares density with the other direction: OOD and shift numbers would mix two meanings."""
    rot = v11_splits()["rot_15"]["scores"]
    rot["density"] = (rot["density"][0], "uncertainty")
    return Built(_v11_with(root, split="rot_15", scores=rot), "scores-differ", "/splits/rot_15/scores",
                 "'density': 'uncertainty'")


@case
def _scores_group_kind(root: Path) -> Built:
    def mutate(f):
        f["splits/test/scores"].attrs["ubench_kind"] = "splits"

    return Built(_v11_with(root, mutate=mutate), "value", "/splits/test/scores", "must be 'scores'")


@case
def _score_external_link(root: Path) -> Built:
    target = _outside_h5(root)

    def mutate(f):
        del f["splits/test/scores/variance"]
        f["splits/test/scores/variance"] = h5py.ExternalLink(str(target), "/data")

    return Built(_v11_with(root, mutate=mutate), "external-link", "/splits/test/scores/variance", "other files",
                 outside=[target])


@case
def _logits_gzip_bomb(root: Path) -> Built:
    """Logits of 100,000 samples, all zero, under gzip 9 (beside probs of the same shape): the ratio limit holds
    for the new dataset as for probs."""
    n = 100_000

    def mutate(f):
        g = f.create_group("splits/bomb")
        g.attrs.update({"ubench_kind": "split", "role": "ood", "dataset": "zeros", "n_samples": np.int64(n)})
        probs = np.full((2, n, 4), 0.25, "<f4")
        g.create_dataset("probs", data=probs, chunks=(1, 65_536, 4))
        g.create_dataset("logits", shape=(2, n, 4), dtype="<f4", chunks=(1, n, 4), compression="gzip",
                         compression_opts=9, data=np.zeros((2, n, 4), "<f4"))
        sc = g.create_group("scores")
        sc.attrs["ubench_kind"] = "scores"
        for name in ("variance", "density"):
            sc.create_dataset(name, data=np.zeros(n)).attrs["direction"] = f["splits/test/scores"][name].attrs[
                "direction"]

    return Built(_v11_with(root, mutate=mutate), "compression-ratio", "/splits/bomb/logits", "decompression bomb")


VALID_CASES["v1_1_logits_and_scores"] = lambda root: write_plain_archive(archive_dir(root) / "a.h5",
                                                                         splits=v11_splits())
VALID_CASES["v1_1_float16_logits"] = lambda root: write_plain_archive(
    archive_dir(root) / "a.h5", splits={k: dict(v, logits=v["logits"].astype("<f2")) for k, v in v11_splits().items()})
