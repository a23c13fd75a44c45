"""Development and evaluation halves of a data set, fixed by the samples' own bytes.

``data.part = "dev"`` or ``"eval"`` keeps one half of a data set; defaults are chosen on
``dev`` and reported on ``eval``, and the two never share a sample (docs/data.md). For a
data set read from files the half a sample falls in is decided by its content:

.. math::

    \\mathrm{part}(x) = \\mathrm{BLAKE2b}_{64}(\\mathrm{bytes}(x)) \\bmod 2
    \\quad (0: \\text{dev},\\ 1: \\text{eval}),

over the sample's features as loaded (an image's pixels, a table row's values, a graph's
node features and edges), so that the split does not depend on the seed, the order of the
files or the partition, and two copies of one sample (tables often hold duplicate rows) fall
in the same half. Both the training and the official test files are split, each sample by
itself. Data sets that a loader generates split themselves (``parts = "loader"`` in the
registry): other types or another random stream for evaluation.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Literal

import numpy as np

from fedad.core.types import Dataset, Features, GraphSet

Part = Literal["all", "dev", "eval"]
"""``data.part``: the whole data set, or its development or evaluation half."""
PartRule = Literal["content", "loader"]
"""How a registered data set is split: by content here, or by its loader."""
PARTS: tuple[Part, ...] = ("all", "dev", "eval")

_TRAIN_FIELDS = ("y", "mask", "defect", "group")
_TEST_FIELDS = ("y_test", "mask_test", "defect_test", "group_test")


def sample_bytes(x: Features, i: int) -> bytes:
    """Sample ``i`` of ``x`` as bytes: a dense row, or a graph's features then edges."""
    if isinstance(x, GraphSet):
        feats, edges = x.graph(i)
        a, b = np.ascontiguousarray(feats), np.ascontiguousarray(edges)
        return f"{a.dtype.str}{a.shape}".encode() + a.tobytes() + b.tobytes()
    row = np.ascontiguousarray(x[i])
    return f"{row.dtype.str}{row.shape}".encode() + row.tobytes()


def halves(x: Features) -> np.ndarray:
    """Per sample of ``x``, 0 (development) or 1 (evaluation), from its bytes."""
    return np.fromiter(
        (hashlib.blake2b(sample_bytes(x, i), digest_size=8).digest()[0] & 1 for i in range(len(x))),
        dtype=np.uint8,
        count=len(x),
    )


def _keep(x: Features, part: Part) -> np.ndarray:
    return np.flatnonzero(halves(x) == (1 if part == "eval" else 0))


def _take(x: Features, ids: np.ndarray) -> Features:
    return x.take(ids) if isinstance(x, GraphSet) else x[ids]


def take_part(ds: Dataset, part: Part) -> Dataset:
    """``ds`` with only the samples of ``part`` (``"all"``: ``ds`` itself), training and
    test files alike, every per-sample field (labels, masks, defect marks, client ids)
    kept in step."""
    if part == "all":
        return ds
    keep = _keep(ds.x, part)
    changes: dict[str, object] = {"x": _take(ds.x, keep)}
    for name in _TRAIN_FIELDS:
        value = getattr(ds, name)
        if value is not None:
            changes[name] = value[keep]
    if ds.x_test is not None:
        keep_t = _keep(ds.x_test, part)
        changes["x_test"] = _take(ds.x_test, keep_t)
        for name in _TEST_FIELDS:
            value = getattr(ds, name)
            if value is not None:
                changes[name] = value[keep_t]
    return dataclasses.replace(ds, **changes)  # type: ignore[arg-type]
