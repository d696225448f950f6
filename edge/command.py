# SPDX-License-Identifier: MIT
"""``ubench latency``: time an exported ensemble (``ubench produce ... --save-models``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

__all__ = ["latency"]


_LATENCY_EXIT_CODES = ("Exit codes: 0 timed (the result printed); 1 an extra the backend needs is not installed "
                       "(its pip install line printed); 2 usage error, or models, a device or a backend that cannot "
                       "be used (the reason printed).")
_DISTILL_EXIT_CODES = ("Exit codes: 0 the student's archive written (its path printed); 1 an archive error (the output "
                       "exists) or the edge or torch extra not installed (its pip install line printed); 2 usage "
                       "error, or a teacher or models that cannot be used (the reason printed).")
#: The extra each --backend needs (``ubench/extras.py``).
_BACKEND_EXTRAS = {"onnxruntime": ("edge", ("onnxruntime",)), "torch": ("torch", ("torch",)),
                   "torch-compile": ("torch", ("torch",)), "tensorrt": ("edge-trt", ("tensorrt",))}


@click.command(epilog=_LATENCY_EXIT_CODES)
@click.argument("models_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--backend", type=click.Choice(("onnxruntime", "torch", "torch-compile", "tensorrt")),
              default="onnxruntime", show_default=True)
@click.option("--precision", type=click.Choice(("fp32", "fp16")), default="fp32", show_default=True,
              help="fp16: torch backends on a GPU, and tensorrt.")
@click.option("--device", default="cpu", show_default=True, metavar="cpu|cuda|cuda:N",
              help="Where torch and onnxruntime run (onnxruntime on a GPU needs onnxruntime-gpu); tensorrt always "
                   "runs on the GPU. On a GPU each call is timed host to host (copy in, run, copy back).")
@click.option("--batch-size", "batch_sizes", type=click.IntRange(min=1), multiple=True, default=(1,),
              show_default=True, help="Batch size; repeat for several (throughput at larger batches).")
@click.option("--warmup", type=click.IntRange(min=0), default=10, show_default=True)
@click.option("--iters", type=click.IntRange(min=1), default=200, show_default=True)
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True,
              help="Threads the backend is pinned to (reported).")
@click.option("--memory-budget", default=None, metavar="SIZE", help="With --latency-budget: what fits (e.g. 4G).")
@click.option("--latency-budget", "latency_ms", type=click.FloatRange(min=0, min_open=True), default=None,
              metavar="MS", help="Latency budget per batch-1 prediction in milliseconds, for what fits.")
@click.option("--fused/--no-fused", default=True, show_default=True,
              help="Also time the members as one call (one ONNX graph with every member, output M x B x C; the "
                   "torch modules stacked), beside the sequential sum; not for tensorrt.")
@click.option("--record-into", "record_into", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, metavar="ARCHIVE",
              help="Write the numbers into ARCHIVE's /scalability group (SPEC.md 5.2), so that score and compare "
                   "show accuracy against latency; ARCHIVE must be the one the models were exported with.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def latency(models_dir, backend, precision, device, batch_sizes, warmup, iters, threads, memory_budget, latency_ms,
            fused, record_into, as_json):
    """Time an exported ensemble: the members one after another per batch, warm-up discarded.

    \b
    ubench produce deep_ensemble --dataset digits --members 3 --save-models --out de.h5
    ubench latency de.h5.models --backend onnxruntime --json
    ubench latency de.h5.models --batch-size 1 --batch-size 128 --latency-budget 0.5 --memory-budget 4G
    ubench latency de.h5.models --record-into de.h5 && ubench score de.h5
    ubench latency de.h5.models --backend torch-compile --device cuda --precision fp16 --batch-size 128
    """
    from ..extras import require
    from .latency import LatencyError, load_models, measure, what_fits

    extra, modules = _BACKEND_EXTRAS[backend]
    require(extra, what=f"--backend {backend}", modules=modules)
    try:
        models = load_models(models_dir)
        result = measure(models, backend=backend, batch_sizes=batch_sizes, warmup=warmup, iters=iters,
                         threads=threads, precision=precision, fused=fused, device=device)
    except LatencyError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    if memory_budget is not None or latency_ms is not None:
        from ..sizes import parse_size

        try:
            budget = None if memory_budget is None else parse_size(memory_budget)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--memory-budget") from None
        result["what_fits"] = what_fits(result, _cll_curve(models_dir, models.doc), latency_budget_ms=latency_ms,
                                        memory_budget_bytes=budget)
    if record_into is not None:
        from .record import record_latency

        try:
            record_latency(record_into, result, models_dir / "models.json")
        except (OSError, ValueError) as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
        click.echo(f"recorded the latency into {record_into} (/scalability)", err=True)
    for note in result.get("notes", ()):
        click.echo(f"note: {note}", err=True)
    if as_json:
        click.echo(json.dumps(result, indent=1, sort_keys=True))
        return
    where = "" if result["device"] == "cpu" else f" on {result['device']} ({result['device_name']})"
    click.echo(f"{result['method']} ({result['model']}), {result['n_members']} members, {backend} {precision}{where}, "
               f"{threads} thread(s); {result['model_bytes'] / 2**20:.2f} MiB of models")
    if result.get("device_peak_bytes") is not None:
        click.echo(f"  device memory peak {result['device_peak_bytes'] / 2**20:.2f} MiB")
    fused_rows = {r["batch_size"]: r for r in result.get("fused", {}).get("batches", [])}
    for r in result["batches"]:
        click.echo(f"  batch {r['batch_size']:>4}: p50 {r['p50_ms']:.3f} ms, p95 {r['p95_ms']:.3f} ms, mean "
                   f"{r['mean_ms']:.3f} ± {r['std_ms']:.3f} ms, {r['throughput_per_s']:.0f} samples/s")
        if (f := fused_rows.get(r["batch_size"])) is not None:
            click.echo(f"        fused: p50 {f['p50_ms']:.3f} ms, p95 {f['p95_ms']:.3f} ms, "
                       f"{f['throughput_per_s']:.0f} samples/s ({f['speedup_p50']:.2f}x the sequential p50)")
    if result.get("call_overhead_us") is not None:
        click.echo(f"  one empty call costs {result['call_overhead_us']:.1f} µs (paid {result['n_members']} times "
                   "sequentially, once fused)")
    if "what_fits" in result:
        w = result["what_fits"]
        click.echo(f"  fits: {w['members']} member(s) ({w['limited_by']}), CLL "
                   f"{'n/a' if w['cll'] is None else format(w['cll'], '.4f')}")
        if "fused" in w:
            f = w["fused"]
            click.echo(f"  fused, modelled (one call {f['call_overhead_ms'] * 1e3:.1f} µs + "
                       f"{f['per_member_ms'] * 1e3:.1f} µs per member): {f['members']} member(s), CLL "
                       f"{'n/a' if f['cll'] is None else format(f['cll'], '.4f')}")


def _cll_curve(models_dir: Path, doc: dict) -> list[float] | None:
    """The CLL-against-members curve of the archive the models came from (scored here; ``None`` if it is gone
    or is not the archive models.json names by hash)."""
    import hashlib

    archive = models_dir.parent / doc["archive"]
    if not archive.is_file() or hashlib.sha256(archive.read_bytes()).hexdigest() != doc["archive_sha256"]:
        return None
    from ..scoring.protocols import Protocol
    from ..scoring.score import score_archive

    report = score_archive(archive, protocol=Protocol.preset("pitfalls").replace(member_curves=True))
    sec = report["in_domain"][report["primary_split"]]
    curves = sec.get("member_curves")
    return None if not curves else list(curves["metrics"]["cll"]["mean"])


@click.command(epilog=_DISTILL_EXIT_CODES)
@click.argument("teacher", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--models", "models_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="The teacher's exported models. [default: TEACHER.models]")
@click.option("--student", default="mlp", show_default=True, help="Student network (a ubench model name).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option("--epochs", type=click.IntRange(min=1), default=30, show_default=True)
@click.option("--lr", type=click.FloatRange(min=0, min_open=True), default=1e-3, show_default=True)
@click.option("--noise-std", type=click.FloatRange(min=0), default=0.05, show_default=True,
              help="Gaussian perturbation of the training inputs the student also learns the teacher on.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--overwrite", is_flag=True)
def distill(teacher, models_dir, student, out, epochs, lr, noise_std, seed, overwrite):
    """Distil a teacher's posterior predictive into one student network (Bayesian Dark Knowledge).

    \b
    ubench produce deep_ensemble --dataset digits --members 5 --save-models --out de.h5
    ubench distill de.h5 --student mlp --out student.h5 && ubench score student.h5
    """
    from ..extras import require

    require("edge", "torch", what="ubench distill")
    from ..archive_schema import ArchiveError
    from .distill import distill as run
    from .latency import LatencyError

    try:
        path = run(teacher, models_dir or teacher.with_name(teacher.name + ".models"), out, student=student,
                   epochs=epochs, lr=lr, noise_std=noise_std, seed=seed, overwrite=overwrite)
    except (LatencyError, ArchiveError, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2 if isinstance(exc, (LatencyError, ValueError)) else 1)
    click.echo(str(path))
