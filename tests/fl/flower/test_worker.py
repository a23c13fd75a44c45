"""The long-running ClientApp process of a SuperNode (:mod:`fedad.fl.flower.worker`).

Against a real SuperNode Runtime API (Flower's own FastAPI app and in-memory node state,
served by uvicorn in this process): tasks are taken and answered in one process, the
client's state goes back to the SuperNode after every task and comes back with the next,
a bundle naming another ClientApp gets an error reply without running it, a ClientApp that
raises gets an error reply and the process goes on. Then the processes around it: the
SuperNode's command line per mode, a local deployment starting the worker again when it
dies, and ``fedad flower supernode``'s companion process.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("flwr")

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.supercore.constant import TaskType
from flwr.supercore.fab import Fab
from flwr.supercore.object_store import ObjectStoreFactory
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity
from flwr.supernode.nodestate import NodeStateFactory

from fedad.core.errors import ConfigError
from fedad.fl.flower import worker as fw
from fedad.fl.flower.deploy import local
from fedad.fl.flower.deploy.launch import free_port, supernode_argv, worker_argv
from fedad.fl.flower.deploy.local import WORKER_RESTARTS, LocalDeployment
from fedad.fl.timeline import TIMELINE_ENV, read_timeline

# uvicorn's websockets support warns about its own imports; nothing of ours
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

NODE, RUN, SERIES = 7, 5, 9


def bundle(clientapp: str) -> bytes:
    """A Flower app bundle (a zip with ``pyproject.toml``) naming ``clientapp``."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(
            "pyproject.toml",
            '[project]\nname = "x"\nversion = "1.0.0"\n\n[tool.flwr.app]\npublisher = "t"\n\n'
            f'[tool.flwr.app.components]\nserverapp = "a:b"\nclientapp = "{clientapp}"\n',
        )
    return buf.getvalue()


@dataclass
class Node:
    """A SuperNode's Runtime API in this process, with one run whose bundle is ``fab``."""

    state: Any
    address: str
    fab_hash: str
    done: list[fw.TaskDone] = field(default_factory=list)

    def deliver(self, message_type: str, payload: int) -> str:
        """What the SuperNode does with a message from the SuperLink: store it (objects
        and all) and make it a ClientApp task. Returns the message id."""
        from flwr.supernode.start_client_internal import _insert_message

        # a message is built as the server builds it (Flower reads who sends it from here)
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = RUN, 1, 1
        msg = Message(
            RecordDict({"q": ConfigRecord({"i": payload})}),
            dst_node_id=NODE,
            message_type=message_type,
        )
        msg.metadata.__dict__["_message_id"] = msg.object_id
        _insert_message(msg, self.state, self.state.object_store)
        self.state.create_task(task_type=TaskType.CLIENT_APP, run_id=RUN, fab_hash=self.fab_hash)
        return str(msg.metadata.message_id)

    def wait_tasks(self, n: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while len(self.done) < n:
            assert time.monotonic() < deadline, f"{len(self.done)} of {n} tasks done"
            time.sleep(0.01)

    def replies(self) -> dict[str, Message]:
        """Replies the worker pushed, by the id of the message they answer."""
        return {
            r.metadata.reply_to_message_id: r for r in self.state.get_messages_legacy(is_reply=True)
        }


@contextlib.contextmanager
def _serve_runtime_api(fab: bytes) -> Iterator[tuple[Any, str, str]]:
    import uvicorn
    from flwr.supernode.main import create_app

    factory = NodeStateFactory(objectstore_factory=ObjectStoreFactory())
    state = factory.state()
    state.set_node_id(NODE)
    fab_hash = hashlib.sha256(fab).hexdigest()
    run = Run.create_empty(RUN)
    run.fab_hash, run.series_id = fab_hash, SERIES
    state.store_run(run)
    state.store_fab(Fab(fab_hash, fab, {}))
    ctx = Context(run_id=RUN, node_id=NODE, node_config={}, state=RecordDict(), run_config={})
    state.set_run_series_context(SERIES, ctx)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            app=create_app(state_factory=factory),
            host="127.0.0.1",
            port=port,
            log_level="warning",
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive()
        time.sleep(0.02)
    try:
        yield state, f"127.0.0.1:{port}", fab_hash
    finally:
        server.should_exit = True
        thread.join(10)


def counting_app(seen: list[tuple[int, int, int]]) -> ClientApp:
    """A ClientApp that counts its calls in ``context.state`` (``seen``: payload, count,
    pid per call) and raises on payload -1."""
    app = ClientApp()

    @app.query("count")
    def count(msg: Message, ctx: Context) -> Message:
        i = int(msg.content.config_records["q"]["i"])  # type: ignore[arg-type]
        if i < 0:
            raise ValueError("payload -1")
        held = ctx.state.config_records.get("c")
        n = (int(held["n"]) if held is not None else 0) + 1  # type: ignore[arg-type]
        ctx.state["c"] = ConfigRecord({"n": n})
        seen.append((i, n, os.getpid()))
        return Message(RecordDict({"r": ConfigRecord({"n": n})}), reply_to=msg)

    return app


@pytest.fixture
def node_with(request: pytest.FixtureRequest) -> Iterator[tuple[Node, list[tuple[int, int, int]]]]:
    """A Runtime API whose run's bundle names ``request.param`` (default: fedad's ClientApp),
    served by :func:`fw.serve_node` in a thread with :func:`counting_app`."""
    ref = getattr(request, "param", fw.CLIENT_APP_REF)
    seen: list[tuple[int, int, int]] = []
    with _serve_runtime_api(bundle(ref)) as (state, address, fab_hash):
        node = Node(state, address, fab_hash)
        stop = threading.Event()
        worker = threading.Thread(
            target=fw.serve_node,
            args=(fw.RuntimeAddress(address),),
            kwargs={"app": counting_app(seen), "stop": stop, "on_task": node.done.append},
            daemon=True,
        )
        worker.start()
        try:
            yield node, seen
        finally:
            stop.set()
            worker.join(10)


def test_bundle_client_app_reads_the_component() -> None:
    assert fw.bundle_client_app(bundle(fw.CLIENT_APP_REF)) == fw.CLIENT_APP_REF
    assert fw.bundle_client_app(bundle("evil.module:app")) == "evil.module:app"
    assert fw.bundle_client_app(b"not a zip") == ""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:  # crafted: components is not a table
        z.writestr(
            "pyproject.toml",
            '[project]\nname = "x"\nversion = "1.0.0"\n\n[tool.flwr.app]\npublisher = "t"\n'
            'components = "fedad.fl.flower.app:client_app"\n',
        )
    assert fw.bundle_client_app(buf.getvalue()) == ""
    assert fw.HELLO_TYPE == "query.fedad_hello"


def test_tasks_run_in_one_process_and_state_goes_through_the_supernode(
    node_with: tuple[Node, list[tuple[int, int, int]]],
) -> None:
    node, seen = node_with
    for i in range(3):
        node.deliver("query.count", 10 + i)
        node.wait_tasks(i + 1)
    assert [d.status for d in node.done] == ["completed"] * 3
    assert [d.message_type for d in node.done] == ["query.count"] * 3
    # the count lives in context.state, which the SuperNode holds between tasks
    assert [(i, n) for i, n, _ in seen] == [(10, 1), (11, 2), (12, 3)]
    assert {pid for _, _, pid in seen} == {os.getpid()}
    assert all(not r.has_error() for r in node.replies().values())
    series = node.state.get_run_series_context(SERIES)
    assert int(series.state.config_records["c"]["n"]) == 3


@pytest.mark.parametrize("node_with", ["evil.module:app"], indirect=True)
def test_a_bundle_naming_another_clientapp_is_refused(
    node_with: tuple[Node, list[tuple[int, int, int]]],
) -> None:
    node, seen = node_with
    first = node.deliver("query.count", 1)
    node.wait_tasks(1)
    second = node.deliver("query.count", 2)
    node.wait_tasks(2)
    assert seen == []  # the ClientApp never ran
    assert [d.status for d in node.done] == ["failed", "failed"]
    replies = node.replies()
    for mid in (first, second):
        assert replies[mid].has_error()
        reason = replies[mid].error.reason
        assert "fedad's ClientApp" in reason and "evil.module:app" in reason


def test_a_raising_clientapp_is_an_error_reply_and_the_process_goes_on(
    node_with: tuple[Node, list[tuple[int, int, int]]],
) -> None:
    node, seen = node_with
    bad = node.deliver("query.count", -1)
    node.wait_tasks(1)
    good = node.deliver("query.count", 3)
    node.wait_tasks(2)
    replies = node.replies()
    assert replies[bad].has_error() and "payload -1" in replies[bad].error.reason
    assert not replies[good].has_error()
    assert [d.status for d in node.done] == ["failed", "completed"]
    assert [(i, n) for i, n, _ in seen] == [(3, 1)]


def test_timeline_events_of_a_task(
    node_with: tuple[Node, list[tuple[int, int, int]]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    node, _ = node_with
    path = tmp_path / "timeline.jsonl"
    monkeypatch.setenv(TIMELINE_ENV, str(path))
    mid = node.deliver("query.count", 4)
    node.wait_tasks(1)
    with path.open("a") as fh:
        fh.write("not json\n")
    (event,) = read_timeline(path)
    assert event["event"] == "node-task" and event["message_id"] == mid
    steps = [event[k] for k in ("pending", "acquired", "input", "handled", "pushed")]
    assert steps == sorted(steps) and steps[-1] - steps[0] < 30


def test_worker_command_line_checks(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["--runtime-api-address", "127.0.0.1:1"],  # neither --insecure nor certificates
        ["--runtime-api-address", "127.0.0.1:1", "--insecure", "--poll", "0"],
        ["--runtime-api-address", "127.0.0.1:1", "--insecure", "--poll", "nan"],
    ):
        with pytest.raises(SystemExit) as info:
            fw.main(argv)
        assert info.value.code == 2
    assert "--insecure or --root-certificates" in capsys.readouterr().err


# ---------------------------------------------------------------------------- processes


def test_supernode_command_line_per_mode() -> None:
    per_node = supernode_argv("127.0.0.1:9093", 0, 3, 9094)
    assert per_node[per_node.index("--isolation") + 1] == "process"
    per_message = supernode_argv("127.0.0.1:9093", 0, 3, 9094, clientapp="per-message")
    assert "--isolation" not in per_message
    with pytest.raises(ConfigError):
        supernode_argv("127.0.0.1:9093", 0, 3, 9094, clientapp="per-run")
    with pytest.raises(ConfigError):
        LocalDeployment(Path("/nonexistent"), 1, clientapp="per-run")
    argv = worker_argv(9094)
    assert argv[:3] == [sys.executable, "-m", "fedad.fl.flower.worker"]
    assert argv[argv.index("--runtime-api-address") + 1] == "127.0.0.1:9094"


SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]
DIE = [sys.executable, "-c", "raise SystemExit(3)"]


def test_local_deployment_starts_a_dead_worker_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node's ClientApp process that dies is started again (its old log kept), at most
    WORKER_RESTARTS times; then one warning says the node's replies will be missing."""
    dep = LocalDeployment(tmp_path, 2)
    sup = dep.supervisor
    monkeypatch.setattr(local, "worker_argv", lambda port, host="127.0.0.1": DIE)
    try:
        for i in range(2):
            dep.node_ports[i] = free_port()
            sup.start(f"supernode-{i}", SLEEP, {})
        sup.start("worker-0", SLEEP, {})
        sup.start("worker-1", DIE, {})
        with caplog.at_level(logging.INFO, logger="fedad"):
            deadline = time.monotonic() + 60
            while 1 not in dep._workers_gone:
                assert time.monotonic() < deadline
                dep.check_nodes()
                time.sleep(0.05)
            dep.check_nodes()  # no second "missing" warning
    finally:
        sup.stop_all(grace=2)
    text = [r.getMessage() for r in caplog.records]
    restarted = [t for t in text if t.startswith("node 1:") and "started another" in t]
    assert len(restarted) == WORKER_RESTARTS
    assert all("exit code 3" in t and "started another" in t for t in restarted)
    gone = [t for t in text if "stopped again" in t]
    assert len(gone) == 1 and gone[0].startswith("node 1:") and "missing" in gone[0]
    assert not any(t.startswith("node 0:") for t in text)
    assert (tmp_path / "logs" / "worker-1.log.1").is_file()
