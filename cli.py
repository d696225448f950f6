# SPDX-License-Identifier: MIT
"""The ``ubench`` command line: parse, call the library, format. No metric code lives here.

Exit codes: 0 success (archive valid); 1 archive invalid or rejected (findings printed), or a missing extra (its
``pip install`` line printed, ``ubench/extras.py``); 2 usage error or a file that cannot be read as an archive at all.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import click

from . import __version__
from .cli_options import Size, sandbox_limit_options, sandbox_limits

EPILOG = (
    "Exit codes: 0 success (archive valid); 1 archive invalid or rejected (findings printed), or an extra the "
    "command needs not installed (its pip install line printed); 2 usage error or a file that cannot be read as "
    "an archive at all."
)

_ARCHIVE = click.Path(exists=False, path_type=Path)


def _dump_json(obj) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, allow_nan=False)


def _exit_code(findings) -> int:
    from .archive_schema.scan import UNREADABLE_CHECKS

    errors = [f for f in findings if f.severity == "error"]
    if not errors:
        return 0
    return 2 if any(f.check in UNREADABLE_CHECKS for f in errors) else 1


def _echo(line: str = "", *, err: bool = False) -> None:
    """Print one line: every control, bidi and surrogate character in it escaped (``scoring/text.py``), a newline
    in an archive string or a file name included, so an upload can neither drive the terminal nor forge a line."""
    from .scoring.text import escape_text

    click.echo(escape_text(line), err=err)


def _echo_text(text: str, *, err: bool = False, nl: bool = True) -> None:
    """Print formatted text (tables, JSON) whose values are escaped already: its line breaks are kept, any other
    control character left in it is escaped."""
    from .scoring.text import escape_lines

    click.echo(escape_lines(text), err=err, nl=nl)


def _styled() -> bool:
    """Whether stdout is a terminal: tables are then drawn with rich; in a pipe or a file they are plain text
    (no ANSI, no box art)."""
    return sys.stdout.isatty()


def _echo_table(text: str) -> None:
    """Print a table from ``scoring/tables.py``: a styled one as it is (its cells were escaped before rich drew
    them; only rich's own colour codes are left), a plain one through :func:`_echo_text`."""
    if "\x1b" in text and _styled():
        click.echo(text, nl=False)
    else:
        _echo_text(text, nl=False)


def _echo_findings(findings, *, archive: Path | str | None = None, err: bool = False) -> None:
    """One line per finding; a finding about the file as a whole (HDF5 path ``<file>`` in the JSON) names the
    file ``archive`` instead of printing ``<file>``."""
    import dataclasses

    for f in findings:
        _echo(str(dataclasses.replace(f, path=str(archive)) if archive is not None and f.path == "<file>" else f),
              err=err)


#: Checks of a sandboxed score that compare an upload with the reference (``scoring/sandbox.py``): ``ubench
#: validate`` checks the archive alone, so it is not the command to list them.
_REFERENCE_CHECKS = frozenset({"reference", "reference-file"})


def _rejected_line(archive: Path, status: str, errors) -> str:
    """The last line of a sandboxed rejection: the status once, and the command that lists the findings only
    where that command checks what failed (issue #28 item 9)."""
    if errors and all(f.check in _REFERENCE_CHECKS for f in errors):
        return f"{archive}: rejected: it does not match the reference (every difference is listed above)"
    if status in ("rejected", "unreadable"):
        return f"{archive}: {status}; `ubench validate {archive} --sandbox` lists every finding of the archive"
    return f"{archive}: rejected ({status})"


#: Commands that live with their code, imported when named (or listed by ``--help``), not at every start-up:
#: name -> (module, attribute). Their modules cost ~16 ms of a `ubench score` that never runs them (issue #29).
_LAZY_COMMANDS = {
    "produce": (".producers.command", "produce"),  # defined with the producers; imports torch only when it runs
    "tune": (".producers.tune_command", "tune"),
    "serve": (".serve.command", "serve"),  # the service's commands; FastAPI/uvicorn are imported when it runs
    "latency": (".edge.command", "latency"),
    "distill": (".edge.command", "distill"),
    "import": (".importers.command", "import_cmd"),
}


class _Cli(click.Group):
    """The ``ubench`` group: a missing extra (``ubench/extras.py``), wherever a command meets it, is one line
    with its ``pip install`` and exit code 1, the same for every command; the commands of
    :data:`_LAZY_COMMANDS` are imported when asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *_LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in _LAZY_COMMANDS:
            import importlib

            module, attr = _LAZY_COMMANDS[cmd_name]
            self.add_command(getattr(importlib.import_module(module, __package__), attr), cmd_name)
        return self.commands.get(cmd_name)

    def invoke(self, ctx: click.Context):
        from .extras import MissingExtraError

        try:
            return super().invoke(ctx)
        except MissingExtraError as exc:
            raise click.ClickException(str(exc)) from None


@click.group(cls=_Cli, epilog=EPILOG)
@click.version_option(__version__, prog_name="ubench")
def cli() -> None:
    """ubench: score uncertainty estimates the way the papers say they must be scored."""


@contextlib.contextmanager
def _archive_errors_exit(archive: Path):
    """Turn the reader's errors into the CLI's: error findings on stderr and exit 1 (2 when unreadable)."""
    from .archive_schema import ArchiveError, InvalidArchiveError, UnreadableArchiveError

    try:
        yield
    except (InvalidArchiveError, UnreadableArchiveError) as exc:
        errors = [f for f in exc.findings if f.severity == "error"]
        if errors and all(f.check == "not-found" for f in errors):  # nothing to validate: say why plainly
            _echo(f"error: {errors[0].message}", err=True)
            sys.exit(2)
        _echo_findings(errors, archive=archive, err=True)
        _echo(f"{archive}: rejected (`ubench validate {archive}` lists every finding)", err=True)
        sys.exit(_exit_code(exc.findings) or 1)
    except ArchiveError as exc:  # unsupported version, partial runs, …
        _echo(f"error: {exc}", err=True)
        sys.exit(1)


def _open_or_exit(archive: Path, **kwargs):
    """Open an archive through the safe reader, or print its findings and exit with the right code."""
    from .archive_schema import open_archive

    with _archive_errors_exit(archive):
        return open_archive(archive, **kwargs)


def _diagnostics_line(d: dict) -> str:
    """One line of the ``/diagnostics`` summary (R-hat above 1.01 says the chains have not mixed)."""
    def num(x, fmt):
        return format(x, fmt) if isinstance(x, (int, float)) else str(x)

    parts = [f"{d.get('chains')} chain(s) x {d.get('draws_per_chain')} draws"]
    lp = d.get("log_posterior")
    if isinstance(lp, dict):
        parts.append(f"log-posterior R-hat {num(lp.get('rhat'), '.3f')}, ESS {num(lp.get('ess_bulk'), '.1f')}")
    probe = d.get("probe")
    if isinstance(probe, dict):
        parts.append(f"probe {probe.get('quantity')} on {probe.get('split')} ({probe.get('size')} samples): R-hat max "
                     f"{num(probe.get('rhat_max'), '.3f')}, median {num(probe.get('rhat_median'), '.3f')}; ESS min "
                     f"{num(probe.get('ess_bulk_min'), '.1f')}, median {num(probe.get('ess_bulk_median'), '.1f')}")
    if d.get("note"):
        parts.append(str(d["note"]))
    return "; ".join(parts)


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


# --- sandboxed scoring and leaderboards (issue #6) ----------------------------------------------------------------

# The sandbox options are shared with serve/command.py, which cannot import this module (see cli_options.py).
_Size, _sandbox_limit_options, _sandbox_limits = Size, sandbox_limit_options, sandbox_limits


def _score_sandboxed_or_exit(archive: Path, *, reference, protocol, limits) -> dict:
    """Score in a sandboxed child; its findings (a crash, a limit, a rejection) are printed, with the exit code."""
    return _sandboxed_or_exit("score", archive, reference=reference, protocol=protocol, limits=limits)


def _sandboxed_or_exit(kind: str, archive: Path, *, reference=None, protocol=None, limits) -> dict:
    """Run a ``score`` or ``inspect`` task in a sandboxed child and return its report; its findings (a crash, a
    limit, a rejection) are printed, with the exit code."""
    from .archive_schema import Finding
    from .scoring.sandbox import SandboxTask, run_sandboxed

    task = SandboxTask(kind, str(archive), None if reference is None else str(reference),
                       None if protocol is None else protocol.to_dict())
    outcome = run_sandboxed(task, limits)
    if outcome.status == "ok":
        return outcome.report
    errors = [Finding(**f) for f in outcome.findings if f["severity"] == "error"]
    _echo_findings(errors, archive=archive, err=True)
    _echo(_rejected_line(archive, outcome.status, errors), err=True)
    sys.exit(outcome.exit_code or 1)


@cli.command(epilog=EPILOG)
@click.argument("archive", type=_ARCHIVE)
@click.option("--json", "as_json", is_flag=True, help="Print the description as JSON.")
@click.option("--sandbox/--no-sandbox", "sandbox", default=False, show_default=True,
              help="Read the archive in a limited child process (as `validate --sandbox`): for files from "
                   "strangers, since a corrupt file can make libhdf5 crash or spin.")
@_sandbox_limit_options
def inspect(archive: Path, as_json: bool, sandbox: bool, memory_limit: int, cpu_limit: int, timeout: float) -> None:
    """Describe an archive: metadata, splits with roles and shapes, members, sizes on disk.

    A reference label file (`ubench reference`) is described too: its splits, roles, sizes and primary split.

    \b
    ubench inspect examples/digits_deep_ensemble.h5
    ubench inspect examples/digits_reference.h5
    ubench inspect upload.h5 --sandbox --json
    """
    if sandbox:
        info = _sandboxed_or_exit("inspect", archive, limits=_sandbox_limits(memory_limit, cpu_limit, timeout))
    else:
        info = _describe_or_exit(archive)
    if as_json:
        _echo_text(_dump_json(info))
        return
    if info.get("kind") == "reference-labels":
        _echo_reference(info)
        return
    _echo(f"archive   {info['path']}  ({_human_bytes(info['file_bytes'])}, format {info['format_version']})")
    for key in ("method", "model", "dataset", "n_classes", "n_members"):
        _echo(f"{key:<9} {info[key]}")
    for key, value in info["provenance"].items():
        _echo(f"{key:<9} {value}")
    if info["class_names"]:  # at most 20 names: C may be 100,000 names of 1 KiB (issue #16 item 3)
        more = len(info["class_names"]) - 20
        _echo(f"classes   {', '.join(info['class_names'][:20])}{f' … ({more} more)' if more > 0 else ''}")
    if info["scalability"]:
        _echo("scalability " + ", ".join(f"{k}={v}" for k, v in sorted(info["scalability"].items())))
    if info.get("diagnostics"):
        _echo(f"diagnostics {_diagnostics_line(info['diagnostics'])}")
    _echo("")
    _echo(f"{'split':<24} {'role':<10} {'dataset':<16} {'shift':<18} {'shape (M, N, C)':<20} "
               f"{'dtype':<8} {'stored':>10} labels ids")
    for s in info["splits"]:
        shift = f"{s['shift_kind']}@{s['shift_intensity']:g}" if s["role"] == "shift" else "-"
        _echo(f"{s['name']:<24} {s['role']:<10} {s['dataset']:<16} {shift:<18} {str(tuple(s['shape'])):<20} "
                   f"{s['dtype']:<8} {_human_bytes(s['stored_bytes']):>10} "
                   f"{'yes' if s['has_labels'] else 'no':<6} {'yes' if s['has_sample_ids'] else 'no'}")
    _echo("")
    kinds = sorted({m["kind"] for m in info["members"]})
    seeds = [m["seed"] for m in info["members"]]
    _echo(f"members   {len(seeds)} ({', '.join(kinds)}); seeds {seeds[:10]}{' …' if len(seeds) > 10 else ''}")
    if info["config"]:
        _echo("config    " + json.dumps(info["config"], sort_keys=True)[:400])


def _describe_or_exit(path: Path) -> dict:
    """``describe_archive`` of a prediction archive, or ``describe_reference`` of a reference label file."""
    from .archive_schema import ArchiveError, open_archive
    from .archive_schema.describe import describe_archive
    from .archive_schema.errors import NotAnArchiveError

    try:
        reader = open_archive(path, check_values=False)
    except NotAnArchiveError as exc:
        if exc.found_format != "reference-labels":
            _echo(f"error: {exc}", err=True)
            sys.exit(1)
    except ArchiveError:
        with _archive_errors_exit(path):  # the findings and exit code of every other command
            raise
    else:
        with _archive_errors_exit(path), reader:
            return describe_archive(reader)
    from .scoring.reference import ReferenceError, describe_reference, read_reference

    try:
        return describe_reference(read_reference(path))
    except ReferenceError as exc:
        _echo(f"error: {exc}", err=True)
        sys.exit(1)


def _echo_reference(info: dict) -> None:
    """The text of ``ubench inspect`` for a reference label file."""
    _echo(f"reference {info['path']}  ({_human_bytes(info['file_bytes'])}, reference label file: labels and "
          "sample ids, no predictions)")
    _echo(f"{'dataset':<9} {info['dataset']}")
    _echo(f"{'n_classes':<9} {info['n_classes']}")
    _echo(f"{'primary':<9} {info['primary']}  (the in-domain split behind the headline, ranking and OOD scores)")
    _echo("")
    _echo(f"{'split':<24} {'role':<10} {'dataset':<16} {'shift':<18} {'samples':>8} labels")
    from .scoring.tables import natural_key

    for s in sorted(info["splits"], key=lambda s: natural_key(s["name"])):
        shift = f"{s['shift_kind']}@{s['shift_intensity']:g}" if s["role"] == "shift" else "-"
        labels = f"yes ({s['n_labelled_classes']} classes present)" if s["has_labels"] else "no"
        _echo(f"{s['name']:<24} {s['role']:<10} {s['dataset']:<16} {shift:<18} {s['n_samples']:>8} {labels}")


@cli.command(epilog=EPILOG)
@click.argument("partial", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--overwrite", is_flag=True, help="Replace an existing archive at the target path.")
def finalize(partial: Path, overwrite: bool) -> None:
    """Write the archive of an unfinished producer run from the members it finished.

    \b
    ubench finalize run.h5.partial      # writes run.h5
    """
    from .archive_schema import ArchiveError, finalize_partial

    try:
        out = finalize_partial(partial, overwrite=overwrite)
    except ArchiveError as exc:
        _echo(f"error: {exc}", err=True)
        sys.exit(1)
    _echo(str(out))


# --- scoring: score, reference, compare, dee (issue #4) ---------------------------------------------------------

_PRESETS = ("pitfalls", "ursabench", "shift")


def _protocol_options(f):
    """The protocol preset and the individual settings that override it (shared by score, compare, dee)."""
    opts = [
        click.option("--protocol", "preset", type=click.Choice(_PRESETS), default="pitfalls", show_default=True,
                     help="Named preset of a paper's conventions (scoring/protocols.py)."),
        click.option("--placement", type=click.Choice(("post", "per_member", "none")), default=None,
                     help="Temperature-scaling placement; 'none' = no temperature scaling. [default: preset]"),
        click.option("--folds", type=click.IntRange(min=2, max=2), default=None,
                     help="Test-time cross-validation folds: 2 (random halves, as in the Pitfalls protocol) is the "
                          "one implemented. [default: preset]"),
        click.option("--repeats", type=click.IntRange(min=1), default=None,
                     help="Test-time cross-validation repeats. [default: preset]"),
        click.option("--seed", type=int, default=None, help="Seed of folds and member orders. [default: preset]"),
        click.option("--bins", type=click.IntRange(min=1), default=None,
                     help="Bins of ECE/TACE/UCE and reliability diagrams. [default: preset]"),
        click.option("--smoothing", type=click.FloatRange(0.0, 1.0, max_open=True), default=None,
                     help="Central smoothing of every member (URSABench: 1e-4). [default: preset]"),
        click.option("--orders", type=click.IntRange(min=1), default=None,
                     help="Random member orders of member curves and DEE. [default: preset]"),
        click.option("--cost-preset", type=click.Choice(("mnist", "cifar10", "cifar100", "imagenet", "auto")),
                     default=None, help="URSABench decision-cost matrix to report the decision cost under; 'auto' "
                                        "picks it from the archive's dataset. [default: preset]"),
        click.option("--cost-matrix", type=click.Path(exists=True, dir_okay=False), default=None,
                     help="Decision-cost matrix file (.npy or .csv), cost[true, decided]."),
        click.option("--member-curves/--no-member-curves", "member_curves", default=None,
                     help="CLL, accuracy and Brier against the number of members (a cross-validated fit per "
                          "prefix of every order).  [default: on with --html and for dee, else off]"),
        click.option("--conformal-method", type=click.Choice(("thr", "aps", "raps")), default=None,
                     help="Split-conformal score of conformal_coverage/conformal_set_size. [default: aps]"),
        click.option("--conformal-alpha", type=click.FloatRange(0.0, 1.0, min_open=True, max_open=True),
                     default=None, help="Mis-coverage level of the conformal sets. [default: 0.1]"),
        click.option("--calibrator", "calibrator", multiple=True, metavar="NAME",
                     help="Also fit this post-hoc calibrator under test-time cross-validation and report its "
                          "held-out NLL, Brier and ECE (temperature, vector, matrix, dirichlet, histogram, "
                          "isotonic, bbq); repeatable."),
        click.option("--calibrators", "calibrators", default=None, metavar="all|NAME,...",
                     help="The same for several calibrators at once ('all': every one)."),
        click.option("--odir", "odir", default=None, metavar="fixed|cv",
                     help="ODIR strengths of the dirichlet calibrator: 'fixed' (lambda = mu = 1e-3) or 'cv' (chosen "
                          "per fold by an inner 5-fold cross-validation over Kull et al.'s grid, then refitted; "
                          "the report's calibrators.dirichlet.selected). [default: fixed]"),
        click.option("--shift-temperature/--no-shift-temperature", "shift_temperature", default=None,
                     help="The shift paper's Temp Scaling: a temperature fitted on in-domain data (a validation "
                          "split if the archive has one) applied to every shifted split. [default: off]"),
        click.option("--intervals/--no-intervals", "intervals", default=None,
                     help="Bootstrap confidence intervals over the test samples beside every number "
                          "(the report's 'intervals'; compare's paired differences, the leaderboard's rank "
                          "intervals). [default: on]"),
        click.option("--confidence", type=click.FloatRange(0.5, 1.0, max_open=True), default=None,
                     help="Level of the intervals. [default: 0.95]"),
        click.option("--bootstrap", "bootstrap", type=click.IntRange(min=10), default=None, metavar="B",
                     help="Bootstrap replicates of the intervals (seeded by --seed). [default: 1000]"),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def _calibrator_names(calibrator=(), calibrators=None) -> tuple[str, ...] | None:
    from .metrics.calibrators import CALIBRATORS

    names = list(calibrator)
    if calibrators:
        names += list(CALIBRATORS) if calibrators.strip() == "all" else [c.strip() for c in calibrators.split(",")]
    return tuple(dict.fromkeys(n for n in names if n)) or None


def _protocol_from(preset, placement, folds, repeats, seed, bins, smoothing, orders, cost_preset, cost_matrix,
                   member_curves=None, conformal_method=None, conformal_alpha=None, calibrator=(),
                   calibrators=None, shift_temperature=None, odir=None, intervals=None, confidence=None,
                   bootstrap=None):
    from .scoring.protocols import Protocol, load_cost_matrix

    try:
        matrix = None if cost_matrix is None else load_cost_matrix(cost_matrix)
        return Protocol.preset(preset).replace(
            placement=placement, folds=folds, repeats=repeats, seed=seed, bins=bins, smoothing=smoothing,
            orders=orders, cost_preset=cost_preset, cost_matrix=matrix, cost_source=cost_matrix,
            member_curves=member_curves, conformal_method=conformal_method, conformal_alpha=conformal_alpha,
            calibrators=_calibrator_names(calibrator, calibrators), shift_temperature=shift_temperature,
            odir=odir, intervals=intervals, confidence=confidence, bootstrap=bootstrap)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def _progress(enabled: bool):
    """The command's progress display on stderr (``ubench/progress.py``: bars on a terminal, else one line per
    finished split, archive or upload), or None (``--json``, ``--csv``)."""
    if not enabled:
        return None
    from .progress import ProgressDisplay

    return ProgressDisplay()


def _check_reference_or_exit(reference: Path | None) -> None:
    """Read a trusted ``--reference`` here, before any upload is opened, so that a wrong file (a prediction
    archive, a missing file) is named as the reference's problem, not the upload's (exit 2)."""
    if reference is None:
        return
    from .scoring.reference import ReferenceError, read_reference

    try:
        read_reference(reference)
    except ReferenceError as exc:
        _echo(f"error: --reference: {exc}", err=True)
        sys.exit(2)


def _score_or_exit(archive: Path, *, reference=None, protocol, progress=None, scheduler: str | None = None,
                   workers: int = 1) -> dict:
    """Score one archive (its splits on Dask workers with ``scheduler``/``workers``); the library's errors become
    findings or one line with the CLI's exit code."""
    from .scoring.reference import ReferenceError, ReferenceMismatchError
    from .scoring.score import run_score

    with _archive_errors_exit(archive):
        try:
            return run_score(archive, reference=reference, protocol=protocol, scheduler=scheduler, workers=workers,
                             progress=None if progress is None else progress.scoring_callback(f"{archive.name}: "))
        except ReferenceMismatchError as exc:
            _echo(f"{archive}: does not match the reference:", err=True)
            for d in exc.differences:
                _echo(f"  {d}", err=True)
            sys.exit(1)
        except ReferenceError as exc:
            _echo(f"error: {exc}", err=True)
            sys.exit(2)
        except ValueError as exc:
            # a valid archive that cannot be scored under the protocol (e.g. a cost matrix of the wrong size), or
            # a split that cannot be scored within the memory left (scoring/memory_plan.py: refused up front)
            _echo(f"error: {archive}: cannot be scored: {exc}", err=True)
            sys.exit(1)
        except (OSError, TimeoutError) as exc:
            if scheduler is None and workers <= 1:
                raise
            _echo(f"error: the Dask cluster failed ({scheduler or f'{workers} local workers'}): {exc}", err=True)
            sys.exit(2)
        except MemoryError:
            # the plan left too little room after all (another process took the memory meanwhile)
            _echo(f"error: {archive}: scoring ran out of memory (less was free than when it was planned); free some "
                  "or score it with --sandbox --memory-limit SIZE", err=True)
            sys.exit(1)


@cli.command(epilog=EPILOG)
@click.argument("archive", type=_ARCHIVE)
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
@click.option("--sandbox/--no-sandbox", "sandbox", default=False, show_default=True,
              help="Validate in a limited child process: for files from strangers, since a corrupt file can make "
                   "libhdf5 crash or spin, which only a process limit stops.")
@_sandbox_limit_options
def validate(archive: Path, as_json: bool, sandbox: bool, memory_limit: int, cpu_limit: int, timeout: float) -> None:
    """Check an archive against the spec and the reader's safety limits; list every finding.

    \b
    ubench validate run.h5
    ubench validate upload.h5 --sandbox --json
    """
    if sandbox:
        from .archive_schema import Finding
        from .scoring.sandbox import SandboxTask, run_sandboxed

        outcome = run_sandboxed(SandboxTask("validate", str(archive)),
                                _sandbox_limits(memory_limit, cpu_limit, timeout))
        findings = [Finding(**f) for f in outcome.findings]
        code = outcome.exit_code
    else:
        from .archive_schema import validate_archive

        findings = validate_archive(archive)
        code = _exit_code(findings)
    if as_json:
        _echo_text(_dump_json({"archive": str(archive), "valid": code == 0, "exit_code": code,
                               "findings": [f.to_dict() for f in findings]}))
    else:
        _echo_findings(findings, archive=archive)
        _echo(f"{archive}: {'valid' if code == 0 else 'INVALID' if code == 1 else 'UNREADABLE'}"
                   f" ({sum(f.severity == 'error' for f in findings)} error(s))")
    sys.exit(code)


@cli.command(epilog=EPILOG)
@click.argument("archive", type=_ARCHIVE)
@click.option("--reference", type=click.Path(path_type=Path), default=None,
              help="Trusted reference label file (`ubench reference`); labels come only from it.")
@_protocol_options
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (scoring/REPORT_KEYS.md).")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write a self-contained HTML report with plots to this path.")
@click.option("--ensemble", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Deep-ensemble archive (trusted): adds the DEE curve of this archive against it.")
@click.option("--sandbox/--no-sandbox", "sandbox", default=None,
              help="Read and score in a limited child process (crash, memory, CPU and time limits).  "
                   "[default: on with --reference, off otherwise]")
@click.option("--mlflow", "mlflow_log", is_flag=True,
              help="Log the headline metrics (and the --html report) to MLflow.")
@click.option("--mlflow-uri", default=None, help="MLflow tracking URI, e.g. file:./mlruns (default: MLflow's own).")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Score the archive's splits in parallel on a local Dask cluster of this many processes.")
@click.option("--scheduler", type=str, default=None,
              help="Dask scheduler address (tcp://host:8786) whose workers score the archive's splits (they must "
                   "see the archive at the same path). Not with --sandbox.")
@_sandbox_limit_options
def score(archive: Path, reference: Path | None, as_json: bool, html_path: Path | None, ensemble: Path | None,
          sandbox: bool | None, memory_limit: int, cpu_limit: int, timeout: float, mlflow_log: bool = False,
          mlflow_uri: str | None = None, workers: int = 1, scheduler: str | None = None, **options) -> None:
    """Score an archive: every split by its role, under a paper's protocol.

    \b
    ubench score run.h5
    ubench score upload.h5 --reference test_labels.h5 --json
    ubench score run.h5 --protocol ursabench --cost-preset mnist --html report.html
    ubench score run.h5 --confidence 0.9 --bootstrap 2000     # or --no-intervals
    ubench score imagenet_c.h5 --scheduler tcp://10.0.0.5:8786
    """
    if (html_path is not None or ensemble is not None) and options.get("member_curves") is None:
        options["member_curves"] = True
    protocol = _protocol_from(**options)
    if mlflow_log or mlflow_uri is not None:  # before scoring, not after it
        from .extras import require

        require("mlflow", what="--mlflow")
    _check_reference_or_exit(reference)
    progress = _progress(not as_json)
    parallel = workers > 1 or scheduler is not None
    if parallel and sandbox:
        raise click.UsageError("--workers/--scheduler score on Dask workers, not in the sandbox: drop --sandbox")
    if (sandbox if sandbox is not None else reference is not None) and not parallel:
        report = _score_sandboxed_or_exit(archive, reference=reference, protocol=protocol,
                                          limits=_sandbox_limits(memory_limit, cpu_limit, timeout))
    else:
        report = _score_or_exit(archive, reference=reference, protocol=protocol, progress=progress,
                                scheduler=scheduler, workers=workers)
    if ensemble is not None:
        from .scoring.dee import attach_dee

        attach_dee(report, _score_or_exit(ensemble, reference=reference, protocol=_dee_protocol(protocol),
                                          progress=progress))
    if progress is not None:
        progress.close()
    if html_path is not None:
        from .scoring.html import write_html

        # the figures are drawn in a limited child, under the same limits as sandboxed scoring (issue #16.9)
        _, figure_notes = write_html(report, html_path, limits=_sandbox_limits(memory_limit, cpu_limit, timeout))
        if not as_json:
            _echo(f"wrote {html_path}", err=True)
            for n in figure_notes:
                _echo(f"note: {n}", err=True)
    if mlflow_log or mlflow_uri is not None:
        from .integrations.mlflow import MlflowLogError, log_report

        try:
            run_id = log_report(report, tracking_uri=mlflow_uri, html_path=html_path)
        except MlflowLogError as exc:
            _echo(f"error: logging to MLflow failed: {exc}", err=True)
            sys.exit(2)
        _echo(f"logged to MLflow run {run_id}", err=True)
    if as_json:
        _echo_text(_dump_json(report))
    else:
        from .scoring.tables import format_notes, format_score

        _echo_table(format_score(report, styled=_styled()))
        _echo_text(format_notes([report]), err=True, nl=False)


@cli.command(epilog=EPILOG)
@click.argument("archive", type=_ARCHIVE)
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Reference file to write (labels and sample ids per split, no predictions).")
@click.option("--overwrite", is_flag=True, help="Replace an existing file at --out.")
@click.option("--primary", type=str, default=None,
              help="In-domain split behind the headline, ranking and OOD scores of every upload scored against "
                   "this reference.  [default: the archive's first in-domain split]")
def reference(archive: Path, out: Path, overwrite: bool, primary: str | None) -> None:
    """Write the trusted reference label file of an archive, for `ubench score --reference`.

    \b
    ubench reference trusted_run.h5 --out test_labels.h5
    ubench reference trusted_run.h5 --out test_labels.h5 --primary test
    """
    from .scoring.reference import ReferenceError, write_reference

    _open_or_exit(archive, check_values=False).close()
    try:
        _echo(str(write_reference(archive, out, overwrite=overwrite, primary=primary)))
    except ReferenceError as exc:
        _echo(f"error: {exc}", err=True)
        sys.exit(1)


@cli.command(epilog="Exit codes: 0 fingerprints written or printed (--check: every dataset found matches); 1 "
                    "--check found a dataset whose files differ from the shipped fingerprints; 2 usage error.")
@click.option("--data", "data_dirs", multiple=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Directory holding dataset files (repeatable; searched like `produce --data-dir`, then "
                   "$UBENCH_DATA and the default search path).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the JSON here (the shipped file is scoring/known_splits.json).  [default: print it]")
@click.option("--check", is_flag=True,
              help="Compare with the shipped fingerprints instead: exit 1 where a dataset found differs.")
def fingerprints(data_dirs: tuple[Path, ...], out: Path | None, check: bool) -> None:
    """Recompute the split fingerprints (SPEC.md section 4.2) of the test sets ubench knows.

    digits always (scikit-learn's bundled data); MNIST, Fashion-MNIST, notMNIST, CIFAR-10/100 and SVHN where their
    test files are found. `ubench score` notes an archive whose split claims one of these test sets but has another
    fingerprint.

    \b
    ubench fingerprints --data ../shared/data --check
    ubench fingerprints --data ../shared/data --data ~/cifar --out known_splits.json
    """
    from .archive_schema.fingerprint import INPUTS_ENCODING
    from .scoring.known_splits import compute_known_splits, load_known_splits

    found, missing = compute_known_splits(data_dirs)
    for name, why in missing.items():
        _echo(f"{name}: not computed ({why})", err=True)
    if check:
        shipped, bad = load_known_splits(), []
        for name, entries in found.items():
            same = shipped.get(name) == entries
            bad += [] if same else [name]
            _echo(f"{name}: {'matches' if same else 'DIFFERS from'} the shipped fingerprint"
                  f"{'' if same else 's'}")
        sys.exit(1 if bad else 0)
    text = _dump_json({"encoding": INPUTS_ENCODING, "datasets": found}) + "\n"
    if out is None:
        click.echo(text, nl=False)
    else:
        out.write_text(text, encoding="utf-8")
        _echo(f"wrote {out}", err=True)


@cli.command(epilog=EPILOG)
@click.argument("archives", type=_ARCHIVE, nargs=-1, required=True)
@click.option("--reference", type=click.Path(path_type=Path), default=None,
              help="Trusted reference label file shared by every archive.")
@click.option("--ensemble", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Deep-ensemble archive: adds a DEE column (Deep Ensemble Equivalent of each method's CLL).")
@_protocol_options
@click.option("--allow-mismatch", is_flag=True, default=False,
              help="Put archives on another task (class count, primary split, its size or sample ids) in the table "
                   "anyway, marked; without it compare refuses them.")
@click.option("--reference-posterior", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Archive of a reference posterior (HMC): add each method's agreement and total variation with "
                   "its predictive distribution (Izmailov et al. 2021). Reads archives in this process. Refused "
                   "when its chains have not converged (split-R-hat > 1.05 or bulk ESS < 100 on the log-posterior "
                   "or a probe sample, or no diagnostics).")
@click.option("--allow-unconverged", is_flag=True, default=False,
              help="Use a --reference-posterior whose chains have not converged anyway; the output says so.")
@click.option("--json", "as_json", is_flag=True, help="Print {'methods': [...], 'reports': [...]} as JSON.")
@click.option("--csv", "as_csv", is_flag=True,
              help="Print one CSV line per archive: method, dataset, model, n_members, archive and every summary "
                   "key (for your own plots; `ubench.report_frame` gives the same as a pandas DataFrame).")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write a self-contained HTML page: the table and the papers' figures, every method "
                   "overlaid (member curves, DEE, shift, reliability, OOD ROC, rejection).")
@click.option("--sandbox/--no-sandbox", "sandbox", default=None,
              help="Read and score every archive in a limited child process, as `score` does.  "
                   "[default: on with --reference, off otherwise]")
@click.option("--group-by", "group_by", type=click.Choice(("method",)), default=None,
              help="One row per method: the archives of a method (its training seeds) give mean +- sd over runs "
                   "and an interval holding run-to-run and test-sample variance (Bouthillier et al. 2021).")
@_sandbox_limit_options
def compare(archives: tuple[Path, ...], reference: Path | None, ensemble: Path | None, allow_mismatch: bool,
            reference_posterior: Path | None, allow_unconverged: bool, as_json: bool, as_csv: bool,
            html_path: Path | None, sandbox: bool | None, memory_limit: int, cpu_limit: int, timeout: float,
            group_by: str | None = None,
            **options) -> None:
    """Score several archives under one protocol: one table, methods as rows, comparable columns marked.

    \b
    ubench compare de.h5 mc_dropout.h5 swag.h5
    ubench compare sgd.h5 swag.h5 --ensemble de.h5 --json
    ubench compare up1.h5 up2.h5 --reference test_labels.h5      # sandboxed
    ubench compare sgld.h5 swag.h5 --reference-posterior hmc.h5
    ubench compare de.h5 swag.h5 --csv > methods.csv
    ubench compare de.h5 mc_dropout.h5 swag.h5 --ensemble de.h5 --html compare.html
    ubench compare de_s0.h5 de_s1.h5 de_s2.h5 swag_s0.h5 swag_s1.h5 --group-by method

    With intervals on (the default), the methods are compared pairwise on their shared test samples (the same
    bootstrap resamples for all): each column's best method is marked ^, and every method not distinguishable
    from it (Holm-adjusted paired bootstrap p >= 1 - level) ~; the JSON's 'paired' lists every difference.
    """
    if as_json and as_csv:
        raise click.UsageError("--json and --csv both print to stdout: choose one")
    if html_path is not None and options.get("member_curves") is None:
        options["member_curves"] = True
    if reference_posterior is not None and (sandbox if sandbox is not None else reference is not None):
        raise click.UsageError("--reference-posterior reads the archives in this process; it is for your own "
                               "archives (use --no-sandbox), not for uploads scored in the sandbox")
    posterior_reference = (None if reference_posterior is None else
                           _check_reference_posterior(reference_posterior, allow_unconverged))
    protocol = _protocol_from(**options)
    if ensemble is not None and not protocol.member_curves:  # DEE at the point the reference curve averages
        protocol = protocol.replace(dee_point=True)
    paired = protocol.intervals and (len(archives) > 1 or group_by is not None)
    if paired:  # per-sample statistics for the paired comparisons (not a setting: not in overrides)
        import dataclasses

        protocol = dataclasses.replace(protocol, sample_stats=True)
    _check_reference_or_exit(reference)
    sandboxed = sandbox if sandbox is not None else reference is not None
    # the task of every archive from its metadata first, so that one on another task is refused before any
    # archive is scored (uploads scored in the sandbox are not opened here: the reference checks their task)
    mismatch = {} if sandboxed else _task_mismatches(archives, reference, allow_mismatch)
    progress = _progress(not (as_json or as_csv))
    score = _scorer(sandbox, reference, _sandbox_limits(memory_limit, cpu_limit, timeout), progress,
                    len(archives) + (ensemble is not None))
    reports = [score(a, protocol) for a in archives]
    names = [f"{r['archive']['method']} ({Path(r['archive']['path']).name})" for r in reports]
    _check_same_task(reports, names, allow_mismatch, mismatch)
    if ensemble is not None:
        from .scoring.dee import attach_dee

        ens = score(ensemble, _dee_protocol(protocol))
        for r in reports:
            attach_dee(r, ens, curve=html_path is not None)  # the page draws every method's DEE curve
    if reference_posterior is not None:
        _add_posterior_agreement(reports, archives, reference_posterior, posterior_reference)
    comparison = _paired_comparison(reports, names, protocol, group_by) if paired else None
    if ensemble is not None and protocol.intervals:
        _add_dee_intervals(reports, ens)
    if progress is not None:
        progress.close()
    if html_path is not None:
        from .scoring.compare_html import write_compare_html

        _, figure_notes = write_compare_html(reports, names, html_path, limits=_sandbox_limits(
            memory_limit, cpu_limit, timeout), ensemble=None if ensemble is None else str(ensemble),
            comparison=comparison)
        _echo(f"wrote {html_path}", err=True)
        for n in figure_notes:
            _echo(f"note: {n}", err=True)
    if as_json:
        out = {"methods": names, "protocol": protocol.to_dict(), "reports": reports,
               "ensemble": None if ensemble is None else str(ensemble),
               "reference_posterior": posterior_reference}
        if comparison is not None:
            out.update(comparison)
        _echo_text(_dump_json(out))
        return
    from .scoring.tables import format_compare, format_csv, format_groups, format_notes

    if as_csv:
        _echo_text(format_csv(reports, names), nl=False)
    elif group_by is not None and comparison is not None:
        _echo_table(format_groups(comparison, styled=_styled()))
    else:
        _echo_table(format_compare(reports, names, styled=_styled(), comparison=comparison))
    _echo_text(format_notes(reports, names), err=True, nl=False)
    for n in (comparison or {}).get("notes", ()):
        _echo(f"note: {n}", err=True)


def _paired_comparison(reports: list[dict], names: list[str], protocol, group_by: str | None) -> dict:
    """``paired`` (and with ``--group-by method`` ``groups``) of compare's JSON; every report's ``samples`` is
    dropped afterwards (they are the comparison's input, not its output)."""
    from .scoring.compare import grouped_section, paired_section, strip_samples

    settings = {"level": protocol.confidence, "n_replicates": protocol.bootstrap, "seed": protocol.seed,
                "tpr": protocol.tpr}
    try:
        if group_by is not None:
            out = grouped_section(reports, names, **settings)
        else:
            out = paired_section(reports, names, **settings)
    except ValueError as exc:  # reports on other samples (already refused unless --allow-mismatch)
        out = {"paired": [], "best": {}, "tied": {}, "notes": [f"no paired comparisons: {exc}"]}
    strip_samples(reports)
    out["paired_settings"] = {"level": protocol.confidence, "replicates": protocol.bootstrap, "seed": protocol.seed,
                              "method": "paired percentile bootstrap", "adjustment": "holm"}
    return out


def _add_dee_intervals(reports: list[dict], ensemble_report: dict) -> None:
    """``intervals.summary.dee`` of every report with a DEE and a CLL interval (``scoring/compare.py``)."""
    from .scoring.compare import dee_interval
    from .scoring.dee import DeeUnavailableError

    for r in reports:
        if r.get("intervals") and r["summary"].get("dee") is not None:
            try:
                r["intervals"]["summary"]["dee"] = dee_interval(r, ensemble_report)
            except DeeUnavailableError:
                pass


def _refuse_other_task(name: str, first: str, diff: str) -> None:
    _echo(f"error: {name} is on another task than {first}: {diff}; its numbers are not comparable "
          "(--allow-mismatch shows them anyway, marked)", err=True)
    sys.exit(1)


def _task_mismatches(archives: tuple[Path, ...], reference: Path | None, allow_mismatch: bool) -> dict[int, str]:
    """The task of every archive read from its metadata, labels and sample ids (nothing scored): refuse (exit 1)
    an archive on another task than the first, or, with ``--allow-mismatch``, return ``{index: difference}``."""
    from .scoring.compare import archive_task, difference

    primary = None
    if reference is not None:
        from .scoring.reference import read_reference

        primary = read_reference(reference).primary
    tasks = []
    for a in archives:
        with _archive_errors_exit(a):
            tasks.append(archive_task(a, primary=primary))
    out = {}
    for i, task in enumerate(tasks[1:], start=1):
        diff = difference(task, tasks[0])
        if diff is not None:
            if not allow_mismatch:
                _refuse_other_task(f"{task['method']} ({archives[i].name})",
                                   f"{tasks[0]['method']} ({archives[0].name})", diff)
            out[i] = diff
    return out


def _check_same_task(reports: list[dict], names: list[str], allow_mismatch: bool,
                     known: dict[int, str] | None = None) -> None:
    """Refuse (exit 1, naming the first difference) archives on another task than the first one; with
    ``--allow-mismatch`` mark them in their name and notes instead (issue #10 item 1). ``known``: the differences
    found before scoring (:func:`_task_mismatches`)."""
    from .scoring.compare import task_difference

    for i, r in enumerate(reports[1:], start=1):
        diff = (known or {}).get(i) or task_difference(r, reports[0])
        if diff is None:
            continue
        if not allow_mismatch:
            _refuse_other_task(names[i], names[0], diff)
        names[i] += " [other task]"
        r["notes"].append(f"on another task than {names[0]}: {diff}; no column of this row is comparable with it")


def _check_reference_posterior(path: Path, allow_unconverged: bool) -> dict:
    """``{"path", "converged", "problems"}`` of the reference posterior's chains (issue #30); exit 1 naming the
    problems when it has not converged, unless ``allow_unconverged``."""
    from .scoring.posterior_agreement import MAX_RHAT, MIN_ESS, convergence_problems, reference_diagnostics

    with _archive_errors_exit(path):
        problems = convergence_problems(reference_diagnostics(path))
    if problems and not allow_unconverged:
        _echo(f"error: the reference posterior {path.name} has not converged: {'; '.join(problems)} (a reference "
              f"needs split-R-hat <= {MAX_RHAT} and bulk ESS >= {MIN_ESS:g}; --allow-unconverged uses it anyway, "
              "marked)", err=True)
        sys.exit(1)
    return {"path": str(path), "converged": not problems, "problems": problems}


def _add_posterior_agreement(reports: list[dict], archives: tuple[Path, ...], reference_posterior: Path,
                             convergence: dict) -> None:
    """``posterior_agreement`` / ``posterior_total_variation`` in each report's summary (comparable across models:
    the reference posterior fixes the task); an unconverged reference (``--allow-unconverged``) is said in every
    report's notes."""
    from .archive_schema import ArchiveError
    from .scoring.posterior_agreement import PosteriorMismatchError, agreement_with, predictive_mean

    with _archive_errors_exit(reference_posterior):
        try:
            reference = predictive_mean(reference_posterior)  # once, not once per archive
        except PosteriorMismatchError as exc:
            raise click.UsageError(str(exc)) from None
    for r, path in zip(reports, archives):
        try:
            a = agreement_with(path, reference)
        except (PosteriorMismatchError, ArchiveError) as exc:
            r["summary"]["posterior_agreement"] = r["summary"]["posterior_total_variation"] = None
            r["notes"].append(f"no agreement with the reference posterior: {exc}")
            continue
        r["summary"]["posterior_agreement"] = a["agreement"]
        r["summary"]["posterior_total_variation"] = a["total_variation"]
        r["comparability"]["comparable"] = [*r["comparability"]["comparable"], "posterior_agreement",
                                            "posterior_total_variation"]
        r["notes"].append(f"agreement and total variation with the reference posterior {reference_posterior.name} "
                          f"on split {a['split']!r} (Izmailov et al. 2021)")
        if not convergence["converged"]:
            r["notes"].append(f"UNCONVERGED reference posterior {reference_posterior.name} (allowed by "
                              f"--allow-unconverged): {'; '.join(convergence['problems'])}")


def _scorer(sandbox: bool | None, reference: Path | None, limits, progress, n_archives: int):
    """``score(archive, protocol) -> report`` for compare and dee: in the sandbox when asked, and by default
    when a reference is given (as `score` does), else in this process; errors exit with the CLI's codes.
    ``progress`` (a ``ProgressDisplay`` or None) counts the ``n_archives`` archives scored, and in this process
    each split of each."""
    if sandbox if sandbox is not None else reference is not None:
        def one(archive, protocol):
            return _score_sandboxed_or_exit(archive, reference=reference, protocol=protocol, limits=limits)
    else:
        def one(archive, protocol):
            return _score_or_exit(archive, reference=reference, protocol=protocol, progress=progress)
    done = [0]

    def score(archive, protocol):
        if progress is not None and done[0] == 0:
            progress.start("archives", "archives scored", n_archives, each=True)
        report = one(archive, protocol)
        done[0] += 1
        if progress is not None:
            progress.update("archives", done[0], info=archive.name)
        return report

    return score


def _dee_protocol(protocol):
    """The protocol a DEE reference is scored under (``scoring.dee.DEE_REFERENCE_SETTINGS``)."""
    from .scoring.dee import DEE_REFERENCE_SETTINGS

    return protocol.replace(**DEE_REFERENCE_SETTINGS)


@cli.command(epilog=EPILOG)
@click.argument("method", type=_ARCHIVE)
@click.option("--ensemble", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True,
              help="Deep-ensemble archive whose CLL-against-members curve is the reference.")
@click.option("--reference", type=click.Path(path_type=Path), default=None,
              help="Trusted reference label file (`ubench reference`); both archives are checked against it.")
@_protocol_options
@click.option("--json", "as_json", is_flag=True, help="Print the DEE curve as JSON.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the DEE curve as an SVG figure to this path.")
@click.option("--sandbox/--no-sandbox", "sandbox", default=None,
              help="Read and score both archives in a limited child process, as `score` does.  "
                   "[default: on with --reference, off otherwise]")
@_sandbox_limit_options
def dee(method: Path, ensemble: Path, reference: Path | None, as_json: bool, plot_path: Path | None,
        sandbox: bool | None, memory_limit: int, cpu_limit: int, timeout: float, **options) -> None:
    """Deep Ensemble Equivalent of a method: how many deep-ensemble members match its calibrated log-likelihood.

    \b
    ubench dee swag.h5 --ensemble de.h5
    ubench dee mc_dropout.h5 --ensemble de.h5 --reference ref.h5 --json --plot dee.svg
    """
    from .scoring.dee import DeeUnavailableError, dee_between

    protocol = _protocol_from(**options)
    if not protocol.temperature_scaling:
        raise click.UsageError("DEE compares calibrated log-likelihoods: choose a protocol with temperature scaling")
    _check_reference_or_exit(reference)
    progress = _progress(not as_json)
    score = _scorer(sandbox, reference, _sandbox_limits(memory_limit, cpu_limit, timeout), progress, 2)
    method_report = score(method, protocol.replace(member_curves=True))
    ens_report = score(ensemble, _dee_protocol(protocol))
    if progress is not None:
        progress.close()
    try:
        result = dee_between(method_report, ens_report)
    except DeeUnavailableError as exc:
        _echo(f"error: {exc}", err=True)
        sys.exit(1)
    if plot_path is not None:
        from .scoring.plots import dee_figure

        plot_path.write_text(dee_figure(result, protocol.describe()), encoding="utf-8")
    if as_json:
        _echo_text(_dump_json(result))
    else:
        from .scoring.tables import format_dee, format_notes

        _echo_table(format_dee(result, styled=_styled()))
        _echo_text(format_notes([result, method_report, ens_report], ["DEE", "method", "ensemble"]), err=True,
                   nl=False)


@cli.command(epilog=EPILOG)
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--reference", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True,
              help="Trusted reference label file (`ubench reference`); every upload is scored against it.")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Board directory: results/ (the cache), leaderboard.json and index.html.")
@click.option("--ensemble", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Deep-ensemble archive (trusted) whose CLL-versus-members curve gives each upload's DEE.")
@_protocol_options
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Uploads scored in parallel on this machine (a local Dask cluster when above 1).")
@click.option("--scheduler", type=str, default=None,
              help="Dask scheduler address (tcp://host:8786) to spread the uploads over its workers.")
@_sandbox_limit_options
@click.option("--json", "as_json", is_flag=True, help="Print the leaderboard as JSON.")
@click.option("--csv", "as_csv", is_flag=True,
              help="Print the leaderboard as CSV: rank, upload, status, method, model, n_members, every metric.")
def leaderboard(directory: Path, reference: Path, out: Path, ensemble: Path | None, workers: int,
                scheduler: str | None, memory_limit: int, cpu_limit: int, timeout: float, as_json: bool,
                as_csv: bool, **options) -> None:
    """Score every upload in a directory (each sandboxed) into a resumable leaderboard (JSON + HTML).

    Uploads already scored with the same content, ubench version, protocol and reference are not scored
    again, so a killed run continues where it stopped. A bad upload becomes a row with its findings.

    \b
    ubench leaderboard uploads/ --reference test_labels.h5 --out board/
    ubench leaderboard uploads/ --reference test_labels.h5 --out board/ --ensemble de.h5 --workers 8
    ubench leaderboard uploads/ --reference test_labels.h5 --out board/ --scheduler tcp://10.0.0.5:8786
    ubench leaderboard uploads/ --reference test_labels.h5 --out board/ --csv > board.csv
    """
    if as_json and as_csv:
        raise click.UsageError("--json and --csv both print to stdout: choose one")
    from .scoring.leaderboard import BoardConfig, score_directory

    protocol = _protocol_from(**options)
    if ensemble is not None:  # each row's DEE at the point the reference curve averages (scoring/dee.py)
        protocol = protocol.replace(dee_point=True)
    if workers > 1 or scheduler is not None:
        from .extras import require

        require("scale", what="--scheduler" if scheduler is not None else "--workers above 1")
    _check_reference_or_exit(reference)
    config = BoardConfig.create(reference=reference, protocol=protocol,
                                sandbox=_sandbox_limits(memory_limit, cpu_limit, timeout))

    from .progress import ProgressDisplay

    display = ProgressDisplay()
    since = display.clock()

    def progress(done: int, total: int, record: dict) -> None:
        if "uploads" not in display.tasks:
            display.start("uploads", "uploads scored", total, each=True, since=since)
        status = record.get("outcome", {}).get("status")
        display.update("uploads", done,
                       info=f"{record.get('archive')}: {status}{' (cached)' if record.get('cached') else ''}")

    try:
        board = score_directory(directory, out, config, workers=workers, scheduler=scheduler, ensemble=ensemble,
                                progress=progress)
    except (RuntimeError, OSError) as exc:
        display.close()
        _echo(f"error: {exc}", err=True)
        sys.exit(2)
    display.close()
    if as_json:
        _echo_text(_dump_json(board))
        return
    from .scoring.tables import format_leaderboard, leaderboard_csv

    if as_csv:
        _echo_text(leaderboard_csv(board), nl=False)
    else:
        _echo_table(format_leaderboard(board, styled=_styled()))
    _echo(f"wrote {out / 'leaderboard.json'} and {out / 'index.html'}", err=True)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
