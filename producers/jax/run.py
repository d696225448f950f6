# SPDX-License-Identifier: MIT
"""``ubench produce METHOD --framework jax``: a JAX method trained on a task and written member by member through
the archive writer (``framework = "jax"``), resumable like the torch producers (a finished member is never
recomputed; an unfinished one continues from its last checkpoint)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import softmax

from ...archive_schema import ArchiveWriter
from ..chain_diagnostics import record_chain_diagnostics
from ..run_record import derive_seed, run_config, split_specs
from ..sampler_defaults import SGHMC_DEFAULTS, SGLD_DEFAULTS, resolve_temperature
from ..schedules import BASE_DEFAULTS
from ..task import Task
from .hmc import HMC_DEFAULTS, mlp_chain
from .mlp import init_mlp, mlp_logits, n_parameters
from .sgmcmc import sgmcmc_chain
from .train import train_run

__all__ = ["JAX_METHODS", "JaxRunSettings", "produce_archive_jax", "predict_splits_jax"]

#: method -> (member kind, defaults, default members, max members)
JAX_METHODS: dict[str, tuple[str, dict[str, Any], int, int | None]] = {
    "sgd": ("point", dict(BASE_DEFAULTS), 1, 1),
    "deep_ensemble": ("independent", dict(BASE_DEFAULTS), 5, None),
    "hmc": ("posterior_sample", dict(HMC_DEFAULTS), 20, None),
    "sgld": ("posterior_sample", dict(SGLD_DEFAULTS), 20, None),
    "sghmc": ("posterior_sample", dict(SGHMC_DEFAULTS), 20, None),
}


@dataclass(frozen=True)
class JaxRunSettings:
    """What defines a JAX run besides the task and the hyperparameters (recorded like torch's ``RunSettings``)."""

    members: int
    seed: int
    model: str = "mlp"
    batch_size: int = 128
    predict_batch_size: int = 1000
    chains: int = 1

    def record(self) -> dict:
        out = {"model": self.model, "members": self.members, "seed": self.seed, "batch_size": self.batch_size}
        if self.chains != 1:
            out["chains"] = self.chains
        return out


def resolve_hyperparameters(method: str, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The JAX method's defaults updated with ``overrides`` cast to each default's type; unknown names raise."""
    if method not in JAX_METHODS:
        raise ValueError(f"--framework jax implements {', '.join(JAX_METHODS)}; not {method!r}")
    defaults = JAX_METHODS[method][1]
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        raise ValueError(f"{method} (jax) has no hyperparameter {', '.join(map(repr, unknown))}; "
                         f"it has: {', '.join(sorted(defaults))}")
    out = dict(defaults)
    for key, value in overrides.items():
        kind = type(defaults[key])
        out[key] = int(float(value)) if kind is int else value if key == "temperature" else kind(value)
    if "temperature" in out:
        resolve_temperature(out["temperature"], 1)  # a bad value is refused before any training
    if method == "hmc" and out["sampler"] not in ("hmc", "nuts"):
        raise ValueError(f"hmc (jax): sampler must be hmc or nuts; got {out['sampler']!r}")
    return out


def predict_splits_jax(params, task: Task, *, batch_size: int) -> dict[str, np.ndarray]:
    """Softmax probabilities (float32, computed in float64 from float32 logits) on every split."""
    logits_fn = jax.jit(lambda p, x: mlp_logits(p, x, task.mean, task.std))
    out = {}
    for name, split in task.splits.items():
        parts = [np.asarray(logits_fn(params, jnp.asarray(split.images[i: i + batch_size])), dtype=np.float64)
                 for i in range(0, len(split.images), batch_size)]
        out[name] = softmax(np.concatenate(parts), axis=1).astype(np.float32)
    return out


def _run_chains(method: str, hp: dict, task: Task, settings: "JaxRunSettings", writer: Any, seconds: dict,
                kind: str) -> int:
    """The samplers: ``settings.chains`` chains one after another, ``members / chains`` members each (chain 0 keeps
    the single-chain seed); members carry ``chain`` and ``log_posterior``; then the chain diagnostics."""
    x, y = task.train.images, task.train.labels.astype(np.int32)
    per = settings.members // settings.chains
    count = 0
    for c in range(writer.n_members // per, settings.chains):
        done = writer.n_members - c * per
        started = [time.perf_counter()]

        def write(k, params, epoch, step, info):
            nonlocal count
            seconds["train"] += time.perf_counter() - started[0]
            t = time.perf_counter()
            probs = predict_splits_jax(params, task, batch_size=settings.predict_batch_size)
            seconds["predict"] += time.perf_counter() - t
            writer.add_member(probs, seed=derive_seed(settings.seed, 1, c * per + k), epoch=epoch, step=step,
                              kind=kind, info={"chain": c, **info})
            count = n_parameters(params)
            started[0] = time.perf_counter()

        if method == "hmc":
            chain = mlp_chain(hp, x=x, y=y, n_classes=task.n_classes, mean=task.mean, std=task.std,
                              seed=settings.seed if c == 0 else derive_seed(settings.seed, 2, c),
                              scratch=writer.scratch_dir, name=f"hmc_chain{c:04d}.npz")
            for k in range(done, per):
                params, info = chain.sample(k)
                write(k, params, info["iteration"], info["iteration"], info)
                chain.commit()
        else:
            sgmcmc_chain(hp, friction=float(hp.get("friction", 1.0)), n_members=per, x=x, y=y,
                         n_classes=task.n_classes, mean=task.mean, std=task.std,
                         seed=derive_seed(settings.seed, 0) if c == 0 else derive_seed(settings.seed, 0, c),
                         batch_size=settings.batch_size, checkpoint=writer.scratch_dir / f"run{c:04d}.npz",
                         members_done=done,
                         on_member=lambda k, p, e, s, lp: write(k, p, e, s, {"log_posterior": lp}))
    record_chain_diagnostics(task, writer)
    return count


def produce_archive_jax(method: str, task: Task, out: str | Path, *, settings: JaxRunSettings,
                        hyper: Mapping[str, Any] | None = None, overwrite: bool = False, progress=None) -> Path:
    """Train ``method`` in JAX on ``task`` and write its archive to ``out``; resume an unfinished run.
    ``progress`` (the producers' hook, ``torch_trainer.Progress``) hears of each member."""
    if settings.model != "mlp":
        raise ValueError(f"--framework jax has the mlp model only; got {settings.model!r}")
    hp = resolve_hyperparameters(method, hyper or {})
    kind, _, _, max_members = JAX_METHODS[method]
    if settings.members < 1 or (max_members is not None and settings.members > max_members):
        raise ValueError(f"{method} allows 1 to {max_members or 'any number of'} members; got {settings.members}")
    writer = ArchiveWriter(
        out, method=method, model=settings.model, dataset=task.dataset, n_classes=task.n_classes,
        splits=split_specs(task), class_names=list(task.class_names) if task.class_names else None,
        config=run_config(method, hp, settings, task), framework="jax", framework_version=jax.__version__,
        description=f"{method} in JAX", dtype=np.float32, overwrite=overwrite,
    )
    x, y = task.train.images, task.train.labels.astype(np.int32)
    seconds = {"train": 0.0, "predict": 0.0}
    params_count = 0
    if settings.chains != 1 and (method not in ("sgld", "sghmc", "hmc") or settings.members % settings.chains):
        raise ValueError(f"--chains {settings.chains}: chains are for the samplers (sgld, sghmc, hmc), with members "
                         f"a multiple of chains; got {method} with {settings.members} members")
    if method in ("sgld", "sghmc", "hmc"):
        params_count = _run_chains(method, hp, task, settings, writer, seconds, kind)
    for member in range(writer.n_members, settings.members):
        if progress is not None:
            progress.member(member, settings.members, method)
        started = time.perf_counter()
        member_seed = derive_seed(settings.seed, member)
        checkpoint = writer.scratch_dir / f"run{member:04d}.npz"
        on_epoch = None
        if progress is not None:  # one line (or bar) per epoch, as the torch producers report
            progress.epochs(int(hp["epochs"]), 0, method)
            on_epoch = lambda e, loss: progress.epoch_done(e, loss)  # noqa: E731
        params, epoch, step = train_run(hp, x=x, y=y, n_classes=task.n_classes, mean=task.mean,
                                        std=task.std, seed=member_seed, batch_size=settings.batch_size,
                                        checkpoint=checkpoint, on_epoch=on_epoch)
        seconds["train"] += time.perf_counter() - started
        started = time.perf_counter()
        probs = predict_splits_jax(params, task, batch_size=settings.predict_batch_size)
        seconds["predict"] += time.perf_counter() - started
        writer.add_member(probs, seed=member_seed, epoch=epoch, step=step, kind=kind, info={})
        checkpoint.unlink(missing_ok=True)
        params_count = n_parameters(params)
    if progress is not None:
        progress.close()
    if not params_count:  # members written by this process carry it; otherwise count a fresh network
        params_count = n_parameters(init_mlp(jax.random.key(0), int(np.prod(task.input_shape)), task.n_classes))
    writer.set_scalability(n_parameters=params_count, train_seconds=round(seconds["train"], 3),
                           predict_seconds=round(seconds["predict"], 3), device=str(jax.devices()[0]))
    return writer.finalize()

