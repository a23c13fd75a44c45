"""TU Dortmund graph data sets (MUTAG, PROTEINS, IMDB-BINARY, ...) from a user folder.

``data.path`` is the data set's folder, as unpacked from https://chrsmrrs.github.io/datasets/
(e.g. ``MUTAG/``). ``NAME`` is taken from the one ``NAME_A.txt`` in the folder; the loader
reads, all comma-separated text with one record per line:

- ``NAME_A.txt`` (required): one edge ``i, j`` per line, 1-based node ids over the whole set;
- ``NAME_graph_indicator.txt`` (required): line ``i`` is the graph id (1-based) of node ``i``;
- ``NAME_graph_labels.txt`` (required): line ``g`` is the integer label of graph ``g``;
- ``NAME_node_labels.txt`` (optional): one or more integer columns per node;
- ``NAME_node_attributes.txt`` (optional): one or more float columns per node.

Edge labels and attributes, and graph attributes, are not read.

**Node features** (``float32``, the same width for every graph): the node attributes when
present; else the node labels one-hot (each column's distinct values over the whole set,
in sorted order, one column each; several label columns are concatenated); else the node's
degree one-hot, capped (:data:`~fedad.data.graphs.features.DEGREE_CAP`: degrees 0-31 and a
last column for 32 or more).

**Edges** are made undirected: every edge of ``NAME_A.txt`` in both directions, duplicates
removed; a self-loop in the file is kept once, none is added.

**Labels**: ``classes`` are the distinct raw graph labels as strings, in increasing numeric
order, and ``y`` is the index into it. MUTAG's labels ``-1`` and ``1`` become classes
``("-1", "1")``, so ``normal = [0]`` means the graphs labelled ``-1``. There is no official
test split.

The files are untrusted input. Each is read only up to :data:`MAX_FILE_BYTES`, must be
ASCII, and every value is checked: counts agree between files, node ids are in range, both
ends of an edge lie in one graph, every graph has a node, numbers are finite and widths
bounded (:data:`MAX_WIDTH`, :data:`MAX_FEATURE_VALUES`). A problem is a one-line
:class:`~fedad.core.errors.DataError` naming the file and the line. Nothing is executed or
unpickled. Decoded folders are cached in-process, keyed on the files' sizes and times.

``data.sources`` names each data set once, so two TU folders cannot both be ``tu`` sources
of one run: :func:`register_tu` registers a folder under its own name (``"mutag"``,
``"proteins"``), which ``sources`` and ``by-source`` then treat as separate data sets.
"""

from __future__ import annotations

import dataclasses
import io
import os
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Literal

import numpy as np

from fedad.core.errors import ConfigError, DataError
from fedad.core.types import Dataset, GraphSet
from fedad.data.graphs.features import one_hot_degree, undirected
from fedad.data.registry import register_dataset

__all__ = [
    "MAX_FEATURE_VALUES",
    "MAX_FILE_BYTES",
    "MAX_WIDTH",
    "load_tu",
    "read_tu",
    "register_tu",
]

MAX_FILE_BYTES = 256 * 2**20
"""Largest file read (PROTEINS' largest file has about 2 MB, REDDIT-MULTI-12K's about 90 MB)."""
MAX_WIDTH = 4096
"""Most node-feature columns (attributes, or one-hot node label values)."""
MAX_FEATURE_VALUES = 2**27
"""Most node-feature values in all (nodes x width; 512 MiB of float32)."""
MAX_CLASSES = 10_000
HOW_TO_GET = (
    "set data.path to the folder of a TU data set, e.g. MUTAG/ holding MUTAG_A.txt "
    "(https://chrsmrrs.github.io/datasets/; nothing is downloaded)"
)
_SUFFIXES = ("A", "graph_indicator", "graph_labels", "node_labels", "node_attributes")

Kind = Literal["int", "float"]


# --------------------------------------------------------------------------- reading files


def _read_text(file: Path) -> str:
    where = f"'{file}'"
    try:
        with open(file, "rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        raise DataError(f"cannot read {where}: {err.strerror or err}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise DataError(
            f"{where} is larger than the {MAX_FILE_BYTES:,} bytes fedad reads from a TU file",
            "is it the right folder?",
        )
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise DataError(
            f"{where}: line {line} has the byte {raw[err.start]:#04x}; TU files are plain "
            "ASCII numbers",
            "is it the right file?",
        ) from None


def _lines(text: str) -> list[tuple[int, str]]:
    """``(line number, stripped line)`` of the non-blank lines (used only to name a line)."""
    out = []
    for i, line in enumerate(io.StringIO(text), start=1):
        s = line.strip()
        if s:
            out.append((i, s))
    return out


def _line_of_row(text: str, row: int) -> int:
    """The 1-based line number of the ``row``-th (0-based) non-blank line."""
    seen = -1
    for i, line in enumerate(io.StringIO(text), start=1):
        if line.strip():
            seen += 1
            if seen == row:
                return i
    return seen + 2


def _shown(text: str, limit: int = 30) -> str:
    r = repr(text)
    return r if len(r) <= limit else r[: limit - 3] + "..."


def _bad_line(text: str, where: str, kind: Kind, cols: int | None) -> DataError:
    """The error for the first line that is not ``cols`` comma-separated numbers."""
    for line, s in _lines(text):
        fields = [f.strip() for f in s.split(",")]
        want = len(fields) if cols is None else cols
        if len(fields) != want:
            return DataError(
                f"{where}: line {line} has {len(fields)} values, expected {want}",
                "TU files hold comma-separated numbers, the same count on every line",
            )
        for f in fields:
            try:
                value = int(f) if kind == "int" else float(f)
            except ValueError:
                noun = "an integer" if kind == "int" else "a number"
                return DataError(f"{where}: line {line} has {_shown(f)}, not {noun}")
            if kind == "int" and abs(int(value)) >= 2**62:
                return DataError(f"{where}: line {line} has {_shown(f)}, out of range")
        if cols is None:
            cols = len(fields)
    return DataError(f"{where} is not comma-separated numbers", "is it the right file?")


def _table(file: Path, kind: Kind, cols: int | None) -> np.ndarray:
    """The file as an ``(rows, cols)`` array (``cols=None``: as many as the first line)."""
    where = f"'{file}'"
    text = _read_text(file)
    dtype = np.int64 if kind == "int" else np.float64
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            arr = np.loadtxt(io.StringIO(text), delimiter=",", dtype=dtype, ndmin=2, comments=None)
    except (ValueError, OverflowError):
        raise _bad_line(text, where, kind, cols) from None
    if arr.size == 0:
        raise DataError(f"{where} is empty", "is it the right folder?")
    if cols is not None and arr.shape[1] != cols:
        raise _bad_line(text, where, kind, cols)
    if kind == "int" and np.any(np.abs(arr) >= 2**62):
        row = int(np.flatnonzero(np.any(np.abs(arr) >= 2**62, axis=1))[0])
        raise DataError(f"{where}: line {_line_of_row(text, row)} has a value out of range")
    if kind == "float" and not np.all(np.isfinite(arr)):
        row = int(np.flatnonzero(~np.all(np.isfinite(arr), axis=1))[0])
        raise DataError(
            f"{where}: line {_line_of_row(text, row)} has a value that is not finite (nan or inf)"
        )
    return arr


def _in_range(values: np.ndarray, lo: int, hi: int, file: Path, what: str) -> None:
    """Every row of ``values`` within ``[lo, hi]``, else an error naming the first bad line."""
    bad = np.any((values < lo) | (values > hi), axis=1) if values.ndim == 2 else None
    if bad is None or not bad.any():
        return
    row = int(np.flatnonzero(bad)[0])
    line = _line_of_row(_read_text(file), row)
    shown = ", ".join(str(int(v)) for v in values[row])
    raise DataError(f"'{file}': line {line} has {what} {shown}, outside {lo}..{hi}")


# --------------------------------------------------------------------------- the folder


def _name(folder: Path) -> str:
    found = sorted(p.name for p in folder.glob("*_A.txt") if p.is_file())
    if not found:
        raise DataError(f"tu: no '*_A.txt' file in '{folder}' (from data.path)", HOW_TO_GET)
    if len(found) > 1:
        raise DataError(
            f"tu: several '*_A.txt' files in '{folder}' ({', '.join(found[:4])}); "
            "fedad reads one data set per folder",
            "point data.path at a folder holding one data set",
        )
    return found[0][: -len("_A.txt")]


def _files(folder: Path, name: str) -> dict[str, Path | None]:
    out: dict[str, Path | None] = {}
    for suffix in _SUFFIXES:
        p = folder / f"{name}_{suffix}.txt"
        out[suffix] = p if p.is_file() else None
    for required in ("graph_indicator", "graph_labels"):
        if out[required] is None:
            raise DataError(
                f"tu: '{folder / f'{name}_{required}.txt'}' is missing "
                f"(a TU data set needs {name}_A.txt, _graph_indicator.txt, _graph_labels.txt)",
                HOW_TO_GET,
            )
    return out


def _label_features(labels: np.ndarray, file: Path) -> np.ndarray:
    """One-hot of each label column (sorted distinct values), concatenated."""
    parts = []
    for c in range(labels.shape[1]):
        values, index = np.unique(labels[:, c], return_inverse=True)
        parts.append((values, index.reshape(-1)))
    width = sum(len(v) for v, _ in parts)
    if width > MAX_WIDTH:
        raise DataError(
            f"'{file}' has {width:,} distinct node labels, more than the {MAX_WIDTH} one-hot "
            "columns fedad makes",
            "are they attributes rather than labels?",
        )
    out = np.zeros((len(labels), width), dtype=np.float32)
    start = 0
    for values, index in parts:
        out[np.arange(len(labels)), start + index] = 1.0
        start += len(values)
    return out


def _check_rows(arr: np.ndarray, n: int, file: Path, other: str) -> None:
    if len(arr) != n:
        raise DataError(f"'{file}' has {len(arr):,} lines, {other} has {n:,}")


def read_tu(folder: str | os.PathLike[str]) -> tuple[GraphSet, np.ndarray, tuple[str, ...]]:
    """``(graphs, y, classes)`` of the TU data set in ``folder`` (see the module docstring)."""
    base = Path(folder).expanduser()
    if not base.is_dir():
        raise DataError(f"tu: '{base}' (data.path) is not a folder", HOW_TO_GET)
    name = _name(base)
    files = _files(base, name)
    f_a, f_ind, f_lab = (files[k] for k in ("A", "graph_indicator", "graph_labels"))
    assert f_a is not None and f_ind is not None and f_lab is not None

    raw_labels = _table(f_lab, "int", 1)[:, 0]
    n_graphs = len(raw_labels)
    ind = _table(f_ind, "int", 1)
    _in_range(ind, 1, n_graphs, f_ind, f"graph id (the graph labels file has {n_graphs} lines)")
    ind = ind[:, 0] - 1
    n = len(ind)
    counts = np.bincount(ind, minlength=n_graphs)
    if np.any(counts == 0):
        g = int(np.flatnonzero(counts == 0)[0])
        raise DataError(f"'{f_ind}': graph {g + 1} (line {g + 1} of '{f_lab}') has no node")

    edges = _table(f_a, "int", 2)
    _in_range(edges, 1, n, f_a, f"node ids (the graph indicator file has {n:,} nodes)")
    edges = edges.T - 1
    cross = ind[edges[0]] != ind[edges[1]]
    if np.any(cross):
        row = int(np.flatnonzero(cross)[0])
        line = _line_of_row(_read_text(f_a), row)
        i, j = (int(v) + 1 for v in edges[:, row])
        raise DataError(
            f"'{f_a}': line {line} links node {i} of graph {ind[i - 1] + 1} with node {j} "
            f"of graph {ind[j - 1] + 1}; an edge must stay within one graph"
        )

    # nodes in graph order (TU files list them so; a shuffled indicator is reordered)
    order = np.argsort(ind, kind="stable")
    new_id = np.empty(n, dtype=np.int64)
    new_id[order] = np.arange(n)
    edge_index = undirected(new_id[edges], n)

    f_attr, f_nlab = files["node_attributes"], files["node_labels"]
    if f_attr is not None:
        feats = _table(f_attr, "float", None)
        _check_rows(feats, n, f_attr, f"'{f_ind}'")
        if feats.shape[1] > MAX_WIDTH:
            raise DataError(f"'{f_attr}' has {feats.shape[1]:,} columns, more than {MAX_WIDTH}")
        x = feats.astype(np.float32)[order]
    elif f_nlab is not None:
        labels = _table(f_nlab, "int", None)
        _check_rows(labels, n, f_nlab, f"'{f_ind}'")
        x = _label_features(labels, f_nlab)[order]
    else:
        x = one_hot_degree(edge_index, n)
    if x.size > MAX_FEATURE_VALUES:
        raise DataError(
            f"tu: '{base}' would need {x.size:,} node-feature values, more than "
            f"{MAX_FEATURE_VALUES:,}"
        )

    node_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    graph_of_edge = ind[order][edge_index[0]]
    edge_ptr = np.concatenate([[0], np.cumsum(np.bincount(graph_of_edge, minlength=n_graphs))])
    local = edge_index - node_ptr[graph_of_edge]
    width = np.full(n_graphs, x.shape[1], dtype=np.int64)
    graphs = GraphSet(x.reshape(-1), local, node_ptr, edge_ptr, width)

    values, y = np.unique(raw_labels, return_inverse=True)
    if len(values) > MAX_CLASSES:
        raise DataError(f"'{f_lab}' has {len(values):,} distinct labels, more than {MAX_CLASSES}")
    classes = tuple(str(int(v)) for v in values)
    return graphs, y.reshape(-1).astype(np.int64), classes


@lru_cache(maxsize=4)
def _read_cached(
    folder: str, stamp: tuple[tuple[str, int, int], ...]
) -> tuple[GraphSet, np.ndarray, tuple[str, ...]]:
    del stamp
    return read_tu(folder)


def _stamp(folder: Path) -> tuple[tuple[str, int, int], ...]:
    out = []
    for p in sorted(folder.glob("*.txt")):
        try:
            st = p.stat()
        except OSError:
            continue
        out.append((p.name, st.st_size, st.st_mtime_ns))
    return tuple(out)


@register_dataset(
    "tu",
    description="TU Dortmund graph data set (MUTAG, PROTEINS, ...) from its folder at "
    "data.path; classes = graph labels in sorted order",
    kind="graph",
)
def load_tu(path: str | None = None, size: int | None = None) -> Dataset:
    """The TU data set in the folder ``path``; ``size`` is ignored."""
    del size
    if path is None:
        raise ConfigError("data set 'tu' needs data.path: the folder of a TU data set", HOW_TO_GET)
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise DataError(f"tu: '{folder}' (data.path) is not a folder", HOW_TO_GET)
    graphs, y, classes = _read_cached(os.path.abspath(folder), _stamp(folder))
    g = graphs
    copy = GraphSet(
        g.x.copy(), g.edge_index.copy(), g.node_ptr.copy(), g.edge_ptr.copy(), g.width.copy()
    )
    return Dataset("tu", copy, y.copy(), "graph", classes)


def register_tu(name: str, folder: str | os.PathLike[str], *, overwrite: bool = False) -> None:
    """Register the TU folder ``folder`` as the graph data set ``name``.

    For several TU sets in one run (``sources = ["mutag", "proteins"]``,
    ``scheme = "by-source"``); the folder is read when the data set is loaded.
    """
    where = str(Path(folder).expanduser())

    def load(path: str | None = None, size: int | None = None) -> Dataset:
        return dataclasses.replace(load_tu(path or where, size), name=name)

    description = f"TU data set from '{where}' (registered with register_tu)"
    register_dataset(name, load, description, "graph", overwrite=overwrite)
