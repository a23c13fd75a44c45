"""The GIN backbone: invariances and the dense path equal to the sparse one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("torch_geometric")

from fedad.components.nn.gin import GIN, dense_graphs
from fedad.core.types import GraphSet


def graphs(seed: int = 0, n: int = 5, width: int = 3) -> GraphSet:
    rng = np.random.default_rng(seed)
    pairs = []
    for g in range(n):
        k = 4 + g
        ring = np.stack([np.arange(k), (np.arange(k) + 1) % k])
        e = np.concatenate([ring, ring[::-1]], axis=1)
        pairs.append((rng.normal(size=(k, width)).astype(np.float32), e))
    return GraphSet.from_graphs(pairs)


def test_graph_representation_is_invariant_to_node_order() -> None:
    torch.manual_seed(0)
    gin = GIN(3, hidden=8, layers=3)
    x = torch.randn(6, 3)
    e = torch.tensor([[0, 1, 1, 2, 3, 4, 4, 5], [1, 0, 2, 1, 4, 3, 5, 4]])
    perm = torch.tensor([3, 0, 5, 1, 4, 2])  # new node i is old node perm[i]
    inv = torch.argsort(perm)
    batch = torch.zeros(6, dtype=torch.long)
    a = gin(x, e, batch, 1)
    b = gin(x[perm], inv[e], batch, 1)
    torch.testing.assert_close(a, b)
    assert a.shape == (1, 24)


def test_dense_path_equals_sparse_path_on_real_graphs() -> None:
    torch.manual_seed(1)
    g = graphs()
    batch = g.batch()
    gin = GIN(3, hidden=8, layers=2)
    sparse = gin(batch.x, batch.edge_index, batch.batch, len(g))
    x, adj, mask = dense_graphs(batch)
    torch.testing.assert_close(gin.forward_dense(x, adj, mask), sparse, rtol=1e-5, atol=1e-5)


def test_dense_adjacency_is_one_block_per_graph() -> None:
    g = graphs(n=4)
    _, adj, mask = dense_graphs(g.batch())
    assert adj.shape == (4, 7, 7) and mask.sum(1).tolist() == [4, 5, 6, 7]
    for b in range(4):
        n = 4 + b
        assert adj[b, n:].sum() == 0 and adj[b, :, n:].sum() == 0
        torch.testing.assert_close(adj[b], adj[b].T)  # undirected rings
        assert adj[b, :n, :n].sum(1).tolist() == [2.0] * n


def test_padding_does_not_change_a_graph_representation() -> None:
    torch.manual_seed(2)
    gin = GIN(3, hidden=4, layers=2)
    g = graphs(n=3)
    x, adj, mask = dense_graphs(g.batch())
    alone = [dense_graphs(g.batch([i])) for i in range(3)]
    full = gin.forward_dense(x, adj, mask)
    for i, (xi, ai, mi) in enumerate(alone):
        torch.testing.assert_close(gin.forward_dense(xi, ai, mi)[0], full[i])
