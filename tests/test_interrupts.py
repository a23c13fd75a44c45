"""Signals that stop a run do not land inside an import (:mod:`fedad.interrupts`)."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fedad import interrupts
from fedad.core.errors import Interrupted
from fedad.interrupts import deferred_while_importing, importing, raise_interrupted


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], str]]:
    """``module(body)``: the name of a fresh importable module with that top-level code."""
    monkeypatch.syspath_prepend(str(tmp_path))
    names: list[str] = []

    def make(body: str) -> str:
        name = f"probe_interrupts_{len(names)}"
        (tmp_path / f"{name}.py").write_text(body)
        names.append(name)
        return name

    yield make
    for name in names:
        sys.modules.pop(name, None)


@pytest.fixture
def sigterm_raises() -> Iterator[None]:
    old = signal.signal(signal.SIGTERM, raise_interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
        interrupts._pending.clear()


def test_importing_is_true_only_inside_an_import(module: Callable[[str], str]) -> None:
    name = module("import sys\nfrom fedad.interrupts import importing\n"
                  "INSIDE = importing(sys._getframe())\n")  # fmt: skip
    assert __import__(name).INSIDE is True
    assert importing(sys._getframe()) is False
    assert importing(None) is False


def test_outside_an_import_the_handler_raises_at_once() -> None:
    assert deferred_while_importing(signal.SIGTERM, sys._getframe()) is False
    with pytest.raises(Interrupted) as stop:
        raise_interrupted(signal.SIGTERM, sys._getframe())
    assert stop.value.signum == signal.SIGTERM


def test_a_sigterm_inside_an_import_is_raised_after_it(
    module: Callable[[str], str], sigterm_raises: None
) -> None:
    """The module finishes loading; Interrupted comes from the code after the import."""
    name = module(
        "import os, signal, time\nos.kill(os.getpid(), signal.SIGTERM)\n"
        "time.sleep(0.3)\nloaded = True\n"
    )  # fmt: skip  (the handler runs in the sleep)
    with pytest.raises(Interrupted):
        __import__(name)
        time.sleep(2)  # sent again 50 ms after the import: raised here
    assert sys.modules[name].loaded


def test_a_second_signal_while_one_is_put_off_acts_at_once(
    module: Callable[[str], str], sigterm_raises: None
) -> None:
    name = module("import os, signal, time\nos.kill(os.getpid(), signal.SIGTERM)\n"
                  "time.sleep(0.01)\nos.kill(os.getpid(), signal.SIGTERM)\n"
                  "time.sleep(0.3)\nloaded = True\n")  # fmt: skip
    with pytest.raises(Interrupted):
        __import__(name)
    assert name not in sys.modules  # cut short by the second one, inside the import
    time.sleep(0.2)  # the first one's redelivery was called off: nothing more comes
    assert not interrupts._pending


def test_an_import_that_hangs_holds_a_signal_for_a_bounded_time(
    module: Callable[[str], str], sigterm_raises: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(interrupts, "MAX_DEFER_S", 0.3)
    name = module("import os, signal, time\nos.kill(os.getpid(), signal.SIGTERM)\n"
                  "while True:\n    time.sleep(0.01)\n")  # fmt: skip
    start = time.monotonic()
    with pytest.raises(Interrupted):
        __import__(name)
    assert 0.3 <= time.monotonic() - start < 5


def test_without_pthread_kill_nothing_is_put_off(
    module: Callable[[str], str], sigterm_raises: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(signal, "pthread_kill")
    name = module("import os, signal, time\nos.kill(os.getpid(), signal.SIGTERM)\n"
                  "time.sleep(0.3)\nloaded = True\n")  # fmt: skip
    with pytest.raises(Interrupted):
        __import__(name)
    assert name not in sys.modules


def test_a_signal_python_ignores_is_kept_and_acted_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM's exception raised inside a ``__del__`` (the garbage collector's) is ignored
    by Python: recorded instead of printed, it is sent again and stops the run then; a
    check between rounds acts on it too."""
    import gc

    got: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    monkeypatch.setattr(interrupts, "_swallowed", [])
    try:
        interrupts.keep_swallowed_signals()

        class Dies:
            def __del__(self) -> None:
                raise Interrupted(15)

        Dies()
        gc.collect()
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
        assert got == [15]  # sent again, and handled where it landed
        assert interrupts.swallowed() is None

        interrupts._swallowed.append(2)  # a swallowed Ctrl-C: acted on at the next check
        with pytest.raises(Interrupted) as err:
            interrupts.stop_if_swallowed()
        assert err.value.signum == 2
        interrupts.stop_if_swallowed()  # acted on once
    finally:
        signal.signal(signal.SIGTERM, previous)
