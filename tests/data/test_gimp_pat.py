"""GIMP pattern files: the reader on files the tests write, and crafted ones refused."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from fedad.core.errors import DataError
from fedad.data.gimp_pat import read_pat


def pat(width: int, height: int, depth: int, pixels: bytes, name: bytes = b"t\0") -> bytes:
    header = 24 + len(name)
    return struct.pack(">5I", header, 1, width, height, depth) + b"GPAT" + name + pixels


def test_reads_rgb_and_grey_patterns(tmp_path: Path) -> None:
    rgb = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3) * 10
    (tmp_path / "rgb.pat").write_bytes(pat(3, 2, 3, rgb.tobytes(), b"colour\0"))
    got = read_pat(tmp_path / "rgb.pat")
    assert got.shape == (2, 3, 3) and got.dtype == np.float32
    np.testing.assert_allclose(got, rgb / 255.0)
    grey_alpha = np.array([[[200, 255], [100, 0]]], np.uint8)  # 1 x 2, grey + alpha
    (tmp_path / "ga.pat").write_bytes(pat(2, 1, 2, grey_alpha.tobytes()))
    np.testing.assert_allclose(read_pat(tmp_path / "ga.pat")[0, :, 0], [200 / 255, 100 / 255])
    assert (read_pat(tmp_path / "ga.pat")[..., 0] == read_pat(tmp_path / "ga.pat")[..., 2]).all()


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"GPAT", "shorter than a header"),
        (pat(2, 2, 3, bytes(12))[:20] + b"XXXX" + bytes(14), "no GPAT magic"),
        (pat(2, 2, 3, bytes(11)), "pixel bytes"),
        (pat(2, 2, 5, bytes(20)), "bytes per pixel"),
        (pat(70_000, 1, 1, bytes(10)), "outside"),
        (struct.pack(">5I", 999, 1, 1, 1, 1) + b"GPAT", "header size"),
    ],
)
def test_crafted_files_are_one_line_errors(tmp_path: Path, data: bytes, why: str) -> None:
    f = tmp_path / "bad.pat"
    f.write_bytes(data)
    with pytest.raises(DataError, match=why) as err:
        read_pat(f)
    assert str(f) in str(err.value) and "\n" not in str(err.value)
