# SPDX-License-Identifier: MIT
"""Shifted copies of a test set, as in the shift paper's MNIST experiments (Ovadia et al. 2019, appendix B).

Rotations (spline interpolation) of 15 to 180 degrees, horizontal cyclic translations of 2 pixels up to (not
including) the image width, and additive Gaussian noise and Gaussian blur at 5 intensities. numpy and scipy only. Images are float32
(n, channels, height, width) in [0, 1]; every function returns a new array in [0, 1] and never mutates its input.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy import ndimage

__all__ = [
    "SHIFT_KINDS",
    "NOISE_STDS",
    "BLUR_SIGMAS",
    "Shift",
    "rotate",
    "translate",
    "gaussian_noise",
    "gaussian_blur",
    "default_shifts",
    "is_identity",
    "apply_shift",
    "uniform_noise_images",
]

SHIFT_KINDS = ("rotate", "translate", "noise", "blur")
# Severities 1-5: the noise standard deviations are ImageNet-C's `gaussian_noise` (Hendrycks & Dietterich 2019);
# the blur sigmas are ImageNet-C's scaled down from 224-pixel to 28-pixel images.
NOISE_STDS = (0.08, 0.12, 0.18, 0.26, 0.38)
BLUR_SIGMAS = (0.5, 0.75, 1.0, 1.5, 2.0)


@dataclass(frozen=True)
class Shift:
    """One shifted split: ``kind`` in :data:`SHIFT_KINDS`; ``intensity`` in degrees (rotate), pixels (translate) or
    severity 1-5 (noise, blur)."""

    kind: str
    intensity: float

    @property
    def split_name(self) -> str:
        value = int(self.intensity) if float(self.intensity).is_integer() else self.intensity
        return f"shift_{self.kind}_{value}"


def rotate(images: NDArray[np.float32], degrees: float) -> NDArray[np.float32]:
    """Rotate every image counter-clockwise by ``degrees`` about its centre (cubic spline, zero fill, same size)."""
    out = ndimage.rotate(images, degrees, axes=(3, 2), reshape=False, order=3, mode="constant", cval=0.0)
    return np.clip(out, 0.0, 1.0).astype(np.float32)


def translate(images: NDArray[np.float32], pixels: int) -> NDArray[np.float32]:
    """Translate every image ``pixels`` to the right, cyclically (what leaves the right edge enters on the left).

    Translating by a multiple of the width is the identity; :func:`default_shifts` leaves such intensities out.
    """
    return np.roll(images, int(pixels), axis=3).astype(np.float32, copy=True)


def gaussian_noise(images: NDArray[np.float32], severity: int, *, seed: int) -> NDArray[np.float32]:
    """Add N(0, NOISE_STDS[severity - 1]^2) noise per pixel, then clip to [0, 1]."""
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal(images.shape, dtype=np.float32) * np.float32(NOISE_STDS[int(severity) - 1])
    return np.clip(images + noise, 0.0, 1.0)


def gaussian_blur(images: NDArray[np.float32], severity: int) -> NDArray[np.float32]:
    """Blur each channel of each image with a Gaussian of sigma BLUR_SIGMAS[severity - 1] pixels."""
    sigma = BLUR_SIGMAS[int(severity) - 1]
    out = ndimage.gaussian_filter(images, sigma=(0, 0, sigma, sigma), mode="constant", cval=0.0)
    return np.clip(out, 0.0, 1.0).astype(np.float32)


def is_identity(shift: Shift, width: int) -> bool:
    """Whether ``shift`` leaves every image of ``width`` pixels unchanged: a cyclic translation by a multiple of the
    width, or a rotation by a multiple of 360 degrees."""
    if shift.kind == "translate":
        return int(shift.intensity) % int(width) == 0
    if shift.kind == "rotate":
        return float(shift.intensity) % 360.0 == 0.0
    return False


def default_shifts(width: int, kinds: tuple[str, ...] = SHIFT_KINDS) -> list[Shift]:
    """The shift paper's grid without its identities: rotations 15..180 by 15; translations 2..width - 2 by 2;
    noise and blur severities 1..5; then the corruption suites' kinds among ``kinds``
    (:mod:`~ubench.producers.corruptions`).

    The shift paper's translation grid runs up to the image width (0-28 pixels on MNIST, its appendix B and
    Figure 1b), where a cyclic translation is the identity: ``shift_translate_28`` on 28 x 28 images (and
    ``shift_translate_8`` on 8 x 8 digits) is the clean test set, yet it counted in the per-intensity quartiles
    and was drawn as the most shifted point. ubench leaves every identity intensity out (:func:`is_identity`), so
    its translation curve stops one step short of the paper's, whose last point equals its clean accuracy.
    """
    from .corruptions import CORRUPTION_KINDS, suite_grid

    unknown = set(kinds) - set(SHIFT_KINDS) - set(CORRUPTION_KINDS)
    if unknown:
        raise ValueError(f"unknown shift kinds {sorted(unknown)}; known: {list(SHIFT_KINDS)} and the corruptions "
                         f"{list(CORRUPTION_KINDS)}")
    grid = {
        "rotate": [float(a) for a in range(15, 181, 15)],
        "translate": [float(p) for p in range(2, width + 1, 2)],  # the paper's; width itself is dropped below
        "noise": [1.0, 2.0, 3.0, 4.0, 5.0],
        "blur": [1.0, 2.0, 3.0, 4.0, 5.0],
    }
    shifts = ([Shift(kind, value) for kind in SHIFT_KINDS if kind in kinds for value in grid[kind]]
              + [Shift(kind, value) for kind in CORRUPTION_KINDS if kind in kinds for value in suite_grid(kind)])
    return [s for s in shifts if not is_identity(s, width)]


def apply_shift(images: NDArray[np.float32], shift: Shift, *, seed: int) -> NDArray[np.float32]:
    """Apply one :class:`Shift`; ``seed`` drives the noise (ignored by the deterministic shifts)."""
    if shift.kind == "rotate":
        return rotate(images, shift.intensity)
    if shift.kind == "translate":
        return translate(images, int(shift.intensity))
    if shift.kind == "noise":
        return gaussian_noise(images, int(shift.intensity), seed=seed)
    if shift.kind == "blur":
        return gaussian_blur(images, int(shift.intensity))
    from .corruptions import CORRUPTION_KINDS, corrupt

    if shift.kind in CORRUPTION_KINDS:
        return corrupt(images, shift.kind, int(shift.intensity), seed=seed)
    raise ValueError(f"unknown shift kind {shift.kind!r}; known: {list(SHIFT_KINDS)}")


def uniform_noise_images(n: int, shape: tuple[int, int, int], *, seed: int) -> NDArray[np.float32]:
    """``n`` images of i.i.d. U(0, 1) pixels: the uniform-noise OOD set."""
    return np.random.default_rng(seed).random((n, *shape), dtype=np.float32)
