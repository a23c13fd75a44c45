"""Memory-reduce [FedDyMem eq. 13-16] and the server's aggregation [Algorithm 3]."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedad.methods.feddymem.memory import aggregate_banks, memory_reduce, reduce_weights


def test_memory_reduce_against_a_hand_computation() -> None:
    # two samples, K = 2 positions, C = 1 channel
    m = np.array([[[1.0], [0.0]], [[3.0], [4.0]]])
    prev = np.array([[1.0], [0.0]])
    # t = 0: weights 1, plain mean
    np.testing.assert_allclose(memory_reduce(m, None, 0), [[2.0], [2.0]])
    # t = 1: w = (||0||, ||(2, 4)||) = (0, sqrt 20): bar = sample 2; alpha = 1/2
    w = reduce_weights(m, prev)
    np.testing.assert_allclose(w, [0.0, np.sqrt(20.0)])
    np.testing.assert_allclose(memory_reduce(m, prev, 1), [[2.0], [2.0]])  # (3+1)/2, (4+0)/2
    # t = 3: alpha = 1/4
    np.testing.assert_allclose(memory_reduce(m, prev, 3), [[0.25 * 3 + 0.75], [0.25 * 4]])


def test_all_weights_zero_falls_back_to_the_mean() -> None:
    prev = np.ones((3, 2))
    m = np.stack([prev, prev])
    np.testing.assert_allclose(memory_reduce(m, prev, 2), prev)


def test_reduce_needs_the_previous_bank_after_round_zero() -> None:
    with pytest.raises(ValueError, match="previous bank"):
        memory_reduce(np.zeros((1, 2, 2)), None, 1)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 6), st.integers(1, 5), st.integers(0, 20), st.integers(0, 10_000))
def test_round_ema_is_a_convex_combination(n: int, k: int, t: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    m, prev = rng.normal(size=(n, k, 3)), rng.normal(size=(k, 3))
    out = memory_reduce(m, prev if t else None, t)
    w = reduce_weights(m, prev if t else None)
    bar = (w[:, None, None] * m).sum(0) / w.sum() if w.sum() > 0 else m.mean(0)
    alpha = 1.0 / (t + 1)
    want = bar if t == 0 else alpha * bar + (1 - alpha) * prev
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    # permuting the samples changes nothing (the paper's order independence)
    perm = rng.permutation(n)
    np.testing.assert_allclose(memory_reduce(m[perm], prev if t else None, t), out, atol=1e-5)


def test_kmeans_aggregation_shape_determinism_and_centres() -> None:
    rng = np.random.default_rng(0)
    banks = [rng.normal(size=(16, 4)).astype(np.float32) for _ in range(3)]
    a = aggregate_banks(banks, seed=5)
    assert a.shape == (16, 4) and a.dtype == np.float32
    np.testing.assert_array_equal(a, aggregate_banks(banks, seed=5))
    # every centre is a mean of pooled patch features: inside their bounding box
    pooled = np.concatenate(banks)
    assert (a >= pooled.min(0) - 1e-6).all() and (a <= pooled.max(0) + 1e-6).all()
    # identical banks: the centres are the bank's rows, matched back to their positions
    same = aggregate_banks([banks[0]] * 3, seed=1)
    np.testing.assert_allclose(same, banks[0], atol=1e-6)


def test_single_client_bank_is_returned_unchanged_and_mean_ablation() -> None:
    rng = np.random.default_rng(1)
    b = rng.normal(size=(9, 2)).astype(np.float32)
    np.testing.assert_allclose(aggregate_banks([b], seed=0), b, atol=1e-6)
    c = rng.normal(size=(9, 2)).astype(np.float32)
    mean = aggregate_banks([b, c], seed=0, weights=[1, 3], method="mean")
    np.testing.assert_allclose(mean, 0.25 * b + 0.75 * c, atol=1e-6)


def test_matched_order_is_a_permutation_of_kmeans_order() -> None:
    rng = np.random.default_rng(2)
    banks = [rng.normal(size=(12, 3)).astype(np.float32) for _ in range(2)]
    raw = aggregate_banks(banks, seed=3, order="kmeans")
    matched = aggregate_banks(banks, seed=3, order="matched")
    assert sorted(map(tuple, raw.round(5))) == sorted(map(tuple, matched.round(5)))


def test_neighbourhood_mean_equals_the_mean_over_each_positions_neighbours() -> None:
    from fedad.methods.feddymem.detector import neighbourhood_mean

    rng = np.random.default_rng(0)
    f = rng.normal(size=(2, 3, 5, 4)).astype(np.float32)
    got = neighbourhood_mean(f, 3)
    want = np.empty_like(f)
    for i in range(5):
        for j in range(4):  # the 3 x 3 window inside the map (borders: fewer neighbours)
            window = f[:, :, max(i - 1, 0) : i + 2, max(j - 1, 0) : j + 2]
            want[:, :, i, j] = window.mean(axis=(2, 3))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert neighbourhood_mean(f, 1) is f
