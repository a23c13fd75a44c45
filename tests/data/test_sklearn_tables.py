"""scikit-learn's bundled tables as data sets, and the ODDS sets by their short names."""

from __future__ import annotations

import numpy as np
import pytest

from fedad.config import parse_config
from fedad.core.errors import DataError
from fedad.data.registry import dataset_info, load_dataset
from fedad.federation import build_federation


def test_breast_cancer_has_a_fixed_definition() -> None:
    ds = load_dataset("breast_cancer")
    assert ds.fixed_split and ds.kind == "vector" and ds.classes == ("normal", "anomaly")
    assert ds.x.shape == (569, 30) and ds.x.dtype == np.float32
    assert int(ds.y.sum()) == 212  # malignant
    assert ds.columns[0] == "mean radius"


@pytest.mark.parametrize(
    ("name", "shape", "classes"),
    [
        ("wine", (178, 13), ("class_0", "class_1", "class_2")),
        ("iris", (150, 4), ("setosa", "versicolor", "virginica")),
    ],
)
def test_classification_tables(name: str, shape: tuple[int, int], classes: tuple[str]) -> None:
    ds = load_dataset(name)
    assert not ds.fixed_split and ds.x.shape == shape and ds.classes == classes
    assert sorted(np.unique(ds.y).tolist()) == [0, 1, 2]


def test_loaders_hand_out_fresh_arrays() -> None:
    a = load_dataset("iris")
    a.x[0, 0] = -1.0
    assert load_dataset("iris").x[0, 0] != -1.0


def test_odds_sets_by_their_short_names() -> None:
    assert dataset_info("shuttle").name == "odds_shuttle"
    assert dataset_info("Ionosphere").name == "odds_ionosphere"
    with pytest.raises(DataError, match="unknown data set 'odds_iris'"):
        dataset_info("odds_iris")


def test_federations_build_from_them() -> None:
    fixed = build_federation(
        parse_config(
            {
                "data": {"name": "breast_cancer"},
                "partition": {"clients": 3, "contamination": 0.02},
                "methods": [{"name": "fedavg"}],
            }
        )
    )
    assert len(fixed.clients) == 3 and fixed.x_test.shape[1] == 30
    assert 0 < fixed.y_test.mean() < 1
    by_class = build_federation(
        parse_config(
            {
                "data": {"name": "wine", "normal": [0, 1], "anomaly": [2]},
                "partition": {"clients": 2},
                "methods": [{"name": "fedavg"}],
            }
        )
    )
    assert {int(c) for c in np.unique(by_class.y_test)} == {0, 1}
