# SPDX-License-Identifier: MIT
"""The JSON every bench script writes: ``bench/results/<script stem>.json`` (or ``<name>.json`` for a script that
writes several, e.g. ``bench_hmc_cuda.json`` from ``bench_hmc.py --device cuda``), rendered by ``bench/render.py``.

``{"script", "date" (ISO 8601 UTC), "machine" {cpu, cores, memory_gib, python, numpy, scipy, torch, ...; gpu and cuda
when torch sees a CUDA device},
"load" {"before", "after" (1/5/15-minute load averages), "note"}, "rows": [...], "summary": [...]}``.
``rows`` are the script's full table (one dict per line, the same keys in every row); ``summary`` the lines of
the README's Performance table: ``{"what", "workload", "result", "target", "met"}``, with ``result`` formatted
from the measured numbers by the script itself (render.py adds machine, load and date).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"
SHARED_NOTE = "shared 2-core machine: other engineers' jobs may run at the same time (see load)"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def _version(module: str) -> str | None:
    try:
        mod = __import__(module)
    except ImportError:
        return None
    return str(getattr(mod, "__version__", "?"))


def _cuda_info() -> dict:
    """``gpu`` (the name of CUDA device 0) and ``cuda`` (the CUDA version torch was built with) when torch is
    installed and sees a CUDA device; nothing otherwise (so CPU machines' JSON is as before)."""
    try:
        import torch
    except ImportError:
        return {}
    try:
        if not torch.cuda.is_available():
            return {}
        return {"gpu": torch.cuda.get_device_name(0), "gpu_count": torch.cuda.device_count(),
                "cuda": torch.version.cuda}
    except Exception:  # noqa: BLE001 - a broken driver must not lose a finished run's results
        return {}


def machine_info(*extra_modules: str) -> dict:
    """CPU model, logical cores, memory, Python, the versions of numpy, scipy, torch and ``extra_modules``, and the
    GPU's name and the CUDA version when torch sees a GPU."""
    info = {"cpu": _cpu_model(), "cores": os.cpu_count(), "memory_gib": _memory_gib(),
            "python": platform.python_version()}
    for mod in ("numpy", "scipy", "torch", *extra_modules):
        info[mod] = _version(mod)
    info.update(_cuda_info())
    return info


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


class Recorder:
    """Start at the beginning of a run (records the load before), ``write`` at the end.

    The JSON is ``<name>.json``, by default the script's stem; ``name`` lets one script write several (one per
    device). ``note`` replaces the shared-machine note beside the load (a machine lent for one run is not the
    shared development machine)."""

    def __init__(self, script: str, *extra_modules: str, name: str | None = None, note: str | None = None):
        self.script = Path(script).name
        self.name = name or Path(self.script).stem
        self.note = note or SHARED_NOTE
        self.extra_modules = extra_modules
        self.before = loadavg()
        self.date = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()

    def write(self, rows: list[dict], summary: list[dict] | None = None, *, settings: dict | None = None,
              out_dir: Path | None = None) -> Path:
        out_dir = RESULTS_DIR if out_dir is None else Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        doc = {
            "script": self.script,
            "date": self.date,
            "machine": machine_info(*self.extra_modules),
            "load": {"before": self.before, "after": loadavg(), "note": self.note},
            "settings": settings or {},
            "rows": rows,
            "summary": summary or [],
        }
        path = out_dir / f"{self.name}.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        os.replace(tmp, path)
        print(f"wrote {path}")
        return path
