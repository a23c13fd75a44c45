"""SuperNode authentication, Flower's own (flwr 1.41): key pairs, the SuperLink's register of
SuperNode keys, and what a SuperNode that the SuperLink refuses is told.

Flower's mechanism, nothing of fedad's in between: a SuperLink started with
``--enable-supernode-auth`` (TLS required) accepts only SuperNodes whose public key was
registered with it beforehand (``flwr supernode register``, over the SuperLink's Control
API, which answers on the same port); a SuperNode started with
``--auth-supernode-private-key`` signs a timestamp with its key in every request, and the
SuperLink checks the signature against the registered key. Flower gives the node its id at
registration, so a registered key is one fixed node id; an unregistered key (or none) is
refused when the node starts (``Failed to activate SuperNode``), and a node whose key is
unregistered while it runs is refused at its next request and stops.

This module makes the key pair (EC P-384, OpenSSH format: what Flower reads), checks key
files before a Flower process sees them (a missing, unreadable or wrong file is one line),
and runs ``flwr supernode register | unregister | list`` with a Flower configuration of one
connection (:func:`~fedad.fl.flower.deploy.run.write_connection`) in a temporary
``FLWR_HOME``, so that no Flower project or configuration file is needed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from fedad.core.errors import FedadError

NIST_CURVES = ("secp256r1", "secp384r1", "secp521r1")
"""The curves Flower 1.41 accepts for SuperNode keys."""

KEYGEN_HINT = "make a key pair with 'fedad flower keygen SITE' (or ssh-keygen -t ecdsa -b 384)"

FLWR_TIMEOUT = 60.0
"""Seconds a ``flwr supernode ...`` call may take."""


def generate_key_pair(out: Path, force: bool = False) -> tuple[Path, Path]:
    """Write a new SuperNode key pair: the private key to ``out`` (OpenSSH format, no
    passphrase, mode 0600) and the public key to ``out.pub`` (one OpenSSH line).

    Existing files are not overwritten unless ``force``: a site's key is its identity at the
    SuperLink, and replacing it means registering the new one.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    out = out.expanduser()
    pub = out.with_name(out.name + ".pub")
    if not force:
        for p in (out, pub):
            if p.exists() or p.is_symlink():
                raise FedadError(
                    f"'{p}' exists already",
                    "choose another name, or --force to replace the key pair; then register "
                    "the new public key and unregister the old node",
                )
    key = ec.generate_private_key(ec.SECP384R1())
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        for p in (out, pub):
            if force and (p.exists() or p.is_symlink()):
                p.unlink()
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(private)
        fd = os.open(pub, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(public + f" fedad-{out.name}\n".encode())
    except OSError as err:
        raise FedadError(
            f"cannot write the key pair '{out}': {err.strerror or err}", "give a writable path"
        ) from None
    return out, pub


def _read(path: Path, option: str) -> bytes:
    try:
        return path.expanduser().read_bytes()
    except FileNotFoundError:
        raise FedadError(f"{option} '{path}' does not exist", KEYGEN_HINT) from None
    except IsADirectoryError:
        raise FedadError(f"{option} '{path}' is a folder, not a key file", KEYGEN_HINT) from None
    except OSError as err:
        raise FedadError(
            f"{option} '{path}' cannot be read: {err.strerror or err}",
            "check the file and its permissions",
        ) from None


def check_private_key(path: Path, option: str = "--auth-key") -> Path:
    """``path`` resolved, once it holds an EC private key on a NIST curve in OpenSSH
    format without a passphrase (what ``flower-supernode`` reads); a one-line error
    otherwise."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import load_ssh_private_key

    data = _read(path, option)
    if data.lstrip().startswith((b"ecdsa-", b"ssh-")):
        raise FedadError(
            f"{option} '{path}' is a public key",
            "give the private key (the file without .pub); it stays on this machine",
        )
    try:
        key = load_ssh_private_key(data, None)
    except TypeError:
        raise FedadError(
            f"{option} '{path}' is protected by a passphrase, which Flower cannot ask for",
            KEYGEN_HINT,
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise FedadError(
            f"{option} '{path}' is not a private key in OpenSSH format", KEYGEN_HINT
        ) from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name not in NIST_CURVES:
        raise FedadError(
            f"{option} '{path}' is not an elliptic-curve key on a NIST curve (P-256, P-384 "
            "or P-521), the only kind Flower accepts",
            KEYGEN_HINT,
        )
    return path.expanduser().resolve()


def check_public_key(path: Path, option: str = "public key") -> Path:
    """``path`` resolved, once it holds an EC public key on a NIST curve in OpenSSH format
    (what ``flwr supernode register`` reads); a one-line error otherwise (a private key
    given by mistake included)."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import load_ssh_public_key

    data = _read(path, option)
    if b"PRIVATE KEY" in data:
        raise FedadError(
            f"{option} '{path}' is a private key",
            "register the public key (the .pub file); the private key never leaves its site",
        )
    try:
        key = load_ssh_public_key(data.strip())
    except (ValueError, UnsupportedAlgorithm):
        raise FedadError(
            f"{option} '{path}' is not a public key in OpenSSH format", KEYGEN_HINT
        ) from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name not in NIST_CURVES:
        raise FedadError(
            f"{option} '{path}' is not an elliptic-curve key on a NIST curve (P-256, P-384 "
            "or P-521), the only kind Flower accepts",
            KEYGEN_HINT,
        )
    return path.expanduser().resolve()


def flwr_supernode(args: list[str], address: str, root_certificates: str | None) -> Any:
    """Run ``flwr supernode ARGS fedad --format json`` against the SuperLink at ``address``
    and return its JSON answer; Flower's refusal is a one-line error."""
    from fedad.fl.flower.deploy.launch import CONNECTION, flower_bin, flower_env
    from fedad.fl.flower.deploy.processes import failure_line
    from fedad.fl.flower.deploy.run import RemoteSuperLink, write_connection

    link = RemoteSuperLink(address, root_certificates, insecure=root_certificates is None)
    with tempfile.TemporaryDirectory(prefix="fedad-flwr-") as home:
        write_connection(Path(home), link)
        argv = [flower_bin("flwr"), "supernode", *args, CONNECTION, "--format", "json"]
        try:
            p = subprocess.run(
                argv,
                env=flower_env(Path(home)),
                capture_output=True,
                text=True,
                timeout=FLWR_TIMEOUT,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise FedadError(
                f"the SuperLink at {address} did not answer 'flwr supernode {args[0]}' within "
                f"{FLWR_TIMEOUT:g} s",
                "check that it runs and that this machine reaches it",
            ) from None
    try:
        doc = json.loads(p.stdout[p.stdout.index("{") :])
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or not doc.get("success"):
        why = doc.get("error-message") if isinstance(doc, dict) else None
        why = str(why) if why else failure_line(p.stdout + "\n" + p.stderr)
        why = re.sub(r"^Using SuperLink: .*?\)\s*", "", why.strip()).replace("\n", " ")
        hint = (
            "it is registered already: 'fedad flower nodes' lists the registered nodes"
            if "already in use" in why
            else "check --superlink and --root-certificates (the same as the SuperNodes use)"
        )
        raise FedadError(
            f"'flwr supernode {args[0]}' failed at the SuperLink {address}: {why}", hint
        )
    return doc


def register(public_key: Path, address: str, root_certificates: str | None) -> int:
    """Register a site's public key with the SuperLink; return the Flower node id it gets."""
    pub = check_public_key(public_key)
    doc = flwr_supernode(["register", str(pub)], address, root_certificates)
    return int(doc["node-id"])


def unregister(node_id: int, address: str, root_certificates: str | None) -> None:
    """Remove a registered SuperNode: its key no longer connects (a running node stops)."""
    flwr_supernode(["unregister", str(node_id)], address, root_certificates)


def list_nodes(address: str, root_certificates: str | None) -> list[dict[str, Any]]:
    """The SuperLink's registered SuperNodes (Flower's fields: ``node-id``, ``status``,
    ``created-at``, ``online-at`` ...)."""
    nodes = flwr_supernode(["list"], address, root_certificates).get("nodes", [])
    return [n for n in nodes if isinstance(n, dict)]


_CODE = re.compile(r"\[code: (\d+)\]\s*(.*)")


def refusal(text: str, superlink: str, key: str | None) -> FedadError | None:
    """The one-line error for a SuperNode whose output ``text`` says that the SuperLink at
    ``superlink`` refused it (started with the private key ``key``, or none); ``None`` when
    it says something else."""
    m = _CODE.search(text)
    code = int(m.group(1)) if m else None
    if code == 2001 or "All SuperNodes must be registered" in text:
        return FedadError(
            f"the SuperLink at {superlink} accepts only registered SuperNodes, and this one "
            "was started without a key",
            "make a key pair (fedad flower keygen SITE), have the SuperLink's operator "
            "register SITE.pub (fedad flower register), and start the node with --auth-key "
            "SITE",
        )
    if code == 2004 or "Failed to activate SuperNode" in text:
        return FedadError(
            f"the SuperLink at {superlink} refused this SuperNode: its key '{key}' is not "
            "registered there",
            f"have the SuperLink's operator run 'fedad flower register {key}.pub "
            "--superlink ...' and start the node again",
        )
    return None
