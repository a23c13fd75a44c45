"""``fedad flower ...`` (:mod:`fedad.cli.flower`): a busy port or a bad ``--superlink`` is
one line in bounded time, before any Flower log; a Flower process that stops while starting
is summed up in one line; a SuperNode's ClientApp process is kept running beside it. Small
Python processes stand in for Flower's (the deployments themselves: tests/fl/flower/)."""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedad.core.errors import FedadError
from fedad.fl.flower.deploy.launch import free_port
from fedad.fl.flower.deploy.local import WORKER_RESTARTS

HAS_FLWR = __import__("importlib").util.find_spec("flwr") is not None
needs_flwr = pytest.mark.skipif(not HAS_FLWR, reason="flwr (the flower extra) is not installed")
DIE = [sys.executable, "-c", "raise SystemExit(3)"]

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


def one_line(text: str) -> str:
    lines = [x for x in text.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


@needs_flwr
@pytest.mark.parametrize("command", ["superlink", "supernode"])
def test_cli_busy_port_is_one_line(command: str, taken_port: int, tmp_path: Path) -> None:
    from fedad.cli.app import app

    args = ["flower", command, "--insecure", "--port", str(taken_port), "--home", str(tmp_path)]
    if command == "superlink":
        args += ["--host", "127.0.0.1"]
    else:  # checked before the SuperLink's address
        args += ["--superlink", f"127.0.0.1:{free_port()}", "--connect-timeout", "30"]
        args += ["--partition-id", "0", "--num-partitions", "2"]
    t0 = time.monotonic()
    res = CliRunner().invoke(app, args)
    assert time.monotonic() - t0 < 10
    assert res.exit_code == 2
    line = one_line(res.output)
    assert f"port {taken_port} on 127.0.0.1 is already in use" in line and "--port" in line
    assert not list(tmp_path.iterdir())  # no Flower process ever started


@needs_flwr
@pytest.mark.parametrize("command", ["supernode", "run"])
@pytest.mark.parametrize("address", ["nonsense", "http://127.0.0.1:9093", "nothing-listening"])
def test_cli_bad_superlink_is_one_line(command: str, address: str, tmp_path: Path) -> None:
    from fedad.cli.app import app

    if address == "nothing-listening":
        address = f"127.0.0.1:{free_port()}"
    if command == "run":
        cfg = tmp_path / "c.toml"
        cfg.write_text(CONFIG)
        args = ["flower", "run", str(cfg), "--out", str(tmp_path / "out")]
    else:
        args = ["flower", "supernode", "--partition-id", "0", "--num-partitions", "2"]
        args += ["--port", str(free_port()), "--home", str(tmp_path / "home")]
    args += ["--superlink", address, "--insecure", "--connect-timeout", "1"]
    t0 = time.monotonic()
    res = CliRunner().invoke(app, args)
    assert time.monotonic() - t0 < 10
    assert res.exit_code == 2
    line = one_line(res.output)
    if address.startswith("127.0.0.1:"):
        assert f"nothing accepts connections at {address} (--superlink) after 1 s" in line
    else:
        assert f"--superlink '{address}' is not an address of the form HOST:PORT" in line
    assert not (tmp_path / "out").exists()


def test_foreground_start_failure_is_one_line(capfd: pytest.CaptureFixture[str]) -> None:
    """A Flower process that stops while starting: one line; its output is not printed."""
    from fedad.cli.flower import run_foreground

    def fake(output: str, code: int) -> list[str]:
        return [sys.executable, "-c", f"print({output!r}); print('noise ' * 5); exit({code})"]

    busy = "ERROR [uvicorn.error] [Errno 98] error while attempting to bind: address already in use"
    with pytest.raises(FedadError, match=r"port 4711 on 127.0.0.1 is already in use.*--port"):
        run_foreground(fake(busy, 1), dict(os.environ), "the SuperLink", port=4711)
    crash = "Traceback (most recent call last):\nRuntimeError: SuperNode API failed to start."
    with pytest.raises(FedadError) as info:
        run_foreground(fake(crash, 3), dict(os.environ), "the SuperNode", port=4711)
    assert "the SuperNode stopped while starting (exit status 3): RuntimeError: SuperNode" in str(
        info.value
    )
    out = capfd.readouterr().out
    assert "noise" not in out and "Traceback" not in out
    # a process that starts fine has its output passed through, and its exit status returned
    ok = [sys.executable, "-c", "print('Uvicorn running on x'); print('later'); exit(5)"]
    assert run_foreground(ok, dict(os.environ), "it", port=4711) == 5
    assert "later" in capfd.readouterr().out


def test_supernode_command_keeps_its_clientapp_process(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """``run_foreground`` with a companion: started once the main process listens, started
    again when it dies (a line each time), and stopped with the main process."""
    from fedad.cli.flower import run_foreground

    port = free_port()
    main = [
        sys.executable,
        "-c",
        "import socket, time\n"
        f"s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen()\n"
        "print('Uvicorn running on', flush=True)\ntime.sleep(3)\n",
    ]
    t0 = time.monotonic()
    code = run_foreground(main, dict(os.environ), "main", port=port, companion=DIE)
    assert code == 0 and time.monotonic() - t0 < 30
    err = capfd.readouterr().err
    assert err.count("ClientApp process stopped (exit status 3)") == WORKER_RESTARTS
    assert "will not answer" in err


def test_supernode_command_rejects_an_unknown_mode(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from fedad.cli.flower import app

    res = CliRunner().invoke(
        app,
        ["supernode", "--superlink", "127.0.0.1:1", "--partition-id", "0",
         "--num-partitions", "2", "--insecure", "--clientapp", "per-run"],
    )  # fmt: skip
    assert res.exit_code == 2
    assert "--clientapp 'per-run' is not one of per-node, per-message" in res.output


@needs_flwr
def test_authentication_mistakes_are_one_line_before_flower_starts(tmp_path: Path) -> None:
    """A key file that is missing or not a private key, a key or --enable-supernode-auth
    without TLS: one line, exit status 2, before anything is started or waited for."""
    from fedad.cli.flower import app
    from fedad.fl.flower.deploy.auth import generate_key_pair

    _, public = generate_key_pair(tmp_path / "site")
    ca = tmp_path / "ca.pem"
    ca.write_text("not checked before the key\n")
    node = ["supernode", "--superlink", "127.0.0.1:1", "--partition-id", "0",
            "--num-partitions", "2", "--connect-timeout", "60"]  # fmt: skip
    cases = [
        ([*node, "--root-certificates", str(ca), "--auth-key", str(tmp_path / "nope")],
         f"--auth-key '{tmp_path / 'nope'}' does not exist"),
        ([*node, "--root-certificates", str(ca), "--auth-key", str(public)],
         f"--auth-key '{public}' is a public key"),
        ([*node, "--insecure", "--auth-key", str(tmp_path / "site")],
         "--auth-key needs TLS, and --insecure turns it off"),
        (["superlink", "--insecure", "--enable-supernode-auth", "--port", "1"],
         "--enable-supernode-auth needs TLS, and --insecure turns it off"),
    ]  # fmt: skip
    for args, what in cases:
        t0 = time.monotonic()
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2, res.output
        assert what in one_line(res.output)
        assert time.monotonic() - t0 < 10  # nothing waited for the SuperLink


def test_a_refused_supernode_is_one_line(capfd: pytest.CaptureFixture[str]) -> None:
    """A SuperNode's local API listens before the SuperLink has taken it: with ``ready``,
    its output is held until that line, and a refusal is ``explain``'s one line."""
    from fedad.cli.flower import run_foreground

    port = free_port()
    refused = [
        sys.executable,
        "-c",
        "import socket, time\n"
        f"s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen()\n"
        "print('Uvicorn running on x', flush=True); time.sleep(1.5)\n"
        "print('[code: 2004] Failed to activate SuperNode.'); raise SystemExit(1)\n",
    ]

    def explain(text: str) -> FedadError | None:
        return FedadError("refused: not registered") if "[code: 2004]" in text else None

    with pytest.raises(FedadError, match="refused: not registered"):
        run_foreground(refused, dict(os.environ), "the SuperNode", port=port,
                       ready="SuperNode ID:", explain=explain)  # fmt: skip
    assert "Uvicorn" not in capfd.readouterr().out  # Flower's output was held back


def test_flowers_exit_message_is_kept_whole() -> None:
    """Flower's exit message (``Exit Code: N`` and the lines that say why, up to its link)
    becomes the one line: with a wrong CA certificate, the TLS reason is in it."""
    from fedad.fl.flower.deploy.processes import failure_line

    esc = "\x1b"
    text = (
        f"{esc}[92mINFO {esc}[0m:      Starting Flower SuperNode\n"
        f"{esc}[91mERROR {esc}[0m:     Exit Code: 305\n"
        "Failed to initialize the connection to the SuperLink.\n"
        "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed (_ssl.c:1006)\n\n"
        "For more information, visit: <https://flower.ai/docs/...>\n"
        "INFO:     Shutting down\n"
    )
    assert failure_line(text) == (
        "Failed to initialize the connection to the SuperLink. "
        "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed (_ssl.c:1006)"
    )
