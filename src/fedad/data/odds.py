"""ODDS-style tabular anomaly-detection sets built from R's mlbench data (no R needed).

The Debian package ``r-cran-mlbench`` ships the UCI tables as ``.rda`` files; PyPI ``rdata``
reads them. Each loader applies the ODDS definition (http://odds.cs.stonybrook.edu/) of
normal and anomaly and returns raw (un-standardized) ``float32`` features with
``fixed_split=True`` and ``y`` in {0: normal, 1: anomaly}:

- ``odds_shuttle`` (mlbench ``Shuttle``): 49097 x 9; ``Rad.Flow`` normal, ``High`` dropped,
  the five small classes anomalies (7.2%).
- ``odds_satellite`` (``Satellite``): 6435 x 36; the three smallest classes (cotton crop,
  damp grey soil, vegetation stubble) anomalies (31.6%).
- ``odds_breastw`` (``BreastCancer``): 683 x 9; rows with missing values and ``Id`` dropped,
  factor levels as numbers, malignant anomalies (35.0%).
- ``odds_ionosphere`` (``Ionosphere``): 351 x 33; constant ``V2`` dropped, ``V1`` as a number,
  ``bad`` anomalies (35.9%).

Rows keep the order of the ``.rda`` file. Files are searched in ``data.path`` when given
(the folder holding the ``.rda`` files, or mlbench's package folder) and otherwise in the
usual R library folders.
"""

from __future__ import annotations

import os
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from fedad.core.errors import DataError
from fedad.core.types import Dataset
from fedad.data.registry import register_dataset

__all__ = [
    "R_LIBRARY_DIRS",
    "find_rda",
    "load_odds_breastw",
    "load_odds_ionosphere",
    "load_odds_satellite",
    "load_odds_shuttle",
    "read_rda_table",
]

R_LIBRARY_DIRS: tuple[str, ...] = (
    "/usr/lib/R/site-library/mlbench/data",
    "/usr/lib/R/library/mlbench/data",
    "/usr/local/lib/R/site-library/mlbench/data",
    "/usr/local/lib/R/library/mlbench/data",
)

_CLASSES = ("normal", "anomaly")


def _search_dirs(path: str | None) -> list[Path]:
    if path is not None:
        p = Path(path).expanduser()
        return [p, p / "data", p / "mlbench" / "data"]
    return [Path(d) for d in R_LIBRARY_DIRS]


def find_rda(filename: str, path: str | None, dataset: str) -> Path:
    """Where ``filename`` is: in ``path`` (or its ``data/``) or the R library folders."""
    dirs = _search_dirs(path)
    for d in dirs:
        if (d / filename).is_file():
            return d / filename
    shown = ", ".join(str(d) for d in (dirs[:1] if path is not None else dirs))
    raise DataError(
        f"{dataset}: {filename} not found (looked in {shown})",
        "install it with `apt-get install r-cran-mlbench`, or set data.path to a folder "
        f"holding {filename}",
    )


@lru_cache(maxsize=8)
def _read_rda_cached(path: str, mtime_ns: int) -> Any:
    del mtime_ns
    import rdata

    try:
        with warnings.catch_warnings():
            # "Unknown encoding" on every mlbench file; file-type guesses on broken ones.
            warnings.simplefilter("ignore", UserWarning)
            return rdata.read_rda(path)
    except Exception as err:  # rdata raises many kinds on a malformed file
        msg = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DataError(f"cannot read '{path}' as an R data file: {msg}") from None


def read_rda_table(path: Path, table: str) -> Any:
    """The data frame ``table`` stored in the ``.rda`` file at ``path`` (cached)."""
    objects = _read_rda_cached(os.path.abspath(path), path.stat().st_mtime_ns)
    if table not in objects:
        raise DataError(
            f"'{path}' holds {', '.join(map(str, objects)) or 'nothing'}, not the table '{table}'"
        )
    return objects[table]


def _numeric(frame: Any, where: str) -> np.ndarray:
    """All columns as float32; factor columns through their level labels (``'5'`` -> 5.0)."""
    cols = []
    for col in frame.columns:
        series = frame[col]
        if str(series.dtype) == "category":
            series = series.astype(str)
        try:
            cols.append(np.asarray(series, dtype=np.float64))
        except ValueError:
            raise DataError(f"{where}: column '{col}' is not numeric") from None
    return np.stack(cols, axis=1).astype(np.float32)


def _dataset(name: str, x: np.ndarray, anomaly: np.ndarray, columns: Any = ()) -> Dataset:
    return Dataset(
        name,
        np.ascontiguousarray(x),
        anomaly.astype(np.int64),
        "vector",
        _CLASSES,
        fixed_split=True,
        columns=tuple(str(c) for c in columns),
    )


def _table(filename: str, path: str | None, name: str, columns: list[str]) -> Any:
    file = find_rda(filename, path, name)
    frame = read_rda_table(file, filename.removesuffix(".rda"))
    absent = [c for c in columns if c not in frame.columns]
    if absent:
        raise DataError(f"'{file}' lacks the columns {absent} of mlbench's {filename}")
    return frame


_SHUTTLE_NORMAL = "Rad.Flow"
_SHUTTLE_DROPPED = "High"


@register_dataset(
    "odds_shuttle",
    description="ODDS shuttle: 49097 x 9, 7% anomalies (Debian r-cran-mlbench, or data.path)",
    kind="vector",
)
def load_odds_shuttle(path: str | None = None, size: int | None = None) -> Dataset:
    """Statlog Shuttle: class Rad.Flow normal, High discarded, the other five anomalies."""
    frame = _table("Shuttle.rda", path, "odds_shuttle", ["Class"])
    cls = frame["Class"].astype(str).to_numpy()
    keep = cls != _SHUTTLE_DROPPED
    features = frame.drop(columns=["Class"])
    x = _numeric(features, "Shuttle.rda")[keep]
    return _dataset("odds_shuttle", x, cls[keep] != _SHUTTLE_NORMAL, features.columns)


_SATELLITE_ANOMALIES = ("cotton crop", "damp grey soil", "vegetation stubble")


@register_dataset(
    "odds_satellite",
    description="ODDS satellite: 6435 x 36, 32% anomalies (Debian r-cran-mlbench, or data.path)",
    kind="vector",
)
def load_odds_satellite(path: str | None = None, size: int | None = None) -> Dataset:
    """Statlog Landsat: the three smallest classes are anomalies, the other three normal."""
    frame = _table("Satellite.rda", path, "odds_satellite", ["classes"])
    cls = frame["classes"].astype(str).to_numpy()
    features = frame.drop(columns=["classes"])
    x = _numeric(features, "Satellite.rda")
    return _dataset("odds_satellite", x, np.isin(cls, _SATELLITE_ANOMALIES), features.columns)


@register_dataset(
    "odds_breastw",
    description="ODDS breastw: 683 x 9, 35% anomalies (Debian r-cran-mlbench, or data.path)",
    kind="vector",
)
def load_odds_breastw(path: str | None = None, size: int | None = None) -> Dataset:
    """Wisconsin breast cancer: rows with NA and Id dropped, malignant anomalous."""
    frame = _table("BreastCancer.rda", path, "odds_breastw", ["Id", "Class"])
    frame = frame.dropna()
    cls = frame["Class"].astype(str).to_numpy()
    features = frame.drop(columns=["Id", "Class"])
    x = _numeric(features, "BreastCancer.rda")
    return _dataset("odds_breastw", x, cls == "malignant", features.columns)


@register_dataset(
    "odds_ionosphere",
    description="ODDS ionosphere: 351 x 33, 36% anomalies (Debian r-cran-mlbench, or data.path)",
    kind="vector",
)
def load_odds_ionosphere(path: str | None = None, size: int | None = None) -> Dataset:
    """Ionosphere radar returns: constant V2 dropped, V1 as a number, 'bad' anomalous."""
    frame = _table("Ionosphere.rda", path, "odds_ionosphere", ["V2", "Class"])
    cls = frame["Class"].astype(str).to_numpy()
    features = frame.drop(columns=["V2", "Class"])
    x = _numeric(features, "Ionosphere.rda")
    return _dataset("odds_ionosphere", x, cls == "bad", features.columns)
