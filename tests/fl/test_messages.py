from __future__ import annotations

import numpy as np
import pytest

from fedad.fl.messages import Message, prefixed, unprefixed


def test_nbytes_is_sum_of_array_sizes() -> None:
    m = Message("train", {"a": np.zeros((3, 4), np.float32), "b": np.zeros(5, np.float64)})
    assert m.nbytes == 3 * 4 * 4 + 5 * 8


def test_nbytes_counts_scalars() -> None:
    m = Message("train", {}, {"round": 3, "loss": 0.5, "flag": True, "name": "héllo"})
    assert m.nbytes == 8 + 8 + 8 + len("héllo".encode())


def test_message_is_frozen_and_copy_is_deep() -> None:
    a = np.arange(3.0)
    m = Message("x", {"a": a})
    with pytest.raises(TypeError):
        m.arrays["b"] = a  # type: ignore[index]
    c = m.copy()
    c.arrays["a"][0] = 99
    assert m.arrays["a"][0] == 0


def test_numpy_scalars_become_python_and_bad_scalars_raise() -> None:
    m = Message("x", {}, {"n": np.int64(4)})
    assert type(m.scalars["n"]) is int
    with pytest.raises(TypeError):
        Message("x", {}, {"bad": [1, 2]})  # type: ignore[dict-item]


def test_prefix_roundtrip() -> None:
    d = {"w": np.ones(2)}
    assert unprefixed(prefixed(d, "model"), "model").keys() == d.keys()
