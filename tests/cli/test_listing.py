"""``fedad list``: the methods table comes from the registry's catalog without importing
torch or any method."""

from __future__ import annotations

import subprocess
import sys

LIST_THEN_MODULES = (
    "import sys\n"
    "from fedad.cli.app import main\n"
    "sys.argv = ['fedad', 'list', {what!r}]\n"
    "try:\n"
    "    main()\n"
    "except SystemExit as done:\n"
    "    if done.code:\n"
    "        raise\n"
    "heavy = sorted(m for m in sys.modules if m == 'torch'\n"
    "               or (m.startswith('fedad.methods.') and m.count('.') > 2))\n"
    "sys.stderr.write('HEAVY=' + ','.join(heavy) + '\\n')\n"
)


def _heavy_after_list(what: str) -> tuple[str, list[str]]:
    """``fedad list WHAT`` in a fresh process: its standard output, and which of torch and
    the methods' modules it had imported (a method folder's ``__init__.py``, its
    declarations for the catalog, is light and allowed)."""
    proc = subprocess.run(
        [sys.executable, "-c", LIST_THEN_MODULES.format(what=what)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("HEAVY=")][-1]
    return proc.stdout, [m for m in line.removeprefix("HEAVY=").split(",") if m]


def test_list_methods_imports_no_torch() -> None:
    out, heavy = _heavy_after_list("methods")
    assert "onlad" in out and "fedavg" in out
    assert heavy == []


def test_list_partitions_imports_no_torch() -> None:
    out, heavy = _heavy_after_list("partitions")
    assert "one-vs-rest" in out
    assert heavy == []
