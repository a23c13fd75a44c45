"""Which samples a client sends for the report: positions chosen from the labels only, so that
every method of a run (and every engine) picks the same test samples.

The evaluate step of :class:`fedad.core.algorithm.Algorithm` uses :func:`embedding_indices`; the
report's anomaly maps use :func:`sample_indices` (:mod:`fedad.evaluation.samples`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["EMBED_PER_CLIENT", "MAPS_ANOMALOUS", "MAPS_CAP", "embedding_indices", "sample_indices"]

# -- anomaly maps ----------------------------------------------------------------------------

MAPS_CAP = 16
"""At most this many test images per method are kept in ``maps.npz``."""
MAPS_ANOMALOUS = 12
"""Of which at most this many anomalous ones (the rest normal, when there are enough)."""


def sample_indices(
    label: np.ndarray, cap: int = MAPS_CAP, anomalous: int = MAPS_ANOMALOUS
) -> np.ndarray:
    """Positions (sorted) of at most ``cap`` samples: up to ``anomalous`` anomalies and the
    rest normal ones (more of either when the other runs short), each evenly spaced over
    the pooled order, so that every client's test set tends to be represented. Depends only
    on the labels: every method of a run shows the same images."""
    y = np.asarray(label).reshape(-1)
    pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y != 1)
    n_pos = min(len(pos), max(anomalous, cap - len(neg)))
    n_neg = min(len(neg), cap - n_pos)

    def spread(idx: np.ndarray, k: int) -> np.ndarray:
        if k <= 0:
            return idx[:0]
        at = np.linspace(0, len(idx) - 1, k).round().astype(np.int64)
        return idx[np.unique(at)]

    return np.sort(np.concatenate([spread(pos, n_pos), spread(neg, n_neg)]))


# -- representations -------------------------------------------------------------------------

EMBED_PER_CLIENT = 200
"""At most this many test samples per client are represented in an evaluate reply."""


def embedding_indices(label: np.ndarray, cap: int = EMBED_PER_CLIENT) -> np.ndarray:
    """Positions (sorted, int64) of the test samples a client represents: at most ``cap``,
    half of them anomalous when there are enough (:func:`sample_indices`: evenly spaced
    within each class, so both classes are kept). Depends only on the labels."""
    return sample_indices(label, cap, cap // 2).astype(np.int64)
