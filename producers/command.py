# SPDX-License-Identifier: MIT
"""``ubench produce``: train one uncertainty method with PyTorch and write its prediction archive.

Importing this module imports click only; torch is imported inside the command body, so ``ubench --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path

import click

from .model_names import MODEL_HELP, check_input_size, parse_model_name
from .registry import METHODS

__all__ = ["produce"]

_SHIFT_FAMILIES = ("rotate", "translate", "noise", "blur")


def _parse_hparams(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--set")
        out[key.strip()] = value.strip()
    return out


def _check_model(value: str) -> str:
    try:
        parse_model_name(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--model") from None
    return value.strip().lower()


def _parse_shifts(value: str) -> tuple[str, ...]:
    """Shift kinds: today's four families, the suites ``hendrycks`` (15 corruptions x 5 severities) and
    ``mnist-c`` (15 kinds; issue #31), or single corruption kinds, comma-separated; ``none`` for no shifts."""
    from .corruptions import CORRUPTION_KINDS, SUITES

    if value.strip().lower() in ("", "none"):
        return ()
    kinds: list[str] = []
    for k in (k.strip() for k in value.split(",") if k.strip()):
        kinds += SUITES.get(k.lower(), (k,))
    bad = [k for k in kinds if k not in _SHIFT_FAMILIES and k not in CORRUPTION_KINDS]
    if bad:
        raise click.BadParameter(f"unknown shift families {bad}; choose from {list(_SHIFT_FAMILIES)}, the suites "
                                 f"{list(SUITES)}, a corruption kind of theirs, or 'none'", param_hint="--shifts")
    return tuple(dict.fromkeys(kinds))


def _config_hparams(method: str) -> tuple[str, ...]:
    """The --config file's hyperparameters as KEY=VALUE items, placed before --set so that --set wins; the file
    must be a configuration of ``method`` when it names one."""
    ctx = click.get_current_context()
    if "ubench.config_method" in ctx.meta:
        path, named = ctx.meta["ubench.config_method"]
        if named != method:
            raise click.BadParameter(f"{path} is a configuration of {named!r}, not {method!r}", param_hint="--config")
    return tuple(f"{k}={v}" for k, v in ctx.meta.get("ubench.config_hparams", {}).items())


def _display():
    """The command's progress display on stderr (``ubench/progress.py``)."""
    from ..progress import ProgressDisplay

    return ProgressDisplay()


def _training_progress(display):
    """The producers' progress hook drawn in ubench's one progress style (``ubench/progress.py``): member, epoch
    and prediction bars with loss, accuracy, the time left and the whole run's time left on a terminal, plain lines
    anywhere else; None when ``display`` is (``--no-progress``)."""
    from ..progress import TrainingProgress

    return None if display is None else TrainingProgress(display)


#: Predictions (images times members) above which ``produce`` warns before it starts: 20 MC-dropout passes over
#: Fashion-MNIST's default splits (8.2 million) took 32 minutes and 406 MiB with --epochs 2 on the 2-core
#: development machine (issue #28 item 10); the README's 5-member deep ensemble (2 million) stays under it.
LONG_RUN_PREDICTIONS = 4_000_000


def long_run_note(split_sizes: list[int], n_classes: int, members: int) -> str | None:
    """The warning ``produce`` prints up front when ``members`` members predicting splits of ``split_sizes`` make
    a long run (:data:`LONG_RUN_PREDICTIONS`), with the archive's size and what makes it smaller; else None."""
    images = sum(split_sizes)
    predictions = members * images
    if predictions < LONG_RUN_PREDICTIONS:
        return None
    mib = predictions * n_classes * 4 / 2**20  # float32 probabilities
    return (f"a long run: {members} members predict {len(split_sizes)} splits of {images:,} images in all, "
            f"{predictions / 1e6:.1f} million predictions and an archive of about {mib:,.0f} MiB (tens of minutes on "
            "a CPU); --members, --shifts none or fewer --shifts, --shift-samples and --test-samples make it smaller")


#: ``produce``'s exit codes (its help's epilog; the README's Producers section).
PRODUCE_EXIT_CODES = (
    "Exit codes: 0 archive written (its path printed); 1 the run failed (training diverged, the output exists, "
    "an archive error) or an extra it needs is not installed (its pip install line printed); 2 usage error (an "
    "unknown option value or hyperparameter, data not found). A run killed or failed part-way keeps its finished "
    "members: run the same command again to resume."
)


#: produce options a --config file may not set (where the result goes, and how it is shown).
_NOT_IN_CONFIG = {"out", "overwrite", "config", "hparams", "progress", "method"}


def _load_config(ctx: click.Context, param: click.Parameter, path: Path | None) -> Path | None:
    """--config: a JSON file (``ubench tune --out``) whose keys become the defaults of the other options, so that
    flags given on the command line override it; its ``hyperparameters`` merge under --set, key by key."""
    if path is None:
        return None
    import json

    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(f"cannot read {path}: {exc}", param_hint="--config") from None
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"{path} is not JSON (line {exc.lineno}: {exc.msg})", param_hint="--config") from None
    if not isinstance(data, dict):
        raise click.BadParameter(f"{path} must hold a JSON object", param_hint="--config")
    options = {p.name for p in ctx.command.params if p.name not in _NOT_IN_CONFIG}
    defaults = {}
    for key, value in data.items():
        name = key.replace("-", "_")
        if name == "method":
            ctx.meta["ubench.config_method"] = (path, value)  # checked against METHOD once that is parsed
        elif name == "hyperparameters":
            if not isinstance(value, dict):
                raise click.BadParameter(f"{path}: 'hyperparameters' must be an object", param_hint="--config")
            ctx.meta["ubench.config_hparams"] = {str(k): v for k, v in value.items()}
        elif name == "study":
            pass  # how the configuration was found (ubench tune's record); nothing to apply
        elif name in options:
            defaults[name] = value
        else:
            raise click.BadParameter(f"{path}: unknown key {key!r}; known keys are method, hyperparameters, study, "
                                     f"{', '.join(sorted(options))}", param_hint="--config")
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    return path


@click.command("produce", epilog=PRODUCE_EXIT_CODES)
@click.argument("method", type=click.Choice(list(METHODS)))
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Archive to write; an unfinished run of the same command in OUT.partial/ is resumed.")
@click.option("--dataset", default="digits", show_default=True,
              help="digits, fashion-mnist, mnist, kmnist, notmnist, cifar10, cifar100, svhn, idx:DIR (standard IDX "
                   "files in DIR) or torchvision:ClassName.")
@click.option("--model", default="mlp", show_default=True, callback=lambda ctx, param, value: _check_model(value),
              help=f"The network: {MODEL_HELP}.")
@click.option("--members", type=click.IntRange(min=1), default=None, show_default="the method's default",
              help="Number of members M (ensemble members, samples or snapshots).")
@click.option("--epochs", type=click.IntRange(min=1), default=None, show_default="the method's default",
              help="Training epochs (the method's 'epochs' hyperparameter: pretraining for swag/fge; samplers and "
                   "sse are sized by --set burn_in_epochs=/cycle_epochs=).")
@click.option("--lr", type=click.FloatRange(min=0.0, min_open=True), default=None,
              show_default="the method's default", help="Initial learning rate.")
@click.option("--set", "hparams", multiple=True, metavar="KEY=VALUE", show_default=True,
              help="Override one method hyperparameter (repeatable), e.g. --set dropout_rate=0.1.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of initialisation, data order and noise.")
@click.option("--data-dir", "data_dirs", multiple=True, type=click.Path(file_okay=False, path_type=Path),
              show_default=True, help="Directory searched first for data files (repeatable); then $UBENCH_DATA and "
                                      "/usr/share/datasets, ../shared/data, ~/.cache/ubench/data.")
@click.option("--download/--no-download", default=False, show_default=True,
              help="Download missing datasets with torchvision into the first --data-dir (else $UBENCH_DATA, else "
                   "~/.cache/ubench/data).")
@click.option("--ood", multiple=True,
              show_default="the dataset's pairing (e.g. mnist, notmnist, uniform), those found; the others are "
                           "skipped with a note",
              help="OOD set: a dataset name or 'uniform' (repeatable); a set named here must be found.")
@click.option("--shifts", default=",".join(_SHIFT_FAMILIES), show_default=True,
              help="Comma-separated shift families (rotate, translate, noise, blur), corruption suites (hendrycks: "
                   "15 corruptions x 5 severities; mnist-c: MNIST-C's 15 kinds) or single corruption kinds, or "
                   "'none'.")
@click.option("--train-samples", type=click.IntRange(min=1), default=None, show_default="all",
              help="Train on a random subset of this size.")
@click.option("--test-samples", type=click.IntRange(min=1), default=None, show_default="all",
              help="Predict on a random subset of the test set of this size.")
@click.option("--shift-samples", type=click.IntRange(min=1), default=None, show_default="all",
              help="Apply the shifts to a random subset of the test set of this size.")
@click.option("--ood-samples", type=click.IntRange(min=1), default=None, show_default="all",
              help="Random subset size of each OOD set.")
@click.option("--data-seed", type=int, default=0, show_default=True,
              help="Seed of the subsets and of the noise images (kept fixed across methods).")
@click.option("--val-fraction", type=click.FloatRange(min=0.0, max=1.0, max_open=True), default=None,
              show_default="the method's: 0 (Pitfalls trains on the full training set); 0.1 for the Laplace methods",
              help="Fraction of the training set held out as the validation split (never the test split); "
                   "recorded in the archive config.")
@click.option("--batch-size", type=click.IntRange(min=1), default=128, show_default=True, help="Training batch size.")
@click.option("--predict-batch-size", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Prediction batch size.")
@click.option("--device", default="auto", show_default=True, help="auto (CUDA when available), cpu, cuda, cuda:1, ...")
@click.option("--threads", type=click.IntRange(min=1), default=None, show_default="torch's default",
              help="CPU threads for torch.")
@click.option("--overwrite", is_flag=True, default=False, show_default=True, help="Replace an existing archive.")
@click.option("--chains", type=click.IntRange(min=1), default=1, show_default=True,
              help="Samplers (torch and jax): run this many chains one after another, each giving "
                   "members/chains members (R-hat and ESS over chains go into the archive's /diagnostics).")
@click.option("--framework", type=click.Choice(["torch", "jax"]), default="torch", show_default=True,
              help="Train with PyTorch or with JAX (the jax extra: sgd, deep_ensemble, sgld, sghmc and hmc on the "
                   "mlp).")
@click.option("--progress/--no-progress", default=True, show_default=True,
              help="Report members and epochs (loss, accuracy, time left) on stderr: bars on a terminal, one line "
                   "per epoch otherwise (nohup, cluster logs).")
@click.option("--save-models", is_flag=True, default=False,
              help="Also write every member as ONNX (and its weights as plain arrays) into OUT.models/ for "
                   "`ubench latency`: deterministic networks, each weight draw (SWAG, Laplace, VI, SG-MCMC) as its "
                   "own network, MC/Gaussian dropout with seeded sampling inside the graph; --tta is refused.")
@click.option("--tta", is_flag=True, default=False, show_default=True,
              help="Test-time augmentation on top of METHOD (Pitfalls Table 1): train with random crops and give "
                   "each member its own random crop of every test image (the archive's method is METHOD+tta; "
                   "--set tta_samples=K for K crops per member, tta_crop_fraction=, tta_flip=, tta_train_augment=).")
@click.option("--logits/--no-logits", default=False, show_default=True,
              help="Also store every member's logits beside its probabilities (archive format 1.1), so that "
                   "`ubench score` reports the energy and max-logit OOD scores (torch producers).")
@click.option("--config", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              is_eager=True, expose_value=False, callback=_load_config, show_default=True,
              help="JSON configuration (e.g. from 'ubench tune --out'); flags given here override it, --set "
                   "overrides its hyperparameters one by one; an unknown key is an error.")
def produce(method, out, dataset, model, members, epochs, lr, hparams, seed, data_dirs, download, ood, shifts,
            train_samples, test_samples, shift_samples, ood_samples, data_seed, val_fraction, batch_size,
            predict_batch_size, device, threads, overwrite, chains, framework, progress, save_models, tta, logits):
    """Train METHOD with PyTorch and write its prediction archive (test, OOD and shifted splits).

    Needs the torch extra (pip install 'ubench[torch]'). Killing a run and starting the same command again
    continues after the last finished member.

    \b
    Example:
      ubench produce deep_ensemble --dataset fashion-mnist --model mlp --members 5 --epochs 20 --out ens.h5
      ubench produce csgld --dataset digits --set cycle_epochs=6 --set exploration_epochs=3 --members 8 --out c.h5
      ubench produce sgd --config best.json --out tuned.h5
    """
    from ..extras import require

    hparams = _config_hparams(method) + tuple(hparams)
    if save_models:
        require("edge", what="--save-models")
    if tta:
        if framework == "jax" or method == "tta":
            raise click.UsageError("--tta augments a torch method's members; " + (
                "the tta method already does" if method == "tta" else "--framework jax has no test-time augmentation"))
        method = f"{method}+tta"
    display = _display() if progress else None
    if framework == "jax":
        if logits:
            raise click.UsageError("--logits is for the torch producers; the jax ones store probabilities only")
        return _produce_jax(method, out, dataset, model, members, epochs, lr, hparams, seed, data_dirs, download,
                            ood, shifts, train_samples, test_samples, shift_samples, ood_samples, data_seed,
                            batch_size, predict_batch_size, overwrite, val_fraction=val_fraction or 0.0,
                            chains=chains, display=display)
    require("torch", what="ubench produce")
    from ..archive_schema import ArchiveError
    from .archive_run import check_members, produce_archive
    from .registry import load_method
    from .torch_trainer import RunSettings

    cls = load_method(method)
    hyper: dict = _parse_hparams(hparams)
    for name, value in (("epochs", epochs), ("lr", lr)):
        if value is None:
            continue
        if name not in cls.defaults:
            raise click.BadParameter(f"{method} has no {name!r} hyperparameter; its hyperparameters are "
                                     f"{', '.join(sorted(cls.defaults))} (set them with --set)", param_hint=f"--{name}")
        hyper[name] = value
    if val_fraction == 0.0 and getattr(cls, "needs_validation", False):
        raise click.BadParameter(f"{method} searches its noise scale on a validation split; it needs a "
                                 f"--val-fraction above 0 (default {cls.default_val_fraction})",
                                 param_hint="--val-fraction")
    task = _build_task(dataset, ood, shifts, train_samples, test_samples, shift_samples, ood_samples, data_dirs,
                       download, data_seed, cls.default_val_fraction if val_fraction is None else val_fraction,
                       display=display)
    try:
        check_input_size(model, *task.input_shape[-2:])
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--model") from None
    settings = RunSettings(model=model, members=members or cls.default_members, seed=seed, batch_size=batch_size,
                           predict_batch_size=predict_batch_size, device=device, chains=chains, logits=logits)
    try:
        resolved = cls.resolve_hyperparameters(hyper)
        check_members(cls, settings.members)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    _warn_long_run(task, settings.members * int(resolved.get("tta_samples", 1)))  # K crops per member (--tta)
    if save_models:
        from ..edge.export import NotExportable, member_sampling

        try:
            member_sampling(cls)
        except NotExportable as exc:
            raise click.UsageError(str(exc)) from None
    try:
        path = produce_archive(method, task, out, settings=settings, hyper=hyper, overwrite=overwrite,
                               progress=_training_progress(display), threads=threads, save_models=save_models)
    except (ArchiveError, FloatingPointError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(str(path))


def _warn_long_run(task, members: int) -> None:
    note = long_run_note([len(s.images) for s in task.splits.values()], task.n_classes, members)
    if note is not None:
        click.echo(f"note: {note}", err=True)


def _build_task(dataset, ood, shifts, train_samples, test_samples, shift_samples, ood_samples, data_dirs, download,
                data_seed, val_fraction=0.0, *, display=None):
    """The task (``build_task``), its preparation shown on ``display`` split by split, its notes (a default OOD
    set skipped, and how to add it) on stderr; a data or value error is a usage error."""
    from .datasets import DataNotFoundError
    from .task import build_task

    def prepared(done: int, total: int) -> None:
        if "data" not in display.tasks:
            display.start("data", f"preparing {dataset}: splits", total, each=True, every=10.0)
        display.update("data", done)

    try:
        task = build_task(
            dataset, ood=tuple(ood) if ood else None, shift_kinds=_parse_shifts(shifts),
            train_samples=train_samples, test_samples=test_samples, shift_samples=shift_samples,
            ood_samples=ood_samples, data_dirs=tuple(data_dirs), download=download, data_seed=data_seed,
            val_fraction=val_fraction, progress=None if display is None else prepared,
        )
    except DataNotFoundError as exc:
        raise click.UsageError(str(exc)) from None
    except ValueError as exc:  # an unknown dataset, or a --val-fraction that holds out nothing: the message names it
        raise click.UsageError(str(exc)) from None
    for note in task.notes:
        click.echo(f"note: {note}", err=True)
    return task


def _produce_jax(method, out, dataset, model, members, epochs, lr, hparams, seed, data_dirs, download, ood, shifts,
                 train_samples, test_samples, shift_samples, ood_samples, data_seed, batch_size, predict_batch_size,
                 overwrite, *, val_fraction=0.0, chains=1, display=None):
    """The --framework jax branch of ``produce``."""
    from ..extras import require

    require("jax", what="--framework jax")
    if method == "hmc":
        require("jax", what="--framework jax hmc", modules=("blackjax",))
    from .jax.run import JAX_METHODS, JaxRunSettings, produce_archive_jax, resolve_hyperparameters
    from ..archive_schema import ArchiveError

    if method not in JAX_METHODS:
        raise click.UsageError(f"--framework jax implements {', '.join(JAX_METHODS)}; not {method!r}")
    hyper: dict = _parse_hparams(hparams)
    for name, value in (("epochs", epochs), ("lr", lr)):
        if value is not None:
            hyper[name] = value
    try:
        resolve_hyperparameters(method, hyper)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    task = _build_task(dataset, ood, shifts, train_samples, test_samples, shift_samples, ood_samples, data_dirs,
                       download, data_seed, val_fraction, display=display)
    settings = JaxRunSettings(members=members or JAX_METHODS[method][2], seed=seed, model=model,
                              batch_size=batch_size, predict_batch_size=predict_batch_size, chains=chains)
    _warn_long_run(task, settings.members)
    try:
        path = produce_archive_jax(method, task, out, settings=settings, hyper=hyper, overwrite=overwrite,
                                   progress=_training_progress(display))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    except (ArchiveError, FloatingPointError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(str(path))
