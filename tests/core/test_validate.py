"""Reply validation: array specs (free dimensions included) and scalars (negative allowed)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest

from fedad.core.context import ServerContext
from fedad.core.messages import Message
from fedad.core.secagg import WEIGHT, check_secure_reply
from fedad.core.validate import (
    NON_NEGATIVE,
    ArraySpec,
    check_reply,
    outlying_updates,
    spec_of,
    update_norms,
)

GOOD = {"w": np.zeros((2, 2), np.float32)}


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
    spec = spec_of(GOOD)
    assert check_reply(Message("train", GOOD, {"num_examples": 3}), spec, ["num_examples"]) is None
    assert check_reply(Message("train", GOOD, {}), spec, ["num_examples"]) is not None
    bad_n = Message("train", GOOD, {"num_examples": float("nan")})
    assert check_reply(bad_n, spec, ["num_examples"]) is not None
    assert check_reply(Message("other", GOOD, {"num_examples": 1}), spec, kind="train") is not None


def test_undeclared_numeric_arrays_must_still_be_finite() -> None:
    reply = Message("train", {**GOOD, "extra": np.array([1.0, np.inf])}, {})
    assert "extra" in (check_reply(reply, spec_of(GOOD)) or "")


# -- scalars ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [-0.5, -1, -1e300, -(10**400), 0, 0.0, 2.5, 10**400])
def test_finite_scalars_of_any_sign_and_size_pass(value: float) -> None:
    """A flow's negative log-likelihood is a legitimate loss; Python ints are exact."""
    reply = Message("train", {}, {"nll": value, "num_examples": 4})
    assert check_reply(reply, scalars=["nll", "num_examples"]) is None


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_scalars_are_rejected(value: float) -> None:
    why = check_reply(Message("train", {}, {"nll": value}), scalars=["nll"])
    assert why is not None and "not finite" in why and "'nll'" in why


@pytest.mark.parametrize("value", [True, False, "1.0", None])
def test_scalars_that_are_not_numbers_are_rejected(value: object) -> None:
    scalars = {} if value is None else {"nll": value}
    reply = Message("train", {}, scalars)  # type: ignore[arg-type]
    why = check_reply(reply, scalars=["nll"])
    assert why is not None and "not a number" in why


@pytest.mark.parametrize("value", [-1, -0.5, -(10**400)])
def test_the_example_count_stays_non_negative(value: float) -> None:
    """``num_examples`` weighs every mean: a negative one is refused by default."""
    assert "num_examples" in NON_NEGATIVE and WEIGHT in NON_NEGATIVE
    reply = Message("train", {}, {"num_examples": value, "nll": value})
    why = check_reply(reply, scalars=["num_examples", "nll"])
    assert why is not None and "'num_examples'" in why and "negative" in why
    # only the names declared non-negative are held to it
    assert check_reply(reply, scalars=["nll"]) is None
    assert check_reply(reply, scalars=["num_examples"], non_negative=()) is None
    assert check_reply(reply, scalars=["nll"], non_negative={"nll"}) is not None


def test_a_secure_mean_still_refuses_a_negative_weight() -> None:
    spec = {"w": ArraySpec((2,), "float32")}
    ok = Message("train", {"w": np.zeros(2, np.float32)}, {WEIGHT: 3, "loss": -2.0})
    assert check_secure_reply(ok, spec, ["loss"], "train", 10) is None
    bad = Message("train", {"w": np.zeros(2, np.float32)}, {WEIGHT: -3, "loss": -2.0})
    assert "negative" in (check_secure_reply(bad, spec, ["loss"], "train", 10) or "")


# -- array specs with free dimensions --------------------------------------------------------


@pytest.mark.parametrize("rows", [0, 1, 7])
def test_a_free_dimension_matches_any_size(rows: int) -> None:
    spec = {"x": ArraySpec((None, 3), "float32")}
    reply = Message("upload", {"x": np.zeros((rows, 3), np.float32)}, {})
    assert check_reply(reply, spec) is None


@pytest.mark.parametrize(
    "array,why",
    [
        (np.zeros((4, 2), np.float32), "shape (4, 2), expected (any, 3)"),
        (np.zeros(3, np.float32), "shape (3,), expected (any, 3)"),
        (np.zeros((1, 4, 3), np.float32), "shape (1, 4, 3), expected (any, 3)"),
        (np.zeros((4, 3), np.float64), "dtype float64, expected float32"),
        (np.full((4, 3), np.nan, np.float32), "NaN"),
    ],
)
def test_a_free_dimension_fixes_rank_dtype_and_the_other_sizes(array: np.ndarray, why: str) -> None:
    spec = {"x": ArraySpec((None, 3), "float32")}
    assert why in (check_reply(Message("upload", {"x": array}, {}), spec) or "")


def test_array_spec_declarations() -> None:
    a = np.zeros((5, 3, 2), np.float64)
    s = ArraySpec.of(a, free=[0, -1])
    assert s == ArraySpec((None, 3, None), "float64")
    assert hash(s) == hash(ArraySpec((None, 3, None), "float64"))
    assert s.dims == (None, 3, None) and s.free == frozenset({0, 2}) and not s.fixed
    assert s.shape == (0, 3, 0)  # sizes; free axes read 0 and are listed in `free`
    assert repr(s) == "ArraySpec((None, 3, None), 'float64')"
    assert ArraySpec.of(a).fixed and ArraySpec.of(a) == ArraySpec((5, 3, 2), "float64")
    assert ArraySpec((np.int64(2),), "int64").shape == (2,)
    assert ArraySpec((2, 3), "f4").with_free(1) == ArraySpec((2, None), "f4")
    assert ArraySpec((), "float32").shape_text() == "()"
    with pytest.raises(IndexError):
        ArraySpec((2, 3), "f4").with_free(2)
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="size >= 0 or None"):
            ArraySpec((bad,), "float32")  # type: ignore[arg-type]


def test_spec_of_with_free_axes() -> None:
    x0 = np.zeros((10, 4), np.float32)
    spec = spec_of({"x": x0, "y": np.zeros(10, np.int64)}, free={"x": [0]})
    assert spec == {"x": ArraySpec((None, 4), "float32"), "y": ArraySpec((10,), "int64")}
    with pytest.raises(KeyError, match="unknown"):
        spec_of({"x": x0}, free={"z": [0]})


class _Grid:
    """Answers each message with a preset reply."""

    def __init__(self, replies: Mapping[int, Message]) -> None:
        self.replies = dict(replies)
        self.bytes_up = 0
        self.bytes_down = 0

    def get_node_ids(self) -> list[int]:
        return sorted(self.replies)

    def send_and_receive(
        self, messages: Mapping[int, Message], timeout: float | None = None
    ) -> dict[int, Message]:
        return {i: self.replies[i] for i in sorted(messages) if i in self.replies}


def test_a_phase_declares_free_dimensions_and_negative_losses_pass() -> None:
    """Per phase: a server program's ``send`` declares the variable row count of an upload."""

    def upload(rows: int, cols: int, nll: float) -> Message:
        return Message("upload", {"x": np.ones((rows, cols), np.float32)}, {"nll": nll})

    grid = _Grid({0: upload(2, 3, -4.5), 1: upload(5, 3, 1.0), 2: upload(5, 4, -1.0)})
    ctx = ServerContext(grid, rounds=1, seed=0)
    got = ctx.send(
        {i: Message("upload") for i in grid.get_node_ids()},
        arrays={"x": ArraySpec((None, 3), "float32")},
        scalars=["nll"],
    )
    assert sorted(got) == [0, 1]
    assert [len(m.arrays["x"]) for m in got.values()] == [2, 5]
    assert ctx.events == [
        "round 1: rejected reply of node 2: array 'x' has shape (5, 4), expected (any, 3)"
    ]


# ------------------------------------------------------------------- update norm bounds


def _update(w: np.ndarray, u: float, dtype: str = "float32") -> Message:
    return Message("train", {"w": (w + u).astype(dtype), "n": np.arange(3)}, {})


def test_update_norms_are_exact_and_do_not_overflow() -> None:
    sent = {"w": np.full(4, 2.0, np.float32), "other": np.zeros(1, np.float32)}
    norm, base = update_norms(sent, {"w": np.full(4, 5.0, np.float32), "new": np.ones(9)})
    assert norm == pytest.approx(np.hypot(3.0 * 2, 3.0)) and base == pytest.approx(4.0)
    huge = {"w": np.full(4, 1e300)}  # squares overflow float64; the scaled norm does not
    assert update_norms({}, huge)[0] == pytest.approx(2e300)
    assert update_norms({"w": np.full(4, -1.7e308)}, {"w": np.full(4, 1.7e308)})[0] == np.inf


def test_outlying_updates_bound_each_reply_by_its_model_and_by_the_others() -> None:
    w = np.ones(100, np.float32)  # norm 10
    sent = {i: Message("train", {"w": w}) for i in range(4)}
    honest = {i: _update(w, 0.01 * (i + 1)) for i in range(3)}  # norms 0.1 .. 0.3
    assert outlying_updates(sent, honest) == {}
    boosted = {**honest, 3: _update(w, 10.0)}  # 1000x a scaled-update of scale ~300: kept
    assert outlying_updates(sent, boosted) == {}
    absurd = {**honest, 3: _update(w, 1e30)}
    why = outlying_updates(sent, absurd)
    assert list(why) == [3] and "exceeds 1e+06 x max(1, 10)" in why[3]
    outlier = {**honest, 3: _update(w, 1e4)}  # norm 1e5: 5e5 x the others' median 0.2
    why = outlying_updates(sent, outlier)
    assert list(why) == [3] and "the median of the other replies'" in why[3]
    everyone = {i: _update(w, 1e30) for i in range(4)}  # all attacked: the model bound holds
    assert sorted(outlying_updates(sent, everyone)) == [0, 1, 2, 3]
    wide = {i: _update(w.astype(np.float64), 1e300, "float64") for i in range(2)}
    assert sorted(outlying_updates(sent, wide)) == [0, 1]


def test_small_updates_beside_zero_ones_are_not_outliers() -> None:
    """A client that did not move (update 0) must not make an ordinary update an outlier."""
    w = np.ones(100, np.float32)
    sent = {i: Message("train", {"w": w}) for i in range(3)}
    replies = {0: _update(w, 0.0), 1: _update(w, 0.0), 2: _update(w, 0.05)}
    assert outlying_updates(sent, replies) == {}


def test_the_server_rejects_an_absurd_update_of_an_update_phase_only() -> None:
    w = np.ones(16, np.float32)
    grid = _Grid({0: _update(w, 0.1), 1: _update(w, 0.2), 2: _update(w, 1e30)})
    ctx = ServerContext(grid, rounds=1, seed=0)
    msgs = {i: Message("train", {"w": w}) for i in grid.get_node_ids()}
    assert sorted(ctx.send(msgs)) == [0, 1, 2]  # not an update phase: no norm check
    ctx.update_phases = ("train",)
    assert sorted(ctx.send(msgs)) == [0, 1]
    assert ctx.events[-1].startswith("round 1: rejected reply of node 2: its update's norm 4e+30")
    assert ctx.end_round(1)["clients_rejected"] == 1
