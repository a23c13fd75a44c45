"""Public image sets: deterministic per seed, the asked shape and range, one-line errors."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from fedad.core.errors import ConfigError, FedadError
from fedad.data.public import public_images, public_names

SHAPES = [(1, 16, 16), (3, 20, 12)]


def _check(x: np.ndarray, n: int, shape: tuple[int, int, int]) -> None:
    assert x.shape == (n, *shape) and x.dtype == np.float32
    assert np.all(np.isfinite(x)) and x.min() >= 0.0 and x.max() <= 1.0


@pytest.mark.parametrize("shape", SHAPES)
def test_procedural_is_deterministic_per_seed(shape: tuple[int, int, int]) -> None:
    a = public_images("procedural", 12, shape, seed=3)
    _check(a, 12, shape)
    np.testing.assert_array_equal(a, public_images("procedural", 12, shape, seed=3))
    assert not np.array_equal(a, public_images("procedural", 12, shape, seed=4))
    # image i depends on (seed, i) only: more images extend fewer
    np.testing.assert_array_equal(public_images("procedural", 5, shape, seed=3), a[:5])


def test_procedural_images_vary() -> None:
    x = public_images("procedural", 30, (3, 24, 24), seed=0)
    assert np.all(x.reshape(30, -1).std(axis=1) > 0.01)  # no blank images
    assert len({x[i].tobytes() for i in range(30)}) == 30
    rgb = x.reshape(30, 3, -1)
    assert np.abs(rgb[:, 0] - rgb[:, 1]).max() > 0.1  # colour, not grey in 3 channels


def test_any_size_including_tiny_and_non_square() -> None:
    _check(public_images("procedural", 2, (1, 1, 1), seed=0), 2, (1, 1, 1))
    _check(public_images("procedural", 2, (3, 7, 50), seed=0), 2, (3, 7, 50))
    assert public_images("procedural", 0, (1, 8, 8), seed=0).shape == (0, 1, 8, 8)


@pytest.mark.skipif(importlib.util.find_spec("skimage") is None, reason="needs scikit-image")
@pytest.mark.parametrize("shape", SHAPES)
def test_skimage_crops(shape: tuple[int, int, int]) -> None:
    a = public_images("skimage", 6, shape, seed=1)
    _check(a, 6, shape)
    np.testing.assert_array_equal(a, public_images("skimage", 6, shape, seed=1))
    assert not np.array_equal(a, public_images("skimage", 6, shape, seed=2))


def test_registered_image_set_converted_to_the_shape() -> None:
    names = public_names()
    assert names[:2] == ["procedural", "skimage"] and "synth_img" in names
    assert "synth_vec" not in names
    grey = public_images("synth_img", 7, (1, 10, 10), seed=0)
    _check(grey, 7, (1, 10, 10))
    rgb = public_images("synth_img", 7, (3, 10, 10), seed=0)
    _check(rgb, 7, (3, 10, 10))
    np.testing.assert_allclose(rgb, np.repeat(grey, 3, axis=1))  # same draw, replicated
    np.testing.assert_array_equal(grey, public_images("synth_img", 7, (1, 10, 10), seed=0))


@pytest.mark.parametrize(
    ("name", "n", "shape", "seed", "match"),
    [
        ("nope", 1, (1, 8, 8), 0, "unknown public image set 'nope'.*procedural, skimage"),
        ("synth_vec", 1, (1, 8, 8), 0, "holds vector data, not images"),
        ("procedural", 1, (2, 8, 8), 0, "1 \\(grey\\) or 3 \\(RGB\\) channels"),
        ("procedural", 1, (1, 0, 8), 0, "height and width"),
        ("procedural", 1, (1, 8), 0, "\\(channels, height, width\\)"),
        ("procedural", -1, (1, 8, 8), 0, "cannot make -1"),
        ("procedural", 1 << 20, (3, 1024, 1024), 0, "cannot make"),
        ("procedural", 1, (1, 8, 8), -2, "non-negative"),
    ],
)
def test_one_line_errors(name: str, n: int, shape: tuple[int, ...], seed: int, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as e:
        public_images(name, n, shape, seed)  # type: ignore[arg-type]
    assert "\n" not in str(e.value)
    assert isinstance(e.value, FedadError)
