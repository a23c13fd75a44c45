"""Score new data with a finished run's detector: what ``fedad score`` does.

``DATA`` is a table file (``.csv``, ``.tsv``, ``.parquet``) for a run on vectors, or a folder
of images (searched recursively) for a run on images. It is preprocessed exactly as the run's
training data were (:class:`fedad.rundir.inputs.Inputs`, the run's ``inputs.json``) and
scored by one client's detector; a row is flagged when its score exceeds that detector's
threshold (the quantile of its own training scores, as in the run). Which client's detector
scores a row: ``client`` when given (a client number, or a natural client's id value);
otherwise, for a table holding the run's ``data.client_column``, each row's own client;
otherwise client 0.
The run directory is untrusted: it is read as :func:`fedad.load` reads it, so a symbolic
link anywhere in its structure is a one-line error before anything of it is read.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedad.core.detector import BaseDetector, flag
from fedad.core.errors import FedadError
from fedad.data.image_folder import list_images
from fedad.data.table import TABLE_SUFFIXES, label_values, read_table
from fedad.rundir.files import reading
from fedad.rundir.inputs import Inputs, read_inputs
from fedad.rundir.layout import INPUTS_FILE
from fedad.rundir.load import Run, client_count, load_run

__all__ = ["Scored", "score_data", "scores_csv"]


@dataclass(frozen=True)
class Scored:
    """One score per input: its ``ids`` (row number, an id column's value, or the image's
    path relative to the folder), the ``clients`` whose detector scored it, ``scores`` and
    ``flags`` (1 = anomaly at that detector's threshold)."""

    ids: list[str]
    clients: list[int]
    scores: np.ndarray
    flags: np.ndarray
    client_names: tuple[str, ...] = ()
    """The run's natural client ids (``client_names[k]`` is client ``k``'s), if any."""


def _client(run: Run, value: str) -> int:
    """The client number ``--client value`` names: a natural client's id value, or a
    number below the run's client count."""
    inputs = run.inputs
    if inputs is not None and (k := inputs.client_of(value)) is not None:
        return k
    n = client_count(run.config, run.metrics)
    if value.isascii() and value.isdigit() and (len(value) <= 9 and int(value) < n):
        return int(value)
    names = ", ".join(inputs.client_names[:8]) if inputs and inputs.client_names else ""
    shown = value if len(value) <= 40 else value[:40] + "..."
    raise FedadError(
        f"--client '{shown}' is not a client of the run, which had {n} clients",
        f"give a client number from 0 to {n - 1}{' or one of ' + names if names else ''}",
    )


def _check_fit(inputs: Inputs, det: BaseDetector, run_dir: str | Path, label: str) -> None:
    """The run's ``inputs.json`` must describe what the detector takes (both come from the
    run directory, untrusted): else one line naming both, before any scoring."""
    spec = det.expected_input()
    if spec is None:
        return
    kind, shape = spec
    if kind == "image":
        fits = inputs.kind == "image" and tuple(inputs.feature_shape) == shape
    else:  # "vector": table rows; "flat": any kind, flattened
        same_kind = inputs.kind == "vector" if kind == "vector" else inputs.kind != "graph"
        fits = same_kind and inputs.width == math.prod(shape)
    if not fits:
        what = "vectors" if kind == "vector" else "samples"
        takes = f"images of shape {shape}" if kind == "image" else f"{what} of {shape[0]} values"
        raise FedadError(
            f"'{Path(run_dir) / INPUTS_FILE}' describes {inputs.kind} data of shape "
            f"{tuple(inputs.feature_shape)}, but method '{label}''s detector takes {takes}",
            "the run directory is damaged: run the experiment again",
        )


def _score(det: BaseDetector, x: np.ndarray, label: str, client: int) -> np.ndarray:
    """``det.score(x)`` as float64; a detector that cannot score the inputs (a checkpoint
    at odds with its own run) is a one-line error, not a traceback."""
    try:
        return np.asarray(det.score(x), dtype=np.float64)
    except FedadError:
        raise
    except (ValueError, RuntimeError, TypeError, IndexError) as err:
        reason = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
        raise FedadError(
            f"method '{label}''s detector of client {client} cannot score these inputs: {reason}",
            "check that the data are of the kind the run was trained on",
        ) from None


def score_data(
    run_dir: str | Path,
    data: str | Path,
    label: str,
    client: str | None = None,
    id_column: str | None = None,
    skip_bad_files: bool = False,
) -> Scored:
    """Score ``data`` with method ``label`` of the run in ``run_dir`` (module docstring)."""
    run = load_run(run_dir)
    inputs = run.inputs
    if inputs is None:  # absent: an error (a link planted since: refused)
        with reading(Path(run_dir), walk=False):
            inputs = read_inputs(run_dir)
    if label not in run.detectors and label not in run.node_models:
        raise FedadError(
            f"run '{run_dir}' has no method '{label}'", f"methods: {', '.join(run.detectors)}"
        )
    path = Path(data).expanduser()
    fixed = None if client is None else _client(run, client)
    if path.is_dir():
        files = _image_files(path, skip_bad_files)
        x, read = inputs.images(files, path, skip_bad_files=skip_bad_files)
        ids = [p.relative_to(path).as_posix() for p in read]
        per_row = np.full(len(ids), 0 if fixed is None else fixed, dtype=np.int64)
    elif path.suffix.lower() in TABLE_SUFFIXES:
        frame = read_table(path, "fedad score")
        ids = _row_ids(frame, id_column, path)
        x = inputs.table(frame, f"'{path}'")
        per_row = np.full(len(ids), 0 if fixed is None else fixed, dtype=np.int64)
        col = inputs.client_column
        if fixed is None and col and col in frame.columns:
            values = label_values(frame[col], "the client column", path)
            for i, v in enumerate(values):
                k = inputs.client_of(str(v))
                if k is None:
                    raise FedadError(
                        f"'{path}': data row {i + 1} names client {str(v)!r} in column "
                        f"'{col}', which the run did not have",
                        "score those rows with --client",
                    )
                per_row[i] = k
    else:
        raise FedadError(
            f"'{path}' is neither a folder of images nor a .csv, .tsv or .parquet file",
            "give an image folder or a table file",
        )
    scores = np.empty(len(ids), dtype=np.float64)
    flags = np.empty(len(ids), dtype=np.int64)
    for k in np.unique(per_row):
        det = run.detector(label, int(k))
        _check_fit(inputs, det, run_dir, label)
        rows = np.flatnonzero(per_row == k)
        s = _score(det, x[rows], label, int(k))
        scores[rows] = s
        flags[rows] = flag(s, det.threshold_)
    return Scored(ids, [int(k) for k in per_row], scores, flags, inputs.client_names)


def _image_files(folder: Path, skip_bad_files: bool) -> list[Path]:
    return list_images(folder, skip_bad_files=skip_bad_files)


def _row_ids(frame: object, id_column: str | None, path: Path) -> list[str]:
    import pandas as pd

    assert isinstance(frame, pd.DataFrame)
    if id_column is None:
        return [str(i) for i in range(len(frame))]
    if id_column not in frame.columns:
        raise FedadError(f"'{path}' has no column '{id_column}'", "fix --id-column")
    return [str(v) for v in frame[id_column].tolist()]


def scores_csv(scored: Scored) -> str:
    """``id,client,score,anomaly`` rows (``client`` is the natural id value when the run
    has one)."""
    client_names = scored.client_names
    buf = io.StringIO(newline="")
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["id", "client", "score", "anomaly"])
    for i, k, s, f in zip(scored.ids, scored.clients, scored.scores, scored.flags, strict=True):
        who = client_names[k] if k < len(client_names) else str(k)
        w.writerow([i, who, repr(float(s)), int(f)])
    return buf.getvalue()
