"""``fedad flower ...``: a Flower federation over several machines (see docs/deployment.md).

* ``fedad flower superlink`` — the SuperLink (``flower-superlink --isolation process``).
* ``fedad flower supernode --superlink HOST:PORT --partition-id I --num-partitions N`` —
  one client: it builds its data from the run's config and holds partition ``I``.
* ``fedad flower run CONFIG --superlink HOST:PORT`` — runs an experiment on that
  federation and writes the usual run directory; the ServerApp runs on this machine.

TLS: the SuperLink takes ``--certfile``/``--keyfile``/``--ca-certfile``, the others
``--root-certificates`` (all passed through to Flower's own flags); ``--insecure`` runs
without TLS. Nothing here imports ``flwr`` until a command runs.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from fedad.errors import FedadError

app = typer.Typer(
    no_args_is_help=True,
    help="Flower federation over several machines: superlink, supernode, run.",
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


def _fail(err: Exception) -> None:
    from fedad.cli import _fail as fail

    fail(err)


def _require_flwr() -> None:
    from fedad.fl.flower import require_flwr

    require_flwr("flower-deployment")


def run_foreground(argv: list[str], env: dict[str, str]) -> int:
    """Run a Flower process in the foreground; Ctrl-C or SIGTERM stops it and its children."""
    from fedad.fl.flower_deploy import Supervisor, die_with_parent, sigterm_as_interrupt

    sup = Supervisor(Path(os.devnull))  # only for stop_all(); it writes no logs here
    try:
        with sigterm_as_interrupt():
            proc = subprocess.Popen(argv, env=env, preexec_fn=die_with_parent)
            sup.procs["main"] = proc
            return proc.wait()
    except KeyboardInterrupt:
        return 130
    finally:
        sup.stop_all()


def _env(home: Path | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    from fedad.fl.flower_deploy import flower_env

    base = home or Path(os.environ.get("FLWR_HOME", Path.home() / ".flwr"))
    return flower_env(base.expanduser().resolve(), extra)


@app.command()
def superlink(
    host: Annotated[str, typer.Option(help="address to listen on (0.0.0.0: all)")] = "0.0.0.0",
    port: Annotated[int, typer.Option(help="port of Flower's HTTP API (fleet, control)")] = 9093,
    certfile: Annotated[Path | None, typer.Option(help="server certificate (PEM)")] = None,
    keyfile: Annotated[Path | None, typer.Option(help="server private key (PEM)")] = None,
    ca_certfile: Annotated[Path | None, typer.Option(help="CA certificate (PEM)")] = None,
    insecure: Insecure = False,
    home: Home = None,
) -> None:
    """Start a SuperLink; ServerApps run where `fedad flower run` is called."""
    try:
        _require_flwr()
        from fedad.fl.flower_deploy import superlink_argv, tls_args_superlink

        tls = tls_args_superlink(
            str(certfile) if certfile else None,
            str(keyfile) if keyfile else None,
            str(ca_certfile) if ca_certfile else None,
            insecure,
        )
        code = run_foreground(superlink_argv(host, port, tls), _env(home))
    except FedadError as err:
        _fail(err)
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
    root_certificates: RootCert = None,
    insecure: Insecure = False,
    home: Home = None,
) -> None:
    """Start a SuperNode holding client PARTITION_ID of NUM_PARTITIONS."""
    try:
        _require_flwr()
        from fedad.config import read_toml
        from fedad.fl.flower_deploy import supernode_argv, tls_args_client

        if not 0 <= partition_id < num_partitions:
            raise FedadError(
                f"--partition-id {partition_id} is not in 0..{num_partitions - 1}",
                "partition ids count from 0",
            )
        data_config = None
        if config is not None:
            read_toml(config)  # a missing file or bad TOML is a one-line error now
            data_config = str(config.resolve())
        tls = tls_args_client(str(root_certificates) if root_certificates else None, insecure)
        argv = supernode_argv(superlink, partition_id, num_partitions, port, tls, data_config)
        with contextlib.ExitStack() as stack:
            cache = cache_dir
            if cache is None:
                cache = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fedad-")))
            env = _env(home, {"FEDAD_FLOWER_CACHE": str(Path(cache).resolve())})
            code = run_foreground(argv, env)
    except FedadError as err:
        _fail(err)
    raise typer.Exit(code)


@app.command("run")
def run_cmd(
    config: Annotated[Path, typer.Argument(help="experiment TOML file")],
    superlink: Annotated[str, typer.Option(help="the SuperLink's HOST:PORT")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="output directory")] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="override a config value: key=value (dotted keys)"),
    ] = None,
    root_certificates: RootCert = None,
    insecure: Insecure = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar")] = False,
) -> None:
    """Run an experiment on a running SuperLink and its SuperNodes (engine flower-deployment)."""
    from fedad.cli import _run

    try:
        _require_flwr()
        from fedad.config import load_config
        from fedad.fl.flower_deploy import RemoteSuperLink, remote_superlink, tls_args_client

        tls_args_client(str(root_certificates) if root_certificates else None, insecure)
        cfg = load_config(config, [*(set_ or []), 'engine.name="flower-deployment"'])
        link = RemoteSuperLink(
            superlink, str(root_certificates) if root_certificates else None, insecure
        )
        out_dir = out or Path("runs") / config.stem
        with remote_superlink(link):
            _run(cfg, out_dir, progress=cfg.engine.progress and not quiet)
    except FedadError as err:
        _fail(err)
