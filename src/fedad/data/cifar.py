"""CIFAR-10 from the official "python version" pickle batches at a user path.

The folder (``data.path``, or its ``cifar-10-batches-py`` subfolder) must hold
``data_batch_1`` .. ``data_batch_5`` and ``test_batch``: pickled dicts with ``b'data'``
(``N x 3072`` uint8, channel-major) and ``b'labels'``; ``batches.meta`` (``b'label_names'``)
names the classes when present. Pickles are read with a restricted unpickler that only
builds numpy arrays and plain containers, so a tampered file cannot run code.
"""

from __future__ import annotations

import codecs
import os
import pickle
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from fedad.data.imageops import resize_images, to_unit_float
from fedad.data.registry import register_dataset
from fedad.data.types import Dataset
from fedad.errors import DataError

__all__ = ["CIFAR10_CLASSES", "load_cifar10", "read_cifar_batch"]

CIFAR10_CLASSES = (
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
)  # fmt: skip
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
SUBFOLDER = "cifar-10-batches-py"
HOW_TO_GET = (
    "download cifar-10-python.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html, "
    "extract it and set data.path to the folder"
)

_ALLOWED: dict[tuple[str, str], Any] = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): codecs.encode,
    ("codecs", "encode"): codecs.encode,
}


def _numpy_internal(module: str, name: str) -> Any:
    """``numpy(.core|._core).multiarray._reconstruct`` and friends, across numpy versions."""
    import numpy._core.multiarray as multiarray
    import numpy._core.numeric as numeric

    table = {"multiarray": multiarray, "numeric": numeric}
    leaf = module.rsplit(".", 1)[-1]
    wanted = name in {"_reconstruct", "scalar", "_frombuffer"}
    if wanted and module.startswith(("numpy.core.", "numpy._core.")) and leaf in table:
        return getattr(table[leaf], name, None)
    return None


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return _ALLOWED[(module, name)]
        found = _numpy_internal(module, name)
        if found is not None:
            return found
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


@lru_cache(maxsize=8)
def _load_pickle(path: str, mtime_ns: int) -> Any:
    del mtime_ns
    try:
        with open(path, "rb") as fh:
            return _SafeUnpickler(fh, encoding="bytes").load()
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError) as err:
        raise DataError(f"cannot read CIFAR batch '{path}': {err}") from None


def read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(images uint8 (N, 3, 32, 32), labels int64 (N,))`` of one pickled batch file."""
    obj = _load_pickle(os.path.abspath(path), path.stat().st_mtime_ns)
    if not isinstance(obj, dict) or b"data" not in obj or b"labels" not in obj:
        keys = sorted(map(str, obj)) if isinstance(obj, dict) else type(obj).__name__
        raise DataError(f"'{path}' is not a CIFAR-10 batch: no b'data'/b'labels' (has {keys})")
    data = np.asarray(obj[b"data"])
    labels = np.asarray(obj[b"labels"], dtype=np.int64)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise DataError(
            f"'{path}': b'data' is {data.dtype.name} {data.shape}, expected uint8 (N, 3072)"
        )
    if labels.shape != (data.shape[0],):
        raise DataError(f"'{path}' has {labels.size} labels for {data.shape[0]} images")
    return data.reshape(-1, 3, 32, 32), labels


def _folder(path: str | None) -> Path:
    if path is None:
        raise DataError("data set 'cifar10' needs data.path: nothing is downloaded", HOW_TO_GET)
    base = Path(path).expanduser()
    for folder in (base, base / SUBFOLDER):
        if all((folder / f).is_file() for f in (*TRAIN_BATCHES, TEST_BATCH)):
            return folder
    missing = [f for f in (*TRAIN_BATCHES, TEST_BATCH) if not (base / f).is_file()]
    raise DataError(
        f"cifar10: no {', '.join(missing)} in '{base}' or '{base / SUBFOLDER}'", HOW_TO_GET
    )


def _class_names(folder: Path) -> tuple[str, ...]:
    meta = folder / "batches.meta"
    if not meta.is_file():
        return CIFAR10_CLASSES
    obj = _load_pickle(os.path.abspath(meta), meta.stat().st_mtime_ns)
    names = obj.get(b"label_names") if isinstance(obj, dict) else None
    if not names:
        return CIFAR10_CLASSES
    return tuple(n.decode() if isinstance(n, bytes) else str(n) for n in names)


@register_dataset(
    "cifar10",
    description="CIFAR-10, 60k 32x32 colour images, 10 classes, official test split "
    "(python batches at data.path)",
    kind="image",
)
def load_cifar10(path: str | None = None, size: int | None = None) -> Dataset:
    """CIFAR-10 as ``(N, 3, 32, 32)`` float32 in [0, 1] with the official test split."""
    folder = _folder(path)
    parts = [read_cifar_batch(folder / f) for f in TRAIN_BATCHES]
    xt_raw, yt = read_cifar_batch(folder / TEST_BATCH)
    classes = _class_names(folder)
    y = np.concatenate([p[1] for p in parts])
    for where, labels in (("training", y), ("test", yt)):
        if labels.size and (labels.min() < 0 or labels.max() >= len(classes)):
            raise DataError(
                f"cifar10: {where} labels {labels.min()}..{labels.max()} do not fit "
                f"{len(classes)} classes"
            )
    x = np.concatenate([to_unit_float(p[0]) for p in parts])
    xt = to_unit_float(xt_raw)
    if size is not None:
        x, xt = resize_images(x, size), resize_images(xt, size)
    return Dataset("cifar10", x, y, "image", classes, x_test=xt, y_test=yt)
