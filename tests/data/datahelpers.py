"""Helpers for the data-layer tests: writers for the real file formats, synthetic data sets.

The synthetic data sets have a unique, exactly representable id in feature 0 of each row
(vectors) or pixel ``[0, 0, 0]`` (images, id / 2**16), so tests can check sample identity
after partitioning. They are registered for the test session only.
"""

from __future__ import annotations

import gzip
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fedad.core.types import DataKind, Dataset, GraphSet

IDX_CODES = {np.uint8: 0x08, np.int8: 0x09, np.int16: 0x0B, np.int32: 0x0C,
             np.float32: 0x0D, np.float64: 0x0E}  # fmt: skip


def idx_bytes(arr: np.ndarray) -> bytes:
    """The bytes of an IDX file holding ``arr`` (real header layout, big-endian data)."""
    code = IDX_CODES[arr.dtype.type]
    header = bytes([0, 0, code, arr.ndim]) + np.asarray(arr.shape, dtype=">u4").tobytes()
    return header + arr.astype(arr.dtype.newbyteorder(">")).tobytes()


def write_idx(path: Path, arr: np.ndarray) -> Path:
    """Write ``arr`` as an IDX file, gzipped when ``path`` ends in ``.gz``."""
    raw = idx_bytes(arr)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(raw) if path.suffix == ".gz" else raw)
    return path


def write_mnist_like(
    folder: Path, n_train: int = 60, n_test: int = 20, gz: bool = True, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Write the four standard IDX files of a tiny 28x28, 10-class data set into ``folder``."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, size=(n_train, 28, 28), dtype=np.uint8)
    y = (np.arange(n_train) % 10).astype(np.uint8)
    xt = rng.integers(0, 256, size=(n_test, 28, 28), dtype=np.uint8)
    yt = (np.arange(n_test) % 10).astype(np.uint8)
    ext = ".gz" if gz else ""
    write_idx(folder / f"train-images-idx3-ubyte{ext}", x)
    write_idx(folder / f"train-labels-idx1-ubyte{ext}", y)
    write_idx(folder / f"t10k-images-idx3-ubyte{ext}", xt)
    write_idx(folder / f"t10k-labels-idx1-ubyte{ext}", yt)
    return x, y, xt, yt


def write_cifar_like(
    folder: Path, per_batch: int = 10, n_test: int = 10, meta: bool = True, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Write CIFAR-10 python batches (real dict keys, protocol 2) into ``folder``."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    xs, ys = [], []
    for i in range(1, 6):
        data = rng.integers(0, 256, size=(per_batch, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, size=per_batch)]
        batch: dict[bytes, Any] = {
            b"batch_label": f"training batch {i} of 5".encode(),
            b"labels": labels,
            b"data": data,
            b"filenames": [f"img_{i}_{j}.png".encode() for j in range(per_batch)],
        }
        (folder / f"data_batch_{i}").write_bytes(pickle.dumps(batch, protocol=2))
        xs.append(data)
        ys.extend(labels)
    test = rng.integers(0, 256, size=(n_test, 3072), dtype=np.uint8)
    test_labels = [int(v) for v in rng.integers(0, 10, size=n_test)]
    (folder / "test_batch").write_bytes(
        pickle.dumps({b"labels": test_labels, b"data": test, b"batch_label": b"test"}, 2)
    )
    if meta:
        names = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog",
                 b"horse", b"ship", b"truck"]  # fmt: skip
        meta_obj = {b"label_names": names, b"num_cases_per_batch": per_batch, b"num_vis": 3072}
        (folder / "batches.meta").write_bytes(pickle.dumps(meta_obj, protocol=2))
    return np.concatenate(xs), np.asarray(ys), test, np.asarray(test_labels)


# --------------------------------------------------------------------------- synthetic sets

SYNTH_CLASSES = 5
SYNTH_PER_CLASS = 80


def synth_vectors(offset: int = 0, dim: int = 4, seed: int = 0) -> Dataset:
    """5 classes x 80 rows; feature 0 is a unique id (``offset + row``), no test split."""
    rng = np.random.default_rng(seed)
    n = SYNTH_CLASSES * SYNTH_PER_CLASS
    y = np.repeat(np.arange(SYNTH_CLASSES), SYNTH_PER_CLASS)
    x = rng.normal(size=(n, dim)).astype(np.float32) + y[:, None].astype(np.float32)
    x[:, 0] = offset + np.arange(n)
    return Dataset("synth_vec", x, y.astype(np.int64), "vector", tuple(f"c{i}" for i in range(5)))


def synth_images(offset: int = 0, size: int = 6) -> Dataset:
    """5 classes, 50 train + 20 test per class, (1, size, size), unique id in pixel 0."""
    rng = np.random.default_rng(1)

    def part(n_per: int, start: int) -> tuple[np.ndarray, np.ndarray]:
        n = SYNTH_CLASSES * n_per
        x = rng.uniform(0, 1, size=(n, 1, size, size)).astype(np.float32)
        x[:, 0, 0, 0] = (offset + start + np.arange(n)) / 2**16
        return x, np.repeat(np.arange(SYNTH_CLASSES), n_per).astype(np.int64)

    x, y = part(50, 0)
    xt, yt = part(20, 1000)
    classes = tuple(f"i{i}" for i in range(5))
    return Dataset("synth_img", x, y, "image", classes, x_test=xt, y_test=yt)


def synth_defects() -> Dataset:
    """A defect set: 5 product types of ``synth_images``; in each type's test part, 8 of 20
    images are defective (a bright 2x2 patch, in their masks)."""
    ds = synth_images(7000)
    assert ds.x_test is not None and ds.y_test is not None
    xt = ds.x_test.copy()
    defect = np.zeros(len(xt), bool)
    mask_test = np.zeros((len(xt), 6, 6), np.uint8)
    for c in range(SYNTH_CLASSES):
        for i in np.flatnonzero(ds.y_test == c)[:8]:
            defect[i] = True
            xt[i, 0, 3:5, 3:5] = 1.0
            mask_test[i, 3:5, 3:5] = 1
    return Dataset(
        "synth_defects", ds.x, ds.y, "image", tuple(f"t{i}" for i in range(5)), x_test=xt,
        y_test=ds.y_test, mask=np.zeros((len(ds.x), 6, 6), np.uint8), mask_test=mask_test,
        defect=np.zeros(len(ds.x), bool), defect_test=defect,
    )  # fmt: skip


def synth_fixed() -> Dataset:
    """An ODDS-like fixed-definition set: 300 normal, 60 anomalous rows, 3 features."""
    rng = np.random.default_rng(2)
    y = np.r_[np.zeros(300), np.ones(60)].astype(np.int64)
    x = rng.normal(size=(360, 3)).astype(np.float32) * 5 + 10
    x[:, 0] = np.arange(360)
    return Dataset("synth_fixed", x, y, "vector", ("normal", "anomaly"), fixed_split=True)


def synth_masked(offset: int = 0, size: int = 8) -> Dataset:
    """``synth_images`` with pixel masks: class ``c > 0`` images have a bright ``c x c``
    square at a random place, marked 1 in its mask; class 0 masks are all zero."""
    ds = synth_images(offset, size)
    rng = np.random.default_rng(7)

    def stamp(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        mask = np.zeros((len(x), size, size), np.uint8)
        for i, c in enumerate(y):
            if c == 0:
                continue
            r, q = rng.integers(1, size - int(c), size=2)
            mask[i, r : r + c, q : q + c] = 1
            x[i, 0, r : r + c, q : q + c] = 1.0
        return mask

    assert isinstance(ds.x, np.ndarray) and isinstance(ds.x_test, np.ndarray)
    assert ds.y_test is not None
    x, xt = ds.x.copy(), ds.x_test.copy()
    mask, mask_test = stamp(x, ds.y), stamp(xt, ds.y_test)
    return Dataset(
        "synth_mask", x, ds.y, "image", ds.classes, x_test=xt, y_test=ds.y_test,
        mask=mask, mask_test=mask_test,
    )  # fmt: skip


def synth_graphs(offset: int = 0, width: int = 3, per_class: int = 40, seed: int = 3) -> Dataset:
    """5 classes of small graphs (no official test split). Class ``c``: a ring of
    ``5 + c + i % 3`` nodes with ``c`` chords; node features N(c, 1) of ``width`` columns;
    node 0's feature 0 is a unique id (``offset + graph``) for identity checks."""
    rng = np.random.default_rng(seed)
    pairs = []
    y = np.repeat(np.arange(SYNTH_CLASSES), per_class).astype(np.int64)
    for g, c in enumerate(y):
        n = 5 + int(c) + g % 3
        ring = np.stack([np.arange(n), (np.arange(n) + 1) % n])
        chords = np.stack([np.zeros(int(c), np.int64), 2 + np.arange(int(c)) % (n - 2)])
        e = np.concatenate([ring, chords], axis=1)
        e = np.concatenate([e, e[::-1]], axis=1)  # undirected
        x = rng.normal(float(c), 1.0, size=(n, width)).astype(np.float32)
        x[0, 0] = offset + g
        pairs.append((x, e))
    classes = tuple(f"g{i}" for i in range(SYNTH_CLASSES))
    return Dataset("synth_graph", GraphSet.from_graphs(pairs), y, "graph", classes)


SYNTHETIC: dict[str, tuple[Callable[..., Dataset], DataKind]] = {
    "synth_mask": (lambda path=None, size=None: synth_masked(0), "image"),
    "synth_mask_b": (lambda path=None, size=None: synth_masked(5000), "image"),
    "synth_graph": (lambda path=None, size=None: synth_graphs(0), "graph"),
    "synth_graph_b": (lambda path=None, size=None: synth_graphs(10_000, width=5, seed=4), "graph"),
    "synth_vec": (lambda path=None, size=None: synth_vectors(0), "vector"),
    "synth_vec_b": (lambda path=None, size=None: synth_vectors(10_000, seed=5), "vector"),
    "synth_vec_c": (lambda path=None, size=None: synth_vectors(30_000, seed=6), "vector"),
    "synth_vec_wide": (lambda path=None, size=None: synth_vectors(20_000, dim=7), "vector"),
    "synth_img": (lambda path=None, size=None: synth_images(0), "image"),
    "synth_img_b": (lambda path=None, size=None: synth_images(5000), "image"),
    "synth_img_big": (lambda path=None, size=None: synth_images(9000, size=8), "image"),
    "synth_fixed": (lambda path=None, size=None: synth_fixed(), "vector"),
    "synth_defects": (lambda path=None, size=None: synth_defects(), "image"),
}


def make_config(**sections: Any) -> dict[str, Any]:
    """A raw config dict with one method; ``data=...``, ``partition=...`` override sections."""
    raw: dict[str, Any] = {"seed": 0, "methods": [{"name": "fedavg"}]}
    raw.update(sections)
    return raw
