"""The round loops of fedad.core.rounds: FedAvg rounds with their hooks, and the end of a round."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import pytest

from fedad.core.algorithm import ServerResult
from fedad.core.context import ServerContext
from fedad.core.messages import Message
from fedad.core.rounds import Arrays, close_round, fedavg_rounds
from fedad.core.validate import ArraySpec

Reply = Callable[[int, Message], Message | None]


class StubGrid:
    """Three nodes answering with ``reply(node, message)`` (``None``: no answer)."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.sent: list[tuple[int, Message]] = []
        self._up = 0
        self._down = 0

    def get_node_ids(self) -> list[int]:
        return [0, 1, 2]

    def send_and_receive(
        self, messages: Mapping[int, Message], timeout: float | None = None
    ) -> dict[int, Message]:
        out = {}
        for nid in sorted(messages):
            self.sent.append((nid, messages[nid]))
            self._down += messages[nid].nbytes
            answer = self.reply(nid, messages[nid])
            if answer is not None:
                self._up += answer.nbytes
                out[nid] = answer
        return out

    @property
    def bytes_up(self) -> int:
        return self._up

    @property
    def bytes_down(self) -> int:
        return self._down


def trained(nid: int, msg: Message) -> Message:
    """Node ``nid`` adds ``nid + 1`` to what it got, weighs ``10 (nid + 1)``, loss ``nid``."""
    arrays = {k: (v + nid + 1).astype(v.dtype) for k, v in msg.arrays.items()}
    return Message(msg.kind, arrays, {"num_examples": 10 * (nid + 1), "loss": float(nid)})


def context(reply: Reply, rounds: int = 2, eval_every: int = 0) -> tuple[ServerContext, StubGrid]:
    grid = StubGrid(reply)
    ctx = ServerContext(grid, rounds=rounds, seed=0)
    if eval_every:
        ctx.eval_every = eval_every
        ctx.evaluator = lambda result: {"eval_w": float(np.sum(result.arrays.get("w", 0.0)))}
    return ctx, grid


W0 = {"w": np.zeros(2, np.float32)}
STEP = (10 * 1 + 20 * 2 + 30 * 3) / 60
"""What the example-weighted mean of the three nodes' replies adds to the model."""


def test_fedavg_rounds_sends_averages_logs_and_closes_every_round() -> None:
    ctx, grid = context(trained)
    out = fedavg_rounds(ctx, dict(W0), "fit")
    np.testing.assert_allclose(out["w"], [2 * STEP, 2 * STEP], rtol=1e-6)
    assert out["w"].dtype == np.float32
    assert [(nid, m.kind, m.scalars["round"]) for nid, m in grid.sent] == [
        (n, "fit", r) for r in (1, 2) for n in (0, 1, 2)
    ]
    np.testing.assert_allclose(grid.sent[3][1].arrays["w"], [STEP, STEP], rtol=1e-6)
    assert [r["round"] for r in ctx.history] == [1, 2]
    assert all(r["loss"] == pytest.approx((20 + 60) / 60) for r in ctx.history)
    assert all(r["clients_replied"] == 3 for r in ctx.history)
    assert ctx.events == []


def test_a_round_without_usable_replies_keeps_the_model_and_says_so() -> None:
    def poisoned(nid: int, msg: Message) -> Message:
        good = trained(nid, msg)
        if msg.scalars["round"] != 2:
            return good
        return Message(good.kind, {"w": np.full(2, np.nan, np.float32)}, good.scalars)

    ctx, _ = context(poisoned, rounds=3)
    out = fedavg_rounds(ctx, dict(W0), unchanged="the head is unchanged")
    np.testing.assert_allclose(out["w"], [2 * STEP, 2 * STEP], rtol=1e-6)
    assert "round 2: no valid replies; the head is unchanged" in ctx.events
    assert "loss" not in ctx.history[1] and ctx.history[1]["clients_rejected"] == 3


def test_with_nothing_to_average_a_round_only_sends_and_logs() -> None:
    seen: list[list[int]] = []
    ctx, grid = context(lambda nid, m: None if nid == 1 else trained(nid, m))
    out = fedavg_rounds(ctx, {}, scalars=["loss"], replied=lambda r: seen.append(sorted(r)))
    assert out == {}
    assert all(not m.arrays for _, m in grid.sent)
    assert seen == [[0, 2], [0, 2]]
    assert [r["loss"] for r in ctx.history] == [pytest.approx(60 / 40)] * 2
    assert ctx.events == [
        "round 1: no reply from node(s) [1]",
        "round 2: no reply from node(s) [1]",
    ]


def test_hooks_choose_the_messages_the_step_and_the_evaluated_state() -> None:
    steps: list[tuple[float, float, list[int]]] = []

    def messages(r: int, weights: Arrays) -> dict[int, Message]:
        return {i: Message("train", {"w": weights["w"]}, {"round": r}) for i in (0, 2)}

    def step(weights: Arrays, mean: Arrays, replies: Mapping[int, Message]) -> Arrays:
        steps.append((float(weights["w"][0]), float(mean["w"][0]), sorted(replies)))
        return {"w": (2 * mean["w"] - weights["w"]).astype(np.float32), "c": weights["c"]}

    def result(weights: Arrays) -> ServerResult:
        return ServerResult({"w": weights["w"] * 0 + 7}, {})

    ctx, grid = context(trained, rounds=3, eval_every=1)
    start = {"w": np.zeros(2, np.float32), "c": np.ones(1)}
    spec = {"w": ArraySpec((2,), "float32")}  # the replies carry no "c"
    out = fedavg_rounds(ctx, start, spec=spec, messages=messages, step=step, result=result,
                        eval_last=False)  # fmt: skip
    assert sorted({nid for nid, _ in grid.sent}) == [0, 2]
    mean1 = (10 * 1 + 30 * 3) / 40
    assert steps[0] == (0.0, pytest.approx(mean1), [0, 2])
    assert steps[1][0] == pytest.approx(2 * mean1)
    np.testing.assert_array_equal(out["c"], [1.0])
    assert [r.get("eval_w") for r in ctx.history] == [14.0, 14.0, None]


@pytest.mark.parametrize(
    ("eval_every", "eval_last", "built"), [(0, True, []), (2, True, [2]), (1, False, [1, 2])]
)
def test_close_round_builds_the_state_only_for_an_evaluation(
    eval_every: int, eval_last: bool, built: list[int]
) -> None:
    ctx, _ = context(trained, rounds=3, eval_every=eval_every)
    calls: list[int] = []
    for r in (1, 2, 3):

        def state(r: int = r) -> ServerResult:
            calls.append(r)
            return ServerResult({"w": np.full(2, float(r))}, {})

        close_round(ctx, r, state, eval_last=eval_last)
    assert calls == built
    assert [row["round"] for row in ctx.history] == [1, 2, 3]
    assert [row.get("eval_w") for row in ctx.history] == [
        2.0 * r if r in built else None for r in (1, 2, 3)
    ]


def test_close_round_takes_a_ready_state_too() -> None:
    ctx, _ = context(trained, rounds=1, eval_every=1)
    close_round(ctx, 1, ServerResult({"w": np.ones(2)}, {}))
    assert ctx.history[0]["eval_w"] == 2.0
