"""Pure aggregation functions: no state, no I/O, exact-number tested.

FedAvg (McMahan et al., 2017) computes the global parameters as the example-weighted mean
of the client parameters, :math:`w = \\sum_k (n_k / N) w_k` with :math:`N = \\sum_k n_k`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def normalized_weights(weights: Sequence[float]) -> np.ndarray:
    """Weights divided by their sum (float64); raises on negative or all-zero weights."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0:
        raise ValueError("need at least one weight")
    if np.any(w < 0) or not np.all(np.isfinite(w)):
        raise ValueError("weights must be finite and non-negative")
    total = w.sum()
    if total <= 0:
        raise ValueError("weights sum to zero")
    return np.asarray(w / total)


def weighted_mean(arrays: Sequence[np.ndarray], weights: Sequence[float]) -> np.ndarray:
    """:math:`\\sum_k p_k a_k` with :math:`p_k = w_k / \\sum_j w_j`, accumulated in float64.

    The result keeps the dtype of the first array (so float32 models stay float32).
    """
    if len(arrays) != len(weights):
        raise ValueError(f"{len(arrays)} arrays but {len(weights)} weights")
    p = normalized_weights(weights)
    shape = np.shape(arrays[0])
    acc = np.zeros(shape, dtype=np.float64)
    for a, pk in zip(arrays, p, strict=True):
        if np.shape(a) != shape:
            raise ValueError(f"shape mismatch: {np.shape(a)} vs {shape}")
        acc += pk * np.asarray(a, dtype=np.float64)
    return acc.astype(np.asarray(arrays[0]).dtype, copy=False)


def weighted_mean_dicts(
    dicts: Sequence[Mapping[str, np.ndarray]], weights: Sequence[float]
) -> dict[str, np.ndarray]:
    """Key-wise :func:`weighted_mean` of state dicts that share the same keys."""
    if not dicts:
        raise ValueError("need at least one state dict")
    keys = list(dicts[0].keys())
    for d in dicts[1:]:
        if set(d.keys()) != set(keys):
            raise ValueError("state dicts have different keys")
    return {k: weighted_mean([d[k] for d in dicts], weights) for k in keys}


def weighted_sum(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """Element-wise sum of arrays in float64 (for sufficient statistics such as sums)."""
    acc = np.zeros(np.shape(arrays[0]), dtype=np.float64)
    for a in arrays:
        acc += np.asarray(a, dtype=np.float64)
    return acc
