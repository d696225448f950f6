# SPDX-License-Identifier: MIT
"""Test-time augmentation (Pitfalls section 4): one network trained with random crops (and optionally flips); each
member predicts on a fresh random augmentation of every test image. ``crop_pad=4, flip=true`` is the CIFAR
setting; the default (2-pixel translations, no flip) suits 28x28 digits and clothing."""

from __future__ import annotations

from .torch_trainer import BASE_DEFAULTS, Method, random_crop_flip

__all__ = ["TestTimeAugmentation"]


class TestTimeAugmentation(Method):
    """Members differ only in the augmentation drawn for each test image."""

    name = "tta"
    member_kind = "augmentation"
    shape = "posterior"
    defaults = {**BASE_DEFAULTS, "crop_pad": 2, "flip": False, "train_augment": True}
    default_members = 10
    summary = "test-time augmentation (random crops/flips)"

    def augment_training(self):
        return (self.hp["crop_pad"], self.hp["flip"]) if self.hp["train_augment"] else None

    def member_predictor(self, model, state, ctx, seed):
        model.eval()
        pad, flip = self.hp["crop_pad"], self.hp["flip"]
        return lambda x, gen: model(random_crop_flip(x, gen, pad=pad, flip=flip))
