"""Real loaders, tested on small files written in the real formats (and real files if here)."""

from __future__ import annotations

import gzip
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from fedad.core.errors import DataError
from fedad.data.idx import FASHION_MNIST_DIR, parse_idx, read_idx
from fedad.data.imageops import resize_images
from fedad.data.odds import R_LIBRARY_DIRS
from fedad.data.registry import load_dataset
from tests.data.datahelpers import idx_bytes, write_cifar_like, write_idx, write_mnist_like


def one_line(err: pytest.ExceptionInfo[BaseException]) -> str:
    msg = str(err.value)
    assert "\n" not in msg and msg
    return msg


# --------------------------------------------------------------------------- IDX


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64])
@pytest.mark.parametrize("gz", [False, True])
def test_idx_round_trip(tmp_path: Path, dtype: type, gz: bool) -> None:
    arr: np.ndarray = (np.arange(2 * 3 * 4) - 5).reshape(2, 3, 4).astype(dtype)
    if dtype == np.uint8:
        arr = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    path = write_idx(tmp_path / ("a.idx.gz" if gz else "a.idx"), arr)
    out = read_idx(path)
    assert out.dtype == np.dtype(dtype).newbyteorder("=")
    np.testing.assert_array_equal(out, arr)


def test_idx_header_is_big_endian_real_layout() -> None:
    raw = idx_bytes(np.zeros((2, 28, 28), np.uint8))
    assert raw[:4] == b"\x00\x00\x08\x03"
    assert raw[4:16] == bytes([0, 0, 0, 2, 0, 0, 0, 28, 0, 0, 0, 28])


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (b"\x00\x00", "only 2 bytes"),
        (b"\x01\x00\x08\x01" + b"\x00\x00\x00\x01" + b"\x00", "magic number"),
        (b"\x00\x00\x07\x01" + b"\x00\x00\x00\x01" + b"\x00", "unknown IDX type code 0x07"),
        (b"\x00\x00\x08\x00", "0 dimensions"),
        (b"\x00\x00\x08\x02\x00\x00\x00\x02", "truncated inside its IDX header"),
        (b"\x00\x00\x08\x01" + b"\x00\x00\x00\x05" + b"\x00\x01", "needs 13"),
        # dims 2**22 x 2**21 x 2**21: 2**64 bytes, which wraps to 0 in int64
        (b"\x00\x00\x08\x03\x00\x40\x00\x00\x00\x20\x00\x00\x00\x20\x00\x00", "claims"),
    ],
)
def test_malformed_idx_gives_one_line_error(raw: bytes, needle: str) -> None:
    with pytest.raises(DataError) as err:
        parse_idx(raw, "'x'")
    assert needle in one_line(err)


def test_malformed_file_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "broken.gz"
    bad.write_bytes(gzip.compress(b"\x00\x00\x08\x01\x00\x00\x00\x09\x01"))
    with pytest.raises(DataError) as err:
        read_idx(bad)
    assert str(bad) in one_line(err)
    notgz = tmp_path / "bad.gz"
    notgz.write_bytes(b"\x1f\x8bnot really gzip")
    with pytest.raises(DataError):
        read_idx(notgz)


def test_idx_cache_follows_file_changes(tmp_path: Path) -> None:
    path = write_idx(tmp_path / "a.idx", np.zeros(3, np.uint8))
    first = read_idx(path)
    assert read_idx(path) is first  # cached
    assert not first.flags.writeable
    os.utime(path, ns=(1, 1))
    write_idx(path, np.ones(4, np.uint8))
    assert read_idx(path).tolist() == [1, 1, 1, 1]


@pytest.mark.parametrize("gz", [True, False])
def test_mnist_from_path(tmp_path: Path, gz: bool) -> None:
    x, y, _xt, yt = write_mnist_like(tmp_path, gz=gz)
    ds = load_dataset("mnist", str(tmp_path))
    assert ds.kind == "image" and not ds.fixed_split
    assert ds.x.shape == (60, 1, 28, 28) and ds.x.dtype == np.float32
    assert ds.x_test is not None and ds.y_test is not None
    assert ds.x_test.shape == (20, 1, 28, 28)
    assert ds.y.dtype == np.int64 and ds.y_test.dtype == np.int64
    np.testing.assert_allclose(ds.x[:, 0] * 255, x, atol=1e-3)
    np.testing.assert_array_equal(ds.y, y)
    np.testing.assert_array_equal(ds.y_test, yt)
    assert ds.x.min() >= 0.0 and ds.x.max() <= 1.0
    assert ds.classes == tuple(str(d) for d in range(10))


def test_kmnist_torchvision_layout_and_resize(tmp_path: Path) -> None:
    write_mnist_like(tmp_path / "raw", gz=False)
    ds = load_dataset("kmnist", str(tmp_path), size=14)
    assert ds.x.shape == (60, 1, 14, 14)
    assert ds.x_test is not None and ds.x_test.shape == (20, 1, 14, 14)
    assert ds.classes[0] == "o"


def test_mnist_needs_a_path() -> None:
    with pytest.raises(DataError) as err:
        load_dataset("mnist")
    assert "data.path" in one_line(err)


def test_missing_idx_files_are_listed(tmp_path: Path) -> None:
    write_idx(tmp_path / "train-images-idx3-ubyte.gz", np.zeros((2, 28, 28), np.uint8))
    with pytest.raises(DataError) as err:
        load_dataset("fashion_mnist", str(tmp_path))
    msg = one_line(err)
    assert "t10k-labels-idx1-ubyte" in msg and str(tmp_path) in msg
    assert "dataset-fashion-mnist" in msg


def test_label_problems(tmp_path: Path) -> None:
    write_mnist_like(tmp_path)
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", np.full(60, 12, np.uint8))
    with pytest.raises(DataError, match=r"labels 12\.\.12"):
        load_dataset("mnist", str(tmp_path))
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", np.zeros(59, np.uint8))
    with pytest.raises(DataError, match="59 labels for 60 images"):
        load_dataset("mnist", str(tmp_path))


@pytest.mark.skipif(
    not Path(FASHION_MNIST_DIR, "train-images-idx3-ubyte.gz").exists(),
    reason="Debian package dataset-fashion-mnist is not installed",
)
def test_real_fashion_mnist() -> None:
    ds = load_dataset("fashion_mnist")
    assert ds.x.shape == (60000, 1, 28, 28) and ds.x.dtype == np.float32
    assert ds.x_test is not None and ds.y_test is not None
    assert ds.x_test.shape == (10000, 1, 28, 28)
    assert np.bincount(ds.y).tolist() == [6000] * 10
    assert np.bincount(ds.y_test).tolist() == [1000] * 10
    assert ds.x.max() == 1.0 and ds.x.min() == 0.0
    assert ds.classes[0] == "T-shirt/top" and ds.classes[9] == "Ankle boot"


# --------------------------------------------------------------------------- digits


def test_digits_native_and_upsampled() -> None:
    ds = load_dataset("digits")
    assert ds.x.shape == (1797, 1, 8, 8) and ds.x.dtype == np.float32
    assert ds.x.max() == 1.0 and ds.x.min() == 0.0
    assert ds.x_test is None and ds.y.dtype == np.int64
    ds.x[0, 0, 0, 0] = 5.0  # a copy: the cache is not touched
    assert load_dataset("digits").x[0, 0, 0, 0] <= 1.0
    big = load_dataset("digits", size=28)
    assert big.x.shape == (1797, 1, 28, 28)
    assert big.x.min() >= 0.0 and big.x.max() <= 1.0
    # smooth: neighbouring pixels differ much less than in the 8x8 original
    jump_small = np.abs(np.diff(ds.x, axis=-1)).mean()
    jump_big = np.abs(np.diff(big.x, axis=-1)).mean()
    assert jump_big < jump_small / 2


def test_resize_keeps_range_and_downsamples() -> None:
    x = np.random.default_rng(0).uniform(size=(3, 2, 16, 16)).astype(np.float32)
    small = resize_images(x, 4)
    assert small.shape == (3, 2, 4, 4)
    assert small.min() >= 0 and small.max() <= 1
    np.testing.assert_allclose(small.mean(axis=(2, 3)), x.mean(axis=(2, 3)), atol=0.05)
    assert resize_images(x, 16) is x


# --------------------------------------------------------------------------- CIFAR-10


@pytest.mark.parametrize("sub", ["", "cifar-10-batches-py"])
def test_cifar10_from_pickles(tmp_path: Path, sub: str) -> None:
    x, y, _xt, yt = write_cifar_like(tmp_path / sub if sub else tmp_path)
    ds = load_dataset("cifar10", str(tmp_path))
    assert ds.x.shape == (50, 3, 32, 32) and ds.x.dtype == np.float32
    assert ds.x_test is not None and ds.x_test.shape == (10, 3, 32, 32)
    np.testing.assert_array_equal(ds.y, y)
    assert ds.y_test is not None
    np.testing.assert_array_equal(ds.y_test, yt)
    # channel-major: the first 1024 bytes are the red plane
    np.testing.assert_allclose(ds.x[0, 0].ravel() * 255, x[0, :1024], atol=1e-3)
    np.testing.assert_allclose(ds.x[0, 2].ravel() * 255, x[0, 2048:], atol=1e-3)
    assert ds.classes[3] == "cat"


def test_cifar10_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError) as err:
        load_dataset("cifar10")
    assert "cs.toronto.edu" in one_line(err)
    with pytest.raises(DataError) as err:
        load_dataset("cifar10", str(tmp_path))
    msg = one_line(err)
    assert "data_batch_1" in msg and str(tmp_path) in msg


class _Evil:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.getcwd, ())  # type: ignore[return-value]


def test_cifar10_refuses_code_in_pickles(tmp_path: Path) -> None:
    write_cifar_like(tmp_path, meta=False)
    (tmp_path / "test_batch").write_bytes(pickle.dumps({b"data": _Evil(), b"labels": []}, 2))
    with pytest.raises(DataError) as err:
        load_dataset("cifar10", str(tmp_path))
    assert "refusing to load" in one_line(err)


# --------------------------------------------------------------------------- ODDS

_ODDS = {
    "odds_shuttle": ("Shuttle.rda", (49097, 9), 3511),
    "odds_satellite": ("Satellite.rda", (6435, 36), 2036),
    "odds_breastw": ("BreastCancer.rda", (683, 9), 239),
    "odds_ionosphere": ("Ionosphere.rda", (351, 33), 126),
}


def _have(filename: str) -> bool:
    return any(Path(d, filename).is_file() for d in R_LIBRARY_DIRS)


@pytest.mark.parametrize("name", sorted(_ODDS))
def test_real_odds(name: str) -> None:
    filename, shape, n_anomalies = _ODDS[name]
    if not _have(filename):
        pytest.skip(f"{filename} absent: Debian package r-cran-mlbench is not installed")
    ds = load_dataset(name)
    assert ds.x.shape == shape and ds.x.dtype == np.float32
    assert ds.fixed_split and ds.kind == "vector" and ds.classes == ("normal", "anomaly")
    assert ds.y.dtype == np.int64 and set(np.unique(ds.y)) == {0, 1}
    assert int(ds.y.sum()) == n_anomalies
    assert np.isfinite(ds.x).all()
    assert ds.x.std(axis=0).min() > 0  # no constant column (ionosphere's V2 dropped)


def test_real_odds_feature_values() -> None:
    if not _have("BreastCancer.rda"):
        pytest.skip("BreastCancer.rda absent: Debian package r-cran-mlbench is not installed")
    ds = load_dataset("odds_breastw")
    assert ds.x.min() == 1.0 and ds.x.max() == 10.0  # factor levels as numbers
    assert load_dataset("odds_ionosphere").x[:, 0].tolist()[:2] == [1.0, 1.0]


def test_odds_missing_file_says_where_and_how(tmp_path: Path) -> None:
    with pytest.raises(DataError) as err:
        load_dataset("odds_satellite", str(tmp_path))
    msg = one_line(err)
    assert "Satellite.rda" in msg and str(tmp_path) in msg
    assert "apt-get install r-cran-mlbench" in msg and "data.path" in msg


def test_odds_malformed_file(tmp_path: Path) -> None:
    (tmp_path / "Ionosphere.rda").write_bytes(b"this is not R data")
    with pytest.raises(DataError) as err:
        load_dataset("odds_ionosphere", str(tmp_path))
    assert "Ionosphere.rda" in one_line(err)
