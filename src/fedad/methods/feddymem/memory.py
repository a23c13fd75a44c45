"""FedDyMem's memory banks: memory-reduce on the client, k-means aggregation on the server.

Pure functions on numpy arrays. A memory feature or bank is a map of patch features; here it
is stored as ``(K, C)`` rows in row-major ``(h, w)`` order, ``K = H x W``.

* Memory-reduce [FedDyMem Algorithm 2, eq. 13-16]: the client's memory features
  :math:`\\{M^{i}\\}_{i}` of all its training samples become one bank

  .. math::
      w_i = \\begin{cases} 1 & t = 0 \\\\ \\lVert M^{i} - M' \\rVert_2 & t > 0 \\end{cases}
      \\quad (15), \\qquad
      \\bar M = \\frac{\\sum_i w_i M^{i}}{\\sum_i w_i} \\quad (14), \\qquad
      M_{reduce} = \\alpha \\bar M + (1 - \\alpha) M' ,\\ \\alpha = \\frac{1}{t + 1} \\quad (16)

  with :math:`M'` the client's copy of the last global bank (eq. 16 only for :math:`t > 0`).
  The norm in eq. 15 is the Frobenius norm of the whole map difference.
* Aggregation [FedDyMem Algorithm 3]: the server pools the ``N`` clients' banks as
  ``N x K`` patch features and runs k-means with ``K`` clusters (scikit-learn, seeded); the
  centres are the global bank. Algorithm 3 reshapes the centres into the ``H x W`` map
  (:math:`f_{resize}`) in the order k-means returns them, which is arbitrary, while eq. 15
  and 16 compare and mix maps position by position. ``order = "matched"`` (the default)
  therefore places the centres by a minimum-cost assignment (Hungarian, scipy) to the
  positions of the clients' mean bank, so that position ``(h, w)`` of the global bank
  holds the centre nearest to what the clients hold there; ``order = "kmeans"`` keeps
  k-means' order (the paper read literally). The bank as a set — all that scoring and the
  loss of eq. 12 use — is the same either way.
* ``aggregation = "mean"`` (the ablation of Table III): the example-weighted mean of the
  banks position by position instead of k-means.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.spatial.distance import cdist
from sklearn.cluster import KMeans

__all__ = ["aggregate_banks", "memory_reduce", "reduce_weights"]


def reduce_weights(memories: np.ndarray, previous: np.ndarray | None) -> np.ndarray:
    """[FedDyMem eq. 15]: ``w_i = ||M^i - M'||_2`` (all ones without ``previous``, t = 0).

    Shapes: ``(n, K, C)``, ``(K, C)`` -> ``(n,)`` float64.
    """
    if previous is None:
        return np.ones(len(memories))
    diff = memories.astype(np.float64) - previous.astype(np.float64)[None]
    out: np.ndarray = np.sqrt((diff**2).sum(axis=(1, 2)))
    return out


def memory_reduce(memories: np.ndarray, previous: np.ndarray | None, t: int) -> np.ndarray:
    """[FedDyMem Algorithm 2]: the client's reduced bank ``(K, C)`` float32 at round ``t``.

    ``memories`` ``(n, K, C)``: the memory features of the client's training samples;
    ``previous``: its copy of the last global bank :math:`M'^{t-1}` (``None`` at ``t = 0``).
    If every weight is zero (every memory feature equals :math:`M'`), eq. 14 is 0/0 and
    :math:`\\bar M` is their plain mean, which then equals :math:`M'`.
    """
    if t < 0:
        raise ValueError("t must be >= 0")
    if t > 0 and previous is None:
        raise ValueError("memory-reduce at t > 0 needs the previous bank")
    w = reduce_weights(memories, previous if t > 0 else None)
    m = memories.astype(np.float64)
    total = float(w.sum())
    bar = np.tensordot(w / total, m, axes=1) if total > 0 else m.mean(axis=0)  # eq. 14
    if t == 0:
        return bar.astype(np.float32)
    assert previous is not None
    alpha = 1.0 / (t + 1)
    return (alpha * bar + (1.0 - alpha) * previous.astype(np.float64)).astype(np.float32)


def aggregate_banks(
    banks: Sequence[np.ndarray],
    seed: int,
    weights: Sequence[float] | None = None,
    method: Literal["kmeans", "mean"] = "kmeans",
    order: Literal["matched", "kmeans"] = "matched",
) -> np.ndarray:
    """[FedDyMem Algorithm 3]: the global bank ``(K, C)`` float32 from clients' ``(K, C)`` banks.

    ``weights`` (e.g. the clients' sample counts) only enter ``method = "mean"`` and the
    reference map of ``order = "matched"``; k-means weighs every patch feature equally, as
    Algorithm 3 does. Deterministic for a given ``seed``.
    """
    if not banks:
        raise ValueError("no banks to aggregate")
    stack = np.stack([np.asarray(b, np.float64) for b in banks])  # (N, K, C)
    n, k, _ = stack.shape
    w = np.ones(n) if weights is None else np.asarray(weights, np.float64)
    mean = np.tensordot(w / w.sum(), stack, axes=1)
    if method == "mean":
        return mean.astype(np.float32)
    points = stack.reshape(n * k, -1)
    if n == 1 or len(np.unique(points, axis=0)) <= k:
        centres = np.unique(points, axis=0)  # at most K distinct features: they are the centres
        centres = np.concatenate([centres, np.repeat(centres[-1:], k - len(centres), axis=0)])
    else:
        km = KMeans(n_clusters=k, n_init=1, random_state=seed % (2**32)).fit(points)
        centres = km.cluster_centers_
    if order == "matched":
        rows, cols = linear_sum_assignment(cdist(mean, centres, "sqeuclidean"))
        centres = centres[cols[np.argsort(rows)]]
    return centres.astype(np.float32)
