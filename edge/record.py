# SPDX-License-Identifier: MIT
"""``ubench latency --record-into ARCHIVE``: the measured latency written into the archive's ``/scalability``
group under the names of SPEC.md §5.2 (:data:`~ubench.archive_schema.spec.LATENCY_ATTRIBUTES`), so that
``ubench score`` and ``ubench compare`` show accuracy against latency (URSABench's table) and ``compare --html``
its Pareto plot.

The archive is rewritten whole (a copy next to it, replaced atomically); earlier ``latency_*`` attributes are
dropped first, other ``/scalability`` attributes kept. The archive must be the one the models were exported with
(``models.json``'s sha256); since recording changes its bytes, ``models.json``'s ``archive_sha256`` is updated to
the new file.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from ..archive_schema.spec import LATENCY_ATTRIBUTES

__all__ = ["latency_attributes", "record_latency"]


def latency_attributes(result: dict[str, Any]) -> dict[str, Any]:
    """The §5.2 attributes of a :func:`~ubench.edge.latency.measure` result: the batch-1 row (else the first
    measured), throughput at the largest batch, the fused batch-1 median when it was timed."""
    rows = result["batches"]
    first = next((r for r in rows if r["batch_size"] == 1), rows[0])
    largest = max(rows, key=lambda r: r["batch_size"])
    out = {"latency_backend": result["backend"], "latency_precision": result["precision"],
           "latency_sampling": result.get("sampling", "none"), "latency_threads": result["threads"],
           "latency_members": result["n_members"], "latency_batch_size": first["batch_size"],
           "latency_p50_ms": first["p50_ms"], "latency_p95_ms": first["p95_ms"], "latency_mean_ms": first["mean_ms"],
           "latency_throughput_per_s": largest["throughput_per_s"],
           "latency_throughput_batch_size": largest["batch_size"], "latency_model_bytes": result["model_bytes"],
           "latency_peak_rss_bytes": result["peak_rss_bytes"]}
    fused = {r["batch_size"]: r for r in (result.get("fused") or {}).get("batches", [])}
    if first["batch_size"] in fused:
        out["latency_fused_p50_ms"] = fused[first["batch_size"]]["p50_ms"]
    if result.get("call_overhead_us") is not None:
        out["latency_call_overhead_us"] = result["call_overhead_us"]
    if result.get("device", "cpu") != "cpu":
        out["latency_device"] = f"{result['device']} ({result.get('device_name', '?')})"
    if result.get("device_peak_bytes") is not None:
        out["latency_device_peak_bytes"] = result["device_peak_bytes"]
    assert set(out) <= set(LATENCY_ATTRIBUTES)
    return {k: (int(v) if LATENCY_ATTRIBUTES[k] == "int" else float(v) if LATENCY_ATTRIBUTES[k] == "float"
                else str(v)) for k, v in out.items()}


def record_latency(archive: str | Path, result: dict[str, Any], models_json: str | Path | None = None) -> Path:
    """Write :func:`latency_attributes` of ``result`` into ``archive``'s ``/scalability``; with ``models_json``,
    refuse (``ValueError``) an archive that is not the one it names by sha256 and update that sha256 after."""
    import h5py

    archive = Path(archive)
    doc = None
    if models_json is not None:
        doc = json.loads(Path(models_json).read_text())
        if hashlib.sha256(archive.read_bytes()).hexdigest() != doc["archive_sha256"]:
            raise ValueError(f"--record-into {archive}: not the archive these models were exported with "
                             f"({Path(models_json).name} names sha256 {doc['archive_sha256'][:12]}…; sha256 differs)")
    attrs = latency_attributes(result)
    tmp = archive.with_name(archive.name + ".latency.tmp")
    shutil.copyfile(archive, tmp)
    try:
        with h5py.File(tmp, "r+") as f:
            g = f.require_group("scalability")
            g.attrs["ubench_kind"] = "scalability"
            for key in [k for k in g.attrs if str(k).startswith("latency_")]:
                del g.attrs[key]
            for key, value in attrs.items():
                g.attrs[key] = value
        os.replace(tmp, archive)
    finally:
        tmp.unlink(missing_ok=True)
    if doc is not None:
        doc["archive_sha256"] = hashlib.sha256(archive.read_bytes()).hexdigest()
        Path(models_json).write_text(json.dumps(doc, indent=1) + "\n")
    return archive
