"""Step 3 of the protocol: the test hold-out and the pooled test set's ratio and cap."""

from __future__ import annotations

import numpy as np

from fedad.data.partition import round_half_up


def split_block(
    ids: np.ndarray, classes: np.ndarray, fraction: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Class-stratified ``(train ids, test ids)``; every class with >= 2 samples in both."""
    train, test = [], []
    for c in np.unique(classes):
        members = rng.permutation(ids[classes == c])
        n = len(members)
        k = round_half_up(fraction * n)
        k = min(max(k, 1), n - 1) if n >= 2 else 0
        test.append(members[:k])
        train.append(members[k:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def ratio_pair(
    normals: np.ndarray, anomalies: np.ndarray, fraction: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Subsample one side so that anomalies are ``fraction`` of the pair (keeping the most)."""
    n_n, n_a = len(normals), len(anomalies)
    want_a = round_half_up(fraction * n_n / (1.0 - fraction))
    if want_a <= n_a:
        k_n, k_a = n_n, max(1, want_a)
    else:
        k_n, k_a = max(1, round_half_up(n_a * (1.0 - fraction) / fraction)), n_a
    pick_n = np.sort(rng.choice(normals, size=min(k_n, n_n), replace=False))
    pick_a = np.sort(rng.choice(anomalies, size=min(k_a, n_a), replace=False))
    return pick_n, pick_a


def cap_pair(
    normals: np.ndarray, anomalies: np.ndarray, cap: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Subsample to at most ``cap`` samples in all, keeping the normal/anomaly ratio."""
    n_n, n_a = len(normals), len(anomalies)
    if n_n + n_a <= cap:
        return normals, anomalies
    k_a = round_half_up(cap * n_a / (n_n + n_a))
    k_a = min(max(k_a, 1 if n_a else 0), cap - (1 if n_n else 0))
    k_n = cap - k_a
    pick_n = np.sort(rng.choice(normals, size=k_n, replace=False))
    pick_a = np.sort(rng.choice(anomalies, size=k_a, replace=False))
    return pick_n, pick_a
