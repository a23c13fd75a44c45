"""Samples of a method's evaluate replies kept for the report: anomaly maps of a few test
images (``maps.npz``, :func:`map_sample`) and test-sample representations for the t-SNE
(``embeddings.npz``, :func:`embedding_sample`), each chosen from the labels only, so that
every method of a run shows the same samples.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from fedad.core.messages import Message
from fedad.core.sampling import (
    EMBED_PER_CLIENT,
    MAPS_CAP,
    embedding_indices,
    sample_indices,
)
from fedad.evaluation.families import Pooled

log = logging.getLogger("fedad")

__all__ = [
    "EMBED_CAP",
    "EMBED_PER_CLIENT",
    "MAPS_CAP",
    "client_sample_indices",
    "embedding_indices",
    "embedding_sample",
    "map_sample",
    "sample_indices",
]

# -- anomaly maps for the report --------------------------------------------------------------


def client_sample_indices(label: np.ndarray, client: np.ndarray, cap: int = MAPS_CAP) -> np.ndarray:
    """Positions (sorted) of at most ``cap`` samples, a few from every client: ``per =
    max(2, cap // clients)`` of each (about three anomalies to one normal image, by
    :func:`sample_indices` within the client's own samples). With more than ``cap // 2``
    clients, ``cap // 2`` of them, evenly spaced over the sorted ids, give two each. Depends
    only on the labels and clients: every method of a run shows the same images."""
    y, c = np.asarray(label).reshape(-1), np.asarray(client).reshape(-1)
    ids = np.unique(c)
    if cap <= 0 or len(ids) == 0:
        return np.zeros(0, dtype=np.int64)
    if 2 * len(ids) > cap:
        ids = ids[np.unique(np.linspace(0, len(ids) - 1, max(1, cap // 2)).round().astype(int))]
    per = max(2, cap // len(ids))
    anomalous = per - max(1, per // 4)
    parts = []
    for cid in ids:
        own = np.flatnonzero(c == cid)
        parts.append(own[sample_indices(y[own], per, anomalous)])
    return np.sort(np.concatenate(parts))[:cap].astype(np.int64)


def map_sample(
    ev: Pooled,
    images: Mapping[int, Any],
    cap: int = MAPS_CAP,
) -> dict[str, np.ndarray]:
    """A capped sample of one method's anomaly maps for ``maps.npz`` (a few test images of
    every client, :func:`client_sample_indices`), or ``{}`` without maps.

    ``images[client]`` is that client's local test set (the images scored, in order; the
    harness's copy: test images never travel in a reply). Arrays: ``image`` ``(n, C, H, W)``
    float32 as the data hold them, ``map`` ``(n, H, W)`` float32, ``mask`` ``(n, H, W)``
    uint8, ``score`` float64, ``label`` int64, ``client`` int64 and ``index`` (the position
    in the client's test set) int64.
    """
    pairs = ev.maps
    if not pairs:
        return {}
    local = np.concatenate([np.arange(len(m)) for _, m, _ in pairs])
    maps = np.concatenate([m for _, m, _ in pairs])
    masks = np.concatenate([k for _, _, k in pairs])
    take = client_sample_indices(ev.label, ev.client, cap)
    picked = []
    for i in take:
        x = np.asarray(images[int(ev.client[i])][int(local[i])], dtype=np.float32)
        if x.ndim == 2:
            x = x[None]
        picked.append(x)
    if not picked or any(p.shape[1:] != maps.shape[1:] for p in picked):
        return {}
    return {
        "image": np.stack(picked).astype(np.float32),
        "map": maps[take].astype(np.float32),
        "mask": masks[take].astype(np.uint8),
        "score": ev.score[take].astype(np.float64),
        "label": ev.label[take].astype(np.int64),
        "client": ev.client[take].astype(np.int64),
        "index": local[take].astype(np.int64),
    }


# -- representations for the report's t-SNE ---------------------------------------------------

EMBED_CAP = 2000
"""At most this many represented test samples per method are kept in ``embeddings.npz``."""


def _reply_embedding(cid: int, reply: Message) -> tuple[np.ndarray, np.ndarray] | None:
    """``(embedding, index)`` of one reply when both are present and consistent with its
    scores; ``None`` (with a warning when they are present but wrong) otherwise."""
    a = reply.arrays
    if "embedding" not in a or "embedding_index" not in a:
        return None
    z, idx = np.asarray(a["embedding"]), np.asarray(a["embedding_index"])
    n = len(np.asarray(a["score"]).reshape(-1))
    ok = (
        z.ndim == 2
        and z.shape[1] >= 1
        and idx.ndim == 1
        and len(idx) == len(z)
        and np.issubdtype(z.dtype, np.floating)
        and np.issubdtype(idx.dtype, np.integer)
        and bool(np.all((idx >= 0) & (idx < n)))
        and len(np.unique(idx)) == len(idx)
    )
    if not ok:
        log.warning(
            "client %s's embedding (%s, indices %s) does not fit its %s test scores: left out",
            cid,
            z.shape,
            idx.shape,
            n,
        )
        return None
    return z, idx.astype(np.int64)


def embedding_sample(ev: Pooled, cap: int = EMBED_CAP) -> dict[str, np.ndarray]:
    """A capped, pooled sample of one method's test-sample representations for
    ``embeddings.npz``, or ``{}`` when no reply carries any.

    A reply's ``embedding`` ``(n, D)`` holds the representations of its test samples at
    ``embedding_index`` (:meth:`fedad.core.algorithm.Algorithm.client_evaluate`). Replies whose
    arrays do not fit (or whose ``D`` differs from the first one's) are left out with a
    warning. At most ``cap`` rows are kept (:func:`sample_indices` over the pooled labels,
    half anomalous when there are enough). Arrays: ``embedding`` float32 ``(n, D)``,
    ``label`` int64, ``client`` int64, ``index`` (position in the client's test set) int64
    and ``score`` float64, all aligned row by row.
    """
    zs, labels, clients, indices, scores = [], [], [], [], []
    dim: int | None = None
    for cid in sorted(ev.replies):
        reply = ev.replies[cid]
        got = _reply_embedding(cid, reply)
        if got is None:
            continue
        z, idx = got
        if dim is not None and z.shape[1] != dim:
            log.warning(
                "client %s's embedding has %s columns, not %s: left out", cid, z.shape[1], dim
            )
            continue
        dim = z.shape[1]
        zs.append(z.astype(np.float32))
        labels.append(np.asarray(reply.arrays["label"]).reshape(-1)[idx].astype(np.int64))
        scores.append(np.asarray(reply.arrays["score"], np.float64).reshape(-1)[idx])
        clients.append(np.full(len(idx), cid, dtype=np.int64))
        indices.append(idx)
    if not zs:
        return {}
    label = np.concatenate(labels)
    take = sample_indices(label, cap, cap // 2)
    return {
        "embedding": np.concatenate(zs)[take],
        "label": label[take],
        "client": np.concatenate(clients)[take],
        "index": np.concatenate(indices)[take],
        "score": np.concatenate(scores)[take],
    }
