"""The Flower apps: one ``ServerApp`` and one ``ClientApp`` for every fedad algorithm.

``server_app`` and ``client_app`` are the components of the Flower App Bundle that
:mod:`fedad.fl.flower.deploy` submits (``fedad.fl.flower.app:server_app`` and
``fedad.fl.flower.app:client_app``); they read the run from Flower's run config
(:class:`~fedad.fl.flower.spec.RunSpec`). The simulation engine builds the same apps with the
spec given directly (:func:`make_server_app`, :class:`FedadClientApp`).

The client side registers the algorithm's handlers with Flower by phase name (``train`` ->
``@app.train()``, ``evaluate`` -> ``@app.evaluate()``, phase ``p`` -> ``@app.query("p")``);
in a deployment, where the algorithm is known only once a message of a run arrives, the
registration happens on that first message. Each handler call converts the Flower message
to a :class:`~fedad.core.messages.Message`, loads the client's state from
``context.state``, runs the algorithm's handler on the node's data, stores the state back
and replies. A handler that raises answers with a Flower error reply (the server records
``node K failed in 'phase': ...`` and goes on, as the in-process engine does). A ``train``
message that carries a SecAgg+ stage goes through Flower's ``secaggplus_mod`` instead
(:mod:`fedad.fl.flower.secagg`), which calls the phase's handler in the masked-vectors
stage.

A node's data: :func:`fedad.federation.build_federation` of the run's config (the
same config and seed as the in-process engine), client ``partition-id``. The federation is
cached per process (a simulation worker serves many partitions) and, when the environment
variable ``FEDAD_FLOWER_CACHE`` names a directory, the node's partition is cached there as
``.npz`` (a deployment starts a fresh process for every message). ``node_config`` may set
``fedad-data-config``: the path of a TOML file on the node whose ``[data]`` section
(this machine's data paths) replaces the run's; its ``data.name`` must match.

**Personalised models stay home.** In a deployment (the ClientApp built without a spec), the
``evaluate`` reply of a personalised method leaves the node with its scores and without the
detector's arrays: :func:`keep_detector_home` saves the detector in the directory that
``node_config`` names as ``fedad-models-dir`` (``fedad flower supernode --models-dir``), as a
small run directory that :func:`fedad.load` reads, and the reply's scalar ``node_model``
says where. A simulation (ClientApp built with the spec) keeps the in-process behaviour: the
detector travels back and the runner saves it in the run directory.

This module imports ``flwr``; import it only when the ``flower`` extra is installed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from flwr.app import ConfigRecord, Context, Error, RecordDict
from flwr.app import Message as FlowerMessage
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from fedad.config import ExperimentConfig, dump_toml, parse_config, read_toml
from fedad.core.algorithm import EVALUATE, Algorithm, Handler, ServerResult, update_phases
from fedad.core.errors import ConfigError, FedadError
from fedad.core.messages import Message, unprefixed
from fedad.core.secagg import rounding_seed
from fedad.core.types import ClientData, Features, Samples
from fedad.federation import build_federation
from fedad.fl.flower.codec import (
    HELLO,
    META_KEY,
    NODE_MODEL,
    SIZE,
    STATE_KEY,
    from_recorddict,
    route,
    state_from_record,
    state_to_record,
    to_recorddict,
)
from fedad.fl.flower.internals import RECORD_KEY_CONFIGS
from fedad.fl.flower.results import ResultsDir
from fedad.fl.flower.secagg import RefusedReply, checked, decode_content, encode_fitres
from fedad.fl.flower.server import serve
from fedad.fl.flower.spec import RunSpec
from fedad.fl.node import node_handlers
from fedad.fl.timeline import timeline_event
from fedad.rundir.checkpoints import save_checkpoint
from fedad.rundir.files import anchored, mkdir, staged_dir, write_text
from fedad.rundir.layout import CONFIG_FILE, METRICS_FILE
from fedad.rundir.read import read_npz

if TYPE_CHECKING:
    from fedad.fl.drive import RunOutcome  # (pulls in scipy: not needed by the handshake)

CACHE_ENV = "FEDAD_FLOWER_CACHE"
"""Environment variable: a directory where a SuperNode caches its partition."""
DATA_CONFIG_KEY = "fedad-data-config"
"""``node_config`` key: a node-local TOML whose ``[data]`` replaces the run's."""
MODELS_DIR_KEY = "fedad-models-dir"
"""``node_config`` key: the node-local directory where personalised detectors are saved."""
DETECTOR_PREFIX = "detector"
"""Arrays ``detector/NAME`` of an evaluate reply: a personalised method's detector."""
_SAFE_LABEL = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9_.+-]{0,63}")
CLIENT_APP_RAISED_EXCEPTION = 2  # Flower's ErrorCode.CLIENT_APP_RAISED_EXCEPTION


# ---------------------------------------------------------------------------- node data


def data_key(cfg: ExperimentConfig) -> str:
    """A hash of everything the federation may depend on: the whole config except the
    engine and the methods (seed, data, partition, attack, ...)."""
    doc = cfg.model_dump(mode="json", exclude={"engine", "methods"})
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:20]


_FEDERATIONS: dict[str, list[ClientData]] = {}
_ALGORITHMS: dict[str, Algorithm] = {}


def _save_client(path: Path, c: ClientData) -> None:
    """One client's data as ``.npz`` (no pickle): dense arrays, graphs and masks alike
    (:meth:`~fedad.core.types.Samples.arrays`)."""
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp.npz")
    arrays: dict[str, np.ndarray] = {
        "client_id": np.int64(c.client_id),  # type: ignore[dict-item]
        "y_train": c.y_train,
        "c_train": c.c_train,
        "y_test": c.y_test,
        "source": np.array(c.source),
        **c.train.arrays("train/"),
        **c.test.arrays("test/"),
    }
    np.savez(tmp, **arrays)  # type: ignore[arg-type]
    tmp.replace(path)


def _load_client(path: Path) -> ClientData:
    """A client's cached data (:func:`_save_client`) through the one reader of run
    directories' ``.npz`` files (:func:`fedad.rundir.read.read_npz`): the cache lies in a
    run's ``.flower/`` or a folder the node names, so it gets the same checks; a cache
    larger than that reader's cap (8 GiB) is refused and so rebuilt."""
    z = read_npz(path)
    train = Samples.from_arrays(z, "train/")
    test = Samples.from_arrays(z, "test/")
    return ClientData(
        client_id=int(z["client_id"]),
        x_train=train.x,
        y_train=z["y_train"],
        c_train=z["c_train"],
        x_test=test.x,
        y_test=z["y_test"],
        source=str(z["source"]),
        mask_train=train.mask,
        mask_test=test.mask,
    )


def client_data(cfg: ExperimentConfig, partition_id: int) -> ClientData:
    """Client ``partition_id`` of the federation of ``cfg`` (cached, see the module doc)."""
    key = data_key(cfg)
    if key in _FEDERATIONS:
        return _FEDERATIONS[key][partition_id]
    cache = os.environ.get(CACHE_ENV)
    path = Path(cache) / f"{key}-{partition_id}.npz" if cache else None
    if path is not None and path.is_file():
        try:
            return _load_client(path)
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, FedadError):
            pass  # a damaged or outdated cache file: rebuild it below

    clients = build_federation(cfg).clients
    _FEDERATIONS.clear()  # one federation per process is enough
    _FEDERATIONS[key] = clients
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        _save_client(path, clients[partition_id])
    return clients[partition_id]


def node_config_of(spec: RunSpec, context: Context) -> ExperimentConfig:
    """The run's config, with the node's own ``[data]`` section when it has one."""
    cfg = spec.config()
    local = context.node_config.get(DATA_CONFIG_KEY)
    if not local:
        return cfg

    raw = read_toml(str(local))
    if "data" not in raw:
        raise ConfigError(f"{DATA_CONFIG_KEY} '{local}' has no [data] section")
    mine = parse_config({**cfg.model_dump(mode="json"), "data": raw["data"]})
    if mine.data.name != cfg.data.name:
        raise ConfigError(
            f"this node's data config '{local}' has data.name = '{mine.data.name}', "
            f"the run uses '{cfg.data.name}'"
        )
    return mine


@dataclass
class Node:
    """What one client needs: its partition id, algorithm handlers and data."""

    partition_id: int
    handlers: dict[str, Handler]
    data: ClientData
    algorithm: Algorithm | None = None


def _partition(context: Context) -> tuple[int, int]:
    nc = context.node_config
    if "partition-id" not in nc or "num-partitions" not in nc:
        raise ConfigError(
            "this SuperNode has no partition-id/num-partitions in its node config",
            "start it with --node-config 'partition-id=I num-partitions=N'",
        )
    return int(nc["partition-id"]), int(nc["num-partitions"])


def load_node(spec: RunSpec, context: Context) -> Node:
    """The node of ``context`` for the run of ``spec``: algorithm and data, cached."""
    pid, parts = _partition(context)
    if parts != spec.num_partitions or not 0 <= pid < parts:
        raise ConfigError(
            f"this SuperNode holds partition {pid} of {parts}, "
            f"the run has {spec.num_partitions} clients"
        )
    akey = "\0".join([spec.method, spec.detector or "", spec.params_json, spec.setup_json])
    algorithm = _ALGORITHMS.get(akey)
    if algorithm is None:
        _ALGORITHMS.clear()
        algorithm = _ALGORITHMS[akey] = spec.build_algorithm()

    cfg = node_config_of(spec, context)
    data = client_data(cfg, pid)
    handlers = node_handlers(
        algorithm.handlers(),
        pid,
        parts,
        cfg.seed,
        cfg.attack,
        cfg.privacy,
        phases=update_phases(algorithm),
    )
    return Node(pid, handlers, data, algorithm)


# ---------------------------------------------------------------------------- node models


def node_model_dir(models_dir: str | Path, run_id: int, partition_id: int) -> Path:
    """Where a node keeps client ``partition_id``'s detector of Flower run ``run_id``:
    ``MODELS_DIR/run-RUN_ID/client-PARTITION_ID`` (absolute; ids are integers, so nothing
    in them can lead out of ``models_dir``)."""
    run, part = int(run_id), int(partition_id)
    if run < 0 or part < 0:
        raise ValueError(f"run id {run} and partition id {part} must not be negative")
    return Path(models_dir).resolve() / f"run-{run}" / f"client-{part}"


def keep_detector_home(
    reply: Message,
    models_dir: str | Path | None,
    *,
    run_id: int,
    partition_id: int,
    label: str,
    algorithm: Algorithm,
    config: ExperimentConfig,
) -> Message:
    """``reply`` without its ``detector/*`` arrays, which are saved on this node instead.

    The detector goes to :func:`node_model_dir` as a small run directory that
    :func:`fedad.load` reads like any other (written with the runner's own checkpoint
    writer, folder by folder atomically): ``metrics.json`` (what it is: run id, client,
    method; no metrics), ``config.toml`` (the run's config) and
    ``checkpoints/LABEL/{detector.json, client_ID.npz}``. The returned reply carries the
    scores as before, and the folder's path in the scalar ``node_model``. A reply without
    detector arrays (a method that is not personalised) is returned as it is.
    """
    own = unprefixed(reply.arrays, DETECTOR_PREFIX)
    if not own:
        return reply
    if not models_dir:
        raise ConfigError(
            f"this SuperNode has no {MODELS_DIR_KEY} in its node config, so it has nowhere "
            "to keep its personalised detector",
            "start it with `fedad flower supernode --models-dir DIR`, or give "
            f"flower-supernode --node-config '... {MODELS_DIR_KEY}=\"DIR\"'",
        )
    if not _SAFE_LABEL.fullmatch(label) or label in (".", ".."):
        raise ValueError(f"the method label {label[:40]!r} cannot name a folder")
    from fedad.fl.drive import RunOutcome

    root = Path(models_dir).resolve()
    folder = node_model_dir(root, run_id, partition_id)
    facts = {
        "kind": "node-model",
        "engine": "flower-deployment",
        "flower_run_id": int(run_id),
        "client": int(partition_id),
        "method": algorithm.name,
        "label": label,
        "seed": config.seed,
        "dataset": config.data.name,
        "saved": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    only = RunOutcome(ServerResult({}, {}), {int(partition_id): reply}, [], [], 0, 0, 0.0)
    try:
        mkdir(root)
        with anchored(root):  # below the models folder, nothing is written through a link
            mkdir(folder.parent)
            if not folder.parent.resolve().is_relative_to(root):
                raise FedadError(f"'{folder.parent}' is a link that leads out of '{root}'")
            config_text = dump_toml(config.model_dump(mode="json", exclude_none=True))
            with staged_dir(folder) as d:
                save_checkpoint(d, label, algorithm, only)
                write_text(d / CONFIG_FILE, config_text)
                doc = {"experiment": facts, "methods": {}}
                write_text(d / METRICS_FILE, json.dumps(doc, indent=2))
    except (FedadError, OSError) as err:
        reason = re.sub(r" \([^()]*--out\)$", "", str(err))  # the hint is for run directories
        raise FedadError(
            f"this node could not save its detector in '{folder}': {reason}",
            "give the SuperNode a writable --models-dir",
        ) from None
    kept = {k: v for k, v in reply.arrays.items() if not k.startswith(DETECTOR_PREFIX + "/")}
    return Message(reply.kind, kept, {**reply.scalars, NODE_MODEL: str(folder)})


# ---------------------------------------------------------------------------- client app


class FedadClientApp(ClientApp):
    """A ``ClientApp`` whose handlers are a fedad algorithm's, registered by phase name.

    With ``spec`` (simulation) the handlers are registered at once; without (deployment)
    the spec comes from each message's run config and the handlers are registered on the
    first message of a run. In a deployment (``keep_models_home``, by default when there is
    no ``spec``) a personalised method's detector stays on the node
    (:func:`keep_detector_home`).
    """

    def __init__(self, spec: RunSpec | None = None, keep_models_home: bool | None = None) -> None:
        super().__init__()
        self._spec = spec
        self._keep_home = spec is None if keep_models_home is None else keep_models_home
        """Whether personalised detectors stay on the node (:func:`keep_detector_home`):
        by default in a deployment (no ``spec``), not in a simulation."""
        self._routes: set[str] = {"train"}
        self.query(HELLO)(self._hello)
        self.query(SIZE)(self._size)
        self.train()(self._train_entry)
        if spec is not None:
            for phase in spec.build_algorithm().handlers():
                self._register(phase)

    def spec_of(self, context: Context) -> RunSpec:
        """The run's spec: the one given, else the run config's."""
        return self._spec or RunSpec.from_run_config(context.run_config)

    def __call__(self, message: FlowerMessage, context: Context) -> FlowerMessage:
        if message.metadata.message_type != f"query.{HELLO}" and self._spec is None:
            try:
                for phase in self.spec_of(context).build_algorithm().handlers():
                    self._register(phase)
            except Exception as err:
                return _error_reply(message, err)
        return super().__call__(message, context)

    def _register(self, phase: str) -> None:
        r = route(phase)
        if r in self._routes:
            return
        category, _, action = r.partition(".")
        register: dict[str, Callable[..., Any]] = {
            "train": self.train,
            "evaluate": self.evaluate,
            "query": self.query,
        }
        register[category](action or "default")(functools.partial(self._handle, phase))
        self._routes.add(r)

    def _hello(self, message: FlowerMessage, context: Context) -> FlowerMessage:
        try:
            pid, parts = _partition(context)
        except ConfigError as err:
            return _error_reply(message, err)
        info = ConfigRecord({"kind": HELLO, "partition-id": pid, "num-partitions": parts})
        return FlowerMessage(RecordDict({META_KEY: info}), reply_to=message)

    def _size(self, message: FlowerMessage, context: Context) -> FlowerMessage:
        """Answer the training-set size: SecAgg+'s weight bound (FedAvg weights are public)."""
        try:
            node = load_node(self.spec_of(context), context)
        except Exception as err:
            return _error_reply(message, err)
        info = ConfigRecord({"kind": SIZE, "n-train": int(node.data.n_train)})
        return FlowerMessage(RecordDict({META_KEY: info}), reply_to=message)

    def _train_entry(self, message: FlowerMessage, context: Context) -> FlowerMessage:
        """Flower's ``train`` route: a SecAgg+ stage goes through ``secaggplus_mod``, any
        other message to the algorithm's ``train`` handler."""
        if RECORD_KEY_CONFIGS not in message.content.config_records:
            return self._handle("train", message, context)
        from flwr.client.mod import secaggplus_mod

        saved = np.random.get_state()  # the seeded rounding must not leak into the process
        try:
            return secaggplus_mod(message, context, self._secure_step)
        except RefusedReply as err:
            return FlowerMessage(Error(CLIENT_APP_RAISED_EXCEPTION, str(err)), reply_to=message)
        except Exception as err:
            return _error_reply(message, err)
        finally:
            np.random.set_state(saved)

    def _secure_step(self, message: FlowerMessage, context: Context) -> FlowerMessage:
        """The masked-vectors stage: run the phase's handler, check the reply, seed the
        rounding; ``secaggplus_mod`` then quantizes and masks the returned ``FitRes``."""
        spec = self.spec_of(context)
        node = load_node(spec, context)
        msg, arrays, wanted, bound = decode_content(message.content)
        handler = node.handlers[msg.kind]
        state = state_from_record(context.state[STATE_KEY]) if STATE_KEY in context.state else {}
        t0 = time.perf_counter()
        try:
            reply = checked(handler(state, node.data, msg), msg, arrays, wanted, bound)
        finally:
            context.state[STATE_KEY] = state_to_record(state)
        seconds = time.perf_counter() - t0
        # secaggplus_mod's stochastic rounding draws from NumPy's global stream: seed it
        round_no = int(msg.get("round", 0))
        np.random.seed(rounding_seed(spec.config().seed, round_no, node.partition_id, msg.kind))
        return FlowerMessage(encode_fitres(reply, arrays, seconds), reply_to=message)

    def _handle(self, phase: str, message: FlowerMessage, context: Context) -> FlowerMessage:
        try:
            spec = self.spec_of(context)
            node = load_node(spec, context)
            msg = from_recorddict(message.content)
            if msg.kind != phase:
                raise ValueError(f"message of phase '{msg.kind}' routed to '{phase}'")
            handler = node.handlers[phase]
        except Exception as err:
            return _error_reply(message, err)
        state = state_from_record(context.state[STATE_KEY]) if STATE_KEY in context.state else {}
        t0 = time.perf_counter()
        try:
            reply = handler(state, node.data, msg)
            seconds = time.perf_counter() - t0
            if phase == EVALUATE and self._keep_home:
                reply = keep_detector_home(
                    reply,
                    str(context.node_config.get(MODELS_DIR_KEY) or "") or None,
                    run_id=context.run_id,
                    partition_id=node.partition_id,
                    label=spec.label or spec.method,
                    algorithm=node.algorithm or spec.build_algorithm(),
                    config=spec.config(),
                )
            content = to_recorddict(
                reply, meta={"partition-id": node.partition_id, "seconds": seconds}
            )
        except Exception as err:  # a failing handler is a failed node, as in-process
            return _error_reply(message, err)
        finally:
            context.state[STATE_KEY] = state_to_record(state)
        return FlowerMessage(content, reply_to=message)


def _error_reply(message: FlowerMessage, err: BaseException) -> FlowerMessage:
    return FlowerMessage(Error(CLIENT_APP_RAISED_EXCEPTION, repr(err)), reply_to=message)


# ---------------------------------------------------------------------------- server app


def make_server_app(
    spec: RunSpec,
    algorithm: Algorithm,
    sink: list[RunOutcome],
    on_round: Callable[[dict[str, Any]], None] | None = None,
    server_data: Features | None = None,
    poll_interval: float = 0.02,
) -> ServerApp:
    """A ServerApp running ``algorithm`` (this very object) and appending to ``sink``."""
    app = ServerApp()

    @app.main()
    def _main(grid: Grid, context: Context) -> None:
        sink.append(serve(grid, spec, algorithm, on_round, poll_interval, server_data=server_data))

    return app


def server_normal_of(spec: RunSpec) -> Features | None:
    """The server's held-out normal samples (``data.server_normal`` of the run config),
    derived where the ServerApp runs from the config alone, like the nodes derive their
    partitions: no server arrays are handed over in files or messages. ``None`` when the
    run gives the server none."""
    cfg = spec.config()
    if cfg.data.server_normal <= 0:
        return None

    return build_federation(cfg).server_normal


server_app = ServerApp()
"""The deployment ServerApp: the run from run config, results to ``fedad-results``."""


@server_app.main()
def _deployment_main(grid: Grid, context: Context) -> None:
    timeline_event("serverapp-main", time=time.time())
    spec = RunSpec.from_run_config(context.run_config)
    if not spec.results_dir:
        raise ValueError("run config 'fedad-results' is empty: nowhere to write the results")
    results = ResultsDir(spec.results_dir)
    try:
        outcome = serve(
            grid,
            spec,
            spec.build_algorithm(),
            on_round=results.append_round,
            poll_interval=0.1,
            server_data=server_normal_of(spec),
        )
    except BaseException as err:
        results.write_error(err)
        raise
    results.write(outcome)


client_app = FedadClientApp()
"""The deployment ClientApp: the run from run config, the partition from node config."""
