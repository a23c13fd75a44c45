"""Four synthetic graph domains with documented structural anomalies (FGAD's settings).

Each domain is registered under its own name, so that ``scheme = "by-source"`` gives the
multi-dataset setting of FGAD (Cai et al., ACM MM 2024): one domain per client, graphs that
differ in size, density and node-feature width from client to client. In every domain class
0 is the domain's typical family and classes 1-3 are anomalies made *from* class-0 graphs,
so that node counts overlap between classes (no anomaly is given away by its size alone):

========================  =====  ============================================================
domain (width)            class  graphs
========================  =====  ============================================================
``graphs_molecules`` (7)  0      a 5- or 6-ring with 1-3 side chains of 2-6 atoms (7-24
                                 nodes); atom types one-hot: ring atoms C, 15% N, chain ends
                                 O with probability 1/2
                          1      ``rewired``: 25% of the edges moved to random node pairs
                          2      ``dense``: a 4-clique added among random atoms
                          3      ``atoms``: the structure of class 0, atom types uniform over 7
``graphs_proteins`` (3)   0      a backbone chain of 30-76 residues of secondary-structure
                                 segments: helices (type 0, contacts i-i+3 and i-i+4), strands
                                 (type 1) paired as ladders, coils (type 2)
                          1      ``rewired``: 25% of the edges moved
                          2      ``dense``: a 6-clique added
                          3      ``no-structure``: the same chain and types, no helix or
                                 ladder contacts (a plain chain)
``graphs_social`` (10)    0      an ego network: one hub linked to everyone, 2-3 communities
                                 (density 0.35 inside, 0.02 between), 20-50 nodes; features
                                 one-hot degree (capped at 9)
                          1      ``rewired``: 40% of the non-hub edges moved
                          2      ``dense``: an 8-clique across communities
                          3      ``two-hubs``: a second hub linked to half of the nodes
``graphs_grids`` (2)      0      an r x c lattice (4 <= r, c <= 8) with 0-2 missing edges;
                                 features the node's (row, column) scaled to [0, 1]
                          1      ``rewired``: 15% of the edges become long-range links
                          2      ``dense``: a 5-clique added
                          3      ``mesh``: the lattice triangulated (one diagonal per cell)
========================  =====  ============================================================

Deterministic (a fixed seed per domain), ``per_class = 300`` graphs per class, edges
undirected (both directions), no self-loops. ``path`` and ``size`` are ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import numpy as np

from fedad.core.types import Dataset, GraphSet
from fedad.data.parts import Part, sample_bytes
from fedad.data.registry import register_dataset

__all__ = ["DOMAINS", "add_clique", "make_domain", "rewire_edges"]

PER_CLASS = 300
Graph = tuple[int, set[tuple[int, int]], np.ndarray]
"""(node count, undirected edges as (i < j) pairs, node features (n, width))."""


def _edge(i: int, j: int) -> tuple[int, int]:
    return (i, j) if i < j else (j, i)


def rewire_edges(
    n: int,
    edges: set[tuple[int, int]],
    share: float,
    rng: np.random.Generator,
    keep: Callable[[tuple[int, int]], bool] = lambda e: True,
) -> set[tuple[int, int]]:
    """Move ``share`` of the (movable) edges to random node pairs not yet linked (edges are
    ``(i < j)`` pairs; a pair is tried 50 times, then the edge is dropped)."""
    movable = sorted(e for e in edges if keep(e))
    k = max(1, round(share * len(movable)))
    out = set(edges)
    for idx in rng.choice(len(movable), size=min(k, len(movable)), replace=False):
        out.discard(movable[int(idx)])
        for _ in range(50):
            i, j = (int(v) for v in rng.choice(n, size=2, replace=False))
            if _edge(i, j) not in out:
                out.add(_edge(i, j))
                break
    return out


def add_clique(
    n: int,
    edges: set[tuple[int, int]],
    k: int,
    rng: np.random.Generator,
    among: np.ndarray | None = None,
) -> set[tuple[int, int]]:
    """Link ``k`` random nodes (of ``among``, default all ``n``) pairwise: a dense subgraph."""
    pool = np.arange(n) if among is None else among
    nodes = [int(v) for v in rng.choice(pool, size=min(k, len(pool)), replace=False)]
    return edges | {_edge(a, b) for i, a in enumerate(nodes) for b in nodes[i + 1 :]}


def _one_hot(types: np.ndarray, width: int) -> np.ndarray:
    out: np.ndarray = np.eye(width, dtype=np.float32)[np.clip(types, 0, width - 1)]
    return out


# -- molecules ------------------------------------------------------------------------------


def _molecule(rng: np.random.Generator) -> tuple[int, set[tuple[int, int]], np.ndarray]:
    ring = int(rng.integers(5, 7))
    edges = {_edge(i, (i + 1) % ring) for i in range(ring)}
    types = [1 if rng.random() < 0.15 else 0 for _ in range(ring)]
    n = ring
    for _ in range(int(rng.integers(1, 4))):
        at = int(rng.integers(0, ring))
        length = int(rng.integers(2, 7))
        prev = at
        for step in range(length):
            edges.add(_edge(prev, n))
            end = step == length - 1
            types.append(2 if end and rng.random() < 0.5 else 0)
            prev = n
            n += 1
    return n, edges, np.asarray(types)


def _molecules(c: int, rng: np.random.Generator) -> Graph:
    n, edges, types = _molecule(rng)
    if c == 1:
        edges = rewire_edges(n, edges, 0.25, rng)
    elif c == 2:
        edges = add_clique(n, edges, 4, rng)
    elif c == 3:
        types = rng.integers(0, 7, size=n)
    return n, edges, _one_hot(types, 7)


# -- proteins -------------------------------------------------------------------------------


def _proteins(c: int, rng: np.random.Generator) -> Graph:
    target = int(rng.integers(30, 71))
    types: list[int] = []
    contacts: set[tuple[int, int]] = set()
    strands: list[list[int]] = []
    while len(types) < target:
        kind = int(rng.choice(3, p=[0.4, 0.3, 0.3]))
        length = int(rng.integers(4, 9)) if kind < 2 else int(rng.integers(2, 6))
        seg = list(range(len(types), len(types) + length))
        types += [kind] * length
        if kind == 0:  # helix: i-i+3 and i-i+4 contacts
            contacts |= {_edge(a, a + d) for a in seg for d in (3, 4) if a + d <= seg[-1]}
        elif kind == 1:
            if strands:  # ladder with an earlier strand
                other = strands[int(rng.integers(0, len(strands)))]
                contacts |= {_edge(a, b) for a, b in zip(seg, other[::-1], strict=False)}
            strands.append(seg)
    n = len(types)
    chain = {(i, i + 1) for i in range(n - 1)}
    edges = chain | (set() if c == 3 else contacts)
    if c == 1:
        edges = rewire_edges(n, edges, 0.25, rng)
    elif c == 2:
        edges = add_clique(n, edges, 6, rng)
    return n, edges, _one_hot(np.asarray(types), 3)


# -- social ---------------------------------------------------------------------------------


def _social(c: int, rng: np.random.Generator) -> Graph:
    n = int(rng.integers(20, 51))
    groups = int(rng.integers(2, 4))
    member = rng.integers(0, groups, size=n)
    member[0] = -1  # the hub
    edges = {_edge(0, i) for i in range(1, n)}
    for i in range(1, n):
        for j in range(i + 1, n):
            p = 0.35 if member[i] == member[j] else 0.02
            if rng.random() < p:
                edges.add((i, j))
    if c == 1:
        edges = rewire_edges(n, edges, 0.4, rng, keep=lambda e: e[0] != 0)
    elif c == 2:
        edges = add_clique(n, edges, 8, rng, among=np.arange(1, n))
    elif c == 3:
        hub = int(rng.integers(1, n))
        others = [i for i in range(1, n) if i != hub]
        edges |= {
            _edge(hub, int(i)) for i in rng.choice(others, size=len(others) // 2, replace=False)
        }
    deg = np.zeros(n, dtype=np.int64)
    for i, j in edges:
        deg[i] += 1
        deg[j] += 1
    return n, edges, _one_hot(deg, 10)


# -- grids ----------------------------------------------------------------------------------


def _grids(c: int, rng: np.random.Generator) -> Graph:
    r, k = int(rng.integers(4, 9)), int(rng.integers(4, 9))
    n = r * k
    edges = {(i * k + j, i * k + j + 1) for i in range(r) for j in range(k - 1)}
    edges |= {(i * k + j, (i + 1) * k + j) for i in range(r - 1) for j in range(k)}
    ordered = sorted(edges)
    for idx in rng.choice(len(ordered), size=int(rng.integers(0, 3)), replace=False):
        edges.discard(ordered[int(idx)])  # defects
    if c == 1:
        edges = rewire_edges(n, edges, 0.15, rng)
    elif c == 2:
        edges = add_clique(n, edges, 5, rng)
    elif c == 3:
        edges |= {(i * k + j, (i + 1) * k + j + 1) for i in range(r - 1) for j in range(k - 1)}
    pos = np.stack([np.repeat(np.arange(r), k) / (r - 1), np.tile(np.arange(k), r) / (k - 1)], 1)
    return n, edges, pos.astype(np.float32)


DOMAINS: dict[str, tuple[Callable[[int, np.random.Generator], Graph], tuple[str, ...], int]] = {
    "graphs_molecules": (_molecules, ("ring-chain", "rewired", "dense", "atoms"), 11),
    "graphs_proteins": (_proteins, ("folded", "rewired", "dense", "no-structure"), 12),
    "graphs_social": (_social, ("ego", "rewired", "dense", "two-hubs"), 13),
    "graphs_grids": (_grids, ("lattice", "rewired", "dense", "mesh"), 14),
}
"""name -> (generator of one graph of a class, class names, seed)."""


EVAL_STREAM = 0x5EA1
"""Mixed into a domain's seed for its evaluation half (``data.part = "eval"``): graphs
drawn from a stream that development never drew from."""


def _draw(
    name: str, per_class: int, seed: int, skip: frozenset[bytes] = frozenset()
) -> tuple[GraphSet, np.ndarray]:
    """``per_class`` graphs per class of domain ``name`` from ``seed``'s stream, leaving out
    any whose bytes are in ``skip``."""
    make, classes, _ = DOMAINS[name]
    rng = np.random.default_rng(seed)
    pairs = []
    labels = []
    for c in range(len(classes)):
        kept = 0
        while kept < per_class:
            n, edges, x = make(c, rng)
            e = np.asarray(sorted(edges), dtype=np.int64).reshape(-1, 2).T
            pair = (x, np.concatenate([e, e[::-1]], axis=1))
            assert len(x) == n
            if skip and _key(pair) in skip:
                continue
            pairs.append(pair)
            labels.append(c)
            kept += 1
    return GraphSet.from_graphs(pairs), np.asarray(labels, dtype=np.int64)


def _key(pair: tuple[np.ndarray, np.ndarray]) -> bytes:
    single = GraphSet.from_graphs([pair])
    return sample_bytes(single, 0)


@lru_cache(maxsize=8)
def _cached(name: str, per_class: int, part: Part = "all") -> tuple[GraphSet, np.ndarray]:
    seed = DOMAINS[name][2]
    if part != "eval":  # the development half is the set as it always was
        return _draw(name, per_class, seed)
    dev, _ = _cached(name, per_class, "dev")
    seen = frozenset(sample_bytes(dev, i) for i in range(len(dev)))
    return _draw(name, per_class, seed ^ EVAL_STREAM, seen)


def make_domain(name: str, per_class: int = PER_CLASS, part: Part = "all") -> Dataset:
    """The domain ``name`` (a key of :data:`DOMAINS`), ``per_class`` graphs per class;
    ``part = "eval"``: as many from another stream, none equal to a development graph."""
    graphs, y = _cached(name, per_class, part)
    return Dataset(name, graphs[np.arange(len(graphs))], y.copy(), "graph", DOMAINS[name][1])


def _register(name: str, description: str) -> None:
    def load(
        path: str | None = None, size: int | None = None, part: Part = "all", seed: int = 0
    ) -> Dataset:
        del path, size, seed
        return make_domain(name, part=part)

    load.__doc__ = f"The synthetic graph domain ``{name}`` (see :mod:`{__name__}`)."
    register_dataset(name, description=description, kind="graph", parts="loader")(load)


_register(
    "graphs_molecules",
    "synthetic molecules: ring-and-chain graphs, 7 atom types; "
    "anomalies rewired / 4-clique / uniform atoms (classes 1-3)",
)
_register(
    "graphs_proteins",
    "synthetic proteins: 30-76-residue chains, helix/strand/coil; "
    "anomalies rewired / 6-clique / no contacts (classes 1-3)",
)
_register(
    "graphs_social",
    "synthetic ego networks with communities, degree features; "
    "anomalies rewired / 8-clique / second hub (classes 1-3)",
)
_register(
    "graphs_grids",
    "synthetic lattices with defects, position features; "
    "anomalies long-range links / 5-clique / triangulated (classes 1-3)",
)
