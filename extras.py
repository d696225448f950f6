# SPDX-License-Identifier: MIT
"""The optional dependencies (the extras of ``pyproject.toml``) and the one way ubench says that one is missing.

A command or function that needs an extra calls :func:`require` before it does any work; a missing module raises
:class:`MissingExtraError`, whose message is one line naming what needed it, the modules missing and the
``pip install`` line (``ubench serve needs the serve extra (uvicorn not installed): pip install 'ubench[serve]'``).
The command line prints it as ``Error: ...`` and exits 1, the same for every command and extra (issue #28 item 3).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

__all__ = ["EXTRAS", "MissingExtraError", "require"]

#: Extra -> the modules (import names) ubench needs from it.
EXTRAS: dict[str, tuple[str, ...]] = {
    "torch": ("torch", "torchvision"),
    "jax": ("jax", "optax"),
    "edge": ("onnx", "onnxruntime"),
    "edge-trt": ("tensorrt",),
    "scale": ("dask", "distributed"),
    "frame": ("pandas",),
    "serve": ("fastapi", "uvicorn", "sqlalchemy", "alembic"),
    "postgres": ("psycopg",),
    "tune": ("optuna",),
    "lightning": ("lightning",),
    "mlflow": ("mlflow",),
}


class MissingExtraError(ImportError):
    """Modules of an extra are not installed; ``extras`` names the extras, ``missing`` the modules."""

    def __init__(self, what: str, extras: Sequence[str], missing: Sequence[str]):
        self.extras, self.missing = tuple(extras), tuple(missing)
        names = " and ".join(self.extras)
        super().__init__(f"{what} needs the {names} extra{'s' if len(self.extras) > 1 else ''} "
                         f"({', '.join(self.missing)} not installed): pip install 'ubench[{','.join(self.extras)}]'")


def _missing(module: str) -> bool:
    """Whether top-level ``module`` cannot be imported: not installed, or blocked by a ``sys.modules`` entry of
    None. Found without importing it (``find_spec``), so checking torch costs nothing."""
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):  # ValueError: a module in sys.modules without a spec
        return False


def require(*extras: str, what: str, modules: Sequence[str] | None = None) -> None:
    """Find the modules of ``extras`` (or only ``modules``, with one extra named); raise
    :class:`MissingExtraError` naming ``what`` needs them when any is missing.

    Examples
    --------
    ``require("serve", what="ubench serve")``; ``require("jax", what="--framework jax hmc", modules=["blackjax"])``
    """
    if modules is not None and len(extras) != 1:
        raise ValueError("modules= names the modules of one extra")
    unknown = [e for e in extras if e not in EXTRAS]
    if unknown:
        raise ValueError(f"unknown extras {unknown}; known: {sorted(EXTRAS)}")
    missing_extras, missing = [], []
    for extra in extras:
        gone = [m for m in (modules if modules is not None else EXTRAS[extra]) if _missing(m)]
        if gone:
            missing_extras.append(extra)
            missing += gone
    if missing:
        raise MissingExtraError(what, missing_extras, missing)
