# SPDX-License-Identifier: MIT
"""Score a directory of uploads into a leaderboard: sandboxed, resumable, incremental, parallel.

Every entry of the upload directory is scored in the sandbox (``scoring/sandbox.py``); a bad upload becomes a row
with its findings. Each result is a JSON file ``<board>/results/<sha256>-<config>.json`` named by the archive's
content hash and a hash of everything else that changes a result (ubench version, task, protocol, reference
content, read limits). A result file is committed once (written under a temporary name, fsync'd, then
hard-linked to its name, which fails if another run got there first), so:

- a re-run scores only uploads it has no result for (incremental), and a killed run continues where it stopped;
- when a Dask worker dies and its task runs again elsewhere, the second run finds the committed result, or
  commits its own if the first never did: every upload has exactly one result.

Results of resource failures (timeout, memory, CPU) are reused only while the sandbox limits are no larger than
those they were obtained under; raise a limit and those uploads are scored again.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import dataclasses
import hashlib
import json
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from ..archive_schema.durable import atomic_path, fsync_dir
from ..archive_schema.scan import file_sha256
from .dee import DEE_REFERENCE_SETTINGS, DeeUnavailableError, dee_of_report, reference_curve
from .sandbox import SandboxLimits, SandboxOutcome, SandboxTask, run_sandboxed

__all__ = ["BoardConfig", "archive_digest", "list_uploads", "score_one", "score_directory", "build_board",
           "LEADERBOARD_SCHEMA", "RESOURCE_STATUSES", "PRIMARY_COLUMNS"]

LEADERBOARD_SCHEMA = "1.0"
#: Outcomes that depend on the sandbox limits rather than on the archive alone.
RESOURCE_STATUSES = frozenset({"timeout", "memory-limit", "cpu-limit", "killed"})
#: Columns shown first, in this order (Ashukha et al. 2020: CLL and DEE are the comparable headline numbers).
PRIMARY_COLUMNS = ("cll", "dee", "accuracy", "ood_auroc_total", "calibrated_brier")
#: Test-only hooks (marker files counting executions; holding one upload's first execution so a test can kill
#: its worker). Never set outside the test suite.
MARKERS_ENV = "UBENCH_TEST_SCORE_MARKERS"
HOLD_ENV = "UBENCH_TEST_SCORE_HOLD"


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def archive_digest(path: str | Path) -> str:
    """sha256 of a regular file's bytes; for anything else (symlink, FIFO, directory) a hash of what it is,
    computed without opening it, so the sandbox can report it."""
    st = os.lstat(path)
    if stat.S_ISREG(st.st_mode):
        return file_sha256(path)
    what = os.readlink(path) if stat.S_ISLNK(st.st_mode) else ""
    return hashlib.sha256(_canonical(["not-a-regular-file", Path(path).name, st.st_mode, what])).hexdigest()


def list_uploads(directory: str | Path) -> list[Path]:
    """Every non-hidden entry of ``directory`` except sub-directories (``*.partial`` run directories included,
    so they get their finding), sorted by name. Symbolic links are listed, never followed."""
    out = []
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if entry.name.startswith("."):
            continue
        if entry.is_dir(follow_symlinks=False) and not entry.name.endswith(".partial"):
            continue
        out.append(Path(entry.path))
    return out


@dataclass(frozen=True)
class BoardConfig:
    """Everything a per-archive result depends on, plus the sandbox limits.

    ``kind`` is ``"score"`` (the default) or ``"validate"`` (findings only). ``reference_sha256`` is filled by
    :meth:`create`; ``protocol`` is ``Protocol.to_dict()``.
    """

    kind: str = "score"
    reference: str | None = None
    reference_sha256: str | None = None
    protocol: dict[str, Any] | None = None
    read_limits: dict[str, Any] = field(default_factory=dict)
    sandbox: SandboxLimits = SandboxLimits()

    @classmethod
    def create(cls, *, kind: str = "score", reference: str | Path | None = None, protocol=None,
               read_limits: dict[str, Any] | None = None, sandbox: SandboxLimits = SandboxLimits()) -> BoardConfig:
        ref = None if reference is None else os.path.abspath(reference)
        proto = protocol.to_dict() if hasattr(protocol, "to_dict") else protocol
        if kind == "score" and proto is None:
            from .protocols import Protocol

            proto = Protocol.preset("pitfalls").to_dict()
        return cls(kind, ref, None if ref is None else file_sha256(ref), proto, dict(read_limits or {}), sandbox)

    def key(self) -> str:
        """Hash of what changes a result (not the sandbox limits, not the reference's path)."""
        body = {"ubench_version": __version__, "kind": self.kind, "reference_sha256": self.reference_sha256,
                "protocol": self.protocol, "read_limits": self.read_limits}
        return hashlib.sha256(_canonical(body)).hexdigest()


def _limits_cover(now: SandboxLimits, then: dict[str, Any]) -> bool:
    return (now.memory_bytes <= then.get("memory_bytes", 0) and now.cpu_seconds <= then.get("cpu_seconds", 0)
            and now.timeout_seconds <= then.get("timeout_seconds", 0))


def _read_result(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return None  # a damaged cache entry is scored again


def _commit(path: Path, record: dict[str, Any], *, replace: bool) -> bool:
    """Write ``record`` at ``path`` durably; without ``replace`` only if no result exists (True if ours won)."""
    text = json.dumps(record, indent=1, sort_keys=True, allow_nan=False)
    if replace:
        with atomic_path(path) as tmp:
            tmp.write_text(text, encoding="utf-8")
        return True
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)  # atomic and exclusive: exactly one execution commits a result
        except FileExistsError:
            return False
        fsync_dir(path.parent)
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _test_hook(stage: str, digest: str, name: str) -> None:
    markers = os.environ.get(MARKERS_ENV)
    if not markers:
        return
    tag = f"{stage}-{digest[:16]}-{os.getpid()}-{os.urandom(3).hex()}"
    first = not any(p.startswith(f"started-{digest[:16]}-") for p in os.listdir(markers))
    Path(markers, tag).touch()
    if stage == "started" and first and os.environ.get(HOLD_ENV) == name:
        import time

        time.sleep(120)  # the test kills this worker while it waits


def score_one(path: str | Path, *, board: str | Path, config: BoardConfig) -> dict[str, Any]:
    """Score one upload into ``board/results`` unless a usable result exists; returns its result record.

    Idempotent and safe to run concurrently for the same upload. Every problem with the upload becomes part of
    the record; only a failure to write ``board`` raises.
    """
    path = Path(path)
    results = Path(board) / "results"
    results.mkdir(parents=True, exist_ok=True)
    try:
        digest = archive_digest(path)
    except OSError as exc:
        outcome = SandboxOutcome("unreadable", 2, ({"path": "<file>", "check": "not-found", "severity": "error",
                                                    "message": f"cannot read {path.name}: {exc}"},))
        return {"sha256": None, "outcome": outcome.to_dict(), "cached": False, "archive": path.name}
    target = results / f"{digest}-{config.key()[:16]}.json"
    cached = _read_result(target)
    status = None if cached is None else cached.get("outcome", {}).get("status")
    # An internal error is a ubench bug: never trust it from the cache. A resource failure is retried when the
    # limits grew.
    stale = cached is not None and (status == "internal-error" or (
        status in RESOURCE_STATUSES and not _limits_cover(config.sandbox, cached.get("sandbox_limits", {}))))
    if cached is not None and not stale:
        return {**cached, "cached": True, "archive": path.name}
    _test_hook("started", digest, path.name)
    task = SandboxTask(config.kind, str(path), config.reference, config.protocol, config.read_limits)
    outcome = run_sandboxed(task, config.sandbox)
    _test_hook("scored", digest, path.name)
    record = {
        "sha256": digest,
        "config_key": config.key(),
        "ubench_version": __version__,
        "uploaded_name": path.name,
        "scored_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "sandbox_limits": config.sandbox.to_dict(),
        "outcome": outcome.to_dict(),
    }
    if _commit(target, record, replace=stale):
        _test_hook("committed", digest, path.name)
        return {**record, "cached": False, "archive": path.name}
    winner = _read_result(target) or record
    return {**winner, "cached": True, "archive": path.name}


def score_directory(directory: str | Path, board: str | Path, config: BoardConfig, *, workers: int = 1,
                    scheduler: str | None = None, ensemble: str | Path | None = None,
                    progress: Callable[[int, int, dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Score every upload in ``directory`` and write ``board/leaderboard.json`` and ``board/index.html``.

    Parameters
    ----------
    directory : the uploads (see :func:`list_uploads`).
    board : output directory; holds ``results/`` (the cache), ``leaderboard.json`` and ``index.html``.
    config : what to compute and the sandbox limits (:meth:`BoardConfig.create`).
    workers : parallel scoring processes on this machine (a Dask ``LocalCluster`` when above 1).
    scheduler : address of a Dask scheduler; overrides ``workers``.
    ensemble : a deep-ensemble archive (trusted) whose CLL-versus-members curve gives each row's DEE.
    progress : ``progress(done, total, record)`` after each upload.

    Returns
    -------
    The leaderboard dict that was written.
    """
    from .distributed import map_unordered

    board = Path(board)
    board.mkdir(parents=True, exist_ok=True)
    uploads = list_uploads(directory)
    records: list[dict[str, Any] | None] = [None] * len(uploads)
    for done, (i, record) in enumerate(map_unordered(score_one, [str(p) for p in uploads], workers=workers,
                                                      scheduler=scheduler, board=str(board), config=config), 1):
        records[i] = record
        if progress is not None:
            progress(done, len(uploads), record)
    ensemble_record = None
    if ensemble is not None:
        # The DEE reference: the same protocol with member curves on and temperature after averaging.
        ens_protocol = {**(config.protocol or {}), **DEE_REFERENCE_SETTINGS}
        ensemble_record = score_one(ensemble, board=board, config=dataclasses.replace(config, protocol=ens_protocol))
    result = build_board([r for r in records if r is not None], config, ensemble_record)
    write_board(result, board)
    return result


def _metrics(report: dict[str, Any] | None) -> dict[str, float]:
    if not report:
        return {}
    return {k: float(v) for k, v in (report.get("summary") or {}).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "n_samples"}


def _ensemble_report(record: dict[str, Any] | None) -> dict[str, Any] | None:
    report = (record or {}).get("outcome", {}).get("report")
    if not report:
        return None
    try:
        reference_curve(report)
    except DeeUnavailableError:
        return None
    return report


def build_board(records: Sequence[dict[str, Any]], config: BoardConfig,
                ensemble_record: dict[str, Any] | None = None) -> dict[str, Any]:
    """Rows (scored uploads ranked by CLL, then accuracy; rejected ones after them) and column metadata."""
    ens_report = _ensemble_report(ensemble_record)
    curve = None if ens_report is None else reference_curve(ens_report)[0]
    comparable: list[str] = []
    not_comparable: list[str] = []
    rows = []
    for rec in records:
        outcome = rec.get("outcome", {})
        report = outcome.get("report") or {}
        metrics = _metrics(report)
        if ens_report is not None and "cll" in metrics:
            try:
                metrics["dee"] = dee_of_report(report, ens_report)["dee"]
            except DeeUnavailableError:
                pass
        comp = (report.get("comparability") or {})
        comparable += [k for k in comp.get("comparable", []) if k not in comparable]
        not_comparable += [k for k in comp.get("not_comparable", []) if k not in not_comparable]
        archive = report.get("archive") or {}
        rows.append({
            "archive": rec.get("archive"),
            "sha256": rec.get("sha256"),
            "status": outcome.get("status"),
            "exit_code": outcome.get("exit_code"),
            "findings": [f for f in outcome.get("findings", []) if f.get("severity") == "error"],
            "method": archive.get("method"),
            "model": archive.get("model"),
            "n_members": archive.get("n_members"),
            "metrics": metrics,
            "cached": bool(rec.get("cached")),
            "seconds": outcome.get("seconds"),
        })

    def order(row):
        m = row["metrics"]
        scored = row["status"] == "ok" and bool(m)
        return (not scored, -(m.get("cll") if m.get("cll") is not None else float("-inf")),
                -(m.get("accuracy") or 0.0), row["archive"] or "")

    rows.sort(key=order)
    rank = 0
    for row in rows:
        row["rank"] = (rank := rank + 1) if row["status"] == "ok" and row["metrics"] else None
    present = {k for r in rows for k in r["metrics"]}
    first = [k for k in PRIMARY_COLUMNS if k in present]
    rest_comp = [k for k in comparable if k in present and k not in first]
    rest_not = [k for k in not_comparable if k in present and k not in first]
    others = sorted(present - set(first) - set(rest_comp) - set(rest_not))
    columns = ([{"key": k, "comparable": k not in not_comparable} for k in first + rest_comp]
               + [{"key": k, "comparable": False} for k in rest_not]
               + [{"key": k, "comparable": None} for k in others])
    return {
        "leaderboard_schema": LEADERBOARD_SCHEMA,
        "ubench_version": __version__,
        "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "config": {"kind": config.kind, "key": config.key(), "protocol": config.protocol,
                   "reference": config.reference, "reference_sha256": config.reference_sha256,
                   "sandbox_limits": config.sandbox.to_dict()},
        "ensemble": None if ensemble_record is None else {
            "archive": ensemble_record.get("archive"), "sha256": ensemble_record.get("sha256"),
            "status": ensemble_record.get("outcome", {}).get("status"), "cll_curve": curve,
            "note": None if curve is not None else "the deep-ensemble report has no CLL-versus-members curve, "
                                                   "so DEE is not reported"},
        "columns": columns,
        "counts": {s: sum(r["status"] == s for r in rows) for s in sorted({r["status"] for r in rows})},
        "rows": rows,
    }


def write_board(result: dict[str, Any], board: str | Path) -> None:
    """``leaderboard.json`` and ``index.html`` in ``board``, each replaced atomically."""
    from .leaderboard_html import render_html

    board = Path(board)
    with atomic_path(board / "leaderboard.json") as tmp:
        tmp.write_text(json.dumps(result, indent=2, sort_keys=True, allow_nan=False), encoding="utf-8")
    with atomic_path(board / "index.html") as tmp:
        tmp.write_text(render_html(result), encoding="utf-8")
