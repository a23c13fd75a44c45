"""Signals that stop a run, handled so that they never land inside a module's import.

A Python signal handler that raises (``KeyboardInterrupt`` on Ctrl-C, :class:`Interrupted`
on SIGTERM) can do so inside a module's import, and from there into C++ code that cannot
pass the exception on: ``import torch`` runs ``torch._C._c10d_init()``, which then ends the
process with ``terminate called after throwing an instance of 'pybind11::error_already_set'``
(SIGABRT), and other C-extension imports swallow the exception, so that the signal is lost.
Every handler of fedad that raises asks :func:`deferred_while_importing` first.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

from fedad.errors import Interrupted

REDELIVER_S = 0.05
"""How long after a put-off signal the main thread is sent it again."""


def importing(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside an import (some module's top-level code is executing)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        frame = frame.f_back
    return False


def deferred_while_importing(signum: int, frame: FrameType | None) -> bool:
    """Put off signal ``signum`` if it landed inside an import; whether it did.

    Inside an import, the same signal is sent to the main thread again :data:`REDELIVER_S`
    later (from a timer thread), until it lands outside every import and the handler acts
    there. Where threads cannot signal each other (no ``pthread_kill``), nothing is put off.
    """
    main = threading.main_thread().ident
    if not hasattr(signal, "pthread_kill") or main is None or not importing(frame):
        return False
    timer = threading.Timer(REDELIVER_S, signal.pthread_kill, (main, signum))
    timer.daemon = True
    timer.start()
    return True


def raise_interrupted(signum: int, frame: FrameType | None) -> None:
    """A signal handler: raise :class:`Interrupted` (outside any import, see above)."""
    if not deferred_while_importing(signum, frame):
        raise Interrupted(signum)
