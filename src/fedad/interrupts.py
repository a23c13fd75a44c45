"""Signals that stop a run, handled so that they do not land inside a module's import.

A Python signal handler that raises (``KeyboardInterrupt`` on Ctrl-C, :class:`Interrupted`
on SIGTERM) can do so inside a module's import, and from there into C++ code that cannot
pass the exception on: ``import torch`` runs ``torch._C._c10d_init()``, which then ends the
process with ``terminate called after throwing an instance of 'pybind11::error_already_set'``
(SIGABRT), and other C-extension imports swallow the exception, so that the signal is lost.
Every handler of fedad that raises asks :func:`deferred_while_importing` first.

Python ignores an exception raised where it cannot pass it on (a weakref callback or a
``__del__`` that the garbage collector runs): a signal handled there would be lost, with
"Exception ignored in ..." and a traceback on stderr. The command line's
:func:`keep_swallowed_signals` records such a signal instead, quietly: a SIGTERM is sent
again 50 ms later (it lands elsewhere and acts then), a Ctrl-C (whose handler counts the
presses) is acted on by :func:`stop_if_swallowed`, called between rounds and methods.

A put-off signal arrives late, under whatever handler is installed by then (a block that
restored the default SIGTERM handler meanwhile dies by the signal, as it would had the
signal come 50 ms later).
"""

from __future__ import annotations

import _thread
import contextlib
import signal
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

from fedad.core.errors import Interrupted

REDELIVER_S = 0.05
"""How long after a put-off signal the main thread is sent it again."""
MAX_DEFER_S = 5.0
"""How long a signal is put off at most: an import that hangs must not hold Ctrl-C."""

_pending: dict[int, float] = {}
"""Signals put off and not yet acted on: when each was first put off (monotonic seconds)."""
_resent: set[int] = set()
"""Signals the redelivery thread has just sent again (not a new press)."""


def importing(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside an import (some module's top-level code is executing)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        frame = frame.f_back
    return False


def _resend(main: int, signum: int) -> None:
    """In its own thread: send ``signum`` to the main thread again after
    :data:`REDELIVER_S`, unless it was acted on meanwhile."""
    time.sleep(REDELIVER_S)
    if signum in _pending:
        _resent.add(signum)
        signal.pthread_kill(main, signum)


def deferred_while_importing(signum: int, frame: FrameType | None) -> bool:
    """Put off signal ``signum`` if it landed inside an import; whether it did.

    Inside an import, the same signal is sent to the main thread again :data:`REDELIVER_S`
    later, until it lands outside every import and the handler acts there. It is not put
    off (the handler acts at once) where threads cannot signal each other (no
    ``pthread_kill``), once it has waited :data:`MAX_DEFER_S`, or when it comes again from
    outside while put off (a second Ctrl-C means now). The redelivery thread is started with
    ``_thread`` rather than ``threading``: a handler runs between any two bytecodes of the
    main thread, which may hold ``threading``'s own locks then.
    """
    resent = signum in _resent
    _resent.discard(signum)
    first = _pending.get(signum)
    now = time.monotonic()
    main = threading.main_thread().ident
    if (
        main is None
        or not hasattr(signal, "pthread_kill")
        or not importing(frame)
        or (first is not None and (not resent or now - first > MAX_DEFER_S))
    ):
        _pending.pop(signum, None)
        return False
    _pending.setdefault(signum, now)
    _thread.start_new_thread(_resend, (main, signum))
    return True


def raise_interrupted(signum: int, frame: FrameType | None) -> None:
    """A signal handler: raise :class:`Interrupted` (outside any import, see above)."""
    if not deferred_while_importing(signum, frame):
        raise Interrupted(signum)


_swallowed: list[int] = []
"""Signals whose exception Python ignored (:func:`keep_swallowed_signals`), oldest first."""


def _send_again(main: int, signum: int) -> None:
    """In its own thread: send ``signum`` to the main thread again after
    :data:`REDELIVER_S`, and forget it was swallowed (the handler acts on it now)."""
    time.sleep(REDELIVER_S)
    try:
        _swallowed.remove(signum)
    except ValueError:  # acted on meanwhile (stop_if_swallowed)
        return
    signal.pthread_kill(main, signum)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM held back inside the block (delivered when it ends): for a few
    renames that must all happen or none (setting a run aside and putting it back)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _hook(previous: Any) -> Any:
    def hook(unraisable: Any) -> None:
        err = unraisable.exc_value
        if isinstance(err, Interrupted):
            _swallowed.append(err.signum)
            main = threading.main_thread().ident
            if main is not None and hasattr(signal, "pthread_kill"):  # SIGTERM comes again
                _thread.start_new_thread(_send_again, (main, err.signum))
        elif isinstance(err, KeyboardInterrupt):  # the Ctrl-C handler counts presses:
            _swallowed.append(int(signal.SIGINT))  # acted on at the next round instead
        else:
            previous(unraisable)

    return hook


def keep_swallowed_signals() -> None:
    """From now on a signal's exception that Python ignores is recorded, not printed, for
    :func:`stop_if_swallowed` (for the command line and its worker processes)."""
    sys.unraisablehook = _hook(sys.unraisablehook)


def stop_if_swallowed() -> None:
    """Raise :class:`Interrupted` for a signal whose exception was ignored (see above)."""
    if _swallowed:
        signum = _swallowed[0]
        _swallowed.clear()
        raise Interrupted(signum)


def swallowed() -> int | None:
    """The signal whose exception was ignored and not yet acted on, if any (cleared)."""
    signum = _swallowed[0] if _swallowed else None
    _swallowed.clear()
    return signum
