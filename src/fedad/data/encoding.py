"""One-hot encoding of a table's categorical columns, with the categories of training data.

A table loader stores a categorical column as the index of each row's category among the
column's values (:attr:`fedad.core.types.Dataset.categorical`; NaN when the cell is
empty). The federation keeps only the categories that occur in the clients' training rows
(:func:`seen_categories`: what a server gets from the union of the clients' category sets)
and replaces the column by one 0/1 column per kept category (:func:`one_hot`). A category
that training never saw, in test rows or in new data scored later, encodes as all zeros; an
empty cell encodes as NaN in every one of its columns, for ``data.missing`` to handle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Encoding", "seen_categories"]


def seen_categories(
    blocks: Sequence[np.ndarray], categorical: Sequence[tuple[int, Sequence[str]]]
) -> dict[int, tuple[str, ...]]:
    """Per categorical column, the categories (in the loader's order) that occur in
    ``blocks`` (the clients' raw training rows, category indices)."""
    out: dict[int, tuple[str, ...]] = {}
    for j, cats in categorical:
        used: set[int] = set()
        for b in blocks:
            col = b[:, j]
            used |= {int(v) for v in np.unique(col[np.isfinite(col)]) if v >= 0}
        out[j] = tuple(c for i, c in enumerate(cats) if i in used)
    return out


@dataclass(frozen=True)
class Encoding:
    """The one-hot layout of a table: raw ``columns``; for each categorical column index,
    the categories kept (``categories``) and, per kept category, its raw index."""

    columns: tuple[str, ...]
    categories: Mapping[int, tuple[str, ...]]

    @property
    def encoded_columns(self) -> tuple[str, ...]:
        """Names of the encoded features: ``col`` for numbers, ``col=value`` per category."""
        out: list[str] = []
        for j, name in enumerate(self.columns):
            if j in self.categories:
                out += [f"{name}={c}" for c in self.categories[j]]
            else:
                out.append(name)
        return tuple(out)

    @property
    def one_hot_mask(self) -> np.ndarray:
        """True for the encoded features that are one-hot columns (not standardised)."""
        flags: list[bool] = []
        for j in range(len(self.columns)):
            flags += [True] * len(self.categories[j]) if j in self.categories else [False]
        return np.array(flags, dtype=bool)

    def apply(self, x: np.ndarray, raw_categories: Mapping[int, Sequence[str]]) -> np.ndarray:
        """Encode raw rows ``x`` ``(N, len(columns))`` whose categorical cells index
        ``raw_categories[j]`` (-1: a value outside them) into ``(N, len(encoded_columns))``.

        Shapes:
            - ``x``: ``(N, D)`` float32, categorical cells as indices, NaN when empty
            - returns ``(N, D')`` float32
        """
        parts: list[np.ndarray] = []
        for j in range(len(self.columns)):
            col = x[:, j]
            if j not in self.categories:
                parts.append(col[:, None].astype(np.float32))
                continue
            kept = self.categories[j]
            lookup = {c: i for i, c in enumerate(raw_categories[j])}
            raw_ids = np.array([lookup[c] for c in kept], dtype=np.float32)
            block = (col[:, None] == raw_ids[None, :]).astype(np.float32)
            block[~np.isfinite(col)] = np.nan
            parts.append(block)
        if not parts:
            return np.zeros((len(x), 0), np.float32)
        return np.concatenate(parts, axis=1)
