"""``fedad flower ...``: a Flower federation over several machines (see docs/deployment.md).

* ``fedad flower superlink`` — the SuperLink (``flower-superlink --isolation process``).
* ``fedad flower supernode --superlink HOST:PORT --partition-id I --num-partitions N`` —
  one client: it builds its data from the run's config and holds partition ``I``; a
  personalised method's detector stays on it, in ``--models-dir`` (default
  ``./fedad-models``).
* ``fedad flower run CONFIG --superlink HOST:PORT`` — runs an experiment on that
  federation and writes the usual run directory; the ServerApp runs on this machine.

* ``fedad flower keygen | register | unregister | nodes`` (:mod:`fedad.cli.flower_keys`) —
  which sites may join: a site's key pair, and the SuperLink's register of their keys.

TLS: the SuperLink takes ``--certfile``/``--keyfile``/``--ca-certfile``, the others
``--root-certificates`` (all passed through to Flower's own flags); ``--insecure`` runs
without TLS. SuperNode authentication is Flower's: ``fedad flower superlink
--enable-supernode-auth`` accepts only SuperNodes whose public key is registered, and
``fedad flower supernode --auth-key KEY`` (Flower's ``--auth-supernode-private-key``) signs
with the site's private key; both need TLS, and a key file that is missing, unreadable or
of the wrong kind is one line before Flower starts. Nothing here imports ``flwr`` until a
command runs.

Mistakes are one line each, before or instead of Flower's logs: a port already in use (a
bind test first; a Flower process that still stops while starting is summed up in one line
and its held-back output is not printed), a ``--superlink`` that is not ``HOST:PORT`` or
where nothing accepts connections within ``--connect-timeout`` seconds, a SuperNode that the
SuperLink refuses (not registered, or no key where one is needed). Ctrl-C or SIGTERM
stops the Flower process and everything it started (exit status 130 or 143); so does
fedad's own death, even by SIGKILL (:class:`~fedad.fl.flower.deploy.processes.Supervisor`).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated

import typer

from fedad.cli.options import (
    ConfigFile,
    ForceRun,
    OutDir,
    Quiet,
    Resume,
    SetValues,
    fail,
    interrupted,
)
from fedad.cli.progress import run_with_progress
from fedad.core.errors import FedadError, Interrupted

if TYPE_CHECKING:
    from fedad.fl.flower.deploy.processes import Supervisor

app = typer.Typer(
    no_args_is_help=True,
    help="Flower federation over several machines: superlink, supernode, run; which sites may "
    "join: keygen, register, unregister, nodes.",
    pretty_exceptions_enable=False,
)

Insecure = Annotated[bool, typer.Option("--insecure", help="no TLS (trusted networks only)")]
RootCert = Annotated[
    Path | None,
    typer.Option("--root-certificates", help="CA certificate (PEM) that signed the SuperLink's"),
]
Home = Annotated[
    Path | None,
    typer.Option("--home", help="Flower's home directory (FLWR_HOME) for this process"),
]
AuthKey = Annotated[
    Path | None,
    typer.Option(
        "--auth-key",
        help="this site's private key (fedad flower keygen), registered at a SuperLink "
        "started with --enable-supernode-auth; needs TLS",
    ),
]


def _require_flwr() -> None:
    from fedad.fl.flower.spec import require_flwr

    require_flwr("flower-deployment")


ConnectTimeout = Annotated[
    float,
    typer.Option(
        "--connect-timeout", help="seconds to wait for the SuperLink to accept connections"
    ),
]

STARTUP = 20.0
"""Seconds a foreground Flower process's output is held back while it starts."""

NODE_STARTUP = 40.0
"""The same for a SuperNode, which has started once the SuperLink took it (:data:`NODE_READY`)."""

NODE_READY = "SuperNode ID:"
"""What Flower 1.41's SuperNode prints once the SuperLink has accepted it."""


class _Relay:
    """Copies a child's output to our stdout, holding it back until :meth:`release`."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.held: list[bytes] = []
        self.released = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: IO[bytes]) -> None:
        for line in iter(stream.readline, b""):
            with self._lock:
                if self.released:
                    self._write(line)
                else:
                    self.held.append(line)

    @staticmethod
    def _write(data: bytes) -> None:
        out = getattr(sys.stdout, "buffer", None)
        with contextlib.suppress(OSError, ValueError):
            if out is not None:
                out.write(data)
                out.flush()
            else:
                sys.stdout.write(data.decode(errors="replace"))
                sys.stdout.flush()

    def text(self) -> str:
        with self._lock:
            return b"".join(self.held).decode(errors="replace")

    def release(self) -> None:
        """Print what was held; from now on, pass the output straight through."""
        with self._lock:
            self.released = True
            if self.held:
                self._write(b"".join(self.held))
            self.held = []

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)


def run_foreground(
    argv: list[str],
    env: dict[str, str],
    what: str = "the Flower process",
    port: int | None = None,
    host: str = "127.0.0.1",
    port_option: str = "--port",
    startup: float = STARTUP,
    companion: list[str] | None = None,
    ready: str | None = None,
    explain: Callable[[str], FedadError | None] | None = None,
) -> int:
    """Run a Flower server process in the foreground; return its exit status.

    Its output is held back while it starts (until it listens on ``port``, at most
    ``startup`` seconds): if it stops with an error meanwhile, that becomes a one-line
    :class:`~fedad.core.errors.FedadError` (``port P ... already in use ... PORT_OPTION`` for a
    taken port) instead of Flower's log. Ctrl-C or SIGTERM stops it and its children
    (130, 143), as does the death of this process; call it from the main thread.

    ``companion``: a process started once the main one listens (a SuperNode's ClientApp
    process, :mod:`fedad.fl.flower.worker`), with the same environment and output; started
    again when it dies (:data:`~fedad.fl.flower.deploy.local.WORKER_RESTARTS` times at most) and
    stopped with the main process.

    ``ready``: a line of its output that says it has started (default: it listens on
    ``port``); ``explain``: turns the output of a process that stopped while starting into
    the one-line error to raise (``None``: the generic one).
    """
    from fedad.fl.flower.deploy.launch import port_open
    from fedad.fl.flower.deploy.processes import READY_LINE, Supervisor, sigterm_as_interrupt

    sup = Supervisor(Path(os.devnull))  # its processes write to our stdout, not to logs
    try:
        with sigterm_as_interrupt():
            proc = sup.start("main", argv, env, stdout=subprocess.PIPE)
            assert proc.stdout is not None
            relay = _Relay(proc.stdout)
            probe = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
            deadline = time.monotonic() + startup
            while proc.poll() is None and time.monotonic() < deadline:
                if (ready or READY_LINE) in relay.text():
                    break
                if ready is None and port is not None and port_open(probe, port):
                    time.sleep(0.5)  # a port held by another process makes it exit now
                    if proc.poll() is None:
                        break
                time.sleep(0.05)
            code = proc.poll()
            if code is not None:
                relay.join(2.0)  # all of its output
            text = relay.text()
            if code is not None and code != 0 and (ready or READY_LINE) not in text:
                known = explain(text) if explain is not None else None
                raise known or _start_error(text, code, argv, what, port, host, port_option)
            relay.release()
            code = _wait_with(sup, proc, companion, env)
            relay.join(2.0)
            return code
    except KeyboardInterrupt:
        return 130
    except Interrupted as err:
        return 128 + int(err.signum)
    finally:
        sup.stop_all()


def _start_error(
    text: str,
    code: int,
    argv: list[str],
    what: str,
    port: int | None,
    host: str,
    port_option: str,
) -> FedadError:
    """The one-line error for a Flower process that stopped while starting, from its
    output ``text``: a taken port, else the line that says why."""
    from fedad.fl.flower.deploy.launch import PORT_BUSY
    from fedad.fl.flower.deploy.processes import failure_line

    if port is not None and PORT_BUSY.search(text):
        return FedadError(
            f"port {port} on {host} is already in use, so {what} cannot listen on it",
            f"stop the process that uses it, or choose another port with {port_option}",
        )
    command = " ".join([Path(argv[0]).name, *argv[1:]])
    return FedadError(
        f"{what} stopped while starting (exit status {code}): {failure_line(text)}",
        f"run '{command}' to see all of its output",
    )


def _wait_with(
    sup: Supervisor, main: subprocess.Popen[bytes], argv: list[str] | None, env: dict[str, str]
) -> int:
    """Wait for ``main`` to exit and return its exit status, keeping ``argv`` (if any)
    running beside it meanwhile: restarted when it dies, a bounded number of times, with a
    line on stderr each time."""
    from fedad.fl.flower.deploy.local import WORKER_RESTARTS

    if argv is None:
        return main.wait()

    relays: list[_Relay] = []

    def start() -> subprocess.Popen[bytes]:
        proc = sup.start("companion", argv, env, stdout=subprocess.PIPE)
        assert proc.stdout is not None
        relays.append(_Relay(proc.stdout))
        relays[-1].release()
        return proc

    worker = start()
    restarts = 0
    while main.poll() is None:
        code = worker.poll()
        if code is not None and restarts < WORKER_RESTARTS:
            restarts += 1
            why = f"exit status {code}" if code >= 0 else f"killed by signal {-code}"
            print(
                f"fedad: the node's ClientApp process stopped ({why}); starting another "
                f"({restarts} of {WORKER_RESTARTS})",
                file=sys.stderr,
                flush=True,
            )
            worker = start()
        elif code is not None and restarts == WORKER_RESTARTS:
            restarts += 1
            print(
                "fedad: the node's ClientApp process stopped again; this node will not "
                "answer (its replies will be missing); restart it",
                file=sys.stderr,
                flush=True,
            )
        time.sleep(0.2)
    for r in relays:
        r.join(1.0)
    return int(main.returncode)


def _env(home: Path | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    from fedad.fl.flower.deploy.launch import flower_env

    base = home or Path(os.environ.get("FLWR_HOME", Path.home() / ".flwr"))
    return flower_env(base.expanduser().resolve(), extra)


@app.command()
def superlink(
    host: Annotated[str, typer.Option(help="address to listen on (0.0.0.0: all)")] = "0.0.0.0",
    port: Annotated[int, typer.Option(help="port of Flower's HTTP API (fleet, control)")] = 9093,
    certfile: Annotated[Path | None, typer.Option(help="server certificate (PEM)")] = None,
    keyfile: Annotated[Path | None, typer.Option(help="server private key (PEM)")] = None,
    ca_certfile: Annotated[Path | None, typer.Option(help="CA certificate (PEM)")] = None,
    enable_supernode_auth: Annotated[
        bool,
        typer.Option(
            "--enable-supernode-auth",
            help="accept only SuperNodes whose public key is registered (fedad flower "
            "register); needs TLS",
        ),
    ] = False,
    insecure: Insecure = False,
    home: Home = None,
) -> None:
    """Start a SuperLink; ServerApps run where `fedad flower run` is called."""
    try:
        _require_flwr()
        from fedad.fl.flower.deploy.launch import (
            check_port_free,
            superlink_argv,
            tls_args_superlink,
        )

        if enable_supernode_auth and insecure:
            raise FedadError(
                "--enable-supernode-auth needs TLS, and --insecure turns it off",
                "give --certfile, --keyfile and --ca-certfile instead of --insecure",
            )
        tls = tls_args_superlink(
            str(certfile) if certfile else None,
            str(keyfile) if keyfile else None,
            str(ca_certfile) if ca_certfile else None,
            insecure,
        )
        check_port_free(host, port, "the SuperLink")
        argv = superlink_argv(host, port, tls, supernode_auth=enable_supernode_auth)
        code = run_foreground(argv, _env(home), "the SuperLink", port=port, host=host)
    except FedadError as err:
        fail(err)
    raise typer.Exit(code)


@app.command()
def supernode(
    superlink: Annotated[str, typer.Option(help="the SuperLink's HOST:PORT")],
    partition_id: Annotated[int, typer.Option(help="which client this node is (0-based)")],
    num_partitions: Annotated[int, typer.Option(help="how many clients the federation has")],
    config: Annotated[
        Path | None,
        typer.Option(help="a TOML whose data table (this machine's data paths) replaces the run's"),
    ] = None,
    port: Annotated[int, typer.Option(help="local port of the node's own API")] = 9094,
    cache_dir: Annotated[
        Path | None, typer.Option(help="cache of this node's data (default: a temp dir)")
    ] = None,
    models_dir: Annotated[
        Path,
        typer.Option(help="where this node keeps its personalised detectors (they never leave it)"),
    ] = Path("fedad-models"),
    clientapp: Annotated[
        str,
        typer.Option(
            help="per-node: one long-running ClientApp process for this node (torch loads "
            "once); per-message: Flower's own, a fresh process per message"
        ),
    ] = "per-node",
    root_certificates: RootCert = None,
    auth_key: AuthKey = None,
    insecure: Insecure = False,
    home: Home = None,
    connect_timeout: ConnectTimeout = 30.0,
) -> None:
    """Start a SuperNode holding client PARTITION_ID of NUM_PARTITIONS."""
    try:
        _require_flwr()
        from fedad.fl.flower.deploy.auth import refusal
        from fedad.fl.flower.deploy.launch import (
            check_port_free,
            parse_address,
            supernode_argv,
            tls_args_client,
            wait_reachable,
            worker_argv,
        )

        data_config = _check_node(clientapp, partition_id, num_partitions, config)
        tls = tls_args_client(str(root_certificates) if root_certificates else None, insecure)
        key = _auth_key(auth_key, insecure)
        parse_address(superlink)
        models = check_models_dir(models_dir)
        check_port_free("127.0.0.1", port, "the SuperNode's local API")
        wait_reachable(superlink, "--superlink", connect_timeout)
        argv = supernode_argv(
            superlink,
            partition_id,
            num_partitions,
            port,
            tls,
            data_config,
            str(models),
            clientapp,
            key,
        )
        worker = worker_argv(port) if clientapp == "per-node" else None
        with _node_cache(cache_dir) as cache:
            env = _env(home, {"FEDAD_FLOWER_CACHE": str(cache)})
            code = run_foreground(
                argv,
                env,
                "the SuperNode",
                port=port,
                companion=worker,
                startup=NODE_STARTUP,
                ready=NODE_READY,
                explain=lambda text: refusal(text, superlink, key),
            )
        if code == 0:  # not stopped by us (130, 143): the SuperLink no longer takes it
            raise _stopped_by_itself(superlink)
    except FedadError as err:
        fail(err)
    raise typer.Exit(code)


@contextlib.contextmanager
def _node_cache(cache_dir: Path | None) -> Iterator[Path]:
    """The node's data cache: ``cache_dir`` (absolute), or a temporary folder removed after."""
    if cache_dir is not None:
        yield cache_dir.resolve()
        return
    with tempfile.TemporaryDirectory(prefix="fedad-") as tmp:
        yield Path(tmp).resolve()


def _stopped_by_itself(superlink: str) -> FedadError:
    """A SuperNode that exits 0 was not stopped by fedad: its SuperLink stopped taking it."""
    return FedadError(
        "the SuperNode stopped by itself (exit status 0), as Flower's SuperNode does "
        f"when the SuperLink at {superlink} stops accepting it (with "
        "--enable-supernode-auth: once its key is unregistered)",
        "ask the SuperLink's operator ('fedad flower nodes'); start it again once its "
        "key is registered",
    )


def _check_node(
    clientapp: str, partition_id: int, num_partitions: int, config: Path | None
) -> str | None:
    """Check a SuperNode's ``--clientapp``, ``--partition-id`` and ``--config``; return the
    data config's absolute path (or ``None``)."""
    from fedad.config import read_toml
    from fedad.fl.flower.deploy.launch import CLIENTAPP_MODES

    if clientapp not in CLIENTAPP_MODES:
        raise FedadError(
            f"--clientapp '{clientapp}' is not one of {', '.join(CLIENTAPP_MODES)}",
            "per-node (the default) or per-message",
        )
    if not 0 <= partition_id < num_partitions:
        raise FedadError(
            f"--partition-id {partition_id} is not in 0..{num_partitions - 1}",
            "partition ids count from 0",
        )
    if config is None:
        return None
    read_toml(config)  # a missing file or bad TOML is a one-line error now
    return str(config.resolve())


def _auth_key(path: Path | None, insecure: bool) -> str | None:
    """``--auth-key``, checked: a readable private key Flower can use, and TLS."""
    if path is None:
        return None
    from fedad.fl.flower.deploy.auth import check_private_key

    if insecure:
        raise FedadError(
            "--auth-key needs TLS, and --insecure turns it off",
            "give --root-certificates (the CA certificate) instead of --insecure",
        )
    return str(check_private_key(path))


def check_models_dir(path: Path) -> Path:
    """``--models-dir`` as an absolute path, created, and checked to be a writable folder."""
    models = path.expanduser().resolve()
    try:
        models.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise FedadError(
            f"--models-dir '{path}' cannot be created: {err.strerror or err}",
            "give a writable folder",
        ) from None
    if not os.access(models, os.W_OK | os.X_OK):
        raise FedadError(f"--models-dir '{path}' is not writable", "give a writable folder")
    return models


@app.command("run")
def run_cmd(
    config: ConfigFile,
    superlink: Annotated[str, typer.Option(help="the SuperLink's HOST:PORT")],
    out: OutDir = None,
    set_: SetValues = None,
    root_certificates: RootCert = None,
    insecure: Insecure = False,
    quiet: Quiet = False,
    connect_timeout: ConnectTimeout = 30.0,
    force: ForceRun = False,
    resume: Resume = False,
) -> None:
    """Run an experiment on a running SuperLink and its SuperNodes (engine flower-deployment).

    The output directory follows `fedad run`'s rules (docs/runs.md): --force, --resume.
    """
    try:
        _require_flwr()
        from fedad.config import load_config
        from fedad.fl.flower.deploy.launch import parse_address, tls_args_client, wait_reachable
        from fedad.fl.flower.deploy.run import RemoteSuperLink, remote_superlink

        tls_args_client(str(root_certificates) if root_certificates else None, insecure)
        parse_address(superlink)
        cfg = load_config(config, [*(set_ or []), 'engine.name="flower-deployment"'])
        wait_reachable(superlink, "--superlink", connect_timeout)
        link = RemoteSuperLink(
            superlink, str(root_certificates) if root_certificates else None, insecure
        )
        out_dir = out or Path("runs") / config.stem
        with remote_superlink(link):
            run_with_progress(
                cfg, out_dir, cfg.engine.progress and not quiet, force=force, resume=resume
            )
    except FedadError as err:
        fail(err)
    except Interrupted as stop:
        interrupted(stop, config)


def _add_key_commands() -> None:
    """``keygen``, ``register``, ``unregister`` and ``nodes`` (:mod:`fedad.cli.flower_keys`)."""
    from fedad.cli.flower_keys import COMMANDS

    for name, command in COMMANDS.items():
        app.command(name)(command)


_add_key_commands()
