"""The autoencoder's anomaly maps: its per-pixel reconstruction error."""

from __future__ import annotations

import numpy as np
import pytest

from fedad.components.detectors.neural import AutoEncoderDetector
from fedad.core.detector import localizes


def test_maps_are_the_per_pixel_error_and_average_to_the_score() -> None:
    rng = np.random.default_rng(0)
    x = (0.5 + 0.02 * rng.normal(size=(40, 3, 12, 12))).astype(np.float32)
    det = AutoEncoderDetector(kind="image", input_shape=[3, 12, 12], epochs=30, seed=0).fit(x)
    assert localizes(det)
    bad = x[:4].copy()
    bad[:, :, 2:5, 7:10] = 1.0  # a bright patch the model never saw
    maps = det.score_maps(bad)
    assert maps.shape == (4, 12, 12) and maps.dtype == np.float32 and (maps >= 0).all()
    np.testing.assert_allclose(maps.mean(axis=(1, 2)), det.score(bad), rtol=1e-4)
    inside = maps[:, 2:5, 7:10].mean()
    outside = np.delete(
        maps.reshape(4, -1),
        np.ravel_multi_index(np.mgrid[2:5, 7:10].reshape(2, -1), (12, 12)),
        axis=1,
    ).mean()
    assert inside > 5 * outside


def test_vector_autoencoders_make_no_maps() -> None:
    det = AutoEncoderDetector(kind="vector", input_shape=[6], epochs=1, seed=0)
    det.fit(np.zeros((10, 6), np.float32))
    with pytest.raises(ValueError, match="image data"):
        det.score_maps(np.zeros((2, 6), np.float32))
