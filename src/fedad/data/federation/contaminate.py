"""Step 6 of the protocol: contamination, replacing some training normals by anomalies."""

from __future__ import annotations

import numpy as np

from fedad.core.errors import DataError
from fedad.data.partition import round_half_up


def mix(
    normals: np.ndarray, anomalies: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Normals and anomalies in one random order, with 0/1 anomaly flags."""
    ids = np.concatenate([normals, anomalies])
    flag = np.r_[np.zeros(len(normals), np.int64), np.ones(len(anomalies), np.int64)]
    order = rng.permutation(len(ids))
    return ids[order], flag[order]


def contaminate(
    train_normals: list[np.ndarray],
    anomaly_pool: np.ndarray,
    contamination: float,
    rng: np.random.Generator,
) -> tuple[list[np.ndarray], list[np.ndarray], list[int]]:
    """Replace ``round_half_up(contamination * n_k)`` of each client's samples by anomalies.

    Anomalies are drawn without replacement from ``anomaly_pool``; every client gets its own
    share. Returns per-client ids, 0/1 contamination flags, and the counts replaced.
    """
    n_bad = [round_half_up(contamination * len(t)) for t in train_normals]
    if sum(n_bad) > len(anomaly_pool):
        raise DataError(
            f"partition.contamination={contamination:g} needs {sum(n_bad)} training "
            f"anomalies but only {len(anomaly_pool)} are available outside the test set",
            "lower partition.contamination or data.max_train_per_client, or add anomaly classes",
        )
    drawn = rng.permutation(anomaly_pool)
    ids, flags = [], []
    start = 0
    for t, n_a in zip(train_normals, n_bad, strict=True):
        kept = rng.permutation(t)[: len(t) - n_a]
        mine, flag = mix(kept, drawn[start : start + n_a], rng)
        start += n_a
        ids.append(mine)
        flags.append(flag)
    return ids, flags, n_bad
