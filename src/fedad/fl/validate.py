"""Checks that a client reply is well-formed before the server aggregates it.

A reply is rejected (and the rejection logged by the caller) when an expected array is
missing, has the wrong shape or dtype, or holds NaN/Inf, or an expected scalar is missing or
not a finite non-negative number. The round goes on with the replies that pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from fedad.fl.messages import Message


@dataclass(frozen=True)
class ArraySpec:
    """Expected shape and dtype of one array."""

    shape: tuple[int, ...]
    dtype: str

    @classmethod
    def of(cls, a: np.ndarray) -> ArraySpec:
        return cls(tuple(int(s) for s in a.shape), str(a.dtype))


def spec_of(arrays: Mapping[str, np.ndarray]) -> dict[str, ArraySpec]:
    """The spec every reply carrying these arrays must match."""
    return {k: ArraySpec.of(np.asarray(v)) for k, v in arrays.items()}


def check_reply(
    reply: Message,
    arrays: Mapping[str, ArraySpec] | None = None,
    scalars: Sequence[str] = (),
    kind: str | None = None,
) -> str | None:
    """Return why ``reply`` is malformed, or ``None`` when it is fine."""
    if kind is not None and reply.kind != kind:
        return f"reply kind '{reply.kind}' where '{kind}' was expected"
    for name, spec in (arrays or {}).items():
        if name not in reply.arrays:
            return f"array '{name}' missing"
        a = reply.arrays[name]
        if tuple(a.shape) != spec.shape:
            return f"array '{name}' has shape {tuple(a.shape)}, expected {spec.shape}"
        if str(a.dtype) != spec.dtype:
            return f"array '{name}' has dtype {a.dtype}, expected {spec.dtype}"
    for name, a in reply.arrays.items():
        if np.issubdtype(a.dtype, np.number) and not np.all(np.isfinite(a)):
            return f"array '{name}' holds NaN or Inf"
    for name in scalars:
        v = reply.scalars.get(name)
        if not isinstance(v, int | float) or isinstance(v, bool):
            return f"scalar '{name}' missing or not a number"
        if not np.isfinite(v) or v < 0:
            return f"scalar '{name}' = {v} is not a finite non-negative number"
    return None
