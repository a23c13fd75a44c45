"""Blocks of loaded samples addressed by one global integer id (no copies until gathered)."""

from __future__ import annotations

import numpy as np

from fedad.core.types import Features, GraphSet


class Catalog:
    """Blocks of samples addressed by one global integer id (no copies until gathered).

    A block is dense (an array of vectors or images) or a :class:`GraphSet`, with optional
    pixel masks; :meth:`gather` and :meth:`gather_masks` copy the samples of some ids.
    """

    def __init__(self) -> None:
        self.blocks: list[Features] = []
        self.masks: list[np.ndarray | None] = []
        self.starts: list[int] = []
        self._classes: list[np.ndarray] = []
        self._members: list[np.ndarray] = []
        self.total = 0

    def add(
        self, x: Features, classes: np.ndarray, member: int, mask: np.ndarray | None = None
    ) -> np.ndarray:
        """Append a block; return its global ids."""
        ids = np.arange(self.total, self.total + len(x), dtype=np.int64)
        self.blocks.append(x)
        self.masks.append(mask)
        self.starts.append(self.total)
        self._classes.append(np.asarray(classes, dtype=np.int64))
        self._members.append(np.full(len(x), member, dtype=np.int64))
        self.total += len(x)
        return ids

    @property
    def classes(self) -> np.ndarray:
        """The class of every global id."""
        return np.concatenate(self._classes) if self._classes else np.empty(0, np.int64)

    @property
    def members(self) -> np.ndarray:
        """The member (loaded data set) number of every global id."""
        return np.concatenate(self._members) if self._members else np.empty(0, np.int64)

    @property
    def has_masks(self) -> bool:
        """Whether every block has pixel masks."""
        return bool(self.masks) and all(m is not None for m in self.masks)

    def _locate(self, ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(np.asarray(self.starts), ids, side="right") - 1

    def _gather_dense(self, blocks: list[np.ndarray], ids: np.ndarray, dtype: type) -> np.ndarray:
        out = np.empty((len(ids), *blocks[0].shape[1:]), dtype=dtype)
        if len(ids) == 0:
            return out
        block_of = self._locate(ids)
        for b in np.unique(block_of):
            mask = block_of == b
            out[mask] = blocks[b][ids[mask] - self.starts[b]]
        return out

    def gather(self, ids: np.ndarray) -> Features:
        """The samples with global ``ids``, in that order: a new float32 array or graph set."""
        if isinstance(self.blocks[0], GraphSet):
            block_of = self._locate(ids)
            graphs = [
                self.blocks[b].graph(int(i - self.starts[b]))
                for b, i in zip(block_of, ids, strict=True)
            ]
            return GraphSet.from_graphs(graphs)
        return self._gather_dense(self.blocks, ids, np.float32)  # type: ignore[arg-type]

    def gather_masks(self, ids: np.ndarray) -> np.ndarray | None:
        """The pixel masks of ``ids`` (uint8), or ``None`` unless every block has masks."""
        if not self.has_masks:
            return None
        return self._gather_dense(self.masks, ids, np.uint8)  # type: ignore[arg-type]
