"""Every module imports on its own (no import cycles hidden by the order tests import in)."""

from __future__ import annotations

import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import fedad

MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(fedad.__path__, "fedad.")
    if not m.name.startswith("fedad.fl.flower")  # optional extra, tested in tests/fl
)


# One process imports the third-party packages fedad uses (no fedad module), then forks a
# child per module: each child's first fedad import is that module, as in a fresh
# interpreter, without paying for torch's import once per module.
CODE = """
import importlib, os, sys, traceback
for dep in DEPS:
    try:
        importlib.import_module(dep)
    except ImportError:
        pass
assert not [k for k in sys.modules if k == "fedad" or k.startswith("fedad.")]
bad = []
for m in MODULES:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            importlib.import_module(m)
            os.write(w, b"")
            os._exit(0)
        except BaseException:
            os.write(w, traceback.format_exc().strip().splitlines()[-1].encode()[:4000])
            os._exit(1)
    os.close(w)
    msg = os.read(r, 8192).decode()
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        bad.append((m, msg))
print(bad)
sys.exit(1 if bad else 0)
"""
DEPS = ["numpy", "scipy", "sklearn", "torch", "torchvision", "pydantic", "typer", "rich",
        "PIL", "zuko", "kornia", "pandas", "flwr"]  # fmt: skip


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks a child per module")
def test_every_module_imports_first() -> None:
    code = f"DEPS = {DEPS!r}\nMODULES = {MODULES!r}\n" + CODE
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr


def test_the_import_check_finds_a_cycle(tmp_path: Path) -> None:
    """The forked check reports a module whose import fails only when it is imported first."""
    pkg = tmp_path / "cyc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from cyc.b import B\nA = 1\n")
    (pkg / "b.py").write_text("from cyc.a import A\nB = 2\n")
    code = "DEPS = []\nMODULES = ['cyc.b', 'cyc.a']\n" + CODE.replace('"fedad"', '"cyc"')
    code = code.replace('"fedad.")', '"cyc.")')
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)  # fmt: skip
    assert p.returncode == 1
    assert "cyc.b" in p.stdout and "cyc.a" in p.stdout, p.stdout


@pytest.mark.parametrize("text", ["pip install 'fedad[flower]'"])
def test_cli_errors_keep_brackets(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    import typer

    from fedad.cli.options import fail
    from fedad.core.errors import FedadError

    with pytest.raises(typer.Exit):
        fail(FedadError(text))
    assert "[flower]" in capsys.readouterr().err
