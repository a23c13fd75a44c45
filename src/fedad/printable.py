"""Text read from untrusted files, made safe to show on a terminal.

A run directory, a data folder's file names and a table's cells may hold control
characters: ``\\x1b[2J`` clears a terminal that prints it, ``\\x07`` rings it, a carriage
return overwrites the line, a bidirectional override reorders what follows. Every such
character is shown as an escape instead: C0 (``U+0000``-``U+001F``), ``DEL`` and C1
(``U+0080``-``U+009F``) as ``\\xNN``, the bidirectional controls (``U+061C``, ``U+200E``,
``U+200F``, ``U+202A``-``U+202E``, ``U+2066``-``U+2069``) as ``\\uNNNN``. Everything
else, backslashes included, is left as it is. (Rich markup is another matter: escape it
with ``rich.markup.escape``, or print a ``rich.text.Text``, where text goes to Rich.)

Imports nothing but the standard library, so that any module may use it.
"""

from __future__ import annotations

__all__ = ["printable"]

_CONTROLS = [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]
_BIDI = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_ESCAPES: dict[int, str] = {
    **{cp: f"\\x{cp:02x}" for cp in _CONTROLS},
    **{cp: f"\\u{cp:04x}" for cp in _BIDI},
}


def printable(text: object, keep: str = "") -> str:
    """``str(text)`` with every control character (module docstring) but those in
    ``keep`` (``"\\n"`` for a multi-line text) written as an escape."""
    table = _ESCAPES if not keep else {k: v for k, v in _ESCAPES.items() if chr(k) not in keep}
    return str(text).translate(table)
