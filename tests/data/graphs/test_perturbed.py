"""``mutag_perturbed``: MUTAG normal against perturbed held-out MUTAG graphs.

The construction is checked on any one-hot graph set (synthetic molecules, always), the
registered data set on MUTAG itself when the graphkernels sdist is present.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from fedad.config import parse_config
from fedad.core.types import GraphSet
from fedad.data.graph_domains import make_domain
from fedad.data.graphs.perturbed import CLASSES, HELD_OUT, perturb, perturbed_set, split
from fedad.data.registry import load_dataset
from fedad.federation import build_federation
from tests.data.graphs.test_mutag import SDIST_PATH, needs_sdist


def molecules(n: int = 188) -> GraphSet:
    """``n`` normal synthetic molecules (7 one-hot atom types, as MUTAG)."""
    ds = make_domain("graphs_molecules", per_class=n)
    return ds.x[np.flatnonzero(ds.y == 0)]


def key(g: GraphSet, i: int) -> bytes:
    x, e = g.graph(i)
    return x.tobytes() + e.tobytes()


def statistics(g: GraphSet) -> dict[str, np.ndarray]:
    """Per graph: components, largest degree, mean degree, share of the commonest atom type."""
    out: dict[str, list[float]] = {"components": [], "max degree": [], "mean degree": [],
                                   "main atom": []}  # fmt: skip
    for i in range(len(g)):
        x, e = g.graph(i)
        n = len(x)
        a = coo_matrix((np.ones(e.shape[1]), (e[0], e[1])), shape=(n, n))
        deg = np.bincount(e[0], minlength=n)
        out["components"].append(connected_components(a)[0])
        out["max degree"].append(deg.max())
        out["mean degree"].append(deg.mean())
        out["main atom"].append(x.mean(0).max())
    return {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}


def check_classes_differ(g: GraphSet, y: np.ndarray) -> None:
    """Each anomaly class differs from class 0 on the statistic its operator changes."""
    s = statistics(g)
    expected = {1: "components", 2: "mean degree", 3: "main atom"}
    for c, stat in expected.items():
        v = s[stat]
        gap = abs(v[y == c].mean() - v[y == 0].mean()) / (v[(y == 0) | (y == c)].std() + 1e-9)
        assert gap > 0.5, (CLASSES[c], stat, gap)
    # and the other statistics stay: a rewired graph keeps its atoms, a new atom its bonds
    assert s["main atom"][y == 1].mean() == pytest.approx(s["main atom"][y == 0].mean(), abs=0.1)
    assert np.all(s["components"][y == 3] == 1) and np.all(s["components"][y == 2] >= 1)


def test_split_is_a_seeded_partition() -> None:
    normal, held = split(188)
    assert len(held) == HELD_OUT and len(normal) == 188 - HELD_OUT
    assert np.array_equal(np.sort(np.concatenate([normal, held])), np.arange(188))
    again = split(188)
    assert np.array_equal(again[0], normal) and np.array_equal(again[1], held)
    assert not np.array_equal(split(188, seed=1)[1], held)
    with pytest.raises(ValueError):
        split(10, held_out=10)


def test_each_operator_changes_what_it_says() -> None:
    g = molecules(20)
    x, e = g.graph(0)
    rng = np.random.default_rng(0)
    rx, re = perturb(x, e, 1, rng)
    assert np.array_equal(rx, x) and re.shape == e.shape  # as many bonds, moved
    assert set(map(tuple, re.T.tolist())) != set(map(tuple, e.T.tolist()))
    dx, de = perturb(x, e, 2, rng)
    assert np.array_equal(dx, x) and de.shape[1] > e.shape[1]
    assert set(map(tuple, e.T.tolist())) <= set(map(tuple, de.T.tolist()))
    ax, ae = perturb(x, e, 3, rng)
    assert np.array_equal(ae, e) and ax.shape == x.shape and np.all(ax.sum(1) == 1)
    for _, edges in ((rx, re), (dx, de), (ax, ae)):
        pairs = set(map(tuple, edges.T.tolist()))
        assert pairs == {(j, i) for i, j in pairs} and all(i != j for i, j in pairs)
    with pytest.raises(ValueError):
        perturb(x, e, 4, rng)


def test_no_anomaly_is_made_from_or_equal_to_a_normal_graph() -> None:
    base = molecules()
    g, y, origin = perturbed_set(base)
    assert np.bincount(y).tolist() == [141, 47, 47, 47]
    normal, held = split(len(base))
    assert np.array_equal(origin[y == 0], normal)
    for c in (1, 2, 3):
        assert np.array_equal(origin[y == c], held)  # every held-out graph once per kind
    assert not set(origin[y > 0].tolist()) & set(origin[y == 0].tolist())
    normals = {key(g, int(i)) for i in np.flatnonzero(y == 0)}
    assert not any(key(g, int(i)) in normals for i in np.flatnonzero(y > 0))
    for i in np.flatnonzero(y == 0)[:20]:
        assert key(g, int(i)) == key(base, int(origin[i]))  # class 0 unchanged
    assert np.array_equal(g.n_nodes, base.n_nodes[origin])  # perturbations keep the atoms
    check_classes_differ(g, y)


def test_deterministic() -> None:
    a, ya, _ = perturbed_set(molecules())
    b, yb, _ = perturbed_set(molecules())
    assert a == b and np.array_equal(ya, yb)
    c, _, _ = perturbed_set(molecules(), seed=5)
    assert c != a


@needs_sdist
def test_mutag_perturbed_on_the_real_graphs() -> None:
    assert SDIST_PATH is not None
    ds = load_dataset("mutag_perturbed", path=str(SDIST_PATH))
    mutag = load_dataset("mutag_structures", path=str(SDIST_PATH)).x
    assert isinstance(mutag, GraphSet) and isinstance(ds.x, GraphSet)
    assert ds.kind == "graph" and ds.classes == CLASSES and ds.x.shape == (282, 7)
    assert np.bincount(ds.y).tolist() == [141, 47, 47, 47]
    normal, _ = split(188)
    assert ds.x[np.flatnonzero(ds.y == 0)] == mutag[normal]
    assert load_dataset("mutag_perturbed", path=str(SDIST_PATH)).x == ds.x
    check_classes_differ(ds.x, ds.y)
    # the paper's protocol: 30% held out, as many anomalies as normal graphs in the test set
    cfg = parse_config({
        "seed": 0, "rounds": 1,
        "data": {"name": "mutag_perturbed", "path": str(SDIST_PATH), "normal": [0],
                 "anomaly": [1, 2, 3], "test_anomaly_fraction": 0.5},
        "partition": {"scheme": "iid", "clients": 2},
        "methods": [{"name": "fgad"}],
    })  # fmt: skip
    fed = build_federation(cfg)
    y = fed.y_test
    assert (y == 0).sum() == 42 and (y == 1).sum() == 42
    train = {key(c.x_train, i) for c in fed.clients for i in range(len(c.x_train))}  # type: ignore[arg-type]
    assert len(train) > 90
    for c in fed.clients:
        assert isinstance(c.x_test, GraphSet)
        for i in np.flatnonzero(np.asarray(c.y_test) == 1):
            assert key(c.x_test, int(i)) not in train
