"""The sample containers: graph sets and samples with masks take, join and save losslessly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedad.core.errors import DataError
from fedad.core.types import GraphSet, Samples, concat, take

Pairs = list[tuple[np.ndarray, np.ndarray]]


def random_graphs(rng: np.random.Generator, n: int, width: int = 3) -> Pairs:
    out = []
    for _ in range(n):
        nodes = int(rng.integers(0, 6))
        edges = int(rng.integers(0, 8)) if nodes else 0
        e = rng.integers(0, max(nodes, 1), size=(2, edges))
        out.append((rng.normal(size=(nodes, width)).astype(np.float32), e))
    return out


def same_graphs(a: GraphSet, pairs: Pairs) -> None:
    assert len(a) == len(pairs)
    for i, (x, e) in enumerate(pairs):
        gx, ge = a.graph(i)
        np.testing.assert_array_equal(gx, x)
        np.testing.assert_array_equal(ge, e)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31), st.integers(0, 12))
def test_graph_set_take_concat_and_save_are_lossless(seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    pairs = random_graphs(rng, n)
    g = GraphSet.from_graphs(pairs)
    same_graphs(g, pairs)
    ids = rng.integers(0, max(n, 1), size=int(rng.integers(0, 10))) if n else np.zeros(0, int)
    same_graphs(g.take(ids), [pairs[int(i)] for i in ids])
    same_graphs(concat([g, g.take(ids)]), pairs + [pairs[int(i)] for i in ids])
    assert GraphSet.from_arrays(g.arrays("p/"), "p/") == g


def test_graph_widths_may_differ_and_shape_says_so() -> None:
    rng = np.random.default_rng(0)
    a = GraphSet.from_graphs(random_graphs(rng, 3, width=3))
    b = GraphSet.from_graphs(random_graphs(rng, 2, width=5))
    assert a.shape == (3, 3) and b.shape == (2, 5)
    both = concat([a, b])
    assert both.shape == (5, -1)
    assert both.take([3]).shape == (1, 5) and both[0:3] == a


def test_samples_save_and_load_through_npz(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    x = rng.uniform(size=(6, 1, 4, 4)).astype(np.float32)
    mask = (rng.uniform(size=(6, 4, 4)) > 0.7).astype(np.uint8)
    graphs = GraphSet.from_graphs(random_graphs(rng, 4))
    np.savez(tmp_path / "s.npz", **Samples(x, mask).arrays("a/"), **Samples(graphs).arrays("b/"))
    with np.load(tmp_path / "s.npz", allow_pickle=False) as z:
        images = Samples.from_arrays(z, "a/")
        got = Samples.from_arrays(z, "b/")
    np.testing.assert_array_equal(images.x, x)
    assert images.mask is not None
    np.testing.assert_array_equal(images.mask, mask)
    assert got.x == graphs and got.mask is None
    part = Samples(x, mask).take([5, 0])
    assert part.mask is not None
    np.testing.assert_array_equal(part.mask, mask[[5, 0]])
    np.testing.assert_array_equal(take(x, np.array([2])), x[[2]])


def test_corrupt_or_mismatched_containers_are_one_line_errors() -> None:
    g = GraphSet.from_graphs([(np.zeros((2, 3), np.float32), np.array([[0], [1]]))])
    bad_edge = g.arrays()
    bad_edge["graph_edge_index"] = np.array([[0], [7]])
    with pytest.raises(DataError, match="edge to a node it does not have"):
        GraphSet.from_arrays(bad_edge)
    short = g.arrays()
    short["graph_x"] = np.zeros(5, np.float32)
    with pytest.raises(DataError, match="do not fit together"):
        GraphSet.from_arrays(short)
    with pytest.raises(DataError, match="images need"):
        Samples(np.zeros((2, 1, 4, 4), np.float32), np.zeros((2, 5, 5), np.uint8))
    with pytest.raises(DataError, match="with images"):
        Samples(g, np.zeros((1, 2, 2), np.uint8))
    with pytest.raises(DataError, match="cannot join"):
        concat([g, np.zeros((1, 3), np.float32)])
    with pytest.raises(IndexError):
        g.take([1])


def test_graph_set_to_torch_geometric_and_back() -> None:
    pytest.importorskip("torch_geometric")
    rng = np.random.default_rng(2)
    pairs = [p for p in random_graphs(rng, 5) if len(p[0])]
    g = GraphSet.from_graphs(pairs)
    data = g.to_pyg()
    assert GraphSet.from_pyg(data) == g
    batch = g.batch([0, len(g) - 1])
    assert batch.num_graphs == 2
    assert int(batch.x.shape[0]) == len(pairs[0][0]) + len(pairs[-1][0])
