"""Defect sets: product types as classes, anomalies the defective items of a client's types."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fedad.config import parse_config
from fedad.core.errors import ConfigError, DataError
from fedad.core.types import Federation
from fedad.data.federation import as_class_set
from fedad.federation import build_federation
from tests.data.datahelpers import make_config, synth_defects


def ids_of(x: np.ndarray) -> np.ndarray:
    return np.rint(x[:, 0, 0, 0] * 2**16).astype(np.int64)


def build(seed: int = 0, data: dict[str, Any] | None = None, **part: Any) -> Federation:
    partition = {"scheme": "dirichlet", "clients": 4, "alpha": 0.1, **part}
    return build_federation(
        parse_config(make_config(seed=seed, data={"name": "synth_defects", **(data or {})},
                                 partition=partition))
    )  # fmt: skip


def test_as_class_set_relabels_defects_and_maps_them_to_their_type() -> None:
    ds, parent = as_class_set(synth_defects())
    assert ds.classes[5:] == tuple(f"t{i} (defect)" for i in range(5))
    assert parent == {5 + c: c for c in range(5)}
    assert ds.y_test is not None and ds.mask_test is not None
    assert (ds.y_test >= 5).sum() == 40 and (ds.y < 5).all()
    assert (ds.mask_test[ds.y_test >= 5].sum(axis=(1, 2)) == 4).all()
    assert not ds.is_defect_set


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_client_is_tested_on_defects_of_its_own_types(seed: int) -> None:
    fed = build(seed)
    ds = synth_defects()
    assert ds.x_test is not None and ds.y_test is not None and ds.defect_test is not None
    test_type = dict(zip(ids_of(ds.x_test), ds.y_test, strict=True))
    defective = set(ids_of(ds.x_test)[ds.defect_test])
    train_type = dict(zip(ids_of(ds.x), ds.y, strict=True))
    seen = 0
    for c in fed.clients:
        assert isinstance(c.x_train, np.ndarray) and isinstance(c.x_test, np.ndarray)
        mine = {train_type[i] for i in ids_of(c.x_train)}
        assert not defective & set(ids_of(c.x_train))  # defects never train
        bad = ids_of(c.x_test)[c.y_test == 1]
        assert set(bad) <= defective and {test_type[i] for i in bad} <= mine
        good = ids_of(c.x_test)[c.y_test == 0]
        assert not set(good) & defective
        assert c.mask_test is not None and (c.mask_test[c.y_test == 0] == 0).all()
        seen += len(bad)
    assert seen == 40  # every defective image is someone's test anomaly


def test_normal_selects_types_and_anomaly_must_be_omitted() -> None:
    fed = build(data={"normal": [0, 1]}, clients=2)
    assert sorted(set(fed.normal_classes)) == [0, 1] and sorted(fed.anomaly_classes) == [5, 6]
    assert sorted(build().normal_classes) == [0, 1, 2, 3, 4]  # default: every type
    with pytest.raises(ConfigError, match=r"data\.anomaly must be omitted"):
        build(data={"normal": [0], "anomaly": [1]})
    with pytest.raises(ConfigError, match="one-vs-rest"):
        build(scheme="one-vs-rest", data={"normal": [0, 1]})


def test_normal_selects_types_by_name_too() -> None:
    """``normal = ["leather"]`` for textures: a named class is found by its name."""
    by_name = build(data={"normal": ["t1", 3]}, clients=2)
    by_index = build(data={"normal": [1, 3]}, clients=2)
    assert by_name.normal_classes == by_index.normal_classes
    assert sorted(set(by_name.normal_classes)) == [1, 3] and by_name.anomaly_classes == [6, 8]
    for a, b in zip(by_name.clients, by_index.clients, strict=True):
        np.testing.assert_array_equal(a.x_train, b.x_train)
    with pytest.raises(DataError, match=r"has class 't9', but .*0=t0.*give class indices or names"):
        build(data={"normal": ["t9"]}, clients=2)


@pytest.mark.parametrize("seed", range(6))
def test_every_client_gets_a_defect_of_its_own_types(seed: int) -> None:
    fed = build(seed, clients=5)
    assert all(int(c.y_test.sum()) > 0 for c in fed.clients)
    assert sum(int(c.y_test.sum()) for c in fed.clients) == 40


def test_defect_sets_do_not_mix_with_class_sets_in_sources() -> None:
    with pytest.raises(ConfigError, match="mixes defect sets"):
        build(data={"sources": ["synth_img_b"]})


def test_anomaly_source_adds_anomalies_dealt_evenly() -> None:
    fed = build(data={"anomaly_source": "synth_img_b"})
    extra = fed.notes["n_test_anomaly"]
    assert isinstance(extra, int) and extra > 40
    per_client = [int(c.y_test.sum()) for c in fed.clients]
    assert sum(per_client) == extra
    assert "masks_dropped" in fed.notes  # synth_img_b has no masks


def test_contamination_draws_defective_training_samples_only() -> None:
    ds, _ = as_class_set(synth_defects())
    assert not (ds.y >= 5).any()  # synth_defects has no defective training image
    with pytest.raises(DataError, match=r"needs \d+ training anomalies but only 0"):
        build(contamination=0.1)
