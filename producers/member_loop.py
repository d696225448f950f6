# SPDX-License-Identifier: MIT
"""The member loop around the archive writer, with resumable checkpoints.

Resumption. Every epoch ends with an atomic checkpoint (``archive_schema.durable.atomic_path``: temporary file, fsync, rename) in the writer's
``scratch_dir``. Each epoch reseeds torch from ``(seed, run, epoch)``, so a run resumed from a checkpoint follows
the same path as an uninterrupted one on the CPU. A member whose index is below ``writer.n_members`` is already on
disk and is never produced again; an independent member's run is never restarted once its member is written.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..archive_schema.durable import atomic_path
from .chain_diagnostics import record_chain_diagnostics
from .models import count_parameters
from .task import Task
from .torch_trainer import Method, Progress, RunSettings, TrainContext, derive_seed, predict_splits

__all__ = ["run_method"]


def _atomic_save(obj: Any, path: Path) -> None:
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def _load(path: Path, device: torch.device) -> dict | None:
    if not path.exists():
        return None
    return torch.load(path, map_location=device, weights_only=True)


class _Clock:
    """Training and prediction seconds of the work kept on disk, persisted in the scratch directory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds = json.loads(path.read_text()) if path.exists() else {"train": 0.0, "predict": 0.0}

    def add(self, key: str, seconds: float) -> None:
        self.seconds[key] += seconds
        with atomic_path(self.path) as tmp:
            tmp.write_text(json.dumps(self.seconds))


def _train_run(
    method: Method,
    ctx: TrainContext,
    writer: Any,
    *,
    run_index: int,
    run_seed: int,
    clock: _Clock,
    progress: Progress,
    on_snapshot: Callable[[int, nn.Module, dict, int, int], None] | None,
    member_offset: int = 0,
    per_member: int = 1,
) -> tuple[nn.Module, dict, int, int]:
    """Train (or resume) one run; call ``on_snapshot(k, model, state, epoch, step)`` at the snapshot epochs of the
    run's members ``k`` whose archive index ``member_offset + k`` is not yet on disk. Returns (model, state, epochs,
    steps)."""
    ckpt_path = writer.scratch_dir / f"run{run_index:04d}.pt"
    model = ctx.new_model(method, derive_seed(run_seed, 0))
    optimizer = method.make_optimizer(model)
    state = method.init_state(model)
    epoch, step = 0, 0
    saved = _load(ckpt_path, ctx.device)
    if saved is not None:
        model.load_state_dict(saved["model"])
        if optimizer is not None:
            optimizer.load_state_dict(saved["optimizer"])
        state = saved["state"]
        epoch, step = int(saved["epoch"]), int(saved["step"])
    total = method.total_epochs()
    snapshots = method.snapshot_epochs()
    progress.epochs(total, epoch, method.name)
    while epoch < total:
        started = time.perf_counter()
        ctx.train_accuracy = None  # set by train_epoch; a method with its own epoch (HMC) leaves it None
        loss, steps = method.run_epoch(model, optimizer, state, ctx, epoch=epoch + 1,
                                       seed=derive_seed(run_seed, epoch + 1))
        epoch, step = epoch + 1, step + steps
        method.on_epoch_end(model, state, epoch)
        clock.add("train", time.perf_counter() - started)
        progress.epoch_done(epoch, loss, ctx.train_accuracy)
        if on_snapshot is not None:
            for member in [k for k, e in enumerate(snapshots)
                           if e == epoch and (member_offset + k + 1) * per_member > writer.n_members]:
                on_snapshot(member, model, state, epoch, step)
        _atomic_save(
            {"model": model.state_dict(), "optimizer": None if optimizer is None else optimizer.state_dict(),
             "state": state,
             "epoch": epoch, "step": step},
            ckpt_path,
        )
    return model, state, epoch, step


def _epochs_left(method: Method, written: int, members: int, per_member: int, chains: int) -> int:
    """Training epochs the run still has to do (a resumed run's checkpointed epochs counted as left): one run per
    member not yet written (independent), one per chain not yet finished (trajectory), or the one run (posterior)."""
    total = method.total_epochs()
    if method.shape == "independent":
        return (members - written // per_member) * total
    if method.shape == "trajectory":
        return (chains - written // (members // chains * per_member)) * total
    return total if written < members * per_member else 0


def run_method(
    method: Method,
    task: Task,
    settings: RunSettings,
    writer: Any,
    *,
    progress: Progress | None = None,
    on_member: Callable[[int, nn.Module], None] | None = None,
) -> Any:
    """Produce the members ``writer.n_members .. settings.members - 1`` of ``method`` into ``writer`` and record
    scalability; the caller finalises. ``on_member(index, network)`` is called after each member is written with
    the network its predictor ran (``predictor.network``; the edge export of ``--save-models``). Returns the writer."""
    progress = progress or Progress()
    ctx = TrainContext.create(task, settings)
    clock = _Clock(writer.scratch_dir / "seconds.json")
    M = settings.members
    # Archive entries per member: 1, or the number of test-time augmentations of each member (--tta,
    # tta_samples = K: member m's entries m K .. m K + K - 1, one augmentation each, written in that order).
    K = int(getattr(method, "samples_per_member", 1))

    def add(member: int, model: nn.Module, state: dict, epoch: int, step: int, member_seed: int,
            extra: dict | None = None, *, index: int | None = None) -> None:
        """Write the entries of member ``member`` (archive member ``index``, default ``member``) not yet on disk."""
        first = max(0, writer.n_members - (member if index is None else index) * K)
        started = time.perf_counter()
        predictor = method.indexed_predictor(member if index is None else index, model, state, ctx, member_seed)
        for k in range(first, K):
            seed = member_seed if k == 0 else derive_seed(member_seed, 2, k)
            probs = predict_splits(predictor, task, device=ctx.device, batch_size=settings.predict_batch_size,
                                   seed=seed, progress=progress, with_logits=settings.logits)
            probs, logits = probs if settings.logits else (probs, None)
            clock.add("predict", time.perf_counter() - started)
            started = time.perf_counter()
            writer.add_member(
                probs, logits=logits, seed=member_seed, epoch=epoch, step=step, kind=method.member_kind,
                info={**(extra or {}), **method.member_info(member, epoch),
                      **({"member": member if index is None else index, "augmentation": k,
                          "augmentation_seed": seed} if K > 1 else {})},
            )
        if on_member is not None:  # the network the predictor ran (a weight draw), else the trained model
            on_member(member if index is None else index, getattr(predictor, "network", model))

    probe = ctx.new_model(method, 0)
    progress.plan(_epochs_left(method, writer.n_members, M, K, settings.chains),
                  (M * K - writer.n_members) * len(task.splits))
    if method.shape == "independent":
        for member in range(writer.n_members // K, M):
            progress.member(member, M, method.name)
            member_seed = derive_seed(settings.seed, member)
            model, state, epoch, step = _train_run(
                method, ctx, writer, run_index=member, run_seed=member_seed, clock=clock, progress=progress,
                on_snapshot=None,
            )
            add(member, model, state, epoch, step, member_seed)
            (writer.scratch_dir / f"run{member:04d}.pt").unlink(missing_ok=True)
    elif method.shape == "trajectory":
        chains = settings.chains
        per = M // chains  # the method was built with n_members = M / chains: its snapshots are one chain's
        snapshots = method.snapshot_epochs()
        if len(snapshots) != per:
            raise ValueError(f"{method.name}: {len(snapshots)} snapshot epochs for {per} members per chain")
        for chain in range(writer.n_members // (per * K), chains):
            progress.member(writer.n_members // K, M, method.name)
            # Chain 0 keeps the single-chain seed, so a one-chain run is what it always was.
            run_seed = derive_seed(settings.seed, 0) if chain == 0 else derive_seed(settings.seed, 0, chain)

            def on_snapshot(k, model, state, epoch, step, chain=chain):
                member = chain * per + k
                extra = {"chain": chain}
                if (lp := method.log_posterior(model, state, ctx)) is not None:
                    extra["log_posterior"] = lp
                add(k, model, state, epoch, step, derive_seed(settings.seed, 1, member), extra, index=member)
                progress.member(member + 1, M, method.name)

            _train_run(method, ctx, writer, run_index=chain, run_seed=run_seed, clock=clock, progress=progress,
                       on_snapshot=on_snapshot, member_offset=chain * per, per_member=K)
        if method.member_kind == "posterior_sample":
            record_chain_diagnostics(task, writer)
    elif method.shape == "posterior":
        # A method with its own scores (issue #31) writes them after the members; a run killed between the two
        # resumes from the run's checkpoint (kept until the scores are durable) to write them.
        scores_done = (writer.partial_dir / "scores").is_dir()
        if writer.n_members < M * K or (method.writes_scores and not scores_done):
            model, state, epoch, step = _train_run(
                method, ctx, writer, run_index=0, run_seed=derive_seed(settings.seed, 0), clock=clock,
                progress=progress, on_snapshot=None,
            )
            for member in range(writer.n_members // K, M):
                progress.member(member, M, method.name)
                add(member, model, state, epoch, step, derive_seed(settings.seed, 1, member))
            if method.writes_scores:
                started = time.perf_counter()
                for name, (values, direction) in method.method_scores(model, state, ctx).items():
                    writer.set_scores(name, values, direction=direction)
                clock.add("predict", time.perf_counter() - started)
    else:
        raise ValueError(f"{method.name}: unknown method shape {method.shape!r}")
    progress.close()
    writer.set_scalability(
        n_parameters=count_parameters(probe),
        train_seconds=round(clock.seconds["train"], 3),
        predict_seconds=round(clock.seconds["predict"], 3),
        device=str(ctx.device),
    )
    return writer
