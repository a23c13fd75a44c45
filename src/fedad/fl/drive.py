"""One run of a method's server program over any grid, then the evaluation phase: what both
engines share (the in-process engine, :mod:`fedad.fl.engine`; the Flower engines,
:mod:`fedad.fl.flower`), and what a run hands back (:class:`RunOutcome`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from fedad.config import AttackConfig, PrivacyConfig
from fedad.core.algorithm import EVALUATE, Algorithm, ClientState, ServerResult, update_phases
from fedad.core.context import ServerContext
from fedad.core.errors import RunError
from fedad.core.grid import Grid
from fedad.core.messages import Message
from fedad.core.secagg import SecAggSettings, SecureOutcome
from fedad.core.types import Features
from fedad.core.validate import ArraySpec
from fedad.evaluation.families import families_for, monitor_metrics
from fedad.fl.node import unapplied_note
from fedad.fl.server_inputs import public_set

log = logging.getLogger("fedad")


class DrivenGrid(Grid, Protocol):
    """A :class:`~fedad.core.grid.Grid` as :func:`drive` runs it: it also keeps the seconds its
    clients spent and a line per failure (both engines' grids do)."""

    client_seconds: float
    """Seconds the clients spent handling messages so far."""
    failures: list[str]
    """One line per node failure or unusable reply, for the run's events."""


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
    releases: dict[str, list[int]] = field(default_factory=dict)
    """Per message kind (phase) the server program sent: for each send, how many nodes
    got it (:class:`ReleaseLog`); what privacy accounting counts."""
    array_replies: list[str] = field(default_factory=list)
    """Phases whose replies carried arrays, in the order first seen."""


class ReleaseLog:
    """A grid seen through the server program: it logs each send's phase and node count,
    and which phases' replies carry arrays, then delegates (to either engine's grid)."""

    def __init__(self, grid: DrivenGrid) -> None:
        self._grid = grid
        self.releases: dict[str, list[int]] = {}
        self.array_replies: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._grid, name)

    def _log(self, messages: Mapping[int, Message]) -> None:
        for kind in sorted({m.kind for m in messages.values()}):
            n = sum(m.kind == kind for m in messages.values())
            self.releases.setdefault(kind, []).append(n)

    def _saw(self, replies: Mapping[int, Message], messages: Mapping[int, Message]) -> None:
        for nid, reply in replies.items():
            kind = messages[nid].kind if nid in messages else reply.kind
            if reply.arrays and kind not in self.array_replies:
                self.array_replies.append(kind)

    def send_and_receive(
        self, messages: Mapping[int, Message], timeout: float | None = None
    ) -> dict[int, Message]:
        self._log(messages)
        replies = self._grid.send_and_receive(messages, timeout)
        self._saw(replies, messages)
        return replies

    def secure_mean(
        self,
        messages: Mapping[int, Message],
        arrays: Mapping[str, ArraySpec],
        scalars: Sequence[str],
        settings: SecAggSettings,
    ) -> SecureOutcome:
        self._log(messages)
        for kind in {m.kind for m in messages.values()}:
            if arrays and kind not in self.array_replies:
                self.array_replies.append(kind)
        return cast(Any, self._grid).secure_mean(messages, arrays, scalars, settings)  # type: ignore[no-any-return]


def evaluate_all(grid: Grid, result: ServerResult) -> dict[int, Message]:
    """The evaluation phase: every node scores its local test set with its final detector."""
    msg = Message(EVALUATE, result.arrays, result.scalars)
    return grid.send_and_receive({nid: msg for nid in grid.get_node_ids()})


def drive(
    algorithm: Algorithm,
    grid: DrivenGrid,
    rounds: int,
    seed: int,
    fraction: float = 1.0,
    min_clients: int = 1,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    eval_every: int = 0,
    server_data: Features | None = None,
    secagg: SecAggSettings | None = None,
    attack: AttackConfig | None = None,
    privacy: PrivacyConfig | None = None,
) -> RunOutcome:
    """Run the server program on ``grid``, then the evaluation phase: every engine's core.

    ``grid`` is any :class:`~fedad.core.grid.Grid` that also keeps ``client_seconds`` and a
    list of ``failures`` (:class:`DrivenGrid`) and, with ``secagg``, is a
    :class:`~fedad.core.grid.SecureGrid`. Training bytes and
    seconds are read before the evaluation phase. ``attack`` and ``privacy`` (the nodes'
    ``[attack]`` and ``[privacy]``) only add an event when the method has no model-update
    phase for them to act on (:func:`fedad.fl.node.unapplied_note`).
    """
    log_grid = ReleaseLog(grid)
    families = families_for(algorithm)
    ctx = ServerContext(
        cast(Any, log_grid),
        rounds,
        seed,
        fraction,
        min_clients,
        on_round=on_round,
        server_data=server_data,
        secagg=secagg,
        public=public_set(algorithm),  # by name, where the server program runs
        update_phases=update_phases(algorithm),  # their replies' norms are checked too
        evaluator=lambda result: monitor_metrics(evaluate_all(grid, result), families),
        eval_every=max(0, eval_every),
    )
    note = unapplied_note(algorithm, attack, privacy)
    if note is not None:
        ctx.events.append(note)
        log.warning(note)
    t0 = time.perf_counter()
    result = algorithm.server(ctx)
    seconds = time.perf_counter() - t0
    if secagg is not None and ctx.secure_phases == 0:
        ctx.events.append(
            f"privacy.secagg is on, but '{algorithm.name}' has no weighted-mean phase to "
            "secure: it ran without SecAgg+"
        )
        log.warning(ctx.events[-1])
    sampled = sum(int(r.get("clients_sampled", 0)) for r in ctx.history)
    if sampled and not any(int(r.get("clients_replied", 0)) for r in ctx.history):
        raise _never_trained(algorithm.name, ctx.history, ctx.events, privacy)
    up, down, client_s = grid.bytes_up, grid.bytes_down, grid.client_seconds
    evaluations = evaluate_all(grid, result)
    if not evaluations:
        raise RunError(
            f"{algorithm.name}: no client answered the evaluation phase",
            "see the events logged above",
        )
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
        releases=log_grid.releases,
        array_replies=log_grid.array_replies,
    )


def _never_trained(
    name: str,
    history: Sequence[Mapping[str, Any]],
    events: Sequence[str],
    privacy: PrivacyConfig | None,
) -> RunError:
    """The error of a run in which no reply was ever usable: no client answered, or (when
    every reply that came was rejected) why the first was rejected, and what to lower."""
    rejected = sum(int(r.get("clients_rejected", 0)) for r in history)
    if not rejected:
        return RunError(
            f"{name}: no client answered in any round, the model was never trained",
            "see the events logged above (engine.dropout, engine.timeout, failing clients)",
        )
    marker = "rejected reply of "
    first = next((e.split(marker, 1)[1] for e in events if marker in e), "")
    if privacy is not None and privacy.mechanism != "none":
        fix = (
            f"lower privacy.noise_multiplier, now {privacy.noise_multiplier:g}: the noise "
            "made the updates non-finite or absurdly large"
        )
    else:
        fix = "lower the method's learning rate or [attack] scale; see the events logged above"
    return RunError(
        f"{name}: the server rejected every reply that arrived, in every round ({rejected} "
        f"replies; the first: {first}), so the model was never trained",
        fix,
    )
