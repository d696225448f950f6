# SPDX-License-Identifier: MIT
"""h5py, imported with HDF5's dynamic filter plugins switched off.

An archive is an untrusted upload: a dataset whose filter id is unknown would make HDF5 search
``HDF5_PLUGIN_PATH`` and load a shared library, i.e. run code. ``HDF5_PLUGIN_PRELOAD="::"`` tells HDF5 to load no
plugin at all; it must be set before libhdf5 initialises, so every ubench module imports h5py from here. If h5py was
already imported by someone else, plugin loading is also turned off through ``H5PLset_loading_state(0)``.
"""

from __future__ import annotations

import ctypes
import os
import sys

if "h5py" not in sys.modules:
    os.environ["HDF5_PLUGIN_PRELOAD"] = "::"

import h5py  # noqa: E402

__all__ = ["h5py", "plugins_disabled"]


def _libhdf5_paths() -> list[str]:
    try:
        with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
            return sorted({line.split()[-1] for line in maps if "libhdf5" in line and "hl" not in line.split("/")[-1]})
    except OSError:
        return []


def _disable_plugin_loading() -> bool:
    for path in _libhdf5_paths():
        try:
            lib = ctypes.CDLL(path)
            set_state, get_state = lib.H5PLset_loading_state, lib.H5PLget_loading_state
        except (OSError, AttributeError):
            continue
        set_state.argtypes = [ctypes.c_uint]
        if set_state(0) < 0:
            continue
        state = ctypes.c_uint(1)
        get_state.argtypes = [ctypes.POINTER(ctypes.c_uint)]
        get_state(ctypes.byref(state))
        return state.value == 0
    return os.environ.get("HDF5_PLUGIN_PRELOAD") == "::"


_DISABLED = _disable_plugin_loading()


def plugins_disabled() -> bool:
    """True when HDF5 will load no filter plugin in this process."""
    return _DISABLED
