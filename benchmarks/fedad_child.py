"""One ``fedad run`` as a child process, for the timing scripts beside this file: the config
text written to a temporary folder, the command run as a user runs it, and what the run wrote
read back from its public files (``metrics.json``, ``history.csv``).

Imported by ``engine_overhead.py``, ``scale.py`` and ``flower_engines.py`` (run as scripts
from this folder).
"""

from __future__ import annotations

import contextlib
import csv
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Watch = Callable[[int], contextlib.AbstractContextManager[Any]]
"""Given the child's pid, a context manager held while it runs (e.g. a memory sampler)."""


@dataclass
class ChildRun:
    """What one ``fedad run`` wrote, and how long the whole command took."""

    metrics: dict[str, Any]
    history: list[dict[str, str]]
    wall: float
    """Seconds of the whole command, interpreter start-up included."""
    watched: Any = None
    """What ``watch``'s context manager gave (``None`` without one)."""


def fedad_run(
    config: str, env: Mapping[str, str] | None = None, watch: Watch | None = None
) -> ChildRun:
    """``fedad run`` of the TOML text ``config`` in a temporary folder; a failed run stops the
    script with its stderr."""
    with tempfile.TemporaryDirectory(prefix="fedad-bench-") as tmp:
        cfg, out = Path(tmp) / "config.toml", Path(tmp) / "run"
        cfg.write_text(config, encoding="utf-8")
        cmd = [sys.executable, "-m", "fedad.cli", "run", str(cfg), "--out", str(out), "-q"]
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [*cmd, "--force"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=None if env is None else dict(env),
        )
        with watch(proc.pid) if watch is not None else contextlib.nullcontext() as watched:
            _, err = proc.communicate()
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"fedad run exited {proc.returncode}:\n{err}")
        metrics = json.loads((out / "metrics.json").read_text("utf-8"))
        with (out / "history.csv").open(encoding="utf-8", newline="") as fh:
            history = list(csv.DictReader(fh))
    return ChildRun(metrics, history, wall, watched)
