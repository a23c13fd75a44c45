"""IDX files (the MNIST family's format) and the Fashion-MNIST, MNIST and KMNIST loaders.

An IDX file is a 4-byte magic number -- two zero bytes, a type code (0x08 ubyte, 0x09 byte,
0x0B int16, 0x0C int32, 0x0D float32, 0x0E float64) and the number of dimensions -- then one
big-endian uint32 per dimension, then the data in C order, big-endian. Files may be gzipped.

Each loader looks for ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
``t10k-images-idx3-ubyte`` and ``t10k-labels-idx1-ubyte`` (optionally ``.gz``; the variant
``train-images.idx3-ubyte`` and a ``raw/`` subfolder, as torchvision lays them out, work
too) and keeps the official test split in ``x_test``/``y_test``. Decoded arrays are cached
per file (keyed on path, size and modification time), so a second load costs only the
conversion to float.
"""

from __future__ import annotations

import gzip
import math
import os
import zlib
from functools import lru_cache
from pathlib import Path
from typing import Protocol

import numpy as np

from fedad.core.errors import DataError
from fedad.core.types import Dataset
from fedad.data.imageops import resize_images, to_unit_float
from fedad.data.registry import register_dataset

__all__ = [
    "FASHION_MNIST_DIR",
    "find_idx_file",
    "load_fashion_mnist",
    "load_idx_dataset",
    "load_kmnist",
    "load_mnist",
    "read_idx",
]

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
MAX_IDX_BYTES = 2 * 2**30
"""Largest (decompressed) IDX file read: MNIST's training images are 47 MB."""
_CHUNK = 16 * 2**20

_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}

FASHION_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
MNIST_CLASSES = tuple(str(d) for d in range(10))
KMNIST_CLASSES = ("o", "ki", "su", "tsu", "na", "ha", "ma", "ya", "re", "wo")


def _header(raw: bytes, where: str) -> tuple[np.dtype, tuple[int, ...], int, int]:
    """``(dtype, dims, header bytes, total bytes)`` from the start of an IDX file.

    ``raw`` needs the magic number and the dimensions; sizes are exact Python integers, so
    dimensions whose product overflows 64 bits are refused, not wrapped around.
    """
    if len(raw) < 4:
        raise DataError(f"{where} is not an IDX file: only {len(raw)} bytes")
    if raw[0] != 0 or raw[1] != 0:
        raise DataError(
            f"{where} is not an IDX file: magic number starts with {raw[0]:#04x} {raw[1]:#04x}, "
            "not two zero bytes",
            "is it a gzip file without .gz, or another format?",
        )
    code, ndim = raw[2], raw[3]
    if code not in _DTYPES:
        raise DataError(
            f"{where} has unknown IDX type code {code:#04x}",
            "known: 0x08 ubyte, 0x09 byte, 0x0b int16, 0x0c int32, 0x0d float32, 0x0e float64",
        )
    if ndim == 0:
        raise DataError(f"{where} has an IDX header with 0 dimensions")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{where} is truncated inside its IDX header ({len(raw)} bytes)")
    dims = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    dtype = _DTYPES[code]
    expected = header + math.prod(dims) * dtype.itemsize
    if expected > MAX_IDX_BYTES:
        raise DataError(
            f"{where} has an IDX header (dims {dims}, {dtype.name}) that claims {expected:,} "
            f"bytes, more than the {MAX_IDX_BYTES:,} fedad reads",
            "the file is corrupt or not an image data set; get it again",
        )
    return dtype, dims, header, expected


def parse_idx(raw: bytes, where: str = "IDX data") -> np.ndarray:
    """Decode the bytes of an (uncompressed) IDX file into a native-endian array.

    Raises a one-line :class:`DataError` naming ``where`` on a malformed header, absurd
    dimensions or a data length that does not match the header's dimensions.
    """
    dtype, dims, header, expected = _header(raw, where)
    if len(raw) != expected:
        raise DataError(
            f"{where} has {len(raw)} bytes but its IDX header (dims {dims}, "
            f"{dtype.name}) needs {expected}",
            "the file is truncated or corrupt; get it again",
        )
    data = np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims)
    if dtype.byteorder == ">":
        data = data.astype(dtype.newbyteorder("="))
        data.setflags(write=False)
    return data


class _Reader(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


def _read_bounded(fh: _Reader, where: str) -> bytes:
    """The bytes of an IDX stream, never more than its header claims (plus one to notice).

    Reads in chunks, so neither a gzip bomb nor a header claiming terabytes makes the
    reader allocate more than the data really hold.
    """
    head = fh.read(4)
    if len(head) == 4 and head[0] == 0 and head[1] == 0 and head[3] > 0:
        head += fh.read(4 * head[3])
    try:
        _, _, _, expected = _header(head, where)
    except DataError:
        return head  # parse_idx names the problem
    buf = bytearray(head)
    while len(buf) <= expected:
        chunk = fh.read(min(_CHUNK, expected + 1 - len(buf)))
        if not chunk:
            break
        buf += chunk
    if len(buf) > expected:
        raise DataError(
            f"{where} is longer than the {expected:,} bytes its IDX header describes",
            "the file is corrupt; get it again",
        )
    return bytes(buf)


@lru_cache(maxsize=16)
def _read_idx_cached(path: str, size: int, mtime_ns: int) -> np.ndarray:
    del size, mtime_ns  # only part of the cache key
    where = f"'{path}'"
    try:
        with open(path, "rb") as fh:
            head = fh.read(2)
            fh.seek(0)
            if head == b"\x1f\x8b":
                with gzip.GzipFile(fileobj=fh) as gz:
                    raw = _read_bounded(gz, where)
            else:
                raw = _read_bounded(fh, where)
    except (OSError, EOFError, zlib.error) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise DataError(f"cannot read IDX file {where}: {why or type(err).__name__}") from None
    return parse_idx(raw, where=where)


def read_idx(path: str | os.PathLike[str]) -> np.ndarray:
    """Read an IDX file (gzipped or not, detected from its content); cached, read-only."""
    p = os.fspath(path)
    try:
        st = os.stat(p)
    except OSError as err:
        raise DataError(f"cannot read IDX file '{p}': {err.strerror}") from None
    return _read_idx_cached(os.path.abspath(p), st.st_size, st.st_mtime_ns)


def find_idx_file(directory: Path, stem: str) -> Path | None:
    """The file for ``stem`` (e.g. ``train-images-idx3-ubyte``) in ``directory``, if any."""
    dotted = stem.replace("-idx", ".idx")
    for folder in (directory, directory / "raw"):
        for name in (stem, stem + ".gz", dotted, dotted + ".gz"):
            if (folder / name).is_file():
                return folder / name
    return None


def _images(arr: np.ndarray, where: Path) -> np.ndarray:
    if arr.ndim != 3 or arr.dtype != np.uint8:
        raise DataError(
            f"'{where}' holds {arr.dtype.name} data of shape {arr.shape}, "
            "expected uint8 images (N, H, W)"
        )
    return arr


def _labels(arr: np.ndarray, where: Path, n_images: int, n_classes: int) -> np.ndarray:
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise DataError(
            f"'{where}' holds {arr.dtype.name} data of shape {arr.shape}, "
            "expected integer labels (N,)"
        )
    if arr.shape[0] != n_images:
        raise DataError(f"'{where}' has {arr.shape[0]} labels for {n_images} images")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= n_classes):
        raise DataError(
            f"'{where}' has labels {int(arr.min())}..{int(arr.max())}, expected 0..{n_classes - 1}"
        )
    return arr.astype(np.int64)


def load_idx_dataset(
    name: str,
    directory: str | os.PathLike[str],
    classes: tuple[str, ...],
    size: int | None = None,
    how_to_get: str = "",
) -> Dataset:
    """Load the four standard IDX files of an MNIST-like data set from ``directory``."""
    folder = Path(directory).expanduser()
    found: dict[str, Path] = {}
    missing: list[str] = []
    for key, stem in _FILES.items():
        hit = find_idx_file(folder, stem)
        if hit is None:
            missing.append(stem + "[.gz]")
        else:
            found[key] = hit
    if missing:
        raise DataError(
            f"{name}: no {', '.join(missing)} in '{folder}'",
            how_to_get or "set data.path to the folder holding the four IDX files",
        )
    x = _images(read_idx(found["train_images"]), found["train_images"])
    xt = _images(read_idx(found["test_images"]), found["test_images"])
    y = _labels(read_idx(found["train_labels"]), found["train_labels"], len(x), len(classes))
    yt = _labels(read_idx(found["test_labels"]), found["test_labels"], len(xt), len(classes))
    if x.shape[1:] != xt.shape[1:]:
        raise DataError(f"{name}: train images are {x.shape[1:]} but test images {xt.shape[1:]}")
    xf = to_unit_float(x)[:, None]
    xtf = to_unit_float(xt)[:, None]
    if size is not None:
        xf, xtf = resize_images(xf, size), resize_images(xtf, size)
    return Dataset(name, xf, y, "image", classes, x_test=xtf, y_test=yt)


def _needs_path(name: str, path: str | None, url: str) -> str:
    if path is None:
        raise DataError(
            f"data set '{name}' needs data.path: nothing is downloaded",
            f"get the four IDX files from {url} and set data.path to their folder",
        )
    return path


@register_dataset(
    "fashion_mnist",
    description="Fashion-MNIST, 70k 28x28 clothing images, 10 classes, official test split "
    "(Debian dataset-fashion-mnist, or data.path)",
    kind="image",
)
def load_fashion_mnist(path: str | None = None, size: int | None = None) -> Dataset:
    """Fashion-MNIST from ``path`` or the Debian package's folder."""
    return load_idx_dataset(
        "fashion_mnist",
        path or FASHION_MNIST_DIR,
        FASHION_CLASSES,
        size,
        "install the Debian package dataset-fashion-mnist, or set data.path to a folder with "
        "the IDX files from https://github.com/zalandoresearch/fashion-mnist",
    )


@register_dataset(
    "mnist",
    description="MNIST handwritten digits, 70k 28x28, official test split (IDX files at data.path)",
    kind="image",
)
def load_mnist(path: str | None = None, size: int | None = None) -> Dataset:
    """MNIST from the four IDX files in ``path``."""
    url = "https://yann.lecun.com/exdb/mnist/ (or any mirror)"
    folder = _needs_path("mnist", path, url)
    return load_idx_dataset("mnist", folder, MNIST_CLASSES, size, f"get them from {url}")


@register_dataset(
    "kmnist",
    description="Kuzushiji-MNIST, 70k 28x28 cursive Japanese, 10 classes (IDX files at data.path)",
    kind="image",
)
def load_kmnist(path: str | None = None, size: int | None = None) -> Dataset:
    """KMNIST from the four IDX files in ``path``."""
    url = "https://github.com/rois-codh/kmnist"
    folder = _needs_path("kmnist", path, url)
    return load_idx_dataset("kmnist", folder, KMNIST_CLASSES, size, f"get them from {url}")
