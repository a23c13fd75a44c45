"""``mvtec``: the MVTec AD layout on a tiny folder the tests write."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fedad.config import parse_config
from fedad.core.errors import DataError
from fedad.data.mvtec import load_mvtec
from fedad.federation import build_federation
from tests.data.datahelpers import make_config

SIDE = 16


def png(path: Path, arr: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path)


def write_category(root: Path, name: str, seed: int, grey: bool = False) -> None:
    """6 training images, 3 good and 3 'crack' test images with masks (a 4x4 square)."""
    rng = np.random.default_rng(seed)

    def image() -> np.ndarray:
        shape = (SIDE, SIDE) if grey else (SIDE, SIDE, 3)
        return rng.integers(0, 256, size=shape, dtype=np.uint8)

    for i in range(6):
        png(root / name / "train" / "good" / f"{i:03d}.png", image())
    for i in range(3):
        png(root / name / "test" / "good" / f"{i:03d}.png", image())
        mask = np.zeros((SIDE, SIDE), np.uint8)
        mask[2 + i : 6 + i, 4:8] = 255
        png(root / name / "test" / "crack" / f"{i:03d}.png", image())
        png(root / name / "ground_truth" / "crack" / f"{i:03d}_mask.png", mask)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "mvtec_ad"
    write_category(root, "carpet", 1)
    write_category(root, "bottle", 2, grey=True)
    (root / "license.txt").write_text("not a category")
    return root


def test_categories_are_sorted_classes_with_defects_and_masks(folder: Path) -> None:
    ds = load_mvtec(str(folder), size=SIDE)
    assert ds.classes == ("bottle", "carpet") and ds.kind == "image" and ds.is_defect_set
    assert ds.x.shape == (12, 3, SIDE, SIDE) and ds.x.dtype == np.float32
    assert ds.x_test is not None and ds.y_test is not None
    assert ds.mask_test is not None and ds.defect_test is not None and ds.defect is not None
    assert ds.x_test.shape == (12, 3, SIDE, SIDE) and not ds.defect.any()
    np.testing.assert_array_equal(ds.y, np.repeat([0, 1], 6))
    np.testing.assert_array_equal(ds.y_test, np.repeat([0, 1], 6))
    # sorted by defect folder then name: crack (defective) before good
    np.testing.assert_array_equal(ds.defect_test, np.tile(np.repeat([True, False], 3), 2))
    assert (ds.mask_test[~ds.defect_test] == 0).all()
    areas = ds.mask_test[ds.defect_test].sum(axis=(1, 2))
    assert (areas == 16).all() and set(np.unique(ds.mask_test)) == {0, 1}
    assert ds.mask_test[0, 2:6, 4:8].all()
    # grey images are replicated to three channels; pixels are the file's, scaled
    bottle = ds.x[0]
    np.testing.assert_array_equal(bottle[0], bottle[1])
    raw = np.asarray(Image.open(folder / "bottle" / "train" / "good" / "000.png"))
    np.testing.assert_allclose(bottle[0], raw / 255.0, atol=1e-6)
    assert ds.x.min() >= 0.0 and ds.x.max() <= 1.0


def test_resizing_keeps_masks_binary(folder: Path) -> None:
    ds = load_mvtec(str(folder), size=32)
    assert ds.x.shape[2:] == (32, 32) and ds.mask_test is not None
    assert set(np.unique(ds.mask_test)) == {0, 1}
    assert ds.mask_test[0].sum() == 64  # a 4x4 square doubled by nearest-neighbour


def test_one_category_folder_is_one_class(folder: Path) -> None:
    ds = load_mvtec(str(folder / "carpet"), size=SIDE)
    assert ds.classes == ("carpet",) and len(ds.x) == 6


def test_the_federation_deals_defects_to_their_types_clients(folder: Path) -> None:
    data = {"name": "mvtec", "path": str(folder), "size": SIDE}
    partition = {"scheme": "one-class", "clients": 2, "min_per_client": 1}
    fed = build_federation(parse_config(make_config(data=data, partition=partition)))
    assert fed.class_names[:2] == ("bottle", "carpet")
    for c in fed.clients:
        assert c.mask_test is not None and int(c.y_test.sum()) == 3
        assert (c.mask_test[c.y_test == 1].sum(axis=(1, 2)) == 16).all()
        assert (c.mask_test[c.y_test == 0] == 0).all()


def test_a_missing_mask_names_the_file(folder: Path) -> None:
    (folder / "carpet" / "ground_truth" / "crack" / "001_mask.png").unlink()
    with pytest.raises(DataError, match=r"001\.png has no mask file .*001_mask\.png"):
        load_mvtec(str(folder), size=SIDE)


def test_a_file_that_is_not_an_image_is_refused(folder: Path) -> None:
    (folder / "carpet" / "train" / "good" / "003.png").write_bytes(b"#!/bin/sh\necho hi\n")
    with pytest.raises(DataError, match=r"003\.png is not a readable image"):
        load_mvtec(str(folder), size=SIDE)
    (folder / "carpet" / "train" / "good" / "notes.txt").write_text("x")
    with pytest.raises(DataError, match=r"notes\.txt is not an image file"):
        load_mvtec(str(folder), size=SIDE)


def test_a_symlink_out_of_the_folder_is_refused(folder: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.png"
    png(outside, np.zeros((SIDE, SIDE, 3), np.uint8))
    (folder / "carpet" / "train" / "good" / "009.png").symlink_to(outside)
    with pytest.raises(DataError, match=r"leads outside data\.path"):
        load_mvtec(str(folder), size=SIDE)


def test_a_ring_of_two_symlinks_is_named(folder: Path) -> None:
    good = folder / "carpet" / "train" / "good"
    (good / "a.png").symlink_to("b.png")
    (good / "b.png").symlink_to("a.png")
    with pytest.raises(DataError, match=r"a\.png is a symbolic link loop"):
        load_mvtec(str(folder), size=SIDE)


def test_huge_images_are_refused_before_decoding(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("fedad.data.mvtec.MAX_PIXELS", SIDE * SIDE - 1)
    with pytest.raises(DataError, match="16x16 pixels, outside"):
        load_mvtec(str(folder), size=SIDE)


def test_without_a_path_or_categories_the_error_says_what_to_set(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"needs data\.path"):
        load_mvtec(None)
    with pytest.raises(DataError, match="no category under"):
        load_mvtec(str(tmp_path))
    with pytest.raises(DataError, match="no folder"):
        load_mvtec(str(tmp_path / "absent"))
