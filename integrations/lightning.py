# SPDX-License-Identifier: MIT
"""``ArchiveCallback``: a PyTorch Lightning callback that writes a ubench archive from inside ``Trainer.fit``.

At the end of fit (``members="end"``: one member, kind ``point``) or at the end of every training epoch
(``members="epoch"``: one snapshot member per epoch, kind ``snapshot``) or whenever Lightning saves a checkpoint
(``members="checkpoint"``: e.g. under ``ModelCheckpoint``, kind ``snapshot``) the LightningModule predicts every
configured dataloader (``splits``: name -> dict with ``loader``, ``role`` and, for shifts, ``shift_kind`` /
``shift_intensity``; ``dataset`` defaults to the archive's) and the member is appended durably; the archive is
assembled when fit ends. A run killed half-way resumes: a later fit with the same configuration extends the same
``<path>.partial`` (the writer's fingerprint guards against a different configuration). Extra ``lightning``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..extras import require

require("lightning", "torch", what="ubench.integrations.lightning")
import lightning.pytorch as pl  # noqa: E402

from ..archive_schema import SplitSpec  # noqa: E402
from .torch import ArchiveWriter, labels_of  # noqa: E402

__all__ = ["ArchiveCallback"]


class ArchiveCallback(pl.Callback):
    """Write the predictions of the module being fit into a ubench archive (module docstring)."""

    def __init__(self, path: str | Path, *, splits: Mapping[str, Mapping[str, Any]], method: str, model: str,
                 dataset: str, n_classes: int, members: str = "end", output: str = "logits",
                 config: Mapping[str, Any] | None = None, seed: int = -1, overwrite: bool = False):
        if members not in ("end", "epoch", "checkpoint"):
            raise ValueError(f"members must be 'end', 'epoch' or 'checkpoint'; found {members!r}")
        self.path, self.members, self.output, self.seed = Path(path), members, output, seed
        self._splits = {name: dict(s) for name, s in splits.items()}
        self._meta = dict(method=method, model=model, dataset=dataset, n_classes=n_classes,
                          config={**dict(config or {}), "members": members, "output": output},
                          framework="lightning", framework_version=pl.__version__, overwrite=overwrite)
        self.writer: ArchiveWriter | None = None

    def _open(self) -> ArchiveWriter:
        if self.writer is None:
            specs = {}
            for name, s in self._splits.items():
                role = s.get("role", "in_domain")
                labels = labels_of(s["loader"]) if role != "ood" and s.get("labels", True) else None
                n = None if labels is not None else sum(len(b[0]) if isinstance(b, (tuple, list)) else len(b)
                                                        for b in s["loader"])
                specs[name] = SplitSpec(role=role, dataset=s.get("dataset", self._meta["dataset"]), labels=labels,
                                        n_samples=n, shift_kind=s.get("shift_kind"),
                                        shift_intensity=s.get("shift_intensity"))
            self.writer = ArchiveWriter(self.path, splits=specs, **self._meta)
        return self.writer

    def _add(self, trainer: pl.Trainer, module: pl.LightningModule, kind: str) -> None:
        writer = self._open()
        loaders = {name: s["loader"] for name, s in self._splits.items()}
        writer.add_member(module, loaders, output=self.output, seed=self.seed, kind=kind,
                          epoch=int(trainer.current_epoch) + (1 if kind == "snapshot" else 0),
                          step=int(trainer.global_step))

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.members == "epoch" and trainer.is_global_zero:
            self._add(trainer, pl_module, "snapshot")

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        if self.members == "checkpoint" and trainer.is_global_zero:
            self._add(trainer, pl_module, "snapshot")

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        if self.members == "end":
            self._add(trainer, pl_module, "point")
        if self.writer is not None and self.writer.n_members:
            self.writer.finalize()
