"""Flower edges: ports, addresses, missing nodes, interrupts, orphans.

* A busy port or a bad ``--superlink`` is one line (``FedadError``), in bounded time,
  before any Flower log.
* A SuperNode that dies or is stopped during a run is named on the console, and so are the
  ServerApp's own warnings (relayed from its process through ``warnings.jsonl``).
* Ctrl-C / SIGTERM during a deployment: every process stops, the kept work directory is
  named, the interrupt reaches the caller.
* SIGKILL of fedad itself: nothing it started (SuperLink, SuperNodes, their SuperExecs,
  ClientApps) outlives it.

The fast tests use small Python processes in place of Flower's; the slow ones start Flower.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fedad.core.errors import FedadError, Interrupted
from fedad.fl.flower.deploy import local
from fedad.fl.flower.deploy.launch import check_port_free, free_port, parse_address, wait_reachable
from fedad.fl.flower.deploy.local import LocalDeployment, active_deployments
from fedad.fl.flower.deploy.processes import (
    READY_LINE,
    process_tree,
    signals_deferred,
    sigterm_as_interrupt,
)
from fedad.fl.flower.deploy.run import _wait, run_deployment
from fedad.fl.flower.results import ResultsDir
from fedad.fl.flower.spec import FlowerRunError

ROOT = Path(__file__).resolve().parents[4]
HAS_FLWR = __import__("importlib").util.find_spec("flwr") is not None
needs_flwr = pytest.mark.skipif(not HAS_FLWR, reason="flwr (the flower extra) is not installed")
SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]

CONFIG = """
seed = 0
rounds = 2

[data]
name = "digits"
normal = [0, 1, 2, 3, 4]
anomaly = [5, 6, 7, 8, 9]
max_test = 200

[partition]
clients = 2

[engine]
name = "flower-deployment"
progress = false
timeout = 60.0

[[methods]]
name = "fedavg"
detector = "autoencoder"
"""


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port on 127.0.0.1 held by a bound socket (not listening)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, waiting to be reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :][:1] not in ("Z", "X")


def wait_dead(pids: set[int], timeout: float) -> set[int]:
    """The pids still alive after waiting up to ``timeout`` seconds for all to die."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = {p for p in pids if alive(p)}
        if not left:
            return left
        time.sleep(0.1)
    return {p for p in pids if alive(p)}


def processes_with_home(marker: str) -> dict[int, str]:
    """Live processes whose ``FLWR_HOME`` contains ``marker``: pid -> command line."""
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit() or not alive(int(d)):
            continue
        try:
            env = Path(f"/proc/{d}/environ").read_bytes().split(b"\0")
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        for e in env:
            k, _, v = e.decode(errors="replace").partition("=")
            if k == "FLWR_HOME" and marker in v:
                found[int(d)] = cmd
    return found


# ---------------------------------------------------------------------------- addresses, ports


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9093", ("127.0.0.1", 9093)),
        ("coordinator.example.org:443", ("coordinator.example.org", 443)),
        ("[::1]:9093", ("::1", 9093)),
        (" localhost:1 ", ("localhost", 1)),
    ],
)
def test_good_addresses_parse(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize(
    "text", ["nonsense", "http://10.0.0.5:9093", "10.0.0.5", "10.0.0.5:0", "h:70000", ":9093", ""]
)
def test_bad_addresses_are_one_line_errors(text: str) -> None:
    with pytest.raises(FedadError, match=r"--superlink '.*' is not an address of the form"):
        parse_address(text)


def test_nothing_listening_is_an_error_within_the_timeout() -> None:
    port = free_port()
    t0 = time.monotonic()
    with pytest.raises(FedadError, match=rf"nothing accepts connections at 127.0.0.1:{port}"):
        wait_reachable(f"127.0.0.1:{port}", timeout=0.5)
    assert time.monotonic() - t0 < 5
    with socket.socket() as s:  # and something listening is found
        s.bind(("127.0.0.1", 0))
        s.listen()
        wait_reachable(f"127.0.0.1:{s.getsockname()[1]}", timeout=0.5)


def test_port_check(taken_port: int) -> None:
    with pytest.raises(FedadError, match=rf"port {taken_port} on 127.0.0.1 is already in use.*--x"):
        check_port_free("127.0.0.1", taken_port, "it", option="--x")
    check_port_free("127.0.0.1", free_port(), "it")


# ---------------------------------------------------------------------------- signals


def test_sigterm_raises_interrupted_and_a_callers_handler_wins() -> None:
    with pytest.raises(Interrupted) as info, sigterm_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert info.value.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL

    seen: list[int] = []
    old = signal.signal(signal.SIGTERM, lambda s, f: seen.append(s))
    try:
        with sigterm_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)
    finally:
        signal.signal(signal.SIGTERM, old)
    assert seen == [signal.SIGTERM]


def test_second_ctrl_c_waits_for_the_clean_up() -> None:
    done = []
    # Python's own Ctrl-C handler for the test, also where pytest was started with SIGINT
    # ignored (in the background of a shell), where signals_deferred rightly leaves it be.
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt), signals_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.3)
            done.append(True)  # not cut short
    finally:
        signal.signal(signal.SIGINT, old)
    assert done == [True]


# ---------------------------------------------------------------------------- orphans

PARENT = """
import sys, time
from pathlib import Path
from fedad.fl.flower.deploy.processes import Supervisor
sup = Supervisor(Path(sys.argv[1]))
grandchildren = '''
import os, subprocess, sys, time
a = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
b = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                     start_new_session=True)  # leaves the process group; found by the marker
print(a.pid, b.pid, flush=True)
time.sleep(60)
'''
for name in ("node-0", "node-1"):
    sup.start(name, [sys.executable, "-c", grandchildren], {})
time.sleep(60)
"""


def test_children_and_grandchildren_die_with_a_sigkilled_parent(tmp_path: Path) -> None:
    """The parent-death signal kills the children, the reaper their own children."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path)], cwd=ROOT)
    try:
        pids: set[int] = set()
        deadline = time.monotonic() + 30
        while len(pids) < 6 and time.monotonic() < deadline:
            logs = [tmp_path / f"node-{i}.log" for i in range(2)]
            kids = process_tree([parent.pid]) - {parent.pid}
            grand = {int(x) for f in logs if f.is_file() for x in f.read_text().split()}
            pids = (kids | grand) if len(grand) == 4 else set()
            time.sleep(0.1)
        assert len(pids) >= 6, pids  # 2 children, 4 grandchildren (and the reaper)
    finally:
        parent.kill()
        parent.wait()
    assert wait_dead(pids, timeout=10) == set()


# ---------------------------------------------------------------------------- missing nodes


def test_dead_or_stopped_node_is_named_on_the_console(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``check_nodes`` names a SuperNode that died or hangs, restarts one whose port was
    taken at start-up; ``_wait`` relays the ServerApp's warnings."""
    dep = LocalDeployment(tmp_path, 3)
    dep.address = "127.0.0.1:1"
    sup = dep.supervisor
    busy = "print('ERROR: [Errno 98] address already in use'); exit(1)"
    monkeypatch.setattr(local, "supernode_argv", lambda *a, **k: SLEEP)  # the restart
    try:
        for i in range(2):
            dep.node_ports[i] = free_port()
            sup.start(f"supernode-{i}", SLEEP, {})
        dep.node_ports[2] = free_port()
        sup.start("supernode-2", [sys.executable, "-c", busy], {})
        sup.kill("supernode-1")
        os.kill(sup.procs["supernode-0"].pid, signal.SIGSTOP)
        sup.procs["supernode-2"].wait(timeout=30)
        results = ResultsDir(tmp_path / "results")
        with caplog.at_level(logging.INFO, logger="fedad"), results.relay_warnings():
            logging.getLogger("fedad").warning("node 1: no reply to 'train' within 30 s")
        caplog.clear()
        (tmp_path / "results" / "error.json").write_text(json.dumps({"error": "boom"}))
        submit = sup.start("flwr-run", SLEEP, {})
        with caplog.at_level(logging.INFO, logger="fedad"), pytest.raises(FlowerRunError):
            _wait(results, sup, submit, [], tmp_path, None, dep.check_nodes)
        dep.check_nodes()  # no second warning for the same node
        os.kill(sup.procs["supernode-0"].pid, signal.SIGCONT)
    finally:
        sup.stop_all(grace=2)
    text = [r.getMessage() for r in caplog.records]
    assert "node 1: no reply to 'train' within 30 s" in text  # relayed from the ServerApp
    stopped = [t for t in text if "stopped during the run" in t]
    assert len(stopped) == 1 and stopped[0].startswith("node 1: its SuperNode")
    assert "killed by signal 9" in stopped[0] and "supernode-1.log" in stopped[0]
    assert any(t.startswith("node 0: its SuperNode") and "is stopped" in t for t in text)
    assert any(t.startswith("node 2: port") and "restarts on port" in t for t in text)
    assert not any(t.startswith("node 2: its SuperNode") for t in text)


# ---------------------------------------------------------------------------- real Flower


@pytest.mark.slow
@needs_flwr
def test_local_superlink_port_taken_is_one_line(
    tmp_path: Path, taken_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each port given to the SuperLink is taken: its early exit is seen, it is retried,
    and the error names the ports, not Flower's log."""
    monkeypatch.setattr(local, "free_port", lambda: taken_port)
    t0 = time.monotonic()
    with pytest.raises(FlowerRunError) as info, LocalDeployment(tmp_path, 0):
        pass
    msg = str(info.value)
    assert "the SuperLink could not listen on 127.0.0.1" in msg and str(taken_port) in msg
    assert "\n" not in msg and "uvicorn" not in msg
    print(f"port taken: {time.monotonic() - t0:.1f} s")


def _build(tmp_path: Path) -> tuple[object, object, object]:
    from fedad.config import load_config
    from fedad.federation import build_federation
    from fedad.resolve import build_algorithms

    cfg_path = tmp_path / "c.toml"
    cfg_path.write_text(CONFIG)
    cfg = load_config(cfg_path, [])
    fed = build_federation(cfg)
    return cfg, build_algorithms(cfg, fed)["fedavg"], fed


@pytest.mark.slow
@needs_flwr
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_stops_everything_and_names_the_kept_logs(
    sig: signal.Signals,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    request: pytest.FixtureRequest,
) -> None:
    """Ctrl-C / SIGTERM mid-run: all processes stop, the kept directory is logged and the
    interrupt reaches the caller (KeyboardInterrupt; Interrupted(15) for SIGTERM). With
    Ctrl-C, a SuperNode killed just before is named on the console first."""
    cfg, alg, fed = _build(tmp_path)
    pids: set[int] = set()
    events: list[str] = []  # what the interrupting thread did, for the failure message

    def listening(dep: LocalDeployment) -> bool:
        """The run is submitted and both SuperNodes listen (the one killed is then a node
        that was running, as a node lost mid-run is)."""
        sup = dep.supervisor
        return "flwr-run" in sup.procs and all(
            READY_LINE in sup.log_text(f"supernode-{i}") for i in range(2)
        )

    def interrupt() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            deps = active_deployments()
            if deps and listening(deps[0]):
                sup = deps[0].supervisor
                pids.update(process_tree([p.pid for p in list(sup.procs.values())]))
                if sig == signal.SIGINT:
                    deps[0].kill_supernode(1)
                    events.append("killed supernode-1")
                    time.sleep(1.0)
                if active_deployments():
                    os.kill(os.getpid(), sig)
                    events.append(f"sent {sig.name}")
                return
            time.sleep(0.1)
        events.append("the run never reached the point to interrupt")

    # Ctrl-C as in a foreground process: Python's own handler. A process started in the
    # background by a shell without job control inherits SIGINT ignored (POSIX), and
    # Python then leaves it ignored: such a run never sees this signal, and this test, run
    # that way, failed with the run's timeout instead.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))
    t0 = time.monotonic()
    threading.Thread(target=interrupt, daemon=True).start()
    expected = KeyboardInterrupt if sig == signal.SIGINT else Interrupted
    with caplog.at_level(logging.WARNING, logger="fedad"), pytest.raises(expected) as info:
        try:
            run_deployment(cfg, alg, fed, workdir=tmp_path / "run")  # type: ignore[arg-type]
        except FlowerRunError as err:  # not interrupted: say what the thread did
            raise AssertionError(f"{err} (interrupting thread: {events})") from err
    assert f"sent {sig.name}" in events, events
    if sig == signal.SIGTERM:
        assert info.value.signum == signal.SIGTERM  # type: ignore[attr-defined]
    assert len(pids) >= 4, pids  # SuperLink, 2 SuperNodes, SuperExec, ...
    assert {p for p in pids if alive(p)} == set()  # stopped before the interrupt went on
    assert processes_with_home(str(tmp_path)) == {}
    kept = list((tmp_path / "run" / ".flower").iterdir())
    assert len(kept) == 1 and (kept[0] / "logs" / "superlink.log").is_file()
    text = [r.getMessage() for r in caplog.records]
    assert f"interrupted; Flower processes stopped, Flower logs kept in {kept[0]}" in text
    if sig == signal.SIGINT:
        assert any(t.startswith("node 1: its SuperNode") for t in text), text
    print(f"{sig.name}: {time.monotonic() - t0:.1f} s")


@pytest.mark.slow
@needs_flwr
def test_sigkilled_fedad_leaves_no_flower_process(tmp_path: Path) -> None:
    """``fedad run`` on flower-deployment, SIGKILLed while its run is under way: the SuperLink,
    the SuperNodes, the ServerApp's SuperExec and the per-node ClientApp workers
    (``engine.clientapp = "per-node"``, the default) all go (checked by pid)."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    t0 = time.monotonic()
    run = subprocess.Popen(
        [sys.executable, "-m", "fedad.cli", "run", str(cfg), "--out", str(tmp_path / "o"), "-q"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    procs: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and run.poll() is None:
            procs = processes_with_home(str(tmp_path))
            kinds = " ".join(procs.values())
            if "fedad.fl.flower.worker" in kinds and "flower-superexec" in kinds:
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"no ClientApp process seen; exit status {run.poll()}")
    finally:
        run.kill()
        run.wait()
    kinds = " ".join(procs.values())
    for kind in ("flower-superlink", "flower-supernode", "flower-superexec", "flower.worker"):
        assert kind in kinds, kinds
    t1 = time.monotonic()
    left = wait_dead(set(procs), timeout=5)  # Flower's own parent polling takes ~10 s
    print(f"SIGKILL: {time.monotonic() - t0:.1f} s, all gone after {time.monotonic() - t1:.2f} s")
    assert left == set(), {p: procs[p] for p in left}
    # a process started after the snapshot, or one caught mid-exit (its command line already
    # empty, its state not yet a zombie), gets the same few seconds to end
    late = processes_with_home(str(tmp_path))
    assert wait_dead(set(late), timeout=5) == set(), late
