"""The command line's own robustness: standard output closed or full, and Ctrl-C at any
moment, each one line and a sensible exit status."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import fedad.cli.app as cli_app
from fedad.cli import options
from fedad.config import dump_toml
from tests.hostile.conftest import SMALL_RUN


def _default_sigint() -> None:
    """In the child before exec: SIGINT back to its default disposition (a shell's
    background job hands it down ignored, and fedad rightly keeps an ignored one)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _fedad(
    args: list[str], stdout: Any = subprocess.PIPE, preexec_fn: Callable[[], object] | None = None
) -> subprocess.Popen[str]:
    """``fedad ARGS`` as the console script runs it (``python -m fedad.cli`` would differ
    after a Ctrl-C inside some imports: Python's ``-m`` then exits by the signal, whatever
    the program did; users run the script)."""
    script = "import sys; from fedad.cli.app import main; sys.argv[0] = 'fedad'; main()"
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=preexec_fn,
    )


def _close_stdout() -> None:
    os.close(1)


@pytest.mark.parametrize("how", ["closed", "full"])
def test_stdout_that_cannot_be_written_is_named(how: str) -> None:
    if how == "full" and not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    if how == "closed":
        proc = _fedad(["list", "partitions"], stdout=None, preexec_fn=_close_stdout)
    else:
        with open("/dev/full", "w") as full:
            proc = _fedad(["list", "partitions"], stdout=full)
    _, stderr = proc.communicate(timeout=120)
    why = "it is closed" if how == "closed" else "No space left on device"
    assert proc.returncode == 2, stderr
    assert stderr.strip() == f"error: cannot write to standard output: {why}", stderr


def _stderr_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def _config(tmp_path: Path, raw: dict[str, Any]) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(dump_toml(raw))
    return path


def test_an_early_ctrl_c_says_so(tmp_path: Path) -> None:
    """Ctrl-C while fedad starts or prepares the run (imports, config, data): was silent."""
    cfg = _config(tmp_path, SMALL_RUN)
    proc = _fedad(["run", str(cfg), "--out", str(tmp_path / "run"), "-q"],
                  preexec_fn=_default_sigint)  # fmt: skip
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    lines = _stderr_lines(stderr)
    assert len(lines) == 1 and lines[0].startswith("interrupted by SIGINT"), stderr


@pytest.fixture
def restored_sigint() -> Iterator[None]:
    old = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def test_ctrl_c_after_the_first_only_says_so(
    restored_sigint: None, capfd: pytest.CaptureFixture[str]
) -> None:
    handler = options.CtrlC()
    assert handler.install()
    assert id(signal.getsignal(signal.SIGINT)) == id(handler)
    with pytest.raises(KeyboardInterrupt):
        handler(signal.SIGINT, None)
    handler(signal.SIGINT, None)  # the second and third: no exception, one note
    handler(signal.SIGINT, None)
    assert capfd.readouterr().err.count("stopping after Ctrl-C") == 1
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # ignored (a background job): left alone
    assert not options.CtrlC().install()


def test_a_ctrl_c_inside_an_import_lands_after_it(
    restored_sigint: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C while a module loads is put off until it has loaded: raised inside torch's
    import it ended the process with SIGABRT (pybind11 cannot pass the exception on)."""
    (tmp_path / "slow_module_for_ctrl_c.py").write_text(
        "import os, signal, time\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "time.sleep(0.3)  # the handler runs here, inside the import\n"
        "loaded = True\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    handler = options.CtrlC()
    assert handler.install()
    with pytest.raises(KeyboardInterrupt):
        import slow_module_for_ctrl_c  # noqa: F401

        time.sleep(2)  # the Ctrl-C comes back here, 50 ms after the import
    assert sys.modules["slow_module_for_ctrl_c"].loaded  # the import was not cut short
    assert handler.count == 1
    del sys.modules["slow_module_for_ctrl_c"]


def _ctrl_c() -> None:
    raise KeyboardInterrupt


def _exit_130() -> None:
    sys.exit(130)


@pytest.mark.parametrize("command", [_ctrl_c, _exit_130])
def test_main_says_when_a_command_did_not(
    restored_sigint: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: Callable[[], None],
) -> None:
    fresh = options.CtrlC()
    fresh.count = 1  # the Ctrl-C that came
    monkeypatch.setattr(options, "CTRL_C", fresh)
    monkeypatch.setattr(cli_app, "app", command)
    with pytest.raises(SystemExit) as done:
        cli_app.main()
    assert done.value.code == 130
    assert "interrupted by SIGINT" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # as Python exits


@pytest.mark.slow
def test_three_quick_ctrl_c_keep_the_finished_method_and_say_so(tmp_path: Path) -> None:
    """Three Ctrl-C 20 ms apart once a method is kept: was death by SIGINT, no message."""
    raw: dict[str, Any] = {
        **SMALL_RUN,
        "rounds": 3,
        "methods": [
            {"name": "onlad", "params": {"init_samples": 20, "observed": 40}},
            {"name": "fedavg", "params": {"local_epochs": 2000}},
        ],
    }
    out = tmp_path / "run"
    proc = _fedad(["run", str(_config(tmp_path, raw)), "--out", str(out), "-q"],
                  preexec_fn=_default_sigint)  # fmt: skip
    done = out / ".fedad" / "done" / "onlad.json"
    deadline = time.monotonic() + 120
    while not done.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert done.exists(), proc.communicate(timeout=30)
    for _ in range(3):
        proc.send_signal(signal.SIGINT)
        time.sleep(0.02)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "interrupted by SIGINT: kept onlad" in _stderr_lines(stderr)[-1], stderr
    assert list(json.loads((out / "metrics.json").read_text())["methods"]) == ["onlad"]
    assert json.loads((out / ".fedad" / "run.json").read_text())["state"] == "interrupted"
