# SPDX-License-Identifier: MIT
"""Importers: predictions people already have (``.npy``/``.npz``, the Pitfalls code's caches, Ovadia et al.'s
released HDF5 predictions, ``.pt`` tensors) turned into ubench archives by ``ubench import FORMAT SRC…``.

One module per format; ``plan`` holds what they share: the conversion of logits / log-probabilities to
probabilities in bounded row chunks, the check of a claimed kind (a wrong claim names the file, key and first bad
index), the size checks of what a source declares (``--max-bytes``, free disk, file-size limit) before anything is
read or written, and the streamed, atomic write through ``archive_schema.ArchiveWriter`` (a chunk of rows in memory,
never a whole member; nothing at the target unless the whole import succeeded). ``plan.write_plan`` is the Python
entry point.
"""

from .kinds import KINDS, ImportFailure

__all__ = ["ImportFailure", "KINDS"]
