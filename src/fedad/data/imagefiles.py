"""Reading untrusted image files safely: the rules every folder-of-images loader follows.

Shared by :mod:`fedad.data.mvtec` and :mod:`fedad.data.image_folder` (and, through the
latter, ``fedad score``). Each function takes ``what``, the prefix of its messages
(``"mvtec"``, ``"image_folder"``), so that an error names the data set it came from.

The rules:

- only names ending in :data:`IMAGE_SUFFIXES` are images; they are decoded as PNG, JPEG or
  BMP (:data:`FORMATS`), whatever their name says, never by another Pillow plugin;
- a file is at most :data:`MAX_FILE_BYTES` (checked from ``stat`` and again while read) and
  at most :data:`MAX_PIXELS` pixels (checked from the header, before decoding); Pillow's
  decompression-bomb warning is an error;
- a path that leads (through a symlink) outside the folder given is refused; a symlink loop
  (a link to itself, a ring of links) is a bad file;
- hidden names (``.DS_Store``, ``.git``) are not images and are skipped by the callers.

A problem with one file (too large, not a file, undecodable) raises :class:`BadImage`, a
:class:`~fedad.errors.DataError` that keeps its message apart, so that a loader may skip the
file instead; a path leading outside the folder raises a plain ``DataError``.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fedad.errors import DataError

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

__all__ = [
    "FORMATS",
    "IMAGE_SUFFIXES",
    "MAX_FILE_BYTES",
    "MAX_PIXELS",
    "BadImage",
    "ImageFile",
    "eight_bit",
    "inside",
    "is_hidden",
    "is_image_name",
    "open_image",
    "stat_image",
]

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp"})
MAX_FILE_BYTES = 64 * 2**20
MAX_PIXELS = 8192 * 8192
FORMATS = ("PNG", "JPEG", "BMP")
_WIDE_GREY = frozenset({"I", "I;16", "I;16B", "I;16L", "I;16N", "F"})


class BadImage(DataError):
    """One file cannot be read as an image; ``what`` is the message, ``path`` the file."""

    def __init__(self, what: str, path: str | Path, fix: str | None = None) -> None:
        super().__init__(what, fix)
        self.what = what
        self.path = str(path)


@dataclass(frozen=True)
class ImageFile:
    """An image file as found: its real path, size in bytes and modification time (the
    key of the loaders' caches)."""

    path: str
    size: int
    mtime_ns: int


def is_hidden(p: Path) -> bool:
    return p.name.startswith(".")


def is_image_name(p: Path) -> bool:
    return p.suffix.lower() in IMAGE_SUFFIXES


def inside(p: Path, root: Path, what: str, where: str = "data.path") -> Path:
    """``p`` resolved; a one-line error when it (through a symlink) leaves ``root`` (a
    resolved folder; ``where`` says what it is in the message), and :class:`BadImage` when
    it is a symlink loop (a link to itself, or a ring of links)."""
    try:
        real = p.resolve()
    except (RuntimeError, OSError):  # Python < 3.13: RuntimeError("Symlink loop ...")
        raise BadImage(
            f"{what}: {p} is a symbolic link loop (it leads back to itself)",
            p,
            "remove the link or point it at a file",
        ) from None
    if not real.is_relative_to(root):
        raise DataError(f"{what}: {p} leads outside {where} ({root}); symlinks out are refused")
    return real


def stat_image(
    p: Path, root: Path, what: str, max_bytes: int | None = None, where: str = "data.path"
) -> ImageFile:
    """``p`` (inside ``root``) as an :class:`ImageFile`; :class:`BadImage` when it is not a
    file or is larger than ``max_bytes`` (default :data:`MAX_FILE_BYTES`)."""
    cap = MAX_FILE_BYTES if max_bytes is None else max_bytes
    real = inside(p, root, what, where)
    if not real.is_file():
        raise BadImage(f"{what}: {p} is not a file", p)
    st = real.stat()
    if st.st_size > cap:
        raise BadImage(
            f"{what}: {p} has {st.st_size:,} bytes, more than the {cap:,} an image may have", p
        )
    return ImageFile(str(real), st.st_size, st.st_mtime_ns)


def open_image(
    f: ImageFile, what: str, max_pixels: int | None = None, max_bytes: int | None = None
) -> PILImage:
    """``f`` decoded (loaded) by Pillow as PNG, JPEG or BMP; :class:`BadImage` when it is
    not one, is truncated, has more than ``max_pixels`` (default :data:`MAX_PIXELS`) or grew
    past ``max_bytes`` (default :data:`MAX_FILE_BYTES`) since it was stat'ed."""
    from PIL import Image, UnidentifiedImageError

    pixels = MAX_PIXELS if max_pixels is None else max_pixels
    cap = MAX_FILE_BYTES if max_bytes is None else max_bytes
    try:
        with open(f.path, "rb") as fh:
            raw = fh.read(cap + 1)
    except OSError as e:
        raise BadImage(f"{what}: {f.path} cannot be read ({type(e).__name__})", f.path) from None
    if len(raw) > cap:
        raise BadImage(f"{what}: {f.path} grew past {cap:,} bytes while read", f.path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            im = Image.open(io.BytesIO(raw), formats=FORMATS)
            w, h = im.size
            if not (w >= 1 and h >= 1 and w * h <= pixels):
                raise BadImage(
                    f"{what}: {f.path} is {w}x{h} pixels, outside the {pixels:,} fedad reads",
                    f.path,
                )
            im.load()
    except DataError:
        raise
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise BadImage(
            f"{what}: {f.path} is not a readable image ({type(e).__name__})", f.path
        ) from None
    except (Image.DecompressionBombWarning, Image.DecompressionBombError):
        raise BadImage(
            f"{what}: {f.path} is too large an image (decompression bomb?)", f.path
        ) from None
    return im


def eight_bit(im: PILImage) -> PILImage:
    """``im`` with 8 bits per channel: 16-bit (or 32-bit integer, or float) grey is scaled
    to ``L`` by the full range of its mode (65535, or 1.0 for float); other modes are
    returned as they are."""
    from PIL import Image

    if im.mode not in _WIDE_GREY:
        return im
    arr = np.asarray(im, dtype=np.float64)
    top = 1.0 if im.mode == "F" else 65535.0
    return Image.fromarray(np.clip(np.rint(arr / top * 255.0), 0, 255).astype(np.uint8))
