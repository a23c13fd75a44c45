"""The federation builder: honest splits, exact bookkeeping, determinism, one-line errors.

Synthetic sets carry a unique sample id in feature 0 (vectors: the id; images: id / 2**16 in
pixel 0), so sample identity survives partitioning; see ``datahelpers.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from dataclasses import field as default
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from fedad.config import parse_config
from fedad.core.errors import ConfigError, DataError, FedadError
from fedad.core.types import Federation, GraphSet
from fedad.data.federation import PartitionSpec, pooled_mean_std
from fedad.data.federation import plan_federation as plan_sections
from fedad.data.idx import FASHION_MNIST_DIR
from fedad.data.missing import MissingPolicy
from fedad.data.partition import round_half_up
from fedad.federation import build_federation, plan_federation
from tests.data.datahelpers import SYNTH_PER_CLASS, make_config, write_mnist_like


def build(seed: int = 0, **sections: Any) -> Federation:
    return build_federation(parse_config(make_config(seed=seed, **sections)))


def ids_of(x: np.ndarray) -> np.ndarray:
    """The unique id of each synthetic sample."""
    if x.ndim == 2:
        return x[:, 0].astype(np.int64)
    return np.rint(x[:, 0, 0, 0] * 2**16).astype(np.int64)


VEC = {"name": "synth_vec", "normal": [0, 1, 2], "anomaly": [3, 4], "standardize": False}


def check_bookkeeping(fed: Federation, anomaly_of: Any, contamination: float = 0.0) -> None:
    """Disjointness, exact test union, contamination marks, local test coverage."""
    train = [ids_of(c.x_train) for c in fed.clients]
    test = [ids_of(c.x_test) for c in fed.clients]
    all_train = np.concatenate(train)
    all_test = np.concatenate(test)
    assert len(np.unique(all_train)) == len(all_train), "a training sample is used twice"
    assert len(np.unique(all_test)) == len(all_test), "local test sets overlap"
    assert not set(all_train) & set(all_test), "test samples leak into training"
    np.testing.assert_array_equal(np.sort(ids_of(fed.x_test)), np.sort(all_test))
    if fed.server_normal is not None:
        server = set(ids_of(fed.server_normal).tolist())
        assert not server & set(all_train.tolist()) and not server & set(all_test.tolist())
    for c, tr, te in zip(fed.clients, train, test, strict=True):
        np.testing.assert_array_equal(c.y_train, anomaly_of(tr).astype(np.int64))
        np.testing.assert_array_equal(c.y_test, anomaly_of(te).astype(np.int64))
        assert c.y_train.dtype == np.int64 and c.c_train.dtype == np.int64
        assert int(c.y_train.sum()) == round_half_up(contamination * c.n_train)
        assert c.y_test.min() == 0 and c.y_test.max() == 1, "local test lacks a label"


@pytest.mark.parametrize("scheme", ["iid", "dirichlet", "dominant", "one-class"])
def test_vector_federation_bookkeeping(scheme: str) -> None:
    cont = 0.1
    fed = build(data=VEC, partition={"scheme": scheme, "clients": 4, "contamination": cont})
    check_bookkeeping(fed, lambda ids: ids // SYNTH_PER_CLASS >= 3, cont)
    for c in fed.clients:
        np.testing.assert_array_equal(c.c_train, ids_of(c.x_train) // SYNTH_PER_CLASS)
    # stratified 30% hold-out: 24 of each class's 80 samples
    assert fed.notes["n_test_normal"] == 3 * 24 and fed.notes["n_test_anomaly"] == 2 * 24
    assert fed.normal_classes == [0, 1, 2] and fed.anomaly_classes == [3, 4]
    json.dumps(fed.notes)  # plain values only


def test_one_class_local_tests_follow_training_classes() -> None:
    fed = build(data=VEC, partition={"scheme": "one-class", "clients": 3})
    for k, c in enumerate(fed.clients):
        normals = ids_of(c.x_test)[c.y_test == 0]
        assert set((normals // SYNTH_PER_CLASS).tolist()) == {k}
        assert set(c.c_train.tolist()) == {k}


def test_shared_local_tests_give_every_client_the_pooled_test_set() -> None:
    own = build(data=VEC, partition={"scheme": "dominant", "clients": 3})
    fed = build(data=VEC, partition={"scheme": "dominant", "clients": 3, "local_test": "shared"})
    pooled = np.sort(ids_of(own.x_test))
    for c in fed.clients:
        np.testing.assert_array_equal(np.sort(ids_of(c.x_test)), pooled)
        assert int(c.y_test.sum()) == int(own.y_test.sum())
    assert fed.notes["pooled"] == "client-mean" and fed.notes["local_test"] == "shared"
    assert "pooled" not in own.notes
    # training data are untouched by the choice
    for a, b in zip(own.clients, fed.clients, strict=True):
        np.testing.assert_array_equal(ids_of(a.x_train), ids_of(b.x_train))


def test_same_seed_same_federation() -> None:
    kw: dict[str, Any] = {"data": VEC, "partition": {"scheme": "dirichlet", "clients": 4,
                                                    "contamination": 0.05}}  # fmt: skip
    a, b, c = build(3, **kw), build(3, **kw), build(4, **kw)
    for x, y in zip(a.clients, b.clients, strict=True):
        for field in ("x_train", "y_train", "c_train", "x_test", "y_test"):
            np.testing.assert_array_equal(getattr(x, field), getattr(y, field))
    assert a.notes == b.notes
    assert any(
        not np.array_equal(x.x_train, y.x_train) for x, y in zip(a.clients, c.clients, strict=True)
    )


def test_caps_keep_ratio_and_sizes() -> None:
    data = {**VEC, "max_test": 30, "max_train_per_client": 10}
    fed = build(data=data, partition={"clients": 4, "contamination": 0.2})
    assert len(fed.y_test) == 30
    assert int(fed.y_test.sum()) == round_half_up(30 * 48 / 120)
    assert [c.n_train for c in fed.clients] == [10] * 4
    assert [int(c.y_train.sum()) for c in fed.clients] == [2] * 4
    check_bookkeeping(fed, lambda ids: ids // SYNTH_PER_CLASS >= 3, 0.2)


def test_server_normal_is_held_out() -> None:
    fed = build(data={**VEC, "server_normal": 20}, partition={"clients": 3})
    assert fed.server_normal is not None and fed.server_normal.shape == (20, 4)
    assert (ids_of(fed.server_normal) // SYNTH_PER_CLASS < 3).all()
    check_bookkeeping(fed, lambda ids: ids // SYNTH_PER_CLASS >= 3)
    assert fed.notes["server_normal"] == 20


def test_plan_ids_are_consistent() -> None:
    plan = plan_federation(parse_config(make_config(data=VEC, partition={"clients": 3})))
    train = np.concatenate(plan.train_ids)
    test = np.concatenate(plan.test_ids)
    assert not set(train.tolist()) & set(test.tolist())
    assert len(np.unique(test)) == len(test) == plan.notes["n_test"]


# --------------------------------------------------------------------------- images


def image_anomaly(normal: list[int]) -> Any:
    def anomaly_of(ids: np.ndarray) -> np.ndarray:
        local = ids % 5000
        train_part = local < 1000
        cls = np.where(train_part, local // 50, (local - 1000) // 20)
        return (ids >= 5000) | ~np.isin(cls, normal)

    return anomaly_of


def test_official_test_split_is_used() -> None:
    data = {"name": "synth_img", "normal": [0, 1], "anomaly": [2]}
    fed = build(data=data, partition={"clients": 3, "contamination": 0.05})
    assert fed.kind == "image" and fed.feature_shape == (1, 6, 6)
    assert (ids_of(fed.x_test) >= 1000).all(), "test samples come from the official split"
    assert (ids_of(np.concatenate([c.x_train for c in fed.clients])) < 1000).all()
    assert len(fed.y_test) == 3 * 20 and int(fed.y_test.sum()) == 20
    assert fed.notes["test_split"] == {"synth_img": "official"}
    assert fed.x_test.min() >= 0.0 and fed.x_test.max() <= 1.0  # images not standardized
    check_bookkeeping(fed, image_anomaly([0, 1]), 0.05)


def test_anomaly_source_gives_all_anomalies() -> None:
    data = {"name": "synth_img", "normal": [0, 1, 2, 3, 4], "anomaly": [],
            "anomaly_source": "synth_img_b"}  # fmt: skip
    fed = build(data=data, partition={"clients": 4, "contamination": 0.02})
    assert (ids_of(fed.x_test)[fed.y_test == 1] >= 5000).all()
    assert int(fed.y_test.sum()) == 100 and int((fed.y_test == 0).sum()) == 100
    assert fed.anomaly_classes == [5, 6, 7, 8, 9]
    assert fed.class_names[5] == "synth_img_b:i0"
    assert fed.notes["anomaly_source"] == "synth_img_b"
    for c in fed.clients:
        assert (c.c_train[c.y_train == 1] >= 5).all()
    check_bookkeeping(fed, image_anomaly([0, 1, 2, 3, 4]), 0.02)


def test_anomaly_source_shape_mismatch() -> None:
    data = {"name": "synth_img", "normal": [0], "anomaly": [], "anomaly_source": "synth_img_big"}
    with pytest.raises(DataError) as err:
        build(data=data)
    msg = str(err.value)
    assert "(1, 8, 8)" in msg and "(1, 6, 6)" in msg and "\n" not in msg


# --------------------------------------------------------------------------- by-source


def test_by_source_clients_hold_one_source() -> None:
    data = {**VEC, "normal": [0, 1], "anomaly": [4], "sources": ["synth_vec_b"]}
    fed = build(data=data, partition={"scheme": "by-source", "clients": 4, "contamination": 0.1})
    assert [c.source for c in fed.clients] == ["synth_vec", "synth_vec_b"] * 2
    for c in fed.clients:
        normal_train = ids_of(c.x_train)[c.y_train == 0]
        normal_test = ids_of(c.x_test)[c.y_test == 0]
        from_b = c.source == "synth_vec_b"
        assert ((normal_train >= 10_000) == from_b).all()
        assert ((normal_test >= 10_000) == from_b).all(), "local test normals from own source"
    assert fed.normal_classes == [0, 1, 5, 6] and fed.anomaly_classes == [4, 9]
    check_bookkeeping(fed, lambda ids: (ids % 10_000) // SYNTH_PER_CLASS == 4, 0.1)


def test_by_source_local_tests_hold_anomalies_of_own_source() -> None:
    # both sources have anomalies (class 4); a client of source A must never be tested on
    # source B's anomalies, which a domain shift would make trivially easy
    data = {**VEC, "normal": [0, 1], "anomaly": [3, 4], "sources": ["synth_vec_b"]}
    fed = build(data=data, partition={"scheme": "by-source", "clients": 5})
    per_source = {"synth_vec": 0, "synth_vec_b": 0}
    for c in fed.clients:
        anomalies = ids_of(c.x_test)[c.y_test == 1]
        from_b = c.source == "synth_vec_b"
        assert len(anomalies) > 0
        assert ((anomalies >= 10_000) == from_b).all(), "a foreign source's anomaly"
        per_source[c.source] += len(anomalies)
    # every held-out anomaly is still dealt (exact union), evenly within a source
    n_a = fed.notes["n_test_anomaly"]
    assert sum(per_source.values()) == n_a
    sizes = [len(c.y_test) - int((c.y_test == 0).sum()) for c in fed.clients[0::2]]
    assert max(sizes) - min(sizes) <= 1
    check_bookkeeping(fed, lambda ids: (ids % 10_000) // SYNTH_PER_CLASS >= 3)


def test_by_source_anomaly_source_is_dealt_to_all() -> None:
    # an anomaly source belongs to no client's source: its anomalies go to every client
    data = {**VEC, "normal": [0], "anomaly": [4], "sources": ["synth_vec_b"],
            "anomaly_source": "synth_vec_c"}  # fmt: skip
    fed = build(data=data, partition={"scheme": "by-source", "clients": 4})
    for c in fed.clients:
        anomalies = ids_of(c.x_test)[c.y_test == 1]
        own = anomalies[anomalies < 30_000]
        assert ((own >= 10_000) == (c.source == "synth_vec_b")).all()
        assert (anomalies >= 30_000).any(), "every client gets anomaly-source anomalies"


def test_sources_with_other_schemes_are_pooled() -> None:
    data = {**VEC, "sources": ["synth_vec", "synth_vec_b"]}
    fed = build(data=data, partition={"scheme": "iid", "clients": 3})
    assert {c.source for c in fed.clients} == {"mixed"}


# --------------------------------------------------------------------------- fixed / scaling


def test_fixed_split_sets_and_standardization() -> None:
    raw = build(data={"name": "synth_fixed", "standardize": False}, partition={"clients": 3})
    std = build(data={"name": "synth_fixed"}, partition={"clients": 3})
    assert raw.normal_classes == [0] and raw.anomaly_classes == [1]
    assert std.notes["standardized"] is True and raw.notes["standardized"] is False
    mean = np.asarray(std.notes["standardize_mean"])
    scale = np.asarray(std.notes["standardize_std"])
    pooled = np.concatenate([c.x_train for c in std.clients])
    np.testing.assert_allclose(pooled.mean(axis=0), 0.0, atol=1e-4)
    np.testing.assert_allclose(pooled.std(axis=0), 1.0, atol=1e-4)
    for a, b in zip(raw.clients, std.clients, strict=True):
        np.testing.assert_allclose((a.x_test - mean) / scale, b.x_test, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose((a.x_train - mean) / scale, b.x_train, rtol=1e-5, atol=1e-5)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        arrays(np.float64, st.tuples(st.integers(0, 20), st.just(3)),
               elements=st.floats(-1e3, 1e3)),
        min_size=1, max_size=5,
    ).filter(lambda bs: sum(len(b) for b in bs) > 0)
)  # fmt: skip
def test_pooled_mean_std_equals_concatenation(blocks: list[np.ndarray]) -> None:
    mean, std = pooled_mean_std(blocks)
    allx = np.concatenate(blocks)
    np.testing.assert_allclose(mean, allx.mean(axis=0), rtol=1e-9, atol=1e-9)
    expected = allx.std(axis=0)
    expected = np.where(expected <= 1e-12 * np.maximum(1, np.abs(allx.mean(axis=0))), 1, expected)
    np.testing.assert_allclose(std, expected, rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("data", "partition", "kind", "needle"),
    [
        ({"name": "synth_vec", "anomaly": [4]}, {}, ConfigError, "data.normal is missing"),
        ({"name": "synth_vec", "normal": [0]}, {}, ConfigError, "data.anomaly is missing"),
        ({"name": "synth_vec", "normal": [0, 7], "anomaly": [4]}, {}, DataError,
         "data.normal has class 7, but 'synth_vec' has classes 0..4 (0=c0"),
        ({"name": "synth_fixed", "normal": [0]}, {}, ConfigError,
         "data.normal must be omitted for 'synth_fixed'"),
        ({**VEC}, {"clients": 500}, DataError, "partition.clients=500 needs at least 1000"),
        ({**VEC, "normal": [0, 1, 2, 3], "anomaly": [4]}, {"contamination": 0.5}, DataError,
         "needs 114 training anomalies but only 56 are available"),
        ({**VEC, "max_train_per_client": 1}, {}, ConfigError, "data.max_train_per_client=1"),
        ({**VEC, "server_normal": 160}, {"clients": 5}, DataError, "data.server_normal=160"),
        ({**VEC, "anomaly_source": "synth_vec"}, {}, ConfigError, "also a normal source"),
        ({**VEC, "sources": ["synth_vec_b@"]}, {}, ConfigError, "not 'name' or 'name@path'"),
        ({**VEC}, {"scheme": "by-source"}, ConfigError, "needs data.sources to list"),
        ({**VEC, "sources": ["synth_vec_wide"]}, {"scheme": "by-source"}, DataError,
         "has feature shape (7,)"),
        ({**VEC, "sources": ["synth_fixed"]}, {}, ConfigError, "data.normal must be omitted"),
        ({**VEC, "anomaly_source": "synth_img"}, {}, DataError, "holds image data"),
        ({"name": "nope", "normal": [0], "anomaly": [1]}, {}, DataError, "unknown data set"),
        ({**VEC, "anomaly": []}, {"scheme": "one-vs-rest", "local_test": "shared"}, ConfigError,
         "partition.local_test = 'shared' does not apply"),
        ({"name": "digits", "normal": [0], "anomaly": [1], "size": 9}, {"clients": 200},
         DataError, "partition.clients=200"),
    ],
)  # fmt: skip
def test_impossible_requests_are_one_line(
    data: dict[str, Any], partition: dict[str, Any], kind: type[FedadError], needle: str
) -> None:
    with pytest.raises(kind) as err:
        build(data=data, partition=partition)
    msg = str(err.value)
    assert needle in msg, msg
    assert "\n" not in msg


# --------------------------------------------------------------------------- real data


def test_digits_federation_upsampled() -> None:
    data = {"name": "digits", "size": 28, "normal": [0, 1, 2], "anomaly": [7], "max_test": 100}
    fed = build(data=data, partition={"scheme": "dominant", "clients": 6, "contamination": 0.05})
    assert fed.feature_shape == (1, 28, 28)
    assert all(c.x_train.shape[1:] == (1, 28, 28) for c in fed.clients)
    assert len(fed.y_test) == 100
    assert fed.notes["test_split"] == {"digits": "stratified 0.3"}


@pytest.mark.skipif(
    not Path(FASHION_MNIST_DIR, "train-images-idx3-ubyte.gz").exists(),
    reason="Debian package dataset-fashion-mnist is not installed",
)
def test_real_fashion_mnist_federation() -> None:
    data = {"name": "fashion_mnist", "normal": [0, 1, 2, 3, 4], "anomaly": [5, 6, 7, 8, 9],
            "max_train_per_client": 500, "max_test": 2000}  # fmt: skip
    fed = build(data=data, partition={"scheme": "dirichlet", "clients": 10,
                                      "contamination": 0.01})  # fmt: skip
    assert [c.n_train for c in fed.clients] == [500] * 10
    assert [int(c.y_train.sum()) for c in fed.clients] == [5] * 10
    assert len(fed.y_test) == 2000 and int(fed.y_test.sum()) == 1000
    assert fed.notes["test_split"] == {"fashion_mnist": "official"}
    for c in fed.clients:
        assert c.y_test.min() == 0 and c.y_test.max() == 1
        assert set(c.c_train[c.y_train == 1].tolist()) <= {5, 6, 7, 8, 9}


def test_sources_with_paths_from_idx_files(tmp_path: Path) -> None:
    write_mnist_like(tmp_path / "m", seed=1)
    write_mnist_like(tmp_path / "k", seed=2)
    data = {"name": "mnist", "path": str(tmp_path / "m"), "normal": [0, 1], "anomaly": [9],
            "sources": [f"kmnist@{tmp_path / 'k'}"]}  # fmt: skip
    fed = build(data=data, partition={"scheme": "by-source", "clients": 2})
    assert [c.source for c in fed.clients] == ["mnist", "kmnist"]
    assert fed.class_names[10] == "kmnist:o"
    assert set(fed.clients[1].c_train.tolist()) <= {10, 11}
    data["sources"] = ["kmnist"]
    with pytest.raises(DataError) as err:
        build(data=data, partition={"scheme": "by-source", "clients": 2})
    msg = str(err.value)
    assert msg.startswith("data.sources entry 'kmnist'") and "'kmnist@PATH'" in msg


def test_negative_seed_is_deterministic() -> None:
    a = build(-5, data=VEC, partition={"clients": 3})
    b = build(-5, data=VEC, partition={"clients": 3})
    c = build(5, data=VEC, partition={"clients": 3})
    np.testing.assert_array_equal(a.clients[0].x_train, b.clients[0].x_train)
    assert not np.array_equal(a.clients[0].x_train, c.clients[0].x_train)


def test_pooled_test_set_does_not_depend_on_partition_settings() -> None:
    a = build(data=VEC, partition={"scheme": "iid", "clients": 3})
    b = build(data=VEC, partition={"scheme": "dirichlet", "clients": 5, "contamination": 0.1})
    np.testing.assert_array_equal(np.sort(ids_of(a.x_test)), np.sort(ids_of(b.x_test)))


@settings(max_examples=20, deadline=None)
@given(st.floats(0.0, 0.3), st.integers(1, 6), st.integers(5, 60), st.integers(0, 1000))
def test_contamination_is_exact_per_client(
    contamination: float, clients: int, cap: int, seed: int
) -> None:
    fed = build(
        seed,
        data={**VEC, "max_train_per_client": cap},
        partition={"scheme": "iid", "clients": clients, "contamination": contamination},
    )
    for c in fed.clients:
        expected = round_half_up(contamination * c.n_train)
        assert int(c.y_train.sum()) == expected
        anomalous = ids_of(c.x_train) // SYNTH_PER_CLASS >= 3
        np.testing.assert_array_equal(c.y_train, anomalous.astype(np.int64))
    assert fed.notes["contamination_per_client"] == [int(c.y_train.sum()) for c in fed.clients]


def test_test_anomaly_fraction_sets_the_ratio() -> None:
    from fedad.config import parse_config

    for fraction in (0.1, 0.5):
        cfg = parse_config(
            {
                "data": {
                    "name": "digits",
                    "normal": [0, 1, 2, 3, 4],
                    "anomaly": [5, 6, 7, 8, 9],
                    "test_anomaly_fraction": fraction,
                },
                "partition": {"clients": 3},
                "methods": [{"name": "fedavg"}],
            }
        )
        y = build_federation(cfg).y_test
        assert y.mean() == pytest.approx(fraction, abs=0.01)


# --------------------------------------------------------------------------- masks, graphs


def test_pixel_masks_follow_their_images() -> None:
    data = {"name": "synth_mask", "normal": [0], "anomaly": [2, 3], "sources": ["synth_mask_b"]}
    fed = build(data=data, partition={"clients": 3, "contamination": 0.1})
    assert fed.has_masks and fed.notes["masks"] is True
    for c in fed.clients:
        assert c.mask_test is not None and c.mask_train is not None
        assert c.mask_test.dtype == np.uint8 and c.mask_test.shape == (len(c.y_test), 8, 8)
        assert isinstance(c.x_test, np.ndarray)
        # defect pixels are exactly the stamped ones; normals have empty masks
        for x, m, y in zip(c.x_test, c.mask_test, c.y_test, strict=True):
            assert (m.sum() > 0) == (y == 1)
            assert np.all(x[0][m == 1] == 1.0)
        assert np.all(c.mask_train[c.y_train == 0] == 0)
        assert c.mask_train[c.y_train == 1].reshape(int(c.y_train.sum()), -1).any(axis=1).all()


def test_masks_are_dropped_when_a_source_has_none() -> None:
    data = {"name": "synth_mask", "normal": [0], "anomaly": [2], "sources": ["synth_img_big"]}
    fed = build(data=data, partition={"clients": 2})
    assert not fed.has_masks and all(c.mask_test is None for c in fed.clients)
    assert "masks" not in fed.notes
    assert fed.notes["masks_dropped"] == "pixel masks dropped: synth_img_big has none"


GRAPHS = {"name": "synth_graph", "normal": [0], "anomaly": [3, 4]}


def graph_ids(x: GraphSet) -> np.ndarray:
    return np.array([int(x.graph(i)[0][0, 0]) for i in range(len(x))], dtype=np.int64)


def test_graph_federation_bookkeeping() -> None:
    fed = build(data=GRAPHS, partition={"clients": 3, "contamination": 0.1})
    assert fed.kind == "graph" and fed.feature_shape == (3,)
    train = [graph_ids(c.x_train) for c in fed.clients]  # type: ignore[arg-type]
    test = [graph_ids(c.x_test) for c in fed.clients]  # type: ignore[arg-type]
    everything = np.concatenate(train + test)
    assert len(np.unique(everything)) == len(everything), "a graph is used twice"
    for c, tr, te in zip(fed.clients, train, test, strict=True):
        assert isinstance(c.x_train, GraphSet) and c.mask_test is None
        np.testing.assert_array_equal(c.y_train, (tr // 40 >= 3).astype(np.int64))
        np.testing.assert_array_equal(c.y_test, (te // 40 >= 3).astype(np.int64))
        assert c.y_test.min() == 0 and c.y_test.max() == 1
    assert fed.notes["standardized"] is False  # graphs are never standardized
    again = build(data=GRAPHS, partition={"clients": 3, "contamination": 0.1})
    assert all(a.x_train == b.x_train for a, b in zip(fed.clients, again.clients, strict=True))


def test_graph_sources_may_differ_in_width_by_source() -> None:
    data = {**GRAPHS, "sources": ["synth_graph_b"]}
    fed = build(data=data, partition={"scheme": "by-source", "clients": 4})
    for c in fed.clients:
        assert isinstance(c.x_train, GraphSet) and isinstance(c.x_test, GraphSet)
        width = 5 if c.source == "synth_graph_b" else 3
        assert c.x_train.shape == (c.n_train, width)
        anomalies = graph_ids(c.x_test)[c.y_test == 1]
        assert ((anomalies >= 10_000) == (c.source == "synth_graph_b")).all()
    assert fed.x_test.shape[1] == -1  # the pooled test set mixes widths


def test_graph_data_refuses_what_needs_dense_rows() -> None:
    with pytest.raises(ConfigError) as err:
        build(data=GRAPHS, partition={"clients": 3},
              attack={"kind": "gaussian-data", "clients": 1, "fraction": 0.5})  # fmt: skip
    assert "does not apply to graph data" in str(err.value) and "\n" not in str(err.value)


# --------------------------------------------------------------------------- one-vs-rest

OVR = {"name": "synth_vec", "normal": [0, 1, 2, 3], "standardize": False}


def test_one_vs_rest_local_tests_are_own_class_against_every_other() -> None:
    fed = build(data=OVR, partition={"scheme": "one-vs-rest", "clients": 6,
                                     "contamination": 0.1})  # fmt: skip
    assert fed.notes["pooled"] == "client-mean" and fed.anomaly_classes == [0, 1, 2, 3]
    cls = lambda ids: ids // SYNTH_PER_CLASS  # noqa: E731
    all_test: set[int] = set()
    all_train = np.concatenate([ids_of(c.x_train)[c.y_train == 0] for c in fed.clients])
    for k, c in enumerate(fed.clients):
        own = k % 4
        train, test = ids_of(c.x_train), ids_of(c.x_test)
        # training: own class, contamination from other classes only
        assert set(cls(train[c.y_train == 0])) == {own}
        assert own not in set(cls(train[c.y_train == 1]))
        assert int(c.y_train.sum()) == round_half_up(0.1 * c.n_train)
        # test: own class normal, every other listed class anomalous, nothing else
        np.testing.assert_array_equal(c.y_test, (cls(test) != own).astype(np.int64))
        assert set(cls(test[c.y_test == 1])) == {0, 1, 2, 3} - {own}
        all_test |= set(test.tolist())
    # test samples were held out before partitioning: never in training data
    assert not all_test & set(all_train.tolist())
    # every held-out sample of the other classes is an anomaly for each client
    for k, c in enumerate(fed.clients):
        others = {i for i in all_test if i // SYNTH_PER_CLASS != k % 4}
        assert set(ids_of(c.x_test)[c.y_test == 1].tolist()) == others
    # a class shared by two clients (0 and 4, 1 and 5) splits its test normals between them
    for a, b in ((0, 4), (1, 5)):
        na = set(ids_of(fed.clients[a].x_test)[fed.clients[a].y_test == 0].tolist())
        nb = set(ids_of(fed.clients[b].x_test)[fed.clients[b].y_test == 0].tolist())
        assert na and nb and not na & nb and abs(len(na) - len(nb)) <= 1


@pytest.mark.parametrize(
    ("data", "attack", "match"),
    [
        ({**OVR, "anomaly": [4]}, {}, "data.anomaly must be omitted"),
        ({**OVR, "normal": [0]}, {}, "at least two classes"),
        ({"name": "synth_fixed"}, {}, "fixed normal/anomaly definition"),
        (OVR, {"kind": "contamination", "clients": 1}, "not supported"),
    ],
)
def test_one_vs_rest_errors(data: dict[str, Any], attack: dict[str, Any], match: str) -> None:
    with pytest.raises(FedadError, match=match) as err:
        build(data=data, partition={"scheme": "one-vs-rest", "clients": 2}, attack=attack)
    assert "\n" not in str(err.value)


# --------------------------------------------------------------------------- the layer


@dataclass(frozen=True)
class PlainData:
    """A ``[data]`` section that is no pydantic model: the planner needs only the keys."""

    name: str = "synth_vec"
    path: str | None = None
    normal: list[int | str] | None = default(default_factory=lambda: [0, 1, 2])
    anomaly: list[int | str] | None = default(default_factory=lambda: [3, 4])
    anomaly_source: str = ""
    anomaly_source_path: str | None = None
    sources: list[str] = default(default_factory=list)
    size: int | None = None
    max_train_per_client: int | None = None
    max_test: int | None = None
    test_anomaly_fraction: float | None = None
    test_fraction: float = 0.3
    server_normal: int = 0
    standardize: bool = True
    missing: MissingPolicy = "error"
    client_column: str | None = None
    part: Literal["all", "dev", "eval"] = "all"

    def loader_options(self) -> dict[str, Any]:
        return {}


@pytest.mark.parametrize("scheme", ["dirichlet", "one-vs-rest"])
def test_planner_reads_only_its_sections(scheme: str) -> None:
    """The data layer's planner takes the two sections and the seed; with the same values it
    plans what the config-level builder plans (no attack configured)."""
    part = {"scheme": scheme, "clients": 5, "contamination": 0.1}
    ovr = scheme == "one-vs-rest"
    data = PlainData(normal=[0, 1, 2, 3, 4], anomaly=None) if ovr else PlainData()
    raw = make_config(data={k: v for k, v in vars(data).items() if v is not None},
                      partition=part, seed=3)  # fmt: skip
    cfg = parse_config(raw)
    spec = PartitionSpec(
        **{**cfg.partition.model_dump(), "max_clients": 100, "clients_given": True}
    )
    ours = plan_sections(data, spec, 3)
    theirs = plan_federation(cfg)
    for a, b in zip(ours.train_ids + ours.test_ids, theirs.train_ids + theirs.test_ids,
                    strict=True):  # fmt: skip
        np.testing.assert_array_equal(a, b)
    assert ours.client_sources == theirs.client_sources
    assert {k: v for k, v in theirs.notes.items() if k not in ("attack", "attacked_clients")} == (
        ours.notes
    )


def test_data_layer_imports_neither_config_nor_attacks() -> None:
    code = (
        "import sys, fedad.data, fedad.data.federation\n"
        "names = ('fedad.config', 'fedad.attacks', 'fedad.federation')\n"
        "bad = [m for m in names if m in sys.modules]\n"
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
