"""``mvtec``: the MVTec AD folder layout (Bergmann et al., CVPR 2019) from ``data.path``.

Layout (one folder per category; ``data.path`` is the folder holding the categories, or one
category's folder, which makes a set of one class)::

    <path>/<category>/train/good/*.png                    training images (all normal)
    <path>/<category>/test/good/*.png                     normal test images
    <path>/<category>/test/<defect>/*.png                 defective test images
    <path>/<category>/ground_truth/<defect>/<stem>_mask.png   their pixel masks

Categories (sorted) are the classes, i.e. the product types of a *defect set*
(``Dataset.defect_test`` flags the defective test images; see
:func:`fedad.data.federation.as_class_set`). Images are decoded with Pillow, made RGB (grey
replicated to three channels, alpha dropped, 16-bit scaled), resized bilinearly to
``size`` x ``size`` (default 128) and scaled to [0, 1]; masks are binarised (> 0) and resized
with nearest-neighbour; ``good`` images have all-zero masks. A defective image without its
mask file is a one-line error naming the missing file.

The folder is untrusted input: only ``.png``, ``.jpg``/``.jpeg`` and ``.bmp`` files are read
(decoded as PNG, JPEG or BMP, whatever their name says), each at most
:data:`MAX_FILE_BYTES` and :data:`MAX_PIXELS` pixels (checked from the header before
decoding); any other file in an image folder, an undecodable image, or a path (symlink)
leading outside ``data.path`` is a one-line :class:`~fedad.core.errors.DataError` naming the file.
Hidden files (``.DS_Store``) are skipped. Decoded sets are cached in-process, keyed on the
folder, ``size`` and every file's size and modification time.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fedad.core.errors import DataError
from fedad.core.types import Dataset
from fedad.data.imagefiles import (
    IMAGE_SUFFIXES,
    MAX_FILE_BYTES,
    MAX_PIXELS,
    ImageFile,
    eight_bit,
    inside,
    open_image,
    stat_image,
)
from fedad.data.paths import FOLDER, not_a
from fedad.data.registry import register_dataset

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

__all__ = ["IMAGE_SUFFIXES", "MAX_FILE_BYTES", "MAX_PIXELS", "load_mvtec"]

HOW_TO_GET = (
    "set data.path to the MVTec AD folder (holding bottle/, carpet/, ...) or to one "
    "category's folder; get it from https://www.mvtec.com/company/research/datasets/mvtec-ad"
)


_WHAT = "mvtec"


@dataclass(frozen=True)
class _Item:
    image: ImageFile
    category: int
    defect: bool
    mask: ImageFile | None


def _inside(p: Path, root: Path) -> Path:
    return inside(p, root, _WHAT)


def _stat(p: Path, root: Path) -> ImageFile:
    return stat_image(p, root, _WHAT, max_bytes=MAX_FILE_BYTES)


def _images(folder: Path, root: Path) -> list[Path]:
    """The image files of ``folder``, sorted by name; anything else (but hidden files) is an
    error."""
    _inside(folder, root)
    out = []
    for p in sorted(folder.iterdir(), key=lambda q: q.name):
        if p.name.startswith("."):
            continue
        if p.suffix.lower() not in IMAGE_SUFFIXES or not _inside(p, root).is_file():
            raise DataError(
                f"mvtec: {p} is not an image file (.png, .jpg, .bmp)",
                "an MVTec AD image folder holds images only",
            )
        out.append(p)
    return out


def _subdirs(folder: Path, root: Path) -> list[Path]:
    _inside(folder, root)
    dirs = [p for p in folder.iterdir() if not p.name.startswith(".") and p.is_dir()]
    for p in dirs:
        _inside(p, root)
    return sorted(dirs, key=lambda q: q.name)


def _categories(base: Path, root: Path) -> list[Path]:
    if (base / "train").is_dir() and (base / "test").is_dir():
        return [base]
    cats = [p for p in _subdirs(base, root) if (p / "train").is_dir()]
    if not cats:
        raise DataError(
            f"mvtec: no category under {base} (expected <category>/train/good/*.png and "
            "<category>/test/)",
            HOW_TO_GET,
        )
    return cats


def _scan(base: Path, root: Path) -> tuple[tuple[str, ...], list[_Item], list[_Item]]:
    cats = _categories(base, root)
    train: list[_Item] = []
    test: list[_Item] = []
    for k, cat in enumerate(cats):
        good = cat / "train" / "good"
        if not good.is_dir():
            raise DataError(f"mvtec: no folder {good}", "a category needs train/good/ images")
        files = _images(good, root)
        if not files:
            raise DataError(f"mvtec: no image in {good}")
        train += [_Item(_stat(p, root), k, False, None) for p in files]
        tests = cat / "test"
        if not tests.is_dir():
            raise DataError(f"mvtec: no folder {tests}", "a category needs test/<good|defect>/")
        n_before = len(test)
        for sub in _subdirs(tests, root):
            for p in _images(sub, root):
                if sub.name == "good":
                    test.append(_Item(_stat(p, root), k, False, None))
                    continue
                m = cat / "ground_truth" / sub.name / f"{p.stem}_mask.png"
                if not m.is_file():
                    raise DataError(
                        f"mvtec: the defective image {p} has no mask file {m}",
                        "every test/<defect>/ image needs ground_truth/<defect>/<name>_mask.png",
                    )
                test.append(_Item(_stat(p, root), k, True, _stat(m, root)))
        if len(test) == n_before:
            raise DataError(f"mvtec: no image in {tests}'s subfolders")
    return tuple(c.name for c in cats), train, test


def _open(f: ImageFile) -> PILImage:
    # the caps are read here, at call time, so that they may be patched on this module
    return open_image(f, _WHAT, max_pixels=MAX_PIXELS, max_bytes=MAX_FILE_BYTES)


def _rgb(f: ImageFile, size: int) -> tuple[np.ndarray, tuple[int, int]]:
    """The image as ``(3, size, size)`` float32 in [0, 1], and its own (width, height)."""
    from PIL import Image

    im = _open(f)
    own = im.size
    im = eight_bit(im).convert("RGB")
    if im.size != (size, size):
        im = im.resize((size, size), Image.Resampling.BILINEAR)
    out = np.asarray(im, dtype=np.float32).transpose(2, 0, 1) / np.float32(255.0)
    return np.ascontiguousarray(out), own


def _mask(item: _Item, size: int, own: tuple[int, int]) -> np.ndarray:
    """The defect mask of ``item`` (whose image is ``own`` = (width, height)), binarised and
    resized to ``(size, size)`` uint8."""
    from PIL import Image

    assert item.mask is not None
    im = _open(item.mask)
    if im.size != own:
        raise DataError(
            f"mvtec: the mask {item.mask.path} is {im.size[0]}x{im.size[1]} but its image "
            f"{item.image.path} is {own[0]}x{own[1]}"
        )
    binary = Image.fromarray((np.asarray(im.convert("L")) > 0).astype(np.uint8))
    if binary.size != (size, size):
        binary = binary.resize((size, size), Image.Resampling.NEAREST)
    return np.asarray(binary, dtype=np.uint8)


@lru_cache(maxsize=1)
def _decode(
    classes: tuple[str, ...], train: tuple[_Item, ...], test: tuple[_Item, ...], size: int
) -> Dataset:
    x = np.stack([_rgb(it.image, size)[0] for it in train])
    xt = np.empty((len(test), 3, size, size), np.float32)
    mt = np.zeros((len(test), size, size), np.uint8)
    for i, it in enumerate(test):
        xt[i], own = _rgb(it.image, size)
        if it.defect:
            mt[i] = _mask(it, size, own)
    return Dataset(
        "mvtec",
        x,
        np.array([it.category for it in train], np.int64),
        "image",
        classes,
        x_test=xt,
        y_test=np.array([it.category for it in test], np.int64),
        mask=np.zeros((len(train), size, size), np.uint8),
        mask_test=mt,
        defect=np.zeros(len(train), bool),
        defect_test=np.array([it.defect for it in test], bool),
    )


@register_dataset(
    "mvtec",
    description="MVTec AD from data.path (categories as product types, defective test "
    "images with pixel masks); RGB, size 128",
    kind="image",
    defects=True,
)
def load_mvtec(path: str | None = None, size: int | None = None) -> Dataset:
    """The MVTec AD folder at ``path`` (see the module docstring)."""
    if not path:
        raise DataError("data set 'mvtec' needs data.path: nothing is downloaded", HOW_TO_GET)
    side = 128 if size is None else int(size)
    if not 16 <= side <= 1024:
        raise DataError(f"mvtec: data.size {side} is outside 16..1024", "use e.g. 128")
    base = Path(path).expanduser()
    if (wrong := not_a(base, FOLDER)) is not None:
        raise DataError(f"mvtec: {wrong} (from data.path)", HOW_TO_GET)
    root = base.resolve()
    classes, train, test = _scan(base, root)
    return _decode(classes, tuple(train), tuple(test), side)
