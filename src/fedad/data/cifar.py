"""CIFAR-10 from the official "python version" pickle batches at a user path.

The folder (``data.path``, or its ``cifar-10-batches-py`` subfolder) must hold
``data_batch_1`` .. ``data_batch_5`` and ``test_batch``: pickled dicts with ``b'data'``
(``N x 3072`` uint8, channel-major) and ``b'labels'``; ``batches.meta`` (``b'label_names'``)
names the classes when present. Pickles are read with a restricted unpickler that only
builds numpy arrays and plain containers, so a tampered file cannot run code: numpy's
array class is only a token for ``_reconstruct`` (a pickle cannot allocate an array of a
shape it names), ``codecs.encode`` only turns str into Latin-1 bytes, and dtypes are
always fresh copies. Any other failure of the unpickler (truncated, garbled, too large)
and every wrong type, shape or label is a one-line :class:`DataError` naming the file.
"""

from __future__ import annotations

import io
import os
import pickle
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from fedad.core.errors import DataError
from fedad.core.types import Dataset
from fedad.data.imageops import resize_images, to_unit_float
from fedad.data.registry import register_dataset

__all__ = ["CIFAR10_CLASSES", "load_cifar10", "read_cifar_batch"]

CIFAR10_CLASSES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
SUBFOLDER = "cifar-10-batches-py"
HOW_TO_GET = (
    "download cifar-10-python.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html, "
    "extract it and set data.path to the folder"
)

MAX_PICKLE_BYTES = 512 * 2**20
"""Largest CIFAR pickle read (a real batch is about 31 MB)."""
MAX_LABEL = 2**31 - 1
"""Largest label value accepted before the class-range check (it names the class count)."""

_NDARRAY = object()
"""What a pickle's ``numpy.ndarray`` global becomes: only :func:`_reconstruct` accepts it.

The real class would be callable from the pickle (``REDUCE``/``NEWOBJ``) and could
allocate an array of any shape before any check runs.
"""

_LATIN1 = {"latin1", "latin-1", "latin_1", "iso-8859-1", "iso8859-1", "l1"}


def _encode(obj: object, encoding: str = "utf-8", errors: str = "strict") -> bytes:
    """``_codecs.encode`` as pickles of bytes call it: a str to bytes in Latin-1, nothing else."""
    if not isinstance(obj, str) or not isinstance(encoding, str) or errors != "strict":
        raise pickle.UnpicklingError("unexpected arguments of codecs.encode")
    if encoding.lower() not in _LATIN1:
        raise pickle.UnpicklingError(f"refusing codec {encoding[:40]!r} (only latin1)")
    return obj.encode("latin-1")


def _dtype(obj: object, align: object = False, copy: object = False) -> np.dtype:
    """``numpy.dtype`` as pickles call it, always a fresh copy (a pickle's state is set on it)."""
    del copy
    return np.dtype(obj, align=bool(align), copy=True)  # type: ignore[call-overload, no-any-return]


def _reconstruct(subtype: object, shape: object, dtype: object) -> np.ndarray:
    """numpy's ``_reconstruct`` for plain arrays: an empty array the pickle's state fills."""
    import numpy._core.multiarray as multiarray

    if subtype is not _NDARRAY or shape != (0,):
        raise pickle.UnpicklingError("unexpected arguments of numpy's _reconstruct")
    out = multiarray._reconstruct(np.ndarray, (0,), dtype)
    assert isinstance(out, np.ndarray)
    return out


_ALLOWED: dict[tuple[str, str], Any] = {
    ("numpy", "ndarray"): _NDARRAY,
    ("numpy", "dtype"): _dtype,
    ("_codecs", "encode"): _encode,
    ("codecs", "encode"): _encode,
}


def _numpy_internal(module: str, name: str) -> Any:
    """``numpy(.core|._core).multiarray._reconstruct`` and friends, across numpy versions."""
    import numpy._core.multiarray as multiarray
    import numpy._core.numeric as numeric

    table = {"multiarray": multiarray, "numeric": numeric}
    leaf = module.rsplit(".", 1)[-1]
    wanted = name in {"_reconstruct", "scalar", "_frombuffer"}
    if wanted and module.startswith(("numpy.core.", "numpy._core.")) and leaf in table:
        if name == "_reconstruct":
            return _reconstruct
        return getattr(table[leaf], name, None)
    return None


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return _ALLOWED[(module, name)]
        found = _numpy_internal(module, name)
        if found is not None:
            return found
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}"[:200])


@lru_cache(maxsize=8)
def _load_pickle(path: str, mtime_ns: int) -> Any:
    del mtime_ns
    try:
        size = os.path.getsize(path)
        if size > MAX_PICKLE_BYTES:
            raise DataError(
                f"cannot read CIFAR batch '{path}': {size:,} bytes, more than the "
                f"{MAX_PICKLE_BYTES:,} a batch may have (is it the right file?)"
            )
        with open(path, "rb") as fh:
            raw = fh.read()
        # from memory: a length field in the pickle never makes the reader allocate more
        return _SafeUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except DataError:
        raise
    except Exception as err:  # hostile bytes can fail the unpickler in any way
        why = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
        if isinstance(err, OSError) and err.strerror:
            why = err.strerror
        elif isinstance(err, MemoryError):
            why = "it asks for more memory than there is (a corrupt or hostile file)"
        raise DataError(f"cannot read CIFAR batch '{path}': {why[:300]}") from None


def _batch_labels(raw: object, path: Path, n_classes: int) -> np.ndarray:
    """A batch's ``b'labels'`` as int64, or a one-line error naming the file and the value."""
    if isinstance(raw, np.ndarray):
        if raw.ndim != 1 or raw.dtype.kind not in "iu":
            raise DataError(
                f"'{path}': b'labels' is a {raw.dtype.name} array of shape {raw.shape}, "
                "expected a list of class numbers"
            )
        values: list[Any] = raw.tolist()
    elif isinstance(raw, list | tuple):
        values = list(raw)
    else:
        raise DataError(
            f"'{path}': b'labels' is {type(raw).__name__}, expected a list of class numbers"
        )
    for i, v in enumerate(values):
        if isinstance(v, np.integer):
            v = int(v)
        if type(v) is not int or not 0 <= v < n_classes:
            shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
            raise DataError(
                f"'{path}': label {i} is {shown}, expected a class number 0..{n_classes - 1}"
            )
    return np.asarray(values, dtype=np.int64).reshape(len(values))


def read_cifar_batch(
    path: Path, n_classes: int = len(CIFAR10_CLASSES)
) -> tuple[np.ndarray, np.ndarray]:
    """``(images uint8 (N, 3, 32, 32), labels int64 (N,))`` of one pickled batch file.

    Anything but a dict with a ``b'data'`` uint8 array ``(N, 3072)`` and ``b'labels'``, N
    integers in ``0..n_classes - 1``, is a one-line :class:`DataError` naming the file.
    """
    obj = _load_pickle(os.path.abspath(path), path.stat().st_mtime_ns)
    if not isinstance(obj, dict) or b"data" not in obj or b"labels" not in obj:
        keys = sorted(map(repr, obj))[:20] if isinstance(obj, dict) else type(obj).__name__
        raise DataError(f"'{path}' is not a CIFAR-10 batch: no b'data'/b'labels' (has {keys})")
    data = obj[b"data"]
    if not isinstance(data, np.ndarray):
        raise DataError(
            f"'{path}': b'data' is {type(data).__name__}, expected a uint8 array (N, 3072)"
        )
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise DataError(
            f"'{path}': b'data' is {data.dtype.name} {data.shape}, expected uint8 (N, 3072)"
        )
    labels = _batch_labels(obj[b"labels"], path, n_classes)
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
    if not isinstance(obj, dict):
        raise DataError(f"'{meta}' is {type(obj).__name__}, expected a dict with b'label_names'")
    names = obj.get(b"label_names")
    if names is None:
        return CIFAR10_CLASSES
    if not isinstance(names, list | tuple) or not names:
        raise DataError(
            f"'{meta}': b'label_names' is {type(names).__name__}"
            f"{' (empty)' if isinstance(names, list | tuple) else ''}, expected a list of names"
        )
    out: list[str] = []
    for i, n in enumerate(names):
        try:
            name = n.decode("utf-8") if isinstance(n, bytes) else n
        except UnicodeDecodeError:
            name = None
        if not isinstance(name, str) or not name.isprintable() or not 0 < len(name) <= 100:
            shown = repr(n) if len(repr(n)) <= 40 else repr(n)[:37] + "..."
            raise DataError(
                f"'{meta}': label name {i} is {shown}, expected a printable UTF-8 name "
                "(delete batches.meta to use the standard CIFAR-10 names)"
            )
        out.append(name)
    return tuple(out)


@register_dataset(
    "cifar10",
    description="CIFAR-10, 60k 32x32 colour images, 10 classes, official test split "
    "(python batches at data.path)",
    kind="image",
)
def load_cifar10(path: str | None = None, size: int | None = None) -> Dataset:
    """CIFAR-10 as ``(N, 3, 32, 32)`` float32 in [0, 1] with the official test split."""
    folder = _folder(path)
    classes = _class_names(folder)
    parts = [read_cifar_batch(folder / f, len(classes)) for f in TRAIN_BATCHES]
    xt_raw, yt = read_cifar_batch(folder / TEST_BATCH, len(classes))
    y = np.concatenate([p[1] for p in parts])
    x = np.concatenate([to_unit_float(p[0]) for p in parts])
    xt = to_unit_float(xt_raw)
    if size is not None:
        x, xt = resize_images(x, size), resize_images(xt, size)
    return Dataset("cifar10", x, y, "image", classes, x_test=xt, y_test=yt)
