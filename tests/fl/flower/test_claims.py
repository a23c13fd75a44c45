"""Which node holds which client, fast (the fake Flower grid, no processes).

* A partition claimed by two nodes stops the run before round 1, in one line naming both
  Flower nodes; so does a node that claims a partition outside the run's range. Nothing is
  trained: no train message is ever sent.
* A node that connects during the run while every client has its node is not asked and
  gets no task; it is named on the console (a warning) and in the method's events.
* A node that does not answer the handshake is named likewise.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import pytest

from fedad.config import parse_config

flwr = pytest.importorskip("flwr", reason="flwr (the flower extra) is not installed")

from flwr.app import Message as FlowerMessage  # noqa: E402

from fedad.federation import build_federation  # noqa: E402
from fedad.fl.flower.server import serve  # noqa: E402
from fedad.fl.flower.spec import FlowerRunError, RunSpec  # noqa: E402
from fedad.resolve import build_algorithms  # noqa: E402
from tests.fl.flower.fake_flower import FakeFlowerGrid, as_server_app  # noqa: E402

CFG = {
    "seed": 3,
    "rounds": 2,
    "data": {
        "name": "digits",
        "normal": [0, 1, 2],
        "anomaly": [7, 8],
        "max_train_per_client": 40,
        "max_test": 60,
    },
    "partition": {"scheme": "iid", "clients": 3, "contamination": 0.05},
    "engine": {"timeout": 0.5},
    "methods": [{"name": "fedavg", "detector": "autoencoder", "params": {"batch_size": 16}}],
}


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    as_server_app(monkeypatch)


def _spec() -> tuple[RunSpec, Any]:
    cfg = parse_config(CFG)
    alg = build_algorithms(cfg, build_federation(cfg))["fedavg"]
    return RunSpec.build(cfg, alg), alg


def _trained(fake: FakeFlowerGrid) -> list[tuple[int, str]]:
    return [d for d in fake.delivered if d[1] != "query.fedad_hello"]


@pytest.mark.parametrize("extra", [4242, 17])  # the intruder's Flower id after or before
def test_a_partition_claimed_twice_stops_the_run_before_training(extra: int) -> None:
    spec, alg = _spec()
    fake = FakeFlowerGrid(spec, claims={extra: 1})
    with pytest.raises(FlowerRunError) as err:
        serve(fake, spec, alg, poll_interval=0.01)
    text = str(err.value)
    assert "\n" not in text
    first, second = sorted([1007, extra])  # the nodes are asked in the order of their ids
    assert f"two nodes claim client 1: Flower nodes {first} and {second}" in text
    assert "--partition-id" in text
    assert _trained(fake) == []  # no node received any task but the handshake


def test_a_partition_outside_the_run_stops_the_run() -> None:
    spec, alg = _spec()
    fake = FakeFlowerGrid(spec, claims={4242: 3})  # the run has clients 0..2
    with pytest.raises(FlowerRunError, match=r"Flower node 4242 holds partition 3 of 3, but"):
        serve(fake, spec, alg, poll_interval=0.01)
    assert _trained(fake) == []


def test_a_node_configured_for_another_federation_stops_the_run() -> None:
    spec, alg = _spec()
    fake = FakeFlowerGrid(spec, node_parts={2: 5})
    with pytest.raises(FlowerRunError, match=r"holds partition 2 of 5, but the run has 3 clients"):
        serve(fake, spec, alg, poll_interval=0.01)
    assert _trained(fake) == []


class LateGrid(FakeFlowerGrid):
    """A node (claiming partition 1, held already) connects once round 1 has begun."""

    def get_node_ids(self) -> list[int]:
        ids = super().get_node_ids()
        return ids if _trained(self) else [n for n in ids if n != 4242]

    def push_messages(self, messages: Iterable[FlowerMessage]) -> list[str]:
        messages = list(messages)
        self.addressed = [
            *getattr(self, "addressed", []),
            *(m.metadata.dst_node_id for m in messages),
        ]
        return super().push_messages(messages)


def test_a_node_that_comes_late_gets_no_task_and_is_named(
    caplog: pytest.LogCaptureFixture,
) -> None:
    spec, alg = _spec()
    fake = LateGrid(spec, claims={4242: 1})
    with caplog.at_level(logging.WARNING, logger="fedad"):
        out = serve(fake, spec, alg, poll_interval=0.01)
    line = (
        "Flower node 4242 connected during the run; every client has its node, so it was "
        "not asked and receives no task"
    )
    assert out.events.count(line) == 1  # named once, not in every phase
    assert line in caplog.messages
    assert out.missing_nodes == []
    assert 4242 not in fake.addressed and 1007 in fake.addressed  # not even a handshake
    assert sorted(out.evaluations) == [0, 1, 2]


def test_a_node_silent_at_the_handshake_is_named(caplog: pytest.LogCaptureFixture) -> None:
    spec, alg = _spec()
    fake = FakeFlowerGrid(spec, dead=[1], hello_from_dead=False)
    with caplog.at_level(logging.WARNING, logger="fedad"):
        out = serve(fake, spec, alg, poll_interval=0.01)
    line = "Flower node 1007 did not answer the handshake in time; it takes no part in the run"
    assert line in out.events and line in caplog.messages
    assert out.missing_nodes == [1]
