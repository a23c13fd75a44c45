"""Seeded random streams: every random choice is a pure function of (seed, keys)."""

from __future__ import annotations

import numpy as np


def rng(*keys: int) -> np.random.Generator:
    """A generator for the stream named by integer ``keys`` (negative seeds allowed)."""
    return np.random.default_rng([int(k) % (1 << 64) for k in keys])
