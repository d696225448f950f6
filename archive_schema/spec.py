# SPDX-License-Identifier: MIT
"""The prediction archive format, version by version: names, roles, dtypes and shapes.

``SPEC.md`` beside this file is the prose specification; the two change in the same commit.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass

import numpy as np

__all__ = [
    "ArchiveSpec",
    "CURRENT",
    "FORMAT",
    "ROLES",
    "MEMBER_KINDS",
    "LATENCY_ATTRIBUTES",
    "SPLIT_NAME",
    "VERSION",
    "ROW_SUM_ABS_TOL",
    "row_sum_tolerance",
    "is_split_name",
    "is_iso8601_with_zone",
    "duplicate_shift_message",
    "ROOT_ATTRS_V1",
    "PROB_DTYPES",
    "ALLOWED_FILTERS",
    "ReadLimits",
    "V1_0",
    "V1_1",
    "LOGIT_DTYPES",
    "SCORE_DTYPES",
    "SCORE_DIRECTIONS",
    "RESERVED_SCORE_NAMES",
    "is_score_name",
    "logit_unit_roundoff",
]

FORMAT = "prediction-archive"


@dataclass(frozen=True, order=True)
class ArchiveSpec:
    """A (format, ``"MAJOR.MINOR"``) pair that names one version of the archive spec."""

    format: str
    version: str

    @property
    def major(self) -> int:
        return int(self._parts()[0])

    @property
    def minor(self) -> int:
        return int(self._parts()[1])

    def _parts(self) -> tuple[str, str]:
        m = VERSION.fullmatch(self.version)
        if m is None:
            raise ValueError(f"version {self.version!r} is not of the form MAJOR.MINOR")
        return m.group(1), m.group(2)


#: A format version: two decimal integers, nothing else (no third part, no whitespace, no trailing newline).
#: Match it with ``fullmatch`` (``$`` would accept a trailing ``"\n"``).
VERSION = re.compile(r"([0-9]+)\.([0-9]+)")


#: 1.0: probabilities, labels, ids, members, scalability, diagnostics. 1.1 adds the optional per-member ``logits``
#: and per-split method ``scores`` of SPEC.md §4.3-4.4; a 1.0 reader ignores both (it reads a 1.1 file with a note).
V1_0 = ArchiveSpec(FORMAT, "1.0")
V1_1 = ArchiveSpec(FORMAT, "1.1")
#: The newest version this ubench writes. ubench's writer stamps the lowest version that holds what the file holds:
#: ``1.0`` unless the archive has logits or method scores (so older readers read it without a note).
CURRENT = V1_1

#: Roles a split can have. ``shift`` splits also carry ``shift_kind`` and ``shift_intensity``.
ROLES = ("in_domain", "ood", "shift")

#: What one member is. Scorers do not branch on it; it documents how the members were obtained.
#: Version of the optional ``/diagnostics`` group's ``summary`` (SPEC.md §5.1); a reader ignores a major it does not
#: know.
DIAGNOSTICS_VERSION = "1.0"

#: SPEC.md §5.2: the optional latency attributes of ``/scalability`` (``ubench latency --record-into``), name ->
#: type ("str", "int" or "float": a finite number).
LATENCY_ATTRIBUTES = {
    "latency_backend": "str", "latency_precision": "str", "latency_sampling": "str", "latency_threads": "int",
    "latency_members": "int", "latency_batch_size": "int", "latency_p50_ms": "float", "latency_p95_ms": "float",
    "latency_mean_ms": "float", "latency_fused_p50_ms": "float", "latency_throughput_per_s": "float",
    "latency_throughput_batch_size": "int", "latency_call_overhead_us": "float", "latency_model_bytes": "int",
    "latency_peak_rss_bytes": "int", "latency_device_peak_bytes": "int", "latency_device": "str",
}

MEMBER_KINDS = ("point", "independent", "snapshot", "posterior_sample", "mc_sample", "augmentation")

#: Split names are path-safe identifiers; "." alone is refused (HDF5 reads it as the group itself). Anchored with
#: ``\Z`` (not ``$``, which also matches before a trailing newline), so ``match`` and ``fullmatch`` agree.
SPLIT_NAME = re.compile(r"\A(?!\.\Z)[A-Za-z0-9_.-]{1,128}\Z")


def is_split_name(name: str) -> bool:
    """True when ``name`` is a valid split name (SPEC.md §4), the whole string."""
    return isinstance(name, str) and SPLIT_NAME.fullmatch(name) is not None


#: The fixed part of the row-sum tolerance of ``probs`` (SPEC.md §4). ``metrics/_validation.py`` keeps its own
#: copy (the metrics core imports numpy/scipy only); a test asserts the two agree.
ROW_SUM_ABS_TOL = 1e-4
_FLOAT32_EPS = 2.0**-23


def row_sum_tolerance(n_classes: int) -> float:
    """SPEC.md §4: every row of ``probs`` sums to 1 within ``1e-4 + C * 2**-23``.

    The fixed 1e-4 plus the float32 rounding of a softmax over C classes; float64 files get the same tolerance.
    """
    return ROW_SUM_ABS_TOL + n_classes * _FLOAT32_EPS


def duplicate_shift_message(shifts) -> tuple[str, str] | None:
    """SPEC.md §4: no two shift splits share a (shift_kind, shift_intensity); 30 and 30.0 are one intensity.

    ``shifts`` yields ``(split name, shift_kind, shift_intensity)``; returns ``(second split, message naming
    both)`` for the first repeated pair, or None.
    """
    seen: dict[tuple[str, float], str] = {}
    for name, kind, intensity in shifts:
        key = (str(kind), float(intensity))
        if key in seen:
            return name, (f"shift splits {seen[key]!r} and {name!r} both have shift_kind {key[0]!r} and "
                          f"shift_intensity {key[1]:g}; each (kind, intensity) may occur once")
        seen[key] = name
    return None


def is_iso8601_with_zone(text: str) -> bool:
    """True for an ISO 8601 date and time with a UTC offset (``2026-11-22T03:21:31+00:00``, ``…Z``).

    SPEC.md §2 ``created``: the date and time are separated by ``T``; the offset is required, so a reader never
    has to guess the zone. Parsed by :meth:`datetime.datetime.fromisoformat` (Python 3.11: extended and basic
    formats, fractional seconds); surrounding whitespace is refused.
    """
    if not isinstance(text, str) or "T" not in text.upper():
        return False
    try:
        value = _dt.datetime.fromisoformat(text)
    except ValueError:
        return False
    return value.tzinfo is not None


#: Root attributes of a v1 archive: name -> (kind, required). kind is "str" or "int".
ROOT_ATTRS_V1 = {
    "ubench_format": ("str", True),
    "ubench_format_version": ("str", True),
    "ubench_kind": ("str", True),
    "method": ("str", True),
    "model": ("str", True),
    "dataset": ("str", True),
    "n_classes": ("int", True),
    "created": ("str", True),
    "writer": ("str", True),
    "framework": ("str", False),
    "framework_version": ("str", False),
    "config": ("str", False),  # JSON object: the producer's hyperparameters
    "description": ("str", False),
}

#: Prediction dtypes. float16 is refused: it rounds probabilities below 6e-8 to 0 and log(0) breaks NLL.
PROB_DTYPES = (np.dtype("<f4"), np.dtype("<f8"), np.dtype(">f4"), np.dtype(">f8"))

#: SPEC.md §4.3: logits may be stored in half precision (they are re-checked against the probabilities, which
#: carry the contract); float64 beside float64 probabilities.
LOGIT_DTYPES = (np.dtype("<f2"), np.dtype("<f4"), np.dtype("<f8"), np.dtype(">f2"), np.dtype(">f4"), np.dtype(">f8"))
#: SPEC.md §4.4: a method score per sample.
SCORE_DTYPES = (np.dtype("<f4"), np.dtype("<f8"), np.dtype(">f4"), np.dtype(">f8"))
#: SPEC.md §4.4 ``direction``: ``uncertainty`` (higher = more uncertain, more likely out-of-distribution) or
#: ``confidence`` (higher = more certain, more likely in-domain).
SCORE_DIRECTIONS = ("uncertainty", "confidence")
#: Scores a scorer derives from logits itself (SPEC.md §4.4): a method score may not take these names.
RESERVED_SCORE_NAMES = ("energy", "max_logit")


def is_score_name(name: str) -> bool:
    """True when ``name`` may name a method score (SPEC.md §4.4): a split-name-like identifier, not reserved."""
    return is_split_name(name) and name not in RESERVED_SCORE_NAMES


def logit_unit_roundoff(dtype: np.dtype) -> float:
    """The unit roundoff of a logits dtype: 2**-11 (float16), 2**-24 (float32), 2**-53 (float64)."""
    return float(np.finfo(np.dtype(dtype).newbyteorder("=")).eps) / 2.0


#: HDF5 filter ids a reader accepts: deflate (1), shuffle (2), fletcher32 (3). Everything else is refused
#: without asking HDF5 whether it is available (that would load plugins).
ALLOWED_FILTERS = {1: "deflate", 2: "shuffle", 3: "fletcher32"}


@dataclass(frozen=True)
class ReadLimits:
    """Bounds the safe reader enforces before it reads any data.

    Attributes
    ----------
    max_total_bytes : declared (uncompressed) size of all datasets together.
    max_chunk_bytes : uncompressed size of one chunk; bounds the memory one decompression needs.
    max_compression_ratio : declared / stored bytes of a compressed dataset (deflate tops out near 1032:1;
        real softmax output compresses well under 10:1, so a higher ratio means a decompression bomb).
    max_members, max_samples, max_classes, max_splits : dimension bounds.
    max_objects : groups, datasets and links walked in the whole file.
    max_attr_bytes : size of one attribute's value, measured after decoding (variable-length strings too).
    block_bytes : target size of one block read while checking values.
    max_chunks : chunks of one dataset (the chunk index and the time to read it grow with the count).
    max_small_chunks, min_chunk_bytes : a dataset of more than ``max_small_chunks`` chunks must have chunks of
        at least ``min_chunk_bytes`` (tiny chunks over large data cost memory and time per chunk, not per byte).
    max_chunks_per_read : chunks one read may touch: libhdf5 holds a few KiB per chunk of a selection
        (measured: 6.4 GiB to read 1M one-element chunks at once), so blocks are sized by chunks too.
    max_name_bytes : one short string (method, model, dataset, role, kinds, class names, scalability keys and
        strings) and one HDF5 link name, in UTF-8 bytes.
    max_string_bytes : one element of a string dataset that is not a name (a member's info JSON).
    max_string_dataset_bytes : one string dataset, decoded (fixed-length: declared; variable-length: heap).
    max_metadata_bytes : every attribute value and string dataset of the file together, decoded.
    max_attrs : attributes of one object (group, dataset or the root).
    max_depth : groups nested below the root.
    max_scores : method scores of one split (SPEC.md §4.4).
    """

    max_total_bytes: int = 32 * 2**30
    max_chunk_bytes: int = 16 * 2**20
    max_compression_ratio: float = 200.0
    max_members: int = 100_000
    max_samples: int = 10_000_000
    max_classes: int = 100_000
    max_splits: int = 1_000
    max_objects: int = 20_000
    max_attr_bytes: int = 1 * 2**20
    block_bytes: int = 64 * 2**20
    # issue #16 items 3, 4 and 10 (branch reader-limits): strings, chunk counts, attribute counts, depth.
    max_chunks: int = 1_000_000
    max_small_chunks: int = 65_536
    min_chunk_bytes: int = 4096
    max_chunks_per_read: int = 4096
    max_name_bytes: int = 1024
    max_string_bytes: int = 64 * 2**10
    max_string_dataset_bytes: int = 16 * 2**20
    max_metadata_bytes: int = 64 * 2**20
    max_attrs: int = 256
    max_depth: int = 16
    # issue #31 (format 1.1): method scores per split.
    max_scores: int = 256
