"""What the ProtoFL detector keeps so that a frozen trunk runs once per sample.

A client's evaluation scores its training samples (the threshold), then its test samples,
then a few of those again (the report's embeddings): with a pretrained backbone in front
of the head each of those passes costs as much as the ``pretrained`` detector's whole
scoring. The trunk is frozen after phase 1, so its representation of a sample is a function
of the sample's bytes: :class:`RowMemo` keeps the last batch's representations by each
row's digest and answers any batch whose rows it holds, and :func:`batch_key` names a
whole batch (in order) for the training scores a client keeps beside its head.
"""

from __future__ import annotations

import hashlib

import numpy as np


def _bytes(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x)


def row_keys(x: np.ndarray) -> list[bytes]:
    """A 16-byte BLAKE2b digest of each row of ``x`` (its dtype and shape included)."""
    a = _bytes(x)
    head = f"{a.dtype.str}{a.shape[1:]}".encode()
    return [hashlib.blake2b(head + a[i].tobytes(), digest_size=16).digest() for i in range(len(a))]


def batch_key(x: np.ndarray) -> np.ndarray:
    """A digest of the whole batch ``x`` (rows in order, dtype and shape) as uint8 bytes."""
    a = _bytes(x)
    h = hashlib.blake2b(f"{a.dtype.str}{a.shape}".encode(), digest_size=16)
    h.update(a.tobytes())
    return np.frombuffer(h.digest(), dtype=np.uint8).copy()


class RowMemo:
    """The last batch's per-row values, answered for any batch made of its rows."""

    def __init__(self) -> None:
        self.index: dict[bytes, int] = {}
        self.values: np.ndarray | None = None

    def clear(self) -> None:
        self.index, self.values = {}, None

    def get(self, x: np.ndarray) -> np.ndarray | None:
        """The values of the rows of ``x``, or None unless every row is held."""
        if self.values is None or len(x) == 0:
            return None
        rows = [self.index.get(k) for k in row_keys(x)]
        if any(r is None for r in rows):
            return None
        return np.asarray(self.values[np.asarray(rows, dtype=np.int64)])

    def put(self, x: np.ndarray, values: np.ndarray) -> None:
        """Hold ``values`` (one per row of ``x``) in place of the last batch's."""
        self.index = {k: i for i, k in enumerate(row_keys(x))}
        self.values = values
