"""Property tests for the partition functions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedad.core.errors import DataError
from fedad.data.partition import (
    by_source,
    dirichlet,
    dirichlet_proportions,
    dominant,
    iid,
    one_class,
    partition,
    round_half_up,
)

FAST = settings(max_examples=30, deadline=None)


@st.composite
def pools(draw: st.DrawFn, max_classes: int = 6, max_n: int = 400) -> tuple[np.ndarray, int]:
    """Labels of a pool (every class present) and a seed."""
    k = draw(st.integers(1, max_classes))
    sizes = draw(st.lists(st.integers(1, max_n // k), min_size=k, max_size=k))
    labels = np.repeat(np.arange(k), sizes)
    seed = draw(st.integers(0, 2**31))
    order = np.random.default_rng(seed).permutation(len(labels))
    return labels[order], seed


def assert_disjoint(parts: list[np.ndarray], n: int) -> np.ndarray:
    allx = np.concatenate(parts) if parts else np.empty(0, np.int64)
    assert allx.dtype == np.int64
    assert len(np.unique(allx)) == len(allx), "a sample is used twice"
    assert allx.size == 0 or (allx.min() >= 0 and allx.max() < n)
    return allx


@FAST
@given(pools(), st.integers(1, 12))
def test_iid_uses_every_sample_once(pool: tuple[np.ndarray, int], clients: int) -> None:
    labels, seed = pool
    if len(labels) < clients:
        with pytest.raises(DataError):
            iid(labels, clients, np.random.default_rng(seed))
        return
    parts = iid(labels, clients, np.random.default_rng(seed))
    assert len(parts) == clients
    assert sorted(assert_disjoint(parts, len(labels))) == list(range(len(labels)))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1


@FAST
@given(pools(), st.integers(1, 8), st.floats(0.05, 10.0), st.integers(1, 3))
def test_dirichlet_uses_every_sample_once(
    pool: tuple[np.ndarray, int], clients: int, alpha: float, min_per_client: int
) -> None:
    labels, seed = pool
    rng = np.random.default_rng(seed)
    try:
        parts = dirichlet(labels, clients, rng, alpha=alpha, min_per_client=min_per_client)
    except DataError as err:  # an unlucky or impossible request: a clear message
        assert "\n" not in str(err) and "min_per_client" in str(err)
        return
    assert sorted(assert_disjoint(parts, len(labels))) == list(range(len(labels)))
    assert min(len(p) for p in parts) >= min_per_client


@FAST
@given(pools(), st.integers(0, 6), st.floats(0.0, 1.0))
def test_dominant(pool: tuple[np.ndarray, int], extra: int, fraction: float) -> None:
    labels, seed = pool
    n_classes = len(np.unique(labels))
    clients = n_classes + extra
    try:
        parts = dominant(labels, clients, np.random.default_rng(seed), dominant_fraction=fraction)
    except DataError as err:  # too few samples for equal-sized clients: a clear message
        assert "\n" not in str(err)
        assert "dominant" in str(err) or "the pool has" in str(err)
        return
    assert_disjoint(parts, len(labels))
    sizes = {len(p) for p in parts}
    assert len(sizes) == 1, "all clients get the same size"
    m = sizes.pop()
    for k, p in enumerate(parts):
        main = k % n_classes
        expected = m if n_classes == 1 else min(m, round_half_up(fraction * m))
        assert int(np.sum(labels[p] == main)) == expected


def test_dominant_fashion_like_shares() -> None:
    labels = np.repeat(np.arange(5), 600)
    parts = dominant(labels, 10, np.random.default_rng(0), dominant_fraction=0.9)
    assert_disjoint(parts, len(labels))
    assert [len(p) for p in parts] == [300] * 10  # all data used: 2 mains x 0.9 + 8 x 0.025
    for k, p in enumerate(parts):
        counts = np.bincount(labels[p], minlength=5)
        assert counts[k % 5] == 270
        assert sorted(np.delete(counts, k % 5).tolist()) == [7, 7, 8, 8]


@FAST
@given(pools(), st.integers(0, 5))
def test_one_class_covers_pool_when_clients_ge_classes(
    pool: tuple[np.ndarray, int], extra: int
) -> None:
    labels, seed = pool
    classes = np.unique(labels)
    clients = len(classes) + extra
    sharers = [len(range(j, clients, len(classes))) for j in range(len(classes))]
    if any(np.sum(labels == c) < s for c, s in zip(classes, sharers, strict=True)):
        with pytest.raises(DataError):  # a class smaller than the clients sharing it
            one_class(labels, clients, np.random.default_rng(seed))
        return
    parts = one_class(labels, clients, np.random.default_rng(seed))
    assert sorted(assert_disjoint(parts, len(labels))) == list(range(len(labels)))
    for k, p in enumerate(parts):
        assert set(labels[p].tolist()) == {int(classes[k % len(classes)])}


def test_one_class_fewer_clients_leaves_classes_unused() -> None:
    labels = np.repeat(np.arange(4), 10)
    parts = one_class(labels, 2, np.random.default_rng(0), classes=[3, 1, 0, 2])
    assert [set(labels[p].tolist()) for p in parts] == [{3}, {1}]
    assert [len(p) for p in parts] == [10, 10]


@FAST
@given(pools(max_classes=3), st.integers(1, 7))
def test_by_source_round_robin(pool: tuple[np.ndarray, int], clients: int) -> None:
    groups, seed = pool
    n_groups = len(np.unique(groups))
    try:
        parts = by_source(groups, clients, np.random.default_rng(seed))
    except DataError:
        return
    assert_disjoint(parts, len(groups))
    for k, p in enumerate(parts):
        assert set(groups[p].tolist()) == {k % n_groups}
    for g in range(min(clients, n_groups)):
        mine = [p for k, p in enumerate(parts) if k % n_groups == g]
        sizes = [len(p) for p in mine]
        assert sum(sizes) == int(np.sum(groups == g)) and max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("scheme", ["iid", "dirichlet", "dominant", "one-class", "by-source"])
def test_same_seed_same_partition(scheme: str) -> None:
    labels = np.repeat(np.arange(4), 50)
    groups = labels % 2

    def run(seed: int) -> list[np.ndarray]:
        return partition(scheme, labels, 6, np.random.default_rng(seed), groups=groups, alpha=0.5)

    a, b, c = run(3), run(3), run(4)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


# --------------------------------------------------------------------------- Dirichlet


@settings(max_examples=12, deadline=None)
@given(st.integers(2, 20), st.floats(0.05, 10.0), st.integers(0, 2**31))
def test_dirichlet_proportions_moments(clients: int, alpha: float, seed: int) -> None:
    draws = 4000
    props = dirichlet_proportions(draws, clients, alpha, np.random.default_rng(seed))
    assert props.shape == (draws, clients)
    np.testing.assert_allclose(props.sum(axis=1), 1.0, atol=1e-9)
    assert (props >= 0).all()
    mean_expected = 1.0 / clients
    var_expected = (clients - 1) / (clients**2 * (clients * alpha + 1))
    # per-client mean within 6 standard errors, pooled variance within 12%
    se = np.sqrt(var_expected / draws)
    assert np.abs(props.mean(axis=0) - mean_expected).max() < 6 * se
    assert props.var() == pytest.approx(var_expected, rel=0.12)


def test_smaller_alpha_gives_more_skewed_clients() -> None:
    rng = np.random.default_rng(0)
    alphas = [0.05, 0.3, 1.0, 10.0, 100.0]
    top_share = [dirichlet_proportions(2000, 10, a, rng).max(axis=1).mean() for a in alphas]
    assert top_share == sorted(top_share, reverse=True)
    # and on a real partition: the average number of classes a client effectively holds
    labels = np.repeat(np.arange(10), 200)

    def effective_classes(alpha: float) -> float:
        parts = dirichlet(labels, 10, np.random.default_rng(1), alpha=alpha)
        out = []
        for p in parts:
            share = np.bincount(labels[p], minlength=10) / len(p)
            out.append(1.0 / np.sum(share**2))
        return float(np.mean(out))

    eff = [effective_classes(a) for a in alphas]
    assert eff == sorted(eff)
    assert eff[0] < 2.5 and eff[-1] > 9.0


def test_tiny_alpha_stays_finite() -> None:
    props = dirichlet_proportions(50, 5, 1e-4, np.random.default_rng(0))
    assert np.isfinite(props).all()
    np.testing.assert_allclose(props.sum(axis=1), 1.0)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda r: iid(np.zeros(5), 10, r), "need 10 samples but the pool has 5"),
        (lambda r: iid(np.zeros(5), 0, r), "at least one client"),
        (
            lambda r: dirichlet(np.zeros(30), 10, r, alpha=0.01, min_per_client=3),
            "fewer than partition.min_per_client=3",
        ),
        (lambda r: dirichlet_proportions(3, 3, 0.0, r), "partition.alpha=0.0"),
        (lambda r: dominant(np.r_[np.zeros(50), 1], 4, r, dominant_fraction=0.9), "dominant"),
        (lambda r: one_class(np.r_[np.zeros(50), 1], 4, r), "client 3 only 0 samples"),
        (lambda r: partition("blocks", np.zeros(4), 2, r), "unknown partition.scheme"),
    ],
)
def test_errors_are_one_line(call: object, needle: str) -> None:
    with pytest.raises(DataError) as err:
        call(np.random.default_rng(0))  # type: ignore[operator]
    assert needle in str(err.value)
    assert "\n" not in str(err.value)
