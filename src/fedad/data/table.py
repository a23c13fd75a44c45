"""``table``: a user's own table (``.csv``, ``.tsv`` or ``.parquet``) from ``data.path``.

Keys (``[data]``)::

    name = "table"
    path = "records.csv"          # .csv (comma), .tsv (tab) or .parquet
    label_column = "label"        # required
    client_column = "site"        # optional: each row's client, for scheme = "natural"
    features = ["age", "bp"]      # optional: default every other column
    drop_columns = ["patient_id"] # optional: columns that are not features
    split_column = "split"        # optional: "train" / "test" per row (else test_fraction)

**Labels.** The label column's values are the classes (``Dataset.by_value``): integral
numbers are written as integers (``1.0`` is ``"1"``), booleans as ``"0"``/``"1"``, text as
it is. A column holding exactly the values 0 and 1 is a *fixed definition* when
``data.normal`` and ``data.anomaly`` are both omitted: 1 marks an anomaly. Otherwise
``normal`` and ``anomaly`` select classes by value (``normal = ["benign"]``,
``anomaly = [4]``). A missing label, or a column with one value, is an error.

**Features.** The feature columns never include the label, client or split columns. A
column pandas reads as numbers (or booleans) is numeric: ``float32``, standardised by the
federation as for every vector set. Any other column is *categorical*: the loader stores
the index of each row's value among the column's sorted distinct values (NaN when the cell
is empty), and the federation one-hot encodes it with the categories **seen in the
clients' training rows**; a category seen only in test or new data encodes as all zeros.
One-hot columns are not standardised. Date/time columns, and text columns with more than
:data:`MAX_CATEGORIES` distinct values (an identifier, most likely), are errors that say to
drop them. Empty numeric cells are NaN: ``data.missing`` decides (error, drop the row, or
impute the training mean; for a categorical column the mean of its one-hot columns); so are
numbers beyond float32's range (``1e300``), which become infinite.

**Untrusted input.** Files are read with pandas (pyarrow for Parquet, at least 14.0.1,
which fixed CVE-2023-47248: code execution from a crafted file), which run no code from the
file; at most :data:`MAX_TABLE_BYTES` bytes; any read error is a one-line
:class:`~fedad.core.errors.DataError` naming the file, and so is a column name written twice in
the header (pandas would rename the second ``f0.1``), a header that reads as one column
holding another separator (a ``;``-separated .csv: the error says so rather than that the
label column is missing) and a path that is no regular file (a FIFO is never opened: it
would block). Loaded tables are cached in-process,
keyed on the path, its size and modification time, and the options.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedad.core.errors import DataError
from fedad.core.types import Dataset
from fedad.data.paths import FILE, not_a
from fedad.data.registry import register_dataset

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "MAX_CATEGORIES",
    "MAX_TABLE_BYTES",
    "TABLE_SUFFIXES",
    "TableSpec",
    "encode_categories",
    "label_values",
    "load_table",
    "numeric_float32",
    "read_table",
]

MAX_TABLE_BYTES = 2 * 2**30
"""Largest table file read (2 GiB)."""
MAX_CATEGORIES = 256
"""Most distinct values a text feature column may have (more: an identifier)."""
TABLE_SUFFIXES = (".csv", ".tsv", ".parquet")
SPLIT_VALUES = ("train", "test")


@dataclass(frozen=True)
class TableSpec:
    """Which columns of a table are what (the ``[data]`` keys of the module docstring)."""

    label_column: str | None = None
    client_column: str | None = None
    features: tuple[str, ...] | None = None
    drop_columns: tuple[str, ...] = ()
    split_column: str | None = None


def read_table(path: str | Path, what: str = "table") -> pd.DataFrame:
    """The table at ``path`` as a DataFrame, by suffix: ``.csv``, ``.tsv`` or ``.parquet``."""
    import pandas as pd

    p = Path(path).expanduser()
    suffix = p.suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        raise DataError(
            f"{what}: '{p}' is not a .csv, .tsv or .parquet file",
            "give data.path a table file with one of those suffixes",
        )
    wrong = not_a(p, FILE)  # a FIFO is not opened: it would block
    if wrong is not None:
        fix = "set data.path to the table file" if what == "table" else "give a table file"
        raise DataError(f"{what}: {wrong}", fix)
    size = p.stat().st_size
    if size > MAX_TABLE_BYTES:
        raise DataError(f"{what}: '{p}' has {size:,} bytes, more than the {MAX_TABLE_BYTES:,} read")
    try:
        if suffix == ".parquet":
            frame = pd.read_parquet(p, engine="pyarrow")
            header = [str(c) for c in frame.columns]
        else:
            sep = "\t" if suffix == ".tsv" else ","
            frame = pd.read_csv(p, sep=sep, low_memory=False)
            header = _csv_header(p, sep)
    except Exception as err:  # pandas and pyarrow raise many kinds on a malformed file
        reason = str(err).splitlines()[0][:160] if str(err) else type(err).__name__
        raise DataError(f"{what}: cannot read '{p}': {reason}") from None
    if suffix != ".parquet":
        _check_separator(header, sep, p, what)
    frame.columns = [str(c).strip() for c in frame.columns]
    dup = _repeated([h.strip() for h in header if h.strip()]) or _repeated(frame.columns)
    if dup:
        raise DataError(f"{what}: '{p}' has the column '{dup[0]}' twice", "rename one of them")
    if len(frame) == 0:
        raise DataError(f"{what}: '{p}' has no rows")
    return frame


def _csv_header(p: Path, sep: str) -> list[str]:
    """The header row of a CSV/TSV file as written: ``read_csv`` renames a repeated name
    (``f0``, ``f0.1``), which would hide it."""
    import pandas as pd

    row = pd.read_csv(p, sep=sep, header=None, nrows=1, dtype=str, keep_default_na=False)
    return [str(c) for c in row.iloc[0].tolist()] if len(row) else []


_SEPARATORS = {";": "';'", "\t": "tabs", ",": "commas", "|": "'|'"}


def _check_separator(header: list[str], sep: str, p: Path, what: str) -> None:
    """A one-line error when the header is one column that holds another separator (a
    ``;``-separated .csv, a tab-separated .csv, a comma-separated .tsv): pandas reads such a
    file as one column, and the columns a run needs would be reported missing instead."""
    if len(header) != 1:
        return
    other = next((c for c in _SEPARATORS if c != sep and c in header[0]), None)
    if other is None:
        return
    if other == "\t":
        fix = "fedad reads a tab-separated file as .tsv: rename it with that suffix"
    elif other == ",":
        fix = "fedad reads a comma-separated file as .csv: rename it with that suffix"
    else:
        fix = "save it with commas as .csv, or with tabs as .tsv: fedad reads no other separator"
    raise DataError(
        f"{what}: '{p}' seems separated by {_SEPARATORS[other]}, not {_SEPARATORS[sep]}: "
        "its header reads as one column",
        fix,
    )


def _repeated(names: Sequence[str]) -> list[str]:
    """The names that occur more than once in ``names``, sorted."""
    counts = Counter(names)
    return sorted(c for c, n in counts.items() if n > 1)


def _need(frame: pd.DataFrame, column: str, key: str, file: Path) -> None:
    if column not in frame.columns:
        cols = list(frame.columns)
        shown = ", ".join(cols[:12]) + (f" and {len(cols) - 12} more" if len(cols) > 12 else "")
        raise DataError(f"table: {key} '{column}' is not a column of '{file}' (columns: {shown})")


def _value(v: Any) -> str:
    """A cell as a class or client value: integral numbers without '.0', bools as 0/1."""
    if isinstance(v, bool | np.bool_):
        return str(int(v))
    if isinstance(v, int | np.integer):
        return str(int(v))
    if isinstance(v, float | np.floating):
        f = float(v)
        return str(int(f)) if math.isfinite(f) and f.is_integer() else repr(f)
    return str(v).strip()


def label_values(series: pd.Series, key: str, file: Path) -> np.ndarray:
    """The cells of a label or client column as strings (see :func:`_value`); an empty
    cell is a one-line error."""
    empty = series.isna().to_numpy()
    if empty.any():
        raise DataError(
            f"table: {key} '{series.name}' is empty in {int(empty.sum())} rows of '{file}' "
            f"(first: data row {int(np.flatnonzero(empty)[0]) + 1})",
            "fill those cells or remove the rows",
        )
    return np.array([_value(v) for v in series.tolist()], dtype=np.str_)


def _class_order(values: np.ndarray) -> tuple[str, ...]:
    """Distinct values, numerically sorted when all are numbers, else as strings."""
    distinct = sorted(set(values.tolist()))
    try:
        return tuple(sorted(distinct, key=float))
    except ValueError:
        return tuple(distinct)


def encode_categories(series: pd.Series, categories: Sequence[str]) -> np.ndarray:
    """Each cell's index in ``categories`` as float32; NaN for an empty cell, -1 for a value
    that is not among them (encoded as all zeros later)."""
    lookup = {c: i for i, c in enumerate(categories)}
    out = np.full(len(series), np.nan, dtype=np.float32)
    for i, v in enumerate(series.tolist()):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        out[i] = lookup.get(_value(v), -1)
    return out


def numeric_float32(s: pd.Series) -> np.ndarray:
    """A numeric column as float32, empty cells NaN: a value beyond float32's range
    (``1e300``) becomes +-inf, for the caller's check of missing and infinite values."""
    wide = s.to_numpy(dtype=np.float64, na_value=np.nan)
    with np.errstate(over="ignore"):  # the overflow is expected; the missing check follows
        out: np.ndarray = wide.astype(np.float32)
    return out


def _features(
    frame: pd.DataFrame, spec: TableSpec, file: Path
) -> tuple[np.ndarray, tuple[str, ...], tuple[tuple[int, tuple[str, ...]], ...]]:
    import pandas as pd

    special = {c for c in (spec.label_column, spec.client_column, spec.split_column) if c}
    for c in spec.drop_columns:
        _need(frame, c, "data.drop_columns entry", file)
    if spec.features is not None:
        for c in spec.features:
            _need(frame, c, "data.features entry", file)
            if c in special:
                raise DataError(
                    f"table: data.features lists '{c}', which is the label, client or split column",
                    f"remove '{c}' from data.features",
                )
        names = [c for c in spec.features if c not in spec.drop_columns]
    else:
        names = [c for c in frame.columns if c not in special and c not in spec.drop_columns]
    if not names:
        raise DataError(f"table: '{file}' has no feature column left", "check data.features")
    cols: list[np.ndarray] = []
    categorical: list[tuple[int, tuple[str, ...]]] = []
    for j, name in enumerate(names):
        s = frame[name]
        if pd.api.types.is_bool_dtype(s) or pd.api.types.is_numeric_dtype(s):
            cols.append(numeric_float32(s))
            continue
        if pd.api.types.is_datetime64_any_dtype(s) or pd.api.types.is_timedelta64_dtype(s):
            raise DataError(
                f"table: column '{name}' of '{file}' holds dates or times",
                f"add '{name}' to data.drop_columns, or convert it to numbers",
            )
        seen = s.dropna()
        cats = tuple(sorted({_value(v) for v in seen.tolist()}))
        if len(cats) > MAX_CATEGORIES:
            raise DataError(
                f"table: text column '{name}' of '{file}' has {len(cats):,} distinct values, "
                f"more than the {MAX_CATEGORIES} a categorical feature may have (an identifier?)",
                f"add '{name}' to data.drop_columns",
            )
        cols.append(encode_categories(s, cats))
        categorical.append((j, cats))
    return np.stack(cols, axis=1), tuple(names), tuple(categorical)


def _split(frame: pd.DataFrame, column: str, file: Path) -> np.ndarray:
    """True for the rows of the test split."""
    raw = frame[column]
    values = np.array([str(v).strip().lower() for v in raw.tolist()])
    bad = ~np.isin(values, SPLIT_VALUES) | raw.isna().to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(
            f"table: data.split_column '{column}' holds {raw.iloc[i]!r} in data row {i + 1} of "
            f"'{file}'",
            "write 'train' or 'test' in every row",
        )
    test: np.ndarray = values == "test"
    if test.all() or not test.any():
        which = "train" if test.all() else "test"
        raise DataError(
            f"table: data.split_column '{column}' marks no row '{which}' in '{file}'",
            "mark both training and test rows, or drop data.split_column",
        )
    return test


@lru_cache(maxsize=4)
def _load_cached(file: str, size: int, mtime_ns: int, spec: TableSpec) -> Dataset:
    del size, mtime_ns
    path = Path(file)
    frame = read_table(path)
    if spec.label_column is None:
        raise DataError(
            "table: data.label_column is not set",
            "set it to the column that holds each row's label (1 = anomaly, or class values)",
        )
    _need(frame, spec.label_column, "data.label_column", path)
    for key, col in (
        ("data.client_column", spec.client_column),
        ("data.split_column", spec.split_column),
    ):
        if col is not None:
            _need(frame, col, key, path)
    labels = label_values(frame[spec.label_column], "data.label_column", path)
    classes = _class_order(labels)
    if len(classes) < 2:
        raise DataError(
            f"table: data.label_column '{spec.label_column}' holds one value ({classes[0]!r}) "
            f"in '{path}'",
            "an anomaly detection set needs normal and anomalous rows",
        )
    y = np.array([classes.index(v) for v in labels], dtype=np.int64)
    x, names, categorical = _features(frame, spec, path)
    group = None
    if spec.client_column is not None:
        group = label_values(frame[spec.client_column], "data.client_column", path)
    if spec.split_column is None:
        return Dataset(
            "table",
            x,
            y,
            "vector",
            classes,
            columns=names,
            by_value=True,
            group=group,
            categorical=categorical,
        )
    test = _split(frame, spec.split_column, path)
    return Dataset(
        "table",
        x[~test],
        y[~test],
        "vector",
        classes,
        x_test=x[test],
        y_test=y[test],
        columns=names,
        by_value=True,
        group=None if group is None else group[~test],
        group_test=None if group is None else group[test],
        categorical=categorical,
    )


@register_dataset(
    "table",
    description="your own table: data.path = .csv/.tsv/.parquet, data.label_column "
    "(optional client_column, features, drop_columns, split_column)",
    kind="vector",
    options=("label_column", "client_column", "features", "drop_columns", "split_column"),
)
def load_table(
    path: str | None = None,
    size: int | None = None,
    *,
    label_column: str | None = None,
    client_column: str | None = None,
    features: Sequence[str] | None = None,
    drop_columns: Sequence[str] | None = None,
    split_column: str | None = None,
) -> Dataset:
    """The table at ``path`` (see the module docstring)."""
    del size
    if path is None:
        raise DataError(
            "data set 'table' needs data.path", "set data.path to a .csv, .tsv or .parquet file"
        )
    spec = TableSpec(
        label_column,
        client_column,
        None if features is None else tuple(features),
        tuple(drop_columns or ()),
        split_column,
    )
    p = Path(path).expanduser()
    if not p.is_file():
        read_table(p)  # the one-line error of a missing file or a wrong suffix
    st = p.stat()
    return _load_cached(str(p.resolve()), st.st_size, st.st_mtime_ns, spec)
