"""Clients in parallel in-process: worker processes that keep their clients between rounds.

``engine.workers = N`` runs the sampled clients of each phase in ``N`` worker processes.
Client ``k`` (in node-id order, position ``i``) lives in worker ``i mod N`` for the whole
run: the worker receives the client's data once, at start (one pool serves every method
of a run), and for each method the method itself (pickled), from which it builds the
client's handlers as the in-process engine does (:func:`fedad.fl.node.node_handlers`:
attack and privacy included); it keeps each client's state between phases and rounds.

Per phase the parent sends each worker its clients' messages and gets back, per message,
the reply (or the error) and the seconds it took. Arrays shared by several messages (a
broadcast model) are pickled once per worker and copied per client there; the parent reads
whichever worker has an answer (a worker whose pipe is full would wait). Everything the
server sees (dropout draws, byte counts, reply order) is decided in the parent exactly as
with one process, and every handler's randomness is a function of (seed, round, client),
so results equal those of ``workers = 1`` at equal torch threads per client.

Workers are ``spawn``ed (never forked: torch's thread pools do not survive a fork), each
with ``max(1, threads // N)`` torch threads, so that workers x threads stays within the
threads the parent had (which ``--jobs`` has already shared out). A worker that dies (a
crash, the OOM killer) fails the client it was running, reported as that client's
failure; the round goes on, and the rest of its batch, and later phases, run on a fresh
worker that holds its clients' data again, with empty states (like a node that restarted).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import pickle
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from fedad.blas import limit_blas_threads
from fedad.config import AttackConfig, ExperimentConfig, PrivacyConfig
from fedad.core.messages import Message
from fedad.core.types import ClientData, Federation
from fedad.fl.node import node_handlers

__all__ = ["WorkerPool", "resolve_workers"]

log = logging.getLogger("fedad")


def resolve_workers(workers: int | str) -> int:
    """``engine.workers`` as a count: ``"auto"`` is the CPUs this process may use."""
    if workers == "auto":
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except AttributeError:  # not on Linux
            return max(1, os.cpu_count() or 1)
    return max(1, int(workers))


@dataclass(frozen=True)
class _Setup:
    """What a worker needs once: its clients and the run's settings."""

    clients: tuple[ClientData, ...]
    num_clients: int
    seed: int
    attack: AttackConfig | None
    privacy: PrivacyConfig | None
    threads: int


Result = tuple[Message | None, str | None, float]
"""A worker's answer to one message: the reply (``None`` on failure), the error, seconds."""


def _serve(conn: Connection, setup: _Setup) -> None:
    """A worker's loop. ``("load", pickled algorithm, update phases)`` builds every client's
    handlers for a method and empties their states (answer ``None`` or the error);
    ``("run", [(node id, message), ...])`` answers one :data:`Result` per message; ``None``
    stops."""
    import torch

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the parent stops the workers
    torch.set_num_threads(setup.threads)
    limit_blas_threads()  # fedad.blas: small linear algebra beside torch's threads
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    clients = {c.client_id: c for c in setup.clients}
    handlers: dict[int, dict[str, Any]] = {cid: {} for cid in clients}
    states: dict[int, dict[str, Any]] = {cid: {} for cid in clients}
    while True:
        try:
            order = conn.recv()
        except (EOFError, OSError):
            return
        if order is None:
            return
        if order[0] == "load":
            try:
                base = pickle.loads(order[1]).handlers()
                handlers = {
                    cid: node_handlers(
                        base,
                        cid,
                        setup.num_clients,
                        setup.seed,
                        setup.attack,
                        setup.privacy,
                        phases=order[2],
                    )
                    for cid in clients
                }
                states = {cid: {} for cid in clients}
                conn.send(None)
            except Exception as err:
                conn.send(repr(err))
            continue
        for nid, msg in order[1]:  # one answer per message, as soon as it is done
            t0 = time.perf_counter()
            reply, err_text = None, None
            try:
                handler = handlers[nid].get(msg.kind)
                if handler is None:
                    raise KeyError(f"no client handler for '{msg.kind}'")
                reply = handler(states[nid], clients[nid], msg.copy())
            except Exception as err:  # a failing node must not stop the federation
                err_text = repr(err)
            conn.send((reply, err_text, time.perf_counter() - t0))


class WorkerPool:
    """``workers`` processes holding ``clients`` for a whole run; :meth:`load` gives them a
    method, :meth:`run` runs its messages (see the module doc)."""

    def __init__(
        self,
        clients: Sequence[ClientData],
        seed: int,
        attack: AttackConfig | None,
        privacy: PrivacyConfig | None,
        workers: int,
    ) -> None:
        import torch

        ids = sorted(c.client_id for c in clients)
        self.workers = max(1, min(workers, len(ids)))
        self.owner = {cid: i % self.workers for i, cid in enumerate(ids)}
        by_id = {c.client_id: c for c in clients}
        threads = max(1, torch.get_num_threads() // self.workers)
        self._setups = [
            _Setup(
                tuple(by_id[c] for c in ids if self.owner[c] == w),
                len(ids),
                seed,
                attack,
                privacy,
                threads,
            )
            for w in range(self.workers)
        ]
        self._method: tuple[bytes, tuple[str, ...]] | None = None
        self._ctx = mp.get_context("spawn")
        self._procs: list[Any] = [None] * self.workers
        self._conns: list[Connection | None] = [None] * self.workers
        for w in range(self.workers):
            self._start(w)

    def _start(self, w: int) -> None:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_serve, args=(child, self._setups[w]), daemon=True)
        proc.start()
        child.close()
        self._procs[w], self._conns[w] = proc, parent

    def load(self, algorithm: Any, phases: Sequence[str]) -> None:
        """Give every worker ``algorithm`` (its clients' states start empty). Raises
        ``pickle.PicklingError``/``TypeError``/``AttributeError`` when the algorithm cannot
        be sent, and :class:`RuntimeError` when a worker cannot rebuild it."""
        self._method = (pickle.dumps(algorithm), tuple(phases))
        for w in range(self.workers):
            if not self._alive(w):
                self._restart(w)
            self._send(w, ("load", *self._method))
        for w in range(self.workers):
            conn = self._conns[w]
            assert conn is not None
            try:
                why = conn.recv()
            except (OSError, EOFError):
                why = self._died(w)
            if why is not None:
                raise RuntimeError(
                    f"worker {w} cannot run {getattr(algorithm, 'name', '?')}: {why}"
                )

    def run(self, items: Sequence[tuple[int, Message]]) -> list[Result]:
        """Run ``items`` (node id, message), each on its client's worker, all workers at
        once; answers in the order of ``items``. When a worker dies, the message it was
        running fails and the rest of its batch runs on a fresh worker."""
        pending: dict[int, list[int]] = {}
        for i, (nid, _) in enumerate(items):
            pending.setdefault(self.owner[nid], []).append(i)
        out: list[Result | None] = [None] * len(items)
        while pending:
            for w, idx in pending.items():
                if not self._alive(w):
                    self._restart(w)
                    self._reload(w)
                self._send(w, ("run", [items[i] for i in idx]))
            again: dict[int, list[int]] = {}
            pos = dict.fromkeys(pending, 0)
            while pos:  # read whichever worker has an answer (a full pipe blocks its worker)
                ready = wait([self._conns[w] for w in pos])  # type: ignore[misc]
                for w in [w for w in pos if self._conns[w] in ready]:
                    idx, k = pending[w], pos[w]
                    answer = self._recv(w)
                    if answer is None:  # the worker died running items[idx[k]]
                        out[idx[k]] = (None, self._died(w), 0.0)
                        if idx[k + 1 :]:
                            again[w] = idx[k + 1 :]
                        del pos[w]
                        continue
                    out[idx[k]] = answer
                    pos[w] = k + 1
                    if pos[w] == len(idx):
                        del pos[w]
            pending = again
        return [r if r is not None else (None, "no answer", 0.0) for r in out]

    def _send(self, w: int, order: tuple[Any, ...]) -> None:
        conn = self._conns[w]
        assert conn is not None
        with contextlib.suppress(OSError, EOFError):  # a dead worker shows at _recv
            conn.send(order)

    def _reload(self, w: int) -> None:
        """A fresh worker gets the current method again (its answer is awaited)."""
        if self._method is None:
            return
        self._send(w, ("load", *self._method))
        with contextlib.suppress(OSError, EOFError):
            conn = self._conns[w]
            assert conn is not None
            conn.recv()

    def _recv(self, w: int) -> Result | None:
        conn = self._conns[w]
        assert conn is not None
        try:
            answer: Result = conn.recv()
        except (OSError, EOFError):
            return None
        return answer

    def _alive(self, w: int) -> bool:
        p = self._procs[w]
        return p is not None and p.is_alive()

    def _died(self, w: int) -> str:
        p = self._procs[w]
        if p is not None:
            p.join(timeout=5)
        code = None if p is None else p.exitcode
        log.warning("worker process %d died (exit code %s); its clients restart empty", w, code)
        return f"its worker process died (exit code {code})"

    def _restart(self, w: int) -> None:
        conn = self._conns[w]
        if conn is not None:
            conn.close()
        self._start(w)

    def close(self) -> None:
        """Stop every worker (they also stop when the parent exits: daemons)."""
        for w, conn in enumerate(self._conns):
            if conn is None:
                continue
            with contextlib.suppress(OSError, EOFError):
                conn.send(None)
            conn.close()
            p = self._procs[w]
            if p is not None:
                p.join(timeout=10)
                if p.is_alive():
                    p.terminate()
        self._conns = [None] * self.workers


def run_pool(cfg: ExperimentConfig, fed: Federation, todo: list[str]) -> WorkerPool | None:
    """One pool of worker processes for every method of a run (``engine.workers`` of the
    in-process engine), or ``None`` when the run needs none: another engine, one worker,
    one client, or no method left to train (``todo``)."""
    workers = resolve_workers(cfg.engine.workers)
    if cfg.engine.name != "inprocess" or workers <= 1 or len(fed.clients) <= 1 or not todo:
        return None
    return WorkerPool(fed.clients, cfg.seed, cfg.attack, cfg.privacy, workers)
