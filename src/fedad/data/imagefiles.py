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
- hidden names (``.DS_Store``, ``.git``) are not images and are skipped by the callers;
- a truncated file is a bad file: Pillow's "image file is truncated" is caught (and
  ``PIL.ImageFile.LOAD_TRUNCATED_IMAGES`` is never set), and a PNG whose image data is a
  complete zlib stream that ends before the last row (which Pillow zero-fills without a
  word) is found by :func:`png_rows_missing`.

A problem with one file (too large, not a file, undecodable) raises :class:`BadImage`, a
:class:`~fedad.core.errors.DataError` that keeps its message apart, so that a loader may skip the
file instead; a path leading outside the folder raises a plain ``DataError``.
"""

from __future__ import annotations

import io
import struct
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fedad.core.errors import DataError

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
    "png_rows_missing",
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
            if im.format == "PNG" and png_rows_missing(raw):
                raise OSError("image file is truncated")
    except DataError:
        raise
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, zlib.error) as e:
        if "truncated" in str(e):
            raise BadImage(
                f"{what}: {f.path} is truncated (its image data ends before the last row)",
                f.path,
            ) from None
        raise BadImage(
            f"{what}: {f.path} is not a readable image ({type(e).__name__})", f.path
        ) from None
    except (Image.DecompressionBombWarning, Image.DecompressionBombError):
        raise BadImage(
            f"{what}: {f.path} is too large an image (decompression bomb?)", f.path
        ) from None
    return im


_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # PNG colour type -> samples per pixel
# Adam7 passes: (first column, first row, column step, row step)
_ADAM7 = (
    (0, 0, 8, 8),
    (4, 0, 8, 8),
    (0, 4, 4, 8),
    (2, 0, 4, 4),
    (0, 2, 2, 4),
    (1, 0, 2, 2),
    (0, 1, 1, 2),
)


def _png_data_bytes(width: int, height: int, depth: int, colour: int, interlaced: bool) -> int:
    """The length of a PNG's decompressed image data: every (pass's) row is one filter
    byte and ``ceil(w * depth * channels / 8)`` bytes, over the rows of the image (or of
    each non-empty Adam7 pass, a pass having ``ceil((width - x0) / dx)`` columns and
    ``ceil((height - y0) / dy)`` rows)."""
    bits = depth * _CHANNELS.get(colour, 4)
    passes = _ADAM7 if interlaced else ((0, 0, 1, 1),)
    total = 0
    for x0, y0, dx, dy in passes:
        w, h = -(-(width - x0) // dx), -(-(height - y0) // dy)
        if w > 0 and h > 0:
            total += h * (1 + -(-w * bits // 8))
    return total


def png_rows_missing(raw: bytes) -> bool:
    """Whether the PNG ``raw`` (already decoded by Pillow) has less image data than its
    header asks for: its IDAT chunks inflate to fewer bytes than
    :func:`_png_data_bytes`. Pillow fills the missing rows with zeros and says nothing
    when the zlib stream ends early; the stream is inflated again here in bounded steps,
    counting bytes, never holding more than 1 MiB of output."""
    view = memoryview(raw)
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", view[16:29])
    need = _png_data_bytes(width, height, depth, colour, interlace == 1)
    inflater = zlib.decompressobj()
    got, pos, seen = 0, 8, False
    while pos + 8 <= len(view) and got < need and not inflater.eof:
        length, kind = struct.unpack(">I4s", view[pos : pos + 8])
        data = view[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind != b"IDAT":
            if seen or kind == b"IEND":
                break  # Pillow reads the first run of IDAT chunks only
            continue
        seen = True
        while len(data) and got < need and not inflater.eof:
            got += len(inflater.decompress(data, min(need - got, 2**20)))
            data = memoryview(inflater.unconsumed_tail)
    return got < need


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
