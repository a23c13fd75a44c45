"""The server-side pieces of GCFL's clustering, pure numpy/scipy (no model, no messages).

* :func:`update_norms`: the split criterion's two numbers for one cluster [GCFL Alg. 1]:
  :math:`\\lVert \\frac{1}{|C|}\\sum_{i \\in C} \\Delta W_i \\rVert` (the norm of the mean
  update) and :math:`\\max_{i \\in C} \\lVert \\Delta W_i \\rVert`.
* :func:`dtw`: dynamic time warping distance between two sequences (absolute difference
  cost), GCFL+'s distance between two clients' sequences of update norms.
* :func:`cosine_distances`: :math:`1 - \\cos(\\Delta W_i, \\Delta W_j)`, GCFL's.
* :func:`bipartition`: split a cluster in two from a distance matrix.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def update_norms(updates: Sequence[np.ndarray]) -> tuple[float, float]:
    """``(norm of the mean update, largest update norm)`` of a cluster's flat updates."""
    stacked = np.stack([np.asarray(u, dtype=np.float64) for u in updates])
    mean_norm = float(np.linalg.norm(stacked.mean(axis=0)))
    max_norm = float(np.linalg.norm(stacked, axis=1).max())
    return mean_norm, max_norm


def dtw(a: Sequence[float], b: Sequence[float]) -> float:
    """Dynamic time warping distance: the cheapest monotone alignment of ``a`` and ``b``
    with cost :math:`|a_i - b_j|` per aligned pair (Sakoe & Chiba 1978; no window)."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.size == 0 or y.size == 0:
        return 0.0 if x.size == y.size else float("inf")
    d = np.full((x.size + 1, y.size + 1), np.inf)
    d[0, 0] = 0.0
    for i in range(1, x.size + 1):
        for j in range(1, y.size + 1):
            d[i, j] = abs(x[i - 1] - y[j - 1]) + min(d[i - 1, j], d[i, j - 1], d[i - 1, j - 1])
    return float(d[-1, -1])


def dtw_distances(seqs: Sequence[Sequence[float]]) -> np.ndarray:
    """The symmetric matrix of :func:`dtw` distances between ``seqs``."""
    n = len(seqs)
    out = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            out[i, j] = out[j, i] = dtw(seqs[i], seqs[j])
    return out


def cosine_distances(updates: Sequence[np.ndarray]) -> np.ndarray:
    """:math:`1 - \\cos` between every two flat updates (0 for a zero update)."""
    u = np.stack([np.asarray(x, dtype=np.float64) for x in updates])
    norms = np.linalg.norm(u, axis=1, keepdims=True)
    unit = u / np.where(norms > 0, norms, 1.0)
    return np.clip(1.0 - unit @ unit.T, 0.0, 2.0)


def bipartition(dist: np.ndarray) -> tuple[list[int], list[int]]:
    """Split ``range(n)`` in two non-empty groups: complete-linkage agglomerative clustering
    on the distances, cut at two clusters (Sattler et al.'s CFL bi-partition; the GCFL code
    uses a Stoer-Wagner min cut of the similarity graph, which agrees on well-separated
    groups). The group holding index 0 comes first; ties are broken by scipy's deterministic
    merge order."""
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import squareform

    n = len(dist)
    if n < 2:
        raise ValueError("a cluster of fewer than two clients cannot be split")
    sym = (np.asarray(dist, dtype=np.float64) + np.asarray(dist, dtype=np.float64).T) / 2
    np.fill_diagonal(sym, 0.0)
    labels = fcluster(linkage(squareform(sym, checks=False), "complete"), 2, "maxclust")
    if len(set(labels.tolist())) < 2:  # all distances equal: split off the last one
        labels = np.r_[np.ones(n - 1, int), 2]
    first = [i for i in range(n) if labels[i] == labels[0]]
    second = [i for i in range(n) if labels[i] != labels[0]]
    return first, second
