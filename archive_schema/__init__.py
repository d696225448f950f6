# SPDX-License-Identifier: MIT
"""The HDF5 prediction archive: spec, writer, safe reader and validator (numpy + h5py; no deep-learning import,
no ubench.metrics import)."""

from .archive import ArchiveHeader, MemberInfo, PredictionArchive, SplitInfo, SplitSpec
from .errors import ArchiveError, Finding, InvalidArchiveError, UnreadableArchiveError, UnsupportedArchiveError
from .spec import CURRENT, ArchiveSpec, ReadLimits
from .writer import ArchiveWriter, finalize_partial, partial_dir_for

__all__ = [
    "ArchiveHeader",
    "ArchiveSpec",
    "ArchiveWriter",
    "ArchiveError",
    "CURRENT",
    "Finding",
    "InvalidArchiveError",
    "MemberInfo",
    "PredictionArchive",
    "ReadLimits",
    "SplitInfo",
    "SplitSpec",
    "UnreadableArchiveError",
    "UnsupportedArchiveError",
    "finalize_partial",
    "partial_dir_for",
]

from .reader import ArchiveReader, open_archive, read_archive  # noqa: E402
from .validator import validate_archive  # noqa: E402

__all__ += ["ArchiveReader", "open_archive", "read_archive", "validate_archive"]
