"""Plain containers for data sets and federations.

Arrays are numpy: features ``float32`` (vectors ``(N, D)``, images ``(N, C, H, W)`` scaled to
[0, 1]), labels ``int64``, pixel masks ``uint8`` ``(N, H, W)`` with 1 on defect pixels.
Graphs are a :class:`GraphSet` (variable-size graphs packed into flat arrays, the layout of
torch-geometric's collated data sets), so that every kind of sample has a length, is taken
by integer ids, concatenates, and saves losslessly to ``.npz`` without pickle.
:class:`Samples` bundles a block's features with its optional masks. A :class:`Federation`
is what every engine and method sees.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import numpy as np

from fedad.core.errors import DataError

if TYPE_CHECKING:
    from torch_geometric.data import Batch, Data

DataKind = Literal["vector", "image", "graph"]


# --------------------------------------------------------------------------- graphs


class GraphSet:
    """``N`` graphs with node features, packed like torch-geometric's collated sets.

    Graph ``i`` has nodes ``node_ptr[i]:node_ptr[i+1]`` and edges ``edge_ptr[i]:edge_ptr[i+1]``
    of the packed arrays; ``edge_index`` is local to each graph (node numbers start at 0 in
    every graph). Node features are stored flat because their width may differ between
    graphs (graphs of different sources): graph ``i``'s ``(n_i, width[i])`` features are
    ``x[x_ptr[i]:x_ptr[i+1]]``. Within one source every graph has the same width.

    Shapes:
        - ``x``: ``(sum_i n_i * width_i,)`` float32
        - ``edge_index``: ``(2, E)`` int64, local node numbers
        - ``node_ptr``, ``edge_ptr``, ``x_ptr``: ``(N + 1,)`` int64, starting at 0
        - ``width``: ``(N,)`` int64
    """

    __slots__ = ("edge_index", "edge_ptr", "node_ptr", "width", "x", "x_ptr")

    def __init__(
        self,
        x: np.ndarray,
        edge_index: np.ndarray,
        node_ptr: np.ndarray,
        edge_ptr: np.ndarray,
        width: np.ndarray,
    ) -> None:
        self.x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
        self.edge_index = np.ascontiguousarray(edge_index, dtype=np.int64).reshape(2, -1)
        self.node_ptr = np.asarray(node_ptr, dtype=np.int64)
        self.edge_ptr = np.asarray(edge_ptr, dtype=np.int64)
        self.width = np.asarray(width, dtype=np.int64)
        n_nodes = np.diff(self.node_ptr)
        self.x_ptr = np.concatenate([[0], np.cumsum(n_nodes * self.width)]).astype(np.int64)
        self._check()

    def _check(self) -> None:
        n = len(self.width)
        ok = (
            self.node_ptr.shape == (n + 1,)
            and self.edge_ptr.shape == (n + 1,)
            and self.node_ptr[0] == 0
            and self.edge_ptr[0] == 0
            and np.all(np.diff(self.node_ptr) >= 0)
            and np.all(np.diff(self.edge_ptr) >= 0)
            and np.all(self.width >= 0)
            and self.edge_ptr[-1] == self.edge_index.shape[1]
            and self.x_ptr[-1] == self.x.size
        )
        if not ok:
            raise DataError("a graph set's packed arrays do not fit together (corrupt data)")
        if self.edge_index.size:
            n_of_edge = np.repeat(np.diff(self.node_ptr), np.diff(self.edge_ptr))
            if self.edge_index.min() < 0 or np.any(self.edge_index >= n_of_edge):
                raise DataError("a graph has an edge to a node it does not have (corrupt data)")

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def from_graphs(cls, graphs: Sequence[tuple[np.ndarray, np.ndarray]]) -> GraphSet:
        """Pack ``(node features (n, F), edge_index (2, E))`` pairs, one per graph."""
        xs = [np.asarray(g[0], dtype=np.float32) for g in graphs]
        es = [np.asarray(g[1], dtype=np.int64).reshape(2, -1) for g in graphs]
        for i, xi in enumerate(xs):
            if xi.ndim != 2:
                raise DataError(f"graph {i}: node features must be (nodes, features)")
        node_ptr = np.concatenate([[0], np.cumsum([len(xi) for xi in xs])])
        edge_ptr = np.concatenate([[0], np.cumsum([e.shape[1] for e in es])])
        width = np.array([xi.shape[1] for xi in xs], dtype=np.int64)
        flat = np.concatenate([xi.reshape(-1) for xi in xs]) if xs else np.zeros(0, np.float32)
        edges = np.concatenate(es, axis=1) if es else np.zeros((2, 0), np.int64)
        return cls(flat, edges, node_ptr, edge_ptr, width)

    @classmethod
    def from_pyg(cls, graphs: Sequence[Data]) -> GraphSet:
        """Pack torch-geometric ``Data`` objects (their ``x`` and ``edge_index``)."""
        pairs = []
        for i, g in enumerate(graphs):
            if g.x is None:
                raise DataError(f"graph {i} has no node features (x)", "give every graph x")
            pairs.append((g.x.detach().cpu().numpy(), g.edge_index.detach().cpu().numpy()))
        return cls.from_graphs(pairs)

    # -- sequence protocol -----------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.width)

    def graph(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Graph ``i`` as ``(node features (n, width), edge_index (2, E))``."""
        n = int(self.node_ptr[i + 1] - self.node_ptr[i])
        x = self.x[self.x_ptr[i] : self.x_ptr[i + 1]].reshape(n, int(self.width[i]))
        return x, self.edge_index[:, self.edge_ptr[i] : self.edge_ptr[i + 1]]

    def take(self, ids: np.ndarray | Sequence[int]) -> GraphSet:
        """The graphs ``ids`` (in that order; repeats allowed) as a new set."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < -len(self) or ids.max() >= len(self)):
            raise IndexError(f"graph id out of range for {len(self)} graphs")
        ids = ids % max(len(self), 1)
        return GraphSet.from_graphs([self.graph(int(i)) for i in ids])

    def __getitem__(self, ids: np.ndarray | Sequence[int] | slice) -> GraphSet:
        if isinstance(ids, slice):
            ids = np.arange(len(self))[ids]
        return self.take(np.asarray(ids))

    @property
    def shape(self) -> tuple[int, ...]:
        """``(N, F)`` with ``F`` the node-feature width when all graphs share one, else -1."""
        widths = np.unique(self.width)
        return (len(self), int(widths[0]) if len(widths) == 1 else -1)

    @property
    def n_nodes(self) -> np.ndarray:
        return np.diff(self.node_ptr)

    def __repr__(self) -> str:
        nodes = int(self.node_ptr[-1])
        return f"GraphSet({len(self)} graphs, {nodes} nodes, width {self.shape[1]})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GraphSet):
            return NotImplemented
        return all(np.array_equal(getattr(self, a), getattr(other, a)) for a in self.__slots__)

    __hash__ = None  # type: ignore[assignment]

    # -- conversion ------------------------------------------------------------------------
    def to_pyg(self) -> list[Data]:
        """The graphs as torch-geometric ``Data`` objects (needs the ``graph`` extra)."""
        torch, data_cls, _ = _pyg()
        out = []
        for i in range(len(self)):
            x, e = self.graph(i)
            data = data_cls(x=torch.from_numpy(x.copy()), edge_index=torch.from_numpy(e.copy()))
            out.append(data)
        return out

    def batch(self, ids: np.ndarray | Sequence[int] | None = None) -> Batch:
        """A torch-geometric ``Batch`` of the graphs ``ids`` (all, by default)."""
        _, _, batch_cls = _pyg()
        part = self if ids is None else self.take(ids)
        return batch_cls.from_data_list(part.to_pyg())

    def arrays(self, prefix: str = "") -> dict[str, np.ndarray]:
        """The packed arrays, for ``np.savez`` (:meth:`from_arrays` reads them back)."""
        return {
            f"{prefix}graph_x": self.x,
            f"{prefix}graph_edge_index": self.edge_index,
            f"{prefix}graph_node_ptr": self.node_ptr,
            f"{prefix}graph_edge_ptr": self.edge_ptr,
            f"{prefix}graph_width": self.width,
        }

    @classmethod
    def from_arrays(cls, z: Mapping[str, np.ndarray], prefix: str = "") -> GraphSet:
        return cls(
            z[f"{prefix}graph_x"],
            z[f"{prefix}graph_edge_index"],
            z[f"{prefix}graph_node_ptr"],
            z[f"{prefix}graph_edge_ptr"],
            z[f"{prefix}graph_width"],
        )


def _pyg() -> tuple[Any, Any, Any]:
    try:
        import torch
        from torch_geometric.data import Batch, Data
    except ImportError:
        raise DataError(
            "graph data needs torch-geometric, which is not installed",
            "install the extra: pip install 'fedad[graph]'",
        ) from None
    return torch, Data, Batch


Features: TypeAlias = "np.ndarray | GraphSet"
"""The features of ``N`` samples: a dense array (vectors, images) or a :class:`GraphSet`."""


def dense(x: Features, what: str = "this method") -> np.ndarray:
    """``x`` as a dense array; graphs raise a one-line :class:`DataError` naming ``what``."""
    if isinstance(x, GraphSet):
        raise DataError(
            f"{what} needs vectors or images, not graphs",
            "choose a method that declares the graph kind (`fedad list methods`)",
        )
    return x


def take(x: Features, ids: np.ndarray) -> Features:
    """Samples ``ids`` of ``x`` (dense rows or graphs), in that order."""
    if isinstance(x, GraphSet):
        return x.take(ids)
    return x[np.asarray(ids, dtype=np.int64)]


def concat(parts: Sequence[Features]) -> Features:
    """Samples of ``parts`` one after another (all dense or all graphs)."""
    if parts and all(isinstance(p, GraphSet) for p in parts):
        pairs = [g.graph(i) for g in parts for i in range(len(g))]  # type: ignore[union-attr]
        return GraphSet.from_graphs(pairs)
    if any(isinstance(p, GraphSet) for p in parts):
        raise DataError("cannot join graphs and dense samples in one set")
    return np.concatenate(parts)  # type: ignore[arg-type]


def feature_shape(x: Features) -> tuple[int, ...]:
    """Per-sample shape: ``x.shape[1:]``; for graphs ``(F,)`` the node-feature width."""
    return tuple(int(s) for s in x.shape[1:])


# --------------------------------------------------------------------------- samples


@dataclass
class Samples:
    """``N`` samples: features ``x`` and, for images with defect annotations, pixel masks.

    ``mask`` is ``(N, H, W)`` uint8 (1 = anomalous pixel) aligned with the images'
    ``(H, W)``, or ``None`` when the data have no masks. A normal sample's mask is all
    zeros.
    """

    x: Features
    mask: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.mask is not None:
            if isinstance(self.x, GraphSet) or self.x.ndim != 4:
                raise DataError("pixel masks go with images (N, C, H, W) only")
            want = (len(self.x), *self.x.shape[2:])
            if tuple(self.mask.shape) != want:
                raise DataError(f"masks have shape {tuple(self.mask.shape)}, images need {want}")
            self.mask = np.asarray(self.mask, dtype=np.uint8)

    def __len__(self) -> int:
        return len(self.x)

    def take(self, ids: np.ndarray | Sequence[int]) -> Samples:
        ids = np.asarray(ids, dtype=np.int64)
        return Samples(take(self.x, ids), None if self.mask is None else self.mask[ids])

    @staticmethod
    def concat(parts: Sequence[Samples]) -> Samples:
        masks = [p.mask for p in parts if p.mask is not None]
        mask = np.concatenate(masks) if parts and len(masks) == len(parts) else None
        return Samples(concat([p.x for p in parts]), mask)

    def arrays(self, prefix: str = "") -> dict[str, np.ndarray]:
        """Named arrays for ``np.savez``; :meth:`from_arrays` rebuilds the same samples."""
        out = self.x.arrays(prefix) if isinstance(self.x, GraphSet) else {f"{prefix}x": self.x}
        if self.mask is not None:
            out[f"{prefix}mask"] = self.mask
        return out

    @classmethod
    def from_arrays(cls, z: Mapping[str, np.ndarray], prefix: str = "") -> Samples:
        keys = set(z.keys()) if hasattr(z, "keys") else set(z)
        x: Features
        if f"{prefix}graph_x" in keys:
            x = GraphSet.from_arrays(z, prefix)
        elif f"{prefix}x" in keys:
            x = np.asarray(z[f"{prefix}x"])
        else:
            raise DataError(f"no samples '{prefix}' in the saved arrays (corrupt file)")
        mask = np.asarray(z[f"{prefix}mask"]) if f"{prefix}mask" in keys else None
        return cls(x, mask)


# --------------------------------------------------------------------------- data sets


@dataclass(frozen=True)
class Dataset:
    """A labelled data set as a loader returns it.

    ``y`` holds class labels (index into ``classes``). Data sets whose normal/anomaly split is
    fixed by their definition (ODDS) have ``fixed_split=True`` and ``y`` in {0: normal,
    1: anomaly}. ``x_test``/``y_test`` hold an official test split when the data set has one
    (Fashion-MNIST, CIFAR-10); otherwise the federation builder holds out a seeded,
    class-stratified share of ``x``. ``x`` is a :class:`GraphSet` for ``kind == "graph"``.
    ``mask``/``mask_test`` are the images' pixel masks, when the data set annotates defects.
    ``defect``/``defect_test`` mark defective samples of a defect set (see the field).
    """

    name: str
    x: Features
    y: np.ndarray
    kind: DataKind
    classes: tuple[str, ...]
    fixed_split: bool = False
    x_test: Features | None = None
    y_test: np.ndarray | None = None
    columns: tuple[str, ...] = ()
    """Names of the features of a table (empty: features are named by their index)."""
    mask: np.ndarray | None = None
    mask_test: np.ndarray | None = None
    defect: np.ndarray | None = None
    """A *defect set* (product types as classes, anomalies the defective items of a type):
    per sample of ``x``, whether it is defective; ``defect_test`` likewise for ``x_test``.
    See :func:`fedad.data.federation.as_class_set` for how the federation reads it."""
    defect_test: np.ndarray | None = None
    by_value: bool = False
    """``data.normal``/``data.anomaly`` select classes by value (their name in ``classes``),
    not by index: tables and image folders, whose classes are the values found in a file."""
    group: np.ndarray | None = None
    """Natural client id of each sample of ``x`` (a string array), for
    ``partition.scheme = "natural"``: a table's ``data.client_column``, an image folder's
    client folders; ``group_test`` likewise for ``x_test``."""
    group_test: np.ndarray | None = None
    categorical: tuple[tuple[int, tuple[str, ...]], ...] = ()
    """Categorical columns of a table: ``(column index, categories)``; the column holds the
    index of the sample's category (NaN when missing). The federation one-hot encodes them
    with the categories seen in the clients' training data."""

    @property
    def feature_shape(self) -> tuple[int, ...]:
        return feature_shape(self.x)

    @property
    def is_defect_set(self) -> bool:
        return self.defect is not None or self.defect_test is not None

    @property
    def has_masks(self) -> bool:
        return self.mask is not None and (self.x_test is None or self.mask_test is not None)


@dataclass
class ClientData:
    """One client's private data.

    ``y_train`` marks contamination (1 = an anomaly placed in training data by the
    ``contamination`` setting); methods must not read it — it is kept for analysis only.
    ``c_train`` keeps original class labels (for partition diagnostics). The local test set is
    the client's own normal distribution plus anomalies; the union of all local test sets is
    the pooled test set. ``mask_test`` holds the test images' pixel masks (ground truth, like
    ``y_test``: only the evaluation reads it); ``mask_train`` the training images' masks
    (analysis only, like ``y_train``).
    """

    client_id: int
    x_train: Features
    y_train: np.ndarray
    c_train: np.ndarray
    x_test: Features
    y_test: np.ndarray
    source: str = ""
    mask_train: np.ndarray | None = None
    mask_test: np.ndarray | None = None
    name: str = ""
    """The client's natural id (``partition.scheme = "natural"``), else empty."""

    @property
    def n_train(self) -> int:
        return len(self.x_train)

    @property
    def train(self) -> Samples:
        return Samples(self.x_train, self.mask_train)

    @property
    def test(self) -> Samples:
        return Samples(self.x_test, self.mask_test)


@dataclass
class Federation:
    """Clients' data plus what the server may hold (never test data)."""

    name: str
    kind: DataKind
    feature_shape: tuple[int, ...]
    clients: list[ClientData]
    normal_classes: list[int]
    anomaly_classes: list[int]
    class_names: tuple[str, ...] = ()
    server_normal: Features | None = None
    notes: dict[str, object] = field(default_factory=dict)

    @property
    def x_test(self) -> Features:
        return concat([c.x_test for c in self.clients])

    @property
    def y_test(self) -> np.ndarray:
        return np.concatenate([c.y_test for c in self.clients])

    @property
    def has_masks(self) -> bool:
        return bool(self.clients) and all(c.mask_test is not None for c in self.clients)

    @property
    def n_train(self) -> int:
        return sum(c.n_train for c in self.clients)
