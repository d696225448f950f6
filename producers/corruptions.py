# SPDX-License-Identifier: MIT
r"""The corruption suites of the shift benchmark (issue #31): Hendrycks & Dietterich's 15 corruptions at 5
severities, and MNIST-C's 15 kinds (Mu & Gilmer 2019) for MNIST-like data. numpy and scipy (Pillow for JPEG and
pixelation); images are float32 (n, channels, height, width) in [0, 1], of any size and channel count.

Why not ``imagecorruptions`` (PyPI): it refuses images below 32 x 32 pixels (MNIST is 28 x 28, digits 8 x 8),
needs OpenCV and Wand/ImageMagick through the removed ``pkg_resources``, and imports nothing here. So ubench
implements both suites from their reference code, function by function:

* ``hendrycks`` — ``hendrycks/robustness`` ``ImageNet-C/create_c/make_cifar_c.py`` (CIFAR-10-C, the parameters for
  small images), the 15 corruptions of the benchmark (Gaussian, shot and impulse noise; defocus, glass, motion and
  zoom blur; snow, frost, fog; brightness, contrast, elastic, pixelate, JPEG), severities 1-5 as ``shift_intensity``.
* ``mnist-c`` — ``google-research/mnist-c`` ``corruptions.py`` with each kind at the severity the benchmark uses
  (the function defaults there), kinds named ``mnistc_<kind>`` (``shift_intensity`` 1: MNIST-C has one level),
  so they never collide with the Hendrycks kinds or ubench's ``rotate``/``translate`` grids.

Sizes: the references hard-code 32 (CIFAR) or 28 (MNIST) pixels; here every such constant is the image's own size
(plasma fractals are drawn at the next power of two and cropped, the MNIST-C lines are scaled from 0..27 to the
image). Deviations, each where the reference calls a tool ubench does not depend on: OpenCV's ``GaussianBlur``,
``filter2D`` and ``warpAffine`` are the same operations in scipy (``BORDER_REFLECT_101`` = ``mode="mirror"``);
ImageMagick's motion blur (through Wand) is its kernel (``MotionBlurImage``: a one-sided Gaussian of width
``2 ceil(radius) + 1`` along the angle, edge pixels repeated) applied in float, without the PNG round trip;
scikit-image's ``random_noise``, ``AffineTransform``/``warp`` and ``canny`` are re-implemented (Canny: Gaussian
sigma 1, Sobel gradients, non-maximum suppression, hysteresis at 0.1 and 0.2 as scikit-image's defaults); frost
blends a procedural ice texture (a thresholded plasma fractal) instead of the reference's frost photographs, which
are not redistributed. Randomness comes from one seeded numpy generator per call; the reference's global
``np.random`` draws follow the same distributions, in another order.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray
from scipy import ndimage

__all__ = ["HENDRYCKS", "MNIST_C", "SUITES", "CORRUPTION_KINDS", "corrupt", "suite_kinds", "suite_grid"]

#: Hendrycks & Dietterich's 15 benchmark corruptions, in the reference's order.
HENDRYCKS = ("gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur", "glass_blur", "motion_blur",
             "zoom_blur", "snow", "frost", "fog", "brightness", "contrast", "elastic_transform", "pixelate",
             "jpeg_compression")
#: MNIST-C's 15 corruptions (its ``CORRUPTIONS`` without ``identity``), as ubench's kind names.
MNIST_C = tuple(f"mnistc_{k}" for k in ("shot_noise", "impulse_noise", "glass_blur", "motion_blur", "shear", "scale",
                                        "rotate", "brightness", "translate", "stripe", "fog", "spatter",
                                        "dotted_line", "zigzag", "canny_edges"))
SUITES = {"hendrycks": HENDRYCKS, "mnist-c": MNIST_C}
CORRUPTION_KINDS = HENDRYCKS + MNIST_C


def suite_kinds(name: str) -> tuple[str, ...]:
    """The kinds of a suite (``hendrycks`` or ``mnist-c``)."""
    return SUITES[name]


def suite_grid(kind: str) -> list[float]:
    """The intensities of a corruption kind: severities 1-5 (Hendrycks), 1 (MNIST-C)."""
    return [1.0] if kind.startswith("mnistc_") else [1.0, 2.0, 3.0, 4.0, 5.0]


# -- helpers (per image: (h, w, c) float64 in [0, 1]) ------------------------------------------------------------
def _gaussian(x: NDArray, sigma: float, mode: str = "nearest", truncate: float = 4.0) -> NDArray:
    """scikit-image's ``filters.gaussian`` (per channel, ``mode="nearest"``, ``truncate=4``)."""
    sig = (sigma, sigma) + (0,) * (x.ndim - 2)
    return ndimage.gaussian_filter(x, sigma=sig, mode=mode, truncate=truncate)


def _cv2_gaussian_kernel(ksize: int, sigma: float) -> NDArray:
    r = np.arange(ksize) - (ksize - 1) / 2
    k = np.exp(-(r ** 2) / (2 * sigma ** 2))
    return k / k.sum()


def _disk(radius: float, alias_blur: float) -> NDArray:
    """The reference's anti-aliased disk kernel (its ``cv2.GaussianBlur`` of the aliased disk, reflect-101)."""
    if radius <= 8:
        ax, ksize = np.arange(-8, 9), 3
    else:
        ax, ksize = np.arange(-radius, radius + 1), 5
    xx, yy = np.meshgrid(ax, ax)
    d = ((xx ** 2 + yy ** 2) <= radius ** 2).astype(np.float64)
    d /= d.sum()
    g = _cv2_gaussian_kernel(ksize, alias_blur)
    d = ndimage.correlate1d(d, g, axis=0, mode="mirror")
    return ndimage.correlate1d(d, g, axis=1, mode="mirror")


def _plasma_fractal(size: int, wibbledecay: float, rng: np.random.Generator, scale: float = 1.0) -> NDArray:
    """The reference's diamond-square heightmap in [0, 1], drawn at the power of two at or above ``size * scale``
    and cropped to ``size`` (CIFAR-10-C: 32 for 32 pixels, scale 1; MNIST-C: 256 for 28, scale 256 / 28)."""
    mapsize = 1 << max(1, (int(math.ceil(size * scale)) - 1).bit_length())
    a = np.empty((mapsize, mapsize))
    a[0, 0] = 0.0
    step, wibble = mapsize, 100.0

    def wibbled(arr):
        return arr / 4 + wibble * rng.uniform(-wibble, wibble, arr.shape)

    while step >= 2:
        corner = a[0:mapsize:step, 0:mapsize:step]
        sq = corner + np.roll(corner, -1, axis=0)
        sq += np.roll(sq, -1, axis=1)
        a[step // 2:mapsize:step, step // 2:mapsize:step] = wibbled(sq)
        dr = a[step // 2:mapsize:step, step // 2:mapsize:step]
        ul = a[0:mapsize:step, 0:mapsize:step]
        a[0:mapsize:step, step // 2:mapsize:step] = wibbled(dr + np.roll(dr, 1, axis=0) + ul + np.roll(ul, -1, axis=1))
        a[step // 2:mapsize:step, 0:mapsize:step] = wibbled(dr + np.roll(dr, 1, axis=1) + ul + np.roll(ul, -1, axis=0))
        step //= 2
        wibble /= wibbledecay
    a -= a.min()
    return (a / a.max())[:size, :size]


def _clipped_zoom(x: NDArray, factor: float) -> NDArray:
    h = x.shape[0]
    ch = int(np.ceil(h / float(factor)))
    top = (h - ch) // 2
    zoomed = ndimage.zoom(x[top:top + ch, top:top + ch], (factor, factor) + (1,) * (x.ndim - 2), order=1)
    trim = (zoomed.shape[0] - h) // 2
    return zoomed[trim:trim + h, trim:trim + h]


def _motion_blur(x: NDArray, radius: float, sigma: float, angle: float) -> NDArray:
    """ImageMagick's ``MotionBlurImage``: a one-sided Gaussian kernel of ``2 ceil(radius) + 1`` taps along
    ``angle`` degrees, offsets rounded to pixels, edge pixels repeated."""
    width = int(2 * math.ceil(radius) + 1)
    i = np.arange(width)
    k = np.exp(-(i ** 2) / (2.0 * sigma ** 2))
    k /= k.sum()
    t = math.radians(angle)
    ox = np.ceil(i * math.cos(t) - 0.5).astype(int)
    oy = np.ceil(i * math.sin(t) - 0.5).astype(int)
    h, w = x.shape[:2]
    rows, cols = np.arange(h), np.arange(w)
    out = np.zeros_like(x)
    for weight, dx, dy in zip(k, ox, oy):
        out += weight * x[np.clip(rows + dy, 0, h - 1)][:, np.clip(cols + dx, 0, w - 1)]
    return out


def _affine_warp(x: NDArray, inverse: NDArray, mode: str, order: int = 1) -> NDArray:
    """``out[r, c] = x[inverse @ (c, r, 1)]`` (x, y = column, row), bilinear, per channel."""
    m = np.array([[inverse[1, 1], inverse[1, 0]], [inverse[0, 1], inverse[0, 0]]])  # (row, col) order
    off = np.array([inverse[1, 2], inverse[0, 2]])
    out = np.empty_like(x)
    for ch in range(x.shape[2]):
        out[:, :, ch] = ndimage.affine_transform(x[:, :, ch], m, offset=off, order=order, mode=mode, cval=0.0)
    return out


def _affine_from_points(src: NDArray, dst: NDArray) -> NDArray:
    """OpenCV's ``getAffineTransform``: the 2 x 3 map taking three ``src`` points (x, y) to ``dst``."""
    a = np.hstack([src, np.ones((3, 1))])
    return np.linalg.solve(a, dst).T


def _line(size: int, c0: float, r0: float, c1: float, r1: float) -> NDArray:
    """MNIST-C's ``line_from_points`` on a ``size`` grid: brightness ``log(1 - d / 2.3) + 1`` at distance d from
    the line through (c0, r0), (c1, r1), between columns floor(c0) and ceil(c1)."""
    if c1 == c0:
        return np.zeros((size, size))
    cc, rr = np.meshgrid(np.linspace(0, size - 1, size), np.linspace(0, size - 1, size), sparse=True)
    m = (r1 - r0) / (c1 - c0)
    dist = np.clip(np.abs(rr - (m * (cc - c0) + r0)), 0, 2.3 - 1e-10)
    out = np.clip(np.log(1 - dist / 2.3) + 1, 0, 1)
    out[:, :int(np.floor(c0))] = 0
    out[:, int(np.ceil(c1)):] = 0
    return np.clip(out, 0, 1)


def _salt_pepper(x: NDArray, amount: float, rng: np.random.Generator) -> NDArray:
    """scikit-image's ``random_noise(mode="s&p", amount)``: a fraction ``amount`` of the values set to 0 or 1,
    half each."""
    out = x.copy()
    flipped = rng.random(x.shape) < amount
    salted = rng.random(x.shape) < 0.5
    out[flipped & salted] = 1.0
    out[flipped & ~salted] = 0.0
    return out


def _glass(x: NDArray, sigma: float, delta: int, iterations: int, rng: np.random.Generator, coin: bool
           ) -> NDArray:
    """Glass blur of a batch (n, h, w, c): blur, quantise to uint8, swap each pixel with a random neighbour (the
    reference's nested loops from the bottom-right, ``randint(-delta, delta)``: offsets in [-delta, delta)), blur
    again. MNIST-C flips a coin before each swap (``coin``). The loops run over positions, every image at once."""
    x = np.floor(np.stack([_gaussian(img, sigma) for img in x]) * 255) / 255
    n, h, w = x.shape[:3]
    every = np.arange(n)
    for _ in range(iterations):
        for r in range(h - delta, delta, -1):
            for c in range(w - delta, delta, -1):
                d = rng.integers(-delta, delta, size=(2, n))
                idx = every[rng.random(n) < 0.5] if coin else every
                r2, c2 = r + d[1, idx], c + d[0, idx]
                here, there = x[idx, r].copy(), x[idx, r2, c2].copy()
                x[idx, r2, c2] = here[:, c]
                x[idx, r, c] = there
    return np.clip(np.stack([_gaussian(img, sigma) for img in x]), 0, 1)


def _grey(x: NDArray) -> NDArray:
    """OpenCV's ``COLOR_RGB2GRAY`` (0.299 R + 0.587 G + 0.114 B); a grey image as it is."""
    return (x @ np.array([0.299, 0.587, 0.114]))[:, :, None] if x.shape[2] == 3 else x


def _canny(x: NDArray, sigma: float = 1.0, low: float = 0.1, high: float = 0.2) -> NDArray:
    """Canny edges of a grey image (scikit-image's defaults): Gaussian, Sobel, thinning, hysteresis."""
    g = ndimage.gaussian_filter(x, sigma, mode="constant")
    gx, gy = ndimage.sobel(g, axis=1), ndimage.sobel(g, axis=0)
    mag = np.hypot(gx, gy)
    angle = (np.rad2deg(np.arctan2(gy, gx)) + 180) % 180
    q = (np.round(angle / 45) % 4).astype(int)  # 0: horizontal gradient, 1: 45, 2: vertical, 3: 135
    shifts = {0: (0, 1), 1: (1, 1), 2: (1, 0), 3: (1, -1)}
    keep = np.zeros_like(mag, dtype=bool)
    for d, (dr, dc) in shifts.items():
        a = np.roll(mag, (dr, dc), axis=(0, 1))
        b = np.roll(mag, (-dr, -dc), axis=(0, 1))
        keep |= (q == d) & (mag >= a) & (mag >= b)
    thin = np.where(keep, mag, 0.0)
    thin[[0, -1], :] = 0
    thin[:, [0, -1]] = 0
    strong, weak = thin >= high, thin >= low
    labels, n = ndimage.label(weak, structure=np.ones((3, 3)))
    good = np.zeros(n + 1, dtype=bool)
    good[np.unique(labels[strong])] = True
    good[0] = False
    return good[labels].astype(np.float64)


# -- Hendrycks & Dietterich (CIFAR-10-C parameters) ----------------------------------------------------------------
def _h_gaussian_noise(x, s, rng):
    return np.clip(x + rng.normal(size=x.shape, scale=[0.04, 0.06, .08, .09, .10][s - 1]), 0, 1)


def _h_shot_noise(x, s, rng):
    c = [500, 250, 100, 75, 50][s - 1]
    return np.clip(rng.poisson(x * c) / c, 0, 1)


def _h_impulse_noise(x, s, rng):
    return _salt_pepper(x, [.01, .02, .03, .05, .07][s - 1], rng)


def _h_defocus_blur(x, s, rng):
    radius, alias = [(0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1)][s - 1]
    k = _disk(radius, alias)
    return np.clip(np.stack([ndimage.correlate(x[:, :, ch], k, mode="mirror") for ch in range(x.shape[2])], 2), 0, 1)


def _h_glass_blur(x, s, rng):  # a batch (n, h, w, c): see corrupt()
    sigma, delta, it = [(0.05, 1, 1), (0.25, 1, 1), (0.4, 1, 1), (0.25, 1, 2), (0.4, 1, 2)][s - 1]
    return _glass(x, sigma, delta, it, rng, coin=False)


def _h_motion_blur(x, s, rng):
    radius, sigma = [(6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5)][s - 1]
    return np.clip(_motion_blur(x, radius, sigma, rng.uniform(-45, 45)), 0, 1)


def _h_zoom_blur(x, s, rng):
    factors = [np.arange(1, 1.06, 0.01), np.arange(1, 1.11, 0.01), np.arange(1, 1.16, 0.01),
               np.arange(1, 1.21, 0.01), np.arange(1, 1.26, 0.01)][s - 1]
    out = sum(_clipped_zoom(x, f) for f in factors)
    return np.clip((x + out) / (len(factors) + 1), 0, 1)


def _snow(x, c, rng, grey_weight):
    h = x.shape[0]
    layer = rng.normal(size=(h, h), loc=c[0], scale=c[1])
    layer = _clipped_zoom(layer, c[2])
    layer[layer < c[3]] = 0
    layer = np.floor(np.clip(layer, 0, 1) * 255) / 255  # the reference's uint8 PNG of the layer
    layer = _motion_blur(layer, c[4], c[5], rng.uniform(-135, -45))[:, :, None]
    x = c[6] * x + (1 - c[6]) * np.maximum(x, grey_weight(x) * 1.5 + 0.5)
    return np.clip(x + layer + np.rot90(layer, k=2), 0, 1)


def _h_snow(x, s, rng):
    c = [(0.1, 0.2, 1, 0.6, 8, 3, 0.95), (0.1, 0.2, 1, 0.5, 10, 4, 0.9), (0.15, 0.3, 1.75, 0.55, 10, 4, 0.9),
         (0.25, 0.3, 2.25, 0.6, 12, 6, 0.85), (0.3, 0.3, 1.25, 0.65, 14, 12, 0.8)][s - 1]
    return _snow(x, c, rng, _grey)


def _h_frost(x, s, rng):
    c = [(1, 0.2), (1, 0.3), (0.9, 0.4), (0.85, 0.4), (0.75, 0.45)][s - 1]
    h = x.shape[0]
    ice = _plasma_fractal(h, 1.5, rng)
    ice = np.clip((ice - 0.45) * 2.5, 0, 1) ** 0.7  # crystalline bright patches over dark gaps
    return np.clip(c[0] * x + c[1] * ice[:, :, None], 0, 1)


def _h_fog(x, s, rng):
    strength, decay = [(.2, 3), (.5, 3), (0.75, 2.5), (1, 2), (1.5, 1.75)][s - 1]
    top = x.max()
    x = x + strength * _plasma_fractal(x.shape[0], decay, rng)[:, :, None]
    return np.clip(x * top / (top + strength), 0, 1)


def _h_brightness(x, s, rng):
    """HSV value + c, hue and saturation kept: the RGB vector scaled to the new value (grey: x + c)."""
    c = [.05, .1, .15, .2, .3][s - 1]
    v = x.max(axis=2, keepdims=True)
    v_new = np.clip(v + c, 0, 1)
    scaled = np.where(v > 0, x * v_new / np.where(v > 0, v, 1), v_new)
    return np.clip(scaled, 0, 1)


def _h_contrast(x, s, rng):
    c = [.75, .5, .4, .3, 0.15][s - 1]
    means = x.mean(axis=(0, 1), keepdims=True)
    return np.clip((x - means) * c + means, 0, 1)


def _elastic(x, c, rng, border: str):
    h, w = x.shape[:2]
    center = np.float32([h, w]) // 2
    square = min(h, w) // 3
    pts1 = np.float32([center + square, [center[0] + square, center[1] - square], center - square])
    pts2 = pts1 + rng.uniform(-c[2], c[2], size=pts1.shape).astype(np.float32)
    forward = np.vstack([_affine_from_points(pts1, pts2), [0, 0, 1]])
    x = _affine_warp(x, np.linalg.inv(forward), mode=border)
    dx = _gaussian(rng.uniform(-1, 1, size=(h, w)), c[1], mode="reflect", truncate=3) * c[0]
    dy = _gaussian(rng.uniform(-1, 1, size=(h, w)), c[1], mode="reflect", truncate=3) * c[0]
    yy, xx = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    mode = "reflect" if border == "mirror" else "constant"
    out = np.stack([ndimage.map_coordinates(x[:, :, ch], [yy + dy, xx + dx], order=1, mode=mode)
                    for ch in range(x.shape[2])], 2)
    return np.clip(out, 0, 1)


def _h_elastic_transform(x, s, rng):
    n = x.shape[0]
    c = [(n * 0, n * 0, n * 0.08), (n * 0.05, n * 0.2, n * 0.07), (n * 0.08, n * 0.06, n * 0.06),
         (n * 0.1, n * 0.04, n * 0.05), (n * 0.1, n * 0.03, n * 0.03)][s - 1]
    return _elastic(x, c, rng, border="mirror")


def _pil(x: NDArray):
    from PIL import Image

    u8 = np.uint8(np.round(np.clip(x, 0, 1) * 255))  # the reference's images are uint8 already
    return Image.fromarray(u8[:, :, 0] if x.shape[2] == 1 else u8)


def _from_pil(img, channels: int) -> NDArray:
    a = np.asarray(img, dtype=np.float64) / 255.0
    return a[:, :, None] if a.ndim == 2 else a[:, :, :channels]


def _pixelate(x, c):
    from PIL import Image

    h, w = x.shape[:2]
    img = _pil(x).resize((max(1, int(w * c)), max(1, int(h * c))), Image.BOX).resize((w, h), Image.BOX)
    return _from_pil(img, x.shape[2])


def _jpeg(x, quality):
    from PIL import Image

    buf = io.BytesIO()
    _pil(x).save(buf, "JPEG", quality=quality)
    return _from_pil(Image.open(buf), x.shape[2])


def _h_pixelate(x, s, rng):
    return _pixelate(x, [0.95, 0.9, 0.85, 0.75, 0.65][s - 1])


def _h_jpeg_compression(x, s, rng):
    return _jpeg(x, [80, 65, 58, 50, 40][s - 1])


# -- MNIST-C (each at the severity the benchmark uses) -------------------------------------------------------------
def _affine_about_centre(x, matrix):
    """scikit-image ``warp(x, inverse_map=AffineTransform(matrix, translation keeping the centre))``: the output
    pixel at (col, row) samples the input at ``matrix @ (col, row)`` about the image centre, zero outside."""
    n = x.shape[0]
    centre = (n - 1) / 2.0  # 13.5 on 28 x 28
    t = centre * (1 - matrix.sum(axis=1))
    inverse = np.array([[matrix[0, 0], matrix[0, 1], t[0]], [matrix[1, 0], matrix[1, 1], t[1]], [0, 0, 1]])
    return np.clip(_affine_warp(x, inverse, mode="constant"), 0, 1)


def _m_shot_noise(x, rng):
    return np.clip(rng.poisson(x * 3) / 3.0, 0, 1)  # severity 5


def _m_impulse_noise(x, rng):
    return _salt_pepper(x, 0.17, rng)  # severity 4


def _m_glass_blur(x, rng):  # a batch (n, h, w, c): see corrupt()
    return _glass(x, 0.7, 1, 2, rng, coin=True)  # severity 1


def _m_motion_blur(x, rng):
    return np.clip(_motion_blur(x, 10, 3, rng.uniform(-45, 45)), 0, 1)  # severity 1


def _m_shear(x, rng):
    c = 0.4 * rng.choice([-1, 1])  # severity 2; skimage's shear angle: x' = x - sin(c) y, y' = cos(c) y
    return _affine_about_centre(x, np.array([[1.0, -math.sin(c)], [0.0, math.cos(c)]]))


def _m_scale(x, rng):
    return _affine_about_centre(x, np.diag([1 / .7, 1 / .7]))  # severity 3


def _m_rotate(x, rng):
    c = 0.4 * rng.choice([-1, 1])  # severity 2, radians
    return _affine_about_centre(x, np.array([[math.cos(c), -math.sin(c)], [math.sin(c), math.cos(c)]]))


def _m_brightness(x, rng):
    return np.clip(x + 0.5, 0, 1)  # severity 5: grey -> HSV value + 0.5 -> grey


def _m_translate(x, rng):
    dx, dy = 3 * rng.choice([-1, 1], 2)  # severity 3; output (c, r) samples input (c + dx, r + dy)
    inverse = np.array([[1.0, 0.0, dx], [0.0, 1.0, dy], [0, 0, 1]])
    return np.clip(_affine_warp(x, inverse, mode="constant"), 0, 1)


def _m_stripe(x, rng):
    n = x.shape[1]
    out = x.copy()
    left, right = round(n * 7 / 28), round(n * 21 / 28)
    out[:, :left] = 1 - out[:, :left]
    out[:, right:] = 1 - out[:, right:]
    return out


def _m_fog(x, rng):
    top = x.max()
    x = x + 3.0 * _plasma_fractal(x.shape[0], 1.4, rng, scale=256 / 28)[:, :, None]  # severity 5
    return np.clip(x * top / (top + 3.0), 0, 1)


def _m_spatter(x, rng):
    loc, scale, sigma, threshold, blur = 0.65, 0.3, 1, 0.65, 1.5  # severity 4 (mud)
    liquid = _gaussian(rng.normal(size=x.shape, loc=loc, scale=scale), sigma)
    liquid[liquid < threshold] = 0
    m = _gaussian(np.where(liquid > threshold, 1.0, 0.0), blur)
    m[m < 0.8] = 0
    return np.clip(x * (1 - m) + 63 / 255.0 * m, 0, 1)


def _scaled(n: int, v: float) -> float:
    return v * (n - 1) / 27.0


def _m_dotted_line(x, rng):
    n = x.shape[0]
    r0, r1 = rng.integers(0, 27, size=2)
    line = _line(n, 0, _scaled(n, r0), n - 1, _scaled(n, r1))
    edges = np.round(np.arange(0, 30, 2) * n / 28).astype(int)
    for i in range(1, len(edges), 2):
        line[:, edges[i - 1]:edges[i]] = 0
    return np.clip(x + line[:, :, None], 0, 1)


def _m_zigzag(x, rng):
    n = x.shape[0]
    a = b = 2.0
    c0, c1 = 2, 25
    r0 = int(rng.integers(0, 27))
    r1 = r0 + int(rng.integers(-5, 5))
    theta = np.arctan((r1 - r0) / (c1 - c0))
    d = (c1 - c0) / np.cos(theta)
    points = [(0.0, 0.0)]
    r_i = 0.0
    for i in range(int((d - a) // (2 * a)) + 1):
        r_i = (-1) ** i * b
        points.append(((2 * i + 1) * a, r_i))
    top = (2 * a) * (d // (2 * a))
    if d != top:
        points.append((d, r_i / (2 * (d - top))))
    rot = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
    cs, rs = rot @ np.array(points).T
    cs, rs = _scaled(n, 1) * (cs + c0), _scaled(n, 1) * (rs + r0)
    out = x[:, :, 0].copy()
    for i in range(1, len(cs)):
        out = np.clip(out + _line(n, cs[i - 1], rs[i - 1], cs[i], rs[i]), 0, 1)
    return out[:, :, None].repeat(x.shape[2], axis=2)


def _m_canny_edges(x, rng):
    return np.repeat(_canny(_grey(x)[:, :, 0])[:, :, None], x.shape[2], axis=2)


_HENDRYCKS_FNS: dict[str, Callable] = {k: globals()[f"_h_{k}"] for k in HENDRYCKS}
_MNIST_C_FNS: dict[str, Callable] = {k: globals()[f"_m_{k.removeprefix('mnistc_')}"] for k in MNIST_C}
#: Kinds whose function takes the whole batch (n, h, w, c): the glass blurs' pixel loops run over positions.
_BATCHED = frozenset({"glass_blur", "mnistc_glass_blur"})


def corrupt(images: NDArray[np.float32], kind: str, severity: int = 1, *, seed: int) -> NDArray[np.float32]:
    """``images`` (n, channels, height, width) in [0, 1] under corruption ``kind`` at ``severity`` (1-5 for the
    Hendrycks kinds; the MNIST-C kinds have their one level and take 1), seeded; a new float32 array in [0, 1]."""
    if kind in _HENDRYCKS_FNS:
        if int(severity) not in range(1, 6):
            raise ValueError(f"{kind}: severity must be 1-5; got {severity}")
        fn = _HENDRYCKS_FNS[kind]
        call = lambda img, rng: fn(img, int(severity), rng)  # noqa: E731
    elif kind in _MNIST_C_FNS:
        if int(severity) != 1:
            raise ValueError(f"{kind}: MNIST-C kinds have one level (1); got {severity}")
        fn = _MNIST_C_FNS[kind]
        call = lambda img, rng: fn(img, rng)  # noqa: E731
    else:
        raise ValueError(f"unknown corruption {kind!r}; known: {', '.join(CORRUPTION_KINDS)}")
    if images.ndim != 4 or images.shape[2] != images.shape[3]:
        raise ValueError(f"corruptions need square images (n, channels, h, h); got shape {images.shape}")
    rng = np.random.default_rng(seed)
    if kind in _BATCHED:
        batch = call(np.transpose(images, (0, 2, 3, 1)).astype(np.float64), rng)
        return np.clip(np.transpose(batch, (0, 3, 1, 2)), 0.0, 1.0).astype(np.float32)
    out = np.empty_like(images, dtype=np.float32)
    for i, img in enumerate(images):
        out[i] = np.transpose(call(np.transpose(img, (1, 2, 0)).astype(np.float64), rng), (2, 0, 1))
    return np.clip(out, 0.0, 1.0)
