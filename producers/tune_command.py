# SPDX-License-Identifier: MIT
"""``ubench tune``: Optuna hyperparameter search of a producer on its validation split; writes the best
configuration for ``ubench produce --config``.

Importing this module imports click only; torch and optuna are imported inside the command body.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .registry import METHODS

__all__ = ["tune"]


def _run_worker(args: tuple) -> None:
    """One extra ``--jobs`` process: run trials of the stored study (spawned, so it imports torch afresh)."""
    from .torch_trainer import configure_torch
    from .tune import make_storage, optimize

    spec, task, settings, storage, heartbeat, study_name, n_trials, sampler, pruner, worker, threads = args
    configure_torch(threads=threads)
    optimize(spec, task, settings, storage=make_storage(storage, heartbeat=heartbeat), study_name=study_name,
             n_trials=n_trials, sampler=sampler, pruner=pruner, worker=worker)


#: ``tune``'s exit codes (its help's epilog).
TUNE_EXIT_CODES = (
    "Exit codes: 0 best configuration written to --out; 1 no trial finished, or the tune or torch extra is not "
    "installed (its pip install line printed); 2 usage error (an unknown option value, hyperparameter or search "
    "space, a storage that cannot be opened, data not found). A killed study resumes from its --storage."
)


@click.command("tune", epilog=TUNE_EXIT_CODES)
@click.argument("method", type=click.Choice(list(METHODS)))
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="JSON file for the best configuration ('ubench produce METHOD --config OUT' reads it).")
@click.option("--trials", "n_trials", required=True, type=click.IntRange(min=1),
              help="Finished (complete or pruned) trials the study must hold; a resumed study runs the rest.")
@click.option("--sampler", type=click.Choice(["tpe", "random", "grid"]), default="tpe", show_default=True,
              help="Optuna sampler (grid visits the space's 'grid' values).")
@click.option("--space", default="ursabench", show_default=True,
              help="'ursabench' (the preset of METHOD) or a JSON file {hyperparameter: {type, low, high, log} | "
                   "{type: categorical, choices}}.")
@click.option("--objective", type=click.Choice(["nll", "cll"]), default="nll", show_default=True,
              help="Validation NLL of the ensemble mean (minimised) or calibrated log-likelihood (maximised).")
@click.option("--storage", default=None, show_default="in memory (no resume)",
              help="Optuna storage URL, e.g. sqlite:///study.db; a killed study resumes from it, and machines "
                   "sharing one RDB run one study.")
@click.option("--heartbeat", type=click.IntRange(min=1), default=60, show_default=True,
              help="Seconds between a running trial's heartbeats in --storage; a trial silent for twice this long "
                   "(its process was killed) is marked failed and run again once.")
@click.option("--study-name", default=None, show_default="METHOD-DATASET-MODEL", help="Study name in the storage.")
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Processes running trials in parallel (needs --storage).")
@click.option("--pruner", type=click.Choice(["median", "none"]), default="median", show_default=True,
              help="Stop trials whose per-epoch validation value is worse than the median of earlier trials.")
@click.option("--dataset", default="digits", show_default=True, help="As for 'ubench produce'.")
@click.option("--model", type=click.Choice(["mlp", "lenet", "resnet20"]), default="mlp", show_default=True,
              help="Network of every trial.")
@click.option("--members", type=click.IntRange(min=1), default=None, show_default="the method's default",
              help="Members of every trial.")
@click.option("--epochs", type=click.IntRange(min=1), default=None, show_default="the method's default",
              help="Training epochs of every trial (the 'epochs' hyperparameter).")
@click.option("--set", "hparams", multiple=True, metavar="KEY=VALUE", show_default=True,
              help="Fix a hyperparameter outside the search (repeatable).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of every trial's run and of the sampler.")
@click.option("--val-fraction", type=click.FloatRange(min=0.0, max=1.0, min_open=True, max_open=True), default=0.1,
              show_default=True, help="Fraction of the training set held out as the validation split tuned on "
                                      "(the test split is never read).")
@click.option("--train-samples", type=click.IntRange(min=1), default=None, show_default="all",
              help="Random training subset (before the validation split is held out).")
@click.option("--data-seed", type=int, default=0, show_default=True, help="Seed of the subsets and the split.")
@click.option("--data-dir", "data_dirs", multiple=True, type=click.Path(file_okay=False, path_type=Path),
              show_default=True, help="Directory searched first for data files (repeatable).")
@click.option("--download/--no-download", default=False, show_default=True, help="As for 'ubench produce'.")
@click.option("--batch-size", type=click.IntRange(min=1), default=128, show_default=True, help="Training batch size.")
@click.option("--predict-batch-size", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Prediction batch size.")
@click.option("--device", default="auto", show_default=True, help="auto (CUDA when available), cpu, cuda, ...")
@click.option("--threads", type=click.IntRange(min=1), default=None, show_default="torch's default",
              help="CPU threads for torch (per process).")
def tune(method, out, n_trials, sampler, space, objective, storage, heartbeat, study_name, jobs, pruner, dataset, model,
         members, epochs, hparams, seed, val_fraction, train_samples, data_seed, data_dirs, download, batch_size,
         predict_batch_size, device, threads):
    """Tune METHOD's hyperparameters with Optuna on the validation split; write the best configuration.

    Needs the tune and torch extras (pip install 'ubench[tune,torch]'). Every trial trains as 'ubench produce'
    does on the training set minus the validation split and is scored on the validation split only.

    \b
    Example:
      ubench tune sgd --dataset digits --trials 20 --storage sqlite:///study.db --out best.json
      ubench produce sgd --config best.json --out tuned.h5
    """
    from ..extras import require

    require("tune", "torch", what="ubench tune")
    import optuna
    from sqlalchemy.exc import SQLAlchemyError  # Optuna's RDB storage is SQLAlchemy

    from .command import _parse_hparams
    from .datasets import DataNotFoundError
    from .registry import load_method
    from .search_spaces import SearchSpaceError, grid_of, load_space
    from .task import build_validation_task
    from .torch_trainer import RunSettings, configure_torch
    from .tune import StudyMismatchError, StudySpec, best_config, make_storage, n_finished, open_study, optimize

    if not out.parent.is_dir():  # checked before hours of trials, not after
        raise click.BadParameter(f"directory {str(out.parent)!r} does not exist", param_hint="--out")
    if jobs > 1 and storage is None:
        raise click.UsageError("--jobs above 1 needs --storage (the processes share the study through it)")
    cls = load_method(method)
    fixed = _parse_hparams(hparams)
    if epochs is not None:
        if "epochs" not in cls.defaults:
            raise click.BadParameter(f"{method} has no 'epochs' hyperparameter; its hyperparameters are "
                                     f"{', '.join(sorted(cls.defaults))}", param_hint="--epochs")
        fixed["epochs"] = epochs
    try:
        resolved = cls.resolve_hyperparameters(fixed)
        space_name, search_space = load_space(space, method, cls.defaults)
        if sampler == "grid":
            grid_of(search_space)
    except ValueError as exc:  # SearchSpaceError included
        raise click.UsageError(str(exc)) from None
    overlap = sorted(set(fixed) & set(search_space))
    if overlap:
        raise click.UsageError(f"{', '.join(overlap)} is both fixed (--set/--epochs) and searched (--space)")
    members = members or cls.default_members
    if cls.max_members is not None and members > cls.max_members:
        raise click.BadParameter(f"{method} allows at most {cls.max_members} members", param_hint="--members")
    try:
        task = build_validation_task(dataset, train_samples=train_samples, data_dirs=tuple(data_dirs),
                                     download=download, data_seed=data_seed, val_fraction=val_fraction)
    except DataNotFoundError as exc:
        raise click.UsageError(str(exc)) from None
    except ValueError as exc:  # an unknown dataset, or a --val-fraction that holds out nothing
        raise click.UsageError(str(exc)) from None
    spec = StudySpec(method=method, dataset=dataset, model=model, members=members, seed=seed, batch_size=batch_size,
                     val_fraction=val_fraction, train_samples=train_samples, data_seed=data_seed,
                     objective=objective, space_name=space_name, space=search_space,
                     fixed={k: resolved[k] for k in fixed})
    settings = RunSettings(model=model, members=members, seed=seed, batch_size=batch_size,
                           predict_batch_size=predict_batch_size, device=device)
    study_name = study_name or f"{method}-{dataset}-{model}"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = open_study(spec, storage=make_storage(storage, heartbeat=heartbeat), study_name=study_name,
                           defaults=cls.defaults, enqueue_default=sampler != "grid")
    except StudyMismatchError as exc:
        raise click.UsageError(str(exc)) from None
    except (ImportError, ValueError, optuna.exceptions.OptunaError, SQLAlchemyError) as exc:
        raise click.BadParameter(f"cannot open {storage!r}: {exc}", param_hint="--storage") from None
    done = n_finished(study)
    click.echo(f"study {study_name!r}: {done} of {n_trials} trials finished; {task.settings['val_samples']} "
               f"validation samples, {len(task.train)} training samples", err=True)

    def report(study, trial):
        if trial.state.name == "PRUNED":
            epochs = max(trial.intermediate_values, default=0)
            value = f"after epoch {epochs}" + (f" at {objective} {trial.value:.5f}" if trial.value is not None else "")
        else:
            value = "" if trial.value is None else f"{objective} {trial.value:.5f}"
        click.echo(f"trial {trial.number} {trial.state.name.lower()} {value} {trial.params}", err=True)

    configure_torch(threads=threads)
    if jobs > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        args = [(spec, task, settings, storage, heartbeat, study_name, n_trials, sampler, pruner, w, threads)
                for w in range(1, jobs)]
        with ProcessPoolExecutor(max_workers=jobs - 1, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(_run_worker, a) for a in args]
            optimize(spec, task, settings, storage=None, study_name=study_name, n_trials=n_trials,
                     sampler=sampler, pruner=pruner, worker=0, study=study, callbacks=[report])
            for f in futures:
                f.result()
    else:
        optimize(spec, task, settings, storage=None, study_name=study_name, n_trials=n_trials, sampler=sampler,
                 pruner=pruner, study=study, callbacks=[report])
    try:
        config = best_config(study, spec, cls.defaults, storage=storage, study_name=study_name, sampler=sampler)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    out.write_text(json.dumps(config, indent=2, sort_keys=True, allow_nan=False) + "\n")
    click.echo(f"best trial {config['study']['best_trial']}: {objective} {config['study']['best_value']:.5f} "
               f"(default {config['study']['default_value']})", err=True)
    click.echo(str(out))
    sys.stdout.flush()
