"""Code run in a fresh interpreter: what a test of imports must see (nothing of fedad loaded
before, as when a user starts ``fedad``)."""

from __future__ import annotations

import subprocess
import sys


def run_fresh(code: str, timeout: int = 600) -> None:
    """Run ``code`` with ``python -c`` in a new process; fail with its stderr's tail."""
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout
    )
    assert p.returncode == 0, p.stderr[-2000:]
