# SPDX-License-Identifier: MIT
"""Writing archives from a plain PyTorch loop: ``with ArchiveWriter(...) as w: w.add_member(model, loaders)``.

``ArchiveWriter`` here is ``archive_schema.ArchiveWriter`` whose ``add_member`` also takes a model and a mapping
split name -> DataLoader: the model is run in eval mode without gradients over each loader (batches ``(x, y)``
or ``x``), its outputs turned into probabilities (``output="logits"``: softmax, computed in float64;
``"log-probs"``: exp; ``"probs"``: as is) and appended as one member. ``labels_of(loader)`` collects the labels
to declare the splits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ..extras import require

require("torch", what="ubench.integrations.torch", modules=("torch",))
import torch  # noqa: E402

from ..archive_schema.writer import ArchiveWriter as _BaseWriter  # noqa: E402

__all__ = ["ArchiveWriter", "predict_probs", "labels_of"]

OUTPUTS = ("logits", "log-probs", "probs")


def _inputs(batch: Any) -> Any:
    return batch[0] if isinstance(batch, (tuple, list)) else batch


def labels_of(loader: Iterable) -> np.ndarray:
    """The int64 labels of a loader whose batches are ``(x, y)``, in loader order."""
    ys = [torch.as_tensor(b[1]).reshape(-1).cpu() for b in loader]
    return torch.cat(ys).numpy().astype(np.int64)


@torch.no_grad()
def predict_probs(model: torch.nn.Module, loader: Iterable, *, output: str = "logits",
                  device: torch.device | str | None = None) -> np.ndarray:
    """(N, C) probabilities of ``model`` over ``loader`` (eval mode, no gradients; train mode restored after)."""
    if output not in OUTPUTS:
        raise ValueError(f"output must be one of {OUTPUTS}; found {output!r}")
    if device is None:
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
    was_training = model.training
    model.eval()
    try:
        parts = []
        for batch in loader:
            out = model(_inputs(batch).to(device)).double()
            if output == "logits":
                out = torch.softmax(out, dim=1)
            elif output == "log-probs":
                out = out.exp()
            parts.append(out.cpu().numpy())
    finally:
        model.train(was_training)
    return np.concatenate(parts)


class ArchiveWriter(_BaseWriter):
    """``archive_schema.ArchiveWriter`` whose ``add_member`` also accepts ``(model, loaders)``."""

    def add_member(self, probs_or_model: Mapping[str, Any] | torch.nn.Module,
                   loaders: Mapping[str, Iterable] | None = None, *, seed: int = -1, output: str = "logits",
                   **kwargs: Any) -> int:
        if isinstance(probs_or_model, torch.nn.Module):
            if loaders is None:
                raise ValueError("add_member(model, loaders): give a mapping split name -> DataLoader")
            probs = {name: predict_probs(probs_or_model, loader, output=output).astype(self.dtype)
                     for name, loader in loaders.items()}
            return super().add_member(probs, seed=seed, **kwargs)
        if loaders is not None:
            raise ValueError("loaders are only for add_member(model, loaders)")
        return super().add_member(probs_or_model, seed=seed, **kwargs)
