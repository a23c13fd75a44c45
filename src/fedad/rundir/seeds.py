"""The folders of a several-seed run: ``OUT/seed-N``, each a complete run directory, and
whether one of them finished."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fedad.rundir.layout import METRICS_FILE, RUN_FILE, SEED_DIR, STATE_DIR
from fedad.rundir.read import read_metrics

__all__ = ["finished_seed", "seed_dir"]


def seed_dir(out: Path, seed: int) -> Path:
    """``OUT/seed-N``."""
    return out / SEED_DIR.format(seed)


def finished_seed(d: Path) -> dict[str, Any] | None:
    """A seed directory's metrics.json data when that run finished, else None."""
    state = d / STATE_DIR / RUN_FILE
    if not (state.is_file() and (d / METRICS_FILE).is_file()):
        return None
    try:
        info = json.loads(state.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(info, dict) or info.get("state") != "finished":
        return None
    data = read_metrics(d / METRICS_FILE)
    return data if data["experiment"].get("status") == "complete" else None
