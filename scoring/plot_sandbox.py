# SPDX-License-Identifier: MIT
"""Draw a report's figures in a limited child process (``python -I -B -m ubench.scoring.plot_sandbox``).

The figures of ``score --html`` are drawn from an upload's numbers and strings by matplotlib, which is large and
was never written for hostile input; drawn in the host process they ran without any limit (999 OOD splits took
354 s under ``--timeout 60``; issue #16 item 9). The parent (:func:`draw_figures`) sends the figures' inputs
(:func:`figure_inputs`, a part of the report, as JSON data: no archive is opened) to a fresh interpreter in an
empty temporary directory with a minimal environment and its own session. The child (:func:`main`) limits itself
with the scoring sandbox's own function (:func:`ubench.scoring.sandbox.limit_process`: address space, no file
written, no core, open files, dies with its parent) plus a CPU limit, draws at most
:data:`~ubench.scoring.plots.MAX_FIGURES` figures and answers with one JSON object. Past the wall-clock limit
the parent kills its process group. Whatever goes wrong becomes a note on the page in place of the figures: the
report itself is still written.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .plots import MAX_FIGURES
from .sandbox import SandboxLimits, limit_process
from .text import shorten

__all__ = ["DrawnFigures", "figure_inputs", "compare_inputs", "draw_figures", "draw_compare_figures", "main"]

#: Captions of left-out figures named in the note (the rest are counted).
_NAMED_LEFT_OUT = 20


@dataclass(frozen=True)
class DrawnFigures:
    """``figures``: ``(caption, svg)`` pairs; ``notes``: what was left out or went wrong, as plain text."""

    figures: tuple[tuple[str, str], ...]
    notes: tuple[str, ...]


def figure_inputs(report: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a score report that :func:`ubench.scoring.plots.figures` reads."""
    keep = ("reliability", "rejection_curves", "member_curves", "confidence_curves")

    def in_domain(sec):
        out = {k: sec[k] for k in keep if k in sec}
        cal = sec.get("calibrated")
        if cal:
            out["calibrated"] = {k: cal[k] for k in ("reliability", "temperature") if k in cal}
        return out

    return {
        "protocol": {"description": report["protocol"]["description"]},
        "primary_split": report.get("primary_split"),
        "in_domain": {name: in_domain(sec) for name, sec in report["in_domain"].items()},
        "ood": {name: {"histograms": sec.get("histograms"), "roc_curves": sec.get("roc_curves"),
                       "confidence_curves": sec.get("confidence_curves")}
                for name, sec in report["ood"].items()},
        "shift": {name: {k: sec.get(k) for k in ("confidence_curves", "shift_kind", "shift_intensity")}
                  for name, sec in (report.get("shift") or {}).items()},
        "shift_summary": report.get("shift_summary"),
        "dee": report.get("dee"),
        "accuracy": report["summary"].get("accuracy"),
        "latency": {k: v for k, v in (report["archive"].get("latency") or {}).items()
                    if k in ("latency_p50_ms", "latency_fused_p50_ms", "latency_batch_size", "latency_members")},
    }


def compare_inputs(reports: Sequence[Mapping[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    """What :func:`ubench.scoring.plots.compare_figures` reads: every report's :func:`figure_inputs` (its DEE
    section, when it has one, as ``dee``), the method names and the shared protocol line."""
    inputs = [figure_inputs(r) for r in reports]
    return {"protocol": {"description": reports[0]["protocol"]["description"]}, "methods": list(names),
            "reports": [{k: v for k, v in i.items() if k != "dee"} for i in inputs],
            "dee": [i["dee"] for i in inputs]}


def _left_out_note(left_out: list[str], limit: int, drawn: int) -> str:
    named = "; ".join(left_out[:_NAMED_LEFT_OUT])
    more = f"; and {len(left_out) - _NAMED_LEFT_OUT} more" if len(left_out) > _NAMED_LEFT_OUT else ""
    return (f"{drawn} figures drawn, {len(left_out)} left out (at most {limit} per report; the tables above "
            f"hold every split's numbers): {named}{more}")


def _failure_note(returncode: int, stderr: bytes, limits: SandboxLimits) -> str:
    if returncode < 0:
        sig = -returncode
        if sig == signal.SIGXCPU:
            why = f"it used more than {limits.cpu_seconds} s of CPU time"
        elif sig == signal.SIGKILL:
            why = (f"the drawing process was killed (SIGKILL: past the {limits.cpu_seconds} s CPU limit, or the "
                   "system's out-of-memory killer)")
        else:
            why = f"the drawing process died of signal {sig}"
    else:
        text = stderr.decode("utf-8", errors="replace")
        # what running out of address space looks like: in Python, in the C library, in the dynamic loader
        if any(m in text for m in ("MemoryError", "Cannot allocate memory", "failed to map segment")):
            why = f"it needed more memory than the {limits.memory_bytes / 2**20:.0f} MiB address-space limit"
        else:
            last = next((ln for ln in reversed(text.strip().splitlines()) if ln.strip()), "no message")
            why = f"the drawing process exited with status {returncode}: {shorten(last, 300)}"
    return f"figures not drawn: {why}"


def _child_env(workdir: str) -> dict[str, str]:
    # MPLCONFIGDIR in the child's own empty directory: it cannot write there (RLIMIT_FSIZE = 0), so matplotlib
    # builds its font list in memory on each run (well under a second), and nothing of the host's is touched.
    return {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
            "MPLBACKEND": "Agg", "MPLCONFIGDIR": workdir, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1"}


def draw_figures(report: Mapping[str, Any], limits: SandboxLimits = SandboxLimits(), *,
                 max_figures: int = MAX_FIGURES) -> DrawnFigures:
    """The report's figures, drawn in a limited child (see the module docstring); never raises for the report's
    content: a failure or a limit becomes a note."""
    return _draw_in_child("report", figure_inputs(report), limits, max_figures)


def draw_compare_figures(reports: Sequence[Mapping[str, Any]], names: Sequence[str],
                         limits: SandboxLimits = SandboxLimits(), *, max_figures: int = MAX_FIGURES
                         ) -> DrawnFigures:
    """The comparison figures of several reports (``ubench compare --html``), drawn as :func:`draw_figures`
    draws a report's."""
    return _draw_in_child("compare", compare_inputs(reports, names), limits, max_figures)


def _draw_in_child(kind: str, inputs: Mapping[str, Any], limits: SandboxLimits, max_figures: int) -> DrawnFigures:
    request = json.dumps({"kind": kind, "inputs": inputs, "limits": limits.to_dict(), "parent": os.getpid(),
                          "max_figures": max_figures})
    with tempfile.TemporaryDirectory(prefix="ubench-figures-") as workdir:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-B", "-m", "ubench.scoring.plot_sandbox"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=workdir, env=_child_env(workdir), start_new_session=True, close_fds=True,
        )
        try:
            out, err = proc.communicate(request.encode(), timeout=limits.timeout_seconds)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return DrawnFigures((), (f"figures not drawn: drawing took longer than {limits.timeout_seconds:g} s "
                                     "of wall-clock time",))
    if proc.returncode != 0:
        return DrawnFigures((), (_failure_note(proc.returncode, err, limits),))
    answer = json.loads(out)
    drawn = tuple((str(c), str(svg)) for c, svg in answer["drawn"])
    notes = tuple(f"figure not drawn: {f}" for f in answer["failed"])
    if answer["left_out"]:
        notes += (_left_out_note(answer["left_out"], max_figures, len(drawn)),)
    return DrawnFigures(drawn, notes)


def main() -> None:
    """The child: read the request, limit itself, draw, write :class:`~ubench.scoring.plots.Figures` as JSON."""
    import resource

    request = json.loads(sys.stdin.buffer.read())
    limits = request["limits"]
    limit_process(limits, int(request["parent"]))
    cpu = int(limits["cpu_seconds"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    from .plots import compare_figures, figures

    draw = compare_figures if request.get("kind") == "compare" else figures
    drawn = draw(request["inputs"], limit=int(request["max_figures"]))
    sys.stdout.write(json.dumps(dataclasses.asdict(drawn)))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
