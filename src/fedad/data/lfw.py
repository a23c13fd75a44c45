"""scikit-image's ``lfw_subset``: 100 face crops and 100 non-face crops, 25x25 grey.

The faces are crops of Labeled Faces in the Wild (Huang et al. 2007), the non-faces crops
of other image content, as scikit-image ships them for its face-detection example
(``skimage.data.lfw_subset``: faces first, then non-faces). Class 0
is ``face``, class 1 ``non-face``; a config picks which is normal (``data.normal = [0]``,
``data.anomaly = [1]`` treats every crop that is not a face as an anomaly). The file ships
in scikit-image's wheel (the ``pretrained`` extra); nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import os
from functools import lru_cache

import numpy as np

from fedad.core.errors import DataError
from fedad.core.types import Dataset
from fedad.data.imageops import resize_images
from fedad.data.registry import register_dataset

__all__ = ["load_lfw_subset"]

_FILE = "lfw_subset.npy"
_FACES = 100


@lru_cache(maxsize=1)
def _raw() -> np.ndarray:
    if importlib.util.find_spec("skimage") is None:
        raise DataError(
            "data set 'lfw_subset' needs scikit-image, which is not installed",
            "pip install 'fedad[pretrained]'",
        )
    from skimage import data

    if not os.path.isfile(os.path.join(data.data_dir, _FILE)):  # never download
        raise DataError(
            f"scikit-image here does not ship '{_FILE}' (data set 'lfw_subset')",
            "reinstall scikit-image from its wheel",
        )
    x = np.asarray(data.lfw_subset(), dtype=np.float32)  # type: ignore[no-untyped-call]
    if x.shape != (2 * _FACES, 25, 25) or not np.isfinite(x).all():
        raise DataError(
            f"scikit-image's '{_FILE}' holds {x.shape}, not 200 finite 25x25 images",
            "reinstall scikit-image",
        )
    out = np.ascontiguousarray(np.clip(x, 0.0, 1.0)[:, None])
    out.setflags(write=False)  # cached: shared by every call
    return out


@register_dataset(
    "lfw_subset",
    description="scikit-image LFW subset: 100 faces, 100 non-faces, 25x25 grey (data.size resizes)",
    kind="image",
)
def load_lfw_subset(path: str | None = None, size: int | None = None) -> Dataset:
    """The 200 crops as ``(200, 1, 25, 25)`` in [0, 1]; ``y`` 0 = face, 1 = non-face.

    ``size`` resizes bilinearly to ``size x size``; ``path`` is ignored. No official test
    split.
    """
    del path
    x = _raw()
    out = x if size is None else resize_images(x, size)
    if out is x:
        out = x.copy()  # never hand out the cached array
    y = np.repeat(np.arange(2, dtype=np.int64), _FACES)
    return Dataset("lfw_subset", out, y, "image", ("face", "non-face"))
