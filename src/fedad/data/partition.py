"""Seeded partitions of a labelled pool over clients (pure functions over index arrays).

Every function takes the pool's ``labels`` (class ids, or source/group ids for
:func:`by_source`), the number of clients and a :class:`numpy.random.Generator`, and returns
one ``int64`` array of positions into ``labels`` per client. Each position is used at most
once; each client's positions come in random order. Same generator state, same result.

- :func:`iid`: a random permutation cut into near-equal parts (all samples used).
- :func:`dirichlet`: label skew as in Hsu et al. 2019 (and Flower Datasets'
  ``DirichletPartitioner``): for each class, client shares are drawn from
  ``Dir(alpha * 1)`` and the class's samples are cut accordingly (all samples used);
  redrawn, a bounded number of times, until every client has ``min_per_client`` samples.
  Small ``alpha`` gives clients dominated by a few classes, large ``alpha`` approaches iid.
- :func:`dominant`: client ``k``'s main class is ``classes[k mod C]``; a
  ``dominant_fraction`` share of its data comes from it and the rest is spread evenly over
  the other classes. Every client gets the same number of samples, the largest the class
  counts allow (so some samples may stay unused).
- :func:`one_class`: client ``k`` holds only ``classes[k mod C]``; a class shared by several
  clients is split evenly between them (all samples used when clients >= classes).
- ``one-vs-rest``: the training split of :func:`one_class`; the federation builder then
  tests each client on its own class against every other listed class
  (:mod:`fedad.data.federation`).
- :func:`by_source`: as :func:`one_class` over source/group ids: clients are assigned to
  sources round-robin and a source shared by several clients is split between them.

Impossible requests raise a one-line :class:`~fedad.core.errors.DataError`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedad.core.errors import DataError

__all__ = [
    "SCHEMES",
    "by_source",
    "dirichlet",
    "dirichlet_proportions",
    "dominant",
    "iid",
    "natural",
    "one_class",
    "partition",
    "round_half_up",
]

SCHEMES = ("iid", "dirichlet", "dominant", "one-class", "one-vs-rest", "by-source", "natural")


def round_half_up(x: float) -> int:
    """``x`` rounded to the nearest integer, halves up (0.5 -> 1, unlike Python's ``round``)."""
    return int(np.floor(x + 0.5))


def _check_clients(n: int, num_clients: int, min_per_client: int) -> None:
    if num_clients < 1:
        raise DataError(f"need at least one client, got partition.clients={num_clients}")
    if min_per_client < 0:
        raise DataError(f"partition.min_per_client={min_per_client} must be >= 0")
    if n < num_clients * min_per_client:
        raise DataError(
            f"{num_clients} clients with at least {min_per_client} samples each need "
            f"{num_clients * min_per_client} samples but the pool has {n}",
            "lower partition.clients or partition.min_per_client, or use more data",
        )


def _check_sizes(parts: list[np.ndarray], min_per_client: int, scheme: str, hint: str) -> None:
    sizes = [len(p) for p in parts]
    small = [k for k, s in enumerate(sizes) if s < min_per_client]
    if small:
        k = small[0]
        raise DataError(
            f"partition '{scheme}' gives client {k} only {sizes[k]} samples, fewer than "
            f"partition.min_per_client={min_per_client} ({len(small)} such clients)",
            hint,
        )


def _class_pools(
    labels: np.ndarray, classes: Sequence[int], rng: np.random.Generator
) -> list[np.ndarray]:
    return [rng.permutation(np.flatnonzero(labels == c)).astype(np.int64) for c in classes]


def dirichlet_proportions(
    num_classes: int, num_clients: int, alpha: float, rng: np.random.Generator
) -> np.ndarray:
    """Client shares per class: a ``(num_classes, num_clients)`` array, rows ~ Dir(alpha * 1).

    Each row sums to one. Entry moments: mean ``1/K`` and variance
    ``(K - 1) / (K^2 (K alpha + 1))`` with ``K = num_clients``.
    """
    if alpha <= 0:
        raise DataError(f"partition.alpha={alpha} must be > 0 (e.g. 0.5)")
    if num_clients == 1:
        return np.ones((num_classes, 1))
    props = rng.dirichlet(np.full(num_clients, float(alpha)), size=num_classes)
    # Tiny alpha can underflow every entry of a row; give such a row to one client.
    bad = ~np.isfinite(props).all(axis=1) | (props.sum(axis=1) <= 0)
    for row in np.flatnonzero(bad):
        props[row] = 0.0
        props[row, rng.integers(num_clients)] = 1.0
    return np.asarray(props / props.sum(axis=1, keepdims=True))


def iid(
    labels: np.ndarray, num_clients: int, rng: np.random.Generator, *, min_per_client: int = 1
) -> list[np.ndarray]:
    """A uniformly random split into ``num_clients`` parts whose sizes differ by at most one."""
    n = len(labels)
    _check_clients(n, num_clients, min_per_client)
    perm = rng.permutation(n).astype(np.int64)
    return [np.asarray(p) for p in np.array_split(perm, num_clients)]


def dirichlet(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    *,
    alpha: float = 0.5,
    min_per_client: int = 1,
    max_tries: int = 100,
) -> list[np.ndarray]:
    """Label-skewed split: each class's samples are cut by shares drawn from Dir(alpha * 1)."""
    labels = np.asarray(labels)
    _check_clients(len(labels), num_clients, min_per_client)
    classes = np.unique(labels)
    for _ in range(max_tries):
        pools = _class_pools(labels, classes.tolist(), rng)
        props = dirichlet_proportions(len(classes), num_clients, alpha, rng)
        chunks: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for pool, share in zip(pools, props, strict=True):
            cuts = (np.cumsum(share) * len(pool)).astype(np.int64)[:-1]
            for k, chunk in enumerate(np.split(pool, np.minimum(cuts, len(pool)))):
                chunks[k].append(chunk)
        parts = [np.concatenate(c) for c in chunks]
        if min(len(p) for p in parts) >= min_per_client:
            return [rng.permutation(p) for p in parts]
    raise DataError(
        f"partition 'dirichlet' with alpha={alpha} left some of {num_clients} clients with "
        f"fewer than partition.min_per_client={min_per_client} samples in {max_tries} draws",
        "raise partition.alpha, or lower partition.clients or partition.min_per_client",
    )


def _dominant_counts(num_clients: int, num_classes: int, m: int, fraction: float) -> np.ndarray:
    """Per-client, per-class sample counts when every client gets ``m`` samples."""
    counts = np.zeros((num_clients, num_classes), dtype=np.int64)
    for k in range(num_clients):
        main = k % num_classes
        if num_classes == 1:
            counts[k, main] = m
            continue
        a = min(m, round_half_up(fraction * m))
        q, s = divmod(m - a, num_classes - 1)
        counts[k, main] = a
        for j in range(num_classes - 1):
            counts[k, (main + 1 + j) % num_classes] = q + (1 if j < s else 0)
    return counts


def dominant(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    *,
    dominant_fraction: float = 0.9,
    classes: Sequence[int] | None = None,
    min_per_client: int = 1,
) -> list[np.ndarray]:
    """Each client mostly one class: ``dominant_fraction`` from ``classes[k mod C]``.

    The rest of a client's samples are spread evenly over the other classes. All clients get
    the same size ``m``, the largest for which every class has enough samples.
    """
    labels = np.asarray(labels)
    if not 0.0 <= dominant_fraction <= 1.0:
        raise DataError(f"partition.dominant_fraction={dominant_fraction} must be in [0, 1]")
    _check_clients(len(labels), num_clients, min_per_client)
    order = [int(c) for c in (np.unique(labels) if classes is None else classes)]
    pools = _class_pools(labels, order, rng)
    avail = np.array([len(p) for p in pools], dtype=np.int64)
    lo, hi = 0, len(labels) // num_clients
    while lo < hi:  # largest feasible m; class demands grow monotonically with m
        mid = (lo + hi + 1) // 2
        need = _dominant_counts(num_clients, len(order), mid, dominant_fraction).sum(axis=0)
        if (need <= avail).all():
            lo = mid
        else:
            hi = mid - 1
    if lo < max(min_per_client, 1):
        raise DataError(
            f"partition 'dominant' cannot give {num_clients} clients {max(min_per_client, 1)} "
            f"samples each with dominant_fraction={dominant_fraction}: class counts are "
            f"{dict(zip(order, avail.tolist(), strict=True))}",
            "lower partition.clients, or change partition.dominant_fraction or data.normal",
        )
    counts = _dominant_counts(num_clients, len(order), lo, dominant_fraction)
    taken = np.zeros(len(order), dtype=np.int64)
    parts = []
    for k in range(num_clients):
        mine = []
        for j in range(len(order)):
            mine.append(pools[j][taken[j] : taken[j] + counts[k, j]])
            taken[j] += counts[k, j]
        parts.append(rng.permutation(np.concatenate(mine)))
    return parts


def _round_robin(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    order: Sequence[int] | None,
    min_per_client: int,
    scheme: str,
) -> list[np.ndarray]:
    labels = np.asarray(labels)
    _check_clients(len(labels), num_clients, min_per_client)
    groups = [int(g) for g in (np.unique(labels) if order is None else order)]
    if not groups:
        raise DataError(f"partition '{scheme}' got an empty pool")
    pools = _class_pools(labels, groups, rng)
    parts: list[np.ndarray] = [np.empty(0, dtype=np.int64)] * num_clients
    for j, pool in enumerate(pools):
        members = list(range(j, num_clients, len(groups)))
        for k, piece in zip(members, np.array_split(pool, max(len(members), 1)), strict=False):
            parts[k] = np.asarray(piece, dtype=np.int64)
    _check_sizes(
        parts,
        min_per_client,
        scheme,
        "lower partition.clients so that fewer clients share a group, or use more data",
    )
    return parts


def one_class(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    *,
    classes: Sequence[int] | None = None,
    min_per_client: int = 1,
) -> list[np.ndarray]:
    """Client ``k`` holds only class ``classes[k mod C]``; shared classes are split evenly.

    With fewer clients than classes, the classes after the first ``num_clients`` stay unused.
    """
    return _round_robin(labels, num_clients, rng, classes, min_per_client, "one-class")


def by_source(
    groups: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    *,
    sources: Sequence[int] | None = None,
    min_per_client: int = 1,
) -> list[np.ndarray]:
    """Client ``k`` holds data of source ``sources[k mod S]`` only; shared sources are split."""
    return _round_robin(groups, num_clients, rng, sources, min_per_client, "by-source")


def natural(groups: np.ndarray, num_clients: int) -> list[np.ndarray]:
    """Client ``k`` holds the samples whose natural client id (``groups``, codes
    ``0..num_clients-1``) is ``k``: who holds the data defines the federation."""
    return [np.flatnonzero(groups == k) for k in range(num_clients)]


def partition(
    scheme: str,
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    *,
    groups: np.ndarray | None = None,
    classes: Sequence[int] | None = None,
    alpha: float = 0.5,
    dominant_fraction: float = 0.9,
    min_per_client: int = 1,
) -> list[np.ndarray]:
    """Dispatch to the scheme named ``scheme`` (one of :data:`SCHEMES`).

    ``labels`` are class ids; ``groups`` the source ids that ``by-source`` splits by;
    ``classes`` the class order for ``dominant`` and ``one-class`` (default: sorted ids).
    """
    if scheme == "iid":
        return iid(labels, num_clients, rng, min_per_client=min_per_client)
    if scheme == "dirichlet":
        return dirichlet(labels, num_clients, rng, alpha=alpha, min_per_client=min_per_client)
    if scheme == "dominant":
        return dominant(
            labels,
            num_clients,
            rng,
            dominant_fraction=dominant_fraction,
            classes=classes,
            min_per_client=min_per_client,
        )
    if scheme in ("one-class", "one-vs-rest"):  # the same training split; tests differ
        return one_class(labels, num_clients, rng, classes=classes, min_per_client=min_per_client)
    if scheme == "by-source":
        if groups is None:
            raise DataError("partition 'by-source' needs a source id per sample")
        return by_source(groups, num_clients, rng, min_per_client=min_per_client)
    if scheme == "natural":
        if groups is None:
            raise DataError("partition 'natural' needs a client id per sample")
        return natural(groups, num_clients)
    raise DataError(f"unknown partition.scheme '{scheme}'", f"use one of {', '.join(SCHEMES)}")
