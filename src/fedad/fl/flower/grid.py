"""The Grid adapter: our :class:`~fedad.core.grid.Grid` on top of Flower's ``Grid``."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from fedad.core.algorithm import EVALUATE
from fedad.core.messages import Message
from fedad.core.rng import rng as seeded_rng
from fedad.core.secagg import SecAggSettings, SecureOutcome, reply_nbytes
from fedad.core.validate import ArraySpec
from fedad.fl.flower.codec import (
    HELLO,
    META_KEY,
    SIZE,
    from_recorddict,
    recorddict_meta,
    route,
    to_recorddict,
)
from fedad.fl.flower.spec import DEFAULT_TIMEOUT, FlowerRunError
from fedad.fl.timeline import timeline_event

if TYPE_CHECKING:
    from flwr.app import Message as FlowerMessage

log = logging.getLogger("fedad")


class FlwrGridLike(Protocol):
    """The part of Flower's ``Grid`` the adapter uses."""

    def get_node_ids(self) -> Iterable[int]: ...

    def push_messages(self, messages: Iterable[FlowerMessage]) -> Iterable[str]: ...

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[FlowerMessage]: ...


class FlowerGrid:
    """Our :class:`~fedad.core.grid.Grid` on top of a Flower ``Grid``.

    Client ids are partition ids ``0 .. num_partitions - 1`` whether or not a node holds
    them; a message to a client no node holds is never answered (the client is missing).
    """

    def __init__(
        self,
        grid: FlwrGridLike,
        num_partitions: int,
        timeout: float = DEFAULT_TIMEOUT,
        min_clients: int = 1,
        seed: int = 0,
        dropout: float = 0.0,
        poll_interval: float = 0.1,
        connect_timeout: float | None = None,
    ) -> None:
        self.grid = grid
        self.num_partitions = num_partitions
        self.timeout = timeout
        self.min_clients = min_clients
        self.dropout = dropout
        self.poll_interval = poll_interval
        self.connect_timeout = timeout if connect_timeout is None else connect_timeout
        self._rng = seeded_rng(seed, 0xD20)  # the in-process engine's dropout stream
        self._node_of: dict[int, int] = {}
        self._client_of: dict[int, int] = {}
        self._asked: set[int] = set()
        self._unasked: set[int] = set()  # late nodes named, never asked
        self._up = 0
        self._down = 0
        self.client_seconds = 0.0
        self.failures: list[str] = []
        self.missing: set[int] = set()
        self.phase_no = 0
        self._sizes: dict[int, int] = {}

    # -- Grid protocol -----------------------------------------------------------------
    def get_node_ids(self) -> list[int]:
        return list(range(self.num_partitions))

    @property
    def bytes_up(self) -> int:
        return self._up

    @property
    def bytes_down(self) -> int:
        return self._down

    @property
    def node_map(self) -> dict[int, int]:
        """Client id -> Flower node id, for the nodes that answered the handshake."""
        return dict(sorted(self._node_of.items()))

    # -- handshake ---------------------------------------------------------------------
    def connect(self) -> None:
        """Wait for the nodes to connect (up to ``connect_timeout``), then map them."""
        deadline = time.monotonic() + self.connect_timeout
        while True:
            n = len(set(self.grid.get_node_ids()))
            if n >= self.num_partitions or time.monotonic() >= deadline:
                break
            time.sleep(self.poll_interval)
        timeline_event("server-nodes", time=time.time(), nodes=n)
        self._hello(deadline=max(deadline, time.monotonic() + self.poll_interval))
        absent = [c for c in range(self.num_partitions) if c not in self._node_of]
        if absent:
            self.failures.append(f"no node holds client(s) {absent}")
            log.warning(self.failures[-1])

    def _hello(self, deadline: float) -> None:
        """Ask nodes not yet asked for their partition id; map those that answer.

        A node that claims a partition another node holds, or one outside the run's
        ``0 .. num_partitions - 1``, stops the run (:class:`FlowerRunError`, naming the
        nodes): the server cannot tell which of two claimants is the site it expects, and
        keeping either would let a stranger's updates in. A node that does not answer, or
        not as a fedad node, is left out, with a warning.
        """
        from flwr.app import ConfigRecord, RecordDict
        from flwr.app import Message as FMessage

        new = sorted(set(self.grid.get_node_ids()) - self._asked)
        if not new:
            return
        self._asked.update(new)
        msgs = [
            FMessage(RecordDict({META_KEY: ConfigRecord({"kind": HELLO})}), n, f"query.{HELLO}")
            for n in new
        ]
        got = self.exchange(msgs, new, deadline)
        contested: list[str] = []
        for node in new:
            reply = got.get(node)
            claim = self._claim(node, reply)
            if claim is None:
                continue
            pid, parts = claim
            if parts != self.num_partitions or not 0 <= pid < self.num_partitions:
                contested.append(
                    f"Flower node {node} holds partition {pid} of {parts}, but the run has "
                    f"{self.num_partitions} clients (partition ids 0..{self.num_partitions - 1})"
                )
            elif pid in self._node_of:
                contested.append(
                    f"two nodes claim client {pid}: Flower nodes {self._node_of[pid]} and {node}"
                )
            else:
                self._node_of[pid] = node
                self._client_of[node] = pid
        if contested:
            self.failures.extend(contested)
            raise FlowerRunError(
                "; ".join(contested),
                "each site starts one SuperNode, with its own --partition-id and the run's "
                "number of clients as --num-partitions; stop the node that should not be "
                "there (its log says 'SuperNode ID: N') and run again",
            )

    def _claim(self, node: int, reply: FlowerMessage | None) -> tuple[int, object] | None:
        """The ``(partition-id, num-partitions)`` a node's handshake reply claims; ``None``
        (with a warning) when it did not answer, or not as a fedad node."""
        why = None
        if reply is None:
            why = "did not answer the handshake in time"
        elif reply.has_error():
            reason = (reply.error.reason or "").strip().splitlines()
            why = f"failed the handshake: {reason[-1] if reason else reply.error.code}"
        elif not reply.has_content():
            why = "answered the handshake without content"
        else:
            meta = recorddict_meta(reply.content)
            pid, parts = meta.get("partition-id"), meta.get("num-partitions")
            if isinstance(pid, int) and not isinstance(pid, bool):
                return pid, parts
            why = "did not say which partition it holds"
        self.failures.append(f"Flower node {node} {why}; it takes no part in the run")
        log.warning(self.failures[-1])
        return None

    def flower_node_ids(self) -> list[int]:
        """The Flower node ids connected now."""
        return list(self.grid.get_node_ids())

    def exchange(
        self, msgs: list[FlowerMessage], nodes: list[int], deadline: float
    ) -> dict[int, FlowerMessage]:
        """Push ``msgs`` (one per node of ``nodes``), pull replies until ``deadline``."""
        if not msgs:
            return {}
        pushed = {mid for mid in self.grid.push_messages(msgs) if mid}
        timeline_event("server-push", time=time.time(), message_ids=sorted(pushed))
        # a message the SuperLink refused (too large, malformed) is never answered
        pending = {
            m.metadata.message_id: node
            for m, node in zip(msgs, nodes, strict=True)
            if m.metadata.message_id in pushed
        }
        got: dict[int, FlowerMessage] = {}
        while pending:
            for reply in self.grid.pull_messages(list(pending)):
                timeline_event(
                    "server-reply", time=time.time(), reply_to=reply.metadata.reply_to_message_id
                )
                node = pending.pop(reply.metadata.reply_to_message_id, None)
                if node is not None:
                    got[node] = reply
            if not pending or time.monotonic() >= deadline:
                break
            time.sleep(self.poll_interval)
        return got

    # -- send and receive --------------------------------------------------------------
    def send_and_receive(
        self, messages: Mapping[int, Message], timeout: float | None = None
    ) -> dict[int, Message]:
        """Deliver ``messages[client]``; return the replies that came back within time."""
        from flwr.app import Message as FMessage

        timeout = self.timeout if timeout is None else timeout
        self.phase_no += 1
        self._map_late_nodes(messages, timeout)
        out: list[FlowerMessage] = []
        targets: list[int] = []
        kind = ""
        expected = 0
        for cid in sorted(messages):
            msg = messages[cid]
            kind = msg.kind
            if not self._post(cid, msg):
                continue
            expected += 1
            node = self._node_of.get(cid)
            if node is None:
                self.missing.add(cid)
                continue
            out.append(
                FMessage(to_recorddict(msg), node, route(msg.kind), group_id=str(self.phase_no))
            )
            targets.append(cid)
        got = self.exchange(out, [self._node_of[c] for c in targets], time.monotonic() + timeout)
        replies: dict[int, Message] = {}
        for cid in targets:
            reply = got.get(self._node_of[cid])
            if reply is None:
                self.missing.add(cid)
                self.failures.append(f"node {cid}: no reply to '{kind}' within {timeout:g} s")
                log.warning(self.failures[-1])
                continue
            if reply.has_error():
                self.missing.add(cid)
                reason = (reply.error.reason or "").strip().splitlines()
                self.failures.append(
                    f"node {cid} failed in '{kind}': {reason[-1] if reason else reply.error.code}"
                )
                log.warning(self.failures[-1])
                continue
            try:
                m = from_recorddict(reply.content)
            except (ValueError, TypeError, KeyError) as err:
                self.missing.add(cid)
                self.failures.append(f"node {cid} sent an unreadable reply to '{kind}': {err}")
                log.warning(self.failures[-1])
                continue
            if messages[cid].kind != EVALUATE:
                self._up += m.nbytes
            secs = recorddict_meta(reply.content).get("seconds")
            if isinstance(secs, float):
                self.client_seconds += secs
            replies[cid] = m
        if len(replies) < min(self.min_clients, expected):
            raise FlowerRunError(
                f"only {len(replies)} of {expected} nodes answered '{kind}' within "
                f"{timeout:g} s, fewer than engine.min_clients = {self.min_clients}",
                "check the SuperNodes or raise engine.timeout",
            )
        return dict(sorted(replies.items()))

    def _map_late_nodes(self, clients: Iterable[int], timeout: float) -> None:
        """Ask nodes that connected after the handshake for their partition, if a client
        has no node yet; otherwise name them (once): they receive no task."""
        late = set(self.grid.get_node_ids()) - self._asked
        if not late:
            return
        if any(c not in self._node_of for c in clients):
            self._hello(deadline=time.monotonic() + min(timeout, 30.0))
            return
        for node in sorted(late - self._unasked):
            self.failures.append(
                f"Flower node {node} connected during the run; every client has its node, so "
                "it was not asked and receives no task"
            )
            log.warning(self.failures[-1])
        self._unasked |= late

    def _post(self, cid: int, msg: Message) -> bool:
        """Count ``msg``'s bytes and draw its dropout with the in-process engine's stream;
        ``False`` when the node drops out."""
        if not 0 <= cid < self.num_partitions:
            raise KeyError(f"no node {cid}")
        if msg.kind == EVALUATE:  # evaluation is the harness's, not federated traffic
            return True
        self._down += msg.nbytes
        return not (self.dropout > 0 and self._rng.random() < self.dropout)

    # -- SecAgg+ -------------------------------------------------------------------------
    def secure_mean(
        self,
        messages: Mapping[int, Message],
        arrays: Mapping[str, ArraySpec],
        scalars: Sequence[str],
        settings: SecAggSettings,
    ) -> SecureOutcome:
        """One phase under Flower's SecAgg+ (:mod:`fedad.fl.flower.secagg`).

        Bytes, dropout draws and the ``min_clients`` rule as in :meth:`send_and_receive`;
        the payload counted up is each contribution's masked vector and clear scalars, the
        rest of the protocol's traffic is ``overhead_bytes``.
        """
        from fedad.fl.flower.secagg import secure_mean

        self.phase_no += 1
        self._map_late_nodes(messages, self.timeout)
        kind = next(iter(messages.values())).kind if messages else ""
        posted = [cid for cid in sorted(messages) if self._post(cid, messages[cid])]
        nodes = {c: self._node_of[c] for c in posted if c in self._node_of}
        self.missing.update(c for c in posted if c not in nodes)
        max_weight = self._max_weight() if len(nodes) >= 2 else None
        answered = len(nodes)
        if len(nodes) < 2:
            out = SecureOutcome(halted=f"SecAgg+ needs at least 2 clients, {len(nodes)} took part")
        elif max_weight is None:
            out = SecureOutcome(halted="no node told its training-set size (the weight bound)")
        else:
            out, wgrid = secure_mean(
                self, nodes, messages, arrays, scalars, settings, max_weight, self.timeout
            )
            client_of = {n: c for c, n in nodes.items()}
            self.client_seconds += wgrid.seconds
            for m in wgrid.contributed.values():
                self._up += reply_nbytes(arrays, m.scalars)
            for node, (stage, reason) in sorted(wgrid.errors.items()):
                cid = client_of[node]
                if cid not in out.rejected:
                    answered -= 1
                    self.missing.add(cid)
                    last = reason.splitlines()[-1] if reason else "error"
                    self.failures.append(f"node {cid} failed in '{kind}' (SecAgg+ {stage}): {last}")
                    log.warning(self.failures[-1])
            for node, stage in sorted(wgrid.silent.items()):
                answered -= node not in wgrid.errors
                self.missing.add(client_of[node])
                self.failures.append(
                    f"node {client_of[node]}: no reply to '{kind}' (SecAgg+ {stage}) "
                    f"within {self.timeout:g} s"
                )
                log.warning(self.failures[-1])
        if answered < min(self.min_clients, len(posted)):  # nodes that never failed
            raise FlowerRunError(
                f"only {answered} of {len(posted)} nodes answered SecAgg+ for '{kind}', "
                f"fewer than engine.min_clients = {self.min_clients}",
                "check the SuperNodes, raise engine.timeout or lower privacy.secagg_threshold",
            )
        return out

    def _max_weight(self) -> float | None:
        """The largest training-set size of the mapped nodes (asked once per node)."""
        from flwr.app import ConfigRecord, RecordDict
        from flwr.app import Message as FMessage

        unknown = [c for c in sorted(self._node_of) if c not in self._sizes]
        if unknown:
            msgs = [
                FMessage(
                    RecordDict({META_KEY: ConfigRecord({"kind": SIZE})}),
                    self._node_of[c],
                    f"query.{SIZE}",
                )
                for c in unknown
            ]
            deadline = time.monotonic() + self.timeout
            got = self.exchange(msgs, [self._node_of[c] for c in unknown], deadline)
            for node, reply in got.items():
                if reply.has_error() or not reply.has_content():
                    continue
                n = recorddict_meta(reply.content).get("n-train")
                if isinstance(n, int) and not isinstance(n, bool) and n >= 0:
                    self._sizes[self._client_of[node]] = n
        return float(max(self._sizes.values())) if self._sizes else None
