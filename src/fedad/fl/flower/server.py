"""The ServerApp's work: map the nodes, run the server program, evaluate every node."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from fedad.core.algorithm import Algorithm
from fedad.core.messages import Message
from fedad.core.secagg import SecAggSettings
from fedad.core.types import Features
from fedad.fl.flower.codec import NODE_MODEL
from fedad.fl.flower.grid import FlowerGrid, FlwrGridLike
from fedad.fl.flower.results import ResultsDir
from fedad.fl.flower.spec import RunSpec

if TYPE_CHECKING:  # the engine pulls in scipy; the ClientApp's handshake stays light
    from fedad.fl.drive import RunOutcome


def serve(
    grid: FlwrGridLike,
    spec: RunSpec,
    algorithm: Algorithm,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    poll_interval: float = 0.1,
    server_data: Features | None = None,
) -> RunOutcome:
    """The ServerApp's work: map the nodes, run ``algorithm.server``, evaluate every node.

    The same steps as :func:`fedad.fl.engine.run_inprocess`, on a :class:`FlowerGrid`
    (``server_data``: the federation's ``server_normal``). Client states stay on the nodes
    (``RunOutcome.client_states`` is empty).
    """
    from fedad.fl.drive import drive

    cfg = spec.config()
    e = cfg.engine
    fgrid = FlowerGrid(
        grid,
        spec.num_partitions,
        timeout=spec.timeout,
        min_clients=e.min_clients,
        seed=cfg.seed,
        dropout=e.dropout,
        poll_interval=poll_interval,
    )
    # a deployment's ServerApp is a process of its own: its warnings (a node that does not
    # answer, a failed node) reach the user's console through the results directory
    relay = ResultsDir(spec.results_dir).relay_warnings() if spec.results_dir else None
    with relay or contextlib.nullcontext():
        fgrid.connect()
        outcome = drive(
            algorithm,
            fgrid,
            cfg.rounds,
            cfg.seed,
            e.fraction,
            e.min_clients,
            on_round=on_round,
            eval_every=e.eval_every,
            server_data=server_data,
            secagg=SecAggSettings.from_config(cfg.privacy),
            attack=cfg.attack,
            privacy=cfg.privacy,
        )
    outcome.missing_nodes = sorted(set(outcome.missing_nodes) | fgrid.missing)
    outcome.events.extend(node_model_events(outcome.evaluations))
    return outcome


def node_model_events(evaluations: Mapping[int, Message]) -> list[str]:
    """One event per client whose personalised detector stayed on its node, naming the
    folder there (``fedad.load`` reads it on that machine)."""
    return [
        f"client {cid}: its personalised detector stays on its node, in {m.scalars[NODE_MODEL]}"
        for cid, m in sorted(evaluations.items())
        if isinstance(m.scalars.get(NODE_MODEL), str)
    ]
