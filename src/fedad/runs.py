"""Load what a run wrote: metrics, config and every client's final detector."""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedad.detector import BaseDetector, detector_from_config
from fedad.errors import FedadError


@dataclass
class Run:
    """A finished run: ``detectors[label][client_id]`` scores new data like the original."""

    path: Path
    config: dict[str, Any]
    metrics: dict[str, Any]
    detectors: dict[str, dict[int, BaseDetector]]

    def detector(self, label: str, client: int = 0) -> BaseDetector:
        """The detector client ``client`` ended with for method ``label``."""
        try:
            return self.detectors[label][client]
        except KeyError:
            raise FedadError(
                f"run {self.path} has no detector for method '{label}', client {client}",
                f"methods: {', '.join(self.detectors)}",
            ) from None


def _npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def load_run(run_dir: str | Path) -> Run:
    """Read ``metrics.json``, ``config.toml`` and ``checkpoints/`` of a run directory."""
    root = Path(run_dir)
    if not (root / "metrics.json").is_file():
        raise FedadError(
            f"'{root}' is not a run directory (no metrics.json)", "give the --out of `fedad run`"
        )
    metrics = json.loads((root / "metrics.json").read_text())
    config = (
        tomllib.loads((root / "config.toml").read_text())
        if (root / "config.toml").is_file()
        else {}
    )
    detectors: dict[str, dict[int, BaseDetector]] = {}
    ckpt = root / "checkpoints"
    for d in sorted(p for p in ckpt.iterdir() if p.is_dir()) if ckpt.is_dir() else []:
        meta = json.loads((d / "detector.json").read_text())
        per_client: dict[int, BaseDetector] = {}
        shared = None if meta["personalized"] else _npz(d / "global.npz")
        for cid, thr in meta["thresholds"].items():
            arrays = _npz(d / f"client_{cid}.npz") if shared is None else dict(shared)
            arrays["threshold_"] = np.asarray(thr, dtype=np.float64)
            per_client[int(cid)] = detector_from_config(meta["detector"], arrays)
        detectors[d.name] = per_client
    return Run(root, config, metrics, detectors)
