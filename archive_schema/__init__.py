# SPDX-License-Identifier: MIT
"""The HDF5 prediction archive: spec, writer, safe reader and validator (numpy + h5py; no deep-learning import,
no ubench.metrics import)."""

from .archive import ArchiveHeader, MemberInfo, PredictionArchive, SplitInfo, SplitSpec
from .errors import ArchiveError, Finding, InvalidArchiveError, UnreadableArchiveError, UnsupportedArchiveError
from .spec import CURRENT, ArchiveSpec, ReadLimits

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

#: The writer's names, imported when first used: reading and scoring never write (the writer's imports are ~8 ms
#: of a `ubench score` start-up, issue #29).
_WRITER_NAMES = ("ArchiveWriter", "finalize_partial", "partial_dir_for")


def __getattr__(name: str):
    if name in _WRITER_NAMES:
        from . import writer

        return getattr(writer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
