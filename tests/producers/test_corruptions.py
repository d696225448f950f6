# SPDX-License-Identifier: MIT
"""The corruption suites (issue #31): Hendrycks & Dietterich's 15 kinds x 5 severities and MNIST-C's 15 kinds on
small grey (and colour) images, against closed forms where a corruption has one, and moments of the noises."""

from __future__ import annotations

import numpy as np
import pytest

from ubench.producers.corruptions import CORRUPTION_KINDS, HENDRYCKS, MNIST_C, corrupt, suite_grid
from ubench.producers.shifts import Shift, apply_shift, default_shifts


def _images(n=6, size=28, channels=1, seed=0):
    """Digit-like images: a bright square on black with some texture."""
    rng = np.random.default_rng(seed)
    x = np.zeros((n, channels, size, size), np.float32)
    q = size // 4
    x[:, :, q:3 * q, q:3 * q] = 0.8
    return np.clip(x + rng.uniform(0, 0.1, x.shape), 0, 1).astype(np.float32)


@pytest.mark.parametrize("kind", CORRUPTION_KINDS)
def test_every_kind_runs_on_small_grey_and_colour_images(kind):
    """28 x 28 and 8 x 8 grey, 32 x 32 RGB: same shape, float32 in [0, 1], reproducible for a seed, and the
    image changed."""
    for size, channels in ((28, 1), (8, 1), (32, 3)):
        x = _images(2, size, channels)
        for severity in ((1, 5) if kind in HENDRYCKS and channels == 1 else (1,)):
            a = corrupt(x, kind, severity, seed=3)
            assert a.shape == x.shape and a.dtype == np.float32 and a.min() >= 0 and a.max() <= 1
            np.testing.assert_array_equal(a, corrupt(x, kind, severity, seed=3))
            if size > 8 or severity == 5:  # zooming 8 pixels by 1.05 (zoom_blur, severity 1) leaves 8 pixels
                assert np.abs(a - x).max() > 0, (kind, size, channels, severity)
    np.testing.assert_array_equal(x, _images(2, 32, 3))  # the input is never modified


@pytest.mark.parametrize("kind", ["gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur", "zoom_blur",
                                  "fog", "brightness", "contrast", "jpeg_compression", "snow"])
def test_severity_makes_it_worse(kind):
    """The reference's severity tables grow: the mean change of severity 5 exceeds severity 1's (a table read
    backwards fails)."""
    x = _images(30)
    d = [np.abs(corrupt(x, kind, s, seed=0) - x).mean() for s in (1, 5)]
    assert d[1] > 1.3 * d[0], d


def test_closed_forms():
    """Contrast (x - mean) c + mean, brightness x + c on grey, stripe inversion, translation by 3 pixels,
    Gaussian-noise standard deviation, impulse fraction, shot-noise mean and variance."""
    x = _images(20)
    np.testing.assert_allclose(corrupt(x, "contrast", 5, seed=0),
                               np.clip((x - x.mean(axis=(2, 3), keepdims=True)) * 0.15
                                       + x.mean(axis=(2, 3), keepdims=True), 0, 1), atol=1e-6)
    np.testing.assert_allclose(corrupt(x, "brightness", 3, seed=0), np.clip(x + 0.15, 0, 1), atol=1e-6)
    np.testing.assert_allclose(corrupt(x, "mnistc_brightness", 1, seed=0), np.clip(x + 0.5, 0, 1), atol=1e-6)
    s = corrupt(x, "mnistc_stripe", 1, seed=0)
    np.testing.assert_allclose(s[..., :7], 1 - x[..., :7], atol=1e-6)
    np.testing.assert_allclose(s[..., 7:21], x[..., 7:21], atol=1e-6)
    t = corrupt(x[:1], "mnistc_translate", 1, seed=0)[0, 0]
    shifts = [(dy, dx) for dy in (-3, 3) for dx in (-3, 3)
              if np.allclose(t[5:20, 5:20], x[0, 0, 5 + dy:20 + dy, 5 + dx:20 + dx], atol=1e-5)]
    assert len(shifts) == 1
    flat = np.full((1, 1, 28, 28), 0.5, np.float32)
    big = np.repeat(flat, 200, axis=0)
    noise = corrupt(big, "gaussian_noise", 5, seed=1) - 0.5
    assert noise.std() == pytest.approx(0.10, rel=0.02)
    imp = corrupt(big, "impulse_noise", 5, seed=1)
    assert ((imp == 0) | (imp == 1)).mean() == pytest.approx(0.07, rel=0.05)
    shot = corrupt(big, "shot_noise", 5, seed=1)  # Poisson(0.5 * 50) / 50: mean 0.5, variance 0.5 / 50
    assert shot.mean() == pytest.approx(0.5, abs=2e-3) and shot.var() == pytest.approx(0.01, rel=0.03)


def test_blurs_keep_a_constant_image_and_fog_keeps_its_maximum_scale():
    flat = np.full((2, 1, 28, 28), 0.4, np.float32)
    for kind in ("defocus_blur", "zoom_blur", "motion_blur", "glass_blur"):
        np.testing.assert_allclose(corrupt(flat, kind, 3, seed=0), 0.4, atol=2 / 255, err_msg=kind)


def test_canny_finds_the_square_outline():
    x = np.zeros((1, 1, 28, 28), np.float32)
    x[:, :, 8:20, 8:20] = 1.0
    edges = corrupt(x, "mnistc_canny_edges", 1, seed=0)[0, 0]
    assert set(np.unique(edges)) == {0.0, 1.0}
    assert edges[8:20, 7:9].any() and edges[8:20, 19:21].any() and not edges[12:16, 12:16].any()
    assert not edges[:4].any()


def test_suites_as_shift_splits():
    """--shifts hendrycks gives 75 splits (15 kinds x severities 1-5), mnist-c 15 at intensity 1; names never
    collide with the paper's rotate/translate/noise/blur grids."""
    shifts = default_shifts(28, HENDRYCKS + MNIST_C + ("rotate",))
    names = [s.split_name for s in shifts]
    assert len(names) == len(set(names)) == 12 + 75 + 15
    assert {s.intensity for s in shifts if s.kind in HENDRYCKS} == {1.0, 2.0, 3.0, 4.0, 5.0}
    assert all(suite_grid(k) == [1.0] for k in MNIST_C)
    out = apply_shift(_images(3), Shift("fog", 2.0), seed=5)
    np.testing.assert_array_equal(out, corrupt(_images(3), "fog", 2, seed=5))
    with pytest.raises(ValueError, match="unknown shift kinds"):
        default_shifts(28, ("frost_bite",))


def test_shifts_option_names_suites_and_kinds():
    """--shifts expands the suite names, keeps single kinds, drops repeats and names what it does not know."""
    import click

    from ubench.producers.command import _parse_shifts

    assert _parse_shifts("rotate,hendrycks") == ("rotate", *HENDRYCKS)
    assert _parse_shifts("mnist-c,mnistc_fog,fog") == (*MNIST_C, "fog")
    assert _parse_shifts("none") == ()
    with pytest.raises(click.BadParameter, match="'snowfall'.*hendrycks"):
        _parse_shifts("snowfall")
