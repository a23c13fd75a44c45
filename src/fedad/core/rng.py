"""Seeded random streams: every random choice is a pure function of (seed, keys)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np


def rng(*keys: int) -> np.random.Generator:
    """A generator for the stream named by integer ``keys`` (negative seeds allowed)."""
    return np.random.default_rng([int(k) % (1 << 64) for k in keys])


@contextmanager
def torch_seeded(seed: int) -> Iterator[None]:
    """Torch's CPU generator seeded with ``seed`` inside the block and restored after it
    (``torch.random.fork_rng``): seeded initial weights or augmentations that disturb
    nothing outside."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield
