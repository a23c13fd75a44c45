"""Flower engine: any registered algorithm on Flower (``flwr``, the ``flower`` extra).

The same :class:`~fedad.fl.algorithm.Algorithm` object that the in-process engine runs
runs here, unchanged:

* **Server.** ``algorithm.server(ctx)`` runs inside a Flower ``ServerApp`` with the same
  :class:`~fedad.fl.context.ServerContext`; its grid is a :class:`FlowerGrid`, an adapter
  that wraps Flower's ``Grid`` (``get_node_ids``, ``push_messages``/``pull_messages``).
  The adapter maps Flower node ids to our client ids (the node's ``partition-id``,
  learned by a one-off ``query.fedad_hello`` handshake), counts bytes exactly as the
  in-process engine does (:attr:`Message.nbytes <fedad.fl.messages.Message.nbytes>`), and
  returns replies keyed and sorted by client id. A node whose reply does not come back
  within ``engine.timeout`` seconds, or that answers with an error, is simply missing; a
  phase in which fewer than ``engine.min_clients`` of the addressed nodes answer stops the
  run with a one-line :class:`FlowerRunError`.
* **Clients.** One ``ClientApp`` (:mod:`fedad.fl.flower_app`) whose handlers are the
  algorithm's :meth:`~fedad.fl.algorithm.Algorithm.handlers`, registered by phase name
  (``train`` -> ``@app.train()``, ``evaluate`` -> ``@app.evaluate()``, any other phase
  ``p`` -> ``@app.query("p")``). Client state (a dict of named arrays) lives in Flower's
  ``context.state`` as an ``ArrayRecord``. A SuperNode builds its data with
  :func:`fedad.federation.build_federation` from the run's config and seed and takes
  client ``partition-id`` of its ``node_config``.
* **SecAgg+.** With ``privacy.secagg`` a phase the program runs through
  :meth:`ServerContext.mean <fedad.fl.context.ServerContext.mean>` becomes one run of
  Flower's SecAgg+ workflow (:meth:`FlowerGrid.secure_mean`, :mod:`fedad.fl.flower_secagg`).
* **Messages** convert losslessly to ``RecordDict``: arrays in an ``ArrayRecord``
  (``fedad.arrays``, serialised with ``numpy.save``: dtype, shape and bytes exact),
  scalars in a ``ConfigRecord`` (``fedad.scalars``: bool, int, float and str keep their
  type), the phase name and transport facts in a second ``ConfigRecord`` (``fedad.meta``,
  not counted as payload).

**How the run reaches the nodes.** The run's config travels as Flower *run config*
(:class:`RunSpec`): the validated experiment config as JSON (an exact pydantic round
trip), the method's name, detector, parameters and setup as JSON, and the engine settings.
Run config is what Flower already ships with every run to every SuperNode, on any machine,
so a SuperNode needs no shared file system and no restart between runs; ``node_config``
keeps only what is node-specific (``partition-id``, ``num-partitions``).

**Engines.** ``flower-simulation`` (:mod:`fedad.fl.flower_sim`) runs Flower's simulation
runtime with Ray in this process; ``flower-deployment`` (:mod:`fedad.fl.flower_deploy`)
starts a SuperLink, one SuperNode per client and a SuperExec as real processes on
127.0.0.1 (or uses a remote SuperLink, see ``docs/deployment.md``). Everything but the
conversion helpers imports ``flwr`` lazily, so this module imports without the extra.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from fedad.config import ExperimentConfig
from fedad.data.types import Features, Federation
from fedad.errors import ConfigError, FedadError
from fedad.fl.algorithm import EVALUATE, Algorithm, Setup, build_algorithm
from fedad.fl.messages import Message, Scalar
from fedad.fl.secagg import SecAggSettings, SecureOutcome, reply_nbytes
from fedad.fl.timeline import timeline_event
from fedad.fl.validate import ArraySpec
from fedad.seeding import rng as seeded_rng

if TYPE_CHECKING:  # the engine pulls in scipy; the ClientApp's handshake stays light
    from flwr.app import Message as FlowerMessage
    from flwr.app import RecordDict

    from fedad.fl.engine import RunOutcome

log = logging.getLogger("fedad")

ARRAYS_KEY = "fedad.arrays"
"""``RecordDict`` key of the ``ArrayRecord`` holding a message's arrays."""
SCALARS_KEY = "fedad.scalars"
"""``RecordDict`` key of the ``ConfigRecord`` holding a message's scalars."""
META_KEY = "fedad.meta"
"""``RecordDict`` key of the ``ConfigRecord`` with the phase name and transport facts."""
STATE_KEY = "fedad.state"
"""``context.state`` key of the ``ArrayRecord`` holding a client's state."""
HELLO = "fedad_hello"
"""Query action of the handshake that maps Flower node ids to partition ids."""
SIZE = "fedad_size"
"""Query action asking a node its training-set size (SecAgg+'s weight bound)."""
NODE_MODEL = "node_model"
"""Scalar of a deployment's ``evaluate`` reply: where the node saved its personalised
detector (the reply carries no model arrays; :func:`fedad.fl.flower_app.keep_detector_home`)."""

DEFAULT_TIMEOUT = 600.0
"""Reply timeout (seconds) on Flower when ``engine.timeout`` is not set."""

INT64 = (-(2**63), 2**63 - 1)
INSTALL_HINT = (
    "install fedad's optional flower extra, which adds flwr and Ray; see docs/deployment.md"
)
"""No square brackets: the CLI prints errors as rich markup, which would eat ``[flower]``."""


class FlowerRunError(FedadError):
    """A Flower run could not finish (too few nodes answered, a process failed)."""


# ---------------------------------------------------------------------------- availability


def flwr_available() -> bool:
    """Whether ``flwr`` can be imported."""
    return importlib.util.find_spec("flwr") is not None


def require_flwr(engine: str) -> None:
    """Raise a one-line :class:`ConfigError` when ``flwr`` is not installed."""
    if not flwr_available():
        raise ConfigError(
            f"engine.name = '{engine}' needs Flower (flwr), which is not installed", INSTALL_HINT
        )


# ---------------------------------------------------------------------------- conversion


def route(phase: str) -> str:
    """The Flower ``message_type`` of a phase.

    ``train`` and ``evaluate`` use Flower's own categories; any other phase ``p`` is the
    query ``query.p`` (a phase name that is not a Python identifier is hex-encoded, since
    Flower routes only identifiers).
    """
    if phase in ("train", EVALUATE):
        return phase
    action = phase if phase.isidentifier() else "fedad_x" + phase.encode().hex()
    return f"query.{action}"


def _check_scalar(name: str, value: Scalar) -> Scalar:
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and not (INT64[0] <= value <= INT64[1])
    ):
        raise TypeError(f"scalar '{name}' = {value} does not fit in a signed 64-bit integer")
    return value


def to_recorddict(msg: Message, meta: Mapping[str, Scalar] | None = None) -> RecordDict:
    """``msg`` as a Flower ``RecordDict``: arrays, scalars and the phase name, losslessly.

    ``meta`` adds transport facts (partition id, handler seconds) to ``fedad.meta``; they
    are not part of the message and not counted in its bytes.
    """
    from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

    arrays = {}
    for name, a in msg.arrays.items():
        if a.dtype.hasobject:
            raise TypeError(f"array '{name}' of message '{msg.kind}' has dtype object")
        arrays[name] = Array(np.asarray(a))
    scalars: dict[str, Any] = {k: _check_scalar(k, v) for k, v in msg.scalars.items()}
    info: dict[str, Any] = {"kind": msg.kind}
    info.update(meta or {})
    return RecordDict(
        {
            ARRAYS_KEY: ArrayRecord(arrays) if arrays else ArrayRecord(),
            SCALARS_KEY: ConfigRecord(scalars),
            META_KEY: ConfigRecord(info),
        }
    )


def from_recorddict(content: RecordDict) -> Message:
    """The :class:`Message` that :func:`to_recorddict` wrote into ``content``."""
    configs = content.config_records
    if META_KEY not in configs or "kind" not in configs[META_KEY]:
        raise ValueError("not a fedad message: the record 'fedad.meta' with 'kind' is missing")
    kind = configs[META_KEY]["kind"]
    if not isinstance(kind, str):
        raise ValueError("not a fedad message: 'fedad.meta.kind' is not a string")
    arrays: dict[str, np.ndarray] = {}
    if ARRAYS_KEY in content.array_records:
        arrays = {k: v.numpy() for k, v in content.array_records[ARRAYS_KEY].items()}
    scalars: dict[str, Scalar] = {}
    if SCALARS_KEY in configs:
        for k, v in configs[SCALARS_KEY].items():
            if not isinstance(v, bool | int | float | str):
                raise ValueError(f"scalar '{k}' is a {type(v).__name__}, not bool/int/float/str")
            scalars[k] = v
    return Message(kind, arrays, scalars)


def recorddict_meta(content: RecordDict) -> dict[str, Scalar]:
    """The transport facts of a converted message (``fedad.meta`` without ``kind``)."""
    configs = content.config_records
    if META_KEY not in configs:
        return {}
    return {k: v for k, v in configs[META_KEY].items() if k != "kind" and isinstance(v, Scalar)}


def state_to_record(state: Mapping[str, np.ndarray]) -> Any:
    """A client's state as an ``ArrayRecord`` for ``context.state``."""
    from flwr.app import Array, ArrayRecord

    arrays = {k: Array(np.asarray(v)) for k, v in state.items()}
    return ArrayRecord(arrays) if arrays else ArrayRecord()


def state_from_record(record: Any) -> dict[str, np.ndarray]:
    """A client's state back from its ``ArrayRecord``."""
    return {k: v.numpy() for k, v in record.items()}


# ---------------------------------------------------------------------------- run spec


@dataclass(frozen=True)
class RunSpec:
    """Everything a ServerApp and a ClientApp need to know about a run.

    It travels as Flower run config (flat ``str -> scalar``), see :meth:`to_run_config`.
    """

    config_json: str
    method: str
    detector: str | None
    params_json: str
    setup_json: str
    timeout: float = DEFAULT_TIMEOUT
    results_dir: str = ""
    label: str = ""
    """The method's key in metrics.json (names the folder of a node's saved detector)."""

    @classmethod
    def build(
        cls,
        cfg: ExperimentConfig,
        algorithm: Algorithm,
        results_dir: str | Path = "",
    ) -> RunSpec:
        """The spec of running ``algorithm`` with ``cfg`` (checks it survives the trip)."""
        setup = dataclasses.asdict(algorithm.setup)
        setup["feature_shape"] = list(setup["feature_shape"])
        spec = cls(
            config_json=cfg.model_dump_json(),
            method=algorithm.name,
            detector=algorithm.detector,
            params_json=algorithm.params.model_dump_json(),
            setup_json=json.dumps(setup),
            timeout=float(cfg.engine.timeout or DEFAULT_TIMEOUT),
            results_dir=str(results_dir),
            label=method_label(cfg, algorithm),
        )
        again = spec.build_algorithm()
        if type(again) is not type(algorithm) or again.params != algorithm.params:
            raise ConfigError(
                f"method '{algorithm.name}' cannot be sent to Flower nodes: its parameters "
                "do not survive a JSON round trip"
            )
        return spec

    def to_run_config(self) -> dict[str, str | float]:
        """Flat Flower run config (keys ``fedad-*``)."""
        return {
            "fedad-config": self.config_json,
            "fedad-method": self.method,
            "fedad-detector": self.detector or "",
            "fedad-params": self.params_json,
            "fedad-setup": self.setup_json,
            "fedad-timeout": float(self.timeout),
            "fedad-results": self.results_dir,
            "fedad-label": self.label,
        }

    @classmethod
    def from_run_config(cls, rc: Mapping[str, Any]) -> RunSpec:
        """The spec :meth:`to_run_config` wrote."""
        if "fedad-config" not in rc:
            raise ValueError("this Flower run was not started by fedad (no 'fedad-config')")
        return cls(
            config_json=str(rc["fedad-config"]),
            method=str(rc["fedad-method"]),
            detector=str(rc["fedad-detector"]) or None,
            params_json=str(rc["fedad-params"]),
            setup_json=str(rc["fedad-setup"]),
            timeout=float(rc.get("fedad-timeout", DEFAULT_TIMEOUT)),
            results_dir=str(rc.get("fedad-results", "")),
            label=str(rc.get("fedad-label", "")),
        )

    def config(self) -> ExperimentConfig:
        """The experiment config."""
        return ExperimentConfig.model_validate_json(self.config_json)

    def setup(self) -> Setup:
        """The algorithm's :class:`~fedad.fl.algorithm.Setup`."""
        d = json.loads(self.setup_json)
        d["feature_shape"] = tuple(d["feature_shape"])
        return Setup(**d)

    def build_algorithm(self) -> Algorithm:
        """A fresh instance of the algorithm, as the registry builds it."""
        return build_algorithm(
            self.method, json.loads(self.params_json), self.setup(), self.detector
        )

    @property
    def num_partitions(self) -> int:
        """How many clients (SuperNodes) the run has."""
        return int(json.loads(self.setup_json)["num_clients"])


def method_label(cfg: ExperimentConfig, algorithm: Algorithm) -> str:
    """The label (metrics.json key) of the first method of ``cfg`` that ``algorithm`` is
    (same name, detector and parameters); the method's name when none matches."""
    for label, m in zip(cfg.labels(), cfg.methods, strict=True):
        if m.name != algorithm.name or m.detector not in (None, algorithm.detector):
            continue
        try:
            if type(algorithm).ParamsModel.model_validate(m.params) == algorithm.params:
                return label
        except ValueError:  # pydantic's ValidationError
            continue
    return algorithm.name


# ---------------------------------------------------------------------------- grid adapter


class FlwrGridLike(Protocol):
    """The part of Flower's ``Grid`` the adapter uses."""

    def get_node_ids(self) -> Iterable[int]: ...

    def push_messages(self, messages: Iterable[FlowerMessage]) -> Iterable[str]: ...

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[FlowerMessage]: ...


class FlowerGrid:
    """Our :class:`~fedad.fl.grid.Grid` on top of a Flower ``Grid``.

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
        """Ask nodes not yet asked for their partition id."""
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
        for node, reply in sorted(self._exchange(msgs, new, deadline).items()):
            if reply.has_error() or not reply.has_content():
                continue
            meta = recorddict_meta(reply.content)
            pid, parts = meta.get("partition-id"), meta.get("num-partitions")
            if not isinstance(pid, int) or isinstance(pid, bool):
                continue
            if parts != self.num_partitions or not 0 <= pid < self.num_partitions:
                self.failures.append(
                    f"node {node} holds partition {pid} of {parts}, "
                    f"but the run has {self.num_partitions} clients; ignored"
                )
            elif pid in self._node_of:
                self.failures.append(f"two nodes hold client {pid}; node {node} ignored")
            else:
                self._node_of[pid] = node
                self._client_of[node] = pid

    def _exchange(
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
        got = self._exchange(out, [self._node_of[c] for c in targets], time.monotonic() + timeout)
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
        """Ask nodes that connected after the handshake for their partition, if needed."""
        if any(c not in self._node_of for c in clients) and (
            set(self.grid.get_node_ids()) - self._asked
        ):
            self._hello(deadline=time.monotonic() + min(timeout, 30.0))

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
        """One phase under Flower's SecAgg+ (:mod:`fedad.fl.flower_secagg`).

        Bytes, dropout draws and the ``min_clients`` rule as in :meth:`send_and_receive`;
        the payload counted up is each contribution's masked vector and clear scalars, the
        rest of the protocol's traffic is ``overhead_bytes``.
        """
        from fedad.fl.flower_secagg import secure_mean

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
            got = self._exchange(msgs, [self._node_of[c] for c in unknown], deadline)
            for node, reply in got.items():
                if reply.has_error() or not reply.has_content():
                    continue
                n = recorddict_meta(reply.content).get("n-train")
                if isinstance(n, int) and not isinstance(n, bool) and n >= 0:
                    self._sizes[self._client_of[node]] = n
        return float(max(self._sizes.values())) if self._sizes else None


# ---------------------------------------------------------------------------- server side


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
    from fedad.fl.engine import drive

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


# ---------------------------------------------------------------------------- results files


def _json_default(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    raise TypeError(f"cannot write {type(v).__name__} to JSON")


class _WarningRelay(logging.Handler):
    """Appends every WARNING (and worse) of the ``fedad`` logger to ``warnings.jsonl``."""

    def __init__(self, results: ResultsDir) -> None:
        super().__init__(level=logging.WARNING)
        self.results = results

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.results.append_warning(record.getMessage())
        except Exception:  # a full disk must not stop the run
            self.handleError(record)


class ResultsDir:
    """How a ServerApp in another process hands its :class:`RunOutcome` back.

    Files: ``rounds.jsonl`` (one history row per line, appended as rounds end, so the
    caller can show progress), ``warnings.jsonl`` (the ServerApp's warnings as they happen,
    e.g. ``node 2: no reply to 'train' within 30 s``, which the caller logs on its console),
    ``arrays.npz`` (``result/NAME`` and ``eval/CLIENT/NAME``) and ``outcome.json``
    (everything else; written last, atomically: its presence means done), or
    ``error.json`` when the server program failed.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @property
    def rounds_file(self) -> Path:
        return self.path / "rounds.jsonl"

    @property
    def outcome_file(self) -> Path:
        return self.path / "outcome.json"

    @property
    def error_file(self) -> Path:
        return self.path / "error.json"

    def append_round(self, row: dict[str, Any]) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        with self.rounds_file.open("a") as fh:
            fh.write(json.dumps(row, default=_json_default) + "\n")

    def read_rounds(self, start: int = 0) -> list[dict[str, Any]]:
        """Complete rows from row ``start`` on."""
        if not self.rounds_file.is_file():
            return []
        lines = self.rounds_file.read_text().split("\n")[:-1]  # the last may be partial
        return [json.loads(x) for x in lines[start:]]

    @property
    def warnings_file(self) -> Path:
        return self.path / "warnings.jsonl"

    def append_warning(self, text: str) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        with self.warnings_file.open("a") as fh:
            fh.write(json.dumps(text) + "\n")

    def read_warnings(self, start: int = 0) -> list[str]:
        """Complete warning lines from line ``start`` on."""
        if not self.warnings_file.is_file():
            return []
        lines = self.warnings_file.read_text().split("\n")[:-1]  # the last may be partial
        return [str(json.loads(x)) for x in lines[start:]]

    @contextlib.contextmanager
    def relay_warnings(self) -> Iterator[None]:
        """Within the block, the ``fedad`` logger's warnings also go to ``warnings.jsonl``."""
        handler = _WarningRelay(self)
        log.addHandler(handler)
        try:
            yield
        finally:
            log.removeHandler(handler)

    def write(self, outcome: RunOutcome) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        arrays: dict[str, np.ndarray] = {f"result/{k}": v for k, v in outcome.result.arrays.items()}
        evals: dict[str, Any] = {}
        for cid, m in outcome.evaluations.items():
            arrays.update({f"eval/{cid}/{k}": v for k, v in m.arrays.items()})
            evals[str(cid)] = {"kind": m.kind, "scalars": dict(m.scalars), "arrays": list(m.arrays)}
        np.savez(self.path / "arrays.npz", **arrays)  # type: ignore[arg-type]
        doc = {
            "result_scalars": outcome.result.scalars,
            "result_arrays": list(outcome.result.arrays),
            "evaluations": evals,
            "history": outcome.history,
            "events": outcome.events,
            "bytes_up": outcome.bytes_up,
            "bytes_down": outcome.bytes_down,
            "seconds": outcome.seconds,
            "client_seconds": outcome.client_seconds,
            "missing_nodes": outcome.missing_nodes,
        }
        tmp = self.outcome_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, default=_json_default))
        tmp.replace(self.outcome_file)

    def write_error(self, err: BaseException) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        text = str(err) if isinstance(err, FedadError) else f"{type(err).__name__}: {err}"
        tmp = self.error_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"error": text, "user_error": isinstance(err, FedadError)}))
        tmp.replace(self.error_file)

    def read(self) -> RunOutcome:
        from fedad.fl.algorithm import ServerResult
        from fedad.fl.engine import RunOutcome
        from fedad.report.rundir import read_npz

        doc = json.loads(self.outcome_file.read_text())
        # the run directory's one .npz reader: this is fedad's own hand-off, but it lies in
        # the run's .flower/ (a link planted there is refused, a damaged file one line)
        arrays = read_npz(self.path / "arrays.npz", fix="run the experiment again")
        result = ServerResult(
            arrays={k: arrays[f"result/{k}"] for k in doc["result_arrays"]},
            scalars=dict(doc["result_scalars"]),
        )
        evaluations = {
            int(cid): Message(
                e["kind"], {k: arrays[f"eval/{cid}/{k}"] for k in e["arrays"]}, e["scalars"]
            )
            for cid, e in doc["evaluations"].items()
        }
        return RunOutcome(
            result=result,
            evaluations=dict(sorted(evaluations.items())),
            history=doc["history"],
            events=doc["events"],
            bytes_up=int(doc["bytes_up"]),
            bytes_down=int(doc["bytes_down"]),
            seconds=float(doc["seconds"]),
            client_seconds=float(doc["client_seconds"]),
            missing_nodes=[int(x) for x in doc["missing_nodes"]],
        )

    def read_error(self) -> str | None:
        if not self.error_file.is_file():
            return None
        return str(json.loads(self.error_file.read_text())["error"])


# ---------------------------------------------------------------------------- entry point


def run_flower(
    cfg: ExperimentConfig,
    algorithm: Algorithm,
    fed: Federation,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    workdir: Path | None = None,
) -> RunOutcome:
    """Run ``algorithm`` on Flower as ``cfg.engine.name`` says.

    ``workdir`` (the run's output directory) holds Flower's home, logs and the results
    hand-over under ``.flower/``; without it a temporary directory is used and removed.
    """
    name = cfg.engine.name
    require_flwr(name)
    if len(fed.clients) != algorithm.setup.num_clients:
        raise ConfigError(
            f"the algorithm was built for {algorithm.setup.num_clients} clients, "
            f"the federation has {len(fed.clients)}"
        )
    if name == "flower-simulation":
        from fedad.fl.flower_sim import run_simulation

        return run_simulation(cfg, algorithm, fed, on_round=on_round, workdir=workdir)
    if name == "flower-deployment":
        from fedad.fl.flower_deploy import run_deployment

        return run_deployment(cfg, algorithm, fed, on_round=on_round, workdir=workdir)
    raise ConfigError(f"engine.name = '{name}' is not a Flower engine")
