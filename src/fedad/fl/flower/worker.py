"""One long-running ClientApp process per SuperNode: torch and fedad load once per node.

Flower 1.41 turns every message a SuperNode receives into a *task*. In Flower's default
(``subprocess``) isolation, the SuperExec that the SuperNode starts launches a fresh
``flwr-clientapp`` process for each task; that process installs the app bundle, imports
the ClientApp's module (for fedad: torch and fedad, about 2 s), handles one message (paying
torch's first optimizer step again) and exits. A deployment round then costs seconds of
start-up per node on top of the SuperNode's 3 s poll of the SuperLink.

With ``flower-supernode --isolation process`` the SuperNode starts no SuperExec and leaves
its tasks to an outside process, which takes them from the node's Runtime API (Flower's
``AcquireTask``; the SuperExec polls the same call). This module is that process for
fedad: :func:`serve_node` takes the node's ClientApp tasks one after another and runs each
the way ``flwr-clientapp`` does (:mod:`flwr.supernode.runtime.run_clientapp`: pull the
message, context and run with the task's token; call the ClientApp; push the reply and
the updated context; task heartbeats meanwhile), but in this process, which keeps torch,
fedad, the node's data and the algorithm warm between messages. The client's state still
lives where Flower keeps it (``context.state``, pulled and pushed with every task), so a
run gives the results it gives with a process per message; only where the time goes
changes.

**Only fedad's ClientApp runs here.** ``flwr-clientapp`` imports whatever module the run's
app bundle names, so anyone who can submit a run to the SuperLink chooses the code a
SuperNode runs. This process always calls :data:`fedad.fl.flower.app.client_app`, and a
task whose bundle names another ClientApp gets an error reply saying so.

A handler that raises is an error reply (as before: the server records the node's
failure and the round goes on); a task whose heartbeat the SuperNode refuses (the run was
stopped, or the task expired) is finished and the process takes the next one. Should the
process itself die mid-task, the SuperNode answers that message with Flower's "ClientApp
crashed" error once the task's heartbeat lapses, and whoever started this process starts
another (:class:`~fedad.fl.flower.deploy.local.LocalDeployment`, ``fedad flower supernode``).

Run it as ``python -m fedad.fl.flower.worker --runtime-api-address HOST:PORT [--insecure |
--root-certificates PEM] [--poll SECONDS]``. This module imports ``flwr`` (the ``flower``
extra) and, before it serves anything, torch and fedad's ClientApp.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
from flwr.app import Context, Error
from flwr.app import Message as FlowerMessage

from fedad.core.algorithm import registry
from fedad.fl.flower.app import load_node
from fedad.fl.flower.codec import HELLO
from fedad.fl.flower.internals import (
    AcquireTaskRequest,
    ErrorCode,
    Fab,
    HeartbeatSender,
    Node,
    PullAppMessagesRequest,
    PullTaskInputRequest,
    Run,
    RuntimeHttpClient,
    RuntimeTokenHttpInterceptor,
    RuntimeVersionHttpInterceptor,
    SendTaskHeartbeatRequest,
    SubStatus,
    TaskIdentity,
    TaskType,
    context_from_proto,
    fab_from_proto,
    get_fab_config,
    make_confirm_message_received_fn_protobuf,
    make_pull_object_fn_protobuf,
    make_simple_http_retry_invoker,
    pull_and_inflate_object_from_tree,
    push_message,
    push_task_output,
    run_from_proto,
)
from fedad.fl.flower.spec import RunSpec
from fedad.fl.timeline import timeline_event

CLIENT_APP_REF = "fedad.fl.flower.app:client_app"
"""The only ClientApp this process runs (the component of fedad's generated app bundle)."""
POLL_MIN = 0.02
"""Seconds between two ``AcquireTask`` calls right after a task (loopback)."""
POLL = 0.2
"""Seconds between two ``AcquireTask`` calls once the node has been idle for a while: the
wait grows from :data:`POLL_MIN` by a quarter per empty poll up to this. Each poll costs
the SuperNode and this process about a millisecond of CPU each (measured: 20 polls a
second kept the pair at 7% of a core), so an idle node costs what Flower's own SuperExec
costs at fedad's 0.25 s poll; Flower's default is 1 s
(``FLWR_SUPEREXEC_TASK_POLL_INTERVAL``)."""
HELLO_TYPE = f"query.{HELLO}"
"""Flower's message type of the handshake that opens every run."""

log = logging.getLogger("fedad.fl.flower.worker")


@dataclass(frozen=True)
class RuntimeAddress:
    """How to reach a SuperNode's Runtime API: ``HOST:PORT``, and TLS or not."""

    address: str
    insecure: bool = True
    root_certificates: bytes | None = None

    def client(self, component: str, token: str | None = None) -> RuntimeHttpClient:
        """A Runtime API client; with ``token``, one that acts for that task."""
        interceptors: list[Any] = [RuntimeVersionHttpInterceptor(component_name=component)]
        if token is not None:
            interceptors.append(RuntimeTokenHttpInterceptor(token))
        return RuntimeHttpClient.from_server_address(
            server_address=self.address,
            insecure=self.insecure,
            root_certificates=self.root_certificates,
            interceptors=interceptors,
            retry_invoker=make_simple_http_retry_invoker(),
        )


def pull_task_input(
    client: RuntimeHttpClient, wait: float = 5.0
) -> tuple[FlowerMessage, Context, Run, Fab]:
    """The task's message, context, run and app bundle, as Flower's ``flwr-clientapp``
    pulls them (:func:`flwr.supernode.runtime.run_clientapp.pull_task_input`), with two
    changes for a process that is already running when the task appears: the message is
    asked for again for up to ``wait`` seconds (the SuperNode creates the task a moment
    before it stores the message), and an object that the SuperNode is still pulling from
    the SuperLink is asked for again after 10 ms, not after Flower's 1 s first backoff."""
    res = client.PullTaskInput(PullTaskInputRequest())
    TaskIdentity.task_id = res.task_id
    TaskIdentity.run_id = res.run.run_id
    TaskIdentity.node_id = res.context.node_id
    context = context_from_proto(res.context)
    run = run_from_proto(res.run)
    fab = fab_from_proto(res.fab)
    deadline = time.monotonic() + wait
    while True:
        pulled = client.PullMessages(PullAppMessagesRequest())
        if pulled.messages_list or time.monotonic() >= deadline:
            break
        time.sleep(0.01)
    if not pulled.messages_list:
        raise RuntimeError("No messages received from Runtime API")
    node = Node(node_id=context.node_id)
    tree = pulled.message_object_trees[0]
    message = pull_and_inflate_object_from_tree(
        tree,
        make_pull_object_fn_protobuf(client.PullObject, node, context.run_id),
        make_confirm_message_received_fn_protobuf(
            client.ConfirmMessageReceived, node, context.run_id
        ),
        return_type=FlowerMessage,
        initial_backoff=0.01,
        backoff_cap=0.25,
    )
    message.metadata.__dict__["_message_id"] = tree.object_id
    return message, context, run, fab


def bundle_client_app(fab_content: bytes) -> str:
    """The ClientApp that a run's app bundle names (``tool.flwr.app.components.clientapp``),
    or ``""`` when it names none or the bundle cannot be read."""
    try:
        node: Any = get_fab_config(fab_content)
    except Exception:  # a damaged bundle: it names nothing we run
        return ""
    for key in ("tool", "flwr", "app", "components", "clientapp"):
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, str) else ""


class _TaskHeartbeat:
    """Flower's :class:`HeartbeatSender` for one task, except that a refused heartbeat (the
    run was stopped, the task expired) only marks the task as refused: ``flwr-clientapp``
    raises SIGINT in itself then, which here would stop the whole node's process."""

    def __init__(self, client: RuntimeHttpClient) -> None:
        self.refused = threading.Event()
        request = SendTaskHeartbeatRequest()

        def beat() -> bool:
            try:
                res = client.SendTaskHeartbeat(request)
            except httpx.TransportError:
                return False
            except httpx.HTTPStatusError as err:
                if err.response.status_code in (503, 504):
                    return False
                self.refused.set()
                return True
            if not res.success:
                self.refused.set()
            return True

        self._sender = HeartbeatSender(beat)

    def __enter__(self) -> _TaskHeartbeat:
        self._sender.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._sender.is_running:
            self._sender.stop()


@dataclass(frozen=True)
class TaskDone:
    """What :func:`run_task` did: the task's final sub-status (``completed`` or ``failed``),
    the type of the message it answered (``train``, ``query.fedad_hello``, ...; ``""`` when
    none was pulled) and the context it pushed back (``None`` when none was pulled)."""

    status: str
    message_type: str
    context: Context | None


def run_task(
    runtime: RuntimeAddress,
    token: str,
    app: Callable[[FlowerMessage, Context], FlowerMessage],
    allowed: str = CLIENT_APP_REF,
    pending_at: str = "",
) -> TaskDone:
    """Run one ClientApp task in this process, as ``flwr-clientapp`` runs it in its own.

    ``pending_at``: when the SuperNode created the task (Flower's ISO time, for the log).
    Pull the task's message, context, run and app bundle; answer with ``app`` when the
    bundle names ``allowed``, else with an error reply; push the reply, then the context
    (the client's state) and the sub-status. Exceptions of ``app`` become an error reply,
    as in ``flwr-clientapp``; errors talking to the SuperNode are logged.
    """
    client = runtime.client("flwr-clientapp", token)
    times: dict[str, float] = {"acquired": time.time()}
    with contextlib.suppress(ValueError):
        times["pending"] = datetime.fromisoformat(pending_at).timestamp()
    message: FlowerMessage | None = None
    reply: FlowerMessage | None = None
    context: Context | None = None
    sub_status, details = SubStatus.FAILED, "ClientApp task failed due to unknown reason"
    try:
        with _TaskHeartbeat(client) as beat:
            try:
                message, context, _run, fab = pull_task_input(client)
                times["input"] = time.time()
                named = bundle_client_app(fab.content)
                if named != allowed:
                    reason = (
                        f"this SuperNode runs fedad's ClientApp ({allowed}) only; the run's "
                        f"app bundle names {named or 'none'!r}"
                    )
                    reply = FlowerMessage(
                        Error(code=ErrorCode.LOAD_CLIENT_APP_EXCEPTION, reason=reason),
                        reply_to=message,
                    )
                    details = reason
                else:
                    reply = app(message, context)
                    sub_status, details = SubStatus.COMPLETED, ""
                times["handled"] = time.time()
            except Exception as ex:  # the ClientApp failed: an error reply, as flwr-clientapp
                log.exception("ClientApp raised an exception")
                details = f"{type(ex)}:<'{ex}'>"
                if message is not None:
                    reply = FlowerMessage(
                        Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=details),
                        reply_to=message,
                    )
            if beat.refused.is_set():
                log.warning("the SuperNode refused this task's heartbeat (run stopped?)")
            if reply is not None and context is not None:
                try:
                    push_message(client, reply, context)
                except Exception:
                    log.exception("could not push the reply to the SuperNode")
                    sub_status = SubStatus.FAILED
    finally:
        push_task_output(client=client, context=context, sub_status=sub_status, details=details)
        client.close()
        times["pushed"] = time.time()
        _log_task(message, times, str(sub_status))
    kind = message.metadata.message_type if message is not None else ""
    return TaskDone(str(sub_status), kind, context)


def _log_task(message: FlowerMessage | None, times: dict[str, float], status: str) -> None:
    """One line per task: what it was and where its seconds went (and, when
    ``FEDAD_FLOWER_TIMELINE`` names a file, the same as a timeline event)."""
    kind = message.metadata.message_type if message is not None else "?"
    t0 = times["acquired"]
    steps = {k: v - t0 for k, v in times.items() if k != "acquired"}
    log.info(
        "task %s %s: %s",
        kind,
        status,
        ", ".join(f"{k} {v:+.3f} s" for k, v in steps.items()),
    )
    timeline_event(
        "node-task",
        message_id=message.metadata.message_id if message is not None else "",
        message_type=kind,
        status=status,
        **times,
    )


def serve_node(
    runtime: RuntimeAddress,
    app: Callable[[FlowerMessage, Context], FlowerMessage] | None = None,
    poll: float = POLL,
    stop: threading.Event | None = None,
    on_task: Callable[[TaskDone], None] | None = None,
) -> None:
    """Take the node's ClientApp tasks one after another and run them here, until ``stop``
    is set (never, from the command line). ``app``: fedad's deployment ClientApp by default
    (then, after a run's first message, the handshake, the node's data and algorithm are
    prepared while the SuperNode waits for the next: :func:`prepare_node`). ``poll``: the
    longest wait between two polls (:data:`POLL`). ``on_task`` is called after each task."""
    prepare = app is None
    if app is None:
        from fedad.fl.flower.app import client_app

        app = client_app
    stop = stop or threading.Event()
    acquire = runtime.client("SuperExec")
    request = AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP])
    wait = min(POLL_MIN, poll)
    try:
        while not stop.is_set():
            try:
                res = acquire.AcquireTask(request)
            except httpx.HTTPError as err:  # the SuperNode is restarting or gone
                log.debug("AcquireTask failed: %s", err)
                stop.wait(max(poll, 0.5))
                continue
            if not (res.HasField("task") and res.token):
                stop.wait(wait)
                wait = min(poll, wait * 1.25)
                continue
            done = run_task(runtime, res.token, app, pending_at=res.task.pending_at)
            if prepare and done.message_type == HELLO_TYPE and done.context is not None:
                prepare_node(done.context)
            if on_task is not None:
                on_task(done)
            wait = min(POLL_MIN, poll)  # the node may already hold its next task
    finally:
        acquire.close()


def prepare_node(context: Context) -> None:
    """Build the node's data and algorithm for the run of ``context`` now, so that its first
    real message does not wait for them (:func:`fedad.fl.flower.app.load_node`, cached in
    this process). A failure here is left for that message to report."""
    t0 = time.perf_counter()
    try:
        load_node(RunSpec.from_run_config(context.run_config), context)
    except Exception as err:
        log.info("could not prepare the node's data ahead (its first message will say): %s", err)
        return
    log.info("prepared the node's data and algorithm in %.2f s", time.perf_counter() - t0)


def warm_up() -> None:
    """Import what every message needs (torch, fedad's ClientApp and every built-in
    method's modules: the catalog imports a method only when it is looked up, and this
    long-lived process serves whichever method a run names) and take one optimizer step on
    a throw-away tensor (torch's first step imports more of torch: 1.4 s here), so that the
    first message of a run does not pay for them."""
    import torch

    registry()  # imports every declared method's modules

    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.Adam([p])
    p.sum().backward()  # type: ignore[no-untyped-call]
    opt.step()


def _poll(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or not 0.001 <= value <= 60:
        raise argparse.ArgumentTypeError("give a number of seconds in [0.001, 60]")
    return value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m fedad.fl.flower.worker",
        description="Run a SuperNode's ClientApp tasks in this one long-running process.",
    )
    parser.add_argument("--runtime-api-address", required=True, help="the SuperNode's HOST:PORT")
    parser.add_argument("--insecure", action="store_true", help="no TLS (loopback)")
    parser.add_argument("--root-certificates", help="CA certificate (PEM) of the Runtime API")
    parser.add_argument(
        "--poll", type=_poll, default=POLL, help="longest wait between two task polls (seconds)"
    )
    args = parser.parse_args(argv)
    if not args.insecure and not args.root_certificates:
        parser.error("give --insecure or --root-certificates")
    certs = None
    if args.root_certificates:
        with open(args.root_certificates, "rb") as fh:
            certs = fh.read()
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per poll otherwise
    warm_up()
    log.info("torch and fedad loaded; taking the tasks of %s", args.runtime_api_address)
    runtime = RuntimeAddress(args.runtime_api_address, args.insecure, certs)
    try:
        serve_node(runtime, poll=args.poll)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
