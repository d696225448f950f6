# SPDX-License-Identifier: MIT
"""ubench: uncertainty benchmarks measured the way the papers say they must be measured.

Subpackages: ``ubench.metrics`` (NumPy core), ``ubench.archive_schema`` (the HDF5 prediction archive),
``ubench.producers`` (trainers), ``ubench.edge`` (latency). Importing ``ubench`` imports none of them.
"""

__version__ = "0.1.0"
