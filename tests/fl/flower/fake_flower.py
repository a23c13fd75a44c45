"""An in-memory Flower ``Grid`` for fast tests of the Flower adapter (no processes).

:class:`FakeFlowerGrid` serialises every message the way Flower does on the wire
(deflate/inflate of the object tree) and runs the real
:class:`~fedad.fl.flower.app.FedadClientApp` per node with its own ``Context``. Import it
only after ``pytest.importorskip("flwr")``.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from flwr.app import Context, RecordDict
from flwr.app import Message as FlowerMessage
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects
from flwr.supercore.inflatable.inflatable_utils import inflate_object_from_contents

from fedad.fl.flower.app import FedadClientApp
from fedad.fl.flower.spec import RunSpec


def as_server_app(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flower messages take their run id from the process's task identity (a ServerApp's)."""
    from flwr.supercore.task_identity import TaskIdentity

    monkeypatch.setattr(TaskIdentity, "_run_id", 1)
    monkeypatch.setattr(TaskIdentity, "_task_id", 1)
    monkeypatch.setattr(TaskIdentity, "_node_id", 0)


def wire(rd: RecordDict) -> RecordDict:
    """``rd`` after Flower's serialisation: every object deflated to bytes and inflated."""
    contents = {oid: obj.deflate() for oid, obj in get_all_nested_objects(rd).items()}
    out = inflate_object_from_contents(rd.object_id, contents)
    assert isinstance(out, RecordDict)
    return out


class FakeFlowerGrid:
    """Flower's Grid in memory: nodes run the real ClientApp, messages cross a fake wire.

    ``order`` permutes the reply order; ``dead`` nodes answer only the handshake (or
    nothing, without ``hello_from_dead``); ``node_parts`` may misconfigure a node's
    ``num-partitions``; ``claims`` adds nodes (Flower node id -> the partition it claims),
    e.g. a second node for a partition that a node holds already. Like a deployment (unless
    ``sim_spec``), the nodes keep personalised detectors in ``models_dir`` (node config
    ``fedad-models-dir``; default: a temporary directory removed with the grid; ``""`` gives
    the nodes none).
    """

    def __init__(
        self,
        spec: RunSpec,
        partitions: int = 3,
        dead: Iterable[int] = (),
        order: Callable[[list[FlowerMessage]], list[FlowerMessage]] = lambda m: m[::-1],
        node_parts: dict[int, int] | None = None,
        sim_spec: bool = False,
        hello_from_dead: bool = True,
        models_dir: str | Path | None = None,
        claims: dict[int, int] | None = None,
    ) -> None:
        self.hello_from_dead = hello_from_dead
        if models_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="fedad-fake-nodes-")
            models_dir = self._tmp.name
        self.models_dir = Path(models_dir) if models_dir else None
        extra = {"fedad-models-dir": str(models_dir)} if models_dir else {}
        self.app = FedadClientApp(spec if sim_spec else None)
        self.nodes = {1000 + 7 * p: p for p in range(partitions)}  # Flower ids are not ours
        self.nodes.update(claims or {})
        self.contexts = {
            n: Context(
                run_id=1,
                node_id=n,
                node_config={
                    "partition-id": p,
                    "num-partitions": (node_parts or {}).get(p, partitions),
                    **extra,
                },
                state=RecordDict(),
                run_config=spec.to_run_config(),
            )
            for n, p in self.nodes.items()
        }
        self.dead = {n for n, p in self.nodes.items() if p in set(dead)}
        self.order = order
        self.inbox: dict[str, FlowerMessage] = {}
        self.delivered: list[tuple[int, str]] = []

    def get_node_ids(self) -> list[int]:
        return list(self.nodes)

    def push_messages(self, messages: Iterable[FlowerMessage]) -> list[str]:
        ids = []
        for m in messages:
            mid = uuid.uuid4().hex
            m.metadata.__dict__["_message_id"] = mid
            self.inbox[mid] = m
            ids.append(mid)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> list[FlowerMessage]:
        out = []
        for mid in list(message_ids):
            m = self.inbox.pop(mid, None)
            if m is None:
                continue
            hello = m.metadata.message_type == "query.fedad_hello"
            if m.metadata.dst_node_id in self.dead and not (hello and self.hello_from_dead):
                continue
            node = m.metadata.dst_node_id
            self.delivered.append((self.nodes[node], m.metadata.message_type))
            arrived = FlowerMessage(wire(m.content), node, m.metadata.message_type)
            arrived.metadata.__dict__["_message_id"] = mid
            reply = self.app(arrived, self.contexts[node])
            if reply.has_content():
                reply = FlowerMessage(wire(reply.content), reply_to=arrived)
            out.append(reply)
        return self.order(out)
