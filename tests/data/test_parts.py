"""Development and evaluation halves never share a sample, for every built-in data set that
loads here; the split is fixed (not by seed or order) and keeps every per-sample field in
step."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pytest

from fedad.config import parse_config
from fedad.core.errors import FedadError
from fedad.core.types import Dataset, Features, GraphSet
from fedad.data.parts import halves, sample_bytes, take_part
from fedad.data.registry import dataset_info, list_datasets, load_dataset


def contents(x: Features) -> set[bytes]:
    return {hashlib.sha256(sample_bytes(x, i)).digest() for i in range(len(x))}


def every_sample(ds: Dataset) -> set[bytes]:
    out = contents(ds.x)
    if ds.x_test is not None:
        out |= contents(ds.x_test)
    return out


BUILT_IN = (
    "breast_cancer", "digits", "fashion_mnist", "graphs_grids", "graphs_molecules",
    "graphs_proteins", "graphs_social", "iris", "lfw_subset", "mutag_perturbed",
    "mutag_structures", "odds_breastw", "odds_ionosphere", "odds_satellite", "odds_shuttle",
    "textures", "wine",
)  # fmt: skip
"""The data sets that need no path of the user's (the others are split by content alone,
tested below on data of the test's own)."""


def test_every_other_data_set_needs_a_users_path() -> None:
    for name, _ in list_datasets():
        if name not in BUILT_IN and dataset_info(name).loader.__module__.startswith("fedad."):
            with pytest.raises(FedadError):
                load_dataset(name, part="dev")
            assert dataset_info(name).parts == "content"


@pytest.mark.parametrize("name", BUILT_IN)
def test_dev_and_eval_share_no_sample(name: str) -> None:
    try:
        load_dataset(name)
    except FedadError as err:  # its Debian package is missing on this machine
        pytest.skip(str(err))
    dev = load_dataset(name, part="dev", seed=1)
    ev = load_dataset(name, part="eval", seed=1)
    assert len(dev.x) > 0 and len(ev.x) > 0
    assert every_sample(dev).isdisjoint(every_sample(ev))
    assert len(dev.y) == len(dev.x) and len(ev.y) == len(ev.x)
    if dataset_info(name).parts == "content":  # the halves cover the whole set
        whole = load_dataset(name)
        assert len(dev.x) + len(ev.x) == len(whole.x)


def test_the_split_is_by_content_not_by_order() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 5)).astype(np.float32)
    h = halves(x)
    perm = rng.permutation(400)
    assert np.array_equal(halves(x[perm]), h[perm])
    assert 150 < int(h.sum()) < 250  # about half
    dup = np.concatenate([x, x[:50]])
    assert np.array_equal(halves(dup)[400:], h[:50])  # copies fall in the same half


def test_take_part_keeps_fields_in_step() -> None:
    rng = np.random.default_rng(1)
    x = rng.random((60, 1, 4, 4)).astype(np.float32)
    ds = Dataset(
        "toy",
        x,
        np.arange(60) % 3,
        "image",
        ("a", "b", "c"),
        x_test=x[:20] + 2,
        y_test=np.arange(20) % 3,
        mask=(x[:, 0] > 0.5).astype(np.uint8),
        mask_test=np.zeros((20, 4, 4), np.uint8),
        group=np.array([f"g{i}" for i in range(60)]),
    )
    dev, ev = take_part(ds, "dev"), take_part(ds, "eval")
    assert take_part(ds, "all") is ds
    for part in (dev, ev):
        rows = {part.x[j].tobytes() for j in range(len(part.x))}
        keep = [i for i in range(60) if x[i].tobytes() in rows]
        assert part.y.tolist() == (np.arange(60) % 3)[keep].tolist()
        assert part.group is not None and part.group.tolist() == [f"g{i}" for i in keep]
        assert part.mask is not None and np.array_equal(part.mask, ds.mask[keep])  # type: ignore[index]
        assert part.x_test is not None and len(part.x_test) == len(part.y_test)  # type: ignore[arg-type]
    assert len(dev.x) + len(ev.x) == 60


def test_graphs_split_by_their_content() -> None:
    rng = np.random.default_rng(2)
    edges = np.array([[0, 1], [1, 2]])
    pairs = [(rng.random((4, 2)).astype(np.float32), edges) for _ in range(40)]
    g = GraphSet.from_graphs(pairs)
    ds = Dataset("g", g, np.zeros(40, np.int64), "graph", ("n",))
    dev, ev = take_part(ds, "dev"), take_part(ds, "eval")
    assert len(dev.x) + len(ev.x) == 40
    assert contents(dev.x).isdisjoint(contents(ev.x))


def test_textures_eval_has_other_types_and_draws_from_the_seed() -> None:
    dev = load_dataset("textures", size=32, part="dev", seed=0)
    ev = load_dataset("textures", size=32, part="eval", seed=0)
    assert set(dev.classes).isdisjoint(ev.classes)
    again = load_dataset("textures", size=32, part="eval", seed=1)
    assert not np.array_equal(ev.x, again.x)  # each seed draws other images
    old = load_dataset("textures", size=32)
    assert np.array_equal(old.x, load_dataset("textures", size=32).x)  # "all": as always


def test_the_config_key_reaches_the_federation() -> None:
    from fedad.federation import build_federation

    for part, bit in (("dev", 0), ("eval", 1)):
        raw: dict[str, Any] = {
            "data": {"name": "breast_cancer", "part": part, "standardize": False},
            "partition": {"scheme": "iid", "clients": 2},
            "methods": [{"name": "onlad"}],
        }
        fed = build_federation(parse_config(raw))
        rows = np.concatenate([c.x_train for c in fed.clients] + [fed.x_test])
        assert set(halves(rows).tolist()) == {bit}
