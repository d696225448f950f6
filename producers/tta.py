# SPDX-License-Identifier: MIT
"""Test-time augmentation (Pitfalls section 4): one network trained with random crops (and optionally flips); each
member predicts on a fresh random augmentation of every test image.

The crops pad by ``crop_fraction`` of the image side (:func:`~ubench.producers.torch_trainer.crop_padding`): the
default 1/8 is the CIFAR convention the Pitfalls code uses (``RandomCrop(32, padding=4)``), scaled to the image so
that a digit is not shifted by a quarter of its width (1 px on 8x8, 4 px on 28x28, 4 px on 32x32). ``flip=true``
adds CIFAR's horizontal flips; the default leaves them off, which suits digits and clothing."""

from __future__ import annotations

from .torch_trainer import BASE_DEFAULTS, Method, crop_padding, random_crop_flip

__all__ = ["TestTimeAugmentation"]


class TestTimeAugmentation(Method):
    """Members differ only in the augmentation drawn for each test image."""

    name = "tta"
    member_kind = "augmentation"
    shape = "posterior"
    defaults = {**BASE_DEFAULTS, "crop_fraction": 0.125, "flip": False, "train_augment": True}
    default_members = 10
    summary = "test-time augmentation (random crops/flips)"

    @classmethod
    def check_hyperparameters(cls, hp):
        if not 0.0 <= hp["crop_fraction"] < 0.5:
            raise ValueError(f"tta: crop_fraction must be in [0, 0.5); got {hp['crop_fraction']}")

    def crop_pad(self, height: int, width: int) -> int:
        """Padding of the random crops for ``height`` x ``width`` images."""
        return crop_padding(height, width, self.hp["crop_fraction"])

    def augment_training(self, height, width):
        return (self.crop_pad(height, width), self.hp["flip"]) if self.hp["train_augment"] else None

    def member_predictor(self, model, state, ctx, seed):
        model.eval()
        pad, flip = self.crop_pad(*ctx.x_train.shape[-2:]), self.hp["flip"]
        return lambda x, gen: model(random_crop_flip(x, gen, pad=pad, flip=flip))
