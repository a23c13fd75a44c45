"""Plain containers for data sets and federations.

Arrays are numpy: features ``float32`` (vectors ``(N, D)``, images ``(N, C, H, W)`` scaled to
[0, 1]), labels ``int64``. A :class:`Federation` is what every engine and method sees.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

DataKind = Literal["vector", "image", "graph"]


@dataclass(frozen=True)
class Dataset:
    """A labelled data set as a loader returns it.

    ``y`` holds class labels (index into ``classes``). Data sets whose normal/anomaly split is
    fixed by their definition (ODDS) have ``fixed_split=True`` and ``y`` in {0: normal,
    1: anomaly}. ``x_test``/``y_test`` hold an official test split when the data set has one
    (Fashion-MNIST, CIFAR-10); otherwise the federation builder holds out a seeded,
    class-stratified share of ``x``.
    """

    name: str
    x: np.ndarray
    y: np.ndarray
    kind: DataKind
    classes: tuple[str, ...]
    fixed_split: bool = False
    x_test: np.ndarray | None = None
    y_test: np.ndarray | None = None
    columns: tuple[str, ...] = ()
    """Names of the features of a table (empty: features are named by their index)."""

    @property
    def feature_shape(self) -> tuple[int, ...]:
        return tuple(int(s) for s in self.x.shape[1:])


@dataclass
class ClientData:
    """One client's private data.

    ``y_train`` marks contamination (1 = an anomaly placed in training data by the
    ``contamination`` setting); methods must not read it — it is kept for analysis only.
    ``c_train`` keeps original class labels (for partition diagnostics). The local test set is
    the client's own normal distribution plus anomalies; the union of all local test sets is
    the pooled test set.
    """

    client_id: int
    x_train: np.ndarray
    y_train: np.ndarray
    c_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    source: str = ""

    @property
    def n_train(self) -> int:
        return int(self.x_train.shape[0])


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
    server_normal: np.ndarray | None = None
    notes: dict[str, object] = field(default_factory=dict)

    @property
    def x_test(self) -> np.ndarray:
        return np.concatenate([c.x_test for c in self.clients])

    @property
    def y_test(self) -> np.ndarray:
        return np.concatenate([c.y_test for c in self.clients])

    @property
    def n_train(self) -> int:
        return sum(c.n_train for c in self.clients)
