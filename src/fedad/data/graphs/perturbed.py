"""MUTAG against structurally perturbed MUTAG: a real-graph check of graph anomaly detection.

``mutag_perturbed`` is built from MUTAG's 188 real graphs (:mod:`fedad.data.graphs.mutag`,
the loader ``mutag_structures``; same ``data.path``, same hash check). A fixed seed splits
them once into **141 normal graphs** and **47 held-out graphs**; every held-out graph gives
one anomaly of each kind, made with the operators of the synthetic graph domains
(:mod:`fedad.data.graph_domains`):

=====  =============  =====  ====================================================================
class  name           count  graphs
=====  =============  =====  ====================================================================
0      ``mutag``      141    MUTAG's real molecules, unchanged
1      ``rewired``    47     a held-out molecule with 25% of its bonds moved to random unbonded
                             atom pairs (:func:`~fedad.data.graph_domains.rewire_edges`)
2      ``dense``      47     a held-out molecule with a 4-clique added among random atoms
                             (:func:`~fedad.data.graph_domains.add_clique`)
3      ``atoms``      47     a held-out molecule's bonds unchanged, its atom types drawn uniformly
                             over the 7 (MUTAG's are 71% carbon)
=====  =============  =====  ====================================================================

No anomaly is made from a class-0 graph: whichever normal graphs a run trains on, no test
anomaly is a perturbed copy of one of them (the held-out graphs appear only perturbed). Node
features are MUTAG's (7 atom types one-hot), edges undirected, no self-loops; node counts are
those of MUTAG (10-28) in every class. With ``data.test_fraction = 0.3`` the held-out test set
has 42 normal graphs and 42 anomalies (14 of each kind). Deterministic: the split and every
perturbation come from :data:`SEED`. ``size`` is ignored.
"""

from __future__ import annotations

import numpy as np

from fedad.core.types import Dataset, GraphSet
from fedad.data.graph_domains import add_clique, rewire_edges
from fedad.data.graphs.features import one_hot
from fedad.data.graphs.mutag import load_mutag_structures
from fedad.data.registry import register_dataset

__all__ = [
    "CLASSES",
    "HELD_OUT",
    "SEED",
    "load_mutag_perturbed",
    "perturb",
    "perturbed_set",
    "split",
]

SEED = 188
"""Seeds the normal/held-out split and the perturbations."""
HELD_OUT = 47
"""Graphs held out of class 0 to be perturbed (a quarter of MUTAG)."""
CLASSES = ("mutag", "rewired", "dense", "atoms")
REWIRE_SHARE = 0.25
CLIQUE = 4


def split(
    n_graphs: int, held_out: int = HELD_OUT, seed: int = SEED
) -> tuple[np.ndarray, np.ndarray]:
    """``(normal, held_out)``: sorted indices of the graphs kept as class 0 and of those
    perturbed, a seeded partition of ``range(n_graphs)``."""
    if not 0 < held_out < n_graphs:
        raise ValueError(f"cannot hold out {held_out} of {n_graphs} graphs")
    order = np.random.default_rng(seed).permutation(n_graphs)
    return np.sort(order[held_out:]), np.sort(order[:held_out])


def _edge_set(edge_index: np.ndarray) -> set[tuple[int, int]]:
    return {(int(i), int(j)) for i, j in edge_index.T if i < j}


def _edge_index(edges: set[tuple[int, int]]) -> np.ndarray:
    e = np.asarray(sorted(edges), dtype=np.int64).reshape(-1, 2).T
    return np.concatenate([e, e[::-1]], axis=1)


def perturb(
    x: np.ndarray, edge_index: np.ndarray, kind: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """One anomaly of class ``kind`` (1 rewired, 2 dense, 3 atoms) from a graph with one-hot
    node features ``x`` ``(n, width)`` and undirected ``edge_index`` ``(2, 2|E|)``."""
    n, width = x.shape
    edges = _edge_set(edge_index)
    if kind == 1:
        edges = rewire_edges(n, edges, REWIRE_SHARE, rng)
    elif kind == 2:
        edges = add_clique(n, edges, CLIQUE, rng)
    elif kind == 3:
        x = one_hot(np.asarray(rng.integers(0, width, size=n)), width)
    else:
        raise ValueError(f"no perturbation of class {kind}")
    return x.astype(np.float32), _edge_index(edges)


def perturbed_set(graphs: GraphSet, seed: int = SEED) -> tuple[GraphSet, np.ndarray, np.ndarray]:
    """``(graphs, y, origin)``: the normal graphs of :func:`split` as class 0, then every held-out
    graph perturbed by each kind (classes 1, 2, 3, in that order); ``origin[i]`` is the index in
    ``graphs`` of the graph that sample ``i`` is, or was made from."""
    normal, held = split(len(graphs), HELD_OUT, seed)
    rng = np.random.default_rng(seed)
    pairs = [graphs.graph(int(i)) for i in normal]
    y = [0] * len(normal)
    origin = [int(i) for i in normal]
    for kind in range(1, len(CLASSES)):
        for i in held:
            x, e = graphs.graph(int(i))
            pairs.append(perturb(x, e, kind, rng))
            y.append(kind)
            origin.append(int(i))
    return GraphSet.from_graphs(pairs), np.asarray(y, np.int64), np.asarray(origin, np.int64)


@register_dataset(
    "mutag_perturbed",
    description="MUTAG normal (141 real graphs) against 3 x 47 perturbed held-out MUTAG "
    "graphs: rewired bonds / a 4-clique / uniform atom types (classes 1-3); data.path as "
    "mutag_structures",
    kind="graph",
)
def load_mutag_perturbed(path: str | None = None, size: int | None = None) -> Dataset:
    """MUTAG's graphs, 141 as class 0 and 3 x 47 perturbed anomalies (see the module)."""
    del size
    base = load_mutag_structures(path).x
    assert isinstance(base, GraphSet)
    g, y, _ = perturbed_set(base)
    return Dataset("mutag_perturbed", g, y, "graph", CLASSES)
