"""The synthetic graph domains: deterministic, distinct, and their classes really differ."""

from __future__ import annotations

import numpy as np
import pytest

from fedad.config import parse_config
from fedad.core.types import GraphSet
from fedad.data.graph_domains import DOMAINS, make_domain
from fedad.data.registry import load_dataset
from fedad.federation import build_federation

NAMES = sorted(DOMAINS)


def degrees(g: GraphSet) -> np.ndarray:
    """Mean degree and the largest degree of every graph."""
    out = []
    for i in range(len(g)):
        x, e = g.graph(i)
        deg = np.bincount(e[0], minlength=len(x))
        out.append((deg.mean(), deg.max()))
    return np.asarray(out)


def triangles(g: GraphSet) -> np.ndarray:
    """Triangles per node of every graph (trace(A^3) / 6 / n)."""
    out = []
    for i in range(len(g)):
        x, e = g.graph(i)
        a = np.zeros((len(x), len(x)))
        a[e[0], e[1]] = 1
        out.append(np.trace(a @ a @ a) / 6 / len(x))
    return np.asarray(out)


@pytest.mark.parametrize("name", NAMES)
def test_a_domain_is_deterministic_undirected_and_registered(name: str) -> None:
    a, b = make_domain(name, per_class=20), load_dataset(name)
    assert a.x == make_domain(name, per_class=20).x
    assert b.kind == "graph" and len(b.classes) == 4
    assert np.bincount(b.y).tolist() == [300] * 4
    for i in range(0, len(a.x), 7):
        x, e = a.x.graph(i)
        pairs = set(map(tuple, e.T.tolist()))
        assert pairs == {(j, i) for i, j in pairs}  # both directions
        assert all(i != j for i, j in pairs)  # no self-loops
        assert np.all(np.isfinite(x))


def test_domains_differ_in_width_size_and_density() -> None:
    widths = {make_domain(n, 10).x.shape[1] for n in NAMES}
    assert len(widths) == 4
    sizes = {n: make_domain(n, 30).x.n_nodes.mean() for n in NAMES}
    assert sizes["graphs_proteins"] > 1.5 * sizes["graphs_molecules"]
    density = {n: degrees(make_domain(n, 30).x)[:, 0].mean() for n in NAMES}
    assert density["graphs_social"] > 2 * density["graphs_molecules"]


@pytest.mark.parametrize("name", NAMES)
def test_every_anomaly_class_differs_from_class_0_on_a_simple_statistic(name: str) -> None:
    ds = make_domain(name, per_class=60)
    g = ds.x
    stats = {
        "mean degree": degrees(g)[:, 0],
        "max degree": degrees(g)[:, 1],
        "triangles": triangles(g),
        "features": np.asarray([g.graph(i)[0].std(0).sum() for i in range(len(g))]),
    }
    for c in (1, 2, 3):
        # some statistic separates the class means by more than a fifth of a pooled std
        gaps = [
            abs(s[ds.y == c].mean() - s[ds.y == 0].mean()) / (s[ds.y <= c].std() + 1e-9)
            for s in stats.values()
        ]
        assert max(gaps) > 0.2, (name, ds.classes[c], gaps)


def test_node_counts_overlap_between_classes() -> None:
    for name in NAMES:
        ds = make_domain(name, per_class=60)
        n = ds.x.n_nodes
        lo, hi = n[ds.y == 0].min(), n[ds.y == 0].max()
        for c in (1, 2, 3):
            assert np.mean((n[ds.y == c] >= lo) & (n[ds.y == c] <= hi)) > 0.9


def test_the_multi_dataset_setting_builds_one_domain_per_client() -> None:
    cfg = parse_config({
        "seed": 0, "rounds": 1,
        "data": {"name": "graphs_molecules", "sources": NAMES, "normal": [0],
                 "anomaly": [1, 2, 3]},
        "partition": {"scheme": "by-source", "clients": 4},
        "methods": [{"name": "fgad"}],
    })  # fmt: skip
    fed = build_federation(cfg)
    widths = sorted(int(c.x_train.shape[1]) for c in fed.clients)
    assert widths == sorted(make_domain(n, 10).x.shape[1] for n in NAMES)
    for c in fed.clients:
        assert isinstance(c.x_test, GraphSet)
        assert set(np.unique(c.y_test)) == {0, 1}  # held-out normals and its own anomalies
