from __future__ import annotations

import numpy as np

from fedad.core.aggregate import weighted_mean
from fedad.core.algorithm import Algorithm, ClientState, Handler, Params, ServerResult, Setup
from fedad.core.context import ServerContext
from fedad.core.detector import BaseDetector
from fedad.core.messages import Message
from fedad.core.types import ClientData, Federation
from fedad.core.validate import ArraySpec
from fedad.fl.engine import InProcessGrid, run_inprocess
from tests.conftest import make_federation


class MeanDetector(BaseDetector):
    def __init__(self, mean: list[float] | None = None, contamination: float = 0.05) -> None:
        super().__init__(contamination)
        self.mean = mean

    def fit(self, x: np.ndarray) -> MeanDetector:
        self.mean = x.mean(0).tolist()
        return self.set_threshold(x)

    def score(self, x: np.ndarray) -> np.ndarray:
        return np.linalg.norm(x - np.asarray(self.mean), axis=1)

    def get_params(self) -> dict[str, object]:
        return {"mean": self.mean, "contamination": self.contamination}

    def get_arrays(self) -> dict[str, np.ndarray]:
        return {"mean": np.asarray(self.mean)}

    def set_arrays(self, arrays: dict[str, np.ndarray]) -> MeanDetector:
        self.mean = arrays["mean"].tolist()
        return self


class MeanAlgorithm(Algorithm):
    """Clients send their data mean; the server averages. Client 1 can be made to misbehave."""

    name = "test-mean"
    bad_reply: dict[str, np.ndarray] | None = None

    def handlers(self) -> dict[str, Handler]:
        return {**super().handlers(), "train": self.client_train}

    def client_train(self, state: ClientState, data: ClientData, msg: Message) -> Message:
        if data.client_id == 1 and self.bad_reply is not None:
            return Message("train", self.bad_reply, {"num_examples": data.n_train})
        return Message(
            "train",
            {"mean": data.x_train.mean(0).astype(np.float32)},
            {"num_examples": data.n_train},
        )

    def client_detector(self, state: ClientState, data: ClientData, msg: Message) -> BaseDetector:
        return MeanDetector(msg.arrays["mean"].tolist())

    def make_detector(self) -> BaseDetector:
        return MeanDetector()

    def server(self, ctx: ServerContext) -> ServerResult:
        mean = np.zeros(6, np.float32)
        for r in range(1, ctx.rounds + 1):
            replies = ctx.send(
                {i: Message("train", {"mean": mean}) for i in ctx.sample()},
                arrays={"mean": ArraySpec((6,), "float32")},
                scalars=["num_examples"],
            )
            if replies:
                mean = weighted_mean(
                    [m.arrays["mean"] for m in replies.values()],
                    [float(m.scalars["num_examples"]) for m in replies.values()],
                )
            ctx.end_round(r)
        return ServerResult({"mean": mean}, {})


def _algo(fed: Federation) -> MeanAlgorithm:
    setup = Setup("vector", (6,), rounds=2, seed=0, contamination=0.1, num_clients=3)
    return MeanAlgorithm(Params(), setup)


def test_byte_accounting_is_exact(vector_federation: Federation) -> None:
    out = run_inprocess(_algo(vector_federation), vector_federation, rounds=2, seed=0)
    # down: 3 clients x 2 rounds x 6 float32; up: the same plus the num_examples scalar (8 B)
    assert out.bytes_down == 3 * 2 * 6 * 4
    assert out.bytes_up == 3 * 2 * (6 * 4 + 8)
    assert [r["bytes_down"] for r in out.history] == [72, 72]
    assert sum(r["bytes_up"] for r in out.history) == out.bytes_up


def test_aggregate_equals_pooled_mean(vector_federation: Federation) -> None:
    out = run_inprocess(_algo(vector_federation), vector_federation, rounds=1, seed=0)
    pooled = np.concatenate([c.x_train for c in vector_federation.clients]).mean(0)
    np.testing.assert_allclose(out.result.arrays["mean"], pooled, rtol=1e-5)


def test_malformed_replies_are_rejected_and_round_goes_on(vector_federation: Federation) -> None:
    for bad in (
        {"mean": np.full(6, np.nan, np.float32)},
        {"mean": np.zeros(5, np.float32)},
        {"mean": np.zeros(6, np.float64)},
    ):
        algo = _algo(vector_federation)
        algo.bad_reply = bad
        out = run_inprocess(algo, vector_federation, rounds=2, seed=0)
        assert [r["clients_rejected"] for r in out.history] == [1, 1]
        assert [r["clients_replied"] for r in out.history] == [2, 2]
        assert any("rejected reply of node 1" in e for e in out.events)
        good = [c for c in vector_federation.clients if c.client_id != 1]
        expect = np.concatenate([c.x_train for c in good]).mean(0)
        np.testing.assert_allclose(out.result.arrays["mean"], expect, rtol=1e-5)


def test_sampling_fraction_is_seeded(vector_federation: Federation) -> None:
    fed = make_federation(clients=10)
    a = run_inprocess(_algo(fed), fed, rounds=3, seed=5, fraction=0.3)
    b = run_inprocess(_algo(fed), fed, rounds=3, seed=5, fraction=0.3)
    assert [r["clients_sampled"] for r in a.history] == [3, 3, 3]
    np.testing.assert_array_equal(a.result.arrays["mean"], b.result.arrays["mean"])


def test_dropout_loses_replies_but_not_the_run() -> None:
    fed = make_federation(clients=10)
    out = run_inprocess(_algo(fed), fed, rounds=4, seed=1, dropout=0.5)
    missing = sum(r["clients_missing"] for r in out.history)
    assert 0 < missing < 40
    assert len(out.evaluations) == 10  # evaluation reaches every client


def test_failing_handler_is_a_missing_node(vector_federation: Federation) -> None:
    algo = _algo(vector_federation)
    grid = InProcessGrid(algo, vector_federation)

    def boom(state: ClientState, data: ClientData, msg: Message) -> Message:
        raise RuntimeError("disk full")

    grid.node_handlers[0]["train"] = boom
    replies = grid.send_and_receive({0: Message("train", {"mean": np.zeros(6, np.float32)})})
    assert replies == {}
    assert "disk full" in grid.failures[0]


def test_eval_every_records_curves_without_changing_the_run() -> None:
    from fedad.core.algorithm import build_algorithm

    fed = make_federation(clients=3)
    setup = Setup("vector", (6,), rounds=3, seed=0, contamination=0.1, num_clients=3)
    runs = []
    for every in (0, 1):
        algo = build_algorithm("fedavg", {}, setup)
        runs.append(run_inprocess(algo, fed, rounds=3, seed=0, eval_every=every))
    plain, curves = runs
    assert all("eval_auroc" in r for r in curves.history if r["round"] >= 1)
    assert not any("eval_auroc" in r for r in plain.history)
    assert (plain.bytes_up, plain.bytes_down) == (curves.bytes_up, curves.bytes_down)
    for cid in plain.evaluations:
        np.testing.assert_array_equal(
            plain.evaluations[cid].arrays["score"], curves.evaluations[cid].arrays["score"]
        )
