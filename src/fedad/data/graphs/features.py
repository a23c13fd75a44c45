"""Node features and undirected edge lists shared by the graph loaders.

Edges are made undirected by adding every edge's reverse and removing duplicates; a
self-loop present in the input is kept (once), none is added. The degree of a node is the
number of entries of its row in the resulting ``edge_index`` (a self-loop counts once).
"""

from __future__ import annotations

import numpy as np

__all__ = ["DEGREE_CAP", "one_hot", "one_hot_degree", "undirected"]

DEGREE_CAP = 32
"""One-hot degree features have ``DEGREE_CAP + 1`` columns: degrees 0 .. 31 and ">= 32"."""


def undirected(edges: np.ndarray, n_nodes: int) -> np.ndarray:
    """``(2, E')`` int64: ``edges`` ``(2, E)`` in both directions, deduplicated, sorted.

    Sorted by source then target. Node numbers must be in ``[0, n_nodes)`` (not checked
    here: callers validate untrusted input first).
    """
    e = np.asarray(edges, dtype=np.int64).reshape(2, -1)
    both = np.concatenate([e, e[::-1]], axis=1)
    key = np.unique(both[0] * max(int(n_nodes), 1) + both[1])
    return np.stack([key // max(int(n_nodes), 1), key % max(int(n_nodes), 1)]).astype(np.int64)


def one_hot(index: np.ndarray, width: int) -> np.ndarray:
    """``(n, width)`` float32 with a 1 in column ``index[i]`` of row ``i``."""
    idx = np.asarray(index, dtype=np.int64).reshape(-1)
    out = np.zeros((len(idx), width), dtype=np.float32)
    out[np.arange(len(idx)), idx] = 1.0
    return out


def one_hot_degree(edge_index: np.ndarray, n_nodes: int, cap: int = DEGREE_CAP) -> np.ndarray:
    """``(n_nodes, cap + 1)`` float32: one-hot ``min(degree, cap)`` from ``edge_index``."""
    deg = np.bincount(np.asarray(edge_index[0], dtype=np.int64), minlength=n_nodes)
    return one_hot(np.minimum(deg[:n_nodes], cap), cap + 1)
