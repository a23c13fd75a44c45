"""How Flower's processes are launched: binaries, environment, ports and addresses, TLS
options, command lines, the app bundle and the connection to a remote SuperLink."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from fedad.core.errors import ConfigError, FedadError
from fedad.fl.flower.sim import QUIET_ENV
from fedad.fl.flower.spec import INSTALL_HINT, RunSpec

APP_NAME = "fedad-run"


CONNECTION = "fedad"


SUPEREXEC_POLL = 0.25
"""Seconds between a SuperExec's polls for new tasks (Flower's default: 1)."""


PORT_TRIES = 3
"""Ports tried for a local SuperLink or SuperNode whose port another process took first."""


CLIENTAPP_MODES = ("per-node", "per-message")
"""``engine.clientapp``: one long-running ClientApp process per SuperNode, or Flower's own
fresh ``flwr-clientapp`` process per message."""


PORT_BUSY = re.compile(r"address already in use|\[errno 98\]|eaddrinuse", re.IGNORECASE)
"""How a Flower process (uvicorn) says that its port is taken."""


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
        "--ssl-certfile",
        str(certfile),
        "--ssl-keyfile",
        str(keyfile),
        "--ssl-ca-certfile",
        str(ca_certfile),
    ]


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
    host: str = "127.0.0.1",
    port: int = 9093,
    tls: list[str] | None = None,
    supernode_auth: bool = False,
) -> list[str]:
    """``flower-superlink`` as fedad runs it: ServerApps run by an external SuperExec; with
    ``supernode_auth``, only SuperNodes whose key is registered may connect (Flower's
    ``--enable-supernode-auth``, which needs TLS)."""
    return [
        flower_bin("flower-superlink"),
        *(tls or ["--insecure"]),
        *(["--enable-supernode-auth"] if supernode_auth else []),
        "--isolation",
        "process",
        "--disable-runtime-dependency-installation",
        "--host",
        host,
        "--port",
        str(port),
    ]


def supernode_argv(
    superlink: str,
    partition_id: int,
    num_partitions: int,
    port: int,
    tls: list[str] | None = None,
    data_config: str | None = None,
    models_dir: str | None = None,
    clientapp: str = "per-node",
    auth_key: str | None = None,
) -> list[str]:
    """``flower-supernode`` holding client ``partition_id`` of ``num_partitions``; it keeps
    personalised detectors in ``models_dir`` (node config ``fedad-models-dir``) and, with
    ``auth_key``, signs its requests with that private key (Flower's
    ``--auth-supernode-private-key``).

    ``clientapp = "per-node"``: ``--isolation process``, the node's ClientApp tasks are left
    to one long-running :mod:`fedad.fl.flower.worker` (:func:`worker_argv`) on its Runtime
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
        *(["--auth-supernode-private-key", auth_key] if auth_key else []),
        "--superlink",
        superlink,
        "--node-config",
        node_config,
        *isolation,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]


def worker_argv(port: int, host: str = "127.0.0.1") -> list[str]:
    """The long-running ClientApp process (:mod:`fedad.fl.flower.worker`) of the SuperNode
    whose Runtime API listens on ``host:port`` (loopback, no TLS, as the SuperNode's own
    SuperExec reaches it)."""
    return [
        sys.executable,
        "-m",
        "fedad.fl.flower.worker",
        "--runtime-api-address",
        f"{host}:{port}",
        "--insecure",
    ]


def superexec_argv(superlink: str, tls: list[str] | None = None) -> list[str]:
    """``flower-superexec`` that runs ServerApps of ``superlink`` here (dies with us)."""
    return [
        flower_bin("flower-superexec"),
        *(tls or ["--insecure"]),
        "--runtime-api-address",
        superlink,
        "--parent-pid",
        str(os.getpid()),
    ]


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
                        "serverapp": "fedad.fl.flower.app:server_app",
                        "clientapp": "fedad.fl.flower.app:client_app",
                    },
                    "config": spec.to_run_config(),
                }
            }
        },
    }
    (app_dir / "pyproject.toml").write_text(tomli_w.dumps(doc))
    return app_dir
