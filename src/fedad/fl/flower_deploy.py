"""``engine.name = "flower-deployment"``: a real Flower deployment, processes and all.

``fedad run`` with this engine starts, on 127.0.0.1 with free ports and ``--insecure``:

* one **SuperLink** (``flower-superlink --isolation process``),
* one **SuperNode** per client (``flower-supernode --node-config "partition-id=I
  num-partitions=N"``; each runs the ClientApp in a fresh process per message),
* one **SuperExec** (``flower-superexec``) that runs the ServerApp of our run,

then submits the run with ``flwr run`` (a Flower App Bundle whose components are
``fedad.fl.flower_app:server_app`` and ``:client_app`` and whose run config is the
:class:`~fedad.fl.flower.RunSpec`), waits, reads the results and stops every process it
started — on success, on failure and on Ctrl-C (process groups, then the whole process
tree found under ``/proc``, SIGTERM then SIGKILL).

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
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
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

import numpy as np

from fedad.config import ExperimentConfig
from fedad.data.types import Federation
from fedad.errors import ConfigError
from fedad.fl.algorithm import Algorithm
from fedad.fl.engine import RunOutcome
from fedad.fl.flower import INSTALL_HINT, FlowerRunError, ResultsDir, RunSpec
from fedad.fl.flower_sim import QUIET_ENV

APP_NAME = "fedad-run"
CONNECTION = "fedad"
SUPEREXEC_POLL = 0.25
"""Seconds between a SuperExec's polls for new tasks (Flower's default: 1)."""
MAX_LOCAL_NODES = 32
"""Most SuperNodes ``fedad run`` starts on one machine (two processes each, ~130 MB apiece)."""
START_TIMEOUT = 60.0
"""Seconds to wait for a SuperLink to accept connections."""


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


def die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Linux: the child gets SIGTERM when the process that started it dies."""
    os.setsid()
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


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


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rfind(")") + 2 :].split()[0] != "Z"
    except OSError:
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


class Supervisor:
    """Starts Flower processes (each in its own session, logs to files) and stops them all."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[IO[bytes]] = []
        self._lock = threading.Lock()

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        """Start ``argv`` as ``name`` (log: ``LOGDIR/NAME.log``)."""
        self.logdir.mkdir(parents=True, exist_ok=True)
        fh = (self.logdir / f"{name}.log").open("wb")
        self._logs.append(fh)
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=die_with_parent,  # new session + parent-death signal
        )
        with self._lock:
            self.procs[name] = proc
        return proc

    def log_tail(self, name: str, lines: int = 5) -> str:
        """The last lines of a process's log, as one line."""
        path = self.logdir / f"{name}.log"
        if not path.is_file():
            return ""
        text = path.read_text(errors="replace").translate(_BOX).strip().splitlines()[-lines:]
        return " | ".join(" ".join(x.split()) for x in text if x.strip())

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to process ``name`` and everything it started."""
        proc = self.procs[name]
        tree = process_tree([proc.pid])
        _signal_all(tree, sig)
        if sig == signal.SIGKILL:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)

    def stop_all(self, grace: float = 5.0) -> None:
        """SIGTERM every process started and its descendants; SIGKILL what is left."""
        with self._lock:
            procs = list(self.procs.values())
        tree = process_tree(p.pid for p in procs if p.poll() is None)
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(OSError):
                    os.killpg(p.pid, signal.SIGTERM)
        _signal_all(tree, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_alive(pid) for pid in tree):
            time.sleep(0.1)
        left = process_tree(pid for pid in tree if _alive(pid))  # with late-born children
        _signal_all(left, signal.SIGKILL)
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=5)
        for fh in self._logs:
            fh.close()
        self._logs.clear()


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """In the main thread, turn SIGTERM into KeyboardInterrupt so clean-up code runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

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
) -> list[str]:
    """``flower-supernode`` holding client ``partition_id`` of ``num_partitions``."""
    node_config = f"partition-id={partition_id} num-partitions={num_partitions}"
    if data_config:
        if '"' in data_config:
            raise ConfigError(f"the path '{data_config}' must not contain a double quote")
        node_config += f' fedad-data-config="{data_config}"'
    return [
        flower_bin("flower-supernode"),
        *(tls or ["--insecure"]),
        "--superlink", superlink,
        "--node-config", node_config,
        "--host", "127.0.0.1",
        "--port", str(port),
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

    def __init__(self, workdir: Path, num_nodes: int) -> None:
        self.workdir = workdir
        self.num_nodes = num_nodes
        self.supervisor = Supervisor(workdir / "logs")
        self.port = 0
        self.address = ""

    def start(self) -> None:
        """Start the SuperLink, wait until it listens, then start the SuperNodes."""
        w = self.workdir
        for attempt in range(3):
            self.port = free_port()
            proc = self.supervisor.start(
                "superlink", superlink_argv(port=self.port), flower_env(w / "homes" / "superlink")
            )
            deadline = time.monotonic() + START_TIMEOUT
            while proc.poll() is None and time.monotonic() < deadline:
                if port_open("127.0.0.1", self.port):
                    break
                time.sleep(0.1)
            if proc.poll() is None and port_open("127.0.0.1", self.port):
                break
            if attempt == 2 or proc.poll() is None:
                raise FlowerRunError(
                    "the SuperLink did not start",
                    f"its log: {self.supervisor.log_tail('superlink')}",
                )
        self.address = f"127.0.0.1:{self.port}"
        cache = {"FEDAD_FLOWER_CACHE": str(w / "cache")}
        for i in range(self.num_nodes):
            self.supervisor.start(
                f"supernode-{i}",
                supernode_argv(self.address, i, self.num_nodes, free_port()),
                flower_env(w / "homes" / f"supernode-{i}", cache),
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
) -> RunOutcome:
    """Run a SuperExec here, submit the run to ``link`` with ``flwr run``, wait, read results.

    ``watch`` names supervised processes whose death ends the wait with an error; with
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
    submit = supervisor.start(
        "flwr-run",
        [flower_bin("flwr"), "run", str(app), CONNECTION, "--stream"],
        flower_env(cli_home),
    )
    watched = ["superexec", *watch]
    try:
        return _wait(results, supervisor, submit, watched, workdir, on_round)
    except KeyboardInterrupt:
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
) -> RunOutcome:
    """Follow the run: rows as they come, then the outcome or a one-line error."""
    seen = 0
    ended_at: float | None = None
    while True:
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
    root = base / ".flower"
    root.mkdir(parents=True, exist_ok=True)
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
    try:
        server_data = ""
        if fed.server_normal is not None:  # the ServerApp runs here, so a local file will do
            server_data = str(w / "server_normal.npy")
            np.save(server_data, fed.server_normal)
        spec = RunSpec.build(cfg, algorithm, results_dir=w / "results", server_data=server_data)
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
                with LocalDeployment(w, len(fed.clients)) as dep:
                    link = RemoteSuperLink(dep.address, insecure=True)
                    watch = ["superlink"]
                    outcome = submit_and_wait(spec, link, w, dep.supervisor, on_round, watch)
        ok = True
        return outcome
    finally:
        if ok or temporary or not (w / "logs").exists():  # keep the logs of a failed run
            shutil.rmtree(w, ignore_errors=True)
            if not temporary:
                with contextlib.suppress(OSError):
                    w.parent.rmdir()  # .flower/, when empty
