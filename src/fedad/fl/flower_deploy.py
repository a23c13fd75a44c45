"""``engine.name = "flower-deployment"``: a real Flower deployment, processes and all.

``fedad run`` with this engine starts, on 127.0.0.1 with free ports and ``--insecure``:

* one **SuperLink** (``flower-superlink --isolation process``),
* one **SuperNode** per client (``flower-supernode --node-config "partition-id=I
  num-partitions=N"``; each runs the ClientApp in a fresh process per message),
* one **SuperExec** (``flower-superexec``) that runs the ServerApp of our run,

then submits the run with ``flwr run`` (a Flower App Bundle whose components are
``fedad.fl.flower_app:server_app`` and ``:client_app`` and whose run config is the
:class:`~fedad.fl.flower.RunSpec`), waits, reads the results and stops every process it
started — on success, on failure and on Ctrl-C or SIGTERM (process groups, then the whole
process tree found under ``/proc``, SIGTERM then SIGKILL; a second Ctrl-C meanwhile waits).

**Nothing outlives fedad.** Every child starts in its own session with a parent-death
signal (Linux ``PR_SET_PDEATHSIG`` = SIGKILL), and carries ``FEDAD_FLOWER_OWNER`` in its
environment, which Flower's own children (a SuperNode's SuperExec, the ``flwr-clientapp``
and ``flwr-serverapp`` processes) inherit along with the process group. A small reaper
process per :class:`Supervisor` holds a pipe from fedad; when fedad dies in any way, even
by SIGKILL, the pipe closes and the reaper SIGKILLs those process groups and every process
with the marker. The parent-death signal fires when the *thread* that started the child
exits: the thread that starts the processes is the one that waits for them and stops them
(:func:`run_deployment`, :func:`fedad.cli.flower.run_foreground`), so it outlives them.

**Console.** A SuperNode that exits or is stopped (SIGSTOP) during a run is logged as a
warning naming its client (= partition id), and so are the ServerApp's own warnings (``node
2: no reply to 'train' within 30 s``), relayed through ``warnings.jsonl``. A port taken at
start-up is retried on another port; the error names the port. After Ctrl-C or SIGTERM the
kept work directory is logged (``interrupted; Flower logs kept in DIR``) and the interrupt
goes on to the caller.

**How results come back.** The SuperLink runs with ``--isolation process``, so the
ServerApp is run by *our* SuperExec, on the machine that submitted the run. The ServerApp
writes into the results directory named in the run config (:class:`~fedad.fl.flower.
ResultsDir`): ``rounds.jsonl`` as rounds end (read live for progress and ``on_round``),
then ``arrays.npz`` + ``outcome.json``, or ``error.json``. The same holds with a remote
SuperLink (``fedad flower run``, :func:`remote_superlink`): only the SuperExec and the
ServerApp run locally, so the results land locally too.

Every Flower process gets its own ``FLWR_HOME`` under the work directory
(``RUN_DIR/.flower/METHOD-XXXX/``: logs, homes, the app, the results hand-over and a data
cache for the SuperNodes), telemetry and update checks off, and runtime dependency
installation off. The work directory is removed after a successful run and kept (its path
in the error) after a failed one.

**Personalised detectors stay on the nodes.** Each SuperNode gets a models directory
(``fedad-models-dir`` in its node config; ``fedad flower supernode --models-dir``) where it
saves its own detector; the evaluate reply carries only the scores and the folder's path
(:func:`fedad.fl.flower_app.keep_detector_home`), and metrics.json's ``events`` name each
folder. The local SuperNodes of ``fedad run`` share ``RUN_DIR/.flower/node-models/``, which
stays after the run.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from fedad.config import ExperimentConfig
from fedad.data.types import Federation
from fedad.errors import ConfigError, FedadError, Interrupted
from fedad.fl.algorithm import Algorithm
from fedad.fl.engine import RunOutcome
from fedad.fl.flower import INSTALL_HINT, FlowerRunError, ResultsDir, RunSpec
from fedad.fl.flower_sim import QUIET_ENV
from fedad.fl.timeline import timeline_event
from fedad.outdir import mkdir

APP_NAME = "fedad-run"
CONNECTION = "fedad"
SUPEREXEC_POLL = 0.25
"""Seconds between a SuperExec's polls for new tasks (Flower's default: 1)."""
NODE_MODELS = "node-models"
"""Folder of ``RUN_DIR/.flower`` where a local deployment's SuperNodes keep personalised
detectors (kept after the run; ``--force`` clears it with the rest of ``.flower``)."""
MAX_LOCAL_NODES = 32
"""Most SuperNodes ``fedad run`` starts on one machine (two processes each, ~130 MB apiece)."""
START_TIMEOUT = 60.0
"""Seconds to wait for a SuperLink to accept connections."""
PORT_TRIES = 3
"""Ports tried for a local SuperLink or SuperNode whose port another process took first."""
OWNER_ENV = "FEDAD_FLOWER_OWNER"
"""Environment variable that marks the processes of one :class:`Supervisor` (inherited by
the processes Flower starts in turn), so that stragglers can be found and stopped."""
READY_LINE = "Uvicorn running on"
"""What a Flower 1.41 SuperLink or SuperNode prints once its HTTP API listens."""
CLIENTAPP_MODES = ("per-node", "per-message")
"""``engine.clientapp``: one long-running ClientApp process per SuperNode, or Flower's own
fresh ``flwr-clientapp`` process per message."""
WORKER_RESTARTS = 3
"""How often a SuperNode's ClientApp process that died is started again (per node)."""
PORT_BUSY = re.compile(r"address already in use|\[errno 98\]|eaddrinuse", re.IGNORECASE)
"""How a Flower process (uvicorn) says that its port is taken."""

log = logging.getLogger("fedad")


# ---------------------------------------------------------------------------- TLS, remote


@dataclass(frozen=True)
class RemoteSuperLink:
    """A SuperLink started elsewhere (``fedad flower superlink``), as ``fedad flower run``
    reaches it: ``address`` is ``HOST:PORT``; ``root_certificates`` the CA certificate
    (PEM) to verify it, or ``None`` with ``insecure=True``."""

    address: str
    root_certificates: str | None = None
    insecure: bool = False


_REMOTE: contextvars.ContextVar[RemoteSuperLink | None] = contextvars.ContextVar(
    "fedad_remote_superlink", default=None
)


@contextlib.contextmanager
def remote_superlink(link: RemoteSuperLink) -> Iterator[None]:
    """Within the block, ``flower-deployment`` runs use ``link`` instead of local processes."""
    token = _REMOTE.set(link)
    try:
        yield
    finally:
        _REMOTE.reset(token)


# ---------------------------------------------------------------------------- processes


def flower_bin(name: str) -> str:
    """Path of a Flower console script, preferring this interpreter's environment."""
    here = Path(sys.executable).parent / name
    if here.is_file():
        return str(here)
    found = shutil.which(name)
    if found is None:
        raise ConfigError(f"'{name}' not found", INSTALL_HINT)
    return found


def flower_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment of a Flower process: own ``FLWR_HOME``, quiet, this venv first on PATH."""
    env = dict(os.environ)
    env.update(QUIET_ENV)
    env["FLWR_HOME"] = str(home)
    env["FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION"] = "1"
    env.setdefault("FLWR_SUPEREXEC_TASK_POLL_INTERVAL", str(SUPEREXEC_POLL))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    home.mkdir(parents=True, exist_ok=True)
    return env


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(host: str, port: int) -> bool:
    """Whether something accepts TCP connections at ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def check_port_free(host: str, port: int, who: str, option: str = "--port") -> None:
    """Raise a one-line error unless ``who`` could listen on ``host:port`` (a bind test).

    The test socket sets ``SO_REUSEADDR`` as Flower's HTTP servers do, so connections of an
    earlier run still in TIME_WAIT do not count as "in use"; a listening socket does.
    """
    if not 0 < port < 65536:
        raise FedadError(f"{option} {port} is not a TCP port", "give a port in 1..65535")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError) as err:
        raise FedadError(
            f"cannot listen on '{host}': {err}", "give an address of this machine, or 0.0.0.0"
        ) from None
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as err:
            if err.errno in (98, 48, 10048):  # EADDRINUSE (Linux, macOS, Windows)
                raise FedadError(
                    f"port {port} on {host} is already in use, so {who} cannot listen on it",
                    f"stop the process that uses it, or choose another port with {option}",
                ) from None
            raise FedadError(
                f"{who} cannot listen on {host}:{port}: {err.strerror or err}",
                "give an address of this machine (--host), or 0.0.0.0",
            ) from None


_ADDRESS = re.compile(
    r"\[(?P<v6>[0-9A-Fa-f:.]+)\]:(?P<p6>\d{1,5})|(?P<host>[\w.-]+):(?P<port>\d{1,5})"
)


def parse_address(text: str, option: str = "--superlink") -> tuple[str, int]:
    """``HOST:PORT`` (or ``[IPv6]:PORT``) -> ``(host, port)``; a one-line error otherwise."""
    m = _ADDRESS.fullmatch(text.strip())
    if m is not None:
        host = m.group("v6") or m.group("host")
        port = int(m.group("p6") or m.group("port"))
        if 0 < port < 65536 and not host.startswith(("-", ".")):
            return host, port
    raise FedadError(
        f"{option} '{text}' is not an address of the form HOST:PORT",
        "e.g. 10.0.0.5:9093, coordinator.example.org:9093 or [::1]:9093, without http://",
    )


def _resolve(host: str, port: int, timeout: float) -> list[Any]:
    """``getaddrinfo`` bounded by ``timeout`` seconds (it runs in a daemon thread)."""
    box: list[Any] = []

    def work() -> None:
        try:
            box.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except (OSError, UnicodeError) as err:
            box.append(err)

    t = threading.Thread(target=work, daemon=True, name="fedad-resolve")
    t.start()
    t.join(timeout)
    if not box:
        raise TimeoutError(f"resolving '{host}' took longer than {timeout:g} s")
    if isinstance(box[0], BaseException):
        raise box[0]
    return list(box[0])


def wait_reachable(address: str, option: str = "--superlink", timeout: float = 30.0) -> None:
    """Return once something accepts TCP connections at ``address``; within ``timeout``
    seconds, otherwise a one-line error (also for an address that is not ``HOST:PORT`` or
    whose host does not resolve)."""
    host, port = parse_address(address, option)
    deadline = time.monotonic() + timeout
    try:
        infos = _resolve(host, port, timeout=max(1.0, min(timeout, 10.0)))
    except (OSError, UnicodeError) as err:
        raise FedadError(
            f"{option} {address}: the host '{host}' cannot be resolved ({err})",
            "check the name, or give the SuperLink's IP address",
        ) from None
    while True:
        for family, kind, proto, _, addr in infos:
            with socket.socket(family, kind, proto) as s:
                s.settimeout(max(0.1, min(2.0, deadline - time.monotonic())))
                with contextlib.suppress(OSError):
                    if s.connect_ex(addr) == 0:
                        return
        if time.monotonic() >= deadline:
            raise FedadError(
                f"nothing accepts connections at {address} ({option}) after {timeout:g} s",
                "start the SuperLink first (fedad flower superlink), check the host and "
                "port, or wait longer with --connect-timeout",
            )
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


def _prctl() -> Callable[..., int] | None:
    """libc's ``prctl`` (Linux), looked up here so the child has nothing to load after fork."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
        return prctl
    except (OSError, AttributeError):
        return None


PR_SET_PDEATHSIG = 1


def child_setup() -> Callable[[], None]:
    """A ``preexec_fn``: the child gets its own session (so Ctrl-C in a terminal reaches
    only fedad, which then stops the children in order) and, on Linux, SIGKILL when the
    thread that started it dies (``PR_SET_PDEATHSIG``; not inherited by its own children,
    which the reaper of :class:`Supervisor` covers). Call it in the thread that will wait
    for the child."""
    prctl = _prctl()
    parent = os.getpid()
    kill = int(signal.SIGKILL)

    def setup() -> None:  # pragma: no cover - runs in the child, between fork and exec
        os.setsid()
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, kill)
            if os.getppid() != parent:  # the parent died before the signal was armed
                os.kill(os.getpid(), kill)

    return setup


def _proc_children() -> dict[int, list[int]] | None:
    """Parent pid -> live child pids, from ``/proc`` (``None`` where there is no /proc)."""
    if not Path("/proc/self/stat").exists():
        return None
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) < 2 or fields[0] == "Z":
            continue
        children.setdefault(int(fields[1]), []).append(int(d))
    return children


def process_tree(roots: Iterable[int]) -> set[int]:
    """``roots`` and all their live descendants."""
    out = set(roots)
    children = _proc_children()
    if children is None:
        return out
    todo = list(out)
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def marked_processes(token: str) -> set[int]:
    """Live processes whose environment has ``FEDAD_FLOWER_OWNER=token`` (Linux)."""
    needle = f"{OWNER_ENV}={token}".encode()
    try:
        names = os.listdir("/proc")
    except OSError:
        return set()
    found = set()
    for d in names:
        if not d.isdigit():
            continue
        try:
            env = Path(f"/proc/{d}/environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0") and _alive(int(d)):
            found.add(int(d))
    return found


def _proc_state(pid: int) -> str:
    """The state letter of ``pid`` in ``/proc`` (``R``, ``S``, ``T`` stopped, ...), or ``""``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[0] if fields else ""


def _alive(pid: int) -> bool:
    state = _proc_state(pid)
    if state:
        return state not in ("Z", "X")
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return not Path("/proc").is_dir()


def _signal_all(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


_BOX = str.maketrans(dict.fromkeys("╭╮╰╯─│┃━┏┓┗┛", " "))
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def clean_output(text: str) -> list[str]:
    """A Flower process's output as plain, non-empty lines (no colours, no box drawing)."""
    lines = _ANSI.sub("", text).translate(_BOX).splitlines()
    return [" ".join(x.split()) for x in lines if x.strip()]


def failure_line(text: str) -> str:
    """The line of a Flower process's output that says why it stopped (best effort)."""
    lines = clean_output(text)
    if not lines:
        return "no output"
    for i, line in enumerate(lines):  # Flower's own exit messages: "Exit Code: 600" + reason
        if line.startswith("ERROR") and "Exit Code" in line and i + 1 < len(lines):
            return lines[i + 1]
    errors = [x for x in lines if re.match(r"[\w.]*(Error|Exception)\b.*:", x) or "ERROR" in x]
    return (errors or lines)[-1][:300]


_REAPER = r"""
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
needle = ("%s=%s" % (sys.argv[1], sys.argv[2])).encode()
groups, buf = set(), b""
while True:
    try:
        chunk = os.read(0, 4096)
    except InterruptedError:
        continue
    except OSError:
        break
    if not chunk:
        break
    buf += chunk
    *lines, buf = buf.split(b"\n")
    for line in lines:
        if line == b"exit":
            sys.exit(0)
        if line[:1] == b"+":
            groups.add(int(line[1:]))
        elif line[:1] == b"-":
            groups.discard(int(line[1:]))

def marked():
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for d in names:
        if d.isdigit() and int(d) != os.getpid():
            try:
                with open("/proc/%s/environ" % d, "rb") as fh:
                    if needle in fh.read().split(b"\0"):
                        found.append(int(d))
            except OSError:
                pass
    return found

for _ in range(50):
    for g in groups:
        try:
            os.killpg(g, signal.SIGKILL)
        except OSError:
            pass
    pids = marked()
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    if not pids:
        break
    time.sleep(0.1)
"""


class _Reaper:
    """A process that SIGKILLs a :class:`Supervisor`'s processes once fedad is gone.

    It reads process-group ids from a pipe (``+PGID``, ``-PGID``); end of file without a
    final ``exit`` line means that fedad died (the kernel closes the pipe whatever killed
    it), and then it kills those groups and every process marked with ``token``. It runs
    in a session of its own, so a Ctrl-C or a signal to fedad's process group misses it.
    """

    def __init__(self, token: str) -> None:
        env = {k: v for k, v in os.environ.items() if k != OWNER_ENV}
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _REAPER, OWNER_ENV, token],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )

    def send(self, line: str) -> None:
        stdin = self.proc.stdin
        if stdin is None or stdin.closed:
            return
        with contextlib.suppress(OSError, ValueError):
            stdin.write(f"{line}\n".encode())
            stdin.flush()

    def close(self) -> None:
        """Dismiss the reaper: everything was stopped the ordinary way."""
        self.send("exit")
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - it exits at once
            self.proc.kill()
            self.proc.wait(timeout=5)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """In the main thread, hold SIGINT and SIGTERM for the block (clean-up must finish: a
    second Ctrl-C must not leave children behind), then deliver the first one that came."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        got.append(signum)

    old: dict[signal.Signals, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        before = signal.getsignal(sig)
        if before is not None and before != signal.SIG_IGN:
            old[sig] = signal.signal(sig, hold)
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if got:
            signal.raise_signal(got[0])


class Supervisor:
    """Starts Flower processes (own session, parent-death signal, logs to files) and stops
    them all, with a reaper that stops them if fedad itself is killed (see the module)."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.token = f"{os.getpid()}-{secrets.token_hex(8)}"
        self._logs: list[IO[bytes]] = []
        self._lock = threading.Lock()
        self._reaper: _Reaper | None = None

    def start(
        self, name: str, argv: list[str], env: dict[str, str], stdout: int | None = None
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` as ``name``; its output goes to ``LOGDIR/NAME.log``, or to
        ``stdout`` (e.g. ``subprocess.PIPE``) when given."""
        out: int | IO[bytes]
        if stdout is None:
            self.logdir.mkdir(parents=True, exist_ok=True)
            fh = (self.logdir / f"{name}.log").open("wb")
            self._logs.append(fh)
            out = fh
        else:
            out = stdout
        with self._lock:
            if self._reaper is None:
                self._reaper = _Reaper(self.token)
            reaper = self._reaper
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**env, OWNER_ENV: self.token},
            preexec_fn=child_setup(),  # own session + parent-death signal
        )
        reaper.send(f"+{proc.pid}")  # its process group is the child's pid (setsid)
        with self._lock:
            self.procs[name] = proc
        return proc

    def log_path(self, name: str) -> Path:
        return self.logdir / f"{name}.log"

    def rotate_log(self, name: str) -> None:
        """Keep process ``name``'s log as ``NAME.log.1`` before it is started again (a new
        start truncates ``NAME.log``)."""
        path = self.log_path(name)
        with contextlib.suppress(OSError):
            path.replace(path.with_suffix(".log.1"))

    def log_text(self, name: str) -> str:
        path = self.log_path(name)
        return path.read_text(errors="replace") if path.is_file() else ""

    def log_tail(self, name: str, lines: int = 5) -> str:
        """The last lines of a process's log, as one line."""
        return " | ".join(clean_output(self.log_text(name))[-lines:])

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to process ``name`` and everything it started."""
        proc = self.procs[name]
        tree = process_tree([proc.pid])
        _signal_all(tree, sig)
        if sig == signal.SIGKILL:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)

    def stop_all(self, grace: float = 5.0) -> None:
        """SIGTERM every process started, its descendants and whatever else carries this
        supervisor's marker; SIGKILL what is left after ``grace`` seconds."""
        with signals_deferred():
            with self._lock:
                procs = list(self.procs.values())
            tree = process_tree(p.pid for p in procs if p.poll() is None)
            tree |= marked_processes(self.token)  # e.g. children of a SuperNode that died
            for p in procs:
                if p.poll() is None:
                    with contextlib.suppress(OSError):
                        os.killpg(p.pid, signal.SIGTERM)
            _signal_all(tree, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and any(_alive(pid) for pid in tree):
                time.sleep(0.1)
            left = process_tree(pid for pid in tree if _alive(pid))  # with late-born children
            left |= marked_processes(self.token)
            _signal_all(left, signal.SIGKILL)
            for p in procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=5)
            for fh in self._logs:
                fh.close()
            self._logs.clear()
            with self._lock:
                reaper, self._reaper = self._reaper, None
            if reaper is not None:
                reaper.close()


def wait_started(
    proc: subprocess.Popen[bytes],
    output: Callable[[], str],
    port: int,
    host: str = "127.0.0.1",
    timeout: float = START_TIMEOUT,
) -> str:
    """Wait until a Flower server process listens: ``"ready"``, ``"exited"`` or ``"timeout"``.

    Ready: it printed :data:`READY_LINE` (its own socket is bound), or, should a later
    Flower print something else, ``host:port`` has accepted connections for 2 s while it
    runs (a port that another process holds would have made it exit by then).
    """
    deadline = time.monotonic() + timeout
    open_since: float | None = None
    while True:
        if proc.poll() is not None:
            return "exited"
        if READY_LINE in output():
            return "ready"
        if port_open(host, port):
            open_since = open_since or time.monotonic()
            if time.monotonic() - open_since >= 2.0:
                return "ready"
        else:
            open_since = None
        if time.monotonic() >= deadline:
            return "timeout"
        time.sleep(0.05)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """In the main thread, make SIGTERM raise :class:`~fedad.errors.Interrupted` (signum 15)
    so that clean-up code runs, unless the caller already handles (or ignores) SIGTERM."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL
    ):
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise Interrupted(signum)

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


# ---------------------------------------------------------------------------- deployment


def tls_args_superlink(
    certfile: str | None, keyfile: str | None, ca_certfile: str | None, insecure: bool
) -> list[str]:
    """``flower-superlink`` TLS flags (certificate paths passed through), or ``--insecure``."""
    if insecure:
        return ["--insecure"]
    given = [certfile, keyfile, ca_certfile]
    if not all(given):
        raise ConfigError(
            "a SuperLink needs --insecure or all of --certfile, --keyfile and --ca-certfile"
        )
    for p in given:
        if not Path(str(p)).is_file():
            raise ConfigError(f"certificate file '{p}' does not exist")
    return [
        "--ssl-certfile", str(certfile),
        "--ssl-keyfile", str(keyfile),
        "--ssl-ca-certfile", str(ca_certfile),
    ]  # fmt: skip


def tls_args_client(root_certificates: str | None, insecure: bool) -> list[str]:
    """TLS flags of a SuperNode or SuperExec: ``--root-certificates PATH`` or ``--insecure``."""
    if insecure:
        return ["--insecure"]
    if not root_certificates:
        raise ConfigError("give --insecure or --root-certificates (the CA certificate, PEM)")
    if not Path(root_certificates).is_file():
        raise ConfigError(f"certificate file '{root_certificates}' does not exist")
    return ["--root-certificates", str(root_certificates)]


def superlink_argv(
    host: str = "127.0.0.1", port: int = 9093, tls: list[str] | None = None
) -> list[str]:
    """``flower-superlink`` as fedad runs it: ServerApps run by an external SuperExec."""
    return [
        flower_bin("flower-superlink"),
        *(tls or ["--insecure"]),
        "--isolation", "process",
        "--disable-runtime-dependency-installation",
        "--host", host,
        "--port", str(port),
    ]  # fmt: skip


def supernode_argv(
    superlink: str,
    partition_id: int,
    num_partitions: int,
    port: int,
    tls: list[str] | None = None,
    data_config: str | None = None,
    models_dir: str | None = None,
    clientapp: str = "per-node",
) -> list[str]:
    """``flower-supernode`` holding client ``partition_id`` of ``num_partitions``; it keeps
    personalised detectors in ``models_dir`` (node config ``fedad-models-dir``).

    ``clientapp = "per-node"``: ``--isolation process``, the node's ClientApp tasks are left
    to one long-running :mod:`fedad.fl.flower_worker` (:func:`worker_argv`) on its Runtime
    API port; ``"per-message"``: Flower's default, its SuperExec starts a ``flwr-clientapp``
    process per message."""
    node_config = f"partition-id={partition_id} num-partitions={num_partitions}"
    for key, path in (("fedad-data-config", data_config), ("fedad-models-dir", models_dir)):
        if path:
            if '"' in path:
                raise ConfigError(f"the path '{path}' must not contain a double quote")
            node_config += f' {key}="{path}"'
    if clientapp not in CLIENTAPP_MODES:
        raise ConfigError(f"clientapp '{clientapp}' is not one of {', '.join(CLIENTAPP_MODES)}")
    isolation = ["--isolation", "process"] if clientapp == "per-node" else []
    return [
        flower_bin("flower-supernode"),
        *(tls or ["--insecure"]),
        "--superlink", superlink,
        "--node-config", node_config,
        *isolation,
        "--host", "127.0.0.1",
        "--port", str(port),
    ]  # fmt: skip


def worker_argv(port: int, host: str = "127.0.0.1") -> list[str]:
    """The long-running ClientApp process (:mod:`fedad.fl.flower_worker`) of the SuperNode
    whose Runtime API listens on ``host:port`` (loopback, no TLS, as the SuperNode's own
    SuperExec reaches it)."""
    return [
        sys.executable, "-m", "fedad.fl.flower_worker",
        "--runtime-api-address", f"{host}:{port}",
        "--insecure",
    ]  # fmt: skip


def superexec_argv(superlink: str, tls: list[str] | None = None) -> list[str]:
    """``flower-superexec`` that runs ServerApps of ``superlink`` here (dies with us)."""
    return [
        flower_bin("flower-superexec"),
        *(tls or ["--insecure"]),
        "--runtime-api-address", superlink,
        "--parent-pid", str(os.getpid()),
    ]  # fmt: skip


def write_app(app_dir: Path, spec: RunSpec) -> Path:
    """The Flower App (``pyproject.toml``) of a run: fedad's apps plus the run config."""
    import tomli_w

    app_dir.mkdir(parents=True, exist_ok=True)
    doc = {
        "build-system": {"requires": ["hatchling"], "build-backend": "hatchling.build"},
        "project": {
            "name": APP_NAME,
            "version": "1.0.0",
            "description": "A fedad experiment (generated by fedad)",
            "license": "Apache-2.0",
            "dependencies": [],
        },
        "tool": {
            "flwr": {
                "app": {
                    "publisher": "fedad",
                    "components": {
                        "serverapp": "fedad.fl.flower_app:server_app",
                        "clientapp": "fedad.fl.flower_app:client_app",
                    },
                    "config": spec.to_run_config(),
                }
            }
        },
    }
    (app_dir / "pyproject.toml").write_text(tomli_w.dumps(doc))
    return app_dir


def write_connection(home: Path, link: RemoteSuperLink) -> None:
    """The ``flwr`` CLI's config: one SuperLink connection named ``fedad``."""
    import tomli_w

    conn: dict[str, Any] = {"address": link.address}
    if link.insecure:
        conn["insecure"] = True
    else:
        conn["root-certificates"] = str(Path(str(link.root_certificates)).resolve())
    home.mkdir(parents=True, exist_ok=True)
    doc = {"superlink": {"default": CONNECTION, CONNECTION: conn}}
    (home / "config.toml").write_text(tomli_w.dumps(doc))


class LocalDeployment:
    """A SuperLink and ``num_nodes`` SuperNodes on 127.0.0.1 (use as a context manager)."""

    def __init__(
        self,
        workdir: Path,
        num_nodes: int,
        models_dir: Path | None = None,
        clientapp: str = "per-node",
    ) -> None:
        self.workdir = workdir
        self.num_nodes = num_nodes
        self.models_dir = models_dir or workdir / "node-models"
        """Where the SuperNodes keep personalised detectors (all of them: each in its own
        ``run-R/client-I`` folder); created only when one is saved."""
        if clientapp not in CLIENTAPP_MODES:
            raise ConfigError(f"clientapp '{clientapp}' is not one of {', '.join(CLIENTAPP_MODES)}")
        self.clientapp = clientapp
        """``per-node``: each SuperNode's tasks run in one long-running ClientApp process
        (``worker-I``, :func:`worker_argv`); ``per-message``: Flower's SuperExec per node."""
        self.supervisor = Supervisor(workdir / "logs")
        self.port = 0
        self.address = ""
        self.node_ports: dict[int, int] = {}
        self._restarts: dict[int, int] = {}
        self._worker_restarts: dict[int, int] = {}
        self._workers_gone: set[int] = set()
        self._reported: dict[int, str] = {}

    def start(self) -> None:
        """Start the SuperLink, wait until it listens, then start the SuperNodes.

        A port that another process takes between our choosing it and the SuperLink binding
        it is retried with another one (:data:`PORT_TRIES` in all).
        """
        w = self.workdir
        taken: list[int] = []
        for _ in range(PORT_TRIES):
            self.port = free_port()
            proc = self.supervisor.start(
                "superlink", superlink_argv(port=self.port), flower_env(w / "homes" / "superlink")
            )
            state = wait_started(proc, lambda: self.supervisor.log_text("superlink"), self.port)
            if state == "ready":
                break
            text = self.supervisor.log_text("superlink")
            if state == "exited" and PORT_BUSY.search(text):
                taken.append(self.port)
                continue
            raise FlowerRunError(
                "the SuperLink did not start"
                + (f" within {START_TIMEOUT:g} s" if state == "timeout" else ""),
                f"its log: {self.supervisor.log_tail('superlink')}; logs in {w}",
            )
        else:
            raise FlowerRunError(
                f"the SuperLink could not listen on 127.0.0.1: the ports it was given "
                f"({', '.join(map(str, taken))}) were taken by other processes first",
                "run again; if this repeats, something on this machine grabs free ports",
            )
        self.address = f"127.0.0.1:{self.port}"
        for i in range(self.num_nodes):
            self._start_node(i)

    def _node_env(self, i: int) -> dict[str, str]:
        """Node ``i``'s environment: its Flower home, the data cache, and
        ``OMP_NUM_THREADS`` (:meth:`node_threads`) unless the caller's environment sets it."""
        extra = {"FEDAD_FLOWER_CACHE": str(self.workdir / "cache")}
        if "OMP_NUM_THREADS" not in os.environ:
            extra["OMP_NUM_THREADS"] = str(self.node_threads())
        return flower_env(self.workdir / "homes" / f"supernode-{i}", extra)

    def node_threads(self) -> int:
        """Torch threads of each node's ClientApp: this process's threads shared out over
        the nodes (at least 1), as ``engine.workers`` shares them over workers. The nodes
        of a round train at the same time on one machine; more threads than cores make
        torch's threads wait on each other (float32 sums may then differ from the
        in-process run's in the last bits; metrics agree to 1e-6)."""
        import torch

        return max(1, torch.get_num_threads() // max(1, self.num_nodes))

    def _start_node(self, i: int) -> None:
        self.node_ports[i] = free_port()
        self.supervisor.start(
            f"supernode-{i}",
            supernode_argv(
                self.address,
                i,
                self.num_nodes,
                self.node_ports[i],
                models_dir=str(self.models_dir),
                clientapp=self.clientapp,
            ),
            self._node_env(i),
        )
        if self.clientapp == "per-node":
            self._start_worker(i)

    def _start_worker(self, i: int) -> None:
        """Node ``i``'s ClientApp process; it waits for the SuperNode's Runtime API itself
        (tasks wait in the SuperNode until it polls)."""
        self.supervisor.start(f"worker-{i}", worker_argv(self.node_ports[i]), self._node_env(i))

    def _check_worker(self, i: int) -> None:
        """Start node ``i``'s ClientApp process again if it died (a message it was running
        gets Flower's "ClientApp crashed" reply), :data:`WORKER_RESTARTS` times at most;
        then its replies are missing, and the console says so once."""
        name = f"worker-{i}"
        proc = self.supervisor.procs.get(name)
        if proc is None or proc.poll() is None or i in self._workers_gone:
            return
        code = proc.returncode
        why = f"exit code {code}" if code >= 0 else f"killed by signal {-code}"
        if self._worker_restarts.get(i, 0) < WORKER_RESTARTS:
            self._worker_restarts[i] = self._worker_restarts.get(i, 0) + 1
            self.supervisor.rotate_log(name)
            self._start_worker(i)
            log.warning(
                "node %d: its ClientApp process (pid %d) stopped (%s); started another "
                "(log of the one that stopped: %s)",
                i,
                proc.pid,
                why,
                self.supervisor.log_path(name).with_suffix(".log.1"),
            )
            return
        self._workers_gone.add(i)
        log.warning(
            "node %d: its ClientApp process stopped again (%s), %d restarts used; its replies "
            "will be missing (log: %s)",
            i,
            why,
            WORKER_RESTARTS,
            self.supervisor.log_path(name),
        )

    def check_nodes(self) -> None:
        """Called while a run goes on: restart a SuperNode whose port was taken at start-up,
        and a node's ClientApp process that died (:meth:`_check_worker`); log a warning,
        once, for a SuperNode that exited or is stopped (its client's replies will be
        missing)."""
        for i in range(self.num_nodes):
            name = f"supernode-{i}"
            proc = self.supervisor.procs[name]
            code = proc.poll()
            if code is None and self.clientapp == "per-node":
                self._check_worker(i)
            if code is None:
                state = _proc_state(proc.pid)
                if state in ("T", "t") and self._reported.get(i) != "stopped":
                    self._reported[i] = "stopped"
                    log.warning(
                        "node %d: its SuperNode (pid %d) is stopped and cannot answer; its "
                        "replies will be missing",
                        i,
                        proc.pid,
                    )
                elif state not in ("T", "t") and self._reported.get(i) == "stopped":
                    del self._reported[i]  # continued (SIGCONT)
                continue
            if self._reported.get(i) == "exited":
                continue
            text = self.supervisor.log_text(name)
            if (
                PORT_BUSY.search(text)
                and READY_LINE not in text
                and self._restarts.get(i, 0) < PORT_TRIES - 1
            ):
                self._restarts[i] = self._restarts.get(i, 0) + 1
                port = self.node_ports[i]
                self._start_node(i)
                log.info(
                    "node %d: port %d was taken; its SuperNode restarts on port %d",
                    i,
                    port,
                    self.node_ports[i],
                )
                continue
            self._reported[i] = "exited"
            why = f"exit code {code}" if code >= 0 else f"killed by signal {-code}"
            log.warning(
                "node %d: its SuperNode (pid %d) stopped during the run (%s); its replies will "
                "be missing (log: %s)",
                i,
                proc.pid,
                why,
                self.supervisor.log_path(name),
            )

    def kill_supernode(self, partition_id: int, sig: int = signal.SIGKILL) -> None:
        """Kill (or, with SIGSTOP, hang) SuperNode ``partition_id`` and its processes."""
        self.supervisor.kill(f"supernode-{partition_id}", sig)

    def stop(self) -> None:
        """Stop every process this deployment started."""
        self.supervisor.stop_all()

    def __enter__(self) -> LocalDeployment:
        _ACTIVE.append(self)
        try:
            self.start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            if self in _ACTIVE:
                _ACTIVE.remove(self)


_ACTIVE: list[LocalDeployment] = []


def active_deployments() -> list[LocalDeployment]:
    """The local deployments running now (tests use this to kill a SuperNode mid-run)."""
    return list(_ACTIVE)


def submit_and_wait(
    spec: RunSpec,
    link: RemoteSuperLink,
    workdir: Path,
    supervisor: Supervisor,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    watch: Iterable[str] = (),
    stop_on_interrupt: bool = False,
    tick: Callable[[], None] | None = None,
) -> RunOutcome:
    """Run a SuperExec here, submit the run to ``link`` with ``flwr run``, wait, read results.

    ``watch`` names supervised processes whose death ends the wait with an error; ``tick``
    is called while waiting (:meth:`LocalDeployment.check_nodes`); with
    ``stop_on_interrupt``, Ctrl-C also asks the SuperLink to stop the run (``flwr stop``).
    """
    results = ResultsDir(spec.results_dir)
    app = write_app(workdir / "app", spec)
    cli_home = workdir / "homes" / "cli"
    write_connection(cli_home, link)
    tls = tls_args_client(link.root_certificates, link.insecure)
    supervisor.start(
        "superexec", superexec_argv(link.address, tls), flower_env(workdir / "homes" / "superexec")
    )
    timeline_event("run-submit", time=time.time())
    submit = supervisor.start(
        "flwr-run",
        [flower_bin("flwr"), "run", str(app), CONNECTION, "--stream"],
        flower_env(cli_home),
    )
    watched = ["superexec", *watch]
    try:
        return _wait(results, supervisor, submit, watched, workdir, on_round, tick)
    except (KeyboardInterrupt, Interrupted):
        if stop_on_interrupt:  # do not leave the run going on a remote SuperLink
            run_id = _run_id(workdir / "logs" / "flwr-run.log")
            if run_id is not None:
                with contextlib.suppress(OSError, subprocess.SubprocessError):
                    subprocess.run(
                        [flower_bin("flwr"), "stop", run_id, CONNECTION],
                        env=flower_env(cli_home),
                        capture_output=True,
                        timeout=20,
                    )
        raise


def _run_id(log: Path) -> str | None:
    """The run id ``flwr run`` printed ("Successfully started run N")."""
    if not log.is_file():
        return None
    m = re.search(r"started run (\d+)", log.read_text(errors="replace"))
    return m.group(1) if m else None


def _wait(
    results: ResultsDir,
    supervisor: Supervisor,
    submit: subprocess.Popen[bytes],
    watched: list[str],
    workdir: Path,
    on_round: Callable[[dict[str, Any]], None] | None,
    tick: Callable[[], None] | None = None,
) -> RunOutcome:
    """Follow the run: rows and the ServerApp's warnings as they come, then the outcome or
    a one-line error."""
    seen = 0
    warned = 0
    ended_at: float | None = None
    while True:
        warnings = results.read_warnings(warned)
        warned += len(warnings)
        for text in warnings:
            log.warning("%s", text)
        if tick is not None:
            tick()
        rows = results.read_rounds(seen)
        seen += len(rows)
        for row in rows:
            if on_round is not None:
                on_round(row)
        if results.outcome_file.is_file():
            return results.read()
        err = results.read_error()
        if err is not None:
            raise FlowerRunError(f"the Flower run failed: {err}", f"logs in {workdir}")
        for name in watched:
            if supervisor.procs[name].poll() is not None:
                raise FlowerRunError(
                    f"the {name} process stopped during the run",
                    f"its log: {supervisor.log_tail(name)}; logs in {workdir}",
                )
        if submit.poll() is not None:
            ended_at = ended_at or time.monotonic()
            if time.monotonic() - ended_at > 5.0:  # the run is over; give the files a moment
                raise FlowerRunError(
                    "the Flower run ended without results",
                    f"flwr run: {supervisor.log_tail('flwr-run')}; logs in {workdir}",
                )
        time.sleep(0.1)


def _workdir(base: Path | None, name: str) -> tuple[Path, bool]:
    """A fresh work directory under ``base/.flower`` (or a temp dir); whether it is temporary."""
    if base is None:
        return Path(tempfile.mkdtemp(prefix=f"fedad-flower-{name}-")), True
    root = mkdir(base / ".flower")  # in a claimed run: not through a link
    return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root)), False


def run_deployment(
    cfg: ExperimentConfig,
    algorithm: Algorithm,
    fed: Federation,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    workdir: Path | None = None,
) -> RunOutcome:
    """Run ``algorithm`` on a Flower deployment: local processes, or the remote SuperLink
    set with :func:`remote_superlink`."""
    remote = _REMOTE.get()
    if remote is None and len(fed.clients) > MAX_LOCAL_NODES:
        raise ConfigError(
            f"engine.name = 'flower-deployment' starts one SuperNode process per client on "
            f"this machine; {len(fed.clients)} clients is more than {MAX_LOCAL_NODES}",
            "use engine.name = 'flower-simulation', or SuperNodes on several machines "
            "(docs/deployment.md)",
        )
    w, temporary = _workdir(workdir.resolve() if workdir else None, algorithm.name)
    ok = False
    interrupted = False
    try:
        # the ServerApp derives data.server_normal from the run config (server_normal_of)
        spec = RunSpec.build(cfg, algorithm, results_dir=w / "results")
        with sigterm_as_interrupt():
            if remote is not None:
                sup = Supervisor(w / "logs")
                try:
                    outcome = submit_and_wait(
                        spec, remote, w, sup, on_round, stop_on_interrupt=True
                    )
                finally:
                    sup.stop_all()
            else:
                # the nodes' personalised detectors outlive the work directory: .flower/
                models = w / "node-models" if temporary else w.parent / NODE_MODELS
                nodes = len(fed.clients)
                with LocalDeployment(w, nodes, models, cfg.engine.clientapp) as dep:
                    link = RemoteSuperLink(dep.address, insecure=True)
                    outcome = submit_and_wait(
                        spec, link, w, dep.supervisor, on_round, ["superlink"],
                        tick=dep.check_nodes,
                    )  # fmt: skip
        ok = True
        return outcome
    except (KeyboardInterrupt, Interrupted):  # every process is stopped by now
        interrupted = True
        raise
    finally:
        keep = not (ok or temporary or not (w / "logs").exists())  # the logs of a failed run
        if not keep:
            shutil.rmtree(w, ignore_errors=True)
            if not temporary:
                with contextlib.suppress(OSError):
                    w.parent.rmdir()  # .flower/, when empty
        if interrupted:
            if keep:
                log.warning("interrupted; Flower processes stopped, Flower logs kept in %s", w)
            else:
                log.warning("interrupted; Flower processes stopped")
