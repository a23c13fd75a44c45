"""Public (auxiliary) image sets for the server: data unrelated to the clients'.

Methods that distil, calibrate or build prototypes on the server need images that are not
the clients' data. :func:`public_images` gives ``n`` of them as ``float32``
``(n, C, H, W)`` in [0, 1], deterministic per ``seed``:

* ``"procedural"``: generated here, no files: random shapes (ellipses, rectangles,
  triangles on plain or graded backgrounds), smooth multi-octave noise, and sinusoidal
  gratings and plaids. Any size, grey (``C = 1``) or RGB (``C = 3``). Image ``i`` depends
  only on ``(seed, i)``, so a larger ``n`` extends a smaller one.
* ``"skimage"``: random crops (a quarter to all of the shorter side, flipped at random) of
  the real photographs and scans that scikit-image ships inside its package (no download),
  resized to the requested shape. Needs scikit-image (the ``pretrained`` extra).
* any image data set of fedad's data registry (``fashion_mnist``, ``cifar10``, ...):
  ``n`` images drawn without replacement (with replacement only if it holds fewer) from
  its training split, resized and converted to the requested channels. Do not name the
  clients' own data set here: the point of a public set is that it is not theirs.

Channels convert as: grey to RGB by replication, RGB to grey by luminance
(0.2125 R + 0.7154 G + 0.0721 B, scikit-image's weights).
"""

from __future__ import annotations

import importlib.util
import math
from functools import cache, lru_cache

import numpy as np

from fedad.core.errors import ConfigError
from fedad.core.types import GraphSet
from fedad.data.registry import dataset_info, list_datasets, load_dataset, normalize_name

__all__ = ["MAX_PIXELS", "public_images", "public_names"]

BUILTIN = ("procedural", "skimage")
MAX_SIDE = 4096
MAX_PIXELS = 1 << 30
"""Largest ``n * C * H * W`` one call may ask for (4 GiB of float32)."""

LUMA = np.array([0.2125, 0.7154, 0.0721], dtype=np.float32)

# skimage.data functions whose files scikit-image ships in its wheel (never downloaded).
SKIMAGE_IMAGES: dict[str, str] = {
    "astronaut": "astronaut.png",
    "brick": "brick.png",
    "camera": "camera.png",
    "cell": "cell.png",
    "chelsea": "chelsea.png",
    "clock": "clock_motion.png",
    "coffee": "coffee.png",
    "coins": "coins.png",
    "colorwheel": "color.png",
    "grass": "grass.png",
    "gravel": "gravel.png",
    "horse": "horse.png",
    "hubble_deep_field": "hubble_deep_field.jpg",
    "immunohistochemistry": "ihc.png",
    "logo": "logo.png",
    "microaneurysms": "microaneurysms.png",
    "moon": "moon.png",
    "page": "page.png",
    "retina": "retina.jpg",
    "rocket": "rocket.jpg",
    "shepp_logan_phantom": "phantom.png",
    "text": "text.png",
}


def public_names() -> list[str]:
    """Names :func:`public_images` accepts: the built-in sets, then registered image sets."""
    registered = [n for n, _ in list_datasets() if dataset_info(n).kind == "image"]
    return [*BUILTIN, *(n for n in registered if n not in BUILTIN)]


def public_images(name: str, n: int, shape: tuple[int, int, int], seed: int = 0) -> np.ndarray:
    """``n`` public images of ``shape`` ``(C, H, W)``, ``float32`` in [0, 1], seeded.

    ``C`` is 1 (grey) or 3 (RGB). Unknown names and impossible shapes raise a one-line
    :class:`~fedad.core.errors.ConfigError`; a registered data set whose files are missing
    raises its loader's one-line error.
    """
    c, h, w = _check(name, n, shape, seed)
    if name == "procedural":
        return _procedural(n, c, h, w, seed)
    if name == "skimage":
        return _skimage(n, c, h, w, seed)
    return _registered(name, n, c, h, w, seed)


def _check(name: str, n: int, shape: tuple[int, int, int], seed: int) -> tuple[int, int, int]:
    if name not in BUILTIN:
        if normalize_name(name) not in {n for n, _ in list_datasets()}:
            known = ", ".join(public_names())
            raise ConfigError(f"unknown public image set '{name}'", f"known: {known}")
        kind = dataset_info(name).kind
        if kind != "image":
            raise ConfigError(
                f"data set '{name}' holds {kind} data, not images",
                f"public sets are images; known: {', '.join(public_names())}",
            )
    if len(shape) != 3 or not all(isinstance(s, int | np.integer) for s in shape):
        raise ConfigError(f"public image shape must be (channels, height, width), got {shape}")
    c, h, w = (int(s) for s in shape)
    if c not in (1, 3):
        raise ConfigError(f"public images have 1 (grey) or 3 (RGB) channels, not {c}")
    if not (1 <= h <= MAX_SIDE and 1 <= w <= MAX_SIDE):
        raise ConfigError(f"public image height and width must be in 1..{MAX_SIDE}, got {h}x{w}")
    if not isinstance(n, int | np.integer) or n < 0 or int(n) * c * h * w > MAX_PIXELS:
        raise ConfigError(
            f"cannot make {n} public images of {c}x{h}x{w}",
            f"n must be >= 0 and n*C*H*W at most {MAX_PIXELS}",
        )
    if not isinstance(seed, int | np.integer) or seed < 0:
        raise ConfigError(f"public image seed must be a non-negative integer, got {seed!r}")
    return c, h, w


# -- channel and size conversion --------------------------------------------------------------


def _to_channels(x: np.ndarray, c: int) -> np.ndarray:
    """``(N, C0, H, W)`` with C0 in {1, 3} -> ``(N, c, H, W)``."""
    c0 = x.shape[1]
    if c0 == c:
        return x
    if c0 == 1:
        return np.repeat(x, c, axis=1)
    if c0 == 3 and c == 1:
        return np.asarray(np.einsum("nchw,c->nhw", x, LUMA)[:, None], dtype=np.float32)
    raise ConfigError(f"cannot convert images with {c0} channels to {c}")


def _resize(x: np.ndarray, h: int, w: int) -> np.ndarray:
    """Bilinear resize of ``(N, C, H0, W0)`` to ``(N, C, h, w)``, antialiased when shrinking."""
    if x.shape[2:] == (h, w):
        return x.astype(np.float32, copy=False)
    import torch
    import torch.nn.functional as F

    down = h < x.shape[2] or w < x.shape[3]
    with torch.no_grad():
        t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
        out = F.interpolate(t, size=(h, w), mode="bilinear", align_corners=False, antialias=down)
    return np.asarray(np.clip(out.numpy(), 0.0, 1.0))


# -- procedural ---------------------------------------------------------------------------------


def _procedural(n: int, c: int, h: int, w: int, seed: int) -> np.ndarray:
    out = np.empty((n, c, h, w), dtype=np.float32)
    yy, xx = np.meshgrid(
        (np.arange(h, dtype=np.float64) + 0.5) / h,
        (np.arange(w, dtype=np.float64) + 0.5) / w,
        indexing="ij",
    )
    makers = (_shapes, _noise, _grating)
    for i in range(n):
        rng = np.random.default_rng([seed, i])
        img = makers[int(rng.integers(len(makers)))](rng, c, yy, xx)
        out[i] = np.clip(img, 0.0, 1.0)
    return out


def _colour(rng: np.random.Generator, c: int) -> np.ndarray:
    return rng.uniform(0.0, 1.0, size=(c, 1, 1))


def _shapes(rng: np.random.Generator, c: int, yy: np.ndarray, xx: np.ndarray) -> np.ndarray:
    """1 to 6 filled ellipses, rectangles and triangles on a plain or graded background."""
    img = np.broadcast_to(_colour(rng, c), (c, *yy.shape)).copy()
    if rng.random() < 0.5:
        theta = rng.uniform(0, 2 * math.pi)
        ramp = (math.cos(theta) * xx + math.sin(theta) * yy) % 1.0
        img = img * (1 - ramp) + _colour(rng, c) * ramp
    for _ in range(int(rng.integers(1, 7))):
        cy, cx = rng.uniform(0.0, 1.0, 2)
        a, b = rng.uniform(0.05, 0.4, 2)
        theta = rng.uniform(0, math.pi)
        u = math.cos(theta) * (xx - cx) + math.sin(theta) * (yy - cy)
        v = -math.sin(theta) * (xx - cx) + math.cos(theta) * (yy - cy)
        kind = int(rng.integers(3))
        if kind == 0:
            mask = (u / a) ** 2 + (v / b) ** 2 <= 1.0
        elif kind == 1:
            mask = (np.abs(u) <= a) & (np.abs(v) <= b)
        else:
            p = rng.uniform(-0.4, 0.4, size=(3, 2)) + np.array([cx, cy])
            mask = _triangle(p, xx, yy)
        img = np.where(mask, _colour(rng, c), img)
    return img


def _triangle(p: np.ndarray, xx: np.ndarray, yy: np.ndarray) -> np.ndarray:
    def side(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.asarray((b[0] - a[0]) * (yy - a[1]) - (b[1] - a[1]) * (xx - a[0]))

    s = [side(p[0], p[1]), side(p[1], p[2]), side(p[2], p[0])]
    return ((s[0] >= 0) & (s[1] >= 0) & (s[2] >= 0)) | ((s[0] <= 0) & (s[1] <= 0) & (s[2] <= 0))


def _noise(rng: np.random.Generator, c: int, yy: np.ndarray, xx: np.ndarray) -> np.ndarray:
    """Smooth value noise: 1 to 4 octaves of bilinearly upsampled random grids."""
    h, w = yy.shape
    base = int(rng.integers(2, 9))
    octaves = int(rng.integers(1, 5))
    field = np.zeros((c, h, w))
    for o in range(octaves):
        g = base * 2**o
        grid = rng.uniform(0.0, 1.0, size=(c, g + 1, g + 1))
        field += _bilinear(grid, yy * g, xx * g) / 2**o
    lo = field.min(axis=(1, 2), keepdims=True)
    hi = field.max(axis=(1, 2), keepdims=True)
    field = (field - lo) / np.maximum(hi - lo, 1e-12)
    if c > 1 and rng.random() < 0.5:  # one noise field coloured between two colours
        return np.asarray(_colour(rng, c) * (1 - field[:1]) + _colour(rng, c) * field[:1])
    return np.asarray(field)


def _bilinear(grid: np.ndarray, gy: np.ndarray, gx: np.ndarray) -> np.ndarray:
    y0 = np.minimum(gy.astype(np.int64), grid.shape[1] - 2)
    x0 = np.minimum(gx.astype(np.int64), grid.shape[2] - 2)
    fy, fx = gy - y0, gx - x0
    top = grid[:, y0, x0] * (1 - fx) + grid[:, y0, x0 + 1] * fx
    bottom = grid[:, y0 + 1, x0] * (1 - fx) + grid[:, y0 + 1, x0 + 1] * fx
    return np.asarray(top * (1 - fy) + bottom * fy)


def _grating(rng: np.random.Generator, c: int, yy: np.ndarray, xx: np.ndarray) -> np.ndarray:
    """A sinusoidal grating (or a plaid of two), square-wave at random, between two colours."""
    wave = np.zeros(yy.shape)
    parts = 1 if rng.random() < 0.6 else 2
    for _ in range(parts):
        theta = rng.uniform(0, math.pi)
        freq = rng.uniform(1.0, max(2.0, min(yy.shape) / 4))
        phase = rng.uniform(0, 2 * math.pi)
        wave += np.sin(2 * math.pi * freq * (math.cos(theta) * xx + math.sin(theta) * yy) + phase)
    t = wave / parts
    t = np.sign(t) if rng.random() < 0.3 else t
    t = (t + 1) / 2
    return _colour(rng, c) * (1 - t) + _colour(rng, c) * t


# -- scikit-image ------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _skimage_available() -> tuple[str, ...]:
    """The ``skimage.data`` pictures whose files are in the installed package."""
    if importlib.util.find_spec("skimage") is None:
        raise ConfigError(
            "public image set 'skimage' needs scikit-image, which is not installed",
            "pip install 'fedad[pretrained]'",
        )
    import os

    from skimage import data

    names = tuple(
        fn
        for fn, filename in SKIMAGE_IMAGES.items()
        if os.path.isfile(os.path.join(data.data_dir, filename))  # never download
    )
    if not names:
        raise ConfigError("scikit-image ships none of its sample images here", "reinstall it")
    return names


@cache
def _skimage_image(fn: str) -> np.ndarray:
    """One picture as ``(C, H, W)`` float32 in [0, 1], C = 1 or 3 (RGBA over white)."""
    from skimage import data
    from skimage.util import img_as_float32

    img = img_as_float32(np.asarray(getattr(data, fn)()))  # type: ignore[no-untyped-call]
    if img.ndim == 3 and img.shape[2] == 4:
        img = img[..., :3] * img[..., 3:] + (1 - img[..., 3:])
    img = img[None] if img.ndim == 2 else np.moveaxis(img[..., :3], 2, 0)
    out = np.ascontiguousarray(np.clip(img, 0.0, 1.0), dtype=np.float32)
    out.setflags(write=False)  # cached: shared by every call
    return out


def _skimage(n: int, c: int, h: int, w: int, seed: int) -> np.ndarray:
    names = _skimage_available()
    out = np.empty((n, c, h, w), dtype=np.float32)
    for i in range(n):
        rng = np.random.default_rng([seed, i, 0x5C1])
        src = _skimage_image(names[int(rng.integers(len(names)))])
        sh, sw = src.shape[1:]
        scale = rng.uniform(0.25, 1.0)
        ch = max(1, round(scale * min(sh, sw * h / w)))
        cw = max(1, min(sw, round(ch * w / h)))
        y0 = int(rng.integers(sh - ch + 1))
        x0 = int(rng.integers(sw - cw + 1))
        crop = src[None, :, y0 : y0 + ch, x0 : x0 + cw]
        if rng.random() < 0.5:
            crop = crop[..., ::-1]
        out[i] = _resize(_to_channels(crop, c), h, w)[0]
    return out


# -- registered data sets -----------------------------------------------------------------------


def _registered(name: str, n: int, c: int, h: int, w: int, seed: int) -> np.ndarray:
    ds = load_dataset(name)
    x = ds.x
    if isinstance(x, GraphSet) or x.ndim != 4 or x.shape[1] not in (1, 3):
        raise ConfigError(f"data set '{name}' does not hold grey or RGB images (N, C, H, W)")
    rng = np.random.default_rng([seed, 0xB0B])
    idx = np.sort(rng.choice(len(x), size=n, replace=n > len(x)))
    out = np.empty((n, c, h, w), dtype=np.float32)
    for start in range(0, n, 1024):
        part = np.asarray(x[idx[start : start + 1024]], dtype=np.float32)
        out[start : start + 1024] = _resize(_to_channels(part, c), h, w)
    return out
