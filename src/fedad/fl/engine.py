"""The embedded in-process engine: the default, fast and deterministic.

Clients run in the caller's process, one after another in node-id order. Each delivery copies
the message (as serialisation would), counts its exact payload bytes, and — with
``engine.dropout > 0`` — drops a sampled node's reply with that probability (seeded). A
handler that raises is treated as a node that failed: logged, no reply, the round goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedad.config import AttackConfig, PrivacyConfig
from fedad.data.types import Federation
from fedad.evaluation import monitor_metrics
from fedad.fl.algorithm import EVALUATE, Algorithm, ClientState, ServerResult
from fedad.fl.context import ServerContext
from fedad.fl.messages import Message
from fedad.fl.node import node_handlers
from fedad.seeding import rng as seeded_rng

log = logging.getLogger("fedad")


class InProcessGrid:
    """A :class:`~fedad.fl.grid.Grid` whose nodes are the federation's clients, in process."""

    def __init__(
        self,
        algorithm: Algorithm,
        federation: Federation,
        seed: int = 0,
        dropout: float = 0.0,
        attack: AttackConfig | None = None,
        privacy: PrivacyConfig | None = None,
    ) -> None:
        self.algorithm = algorithm
        self.handlers = algorithm.handlers()
        n = len(federation.clients)
        self.node_handlers = {
            c.client_id: node_handlers(self.handlers, c.client_id, n, seed, attack, privacy)
            for c in federation.clients
        }
        self.clients = {c.client_id: c for c in federation.clients}
        self.states: dict[int, ClientState] = {cid: {} for cid in self.clients}
        self.dropout = dropout
        self._rng = seeded_rng(seed, 0xD20)
        self._up = 0
        self._down = 0
        self.client_seconds = 0.0
        self.failures: list[str] = []

    def get_node_ids(self) -> list[int]:
        return sorted(self.clients)

    @property
    def bytes_up(self) -> int:
        return self._up

    @property
    def bytes_down(self) -> int:
        return self._down

    def send_and_receive(
        self, messages: Mapping[int, Message], timeout: float | None = None
    ) -> dict[int, Message]:
        replies: dict[int, Message] = {}
        for nid in sorted(messages):
            msg = messages[nid]
            if nid not in self.clients:
                raise KeyError(f"no node {nid}")
            counted = msg.kind != EVALUATE  # the harness's evaluation is not federated traffic
            if counted:
                self._down += msg.nbytes
                if self.dropout > 0 and self._rng.random() < self.dropout:
                    continue
            handler = self.node_handlers[nid].get(msg.kind)
            if handler is None:
                raise KeyError(f"{self.algorithm.name} has no client handler for '{msg.kind}'")
            delivered = msg.copy()
            t0 = time.perf_counter()
            try:
                reply = handler(self.states[nid], self.clients[nid], delivered)
            except Exception as err:  # a failing node must not stop the federation
                self.failures.append(f"node {nid} failed in '{msg.kind}': {err!r}")
                log.warning(self.failures[-1])
                continue
            finally:
                self.client_seconds += time.perf_counter() - t0
            if counted:
                self._up += reply.nbytes
            replies[nid] = reply.copy()
        return replies


@dataclass
class RunOutcome:
    """Everything a finished federated run produced, engine-independent."""

    result: ServerResult
    evaluations: dict[int, Message]
    history: list[dict[str, Any]]
    events: list[str]
    bytes_up: int
    bytes_down: int
    seconds: float
    client_seconds: float = 0.0
    missing_nodes: list[int] = field(default_factory=list)
    client_states: dict[int, ClientState] = field(default_factory=dict)


def evaluate_all(grid: Any, result: ServerResult) -> dict[int, Message]:
    """The evaluation phase: every node scores its local test set with its final detector."""
    msg = Message(EVALUATE, result.arrays, result.scalars)
    return grid.send_and_receive({nid: msg for nid in grid.get_node_ids()})


def drive(
    algorithm: Algorithm,
    grid: Any,
    rounds: int,
    seed: int,
    fraction: float = 1.0,
    min_clients: int = 1,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    eval_every: int = 0,
    server_data: np.ndarray | None = None,
) -> RunOutcome:
    """Run the server program on ``grid``, then the evaluation phase: every engine's core.

    ``grid`` is any :class:`~fedad.fl.grid.Grid` that also keeps ``client_seconds`` and a
    list of ``failures``. Training bytes and seconds are read before the evaluation phase.
    """
    ctx = ServerContext(
        grid,
        rounds,
        seed,
        fraction,
        min_clients,
        on_round=on_round,
        server_data=server_data,
    )
    if eval_every > 0:
        ctx.eval_every = eval_every
        ctx.evaluator = lambda result: monitor_metrics(evaluate_all(grid, result))
    t0 = time.perf_counter()
    result = algorithm.server(ctx)
    seconds = time.perf_counter() - t0
    up, down, client_s = grid.bytes_up, grid.bytes_down, grid.client_seconds
    evaluations = evaluate_all(grid, result)
    return RunOutcome(
        result=result,
        evaluations=evaluations,
        history=ctx.history,
        events=ctx.events + grid.failures,
        bytes_up=up,
        bytes_down=down,
        seconds=seconds,
        client_seconds=client_s,
        missing_nodes=ctx.missing_nodes,
    )


def run_inprocess(
    algorithm: Algorithm,
    federation: Federation,
    rounds: int,
    seed: int,
    fraction: float = 1.0,
    dropout: float = 0.0,
    min_clients: int = 1,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    attack: AttackConfig | None = None,
    eval_every: int = 0,
    privacy: PrivacyConfig | None = None,
) -> RunOutcome:
    """Run ``algorithm`` on ``federation`` in this process, then evaluate every client."""
    grid = InProcessGrid(
        algorithm, federation, seed=seed, dropout=dropout, attack=attack, privacy=privacy
    )
    outcome = drive(
        algorithm,
        grid,
        rounds,
        seed,
        fraction,
        min_clients,
        on_round=on_round,
        eval_every=eval_every,
        server_data=federation.server_normal,
    )
    outcome.client_states = grid.states
    return outcome
