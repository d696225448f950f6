# SPDX-License-Identifier: MIT
"""The JSON every bench script writes: ``bench/results/<script stem>.json``, rendered by ``bench/render.py``.

``{"script", "date" (ISO 8601 UTC), "machine" {cpu, cores, memory_gib, python, numpy, scipy, torch, ...},
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


def machine_info(*extra_modules: str) -> dict:
    """CPU model, logical cores, memory, Python and the versions of numpy, scipy, torch and ``extra_modules``."""
    info = {"cpu": _cpu_model(), "cores": os.cpu_count(), "memory_gib": _memory_gib(),
            "python": platform.python_version()}
    for mod in ("numpy", "scipy", "torch", *extra_modules):
        info[mod] = _version(mod)
    return info


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


class Recorder:
    """Start at the beginning of a run (records the load before), ``write`` at the end."""

    def __init__(self, script: str, *extra_modules: str):
        self.script = Path(script).name
        self.extra_modules = extra_modules
        self.before = loadavg()
        self.date = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()

    def write(self, rows: list[dict], summary: list[dict] | None = None, *, settings: dict | None = None,
              out_dir: Path | None = None, name: str | None = None) -> Path:
        """Write ``<out_dir>/<name>.json`` (``name``: the script's stem unless a variant, e.g. a GPU run, is
        kept beside the default run's results)."""
        out_dir = RESULTS_DIR if out_dir is None else Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        doc = {
            "script": self.script,
            "date": self.date,
            "machine": machine_info(*self.extra_modules),
            "load": {"before": self.before, "after": loadavg(), "note": SHARED_NOTE},
            "settings": settings or {},
            "rows": rows,
            "summary": summary or [],
        }
        path = out_dir / f"{name or Path(self.script).stem}.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        os.replace(tmp, path)
        print(f"wrote {path}")
        return path
