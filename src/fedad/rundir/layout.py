"""Every name a run directory holds, written once (docs/runs.md, docs/outputs.md).

At the top of ``OUT/``: the standard files (:data:`OUTPUTS`), the folders (:data:`OUTPUT_DIRS`)
and, for a several-seed run, ``seed-N/`` folders (:data:`SEED_DIRS`), each a run of its own.
fedad writes, reads or deletes nothing else there. Inside ``.fedad/``: the run's record, its
lock, the finished methods kept for ``--resume`` and the run that ``--force`` replaces.
"""

from __future__ import annotations

import re

__all__ = [
    "ASIDE_DIR",
    "CHECKPOINTS_DIR",
    "CONFIG_FILE",
    "DONE_DIR",
    "EMBEDDINGS_FILE",
    "FINGERPRINT_FILE",
    "FLOWER_DIR",
    "FORMAT",
    "HISTORY_FILE",
    "INPUTS_FILE",
    "LOCK_FILE",
    "MAPS_FILE",
    "METRICS_FILE",
    "OUTPUTS",
    "OUTPUT_DIRS",
    "REPORT_FILE",
    "RUN_FILE",
    "SCORES_FILE",
    "SEED_DIR",
    "SEED_DIRS",
    "STATE_DIR",
]

CONFIG_FILE = "config.toml"
"""The resolved config: every default filled in, methods' params included."""
METRICS_FILE = "metrics.json"
HISTORY_FILE = "history.csv"
SCORES_FILE = "scores.npz"
MAPS_FILE = "maps.npz"
EMBEDDINGS_FILE = "embeddings.npz"
REPORT_FILE = "report.html"
INPUTS_FILE = "inputs.json"
"""How the run turned raw data into model inputs (``fedad score`` applies it to new data)."""
OUTPUTS = (
    CONFIG_FILE,
    METRICS_FILE,
    HISTORY_FILE,
    SCORES_FILE,
    MAPS_FILE,
    EMBEDDINGS_FILE,
    REPORT_FILE,
    INPUTS_FILE,
)
"""Files a run writes at the top of its directory."""

CHECKPOINTS_DIR = "checkpoints"
FLOWER_DIR = ".flower"
"""The Flower engines' homes, logs and hand-over files."""
STATE_DIR = ".fedad"
OUTPUT_DIRS = (CHECKPOINTS_DIR, FLOWER_DIR, STATE_DIR)
"""Folders a run writes."""

RUN_FILE = "run.json"
LOCK_FILE = "lock"
DONE_DIR = "done"
ASIDE_DIR = "replaced"
"""In ``.fedad/``: the run that ``--force`` replaces, kept until the new run has a result."""
FINGERPRINT_FILE = "fingerprint.json"
FORMAT = 1
"""The version of this layout a run records in ``.fedad/run.json``."""

SEED_DIR = "seed-{}"
"""A seed's folder in a several-seed run (``seed-N``, :mod:`fedad.seeds`)."""
SEED_DIRS = re.compile(r"seed--?[0-9]{1,20}")
"""The names of seed folders."""
