"""The embedded in-process engine: the default, fast and deterministic.

Clients run in the caller's process, one after another in node-id order. Each delivery copies
the message (as serialisation would), counts its exact payload bytes, and — with
``engine.dropout > 0`` — drops a sampled node's reply with that probability (seeded). A
handler that raises is treated as a node that failed: logged, no reply, the round goes on.
"""

from __future__ import annotations

import logging
import pickle
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fedad.config import AttackConfig, PrivacyConfig
from fedad.core.algorithm import EVALUATE, Algorithm, ClientState, update_phases
from fedad.core.errors import is_allocation_failure
from fedad.core.messages import Message
from fedad.core.rng import rng as seeded_rng
from fedad.core.secagg import (
    WEIGHT,
    SecAggSettings,
    SecureOutcome,
    check_secure_reply,
    flatten,
    reply_nbytes,
    require_flwr_for_secagg,
    rounding_seed,
)
from fedad.core.types import Federation
from fedad.core.validate import ArraySpec
from fedad.fl.drive import RunOutcome, drive
from fedad.fl.node import node_handlers
from fedad.fl.secagg import secure_mean
from fedad.fl.workers import WorkerPool

log = logging.getLogger("fedad")


class InProcessGrid:
    """A :class:`~fedad.core.grid.Grid` whose nodes are the federation's clients, in process."""

    def __init__(
        self,
        algorithm: Algorithm,
        federation: Federation,
        seed: int = 0,
        dropout: float = 0.0,
        attack: AttackConfig | None = None,
        privacy: PrivacyConfig | None = None,
        workers: int = 1,
        pool: WorkerPool | None = None,
    ) -> None:
        self.algorithm = algorithm
        self.handlers = algorithm.handlers()
        n = len(federation.clients)
        phases = update_phases(algorithm)
        self.pool: WorkerPool | None = None
        self._own_pool = False
        if (pool is not None or workers > 1) and n > 1:
            try:
                if pool is None:
                    pool = WorkerPool(federation.clients, seed, attack, privacy, workers)
                    self._own_pool = True
                pool.load(algorithm, phases)
                self.pool = pool
            except (pickle.PicklingError, AttributeError, TypeError, RuntimeError) as err:
                log.warning(
                    "engine.workers: %s cannot be sent to worker processes (%s); running its "
                    "clients in this process",
                    algorithm.name,
                    str(err).splitlines()[0][:120],
                )
                if self._own_pool and pool is not None:
                    pool.close()
        self.node_handlers = {
            c.client_id: node_handlers(
                self.handlers, c.client_id, n, seed, attack, privacy, phases=phases
            )
            for c in federation.clients
        }
        self.clients = {c.client_id: c for c in federation.clients}
        self.states: dict[int, ClientState] = {cid: {} for cid in self.clients}
        self.dropout = dropout
        self.seed = seed
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
        posted = [nid for nid in sorted(messages) if self._post(nid, messages[nid])]
        answers = self._run_all([(nid, messages[nid]) for nid in posted])
        for nid, reply in zip(posted, answers, strict=True):
            if reply is None:
                continue
            if messages[nid].kind != EVALUATE:
                self._up += reply.nbytes
            replies[nid] = reply.copy()
        return replies

    def _run_all(self, items: Sequence[tuple[int, Message]]) -> list[Message | None]:
        """The replies to ``items`` in order: one after another here, or all at once in
        the worker processes (``engine.workers``), with the same failures and seconds."""
        for nid, msg in items:  # posted nodes (``_post`` checked they exist)
            if msg.kind not in self.node_handlers[nid]:
                raise KeyError(f"{self.algorithm.name} has no client handler for '{msg.kind}'")
        if self.pool is None:
            return [self._run(nid, msg) for nid, msg in items]
        out: list[Message | None] = []
        for (nid, msg), (reply, err, seconds) in zip(items, self.pool.run(items), strict=True):
            self.client_seconds += seconds
            if reply is None:
                if is_allocation_failure(str(err)):  # the workers share this machine
                    raise MemoryError(f"node {nid} failed in '{msg.kind}': {err}")
                self.failures.append(f"node {nid} failed in '{msg.kind}': {err}")
                log.warning(self.failures[-1])
            out.append(reply)
        return out

    def close(self) -> None:
        """Stop the worker processes this grid started (a pool given to it stays)."""
        if self.pool is not None and self._own_pool:
            self.pool.close()
        self.pool = None

    def _post(self, nid: int, msg: Message) -> bool:
        """Count ``msg``'s bytes and draw its dropout; ``False`` when the node drops out."""
        if nid not in self.clients:
            raise KeyError(f"no node {nid}")
        if msg.kind == EVALUATE:  # the harness's evaluation is not federated traffic
            return True
        self._down += msg.nbytes
        return not (self.dropout > 0 and self._rng.random() < self.dropout)

    def _run(self, nid: int, msg: Message) -> Message | None:
        """Node ``nid``'s reply to ``msg``, or ``None`` when its handler failed (logged)."""
        handler = self.node_handlers[nid][msg.kind]  # checked by _run_all
        t0 = time.perf_counter()
        try:
            return handler(self.states[nid], self.clients[nid], msg.copy())
        except Exception as err:  # a failing node must not stop the federation
            if is_allocation_failure(err):  # every node here shares this process's memory
                raise
            self.failures.append(f"node {nid} failed in '{msg.kind}': {err!r}")
            log.warning(self.failures[-1])
            return None
        finally:
            self.client_seconds += time.perf_counter() - t0

    def secure_mean(
        self,
        messages: Mapping[int, Message],
        arrays: Mapping[str, ArraySpec],
        scalars: Sequence[str],
        settings: SecAggSettings,
    ) -> SecureOutcome:
        """SecAgg+'s weighted mean of the replies, without the masks (see :mod:`.secagg`).

        The arithmetic (weights, clipping, seeded stochastic rounding, modular sum) is
        Flower's, so the aggregate equals the one a Flower engine unmasks, bit for bit.
        """
        out = SecureOutcome()
        posted = [nid for nid in sorted(messages) if self._post(nid, messages[nid])]
        if len(posted) < 2:
            out.halted = f"SecAgg+ needs at least 2 clients, {len(posted)} took part"
            return out
        max_weight = float(max(c.n_train for c in self.clients.values()))
        names = list(arrays)
        vectors, weights, seeds = [], [], []
        answers = self._run_all([(nid, messages[nid]) for nid in posted])
        for nid, reply in zip(posted, answers, strict=True):
            msg = messages[nid]
            if reply is None:
                continue
            why = check_secure_reply(reply, arrays, scalars, msg.kind, max_weight)
            if why is not None:
                out.rejected[nid] = why
                continue
            self._up += reply_nbytes(arrays, reply.scalars)
            out.replies[nid] = Message(reply.kind, {}, reply.scalars)
            vectors.append(flatten(reply.arrays, names))
            weights.append(float(reply.scalars[WEIGHT]))
            seeds.append(rounding_seed(self.seed, int(msg.get("round", 0)), nid, msg.kind))
        # Flower checks that every node keeps `threshold` live neighbours; with the complete
        # key-share graph ("auto" up to 15 clients) that is this count; beyond, only a
        # necessary condition (Flower may halt where this goes on)
        _, threshold = settings.protocol_sizes(len(posted))
        if len(vectors) < threshold:
            out.halted = (
                f"{len(vectors)} of {len(posted)} clients sent masked vectors, fewer than "
                f"the reconstruction threshold {threshold}"
            )
            out.replies = {}
            return out
        out.mean = secure_mean(vectors, weights, seeds, max_weight, settings.clip, len(posted))
        return out


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
    workers: int = 1,
    pool: WorkerPool | None = None,
) -> RunOutcome:
    """Run ``algorithm`` on ``federation`` in this process (or, with ``workers > 1``, its
    clients in that many worker processes: :mod:`fedad.fl.workers`), then evaluate every
    client. ``client_states`` of the outcome stay empty with workers (they live there).
    ``pool``: worker processes that already hold the federation's clients (one per run)."""
    secagg = SecAggSettings.from_config(privacy)
    if secagg is not None:
        require_flwr_for_secagg()
    grid = InProcessGrid(
        algorithm,
        federation,
        seed=seed,
        dropout=dropout,
        attack=attack,
        privacy=privacy,
        workers=workers,
        pool=pool,
    )
    try:
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
            secagg=secagg,
            attack=attack,
            privacy=privacy,
        )
    finally:
        grid.close()
    if workers <= 1 and pool is None:
        outcome.client_states = grid.states
    return outcome
