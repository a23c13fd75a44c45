"""Reader of GIMP pattern files (``.pat``), e.g. the tileable photographs of Debian's
``gimp-data`` package (``/usr/share/gimp/2.0/patterns``).

Format (GIMP's ``devel-docs/pat.txt``), all integers big-endian ``uint32``: ``header_size``,
``version`` (1), ``width``, ``height``, ``bytes`` per pixel (1 grey, 2 grey + alpha, 3 RGB,
4 RGBA), the magic ``GPAT``, then a NUL-terminated UTF-8 name filling the header, then
``width x height x bytes`` pixel bytes, row by row. A file is untrusted input: every field
is checked and the file must be exactly that long; nothing in it is executed.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from fedad.core.errors import DataError

__all__ = ["MAX_SIDE", "read_pat"]

MAX_SIDE = 4096
"""Largest pattern side accepted."""
_FIXED = 24  # five uint32 and the magic


def read_pat(path: str | Path) -> np.ndarray:
    """The pattern's pixels as ``float32`` RGB ``(H, W, 3)`` in [0, 1] (grey replicated,
    alpha dropped); a malformed file is a one-line :class:`DataError` naming it."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as err:
        raise DataError(f"cannot read pattern file {p}: {err.strerror or err}") from None
    if len(raw) < _FIXED:
        raise DataError(f"{p} is not a GIMP pattern: {len(raw)} bytes, shorter than a header")
    header, version, width, height, depth = struct.unpack(">5I", raw[:20])
    if raw[20:24] != b"GPAT":
        raise DataError(f"{p} is not a GIMP pattern (no GPAT magic)")
    if version != 1:
        raise DataError(f"{p}: GIMP pattern version {version}, only version 1 is read")
    if not (1 <= width <= MAX_SIDE and 1 <= height <= MAX_SIDE):
        raise DataError(f"{p}: pattern size {width}x{height} is outside 1..{MAX_SIDE}")
    if depth not in (1, 2, 3, 4):
        raise DataError(f"{p}: {depth} bytes per pixel; a pattern has 1 to 4")
    if header < _FIXED or header > len(raw):
        raise DataError(f"{p}: header size {header} does not fit the file")
    if len(raw) != header + width * height * depth:
        raise DataError(f"{p}: {len(raw) - header} pixel bytes, expected {width}x{height}x{depth}")
    px = np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(height, width, depth)
    colour = px[..., :3] if depth >= 3 else np.repeat(px[..., :1], 3, axis=2)
    return (colour.astype(np.float32) / 255.0).copy()
