from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedad.core.aggregate import (
    normalized_weights,
    weighted_mean,
    weighted_mean_dicts,
    weighted_sum,
)


def test_weighted_mean_exact_numbers() -> None:
    a = np.array([1.0, 2.0], dtype=np.float32)
    b = np.array([4.0, 8.0], dtype=np.float32)
    # weights 1 and 3: (1*1 + 3*4)/4 = 3.25, (1*2 + 3*8)/4 = 6.5
    out = weighted_mean([a, b], [1, 3])
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, np.array([3.25, 6.5], dtype=np.float32))


def test_weighted_mean_dicts_exact_numbers() -> None:
    d1 = {"w": np.array([[0.0, 10.0]]), "b": np.array([2.0])}
    d2 = {"w": np.array([[10.0, 0.0]]), "b": np.array([4.0])}
    out = weighted_mean_dicts([d1, d2], [100, 300])
    np.testing.assert_array_equal(out["w"], [[7.5, 2.5]])
    np.testing.assert_array_equal(out["b"], [3.5])


def test_weighted_sum() -> None:
    np.testing.assert_array_equal(weighted_sum([np.ones(3), 2 * np.ones(3)]), [3.0, 3.0, 3.0])


@pytest.mark.parametrize("bad", [[0, 0], [-1, 2], [], [np.nan, 1]])
def test_bad_weights_raise(bad: list[float]) -> None:
    with pytest.raises(ValueError):
        normalized_weights(bad)


def test_mismatched_shapes_and_keys_raise() -> None:
    with pytest.raises(ValueError):
        weighted_mean([np.ones(2), np.ones(3)], [1, 1])
    with pytest.raises(ValueError):
        weighted_mean_dicts([{"a": np.ones(1)}, {"b": np.ones(1)}], [1, 1])


@given(
    st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=6),
    st.lists(st.integers(1, 1000), min_size=6, max_size=6),
)
def test_weighted_mean_is_convex_combination(values: list[float], weights: list[int]) -> None:
    arrays = [np.array([v]) for v in values]
    w = weights[: len(values)]
    out = weighted_mean(arrays, w)[0]
    assert min(values) - 1e-9 <= out <= max(values) + 1e-9
    assert out == pytest.approx(np.dot(values, w) / sum(w), rel=1e-12, abs=1e-9)
