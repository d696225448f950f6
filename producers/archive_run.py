# SPDX-License-Identifier: MIT
"""One producer run end to end: a method trained on a task, written member by member through the archive writer.

This is the only module of the producers that talks to ``ubench.archive_schema``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..archive_schema import ArchiveWriter, SplitSpec
from .registry import load_method
from .task import Task
from .member_loop import run_method
from .torch_trainer import Progress, RunSettings, configure_torch

__all__ = ["PRODUCER_VERSION", "check_members", "split_specs", "run_config", "produce_archive"]

#: Bumped when a change to the producers changes what a given configuration produces.
PRODUCER_VERSION = "2"


def split_specs(task: Task) -> dict[str, SplitSpec]:
    """The writer's description of every split of ``task``."""
    return {
        name: SplitSpec(
            role=s.role,
            dataset=s.dataset,
            labels=s.labels,
            sample_ids=s.sample_ids,
            n_samples=len(s.images),
            shift_kind=s.shift_kind,
            shift_intensity=s.shift_intensity,
        )
        for name, s in task.splits.items()
    }


def run_config(method: str, hyper: Mapping[str, Any], settings: RunSettings, task: Task) -> dict[str, Any]:
    """The archive's config: everything that defines the run (and so whether a partial run may be resumed)."""
    return {
        "producer": f"ubench.producers/{PRODUCER_VERSION}",
        "method": method,
        "hyperparameters": dict(sorted(hyper.items())),
        **settings.record(),
        "data": task.settings,
        "deterministic_algorithms": True,
    }


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
    instance = cls(resolved, n_members=settings.members, n_train=len(task.train))
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
    run_method(instance, task, settings, writer, progress=progress)
    return writer.finalize()
