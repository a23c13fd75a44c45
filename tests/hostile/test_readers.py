"""The CIFAR-10 and IDX readers on malicious files.

Each crafted file ends in a one-line :class:`DataError` naming it: never a traceback, never
code run from a pickle, never an allocation that the file's size does not back.
"""

from __future__ import annotations

import codecs
import gzip
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedad.cli.app import app
from fedad.core.errors import DataError
from fedad.data.cifar import read_cifar_batch
from fedad.data.idx import parse_idx, read_idx
from fedad.data.registry import load_dataset
from tests.data.datahelpers import idx_bytes, write_cifar_like, write_idx, write_mnist_like
from tests.hostile.conftest import one_line_error, runner


def _error(call: Any, *args: Any) -> str:
    with pytest.raises(DataError) as err:
        call(*args)
    msg = str(err.value)
    assert msg and "\n" not in msg
    return msg


# --------------------------------------------------------------------------- CIFAR-10


def _batch(labels: Any = None, data: Any = None, n: int = 3) -> dict[bytes, Any]:
    return {
        b"data": np.zeros((n, 3072), np.uint8) if data is None else data,
        b"labels": list(range(n)) if labels is None else labels,
    }


def _write(path: Path, obj: Any, protocol: int = 2) -> Path:
    path.write_bytes(pickle.dumps(obj, protocol))
    return path


@pytest.mark.parametrize(
    ("labels", "needle"),
    [
        (None, "b'labels' is NoneType"),
        ("abc", "b'labels' is str"),
        (b"\x01\x02\x03", "b'labels' is bytes"),
        (7, "b'labels' is int"),
        ([0, 1.5, 2], "label 1 is 1.5"),
        ([0, 1, float("nan")], "label 2 is nan"),
        ([0, -1, 2], "label 1 is -1"),
        ([0, 10**30, 2], "label 1 is 1000000000000000000000000000000"),
        ([0, 2**64, 2], "label 1 is 18446744073709551616"),
        ([0, 10, 2], "label 1 is 10, expected a class number 0..9"),
        ([0, "1", 2], "label 1 is '1'"),
        ([0, None, 2], "label 1 is None"),
        ([0, [1], 2], "label 1 is [1]"),
        ([True, 1, 2], "label 0 is True"),
        (np.array([0.0, 1.0, 2.0]), "float64 array"),
        (np.zeros((3, 1), np.int64), "int64 array of shape (3, 1)"),
        (np.array([0, 2**63, 2], np.uint64), "label 1 is 9223372036854775808"),
        ([0, 1], "2 labels for 3 images"),
    ],
)
def test_cifar_bad_labels(tmp_path: Path, labels: Any, needle: str) -> None:
    raw = _batch()
    raw[b"labels"] = labels
    path = _write(tmp_path / "data_batch_1", raw)
    msg = _error(read_cifar_batch, path)
    assert needle in msg and str(path) in msg


def test_cifar_numpy_integer_labels_are_fine(tmp_path: Path) -> None:
    labels = [np.int64(1), np.uint8(2), 3]
    _x, y = read_cifar_batch(_write(tmp_path / "b", _batch(labels=labels), protocol=5))
    assert y.tolist() == [1, 2, 3] and y.dtype == np.int64


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (None, "b'data' is NoneType"),
        ([[0] * 3072] * 3, "b'data' is list"),
        ("pixels", "b'data' is str"),
        (np.zeros((3, 3072), np.float32), "float32 (3, 3072)"),
        (np.zeros((3, 3071), np.uint8), "uint8 (3, 3071)"),
        (np.zeros(3 * 3072, np.uint8), "uint8 (9216,)"),
        (np.zeros((3, 3, 32, 32), np.uint8), "uint8 (3, 3, 32, 32)"),
        (np.array([{"a": 1}] * 3, dtype=object), "object"),
    ],
)
def test_cifar_bad_data(tmp_path: Path, data: Any, needle: str) -> None:
    raw = _batch()
    raw[b"data"] = data
    path = _write(tmp_path / "test_batch", raw)
    msg = _error(read_cifar_batch, path)
    assert needle in msg and "uint8" in msg and "(N, 3072)" in msg


class _Reduce:
    """Pickles as ``func(*args)``: what a hostile file can ask the unpickler to call."""

    def __init__(self, func: Any, args: tuple[Any, ...]) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (self.func, self.args)


def _reconstruct() -> Any:
    import numpy._core.multiarray as multiarray

    return multiarray._reconstruct


@pytest.mark.parametrize(
    ("payload", "needle"),
    [
        # allocating a 800 GB array straight from the pickle, before any check
        (_Reduce(np.ndarray, ((2**28, 3072), "u1")), "cannot read CIFAR batch"),
        (_Reduce(_reconstruct(), (np.ndarray, (2**28, 3072), b"B")), "_reconstruct"),
        (_Reduce(codecs.encode, ("abc", "rot13")), "refusing codec 'rot13'"),
        (_Reduce(codecs.encode, ("abc", "zlib_codec")), "refusing codec 'zlib_codec'"),
        (_Reduce(codecs.encode, ("abc", "no-such-codec")), "refusing codec 'no-such-codec'"),
        (_Reduce(codecs.encode, (b"abc", "latin1")), "codecs.encode"),
        (_Reduce(codecs.encode, ("abc", "latin1", "ignore")), "codecs.encode"),
        (_Reduce(np.dtype, ("u1", False, False)), "b'data' is UInt8DType"),
    ],
)
def test_cifar_hostile_pickle_calls(tmp_path: Path, payload: Any, needle: str) -> None:
    path = _write(tmp_path / "data_batch_1", {b"data": payload, b"labels": [0]})
    msg = _error(read_cifar_batch, path)
    assert needle in msg and str(path) in msg


def test_cifar_dtype_from_a_pickle_is_a_copy() -> None:
    from fedad.data.cifar import _dtype

    assert _dtype("f8", False, False) is not np.dtype("f8")
    assert _dtype("f8") == np.dtype("f8")


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x80",
        b"\x80\x02}q\x00(",
        b"\x80\x04\x8e" + (2**60).to_bytes(8, "little") + b"abc",  # BINBYTES8 of 1 EiB
        b"\x80\x04\x8e" + (2**63 + 5).to_bytes(8, "little") + b"abc",
        b"\x80\x02]" + b"h\xff" + b".",  # memo that was never stored
        b"\x80\x02K\x01K\x02R.",  # REDUCE on an int
        b"not a pickle at all",
    ],
)
def test_cifar_truncated_or_garbled(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "data_batch_1"
    path.write_bytes(raw)
    msg = _error(read_cifar_batch, path)
    assert "cannot read CIFAR batch" in msg and str(path) in msg


def test_cifar_deeply_nested_pickle(tmp_path: Path) -> None:
    path = tmp_path / "data_batch_1"
    path.write_bytes(b"\x80\x02" + b"(" * 100_000 + b"l" * 100_000 + b".")  # [[[...]]]
    assert "is not a CIFAR-10 batch" in _error(read_cifar_batch, path)


def test_cifar_truncated_real_batch(tmp_path: Path) -> None:
    write_cifar_like(tmp_path)
    path = tmp_path / "data_batch_3"
    path.write_bytes(path.read_bytes()[:20_000])
    msg = _error(load_dataset, "cifar10", str(tmp_path))
    assert "data_batch_3" in msg and "truncated" in msg


@pytest.mark.parametrize(
    ("meta", "needle"),
    [
        ({b"label_names": 5}, "b'label_names' is int"),
        ({b"label_names": b"airplane"}, "b'label_names' is bytes"),
        ({b"label_names": "airplane"}, "b'label_names' is str"),
        ({b"label_names": []}, "(empty)"),
        ({b"label_names": np.arange(10)}, "b'label_names' is ndarray"),
        ({b"label_names": [b"a"] * 9 + [3]}, "label name 9 is 3"),
        ({b"label_names": [b"a"] * 9 + [None]}, "label name 9 is None"),
        ({b"label_names": [b"a"] * 9 + [b"\xff\xfe"]}, "label name 9 is b'\\xff\\xfe'"),
        ({b"label_names": [b"a"] * 9 + [b"x\ny"]}, "label name 9"),
        ({b"label_names": [b"a"] * 9 + [b"x" * 1000]}, "label name 9"),
        ([b"airplane"], "is list, expected a dict"),
    ],
)
def test_cifar_bad_meta(tmp_path: Path, meta: Any, needle: str) -> None:
    write_cifar_like(tmp_path)
    _write(tmp_path / "batches.meta", meta)
    msg = _error(load_dataset, "cifar10", str(tmp_path))
    assert needle in msg and "batches.meta" in msg


def test_cifar_labels_beyond_fewer_meta_names(tmp_path: Path) -> None:
    write_cifar_like(tmp_path)
    _write(tmp_path / "batches.meta", {b"label_names": [b"a", b"b"]})
    msg = _error(load_dataset, "cifar10", str(tmp_path))
    assert "data_batch_1" in msg and "expected a class number 0..1" in msg


def test_cifar_hostile_batch_through_the_cli(tmp_path: Path) -> None:
    data = tmp_path / "cifar"
    write_cifar_like(data)
    _write(data / "test_batch", _batch(labels=[0, None, 2]))
    config = tmp_path / "exp.toml"
    config.write_text(
        f'rounds = 1\n[data]\nname = "cifar10"\npath = "{data}"\nnormal = [0]\nanomaly = [1]\n'
        '[engine]\nprogress = false\n[[methods]]\nname = "fedavg"\n'
    )
    result = runner.invoke(app, ["run", str(config), "--out", str(tmp_path / "o"), "-q"])
    line = one_line_error(result)
    assert "test_batch" in line and "label 1 is None" in line


# --------------------------------------------------------------------------- IDX


def _header(code: int, dims: tuple[int, ...]) -> bytes:
    return bytes([0, 0, code, len(dims)]) + np.asarray(dims, dtype=">u4").tobytes()


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (_header(0x08, (2**31 - 1,) * 3) + b"\x00" * 64, "more than the"),
        (_header(0x0E, (2**32 - 1,) * 8) + b"\x00" * 64, "more than the"),
        # 2**22 * 2**21 * 2**21 = 2**64: wrapped around to 0 bytes of data in int64
        (_header(0x08, (2**22, 2**21, 2**21)), "more than the"),
        (_header(0x08, (10, 28, 28)) + b"\x00" * 100, "needs 7856"),
        (_header(0x0A, (3,)) + b"\x00" * 3, "unknown IDX type code 0x0a"),
        (_header(0xFF, (3,)) + b"\x00" * 3, "unknown IDX type code 0xff"),
        (bytes([0, 0, 8, 255]) + b"\x00" * 16, "truncated inside its IDX header"),
    ],
)
def test_malicious_idx_headers(raw: bytes, needle: str) -> None:
    msg = _error(parse_idx, raw, "'evil'")
    assert needle in msg and "'evil'" in msg


@pytest.mark.parametrize("gz", [False, True])
def test_idx_file_whose_header_outgrows_it(tmp_path: Path, gz: bool) -> None:
    raw = _header(0x08, (2**31 - 1,) * 3) + b"\x00" * 64
    path = tmp_path / "a.idx"
    path.write_bytes(gzip.compress(raw) if gz else raw)
    msg = _error(read_idx, path)
    assert str(path) in msg and "more than the" in msg


def test_idx_wrapping_dimensions_through_the_reader(tmp_path: Path) -> None:
    path = tmp_path / "a.idx"
    path.write_bytes(_header(0x08, (2**22, 2**21, 2**21)))
    assert "more than the" in _error(read_idx, path)


def test_idx_gzip_bomb_reads_only_what_the_header_claims(tmp_path: Path) -> None:
    path = tmp_path / "bomb.idx.gz"
    path.write_bytes(gzip.compress(_header(0x08, (4,)) + bytes(4 + 64 * 2**20)))
    msg = _error(read_idx, path)
    assert "longer than the 12 bytes" in msg and str(path) in msg


@pytest.mark.parametrize("cut", [3, 10, 200])
def test_idx_truncated_gzip(tmp_path: Path, cut: int) -> None:
    path = tmp_path / "t.idx.gz"
    whole = gzip.compress(idx_bytes(np.arange(1000, dtype=np.uint8)))
    path.write_bytes(whole[: len(whole) - cut])
    msg = _error(read_idx, path)
    assert str(path) in msg


def test_idx_corrupt_gzip(tmp_path: Path) -> None:
    path = tmp_path / "c.idx.gz"
    whole = bytearray(gzip.compress(idx_bytes(np.arange(1000, dtype=np.uint8))))
    whole[20:40] = b"\xff" * 20
    path.write_bytes(bytes(whole))
    assert "cannot read IDX file" in _error(read_idx, path)


def test_idx_truncated_data(tmp_path: Path) -> None:
    path = tmp_path / "t.idx"
    path.write_bytes(idx_bytes(np.zeros((5, 28, 28), np.uint8))[:-7])
    msg = _error(read_idx, path)
    assert "truncated" in msg and str(path) in msg


def test_idx_float_labels_with_nan(tmp_path: Path) -> None:
    write_mnist_like(tmp_path)
    labels = np.full(60, np.nan, np.float32)
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", labels)
    msg = _error(load_dataset, "mnist", str(tmp_path))
    assert "train-labels" in msg and "integer labels" in msg
