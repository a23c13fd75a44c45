"""Every module imports on its own (no import cycles hidden by the order tests import in)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import pytest

import fedad

MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(fedad.__path__, "fedad.")
    if not m.name.startswith("fedad.fl.flower")  # optional extra, tested in tests/fl
)


@pytest.mark.slow
def test_every_module_imports_first() -> None:
    code = (
        "import importlib, subprocess, sys\n"
        "bad = []\n"
        f"for m in {MODULES!r}:\n"
        "    r = subprocess.run([sys.executable, '-c', 'import ' + m], capture_output=True)\n"
        "    if r.returncode:\n"
        "        bad.append((m, r.stderr.decode().strip().splitlines()[-1]))\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.parametrize("text", ["pip install 'fedad[flower]'"])
def test_cli_errors_keep_brackets(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    import typer

    from fedad.cli.options import fail
    from fedad.errors import FedadError

    with pytest.raises(typer.Exit):
        fail(FedadError(text))
    assert "[flower]" in capsys.readouterr().err
