"""``engine.workers``: clients in worker processes give the results of one process."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from fedad.config import AttackConfig, PrivacyConfig, parse_config
from fedad.core.algorithm import ClientState, Handler, ServerResult
from fedad.core.context import ServerContext
from fedad.core.errors import ConfigError
from fedad.core.messages import Message
from fedad.core.types import ClientData
from fedad.core.validate import ArraySpec
from fedad.federation import build_federation
from fedad.fl.engine import run_inprocess
from fedad.fl.workers import resolve_workers
from tests.conftest import make_federation
from tests.fl.test_engine import MeanAlgorithm, _algo


@pytest.fixture
def one_thread() -> object:
    """Compare at equal threads per client: torch's float32 reductions may differ in the
    last bits between thread counts (the pool gives each worker threads // workers)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _fed_and_algo(method: str, detector: str) -> tuple[object, object]:
    raw = {
        "seed": 4, "rounds": 3,
        "data": {"name": "digits", "normal": [0, 1, 2], "anomaly": [7], "max_test": 120},
        "partition": {"scheme": "dirichlet", "clients": 5, "contamination": 0.02},
        "methods": [{"name": method, "detector": detector, "params": {"local_epochs": 1}}],
    }  # fmt: skip
    cfg = parse_config(raw)
    fed = build_federation(cfg)
    from fedad.resolve import build_algorithms

    return fed, next(iter(build_algorithms(cfg, fed).values()))


@pytest.mark.parametrize(("method", "detector"), [("fedavg", "autoencoder"),
                                                   ("fedprox", "deepsvdd")])  # fmt: skip
def test_two_workers_equal_one_process_bit_for_bit(
    one_thread: object, method: str, detector: str
) -> None:
    fed, _ = _fed_and_algo(method, detector)
    kw = {"rounds": 3, "seed": 4, "fraction": 0.6, "dropout": 0.2,
          "attack": AttackConfig(kind="sign-flip", clients=1),
          "privacy": PrivacyConfig(mechanism="gaussian", noise_multiplier=0.1,
                                   noise_source="seeded")}  # fmt: skip
    one = run_inprocess(_fed_and_algo(method, detector)[1], fed, **kw)  # type: ignore[arg-type]
    two = run_inprocess(_fed_and_algo(method, detector)[1], fed, workers=2, **kw)  # type: ignore[arg-type]
    assert one.bytes_up == two.bytes_up and one.bytes_down == two.bytes_down
    assert [r.get("clients_replied") for r in one.history] == [
        r.get("clients_replied") for r in two.history
    ]
    assert one.evaluations.keys() == two.evaluations.keys()
    for cid in one.evaluations:
        for key, arr in one.evaluations[cid].arrays.items():
            np.testing.assert_array_equal(arr, two.evaluations[cid].arrays[key], err_msg=key)
    for key, arr in one.result.arrays.items():
        np.testing.assert_array_equal(arr, two.result.arrays[key])
    assert two.client_seconds > 0 and two.client_states == {}


class DyingAlgorithm(MeanAlgorithm):
    """Client 1's process exits in round 2 (a crash the worker cannot catch)."""

    name = "test-dying"

    def handlers(self) -> dict[str, Handler]:
        return {**super().handlers(), "train": self.dying_train}

    def dying_train(self, state: ClientState, data: ClientData, msg: Message) -> Message:
        if data.client_id == 1 and int(msg.get("round", 0)) == 2:
            os._exit(3)
        return self.client_train(state, data, msg)

    def server(self, ctx: ServerContext) -> ServerResult:
        mean = np.zeros(6, np.float32)
        for r in range(1, ctx.rounds + 1):
            ctx.send({i: Message("train", {"mean": mean}, {"round": r}) for i in ctx.sample()},
                     arrays={"mean": ArraySpec((6,), "float32")},
                     scalars=["num_examples"])  # fmt: skip
            ctx.end_round(r)
        return ServerResult({"mean": mean}, {})


def test_a_killed_worker_is_its_clients_failure_and_the_run_goes_on() -> None:
    fed = make_federation("vector", clients=4)
    base = _algo(fed)
    out = run_inprocess(DyingAlgorithm(base.params, base.setup), fed, rounds=3, seed=0,
                        workers=2)  # fmt: skip
    died = [e for e in out.events if "its worker process died (exit code 3)" in e]
    assert died and died[0].startswith("node 1 failed in 'train'")
    # the round went on: the other clients answered in round 2, client 1 again in round 3
    replied = [int(r["clients_replied"]) for r in out.history]
    assert replied == [4, 3, 4]
    assert set(out.evaluations) == {0, 1, 2, 3}


def test_an_algorithm_workers_cannot_take_runs_in_one_process(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fed = make_federation("vector", clients=3)
    algo = _algo(fed)
    algo.unpicklable = lambda: None  # type: ignore[attr-defined]
    out = run_inprocess(algo, fed, rounds=1, seed=0, workers=2)
    assert set(out.evaluations) == {0, 1, 2}
    assert "running its clients in this process" in caplog.text


def test_workers_config() -> None:
    assert resolve_workers("auto") >= 1 and resolve_workers(3) == 3
    base = {"data": {"name": "digits", "normal": [0], "anomaly": [1]},
            "methods": [{"name": "fedavg", "detector": "autoencoder"}]}  # fmt: skip
    assert parse_config(base | {"engine": {"workers": "auto"}}).engine.workers == "auto"
    with pytest.raises(ConfigError, match="workers"):
        parse_config(base | {"engine": {"workers": 0}})


def test_one_pool_serves_every_method_of_a_run(one_thread: object, tmp_path: object) -> None:
    from pathlib import Path

    from fedad.runner import run_experiment

    raw = {
        "seed": 1, "rounds": 2,
        "data": {"name": "odds_ionosphere"},
        "partition": {"scheme": "iid", "clients": 4},
        "engine": {"progress": False},
        "methods": [{"name": "fedavg", "detector": "autoencoder"},
                    {"name": "local", "detector": "deepsvdd"}],
    }  # fmt: skip
    root = Path(str(tmp_path))
    one = run_experiment(parse_config(raw), root / "one")
    raw["engine"] = {"progress": False, "workers": 2}
    two = run_experiment(parse_config(raw), root / "two")
    for label in ("fedavg", "local"):
        assert one["methods"][label]["auroc"] == two["methods"][label]["auroc"]
        assert one["methods"][label]["bytes_up"] == two["methods"][label]["bytes_up"]
    a, b = np.load(root / "one" / "scores.npz"), np.load(root / "two" / "scores.npz")
    assert all(np.array_equal(a[k], b[k]) for k in a.files)
