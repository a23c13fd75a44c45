"""Flower's SecAgg+ under fedad's server programs: the glue on both sides.

Flower 1.41 ships SecAgg+ as a workflow for its legacy ``Strategy`` API
(``SecAggPlusWorkflow`` needs a ``LegacyContext`` whose strategy answers ``configure_fit``
and ``aggregate_fit``) and as a client mod (``secaggplus_mod``) that wraps the ``train``
handler. fedad's server programs drive a grid instead, so one secure phase
(:meth:`ServerContext.mean <fedad.core.context.ServerContext.mean>`) becomes one run of the
workflow:

* **Server** (:func:`secure_mean`): a :class:`PhaseStrategy` hands the workflow one
  ``FitIns`` per node (the phase's :class:`~fedad.core.messages.Message`, :func:`encode_fitins`)
  and keeps what ``aggregate_fit`` receives: the unmasked weighted mean and each node's
  clear ``FitRes`` metrics. The workflow talks to the nodes through :class:`WorkflowGrid`,
  which delivers with the adapter's push/pull, applies its timeout, counts the protocol's
  bytes and notes which node failed in which stage. Nothing else of the legacy API is used.
* **Client** (``FedadClientApp._secure_step`` in :mod:`fedad.fl.flower.app`, called through
  ``secaggplus_mod``): in the stage that collects masked vectors it decodes the message
  (:func:`decode_content`), runs the algorithm's handler, checks the reply
  (:func:`checked`) and returns it as a ``FitRes`` (:func:`encode_fitres`); the mod then
  quantizes, masks and sends it. It also seeds the stochastic rounding
  (:func:`~fedad.core.secagg.rounding_seed`).

The arithmetic and its error bound are in :mod:`fedad.core.secagg`. This module imports
``flwr``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, RecordDict
from flwr.app import Message as FlowerMessage
from flwr.common import (
    Code,
    FitIns,
    FitRes,
    Parameters,
    Status,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.server import ClientManager, LegacyContext
from flwr.server.strategy import Strategy
from flwr.server.workflow import SecAggPlusWorkflow

from fedad.core.messages import Message, Scalar, payload_nbytes
from fedad.core.secagg import (
    WEIGHT,
    SecAggSettings,
    SecureOutcome,
    check_secure_reply,
    flatten,
    quantization_range,
)
from fedad.core.validate import ArraySpec
from fedad.fl.flower.internals import (
    MAIN_CONFIGS_RECORD,
    MAIN_PARAMS_RECORD,
    RECORD_KEY_CONFIGS,
    ClientProxy,
    Stage,
    WorkflowKey,
    WorkflowState,
)
from fedad.fl.flower.internals import SecAggPlusKey as Key
from fedad.fl.flower.internals import recorddict_compat as compat

KIND = "fedad.kind"
NAMES = "fedad.names"
SPEC = "fedad.spec"
SCALARS = "fedad.scalars"
WANTED = "fedad.wanted"
MAX_WEIGHT = "fedad.max_weight"
SECONDS = "fedad.seconds"
REFUSED = "fedad-refused:"
"""Prefix of the error a client answers when its own reply fails the secure-reply check."""


class RefusedReply(ValueError):
    """A client's reply may not enter the secure sum (see ``check_secure_reply``)."""

    def __str__(self) -> str:
        return f"{REFUSED} {self.args[0]}"


# ---------------------------------------------------------------------------- encoding


def encode_fitins(
    msg: Message, spec: Mapping[str, ArraySpec], wanted: Sequence[str], max_weight: float
) -> FitIns:
    """The ``FitIns`` carrying ``msg`` (arrays in name order, names and scalars as JSON) and
    what its reply must look like."""
    names = list(msg.arrays)
    config: dict[str, Scalar] = {
        KIND: msg.kind,
        NAMES: json.dumps(names),
        SCALARS: json.dumps(dict(msg.scalars)),
        SPEC: json.dumps({k: [list(s.shape), s.dtype] for k, s in spec.items()}),
        WANTED: json.dumps(list(wanted)),
        MAX_WEIGHT: float(max_weight),
    }
    params = ndarrays_to_parameters([np.asarray(msg.arrays[n]) for n in names])
    return FitIns(params, config)  # type: ignore[arg-type]


def decode_fitins(
    fitins: FitIns,
) -> tuple[Message, dict[str, ArraySpec], list[str], float]:
    """(message, reply spec, reply scalars, weight bound) from :func:`encode_fitins`."""
    cfg = fitins.config
    names = json.loads(str(cfg[NAMES]))
    arrays = dict(zip(names, parameters_to_ndarrays(fitins.parameters), strict=True))
    msg = Message(str(cfg[KIND]), arrays, json.loads(str(cfg[SCALARS])))
    spec = {k: ArraySpec(tuple(sh), dt) for k, (sh, dt) in json.loads(str(cfg[SPEC])).items()}
    return msg, spec, json.loads(str(cfg[WANTED])), float(cfg[MAX_WEIGHT])


def encode_fitres(reply: Message, spec: Mapping[str, ArraySpec], seconds: float) -> RecordDict:
    """The checked reply as the ``FitRes`` record ``secaggplus_mod`` masks: the spec's arrays
    flattened, the weight as ``num_examples``, the scalars in the clear."""
    fitres = FitRes(
        Status(Code.OK, ""),
        ndarrays_to_parameters(flatten(reply.arrays, list(spec))),
        int(reply.scalars[WEIGHT]),
        {KIND: reply.kind, SCALARS: json.dumps(dict(reply.scalars)), SECONDS: seconds},
    )
    return compat.fitres_to_recorddict(fitres, keep_input=True)


def decode_clear(metrics: Mapping[str, Any]) -> Message:
    """A reply's clear part (kind and scalars) from its ``FitRes`` metrics."""
    return Message(str(metrics[KIND]), {}, json.loads(str(metrics[SCALARS])))


def config_nbytes(record: ConfigRecord, skip: Iterable[str] = ()) -> int:
    """Payload bytes of a ``ConfigRecord`` but its ``skip`` keys: bytes and text by length,
    numbers 8 each, lists their items' sum (:func:`~fedad.core.messages.payload_nbytes`)."""
    skipped = set(skip)
    return payload_nbytes(v for k, v in record.items() if k not in skipped)


# ---------------------------------------------------------------------------- server side


class NodeProxy(ClientProxy):
    """A node id in the shape the legacy API expects; it is never called."""

    def __init__(self, node_id: int) -> None:
        super().__init__(str(node_id))
        self.node_id = node_id

    def _unused(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("fedad drives Flower's grid, not client proxies")

    get_properties = get_parameters = fit = evaluate = reconnect = _unused


class PhaseStrategy(Strategy):
    """One secure phase as a legacy strategy: fixed ``FitIns`` out, the unmasked mean in."""

    def __init__(self, fitins: Mapping[int, FitIns]) -> None:
        self.fitins = dict(fitins)
        self.mean: list[np.ndarray] | None = None
        self.clear: dict[int, Message] = {}

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        return [(NodeProxy(n), f) for n, f in sorted(self.fitins.items())]

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[Any],
    ) -> tuple[Parameters | None, dict[str, Any]]:
        if results:
            self.mean = parameters_to_ndarrays(results[0][1].parameters)
        self.clear = {proxy.node_id: decode_clear(res.metrics) for proxy, res in results}
        return None, {}

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        return None

    def configure_evaluate(self, *args: Any, **kwargs: Any) -> list[Any]:
        return []

    def aggregate_evaluate(self, *args: Any, **kwargs: Any) -> tuple[None, dict[str, Any]]:
        return None, {}

    def evaluate(self, *args: Any, **kwargs: Any) -> None:
        return None


class SecAggPlus(SecAggPlusWorkflow):
    """Flower's workflow, with nodes that drop out before sharing their keys forgotten.

    In flwr 1.41 a node that misses the setup or share-keys stage stays in the sampled set,
    so the unmask stage asks the others for shares of its key, which they never received,
    and every one of them fails (``KeyError``): one dead node halts the phase. Such a node
    never entered anyone's masks, so after the share-keys stage only the nodes that
    completed it count as sampled, and neighbourhoods shrink to them; nodes that drop later
    are recovered from shares as the protocol intends.
    """

    def share_keys_stage(self, grid: Any, context: LegacyContext, state: WorkflowState) -> bool:
        super().share_keys_stage(grid, context, state)
        kept = set(state.active_node_ids)
        state.sampled_node_ids = kept
        state.nid_to_neighbours = {
            nid: neighbours & kept
            for nid, neighbours in state.nid_to_neighbours.items()
            if nid in kept
        }
        return self._check_threshold(state)


class NodeExchange(Protocol):
    """What a SecAgg+ run needs of :class:`~fedad.fl.flower.grid.FlowerGrid`."""

    @property
    def phase_no(self) -> int:
        """The number of the phase under way (the workflow's round)."""
        ...

    def flower_node_ids(self) -> list[int]:
        """The Flower node ids connected now."""
        ...

    def exchange(
        self, msgs: list[FlowerMessage], nodes: list[int], deadline: float
    ) -> dict[int, FlowerMessage]:
        """Push ``msgs`` (one per node of ``nodes``), pull replies until ``deadline``."""
        ...


class WorkflowGrid:
    """The grid the SecAgg+ workflow sees: delivery, timeout, bytes and failures per node."""

    def __init__(self, fgrid: NodeExchange, timeout: float) -> None:
        self.fgrid = fgrid
        self.timeout = timeout
        self.overhead = 0
        self.errors: dict[int, tuple[str, str]] = {}
        """Node -> (stage, reason) of its first failure."""
        self.silent: dict[int, str] = {}
        """Node -> the stage it did not answer in time."""
        self.seconds = 0.0
        self.contributed: dict[int, Message] = {}
        """Node -> the clear part of its masked-vector reply."""

    def get_node_ids(self) -> list[int]:
        return self.fgrid.flower_node_ids()

    def send_and_receive(
        self, messages: Iterable[FlowerMessage], *, timeout: float | None = None
    ) -> list[FlowerMessage]:
        msgs = list(messages)
        if not msgs:
            return []
        stage = str(msgs[0].content.config_records[RECORD_KEY_CONFIGS][Key.STAGE])
        for m in msgs:
            self.overhead += config_nbytes(m.content.config_records[RECORD_KEY_CONFIGS])
        nodes = [m.metadata.dst_node_id for m in msgs]
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        got = self.fgrid.exchange(msgs, nodes, deadline)
        for node in nodes:
            reply = got.get(node)
            if reply is None:
                self.silent.setdefault(node, stage)
            elif reply.has_error():
                self.errors.setdefault(node, (stage, (reply.error.reason or "").strip()))
            else:
                configs = reply.content.config_records
                skip = [Key.MASKED_PARAMETERS] if stage == Stage.COLLECT_MASKED_VECTORS else []
                self.overhead += config_nbytes(configs[RECORD_KEY_CONFIGS], skip)
                metrics = configs.get("fitres.metrics")
                if stage == Stage.COLLECT_MASKED_VECTORS and metrics is not None:
                    self.contributed[node] = decode_clear(metrics)
                    secs = metrics.get(SECONDS)
                    if isinstance(secs, float):
                        self.seconds += secs
        return [got[n] for n in nodes if n in got]


def secure_mean(
    fgrid: NodeExchange,
    nodes: Mapping[int, int],
    messages: Mapping[int, Message],
    arrays: Mapping[str, ArraySpec],
    wanted: Sequence[str],
    settings: SecAggSettings,
    max_weight: float,
    timeout: float,
) -> tuple[SecureOutcome, WorkflowGrid]:
    """Run one SecAgg+ phase over ``nodes`` (client id -> Flower node id).

    Returns the outcome keyed by client id and the workflow grid (failures, bytes).
    """
    client_of = {node: cid for cid, node in nodes.items()}
    fitins = {
        node: encode_fitins(messages[cid], arrays, wanted, max_weight)
        for cid, node in nodes.items()
    }
    strategy = PhaseStrategy(fitins)
    ctx = LegacyContext(Context(0, 0, {}, RecordDict(), {}), strategy=strategy)
    ctx.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord(
        {WorkflowKey.CURRENT_ROUND: fgrid.phase_no}
    )
    ctx.state.array_records[MAIN_PARAMS_RECORD] = ArrayRecord()
    workflow = SecAggPlus(
        settings.flower_shares(len(nodes)),
        settings.threshold,
        max_weight=max_weight,
        clipping_range=float(settings.clip),
        quantization_range=quantization_range(len(nodes)),
        timeout=timeout,
    )
    wgrid = WorkflowGrid(fgrid, timeout)
    out = SecureOutcome()
    flwr_log = logging.getLogger("flwr")
    level = flwr_log.level
    flwr_log.setLevel(max(level, logging.WARNING))  # one INFO block per phase is noise here
    try:
        workflow(wgrid, ctx)  # type: ignore[arg-type]
    except Exception as err:  # a broken protocol run is a failed phase, not a crash
        out.halted = f"SecAgg+ failed: {type(err).__name__}: {err}"
    finally:
        flwr_log.setLevel(level)
    out.overhead_bytes = wgrid.overhead
    for node, (stage, reason) in wgrid.errors.items():
        if stage == Stage.COLLECT_MASKED_VECTORS and REFUSED in reason:
            out.rejected[client_of[node]] = reason.split(REFUSED, 1)[1].strip()
    if strategy.mean is None:
        out.halted = out.halted or "too few clients completed the SecAgg+ stages"
        return out, wgrid
    out.mean = [np.asarray(v, dtype=np.float64) for v in strategy.mean]
    out.replies = {client_of[n]: m for n, m in sorted(strategy.clear.items())}
    return out, wgrid


# ---------------------------------------------------------------------------- client side


def decode_content(content: RecordDict) -> tuple[Message, dict[str, ArraySpec], list[str], float]:
    """The message, reply spec, reply scalars and weight bound of a masked-vectors stage."""
    return decode_fitins(compat.recorddict_to_fitins(content, keep_input=True))


def checked(
    reply: Message, msg: Message, spec: Mapping[str, ArraySpec], wanted: Sequence[str], bound: float
) -> Message:
    """``reply`` if it may enter the secure sum, else :class:`RefusedReply`."""
    why = check_secure_reply(reply, spec, wanted, msg.kind, bound)
    if why is not None:
        raise RefusedReply(why)
    return reply
