"""The CMU Keystroke Dynamics benchmark (Killourhy & Maxion, DSN 2009), from a user path.

``DSL-StrongPasswordData.csv``: 51 subjects typed the password ``.tie5Roanl`` 400 times each
(8 sessions x 50 repetitions), 20,400 rows. Its header is ``subject, sessionIndex, rep``
then 31 timing features in seconds: the hold time ``H.k`` of each of the 11 keys, and the
keydown-keydown ``DD.k1.k2`` and keyup-keydown ``UD.k1.k2`` latencies of each of the 10
consecutive key pairs (:data:`TIMING_COLUMNS`). The loader ``keystroke`` returns a vector
data set: ``x`` = the 31 timing columns as ``float32`` in file order, ``y`` = the subject's
index in ``classes`` (the subject ids, e.g. ``"s002"``, sorted as strings), ``columns`` =
the timing columns' names; ``sessionIndex`` and ``rep`` are checked and not used. There is
no official test split.

``data.path`` is the CSV file or a folder holding ``DSL-StrongPasswordData.csv``; nothing
is downloaded (https://www.cs.cmu.edu/~keystroke/). The file is untrusted input: it is read
only up to :data:`MAX_CSV_BYTES`, must be UTF-8 with exactly the header above (any order
of the columns is fine), one row per line with as many cells as the header; a timing cell
that is not a number is a one-line :class:`~fedad.core.errors.DataError` naming the file, the
line and the column. Empty cells and ``NA``/``NaN`` become NaN and infinite values stay
infinite: ``data.missing`` decides what happens to them. Decoded files are cached
in-process, keyed on path, size and modification time.
"""

from __future__ import annotations

import csv
import io
import math
import os
from functools import lru_cache
from itertools import pairwise
from pathlib import Path

import numpy as np

from fedad.core.errors import DataError
from fedad.core.types import Dataset
from fedad.data.registry import register_dataset

__all__ = [
    "FILENAME",
    "MAX_CSV_BYTES",
    "TIMING_COLUMNS",
    "load_keystroke",
    "parse_keystroke_csv",
]

FILENAME = "DSL-StrongPasswordData.csv"
MAX_CSV_BYTES = 64 * 2**20
"""Largest file read: the real one is about 4.6 MB."""
MAX_SUBJECT_CHARS = 64
MAX_SUBJECTS = 10_000
HOW_TO_GET = (
    f"set data.path to {FILENAME} or the folder holding it "
    "(from https://www.cs.cmu.edu/~keystroke/; nothing is downloaded)"
)

_KEYS = ("period", "t", "i", "e", "five", "Shift.r", "o", "a", "n", "l", "Return")
TIMING_COLUMNS: tuple[str, ...] = (
    *(c for k1, k2 in pairwise(_KEYS) for c in (f"H.{k1}", f"DD.{k1}.{k2}", f"UD.{k1}.{k2}")),
    f"H.{_KEYS[-1]}",
)
"""The 31 timing features, in the order of the published file."""
ID_COLUMNS = ("subject", "sessionIndex", "rep")
_MISSING = {"", "na", "nan", "null"}


def _shown(text: str, limit: int = 40) -> str:
    r = repr(text)
    return r if len(r) <= limit else r[: limit - 3] + "..."


def _find(path: str | None) -> Path:
    if path is None:
        raise DataError("data set 'keystroke' needs data.path: nothing is downloaded", HOW_TO_GET)
    base = Path(path).expanduser()
    if base.is_dir():
        base = base / FILENAME
    if not base.is_file():
        raise DataError(f"keystroke: no file '{base}' (from data.path)", HOW_TO_GET)
    return base


def _header(row: list[str], where: str) -> dict[str, int]:
    """Column name -> position; exactly :data:`ID_COLUMNS` and :data:`TIMING_COLUMNS`."""
    names = [c.strip() for c in row]
    if len(names) == 1 and any(d in names[0] for d in ";\t|"):
        raise DataError(
            f"{where}: the header is one column {_shown(names[0])}; the file must be "
            "comma-separated",
            "is it the right file, saved with another delimiter?",
        )
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in seen:
            raise DataError(f"{where}: column {_shown(name)} appears twice in the header")
        seen[name] = i
    expected = (*ID_COLUMNS, *TIMING_COLUMNS)
    missing = [c for c in expected if c not in seen]
    extra = [c for c in names if c not in expected]
    if missing or extra:
        what = []
        if missing:
            what.append(f"lacks {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
        if extra:
            shown = ", ".join(_shown(c, 30) for c in extra[:3])
            what.append(f"has unknown columns {shown}{' ...' if len(extra) > 3 else ''}")
        raise DataError(
            f"{where}: the header {' and '.join(what)}; expected subject, sessionIndex, rep "
            f"and the {len(TIMING_COLUMNS)} timing columns of {FILENAME}",
        )
    return seen


def _number(cell: str, where: str, line: int, column: str) -> float:
    text = cell.strip()
    if text.lower() in _MISSING:
        return math.nan
    try:
        return float(text)
    except ValueError:
        raise DataError(
            f"{where}: line {line}, column '{column}' is {_shown(text)}, not a number"
        ) from None


def _integer(cell: str, where: str, line: int, column: str) -> None:
    text = cell.strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 9):
        raise DataError(
            f"{where}: line {line}, column '{column}' is {_shown(text)}, not a whole number"
        )


def _subject(cell: str, where: str, line: int) -> str:
    text = cell.strip()
    if not text or len(text) > MAX_SUBJECT_CHARS or not text.isprintable():
        raise DataError(
            f"{where}: line {line}, column 'subject' is {_shown(text)}, expected a printable "
            f"subject id of 1 to {MAX_SUBJECT_CHARS} characters"
        )
    return text


def parse_keystroke_csv(raw: bytes, where: str = FILENAME) -> tuple[np.ndarray, list[str]]:
    """``(x (N, 31) float32, subject of each row)`` from the bytes of the CSV file.

    Raises a one-line :class:`DataError` naming ``where`` (and the line and column) on
    anything that is not the published layout.
    """
    if not raw.strip():
        raise DataError(f"{where} is empty", HOW_TO_GET)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise DataError(
            f"{where} is not UTF-8 text (byte {err.start} is {raw[err.start]:#04x})",
            "is it the right file?",
        ) from None
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    subjects: list[str] = []
    rows: list[list[float]] = []
    try:
        header = next(reader, None)
        if header is None:
            raise DataError(f"{where} has no header")
        cols = _header(header, where)
        order = [cols[c] for c in TIMING_COLUMNS]
        width = len(header)
        for row in reader:
            line = reader.line_num
            if not row or (len(row) == 1 and not row[0].strip()):
                continue  # blank line
            if len(row) != width:
                raise DataError(
                    f"{where}: line {line} has {len(row)} cells, the header has {width}",
                    "a wrong delimiter or a broken line?",
                )
            subjects.append(_subject(row[cols["subject"]], where, line))
            _integer(row[cols["sessionIndex"]], where, line, "sessionIndex")
            _integer(row[cols["rep"]], where, line, "rep")
            rows.append(
                [
                    _number(row[j], where, line, c)
                    for j, c in zip(order, TIMING_COLUMNS, strict=True)
                ]
            )
    except csv.Error as err:
        msg = str(err).splitlines()[0] if str(err) else "malformed CSV"
        raise DataError(f"{where}: line {reader.line_num}: {msg}") from None
    if not rows:
        raise DataError(f"{where} has a header but no data rows")
    with np.errstate(over="ignore"):
        x = np.asarray(rows, dtype=np.float64).astype(np.float32)
    return x, subjects


@lru_cache(maxsize=4)
def _read_cached(path: str, size: int, mtime_ns: int) -> tuple[np.ndarray, tuple[str, ...]]:
    del size, mtime_ns
    with open(path, "rb") as fh:
        raw = fh.read(MAX_CSV_BYTES + 1)
    if len(raw) > MAX_CSV_BYTES:
        raise DataError(
            f"'{path}' is larger than the {MAX_CSV_BYTES:,} bytes fedad reads as {FILENAME} "
            "(the real file has about 4.6 MB)",
            "is it the right file?",
        )
    x, subjects = parse_keystroke_csv(raw, f"'{path}'")
    x.setflags(write=False)
    return x, tuple(subjects)


@register_dataset(
    "keystroke",
    description="CMU keystroke dynamics (DSL-StrongPasswordData.csv at data.path): "
    "51 subjects x 400, 31 timing features",
    kind="vector",
)
def load_keystroke(path: str | None = None, size: int | None = None) -> Dataset:
    """The keystroke timings; classes are the subjects (sorted ids)."""
    file = _find(path)
    try:
        stat = file.stat()
        x, subjects = _read_cached(os.path.abspath(file), stat.st_size, stat.st_mtime_ns)
    except OSError as err:
        raise DataError(f"cannot read '{file}': {err.strerror or err}") from None
    classes = tuple(sorted(set(subjects)))
    if len(classes) > MAX_SUBJECTS:
        raise DataError(f"'{file}' has {len(classes)} subjects, more than {MAX_SUBJECTS:,}")
    index = {s: i for i, s in enumerate(classes)}
    y = np.fromiter((index[s] for s in subjects), dtype=np.int64, count=len(subjects))
    return Dataset("keystroke", x.copy(), y, "vector", classes, columns=TIMING_COLUMNS)
