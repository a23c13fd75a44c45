"""Shared fixtures: tiny synthetic federations that build in milliseconds."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest
import torch

from fedad.cli.tuning import reusable_heap
from fedad.core.messages import Message
from fedad.core.types import ClientData, Federation, GraphSet, concat

torch.set_num_threads(1)
reusable_heap()  # the allocator thresholds of the `fedad` command, here and in its children


COLLAPSE_WARNING = "encoder not learning"
"""The start of the collapse guard's event (:mod:`fedad.core.collapse`)."""


def failures(events: list[str]) -> list[str]:
    """The events that say something failed or was rejected: all but the collapse guard's
    warning, which an encoder trained for a round or two on toy data rightly gets."""
    return [e for e in events if COLLAPSE_WARNING not in e]


def make_federation(
    kind: str = "vector", clients: int = 3, n: int = 40, seed: int = 0, masks: bool = False
) -> Federation:
    """Normal data around 0, anomalies shifted by 4; images are 1x8x8 blobs.

    ``masks=True`` (images): anomalies are normal images with a bright 3x3 patch, marked in
    ``mask_test``. ``kind="graph"``: :func:`make_graph_federation`.
    """
    if kind == "graph":
        return make_graph_federation(clients, n, seed)
    rng = np.random.default_rng(seed)
    shape: tuple[int, ...] = (6,) if kind == "vector" else (1, 8, 8)

    def normal(m: int) -> np.ndarray:
        x = rng.normal(0.0, 1.0, (m, *shape))
        return (x if kind == "vector" else 1 / (1 + np.exp(-x))).astype(np.float32)

    def anomal(m: int) -> np.ndarray:
        x = rng.normal(4.0, 1.0, (m, *shape))
        return (x if kind == "vector" else 1 / (1 + np.exp(-x))).astype(np.float32)

    def patched(m: int) -> tuple[np.ndarray, np.ndarray]:
        x, mask = normal(m), np.zeros((m, 8, 8), np.uint8)
        for i in range(m):
            r, c = rng.integers(0, 6, size=2)
            x[i, 0, r : r + 3, c : c + 3] = 1.0
            mask[i, r : r + 3, c : c + 3] = 1
        return x, mask

    cs = []
    for k in range(clients):
        nk = n + 5 * k
        mask_test = None
        if masks:
            bad, bad_mask = patched(4)
            x_test = np.concatenate([normal(10), bad])
            mask_test = np.concatenate([np.zeros((10, 8, 8), np.uint8), bad_mask])
        else:
            x_test = np.concatenate([normal(10), anomal(4)])
        y_test = np.r_[np.zeros(10), np.ones(4)].astype(np.int64)
        cs.append(
            ClientData(
                client_id=k,
                x_train=normal(nk),
                y_train=np.zeros(nk, np.int64),
                c_train=np.zeros(nk, np.int64),
                x_test=x_test,
                y_test=y_test,
                mask_train=np.zeros((nk, 8, 8), np.uint8) if masks else None,
                mask_test=mask_test,
            )
        )
    return Federation(
        name="synthetic",
        kind=kind,  # type: ignore[arg-type]
        feature_shape=shape,
        clients=cs,
        normal_classes=[0],
        anomaly_classes=[1],
        server_normal=normal(60),
    )


@pytest.fixture
def delivered(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, Message, Message | None]]:
    """Every (node, message, reply) the in-process grid delivers, in order."""
    from fedad.fl.engine import InProcessGrid

    seen: list[tuple[int, Message, Message | None]] = []
    original = InProcessGrid.send_and_receive

    def record(
        self: InProcessGrid, messages: Mapping[int, Message], timeout: float | None = None
    ) -> dict[int, Message]:
        replies = original(self, messages, timeout)
        seen.extend((n, m, replies.get(n)) for n, m in messages.items())
        return replies

    monkeypatch.setattr(InProcessGrid, "send_and_receive", record)
    return seen


@pytest.fixture
def vector_federation() -> Federation:
    return make_federation("vector")


@pytest.fixture
def image_federation() -> Federation:
    return make_federation("image")


def make_graph_federation(clients: int = 3, n: int = 24, seed: int = 0) -> Federation:
    """Tiny graphs: normals are rings of 5-8 nodes with N(0, 1) node features (width 3);
    anomalies are dense cliques with features N(3, 1)."""
    rng = np.random.default_rng(seed)

    def ring(m: int) -> GraphSet:
        pairs = []
        for _ in range(m):
            k = int(rng.integers(5, 9))
            e = np.stack([np.arange(k), (np.arange(k) + 1) % k])
            pairs.append((rng.normal(0, 1, (k, 3)), np.concatenate([e, e[::-1]], axis=1)))
        return GraphSet.from_graphs(pairs)

    def clique(m: int) -> GraphSet:
        pairs = []
        for _ in range(m):
            k = int(rng.integers(4, 7))
            a, b = np.nonzero(~np.eye(k, dtype=bool))
            pairs.append((rng.normal(3, 1, (k, 3)), np.stack([a, b])))
        return GraphSet.from_graphs(pairs)

    cs = []
    for k in range(clients):
        nk = n + 4 * k
        cs.append(
            ClientData(
                client_id=k,
                x_train=ring(nk),
                y_train=np.zeros(nk, np.int64),
                c_train=np.zeros(nk, np.int64),
                x_test=concat([ring(8), clique(3)]),
                y_test=np.r_[np.zeros(8), np.ones(3)].astype(np.int64),
            )
        )
    return Federation(
        name="synthetic-graphs",
        kind="graph",
        feature_shape=(3,),
        clients=cs,
        normal_classes=[0],
        anomaly_classes=[1],
        server_normal=ring(20),
    )


def mixed_width_graph_federation() -> Federation:
    """:func:`make_graph_federation` with 3 clients, the last one's node features widened
    from 3 to 5 (its first two columns repeated): sources of different feature widths."""
    fed = make_graph_federation(3)
    c = fed.clients[2]

    def widen(g: GraphSet) -> GraphSet:
        pairs = [g.graph(i) for i in range(len(g))]
        return GraphSet.from_graphs([(np.c_[x, x[:, :2]], e) for x, e in pairs])

    assert isinstance(c.x_train, GraphSet) and isinstance(c.x_test, GraphSet)
    fed.clients[2] = ClientData(
        client_id=2, x_train=widen(c.x_train), y_train=c.y_train, c_train=c.c_train,
        x_test=widen(c.x_test), y_test=c.y_test,
    )  # fmt: skip
    return fed
