# SPDX-License-Identifier: MIT
"""One producer run end to end: a method trained on a task, written member by member through the archive writer.

This module and :mod:`.run_record` (what a run records, shared with the JAX producers) are the only ones of the
torch producers that talk to ``ubench.archive_schema``.
"""

from __future__ import annotations

import json

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..archive_schema import ArchiveWriter
from .registry import load_method
from .task import Task
from .member_loop import run_method
from .run_record import PRODUCER_VERSION, run_config, split_specs
from .torch_trainer import Progress, RunSettings, configure_torch

__all__ = ["PRODUCER_VERSION", "check_members", "split_specs", "run_config", "produce_archive"]


def check_members(cls: type, members: int) -> None:
    """Raise ``ValueError`` unless the method ``cls`` allows ``members`` members."""
    if members < 1 or (cls.max_members is not None and members > cls.max_members):
        raise ValueError(f"{cls.name} allows 1 to {cls.max_members or 'any number of'} members; got {members}")


def produce_archive(
    method: str,
    task: Task,
    out: str | Path,
    *,
    settings: RunSettings,
    hyper: Mapping[str, Any] | None = None,
    overwrite: bool = False,
    progress: Progress | None = None,
    threads: int | None = None,
    save_models: bool = False,
) -> Path:
    """Train ``method`` on ``task`` and write its archive to ``out``; resume an unfinished run of the same
    configuration. Returns the archive's path.

    Parameters
    ----------
    method : a name of :data:`~ubench.producers.registry.METHODS`.
    task : the data (:func:`~ubench.producers.task.build_task`).
    out : the archive to write; its partial run lives in ``<out>.partial/`` until it is finished.
    settings : model, number of members, seed, batch sizes, device.
    hyper : overrides of the method's hyperparameters (unknown names raise ``ValueError``).
    overwrite : replace an existing finished archive.
    progress : receives member and epoch events (nothing is printed otherwise).
    threads : torch's CPU thread count (torch's default when None).
    save_models : also write every member as ONNX (and its weights as arrays) into ``<out>.models/``
        (:mod:`ubench.edge.export`: deterministic networks, weight draws, or dropout sampled inside the graph;
        test-time augmentation is refused).

    Raises
    ------
    ValueError
        An unknown method or hyperparameter, or a member count the method does not allow.
    ubench.archive_schema.ArchiveError
        ``out`` exists, or a partial run of another configuration is in the way.
    """
    cls = load_method(method)
    resolved = cls.resolve_hyperparameters(hyper or {})
    check_members(cls, settings.members)
    configure_torch(threads=threads)
    if settings.chains != 1 and (cls.shape != "trajectory" or settings.members % settings.chains):
        raise ValueError(f"--chains {settings.chains}: chains are for samplers (trajectory methods), with members a "
                         f"multiple of chains; {cls.name} is {cls.shape} with {settings.members} members")
    instance = cls(resolved, n_members=settings.members // settings.chains, n_train=len(task.train))
    writer = ArchiveWriter(
        out,
        method=method,
        model=settings.model,
        dataset=task.dataset,
        n_classes=task.n_classes,
        splits=split_specs(task),
        class_names=list(task.class_names) if task.class_names else None,
        config=run_config(method, resolved, settings, task),
        framework="torch",
        framework_version=torch.__version__,
        description=cls.summary,
        dtype=np.float32,
        overwrite=overwrite,
    )
    on_member = None
    if save_models:
        from ..edge.export import export_member, member_sampling, models_dir_for

        sampling = member_sampling(instance)  # NotExportable (a ValueError) for test-time augmentation
        models_dir = models_dir_for(out)

        def on_member(index: int, network) -> None:
            entry = export_member(network, task.input_shape, models_dir, index, sampling=sampling,
                                  seed=settings.seed)
            (models_dir / f"member_{index:04d}.json").write_text(json.dumps(entry))

    run_method(instance, task, settings, writer, progress=progress, on_member=on_member)
    path = writer.finalize()
    if save_models:
        from ..edge.export import write_models_json

        members = [json.loads(p.read_text()) for p in sorted(models_dir.glob("member_*.json"))]
        write_models_json(models_dir, archive=Path(path), method=method, model=settings.model,
                          input_shape=task.input_shape, n_classes=task.n_classes, mean=task.mean, std=task.std,
                          dropout=instance.dropout, dropout_rate=float(instance.hp.get("dropout_rate", 0.0)),
                          members=members, sampling=sampling, dropout_before=_dropout_before(instance, settings, task))
    return path


def _dropout_before(instance, settings: RunSettings, task: Task) -> str | None:
    """The layer ll_dropout puts its dropout in front of (recorded so that the torch backends rebuild it)."""
    from .last_layer import LastLayerDropout, last_linear_name
    from .models import build_model

    if not isinstance(instance, LastLayerDropout):
        return None
    return last_linear_name(build_model(settings.model, task.input_shape, task.n_classes, mean=task.mean,
                                        std=task.std))
