"""What a path given as ``data.path`` (or to ``fedad score``) is, without opening it.

A FIFO given where a file is read would block the reader for ever, and "no file" would send
the user looking for a missing one: the loaders say what is there instead.
"""

from __future__ import annotations

import stat
from pathlib import Path

__all__ = ["FILE", "FOLDER", "kind_of", "not_a"]

FILE = "a regular file"
FOLDER = "a folder"
_KINDS = (
    (stat.S_ISREG, FILE),
    (stat.S_ISDIR, FOLDER),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def kind_of(p: Path) -> str | None:
    """What ``p`` is, through symbolic links (:data:`FILE`, :data:`FOLDER`, ``"a FIFO
    (named pipe)"``, ...), or ``None`` when nothing is there (or it cannot be stat'ed)."""
    try:
        mode = p.stat().st_mode
    except (OSError, ValueError):
        return None
    return next((name for test, name in _KINDS if test(mode)), "a special file")


def not_a(p: Path, want: str) -> str | None:
    """``None`` when ``p`` is ``want`` (:data:`FILE` or :data:`FOLDER`), else the start of
    a message: ``no file 'p'`` (or ``no folder``), or ``'p' is a FIFO (named pipe), not a
    regular file``."""
    kind = kind_of(p)
    if kind == want:
        return None
    if kind is None:
        return f"no {'folder' if want == FOLDER else 'file'} '{p}'"
    return f"'{p}' is {kind}, not {want}"
