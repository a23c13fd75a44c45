"""``textures``: defects change exactly their masked pixels; the set and its fallback."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("skimage")

from fedad.core.types import Dataset
from fedad.data import textures
from fedad.data.textures import CHANGED, DEFECTS, _defect, load_textures


@pytest.mark.parametrize("kind", DEFECTS)
def test_a_defect_mask_is_exactly_the_changed_pixels(kind: str) -> None:
    rng = np.random.default_rng(3)
    img = rng.uniform(0.2, 0.8, size=(3, 64, 64)).astype(np.float32)
    other = rng.uniform(0.0, 1.0, size=(3, 64, 64)).astype(np.float32)
    bad, mask = _defect(img, kind, rng, other)
    changed = (np.abs(bad - img) > CHANGED).any(axis=0)
    assert mask.dtype == np.uint8 and mask.any()
    np.testing.assert_array_equal(mask.astype(bool), changed)
    np.testing.assert_array_equal(bad[:, ~changed], img[:, ~changed])  # the rest untouched
    assert 0.001 < mask.mean() < 0.1


@pytest.fixture(scope="module")
def small() -> Dataset:
    return load_textures(size=32)


def test_the_set_types_masks_and_determinism(small: Dataset) -> None:
    ds = small
    assert ds.x_test is not None and ds.mask_test is not None and ds.defect_test is not None
    n_types = len(ds.classes)
    assert ds.x.shape == (60 * n_types, 3, 32, 32) and ds.x_test.shape[0] == 40 * n_types
    assert ds.x.min() >= 0.0 and ds.x.max() <= 1.0
    assert (ds.mask_test[~ds.defect_test] == 0).all()  # normal test images: empty masks
    assert (ds.mask_test[ds.defect_test].sum(axis=(1, 2)) > 0).all()
    assert ds.defect is not None and not ds.defect.any()  # training images are all normal
    again = textures._build.__wrapped__(32, str(textures.PATTERN_DIR))
    np.testing.assert_array_equal(again.x_test, ds.x_test)
    # the types really differ: the per-type mean colours are not all alike
    means = np.stack([ds.x[ds.y == k].mean(axis=(0, 2, 3)) for k in range(n_types)])
    assert np.ptp(means, axis=0).max() > 0.2


def test_without_gimp_data_it_falls_back_to_scikit_image(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING", logger="fedad"):
        ds = load_textures(path=str(tmp_path), size=16)
    assert ds.classes == ("photo_brick", "photo_grass", "photo_gravel")
    assert "gimp-data" in caplog.text


@pytest.mark.skipif(not textures.PATTERN_DIR.is_dir(), reason="gimp-data is not installed")
def test_a_pattern_folder_with_every_file_gives_twelve_types(tmp_path: Path) -> None:
    for _, rel in textures.GIMP_TYPES:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(textures.PATTERN_DIR / rel, tmp_path / rel)
    assert len(load_textures(path=str(tmp_path), size=16).classes) == 12
