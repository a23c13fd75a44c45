"""``image_folder``: the user's own folders of images, on tiny folders the tests write."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import fedad.data.image_folder  # noqa: F401  (registers the data set)
from fedad.config import parse_config
from fedad.core.errors import DataError
from fedad.data.image_folder import list_images, load_image_folder, read_images
from fedad.federation import build_federation
from tests.data.datahelpers import make_config

SIDE = 8


def write(path: Path, arr: np.ndarray, **save: object) -> np.ndarray:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path, **save)
    return arr


def image(rng: np.random.Generator, grey: bool = False, side: int = SIDE) -> np.ndarray:
    shape = (side, side) if grey else (side, side, 3)
    return rng.integers(0, 256, size=shape, dtype=np.uint8)


def write_classes(
    root: Path, classes: dict[str, int], grey: bool = False, seed: int = 0
) -> dict[str, list[np.ndarray]]:
    """``n`` PNG images per class folder; returns their pixels, in file-name order."""
    rng = np.random.default_rng(seed)
    return {
        c: [write(root / c / f"{i:03d}.png", image(rng, grey)) for i in range(n)]
        for c, n in classes.items()
    }


def unit(arr: np.ndarray) -> np.ndarray:
    """Pixels ``(H, W)`` or ``(H, W, 3)`` as ``(C, H, W)`` in [0, 1]."""
    a = arr.astype(np.float32) / np.float32(255.0)
    return a[None] if a.ndim == 2 else a.transpose(2, 0, 1)


def test_png_classes_round_trip_sorted_by_class_then_path(tmp_path: Path) -> None:
    pixels = write_classes(tmp_path, {"good": 3, "bad": 2})
    ds = load_image_folder(str(tmp_path))
    assert ds.name == "image_folder" and ds.kind == "image" and ds.by_value
    assert ds.classes == ("bad", "good") and ds.x_test is None and ds.group is None
    assert ds.x.shape == (5, 3, SIDE, SIDE) and ds.x.dtype == np.float32
    np.testing.assert_array_equal(ds.y, [0, 0, 1, 1, 1])
    want = np.stack([unit(a) for a in pixels["bad"] + pixels["good"]])
    np.testing.assert_array_equal(ds.x, want)


def test_jpeg_matches_pillows_own_decode(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    for c in ("a", "b"):
        write(tmp_path / c / "x.jpg", image(rng), quality=90)
        write(tmp_path / c / "y.JPEG", image(rng))
    ds = load_image_folder(str(tmp_path))
    files = [tmp_path / c / n for c in ("a", "b") for n in ("x.jpg", "y.JPEG")]
    want = np.stack([unit(np.asarray(Image.open(f).convert("RGB"))) for f in files])
    np.testing.assert_array_equal(ds.x, want)


def test_grey_stays_one_channel_and_mixed_becomes_rgb(tmp_path: Path) -> None:
    pixels = write_classes(tmp_path, {"good": 2, "bad": 1}, grey=True)
    ds = load_image_folder(str(tmp_path))
    assert ds.x.shape == (3, 1, SIDE, SIDE)
    np.testing.assert_array_equal(ds.x[0, 0], pixels["bad"][0] / np.float32(255.0))
    write(tmp_path / "bad" / "009.png", image(np.random.default_rng(2)))
    mixed = load_image_folder(str(tmp_path))
    assert mixed.x.shape == (4, 3, SIDE, SIDE)
    for k in range(3):  # a grey image replicated to three channels
        np.testing.assert_array_equal(mixed.x[0, k], ds.x[0, 0])


def test_channels_force_grey_or_rgb(tmp_path: Path) -> None:
    pixels = write_classes(tmp_path, {"good": 2})
    grey = load_image_folder(str(tmp_path), channels=1)
    assert grey.x.shape == (2, 1, SIDE, SIDE)
    luma = np.asarray(Image.fromarray(pixels["good"][0]).convert("L"))
    np.testing.assert_array_equal(grey.x[0, 0], luma / np.float32(255.0))
    other = tmp_path / "grey"
    write_classes(other, {"good": 1}, grey=True)
    assert load_image_folder(str(other), channels=3).x.shape == (1, 3, SIDE, SIDE)


def test_alpha_palette_and_16_bit_grey(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    rgba = rng.integers(0, 256, size=(SIDE, SIDE, 4), dtype=np.uint8)
    write(tmp_path / "a" / "rgba.png", rgba)
    Image.fromarray(image(rng)).convert("P").save(tmp_path / "a" / "pal.png")
    wide = (np.arange(SIDE * SIDE, dtype=np.uint16).reshape(SIDE, SIDE) * 1000).astype(np.uint16)
    (tmp_path / "b").mkdir()
    Image.fromarray(wide).save(tmp_path / "b" / "wide.png")
    ds = load_image_folder(str(tmp_path))
    assert ds.x.shape == (3, 3, SIDE, SIDE)
    np.testing.assert_array_equal(ds.x[1], unit(rgba[..., :3]))  # pal < rgba by path
    eight = np.rint(wide / 65535.0 * 255.0) / np.float32(255.0)
    np.testing.assert_allclose(ds.x[2, 0], eight, atol=1e-7)


def test_size_resizes_and_mismatched_sizes_say_set_size(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    write(tmp_path / "good" / "a.png", image(rng))
    write(tmp_path / "good" / "b.png", image(rng, side=12))
    with pytest.raises(DataError, match=r"a\.png is 8x8 pixels but .*b\.png is 12x12.*data\.size"):
        load_image_folder(str(tmp_path))
    ds = load_image_folder(str(tmp_path), size=12)
    assert ds.x.shape == (2, 3, 12, 12) and ds.x.min() >= 0.0 and ds.x.max() <= 1.0
    np.testing.assert_array_equal(ds.x[1], unit(np.asarray(Image.open(tmp_path / "good/b.png"))))


def test_train_test_split_with_a_class_in_one_split_only(tmp_path: Path) -> None:
    write_classes(tmp_path / "train", {"good": 3})
    write_classes(tmp_path / "test", {"good": 2, "bad": 2}, seed=1)
    ds = load_image_folder(str(tmp_path))
    assert ds.classes == ("bad", "good")
    assert ds.x_test is not None and ds.y_test is not None
    np.testing.assert_array_equal(ds.y, [1, 1, 1])
    np.testing.assert_array_equal(ds.y_test, [0, 0, 1, 1])


def test_a_class_named_train_without_test_is_a_class(tmp_path: Path) -> None:
    write_classes(tmp_path, {"train": 1, "other": 1})
    ds = load_image_folder(str(tmp_path))
    assert ds.classes == ("other", "train") and ds.x_test is None


def test_client_folders_give_groups(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    for split, n in (("train", 2), ("test", 1)):
        for cls in ("good", "bad"):
            for client in ("siteB", "siteA"):
                for i in range(n):
                    write(tmp_path / split / cls / client / f"{i}.png", image(rng))
    ds = load_image_folder(str(tmp_path))
    assert ds.group is not None and ds.group_test is not None
    assert ds.group.dtype.kind == "U" and len(ds.group) == len(ds.x) == 8
    assert ds.group.tolist() == ["siteA"] * 2 + ["siteB"] * 2 + ["siteA"] * 2 + ["siteB"] * 2
    assert ds.group_test.tolist() == ["siteA", "siteB", "siteA", "siteB"]
    np.testing.assert_array_equal(ds.y, [0, 0, 0, 0, 1, 1, 1, 1])


def test_a_class_folder_mixing_images_and_folders_is_named(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    write(tmp_path / "good" / "a.png", image(rng))
    write(tmp_path / "good" / "site" / "b.png", image(rng))
    with pytest.raises(DataError, match=r"class folder .*good holds both"):
        load_image_folder(str(tmp_path))


def test_clients_csv_gives_groups(tmp_path: Path) -> None:
    write_classes(tmp_path, {"good": 2, "bad": 1})
    (tmp_path / "clients.csv").write_text(
        "file,client\ngood/001.png,b\ngood/000.png,a\n./bad/000.png,a\n", encoding="utf-8"
    )
    ds = load_image_folder(str(tmp_path))
    assert ds.group is not None and ds.group.tolist() == ["a", "a", "b"]


def test_clients_csv_with_a_train_test_split(tmp_path: Path) -> None:
    write_classes(tmp_path / "train", {"good": 2})
    write_classes(tmp_path / "test", {"good": 1, "bad": 1}, seed=1)
    rows = ["train/good/000.png,x", "train/good/001.png,y", "test/good/000.png,y"]
    (tmp_path / "clients.csv").write_text("\n".join(["file,client", *rows, "test/bad/000.png,x"]))
    ds = load_image_folder(str(tmp_path))
    assert ds.group is not None and ds.group_test is not None
    assert ds.group.tolist() == ["x", "y"] and ds.group_test.tolist() == ["x", "y"]


def test_clients_csv_unlisted_or_missing_files_are_named(tmp_path: Path) -> None:
    write_classes(tmp_path, {"good": 2})
    csv = tmp_path / "clients.csv"
    csv.write_text("file,client\ngood/000.png,a\n")
    with pytest.raises(DataError, match=r"001\.png is not listed in .*clients\.csv"):
        load_image_folder(str(tmp_path))
    csv.write_text("file,client\ngood/000.png,a\ngood/001.png,a\ngood/002.png,b\n")
    with pytest.raises(DataError, match=r"line 4 lists good/002\.png, which is not a file"):
        load_image_folder(str(tmp_path))
    csv.write_text("path,site\n")
    with pytest.raises(DataError, match="header 'file,client'"):
        load_image_folder(str(tmp_path))


def test_both_client_forms_at_once_is_an_error(tmp_path: Path) -> None:
    write(tmp_path / "good" / "site" / "0.png", image(np.random.default_rng(7)))
    (tmp_path / "clients.csv").write_text("file,client\ngood/site/0.png,a\n")
    with pytest.raises(DataError, match=r"both clients\.csv and client folders"):
        load_image_folder(str(tmp_path))


def test_a_non_image_file_is_named_with_the_fix(tmp_path: Path) -> None:
    write_classes(tmp_path, {"good": 2})
    (tmp_path / "good" / "notes.txt").write_text("x")
    (tmp_path / "good" / ".DS_Store").write_bytes(b"\0")  # hidden: skipped silently
    with pytest.raises(DataError, match=r"notes\.txt is not an image file.*skip_bad_files"):
        load_image_folder(str(tmp_path))


def test_a_corrupt_image_is_named(tmp_path: Path) -> None:
    write_classes(tmp_path, {"good": 2})
    (tmp_path / "good" / "001.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    with pytest.raises(DataError, match=r"001\.png is not a readable image.*skip_bad_files"):
        load_image_folder(str(tmp_path))


def test_skip_bad_files_skips_and_logs_the_count(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_classes(tmp_path, {"good": 3})
    (tmp_path / "good" / "001.png").write_bytes(b"truncated")
    (tmp_path / "good" / "readme.txt").write_text("x")
    with caplog.at_level(logging.WARNING, logger="fedad"):
        ds = load_image_folder(str(tmp_path), skip_bad_files=True)
    assert ds.x.shape[0] == 2
    warned = [r.getMessage() for r in caplog.records if r.name == "fedad"]
    assert len(warned) == 1 and "skipped 2 bad file(s)" in warned[0]
    assert "readme.txt" in warned[0]


def test_a_symlink_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "imgs"
    write_classes(root, {"good": 1})
    write(tmp_path / "elsewhere.png", np.zeros((SIDE, SIDE, 3), np.uint8))
    (root / "good" / "009.png").symlink_to(tmp_path / "elsewhere.png")
    with pytest.raises(DataError, match=r"leads outside data\.path"):
        load_image_folder(str(root))
    with pytest.raises(DataError, match="leads outside the folder"):
        list_images(root)


def test_an_image_linked_to_itself_is_a_bad_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_classes(tmp_path, {"good": 2})
    (tmp_path / "good" / "loop.png").symlink_to("loop.png")
    with pytest.raises(DataError, match=r"loop\.png is a symbolic link loop.*skip_bad_files"):
        load_image_folder(str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="fedad"):
        assert load_image_folder(str(tmp_path), skip_bad_files=True).x.shape[0] == 2
    assert "skipped 1 bad file(s)" in caplog.text
    with pytest.raises(DataError, match=r"loop\.png is a symbolic link loop"):
        list_images(tmp_path)
    assert len(list_images(tmp_path, skip_bad_files=True)) == 2


def test_missing_path_or_empty_class_folder(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"needs data\.path"):
        load_image_folder(None)
    with pytest.raises(DataError, match=r"no folder .*set data\.path"):
        load_image_folder(str(tmp_path / "absent"))
    (tmp_path / "good").mkdir()
    with pytest.raises(DataError, match="no image in the class folder"):
        load_image_folder(str(tmp_path))


def test_read_images_equals_the_loaders_decode(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    write(tmp_path / "good" / "a.png", image(rng, grey=True))
    write(tmp_path / "good" / "b.jpg", image(rng, side=12))
    write(tmp_path / "bad" / "c.png", image(rng, side=10))
    for size, channels in ((12, None), (8, 1), (16, 3)):
        ds = load_image_folder(str(tmp_path), size=size, channels=channels)
        files = list_images(tmp_path)
        c, h, w = ds.feature_shape
        x, read = read_images(files, tmp_path, (c, h, w))
        assert read == files and x.dtype == np.float32
        np.testing.assert_array_equal(x, ds.x)


def test_read_images_skips_bad_files_when_asked(tmp_path: Path) -> None:
    write_classes(tmp_path, {"good": 2})
    (tmp_path / "good" / "000.png").write_bytes(b"nope")
    files = list_images(tmp_path)
    with pytest.raises(DataError, match=r"000\.png is not a readable image"):
        read_images(files, tmp_path, (3, SIDE, SIDE))
    x, read = read_images(files, tmp_path, (3, SIDE, SIDE), skip_bad_files=True)
    assert read == [tmp_path / "good" / "001.png"] and x.shape == (1, 3, SIDE, SIDE)


def test_list_images_order_and_bad_files(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    for rel in ("b/2.png", "a/z/1.bmp", "a/3.JPG", "c.png", ".hidden/x.png"):
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image(rng)).save(p, format="BMP" if p.suffix == ".bmp" else None)
    got = [p.relative_to(tmp_path).as_posix() for p in list_images(tmp_path)]
    assert got == ["a/3.JPG", "a/z/1.bmp", "b/2.png", "c.png"]
    (tmp_path / "b" / "notes.md").write_text("x")
    with pytest.raises(DataError, match=r"notes\.md is not an image file"):
        list_images(tmp_path)
    assert len(list_images(tmp_path, skip_bad_files=True)) == 4
    (tmp_path / "empty" / ".hidden.png").parent.mkdir()
    (tmp_path / "empty" / ".hidden.png").write_bytes(b"x")
    with pytest.raises(DataError, match="no image file"):
        list_images(tmp_path / "empty")


def test_the_federation_selects_classes_by_name(tmp_path: Path) -> None:
    write_classes(tmp_path, {"good": 30, "bad": 10})
    data = {"name": "image_folder", "path": str(tmp_path), "normal": ["good"], "anomaly": ["bad"]}
    partition = {"scheme": "iid", "clients": 2, "min_per_client": 1}
    fed = build_federation(parse_config(make_config(data=data, partition=partition)))
    assert fed.kind == "image" and fed.feature_shape == (3, SIDE, SIDE)
    assert [fed.class_names[k] for k in fed.normal_classes] == ["good"]
    assert [fed.class_names[k] for k in fed.anomaly_classes] == ["bad"]
    assert len(fed.clients) == 2 and int(fed.y_test.sum()) > 0


def test_client_folders_make_a_natural_federation(tmp_path: Path) -> None:
    rng = np.random.default_rng(10)
    for client in ("north", "south"):
        for i in range(12):
            write(tmp_path / "good" / client / f"{i:02d}.png", image(rng))
        for i in range(4):
            write(tmp_path / "bad" / client / f"{i:02d}.png", image(rng))
    data = {"name": "image_folder", "path": str(tmp_path), "normal": ["good"], "anomaly": ["bad"]}
    partition = {"scheme": "natural", "min_per_client": 1}
    fed = build_federation(parse_config(make_config(data=data, partition=partition)))
    assert [c.name for c in fed.clients] == ["north", "south"]
