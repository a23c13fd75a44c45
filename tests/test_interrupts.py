"""Signals that stop a run never land inside an import (:mod:`fedad.interrupts`)."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest

from fedad.errors import Interrupted
from fedad.interrupts import deferred_while_importing, importing, raise_interrupted


def test_importing_is_true_only_inside_an_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "probe_importing.py").write_text(
        "import sys\nfrom fedad.interrupts import importing\nINSIDE = importing(sys._getframe())\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import probe_importing

    assert probe_importing.INSIDE is True
    assert importing(sys._getframe()) is False
    assert importing(None) is False
    del sys.modules["probe_importing"]


def test_outside_an_import_the_handler_raises_at_once() -> None:
    assert deferred_while_importing(signal.SIGTERM, sys._getframe()) is False
    with pytest.raises(Interrupted) as stop:
        raise_interrupted(signal.SIGTERM, sys._getframe())
    assert stop.value.signum == signal.SIGTERM


def test_a_sigterm_inside_an_import_is_raised_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The module finishes loading; Interrupted comes from the code after the import."""
    (tmp_path / "slow_module_for_term.py").write_text(
        "import os, signal, time\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "time.sleep(0.3)  # the handler runs here, inside the import\n"
        "loaded = True\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    old = signal.signal(signal.SIGTERM, raise_interrupted)
    try:
        with pytest.raises(Interrupted):
            import slow_module_for_term  # noqa: F401

            time.sleep(2)  # sent again 50 ms after the import: raised here
    finally:
        signal.signal(signal.SIGTERM, old)
    assert sys.modules["slow_module_for_term"].loaded
    del sys.modules["slow_module_for_term"]
