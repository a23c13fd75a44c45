"""SecAgg+ arithmetic (fedad.fl.secagg): error bound, quantization range, reply checks.

The aggregate is compared with the exact weighted mean; the protocol itself (keys, masks,
shares) is exercised in ``tests/fl/flower/test_secagg.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedad.core.messages import Message
from fedad.core.validate import ArraySpec, spec_of
from fedad.fl.secagg import (
    MAX_QUANTIZATION,
    MODULUS,
    SecAggSettings,
    check_secure_reply,
    error_bound,
    flatten,
    quantization_range,
    reply_nbytes,
    secure_mean,
    unflatten,
)

pytest.importorskip("flwr", reason="the arithmetic uses Flower's quantizer")


@given(st.integers(1, 100_000))
def test_quantization_range_is_the_largest_that_cannot_wrap(n: int) -> None:
    r = quantization_range(n)
    assert r & (r - 1) == 0  # a power of two
    assert n * r < MODULUS  # the sum of n entries in [0, R] never wraps around 2^32
    assert r == MAX_QUANTIZATION or n * 2 * r >= MODULUS  # and no larger one would do


def test_quantization_range_examples() -> None:
    # 2^28 up to 15 clients: a step of 16 / 2^28 = 6e-8 at the default clip of 8
    assert [quantization_range(n) for n in (2, 3, 10, 15, 16, 1000, 1024)] == [
        2**30,
        2**30,
        2**28,
        2**28,
        2**27,
        2**22,
        2**21,
    ]


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(2, 12),
    dim=st.integers(1, 40),
    scale=st.floats(0.01, 7.0),
    seed=st.integers(0, 2**31),
)
def test_secure_mean_is_within_the_stated_bound_of_the_exact_mean(
    n: int, dim: int, scale: float, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    vectors = [[rng.uniform(-scale, scale, size=dim).astype(np.float32)] for _ in range(n)]
    weights = [float(w) for w in rng.integers(1, 5000, size=n)]
    max_weight = max(weights)
    seeds = [int(s) for s in rng.integers(0, 2**32 - 1, size=n)]
    got = secure_mean(vectors, weights, seeds, max_weight, clip=8.0, n_sampled=n)[0]
    w = np.asarray(weights)
    exact = sum(wk * v[0].astype(np.float64) for wk, v in zip(w, vectors, strict=True)) / w.sum()
    bound = error_bound(vectors, weights, max_weight, 8.0, quantization_range(n))
    assert np.max(np.abs(got - exact)) <= bound
    assert bound < 2e-6  # and the bound itself is tiny at these sizes


def test_bound_grows_when_the_weight_bound_is_loose() -> None:
    vectors = [[np.ones(3, np.float32)], [np.zeros(3, np.float32)]]
    tight = error_bound(vectors, [10.0, 20.0], 20.0, 8.0, 2**30)
    loose = error_bound(vectors, [10.0, 20.0], 20_000.0, 8.0, 2**30)
    assert loose > 500 * tight


def test_stochastic_rounding_is_unbiased() -> None:
    """One value between two grid points: its average over many seeds is the value."""
    x = [np.array([0.123456789], np.float64)]
    target = 2**12  # a coarse grid, so the rounding is visible
    from fedad.fl.secagg import client_vector, server_mean

    outs = [
        server_mean(client_vector(x, 1.0, 1.0, 8.0, target, s), 1, 8.0, target)[0][0]
        for s in range(4000)
    ]
    step = 16 / target
    assert np.ptp(outs) == pytest.approx(step, rel=1e-6)  # two neighbouring grid points
    assert abs(np.mean(outs) - x[0][0]) < 4 * step / np.sqrt(4000)


def test_clipping_applies_to_the_weighted_entries() -> None:
    big = [[np.array([20.0, -20.0, 3.0], np.float32)], [np.zeros(3, np.float32)]]
    got = secure_mean(big, [1.0, 1.0], [1, 2], 1.0, clip=8.0, n_sampled=2)[0]
    np.testing.assert_allclose(got, [4.0, -4.0, 1.5], atol=1e-6)  # (+-8 + 0) / 2


def test_same_seeds_same_aggregate_other_seeds_other_rounding() -> None:
    rng = np.random.default_rng(0)
    vectors = [[rng.normal(size=50).astype(np.float32)] for _ in range(3)]
    a = secure_mean(vectors, [3.0, 4.0, 5.0], [7, 8, 9], 5.0, 8.0, 3)[0]
    b = secure_mean(vectors, [3.0, 4.0, 5.0], [7, 8, 9], 5.0, 8.0, 3)[0]
    c = secure_mean(vectors, [3.0, 4.0, 5.0], [1, 2, 3], 5.0, 8.0, 3)[0]
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_flatten_round_trip_keeps_shapes_and_dtypes() -> None:
    arrays = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array(1.5)}
    spec = spec_of(arrays)
    vecs = flatten(arrays, list(spec))
    assert all(v.ndim == 1 for v in vecs)
    back = unflatten(vecs, spec)
    for k, a in arrays.items():
        assert back[k].dtype == a.dtype and back[k].shape == a.shape
        np.testing.assert_array_equal(back[k], a)


def test_reply_bytes_are_int64_entries_plus_factor_plus_clear_scalars() -> None:
    spec = {"w": ArraySpec((2, 3), "float32"), "b": ArraySpec((3,), "float32")}
    assert reply_nbytes(spec, {"num_examples": 4, "loss": 0.5}) == 8 * (9 + 1) + 16


SPEC = {"w": ArraySpec((2,), "float32")}


@pytest.mark.parametrize(
    ("arrays", "scalars", "why"),
    [
        ({"w": np.ones(2, np.float32)}, {"num_examples": 5}, None),
        ({"w": np.ones(2, np.float32)}, {"num_examples": 5.0}, None),
        ({"w": np.ones(3, np.float32)}, {"num_examples": 5}, "shape"),
        ({"w": np.array([1, np.nan], np.float32)}, {"num_examples": 5}, "NaN"),
        ({"w": np.ones(2, np.float32), "x": np.ones(1)}, {"num_examples": 5}, "unexpected"),
        ({"w": np.ones(2, np.float32)}, {}, "num_examples"),
        ({"w": np.ones(2, np.float32)}, {"num_examples": 2.5}, "whole number"),
        ({"w": np.ones(2, np.float32)}, {"num_examples": 11}, "exceeds the announced bound"),
    ],
)
def test_check_secure_reply(arrays: dict, scalars: dict, why: str | None) -> None:
    got = check_secure_reply(Message("train", arrays, scalars), SPEC, [], "train", 10.0)
    if why is None:
        assert got is None
    else:
        assert got is not None and why in got


def test_integer_arrays_cannot_be_averaged_securely() -> None:
    spec = {"c": ArraySpec((2,), "int64")}
    msg = Message("train", {"c": np.ones(2, np.int64)}, {"num_examples": 1})
    assert "floating point" in str(check_secure_reply(msg, spec, [], "train", 1.0))


@pytest.mark.parametrize(
    ("shares", "threshold", "n", "expected"),
    [
        (1.0, 0.5, 3, (3, 2)),
        (1.0, 0.5, 10, (10, 5)),
        (0.3, 0.5, 10, (3, 2)),
        (5, 3, 10, (5, 3)),
        ("auto", 0.5, 15, (15, 8)),  # everybody up to 15 clients
        ("auto", 0.5, 16, (15, 8)),  # then max(15, 2 ceil(log2 n) + 1) neighbours
        ("auto", 0.5, 129, (17, 8)),
        ("auto", 0.5, 100, (15, 8)),
        ("auto", 0.5, 1000, (21, 10)),
    ],
)
def test_protocol_sizes(shares: float, threshold: float, n: int, expected: tuple[int, int]) -> None:
    assert SecAggSettings(8.0, shares, threshold).protocol_sizes(n) == expected
