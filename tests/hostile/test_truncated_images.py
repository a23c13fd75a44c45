"""Truncated images are bad files: for ``image_folder``, ``mvtec`` and ``fedad score`` alike.

Pillow zero-fills a PNG whose zlib stream ends, complete, before the last row, and says
nothing; a file cut inside its image data makes Pillow raise "image file is truncated". Both
are one-line errors naming the file (or, with ``skip_bad_files``, skipped and counted).
"""

from __future__ import annotations

import io
import logging
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageFile

import fedad.data.image_folder  # noqa: F401  (registers the data set)
from fedad.cli.app import app
from fedad.core.errors import DataError
from fedad.data.image_folder import list_images, load_image_folder, read_images
from fedad.data.imagefiles import png_rows_missing
from fedad.data.mvtec import load_mvtec
from tests.data.test_mvtec import SIDE as MVTEC_SIDE
from tests.data.test_mvtec import write_category
from tests.hostile.conftest import one_line_error, runner

SIDE = 16
ROOT = Path(__file__).resolve().parents[2]


def _png(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def rows_cut(png: bytes, keep: int) -> bytes:
    """``png`` with its IDAT cut to the first ``keep`` rows (a complete zlib stream)."""
    pos, parts, idat = 8, [png[:8]], b""
    while pos < len(png):
        (n,) = struct.unpack(">I", png[pos : pos + 4])
        kind, data = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            parts.append(_chunk(kind, data))
            width, _, depth, colour = struct.unpack(">IIBB", data[:10])
            row = 1 + width * depth * {0: 1, 2: 3, 4: 2, 6: 4}[colour] // 8
        elif kind == b"IDAT":
            idat += data
    raw = zlib.decompress(idat)
    parts += [_chunk(b"IDAT", zlib.compress(raw[: keep * row])), _chunk(b"IEND", b"")]
    return b"".join(parts)


def byte_cut(png: bytes) -> bytes:
    """``png`` cut inside its IDAT chunk (the file ends there)."""
    at = png.index(b"IDAT")
    return png[: at + 4 + 20]


def _image(seed: int, grey: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    shape = (SIDE, SIDE) if grey else (SIDE, SIDE, 3)
    return rng.integers(1, 256, size=shape, dtype=np.uint8)


def _folder(root: Path, n: int = 3) -> Path:
    for i in range(n):
        (root / "good").mkdir(parents=True, exist_ok=True)
        (root / "good" / f"{i:03d}.png").write_bytes(_png(_image(i)))
    return root


def test_pillow_alone_accepts_the_cut_png_with_zero_rows() -> None:
    """The premise: Pillow decodes the cut PNG without a word, rows 2.. left zero."""
    cut = rows_cut(_png(_image(0)), keep=2)
    arr = np.asarray(Image.open(io.BytesIO(cut)))
    assert arr.shape == (SIDE, SIDE, 3) and (arr[:2] > 0).all() and not arr[2:].any()
    assert png_rows_missing(cut) and not png_rows_missing(_png(_image(0)))


@pytest.mark.parametrize("grey", [False, True])
def test_whole_pngs_are_complete(grey: bool) -> None:
    for side in (1, 3, 16, 33):
        rng = np.random.default_rng(side)
        shape = (side, side) if grey else (side, side, 3)
        arr = rng.integers(0, 256, size=shape, dtype=np.uint8)
        assert not png_rows_missing(_png(arr))
        assert png_rows_missing(rows_cut(_png(arr), keep=side - 1))


@pytest.mark.parametrize("rows", [True, False], ids=["rows", "bytes"])
def test_image_folder_names_a_truncated_file(tmp_path: Path, rows: bool) -> None:
    _folder(tmp_path)
    bad = tmp_path / "good" / "001.png"
    bad.write_bytes(rows_cut(bad.read_bytes(), 2) if rows else byte_cut(bad.read_bytes()))
    with pytest.raises(DataError, match=r"001\.png is truncated.*skip_bad_files") as e:
        load_image_folder(str(tmp_path))
    assert "\n" not in str(e.value)


def test_image_folder_skips_a_truncated_file_when_asked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _folder(tmp_path)
    bad = tmp_path / "good" / "002.png"
    bad.write_bytes(rows_cut(bad.read_bytes(), 2))
    with caplog.at_level(logging.WARNING, logger="fedad"):
        ds = load_image_folder(str(tmp_path), skip_bad_files=True)
    assert ds.x.shape[0] == 2 and ds.x.min() > 0  # no zero-filled rows came in
    assert "skipped 1 bad file(s)" in caplog.text and "002.png" in caplog.text
    files = list_images(tmp_path)
    with pytest.raises(DataError, match=r"002\.png is truncated"):
        read_images(files, tmp_path, (3, SIDE, SIDE))
    x, read = read_images(files, tmp_path, (3, SIDE, SIDE), skip_bad_files=True)
    assert [p.name for p in read] == ["000.png", "001.png"] and x.shape[0] == 2


def test_mvtec_names_a_truncated_file(tmp_path: Path) -> None:
    root = tmp_path / "mvtec_ad"
    write_category(root, "carpet", 1)
    bad = root / "carpet" / "test" / "crack" / "001.png"
    bad.write_bytes(rows_cut(bad.read_bytes(), 2))
    with pytest.raises(DataError, match=r"crack/001\.png is truncated"):
        load_mvtec(str(root), size=MVTEC_SIDE)


def test_nothing_lets_pillow_load_truncated_images() -> None:
    import fedad.rundir.score  # noqa: F401

    assert ImageFile.LOAD_TRUNCATED_IMAGES is False
    setters = [
        p
        for p in (ROOT / "src").rglob("*.py")
        if "LOAD_TRUNCATED_IMAGES =" in p.read_text(encoding="utf-8")
    ]
    assert setters == []


def test_fedad_score_refuses_or_skips_a_truncated_image(tmp_path: Path) -> None:
    train = _folder(tmp_path / "photos" / "train", n=8)
    for i in range(3):
        (train / "bad").mkdir(exist_ok=True)
        (train / "bad" / f"{i:03d}.png").write_bytes(_png(_image(50 + i, grey=True)))
    (tmp_path / "c.toml").write_text(
        f'rounds = 1\n[data]\nname = "image_folder"\npath = "{train}"\nnormal = ["good"]\n'
        'anomaly = ["bad"]\n[partition]\nclients = 1\n'
        '[[methods]]\nname = "local"\ndetector = "ocsvm"\n'
    )
    run = tmp_path / "run"
    res = runner.invoke(app, ["run", str(tmp_path / "c.toml"), "-o", str(run), "-q"])
    assert res.exit_code == 0, res.output
    new = _folder(tmp_path / "new")
    (new / "good" / "001.png").write_bytes(rows_cut(_png(_image(1)), 2))
    line = one_line_error(runner.invoke(app, ["score", str(run), str(new), "-m", "local"]))
    assert "001.png is truncated" in line and "--skip-bad-files" in line
    res = runner.invoke(app, ["score", str(run), str(new), "-m", "local", "--skip-bad-files"])
    assert res.exit_code == 0, res.output
    assert "scored 2 inputs" in res.output and "001.png" not in res.stdout
