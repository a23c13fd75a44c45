"""``textures``: real texture photographs as product types, defective test images with exact
pixel masks (FedDyMem's setting on data that ship with Debian and scikit-image).

**Product types** (the classes): nine tileable photographs of Debian's ``gimp-data``
(:data:`GIMP_TYPES`, read by :mod:`fedad.data.gimp_pat`) and scikit-image's ``brick``,
``grass`` and ``gravel`` photographs. Without ``gimp-data`` the set holds the three
scikit-image types only, and says so in its class names' absence and a logged warning.

**Normal images** of a type: a window of the texture (two tiles wide for a GIMP pattern,
256 pixels of a scikit-image photograph) at a random place, rotated by up to 10 degrees,
resampled bilinearly to ``size`` x ``size`` (default 128), with a small brightness and
contrast jitter; RGB ``float32`` in [0, 1]. Seeded per type (CRC-32 of its name): the same
images on every machine; with ``data.part = "dev"`` or ``"eval"`` the run's seed is mixed
in, so each seed draws other images, and ``"eval"`` holds twelve other photographs
(:data:`EVAL_TYPES`) that no default was chosen on.

**Defective images** (test only): a held-out normal image of the type with one defect of
six kinds, in turn: a *scratch* (a thin bright or dark curve), a *crack* (a dark branching
polyline), a *hole* (a dark disc), *cut-and-paste* (a rectangle of another type's image),
a *stain* (a tinted blob) or a *missing patch* (a flat grey rectangle). Each covers roughly
0.1-5% of the image (measured at 128 px: 0.13% to 4.9%, median 1.5%). The mask is exactly
the set of pixels whose value the defect changed (any channel by more than 1/255 in
[0, 1]); normal images have empty masks.

Counts per type: 60 training images (normal), 20 normal and 20 defective test images. The
set is a *defect set* (``Dataset.defect_test``): ``data.normal`` selects types (default
all) and ``data.anomaly`` is omitted (:func:`fedad.data.federation.as_class_set`).
"""

from __future__ import annotations

import itertools
import logging
import zlib
from functools import lru_cache
from pathlib import Path

import numpy as np
from scipy import ndimage

from fedad.core.errors import DataError
from fedad.core.types import Dataset
from fedad.data.gimp_pat import read_pat
from fedad.data.parts import Part
from fedad.data.registry import register_dataset

__all__ = ["DEFECTS", "GIMP_TYPES", "PATTERN_DIR", "SKIMAGE_TYPES", "load_textures"]

log = logging.getLogger("fedad")

PATTERN_DIR = Path("/usr/share/gimp/2.0/patterns")
GIMP_TYPES: tuple[tuple[str, str], ...] = (
    ("leather", "Animal/leather.pat"),
    ("burlap", "Fabric/burlap.pat"),
    ("brick", "Stone/brick.pat"),
    ("marble", "Stone/marble1.pat"),
    ("granite", "Stone/granite1.pat"),
    ("slate", "Stone/slate.pat"),
    ("parquet", "Wood/parque1.pat"),
    ("burlwood", "Wood/burlwood.pat"),
    ("corkboard", "Wood/corkboard.pat"),
)
EVAL_TYPES: tuple[tuple[str, str], ...] = (
    ("leopard", "Animal/leopard.pat"),
    ("java", "Food/java.pat"),
    ("crinklepaper", "Paper/crinklepaper.pat"),
    ("leaves", "Plant/leaves.pat"),
    ("amethyst", "Stone/amethyst.pat"),
    ("cracked", "Stone/cracked.pat"),
    ("pink_marble", "Stone/pink_marble.pat"),
    ("rock", "Stone/rock.pat"),
    ("terra", "Stone/terra.pat"),
    ("bark", "Wood/bark.pat"),
    ("pine", "Wood/pine.pat"),
    ("walnut", "Wood/walnut.pat"),
)
"""The evaluation half (``data.part = "eval"``): twelve other photographs of ``gimp-data``
that no default was ever chosen on."""
SKIMAGE_TYPES: tuple[str, ...] = ("brick", "grass", "gravel")
DEFECTS: tuple[str, ...] = ("scratch", "crack", "hole", "cut", "stain", "missing")
N_TRAIN, N_TEST, N_DEFECT = 60, 20, 20
CHANGED = 1.0 / 255.0


def _eval_sources(pattern_dir: Path) -> list[tuple[str, np.ndarray, bool]]:
    """(name, RGB texture, tileable) per product type of the evaluation half."""
    missing = [rel for _, rel in EVAL_TYPES if not (pattern_dir / rel).is_file()]
    if missing:
        raise DataError(
            f'textures: data.part = "eval" needs gimp-data\'s patterns, and {missing[0]} is '
            f"not in {pattern_dir}",
            "install Debian's gimp-data (scripts/setup.sh does), or give data.path",
        )
    return [(name, read_pat(pattern_dir / rel), True) for name, rel in EVAL_TYPES]


def _sources(pattern_dir: Path) -> list[tuple[str, np.ndarray, bool]]:
    """(name, RGB texture, tileable) per product type."""
    out: list[tuple[str, np.ndarray, bool]] = []
    if all((pattern_dir / rel).is_file() for _, rel in GIMP_TYPES):
        out += [(name, read_pat(pattern_dir / rel), True) for name, rel in GIMP_TYPES]
    else:
        log.warning(
            "textures: Debian's gimp-data patterns are missing at %s; the set holds the "
            "scikit-image types only (install gimp-data for all 12)",
            pattern_dir,
        )
    try:
        from skimage import data as skdata
    except ImportError:
        raise DataError(
            "data set 'textures' needs scikit-image", "pip install 'fedad[pretrained]'"
        ) from None
    for name in SKIMAGE_TYPES:
        img = np.asarray(getattr(skdata, name)(), dtype=np.float32) / 255.0
        rgb = np.repeat(img[..., None], 3, axis=2) if img.ndim == 2 else img[..., :3]
        out.append((f"photo_{name}", rgb, False))
    return out


def _view(tex: np.ndarray, tileable: bool, size: int, rng: np.random.Generator) -> np.ndarray:
    """One normal image ``(3, size, size)``: a rotated window of ``tex``, jittered."""
    h, w, _ = tex.shape
    window = 2 * max(h, w) if tileable else min(256, h // 2, w // 2)
    angle = np.deg2rad(rng.uniform(-10.0, 10.0))
    cy, cx = rng.uniform(0, h), rng.uniform(0, w)
    if not tileable:  # keep the rotated window inside the photograph
        half = window * 0.75
        cy, cx = rng.uniform(half, h - half), rng.uniform(half, w - half)
    t = (np.arange(size) + 0.5) / size * window - window / 2
    v, u = np.meshgrid(t, t, indexing="ij")
    ys = cy + np.cos(angle) * v - np.sin(angle) * u
    xs = cx + np.sin(angle) * v + np.cos(angle) * u
    mode = "grid-wrap" if tileable else "reflect"
    img = np.stack(
        [ndimage.map_coordinates(tex[..., c], [ys, xs], order=1, mode=mode) for c in range(3)]
    )
    gain, bias = rng.uniform(0.9, 1.1), rng.uniform(-0.05, 0.05)
    mean = img.mean()
    out: np.ndarray = np.clip((img - mean) * gain + mean + bias, 0.0, 1.0).astype(np.float32)
    return out


def _polyline_mask(points: np.ndarray, size: int, width: int) -> np.ndarray:
    """Pixels on the polyline through ``points`` ``(n, 2)`` (row, column), ``width`` thick."""
    m = np.zeros((size, size), bool)
    for a, b in itertools.pairwise(points):
        steps = int(np.ceil(2 * np.abs(b - a).max())) + 1
        rc = np.rint(a + np.linspace(0.0, 1.0, steps)[:, None] * (b - a)).astype(np.int64)
        ok = ((rc >= 0) & (rc < size)).all(axis=1)
        m[rc[ok, 0], rc[ok, 1]] = True
    if width > 1:
        m = ndimage.binary_dilation(m, iterations=width - 1)
    out: np.ndarray = m
    return out


def _ellipse_mask(
    size: int, centre: np.ndarray, radii: tuple[float, float], angle: float
) -> np.ndarray:
    """Pixels inside the ellipse of ``radii`` (rows, columns) turned by ``angle``."""
    r, c = np.mgrid[:size, :size].astype(np.float64)
    dr, dc = r - centre[0], c - centre[1]
    u = np.cos(angle) * dr + np.sin(angle) * dc
    v = -np.sin(angle) * dr + np.cos(angle) * dc
    out: np.ndarray = (u / radii[0]) ** 2 + (v / radii[1]) ** 2 <= 1.0
    return out


def _curve(rng: np.random.Generator, size: int) -> np.ndarray:
    """Points of a random quadratic Bezier curve across part of the image."""
    p = rng.uniform(0.15 * size, 0.85 * size, size=(3, 2))
    s = np.linspace(0.0, 1.0, 40)[:, None]
    out: np.ndarray = (1 - s) ** 2 * p[0] + 2 * (1 - s) * s * p[1] + s**2 * p[2]
    return out


def _defect(
    img: np.ndarray, kind: str, rng: np.random.Generator, other: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``img`` with one defect of ``kind``, and the mask of the pixels it changed."""
    size = img.shape[1]
    out = img.copy()
    region = np.zeros((size, size), bool)
    if kind == "scratch":
        region = _polyline_mask(_curve(rng, size), size, 1 + int(rng.integers(0, 2)))
        shift = 0.4 if img.mean() < 0.5 else -0.4
        out[:, region] = np.clip(img[:, region] + shift, 0.0, 1.0)
    elif kind == "crack":
        start = rng.uniform(0.2 * size, 0.8 * size, size=2)
        pts = [start + np.cumsum(rng.normal(0, size / 25, size=(12, 2)), axis=0)]
        branch = pts[0][5] + np.cumsum(rng.normal(0, size / 30, size=(6, 2)), axis=0)
        region = _polyline_mask(np.vstack([start, pts[0]]), size, 2)
        region |= _polyline_mask(np.vstack([pts[0][5], branch]), size, 1)
        out[:, region] = img[:, region] * 0.25
    elif kind == "hole":
        r = rng.uniform(0.03, 0.08) * size
        region = _ellipse_mask(size, rng.uniform(r, size - r, size=2), (r, r), 0.0)
        out[:, region] = 0.04 + 0.02 * rng.random((3, 1))
    elif kind == "cut":
        h, w = (int(v) for v in rng.integers(size // 9, size // 4, size=2))
        r, c = (int(v) for v in rng.integers(0, size - max(h, w), size=2))
        rs, cs = (int(v) for v in rng.integers(0, size - max(h, w), size=2))
        out[:, r : r + h, c : c + w] = other[:, rs : rs + h, cs : cs + w]
        region[r : r + h, c : c + w] = True
    elif kind == "stain":
        radii = (rng.uniform(0.05, 0.1) * size, rng.uniform(0.05, 0.1) * size)
        centre = rng.uniform(0.2 * size, 0.8 * size, size=2)
        region = _ellipse_mask(size, centre, radii, rng.uniform(0, np.pi))
        tint = np.array([0.8, 0.3, 0.1])[rng.permutation(3)][:, None]
        out[:, region] = 0.45 * img[:, region] + 0.55 * tint
    elif kind == "missing":
        h, w = (int(v) for v in rng.integers(size // 10, size // 5, size=2))
        r, c = (int(v) for v in rng.integers(0, size - max(h, w), size=2))
        region[r : r + h, c : c + w] = True
        out[:, region] = 0.5
    else:  # pragma: no cover - DEFECTS lists every kind
        raise ValueError(kind)
    changed = (np.abs(out - img) > CHANGED).any(axis=0) & region
    out = np.where(changed[None], out, img)  # unchanged pixels stay exactly as they were
    return out.astype(np.float32), changed.astype(np.uint8)


def _rng(name: str, part: Part, seed: int) -> np.random.Generator:
    """A type's generator: fixed per type for the whole set (``"all"``, the images every
    earlier run drew), from the run's seed too for the development and evaluation halves."""
    if part == "all":
        return np.random.default_rng(zlib.crc32(name.encode()))
    return np.random.default_rng([zlib.crc32(name.encode()), seed % 2**64])


@lru_cache(maxsize=4)
def _build(size: int, pattern_dir: str, part: Part = "all", seed: int = 0) -> Dataset:
    folder = Path(pattern_dir)
    sources = _eval_sources(folder) if part == "eval" else _sources(folder)
    xs, ys, xt, yt, mt, dt = [], [], [], [], [], []
    per_type_test: list[np.ndarray] = []
    for k, (name, tex, tileable) in enumerate(sources):
        rng = _rng(name, part, seed)
        imgs = np.stack(
            [_view(tex, tileable, size, rng) for _ in range(N_TRAIN + N_TEST + N_DEFECT)]
        )
        xs.append(imgs[:N_TRAIN])
        ys.append(np.full(N_TRAIN, k))
        per_type_test.append(imgs[N_TRAIN:])
    for k, (name, _, _) in enumerate(sources):
        rng = _rng(f"{name}/defects", part, seed)
        imgs = per_type_test[k]
        normal, base = imgs[:N_TEST], imgs[N_TEST:]
        bad, masks = [], []
        for i, img in enumerate(base):
            j = (k + 1 + int(rng.integers(0, len(sources) - 1))) % len(sources)
            other = per_type_test[j][int(rng.integers(0, N_TEST))]
            d, m = _defect(img, DEFECTS[i % len(DEFECTS)], rng, other)
            bad.append(d)
            masks.append(m)
        xt += [normal, np.stack(bad)]
        yt.append(np.full(N_TEST + N_DEFECT, k))
        mt += [np.zeros((N_TEST, size, size), np.uint8), np.stack(masks)]
        dt.append(np.r_[np.zeros(N_TEST, bool), np.ones(N_DEFECT, bool)])
    x = np.concatenate(xs)
    return Dataset(
        "textures",
        x,
        np.concatenate(ys).astype(np.int64),
        "image",
        tuple(name for name, _, _ in sources),
        x_test=np.concatenate(xt),
        y_test=np.concatenate(yt).astype(np.int64),
        mask=np.zeros((len(x), size, size), np.uint8),
        mask_test=np.concatenate(mt),
        defect=np.zeros(len(x), bool),
        defect_test=np.concatenate(dt),
    )


@register_dataset(
    "textures",
    description="real texture photographs (GIMP + scikit-image) as 12 product types, "
    "defective test images with pixel masks; RGB, size 128",
    kind="image",
    parts="loader",
    defects=True,
)
def load_textures(
    path: str | None = None, size: int | None = None, part: Part = "all", seed: int = 0
) -> Dataset:
    """The ``textures`` set (see the module docstring); ``path``: another GIMP pattern
    folder laid out like ``gimp-data``'s (default :data:`PATTERN_DIR`). ``part = "dev"``:
    the 12 types, images drawn from the run's ``seed``; ``"eval"``: the 12 other types of
    :data:`EVAL_TYPES`, drawn likewise; ``"all"``: the 12 types as every earlier version
    drew them (the same images for every seed)."""
    side = 128 if size is None else int(size)
    if not 16 <= side <= 1024:
        raise DataError(f"textures: data.size {side} is outside 16..1024", "use e.g. 128")
    return _build(side, str(Path(path) if path else PATTERN_DIR), part, seed)
