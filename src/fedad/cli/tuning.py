"""How the ``fedad`` process runs, set before anything loads torch: OpenMP's wait policy
and glibc's allocator thresholds. Each changes timing only, never a result; a value the
user set, or ``FEDAD_KEEP_OMP=1`` / ``FEDAD_KEEP_MALLOC=1``, is left alone (docs/runs.md)."""

from __future__ import annotations

import ctypes
import os
import platform

MMAP_THRESHOLD = 256 << 20
"""Blocks below this many bytes come from the heap and are reused when freed. glibc's
default (128 KiB, raised only as large blocks are freed) maps every large tensor afresh
from the kernel, which zeroes its pages again on first touch: a convolution network's
activation maps (up to 56 MB a batch for EfficientNet-Lite0 at 96 px) then spend a third
of their time in page faults (benchmarks/malloc_policy.py)."""
TRIM_THRESHOLD = 512 << 20
"""Free memory at the top of the heap that is kept rather than given back at once."""
_MALLOPT = {  # environment variable: (mallopt parameter, value)
    "MALLOC_TRIM_THRESHOLD_": (-1, TRIM_THRESHOLD),
    "MALLOC_MMAP_THRESHOLD_": (-3, MMAP_THRESHOLD),
}


def passive_openmp() -> None:
    """OpenMP threads that sleep after a parallel region instead of spinning, so that a run
    beside another busy process slows by about its fair share rather than several times
    (benchmarks/wait_policy.py). Read once, when torch's OpenMP runtime loads."""
    if "OMP_WAIT_POLICY" not in os.environ and not os.environ.get("FEDAD_KEEP_OMP"):
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"


def reusable_heap() -> bool:
    """Raise glibc's mmap and trim thresholds (:data:`MMAP_THRESHOLD`,
    :data:`TRIM_THRESHOLD`): in this process with ``mallopt`` (glibc read its environment
    when the process started), in the processes it starts through the environment.
    Returns whether this process's thresholds were set (glibc only)."""
    if os.environ.get("FEDAD_KEEP_MALLOC") or any(k in os.environ for k in _MALLOPT):
        return False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    for name, (param, value) in _MALLOPT.items():
        if libc.mallopt(param, value) != 1:
            return False
        os.environ[name] = str(value)
    return True


def tune_process() -> None:
    """Both of the above; the command line calls it first."""
    passive_openmp()
    reusable_heap()
