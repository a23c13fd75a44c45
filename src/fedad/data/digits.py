"""scikit-learn's 8x8 handwritten digits as a small, offline, MNIST-like image data set."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from fedad.core.types import Dataset
from fedad.data.imageops import resize_images
from fedad.data.registry import register_dataset

__all__ = ["load_digits"]


@lru_cache(maxsize=1)
def _raw_digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits as sk_load_digits

    bunch = sk_load_digits()
    x = np.asarray(bunch.images, dtype=np.float32)[:, None] / np.float32(16.0)
    y = np.asarray(bunch.target, dtype=np.int64)
    x.setflags(write=False)
    y.setflags(write=False)
    return x, y


@register_dataset(
    "digits",
    description="sklearn handwritten digits, 1797 8x8 images, 10 classes (data.size=28 upsamples)",
    kind="image",
)
def load_digits(path: str | None = None, size: int | None = None) -> Dataset:
    """The 1797 digits of :func:`sklearn.datasets.load_digits` as ``(N, 1, 8, 8)`` in [0, 1].

    ``size`` upsamples bilinearly to ``size x size`` (e.g. 28 for an MNIST-like look). There is
    no official test split. ``path`` is ignored (the data ship with scikit-learn).
    """
    del path
    x, y = _raw_digits()
    out = x if size is None else resize_images(x, size)
    if out is x:
        out = x.copy()  # never hand out the cached array
    return Dataset("digits", out, y.copy(), "image", tuple(str(d) for d in range(10)))
