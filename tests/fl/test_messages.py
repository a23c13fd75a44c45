from __future__ import annotations

import numpy as np
import pytest

from fedad.fl.messages import Message, prefixed, unprefixed
from fedad.fl.validate import ArraySpec, check_reply, spec_of


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


@pytest.mark.parametrize(
    "arrays,why",
    [
        ({"w": np.full((2, 2), np.nan, np.float32)}, "NaN"),
        ({"w": np.full((2, 2), np.inf, np.float32)}, "NaN or Inf"),
        ({"w": np.zeros((3, 2), np.float32)}, "shape"),
        ({"w": np.zeros((2, 2), np.float64)}, "dtype"),
        ({}, "missing"),
    ],
)
def test_check_reply_rejects_malformed(arrays: dict[str, np.ndarray], why: str) -> None:
    spec = {"w": ArraySpec((2, 2), "float32")}
    reason = check_reply(Message("train", arrays, {"num_examples": 3}), spec, ["num_examples"])
    assert reason is not None and why.split()[0] in reason


def test_check_reply_accepts_good_and_checks_scalars() -> None:
    good = {"w": np.zeros((2, 2), np.float32)}
    spec = spec_of(good)
    assert check_reply(Message("train", good, {"num_examples": 3}), spec, ["num_examples"]) is None
    assert check_reply(Message("train", good, {}), spec, ["num_examples"]) is not None
    bad_n = Message("train", good, {"num_examples": float("nan")})
    assert check_reply(bad_n, spec, ["num_examples"]) is not None
    assert check_reply(Message("other", good, {"num_examples": 1}), spec, kind="train") is not None
