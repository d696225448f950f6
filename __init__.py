# SPDX-License-Identifier: MIT
"""ubench: uncertainty benchmarks measured the way the papers say they must be measured.

The public API (``ubench.__all__``), for notebooks and own training loops::

    from ubench import ArchiveWriter, SplitSpec, read_archive, score_archive, score_arrays, report_frame
    import ubench.plots  # the papers' figures as matplotlib figures, from a report or from arrays

Subpackages: ``ubench.metrics`` (NumPy core), ``ubench.archive_schema`` (the HDF5 prediction archive),
``ubench.scoring`` (archive to report), ``ubench.producers`` (trainers), ``ubench.edge`` (latency). Importing
``ubench`` imports none of them: each name below is imported on first use (PEP 562), so ``import ubench`` stays
light and ``ubench --help`` fast.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

#: Public name -> the module that defines it (relative to ``ubench``).
_LAZY = {
    # the archive: write from any framework, read safely, validate
    "ArchiveWriter": ".archive_schema",
    "SplitSpec": ".archive_schema",
    "read_archive": ".archive_schema",
    "open_archive": ".archive_schema",
    "validate_archive": ".archive_schema",
    "PredictionArchive": ".archive_schema",
    "ArchiveError": ".archive_schema",
    # scoring: the report of `ubench score`, from a file or from arrays
    "Protocol": ".scoring.protocols",
    "score_archive": ".scoring.score",
    "score_arrays": ".scoring.score",
    "write_reference": ".scoring.reference",
    # DEE of a method's report against a deep ensemble's (`ubench dee`)
    "dee_between": ".scoring.dee",
    # tables for your own plots: one row per report, columns = summary keys
    "report_frame": ".scoring.tables",
    "report_rows": ".scoring.tables",
    # the self-contained HTML report of a report (from score_archive or score_arrays)
    "write_html": ".scoring.html",
}
#: Public submodules, imported on first use too: ``ubench.plots`` (the figures as matplotlib figures).
_SUBMODULES = ("plots",)

__all__ = ["__version__", *_LAZY, *_SUBMODULES]


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return import_module(f".{name}", __name__)
    try:
        module = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'ubench' has no attribute {name!r}") from None
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | set(_SUBMODULES))
