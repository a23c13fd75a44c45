"""The peak memory of one method's run, for ``metrics.json``'s ``peak_mb``.

On Linux the kernel keeps the process's peak resident set (``VmHWM`` in
``/proc/self/status``) and resets it when ``5`` is written to ``/proc/self/clear_refs``:
:func:`reset_peak` before a method and :func:`peak_mb` after it give that method's peak, in
fedad's main process (worker processes of ``engine.workers`` and Flower's nodes are not
counted). Elsewhere the peak is the process's since it started
(``resource.getrusage``), and ``peak_mb`` says so by being a process-wide figure; where
neither can be read it is ``None``.
"""

from __future__ import annotations

import contextlib
import re
import sys

_HWM = re.compile(rb"^VmHWM:\s+(\d+)\s+kB", re.MULTILINE)


def reset_peak() -> bool:
    """Start a new peak (Linux); whether it could."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
    except OSError:
        return False
    return True


def peak_mb() -> float | None:
    """The peak resident memory since :func:`reset_peak` (or since the process started),
    in megabytes (10^6 bytes)."""
    with contextlib.suppress(OSError):
        with open("/proc/self/status", "rb") as fh:
            m = _HWM.search(fh.read())
        if m:
            return int(m.group(1)) * 1024 / 1e6
    try:
        import resource
    except ImportError:  # not a Unix
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1e6 if sys.platform == "darwin" else peak * 1024 / 1e6
