"""scikit-image's LFW subset as an image data set: faces against non-faces."""

from __future__ import annotations

import numpy as np
import pytest

from fedad.config import parse_config
from fedad.data.registry import dataset_info, load_dataset
from fedad.federation import build_federation

pytest.importorskip("skimage")


def test_faces_then_non_faces_as_two_classes() -> None:
    ds = load_dataset("lfw_subset")
    assert dataset_info("lfw-subset").kind == "image"
    assert ds.x.shape == (200, 1, 25, 25) and ds.x.dtype == np.float32
    assert ds.x.min() >= 0.0 and ds.x.max() <= 1.0
    assert ds.classes == ("face", "non-face") and np.bincount(ds.y).tolist() == [100, 100]
    from skimage import data

    raw = np.asarray(data.lfw_subset(), dtype=np.float32)
    np.testing.assert_array_equal(ds.x[:, 0], raw)


def test_size_resizes_and_arrays_are_fresh() -> None:
    assert load_dataset("lfw_subset", size=32).x.shape == (200, 1, 32, 32)
    a = load_dataset("lfw_subset")
    a.x[0, 0, 0, 0] = -1.0
    assert load_dataset("lfw_subset").x[0, 0, 0, 0] != -1.0


def test_a_federation_of_faces_with_non_face_anomalies() -> None:
    fed = build_federation(
        parse_config(
            {
                "data": {"name": "lfw_subset", "normal": [0], "anomaly": [1]},
                "partition": {"scheme": "iid", "clients": 2, "contamination": 0.0},
                "methods": [{"name": "fedavg"}],
            }
        )
    )
    assert len(fed.clients) == 2 and fed.x_test.shape[1:] == (1, 25, 25)
    assert {int(c) for c in np.unique(fed.y_test)} == {0, 1}
    for c in fed.clients:
        assert len(c.x_train) > 0
