"""How a run turned raw data into model inputs, saved so that new data is scored the same way.

A run writes ``inputs.json`` beside ``metrics.json``: the data kind and per-sample shape,
a table's feature columns and the categories kept for each categorical column, the means
that ``data.missing = "impute-mean"`` filled in, and the standardization mean and deviation
(all computed from the clients' training data). :meth:`Inputs.table` applies exactly those
steps to a DataFrame, :meth:`Inputs.images` to image files. The file is untrusted when read
back (:func:`read_inputs`): every field is checked (statistics within float32's range, a
deviation at least :data:`MIN_STD`), and a problem is a one-line
:class:`~fedad.core.errors.FedadError` naming the file. In new data a value beyond float32's
range is infinite (missing), and a row that standardizes beyond that range is an error.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedad.core.errors import FedadError
from fedad.data.encoding import Encoding
from fedad.data.image_folder import read_images
from fedad.data.table import encode_categories, numeric_float32
from fedad.rundir.files import read_text
from fedad.rundir.layout import INPUTS_FILE

if TYPE_CHECKING:
    import pandas as pd

    from fedad.config import ExperimentConfig
    from fedad.core.types import Federation

__all__ = ["INPUTS_FILE", "Inputs", "read_inputs"]

MAX_INPUTS_BYTES = 64 * 2**20
_DAMAGED = "the run directory is damaged: run the experiment again"
_WIDTH_CAP = 10_000_000
_F32_MAX = float(np.finfo(np.float32).max)
MIN_STD = 1e-12
"""Smallest standardization deviation read back: the federation replaces a deviation at or
below ``1e-12 * max(1, |mean|)`` by 1, so a saved one is larger."""


@dataclass(frozen=True)
class Inputs:
    """The preprocessing of a run (see the module docstring).

    ``columns`` are the raw feature columns (empty for data without named features);
    ``categories`` the categories kept per categorical column; ``impute_means``, ``mean``
    and ``std`` have one entry per model feature (after one-hot encoding), or are ``None``
    when the run did not impute or standardize. ``client_column`` and ``client_names`` are
    those of a natural partition (``client_names[k]`` is client ``k``'s id value).
    """

    kind: str
    feature_shape: tuple[int, ...]
    dataset: str = ""
    columns: tuple[str, ...] = ()
    categories: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    impute_means: np.ndarray | None = None
    mean: np.ndarray | None = None
    std: np.ndarray | None = None
    client_column: str = ""
    client_names: tuple[str, ...] = ()

    # -- building and saving ---------------------------------------------------------------
    @classmethod
    def from_federation(cls, cfg: ExperimentConfig, fed: Federation) -> Inputs:
        """The preprocessing ``fed`` was built with (from its notes)."""
        notes = fed.notes
        enc = notes.get("encoding")
        columns: Sequence[Any] = notes.get("columns", ())  # type: ignore[assignment]
        categories: dict[str, tuple[str, ...]] = {}
        if isinstance(enc, dict):
            columns = enc["columns"]
            categories = {str(k): tuple(v) for k, v in enc["categories"].items()}

        def arr(key: str) -> np.ndarray | None:
            v = notes.get(key)
            return None if v is None else np.asarray(v, dtype=np.float64)

        names = notes.get("client_names", [])
        return cls(
            kind=fed.kind,
            feature_shape=tuple(fed.feature_shape),
            dataset=fed.name,
            columns=tuple(str(c) for c in columns),
            categories=categories,
            impute_means=arr("imputed_means"),
            mean=arr("standardize_mean"),
            std=arr("standardize_std"),
            client_column=cfg.data.client_column or "",
            client_names=tuple(str(n) for n in names) if isinstance(names, list) else (),
        )

    def to_json(self) -> str:
        def lst(a: np.ndarray | None) -> list[float] | None:
            return None if a is None else [float(v) for v in a]

        return json.dumps(
            {
                "kind": self.kind,
                "feature_shape": list(self.feature_shape),
                "dataset": self.dataset,
                "columns": list(self.columns),
                "categories": {k: list(v) for k, v in self.categories.items()},
                "impute_means": lst(self.impute_means),
                "mean": lst(self.mean),
                "std": lst(self.std),
                "client_column": self.client_column,
                "client_names": list(self.client_names),
            },
            indent=1,
        )

    @property
    def width(self) -> int:
        return int(np.prod(self.feature_shape)) if self.feature_shape else 0

    # -- applying ----------------------------------------------------------------------------
    def table(self, frame: pd.DataFrame, where: str = "the table") -> np.ndarray:
        """The rows of ``frame`` as model inputs ``(N, width)`` float32, preprocessed as in
        training: the run's feature columns (others ignored), categories one-hot encoded
        with the training categories (others all zeros), missing values imputed with the
        training means when the run did so (else an error), standardized."""
        import pandas as pd

        if self.kind != "vector":
            raise FedadError(
                f"this run's models take {self.kind} data, not table rows",
                "score an image folder" if self.kind == "image" else "score data of its kind",
            )
        if not self.columns:
            raise FedadError(
                f"this run's data set '{self.dataset}' has no named features, so table "
                "columns cannot be matched to them",
                "score arrays with detector.score(x)",
            )
        absent = [c for c in self.columns if c not in frame.columns]
        if absent:
            more = f" and {len(absent) - 1} more" if len(absent) > 1 else ""
            raise FedadError(
                f"{where} lacks the feature column '{absent[0]}'{more}",
                "give every feature column the run was trained on",
            )
        cols: list[np.ndarray] = []
        index = {c: j for j, c in enumerate(self.columns)}
        cat_idx = {index[c]: v for c, v in self.categories.items() if c in index}
        for j, name in enumerate(self.columns):
            s = frame[name]
            if j in cat_idx:
                cols.append(encode_categories(s, cat_idx[j]))
                continue
            numbers = pd.to_numeric(s, errors="coerce")
            bad = numbers.isna().to_numpy() & s.notna().to_numpy()
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise FedadError(
                    f"{where}: column '{name}' holds {s.iloc[i]!r} in data row {i + 1}, not a "
                    "number",
                    "fix the cell (the run read this column as numbers)",
                )
            cols.append(numeric_float32(numbers))  # beyond float32: infinite, as in training
        raw = np.stack(cols, axis=1) if cols else np.zeros((len(frame), 0), np.float32)
        encoding = Encoding(self.columns, cat_idx)
        x = encoding.apply(raw, cat_idx) if cat_idx else raw
        if x.shape[1] != self.width:
            raise FedadError(
                f"{where} encodes to {x.shape[1]} features but the run's models take {self.width}",
                _DAMAGED,
            )
        missing = ~np.isfinite(x)
        if missing.any():
            if self.impute_means is None:
                rows = int(missing.any(axis=1).sum())
                raise FedadError(
                    f"{where} has missing or infinite values in {rows} rows (first: data row "
                    f"{int(np.flatnonzero(missing.any(axis=1))[0]) + 1})",
                    "fill them; the run was trained with data.missing = 'error' or 'drop'",
                )
            x = np.where(missing, self.impute_means[None, :].astype(np.float32), x)
        if self.mean is not None and self.std is not None:
            x = self._standardized(x, where, encoding.encoded_columns)
        return np.ascontiguousarray(x, dtype=np.float32)

    def _standardized(self, x: np.ndarray, where: str, names: Sequence[str]) -> np.ndarray:
        """``(x - mean) / std`` in float32, exactly as the federation standardized the
        training data; a result beyond float32's range is a one-line error naming the row."""
        assert self.mean is not None and self.std is not None
        with np.errstate(over="ignore"):  # an overflow is expected here, and checked below
            z = (x - self.mean.astype(np.float32)) / self.std.astype(np.float32)
        beyond = ~np.isfinite(z)
        if beyond.any():
            i, j = (int(v) for v in np.argwhere(beyond)[0])
            raise FedadError(
                f"{where}: data row {i + 1}'s '{names[j]}' standardizes beyond the float32 "
                "range the run's models take",
                "check that value: it lies far outside the training data",
            )
        return np.asarray(z, dtype=np.float32)

    def images(
        self, files: Sequence[Path], root: Path, skip_bad_files: bool = False
    ) -> tuple[np.ndarray, list[Path]]:
        """Image files as model inputs ``(N, C, H, W)`` in [0, 1]: converted to the run's
        channels and resized to its size, as the ``image_folder`` loader does."""
        if self.kind != "image" or len(self.feature_shape) != 3:
            raise FedadError(
                f"this run's models take {self.kind} data, not images",
                "score a table file" if self.kind == "vector" else "score data of its kind",
            )
        c, h, w = self.feature_shape
        return read_images(files, root, (c, h, w), skip_bad_files=skip_bad_files)

    def client_of(self, name: str) -> int | None:
        """Client number of a natural client id value (``None``: not a client of the run)."""
        try:
            return self.client_names.index(name)
        except ValueError:
            return None


# --------------------------------------------------------------------------- reading


def _fail(path: Path, what: str) -> FedadError:
    return FedadError(f"'{path}': {what}", _DAMAGED)


def _floats(raw: Any, path: Path, key: str, n: int) -> np.ndarray | None:
    """``n`` numbers within float32's range (statistics of float32 training data are), as
    float64; ``None`` stays ``None``."""
    if raw is None:
        return None
    if (
        not isinstance(raw, list)
        or len(raw) != n
        or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in raw)
        or not all(math.isfinite(v) and abs(v) <= _F32_MAX for v in raw)
    ):
        raise _fail(path, f"'{key}' is not {n} finite numbers within float32's range")
    return np.asarray(raw, dtype=np.float64)


def _strings(raw: Any, path: Path, key: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(v, str) and len(v) < 4096 for v in raw):
        raise _fail(path, f"'{key}' is not a list of strings")
    return tuple(raw)


def _distinct(names: tuple[str, ...], path: Path, key: str) -> tuple[str, ...]:
    """``names``, which fedad saves without repeats: a name written twice (one input, or
    one one-hot column, twice) is a one-line error naming it."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise _fail(path, f"'{key}' holds '{name}' twice")
        seen.add(name)
    return names


def read_inputs(run_dir: str | Path) -> Inputs:
    """The :class:`Inputs` a run saved (``inputs.json``), checked field by field."""
    path = Path(run_dir) / INPUTS_FILE
    if not path.is_file():
        raise FedadError(
            f"'{run_dir}' has no {INPUTS_FILE} (the preprocessing of its data)",
            "runs made before fedad saved it cannot score new data: run the experiment again",
        )
    if path.stat().st_size > MAX_INPUTS_BYTES:
        raise _fail(path, "too large")
    try:
        raw = json.loads(read_text(path, MAX_INPUTS_BYTES))  # never through a link
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise _fail(path, f"not readable JSON ({type(err).__name__})") from None
    if not isinstance(raw, dict):
        raise _fail(path, "not a JSON object")
    kind = raw.get("kind")
    shape = raw.get("feature_shape")
    if kind not in ("vector", "image", "graph"):
        raise _fail(path, "'kind' is not vector, image or graph")
    if (
        not isinstance(shape, list)
        or not 1 <= len(shape) <= 3
        or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in shape)
        or math.prod(shape) > _WIDTH_CAP
    ):
        raise _fail(path, "'feature_shape' is not a list of 1 to 3 positive sizes")
    columns = _distinct(_strings(raw.get("columns", []), path, "columns"), path, "columns")
    cats = raw.get("categories", {})
    if not isinstance(cats, dict) or not all(c in columns for c in cats):
        raise _fail(path, "'categories' does not map feature columns to categories")
    categories = {
        str(k): _distinct(_strings(v, path, f"categories.{k}"), path, f"categories.{k}")
        for k, v in cats.items()
    }
    width = math.prod(shape)
    dataset, client_column = raw.get("dataset", ""), raw.get("client_column", "")
    if not isinstance(dataset, str) or not isinstance(client_column, str):
        raise _fail(path, "'dataset' or 'client_column' is not a string")
    std = _floats(raw.get("std"), path, "std", width)
    if std is not None and np.any(std <= 0):
        raise _fail(path, "'std' has a value that is not positive")
    if std is not None and np.any(std < MIN_STD):
        raise _fail(path, f"'std' has a value below {MIN_STD:g}, which fedad never saves")
    return Inputs(
        kind=kind,
        feature_shape=tuple(shape),
        dataset=dataset,
        columns=columns,
        categories=categories,
        impute_means=_floats(raw.get("impute_means"), path, "impute_means", width),
        mean=_floats(raw.get("mean"), path, "mean", width),
        std=std,
        client_column=client_column,
        client_names=_strings(raw.get("client_names", []), path, "client_names"),
    )
