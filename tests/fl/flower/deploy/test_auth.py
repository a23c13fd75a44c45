"""SuperNode authentication, fast (:mod:`fedad.fl.flower.deploy.auth`): the key pair
``fedad flower keygen`` makes is what Flower's own loaders accept; key files of the wrong kind
are one line before a Flower process sees them; a SuperNode's refusal by the SuperLink is one
line. (The real SuperLink and SuperNodes: tests/fl/flower/test_auth_runs.py.)"""

from __future__ import annotations

import argparse
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from fedad.core.errors import FedadError
from fedad.fl.flower.deploy.auth import (
    check_private_key,
    check_public_key,
    generate_key_pair,
    refusal,
)

flwr = pytest.importorskip("flwr", reason="flwr (the flower extra) is not installed")


def test_keygen_makes_a_pair_flower_accepts(tmp_path: Path) -> None:
    from flwr.cli.supernode.register import try_load_public_key
    from flwr.supercore.primitives.asymmetric import public_key_to_bytes
    from flwr.supernode.cli.flower_supernode import _try_setup_client_authentication

    private, public = generate_key_pair(tmp_path / "keys" / "site-a")
    assert public == tmp_path / "keys" / "site-a.pub"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600  # the secret half: owner only
    args = argparse.Namespace(
        auth_supernode_private_key=str(private), auth_supernode_public_key=None
    )
    pair = _try_setup_client_authentication(args)  # what flower-supernode does with the flag
    assert pair is not None
    assert try_load_public_key(public) == public_key_to_bytes(pair[1])  # the same key
    assert check_private_key(private) == private.resolve()
    assert check_public_key(public) == public.resolve()


def test_keygen_keeps_an_existing_key_unless_forced(tmp_path: Path) -> None:
    private, public = generate_key_pair(tmp_path / "k")
    before = private.read_bytes()
    with pytest.raises(FedadError, match=r"'.*k' exists already .*--force"):
        generate_key_pair(tmp_path / "k")
    assert private.read_bytes() == before
    generate_key_pair(tmp_path / "k", force=True)
    assert private.read_bytes() != before and public.is_file()


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _other_keys(tmp_path: Path) -> dict[str, Path]:
    from cryptography.hazmat.primitives import serialization as ser
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    ec_key = ec.generate_private_key(ec.SECP384R1())
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    openssh, pem = ser.PrivateFormat.OpenSSH, ser.PrivateFormat.PKCS8
    return {
        "pem": _write(
            tmp_path / "pem", ec_key.private_bytes(ser.Encoding.PEM, pem, ser.NoEncryption())
        ),
        "rsa": _write(
            tmp_path / "rsa",
            rsa_key.private_bytes(ser.Encoding.PEM, openssh, ser.NoEncryption()),
        ),
        "rsa.pub": _write(
            tmp_path / "rsa.pub",
            rsa_key.public_key().public_bytes(ser.Encoding.OpenSSH, ser.PublicFormat.OpenSSH),
        ),
    }


def test_private_key_mistakes_are_one_line(tmp_path: Path) -> None:
    keys = _other_keys(tmp_path)
    _, public = generate_key_pair(tmp_path / "site")
    cases = {
        tmp_path / "missing": "does not exist",
        tmp_path: "is a folder",
        public: "is a public key",
        keys["pem"]: "is not a private key in OpenSSH format",
        keys["rsa"]: "is not an elliptic-curve key on a NIST curve",
        _write(tmp_path / "junk", b"\x00\xffjunk"): "is not a private key in OpenSSH format",
    }
    for path, what in cases.items():
        with pytest.raises(FedadError) as err:
            check_private_key(path)
        assert f"--auth-key '{path}' {what}" in str(err.value)
        assert "\n" not in str(err.value)


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen")
def test_a_key_with_a_passphrase_is_one_line(tmp_path: Path) -> None:
    key = tmp_path / "locked"
    argv = ["ssh-keygen", "-q", "-t", "ecdsa", "-b", "384", "-N", "secret", "-f", str(key)]
    subprocess.run(argv, check=True, capture_output=True)
    with pytest.raises(FedadError, match=r"is protected by a passphrase, which Flower cannot"):
        check_private_key(key)
    assert check_public_key(key.with_name("locked.pub"))  # its public half is fine


def test_public_key_mistakes_are_one_line(tmp_path: Path) -> None:
    keys = _other_keys(tmp_path)
    private, _ = generate_key_pair(tmp_path / "site")
    cases = {
        tmp_path / "missing.pub": "does not exist",
        private: "is a private key",
        keys["rsa.pub"]: "is not an elliptic-curve key on a NIST curve",
        _write(tmp_path / "junk.pub", b"hello"): "is not a public key in OpenSSH format",
    }
    for path, what in cases.items():
        with pytest.raises(FedadError, match=f"public key '{path}' {what}"):
            check_public_key(path)


def test_refusals_by_the_superlink_are_named() -> None:
    """Flower 1.41's SuperNode output when the SuperLink refuses it (copied from a run)."""
    no_key = (
        "ERROR :     Exit Code: 305\nFailed to initialize the connection to the SuperLink.\n"
        "[code: 2001] SuperNode authentication is enabled. All SuperNodes must be registered "
        "via the CLI.\n"
    )
    unknown = (
        "ERROR :     Exit Code: 305\nFailed to initialize the connection to the SuperLink.\n"
        "[code: 2004] Failed to activate SuperNode.\n"
    )
    err = refusal(no_key, "10.0.0.5:9093", None)
    assert err is not None and "accepts only registered SuperNodes" in str(err)
    assert "--auth-key" in str(err)
    err = refusal(unknown, "10.0.0.5:9093", "/keys/site-c")
    assert err is not None
    assert "refused this SuperNode: its key '/keys/site-c' is not registered" in str(err)
    assert "fedad flower register /keys/site-c.pub" in str(err)
    assert refusal("RuntimeError: something else", "h:1", None) is None


def test_a_failing_flwr_call_is_one_line(tmp_path: Path) -> None:
    """``flwr supernode register`` that cannot reach a SuperLink: Flower's reason, one line."""
    from fedad.fl.flower.deploy.auth import register
    from fedad.fl.flower.deploy.launch import free_port

    _, public = generate_key_pair(tmp_path / "site")
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(FedadError) as err:
        register(public, address, None)
    text = str(err.value)
    assert text.startswith(f"'flwr supernode register' failed at the SuperLink {address}: ")
    assert "\n" not in text and "Traceback" not in text
