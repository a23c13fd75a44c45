"""``fedad flower keygen | register | unregister | nodes``: which sites may join a SuperLink.

Flower's SuperNode authentication (:mod:`fedad.fl.flower.deploy.auth`): a site makes a key
pair (``keygen``) and hands its public key to whoever runs the SuperLink, who registers it
(``register``, Flower's ``flwr supernode register``) with a SuperLink started with
``fedad flower superlink --enable-supernode-auth``; the site then starts its SuperNode with
``--auth-key``. ``unregister`` removes a node (a site that lost its key, or left), ``nodes``
lists what is registered. The commands are added to ``fedad flower`` by
:mod:`fedad.cli.flower` (:data:`COMMANDS`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from fedad.cli.options import fail
from fedad.core.errors import FedadError

SuperLink = Annotated[str, typer.Option(help="the SuperLink's HOST:PORT")]
RootCert = Annotated[
    Path | None,
    typer.Option("--root-certificates", help="CA certificate (PEM) that signed the SuperLink's"),
]
Insecure = Annotated[bool, typer.Option("--insecure", help="no TLS (trusted networks only)")]
ConnectTimeout = Annotated[
    float,
    typer.Option(
        "--connect-timeout", help="seconds to wait for the SuperLink to accept connections"
    ),
]


def _link(
    superlink: str, root_certificates: Path | None, insecure: bool, timeout: float
) -> str | None:
    """Check the SuperLink options and wait until it answers; return the CA path (or
    ``None`` with ``--insecure``)."""
    from fedad.fl.flower.deploy.launch import tls_args_client, wait_reachable
    from fedad.fl.flower.spec import require_flwr

    require_flwr("flower-deployment")
    ca = str(root_certificates.expanduser().resolve()) if root_certificates else None
    tls_args_client(ca, insecure)
    wait_reachable(superlink, "--superlink", timeout)
    return None if insecure else ca


def keygen(
    out: Annotated[Path, typer.Argument(help="the private key's file; the public key: OUT.pub")],
    force: Annotated[bool, typer.Option("--force", help="replace an existing key pair")] = False,
) -> None:
    """Make a site's key pair for SuperNode authentication (EC P-384, OpenSSH format)."""
    try:
        from fedad.fl.flower.deploy.auth import generate_key_pair

        private, public = generate_key_pair(out, force)
    except FedadError as err:
        fail(err)
    typer.echo(f"private key: {private}  (keep it on this site; --auth-key of its SuperNode)")
    typer.echo(f"public key:  {public}  (give it to the SuperLink's operator to register)")


def register(
    public_key: Annotated[Path, typer.Argument(help="the site's public key (KEY.pub)")],
    superlink: SuperLink,
    root_certificates: RootCert = None,
    insecure: Insecure = False,
    connect_timeout: ConnectTimeout = 30.0,
) -> None:
    """Register a site's public key: a SuperNode with that key may then join."""
    try:
        from fedad.fl.flower.deploy.auth import check_public_key
        from fedad.fl.flower.deploy.auth import register as do_register

        check_public_key(public_key)
        ca = _link(superlink, root_certificates, insecure, connect_timeout)
        node_id = do_register(public_key, superlink, ca)
    except FedadError as err:
        fail(err)
    typer.echo(
        f"registered {public_key} as Flower node {node_id} (keep this id; "
        f"'fedad flower unregister {node_id}' removes it)"
    )


def unregister(
    node_id: Annotated[int, typer.Argument(help="the Flower node id that register printed")],
    superlink: SuperLink,
    root_certificates: RootCert = None,
    insecure: Insecure = False,
    connect_timeout: ConnectTimeout = 30.0,
) -> None:
    """Remove a registered SuperNode: its key no longer joins; a running node is stopped."""
    try:
        from fedad.fl.flower.deploy.auth import unregister as do_unregister

        ca = _link(superlink, root_certificates, insecure, connect_timeout)
        do_unregister(node_id, superlink, ca)
    except FedadError as err:
        fail(err)
    typer.echo(f"unregistered Flower node {node_id}")


def nodes(
    superlink: SuperLink,
    root_certificates: RootCert = None,
    insecure: Insecure = False,
    connect_timeout: ConnectTimeout = 30.0,
) -> None:
    """List the SuperNodes the SuperLink knows: node id, status, since when."""
    try:
        from fedad.fl.flower.deploy.auth import list_nodes

        ca = _link(superlink, root_certificates, insecure, connect_timeout)
        found = list_nodes(superlink, ca)
    except FedadError as err:
        fail(err)
    typer.echo(f"{'node id':>20}  {'status':<12}  registered            online since")
    for n in found:
        typer.echo(
            f"{n.get('node-id', '?')!s:>20}  {n.get('status', '?')!s:<12}  "
            f"{n.get('created-at', '?')!s:<20}  {n.get('online-at', '?')}"
        )


COMMANDS: dict[str, Callable[..., Any]] = {
    "keygen": keygen,
    "register": register,
    "unregister": unregister,
    "nodes": nodes,
}
"""The commands :mod:`fedad.cli.flower` adds to ``fedad flower``."""
