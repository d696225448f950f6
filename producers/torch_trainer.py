# SPDX-License-Identifier: MIT
"""The machinery every PyTorch producer shares: device and determinism set-up, the epoch loop with resumable
checkpoints, batched softmax prediction over the splits, and the member loop around the archive writer.

A method (one module each in ``producers/``) subclasses :class:`Method` and says only what is its own: its
hyperparameters and their defaults, its learning-rate (and noise) schedule, its optimiser, at which epochs a
trajectory yields members, what state it accumulates (SWAG's moments), and how a member is drawn after training
(a dropout mask, a SWAG weight sample, an augmentation). Three shapes of method are driven by :func:`~ubench.producers.member_loop.run_method`:

* independent: each member is its own training run from its own initialisation (SGD, deep ensembles);
* trajectory: one run yields members at given epochs (snapshot ensembles, FGE, SG-MCMC samplers);
* posterior: one run, then members drawn from what it learned (MC dropout, SWAG, test-time augmentation).

The member loop and its checkpoints live in :mod:`ubench.producers.member_loop`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .models import build_model
from .run_record import derive_seed
from .schedules import BASE_DEFAULTS, pitfalls_schedule
from .task import Task

__all__ = [
    "BASE_DEFAULTS",
    "Method",
    "Progress",
    "RunSettings",
    "derive_seed",
    "configure_torch",
    "resolve_device",
    "pitfalls_schedule",
    "predict_splits",
    "predict_values",
    "crop_padding",
    "random_crop_flip",
    "train_epoch",
]

def resolve_device(device: str) -> torch.device:
    """``"auto"`` is CUDA when available, else the CPU; anything else is passed to ``torch.device``."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def configure_torch(*, threads: int | None = None) -> None:
    """Deterministic algorithms where torch has them (a warning, not an error, where it does not)."""
    # cuBLAS needs this workspace setting to be deterministic; it must be set before CUDA initialises.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    if threads is not None:
        torch.set_num_threads(int(threads))


def crop_padding(height: int, width: int, fraction: float) -> int:
    """Pixels of padding for random crops: ``fraction`` of the shorter image side, rounded half up
    (``floor(fraction * min(height, width) + 0.5)``). At the default 1/8 this is the CIFAR convention (4 px on
    32x32, Pitfalls' and csgmcmc's ``RandomCrop(32, padding=4)``), 4 px on 28x28 and 1 px on 8x8 digits."""
    return int(math.floor(fraction * min(height, width) + 0.5))


def random_crop_flip(x: torch.Tensor, generator: torch.Generator, *, pad: int, flip: bool) -> torch.Tensor:
    """Random translation by up to ``pad`` pixels (zero padding, then a crop back to size) and, when ``flip``, a
    random horizontal flip; one draw per image from ``generator`` (which lives on the CPU)."""
    n, _, h, w = x.shape
    if pad > 0:
        offsets = torch.randint(0, 2 * pad + 1, (2, n), generator=generator).to(x.device)
        padded = F.pad(x, (pad, pad, pad, pad))
        rows = offsets[0][:, None] + torch.arange(h, device=x.device)[None, :]
        cols = offsets[1][:, None] + torch.arange(w, device=x.device)[None, :]
        batch = torch.arange(n, device=x.device)[:, None, None]
        x = padded.permute(0, 2, 3, 1)[batch, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2)
    if flip:
        mask = (torch.rand(n, generator=generator) < 0.5).to(x.device)
        x = torch.where(mask[:, None, None, None], x.flip(-1), x)
    return x.contiguous()


class Progress:
    """What the member and epoch loops report; the default reports nothing (the command draws bars)."""

    def plan(self, epochs: int, predictions: int) -> None:
        """The run has ``epochs`` training epochs and ``predictions`` split predictions (one member on one split)
        left to do, in all."""

    def predicting(self, done: int, total: int) -> None:
        """``done`` of the ``total`` splits of the current member are predicted (``done = 0``: it starts)."""

    def member(self, index: int, total: int, label: str) -> None:
        """Work on member ``index`` (0-based) of ``total`` starts."""

    def epochs(self, total: int, done: int, label: str) -> None:
        """A training run of ``total`` epochs starts, ``done`` of them already finished."""

    def epoch_done(self, epoch: int, loss: float, accuracy: float | None = None) -> None:
        """Epoch ``epoch`` (1-based) finished with mean training loss ``loss`` and training accuracy ``accuracy``
        (on the minibatches as trained; None when the epoch does not measure it, e.g. an HMC transition)."""

    def close(self) -> None:
        """The run is over."""


@dataclass(frozen=True)
class RunSettings:
    """What defines a run besides the task and the method's hyperparameters."""

    model: str
    members: int
    seed: int
    batch_size: int = 128
    predict_batch_size: int = 1000
    device: str = "auto"
    chains: int = 1
    #: Also store every member's logits (archive format 1.1, SPEC.md §4.3): energy and max-logit scores.
    logits: bool = False

    def record(self) -> dict:
        """The settings that define the run's results (the device does not; a run may resume elsewhere).
        ``chains`` and ``logits`` are recorded only when they differ from their defaults, so earlier configs are
        as before."""
        out = {"model": self.model, "members": self.members, "seed": self.seed, "batch_size": self.batch_size}
        if self.chains != 1:
            out["chains"] = self.chains
        if self.logits:
            out["logits"] = True
        return out


class Method:
    """One uncertainty method. Subclasses set the class attributes and override what differs.

    Attributes
    ----------
    name : the method's name on the command line and in the archive.
    member_kind : the archive's member kind.
    shape : ``"independent"``, ``"trajectory"`` or ``"posterior"`` (see the module docstring).
    defaults : hyperparameters and their defaults (recorded in the archive's config).
    default_members, max_members : the number of members by default and at most.
    dropout : ``"none"``, ``"bernoulli"`` or ``"gaussian"``; the rate is the hyperparameter ``dropout_rate``.
    """

    name: ClassVar[str] = ""
    member_kind: ClassVar[str] = "independent"
    shape: ClassVar[str] = "independent"
    defaults: ClassVar[dict[str, Any]] = dict(BASE_DEFAULTS)
    default_members: ClassVar[int] = 1
    max_members: ClassVar[int | None] = None
    dropout: ClassVar[str] = "none"
    #: Members sample dropout masks at test time (MC dropout and its kin); ``--save-models`` exports the
    #: sampling inside the ONNX graph.
    test_time_dropout: ClassVar[bool] = False
    summary: ClassVar[str] = ""
    #: Fraction of the training set held out for validation when ``--val-fraction`` is not given.
    default_val_fraction: ClassVar[float] = 0.0

    def __init__(self, hyper: Mapping[str, Any], *, n_members: int, n_train: int) -> None:
        self.hp = dict(hyper)
        self.n_members = int(n_members)
        self.n_train = int(n_train)

    # -- hyperparameters -----------------------------------------------------------------------------------------
    @classmethod
    def resolve_hyperparameters(cls, overrides: Mapping[str, Any]) -> dict[str, Any]:
        """The defaults updated with ``overrides`` (cast to each default's type); unknown names raise."""
        unknown = sorted(set(overrides) - set(cls.defaults))
        if unknown:
            raise ValueError(
                f"{cls.name} has no hyperparameter {', '.join(map(repr, unknown))}; "
                f"it has: {', '.join(sorted(cls.defaults))}"
            )
        out = dict(cls.defaults)
        for key, value in overrides.items():
            out[key] = _cast_like(cls.defaults[key], value, key)
        rate = out.get("dropout_rate")
        if (cls.dropout != "none" or cls.test_time_dropout) and rate is not None and not 0.0 < rate < 1.0:
            # build_model would refuse it only once training starts (a traceback, not a usage error)
            raise ValueError(f"{cls.name}: dropout_rate must be in (0, 1) (the kept units are scaled by "
                             f"1 / (1 - rate)); got {out['dropout_rate']}")
        cls.check_hyperparameters(out)
        return out

    @classmethod
    def check_hyperparameters(cls, hp: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` naming the hyperparameter when the resolved ``hp`` cannot be run (before any
        training, so that ``ubench produce`` reports it as a usage error)."""

    # -- the training run ----------------------------------------------------------------------------------------
    def total_epochs(self) -> int:
        """Epochs of one training run."""
        return int(self.hp["epochs"])

    def schedule(self, t: float) -> dict[str, Any]:
        """Optimizer param-group values (``lr``, and e.g. ``noise``) after ``t`` (fractional) epochs."""
        return {"lr": pitfalls_schedule(t, self.hp["lr"], self.total_epochs())}

    def prepare_model(self, model: nn.Module) -> nn.Module:
        """The network the method trains, built from the freshly initialised ``model`` (e.g. with variational
        layers); by default ``model`` itself."""
        return model

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        """The optimiser; plain SGD with momentum and weight decay by default."""
        return torch.optim.SGD(
            model.parameters(), lr=self.hp["lr"], momentum=self.hp["momentum"], weight_decay=self.hp["weight_decay"]
        )

    def augment_training(self, height: int, width: int) -> tuple[int, bool] | None:
        """``(pad, flip)`` for random crops and flips of training batches of ``height`` x ``width`` images, or
        None for no augmentation."""
        return None

    def snapshot_epochs(self) -> list[int]:
        """Trajectory methods: the epoch (1-based) at whose end each member is taken, in member order."""
        return []

    def init_state(self, model: nn.Module) -> dict[str, Any]:
        """State the method accumulates during training (tensors and numbers; saved in checkpoints)."""
        return {}

    def run_epoch(
        self, model: nn.Module, optimizer: torch.optim.Optimizer | None, state: dict[str, Any], ctx: "TrainContext",
        *, epoch: int, seed: int,
    ) -> tuple[float, int]:
        """One epoch (1-based ``epoch``) of the run, seeded by ``seed``; returns (mean loss, steps). By default a
        pass of minibatch optimisation (:func:`train_epoch`); a full-batch sampler (HMC) makes one transition."""
        return train_epoch(model, optimizer, self, ctx, epoch=epoch, seed=seed)

    def on_epoch_end(self, model: nn.Module, state: dict[str, Any], epoch: int) -> None:
        """Called after each epoch's optimisation, before the epoch's checkpoint."""

    # -- members -------------------------------------------------------------------------------------------------
    def member_predictor(
        self, model: nn.Module, state: dict[str, Any], ctx: "TrainContext", seed: int
    ) -> Callable[[torch.Tensor, torch.Generator], torch.Tensor]:
        """A function from an input batch (and a CPU generator seeded for this member and split) to logits.
        By default: the model itself in evaluation mode."""
        model.eval()
        return with_network(lambda x, gen: model(x), model)

    def member_info(self, index: int, epoch: int) -> dict[str, Any]:
        """Free metadata stored with a member."""
        return {}

    # -- issue #31: hooks of the methods with their own outputs, losses and scores --------------------------------
    #: Methods whose members are heads of one network (BatchEnsemble, MIMO, Packed-Ensembles) say which member a
    #: predictor is for through :meth:`indexed_predictor`.
    def indexed_predictor(self, index: int, model: nn.Module, state: dict[str, Any], ctx: "TrainContext",
                          seed: int) -> Callable[[torch.Tensor, torch.Generator], torch.Tensor]:
        """The predictor of archive member ``index``; :meth:`member_predictor` unless a method needs the index."""
        return self.member_predictor(model, state, ctx, seed)

    def format_batch(self, x: torch.Tensor, y: torch.Tensor, generator: torch.Generator
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """A training minibatch as the network trains on it (MIMO stacks shuffled copies); by default as it is."""
        return x, y

    def loss(self, outputs: torch.Tensor, y: torch.Tensor, t: float) -> torch.Tensor:
        """The training loss of a minibatch after ``t`` (fractional) epochs; cross-entropy by default."""
        return F.cross_entropy(outputs, y)

    #: The method writes :meth:`method_scores` (posterior-shaped methods only: one trained network).
    writes_scores: ClassVar[bool] = False

    def method_scores(self, model: nn.Module, state: dict[str, Any], ctx: "TrainContext"
                      ) -> dict[str, tuple[dict[str, np.ndarray], str]]:
        """Per-sample scores the method produces besides its probabilities (archive format 1.1, SPEC.md §4.4):
        ``{name: ({split: (N,) values}, direction)}``, computed once after the members; none by default."""
        return {}

    def log_posterior(self, model: nn.Module, state: dict[str, Any], ctx: "TrainContext") -> float | None:
        """Samplers: the log-posterior (up to its constant) at the current weights, for the chain diagnostics;
        None for methods that are not samplers."""
        return None


def with_network(predictor: Callable, network: nn.Module) -> Callable:
    """Attach to ``predictor`` the network it runs (``predictor.network``), which ``--save-models`` exports."""
    predictor.network = network
    return predictor


def _cast_like(default: Any, value: Any, key: str) -> Any:
    """Cast a (possibly string) override to the type of its default."""
    if isinstance(default, bool):
        if isinstance(value, str):
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"hyperparameter {key!r} must be true or false; got {value!r}")
        return bool(value)
    try:
        if isinstance(default, int):
            as_float = float(value)
            if not as_float.is_integer():
                raise ValueError
            return int(as_float)
        if isinstance(default, float):
            out = float(value)
            if not math.isfinite(out):
                raise ValueError
            return out
    except (TypeError, ValueError):
        raise ValueError(f"hyperparameter {key!r} must be a finite {type(default).__name__}; got {value!r}") from None
    return type(default)(value)


@dataclass
class TrainContext:
    """Everything a training run needs, on the run's device."""

    task: Task
    settings: RunSettings
    device: torch.device
    x_train: torch.Tensor
    y_train: torch.Tensor
    #: Accuracy of the last epoch of :func:`train_epoch` on its minibatches as trained (for progress only).
    train_accuracy: float | None = None

    @classmethod
    def create(cls, task: Task, settings: RunSettings) -> "TrainContext":
        device = resolve_device(settings.device)
        return cls(
            task,
            settings,
            device,
            torch.from_numpy(task.train.images).to(device),
            torch.from_numpy(task.train.labels).to(device),
        )

    def new_model(self, method: Method, seed: int) -> nn.Module:
        torch.manual_seed(seed)
        model = build_model(
            self.settings.model,
            self.task.input_shape,
            self.task.n_classes,
            mean=self.task.mean,
            std=self.task.std,
            dropout=method.dropout,
            p=float(method.hp.get("dropout_rate", 0.0)),
        )
        return method.prepare_model(model).to(self.device)


def train_epoch(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    method: Method,
    ctx: TrainContext,
    *,
    epoch: int,
    seed: int,
) -> tuple[float, int]:
    """One pass over the training set in a seeded random order; returns (mean loss, number of steps)."""
    n = len(ctx.y_train)
    batch_size = ctx.settings.batch_size
    n_batches = math.ceil(n / batch_size)
    order_gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(n, generator=order_gen).to(ctx.device)
    # Dropout masks and sampler noise come from the global generator, reseeded per epoch for resumability.
    torch.manual_seed(derive_seed(seed, 1))
    augment = method.augment_training(*ctx.x_train.shape[-2:])
    model.train()
    total = torch.zeros((), dtype=torch.float64, device=ctx.device)
    correct = torch.zeros((), dtype=torch.float64, device=ctx.device)
    for b in range(n_batches):
        index = order[b * batch_size: (b + 1) * batch_size]
        x, y = ctx.x_train[index], ctx.y_train[index]
        if augment is not None:
            x = random_crop_flip(x, order_gen, pad=augment[0], flip=augment[1])
        for group in optimizer.param_groups:
            group.update(method.schedule(epoch - 1 + b / n_batches))
        x, y = method.format_batch(x, y, order_gen)
        optimizer.zero_grad(set_to_none=True)
        logits = model(x)
        loss = method.loss(logits, y, epoch - 1 + b / n_batches)
        loss.backward()
        optimizer.step()
        total += loss.detach().double() * len(index)
        # rows trained on per sample: 1, or M for the methods that repeat a batch per member (format_batch)
        correct += (logits.detach().argmax(dim=1) == y).double().sum() * (len(index) / len(y))
    mean_loss = float(total) / n
    ctx.train_accuracy = float(correct) / n
    if not math.isfinite(mean_loss):
        raise FloatingPointError(f"{method.name}: training loss became {mean_loss} in epoch {epoch}; lower the lr")
    return mean_loss, n_batches


@torch.no_grad()
def predict_splits(
    predictor: Callable[[torch.Tensor, torch.Generator], torch.Tensor],
    task: Task,
    *,
    device: torch.device,
    batch_size: int,
    seed: int,
    progress: Progress | None = None,
    with_logits: bool = False,
) -> dict[str, np.ndarray] | tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Softmax probabilities (float32, computed in float64) of ``predictor`` on every split, in batches; with
    ``with_logits`` also the float32 logits they are the softmax of, as ``(probs, logits)``;
    ``progress.predicting`` hears of each split done."""
    out, raw = {}, {}
    if progress is not None:
        progress.predicting(0, len(task.splits))
    for i, (name, split) in enumerate(task.splits.items()):
        gen = torch.Generator().manual_seed(derive_seed(seed, i))
        torch.manual_seed(derive_seed(seed, i, 1))
        parts, zs = [], []
        for start in range(0, len(split.images), batch_size):
            x = torch.from_numpy(split.images[start: start + batch_size]).to(device)
            logits = predictor(x, gen).double()
            if with_logits:  # float32: within SPEC.md 4.3's tolerance of the float64 softmax below
                zs.append(logits.float().cpu().numpy())
            parts.append(torch.softmax(logits, dim=1).float().cpu().numpy())
        out[name] = np.concatenate(parts)
        if with_logits:
            raw[name] = np.concatenate(zs)
        if progress is not None:
            progress.predicting(i + 1, len(task.splits))
    return (out, raw) if with_logits else out


@torch.no_grad()
def predict_values(fn: Callable[[torch.Tensor], torch.Tensor], task: Task, *, device: torch.device,
                   batch_size: int) -> dict[str, np.ndarray]:
    """``fn`` (a batch of inputs to one float per sample) on every split, in batches, as float64 arrays: a
    method's own per-sample scores (SPEC.md §4.4)."""
    out = {}
    for name, split in task.splits.items():
        parts = [fn(torch.from_numpy(split.images[start: start + batch_size]).to(device)).double().cpu().numpy()
                 for start in range(0, len(split.images), batch_size)]
        out[name] = np.concatenate(parts)
    return out
