"""FedDyMem and FedAvg with the PatchCore-style detector on Flower's simulation engine (slow).

The fast contract test (``tests/methods/test_contract.py::test_method_contract_on_flower_grid``)
already runs both through Flower's in-memory grid with the real ClientApp. This one runs
``fedad run`` itself with ``engine.name = "flower-simulation"`` (Ray, a process per run) on
real data, ``textures`` at 64 pixels with its defect masks, 3 clients, 2 rounds, and checks
that the metrics, the per-client rows, the bytes, the scores and the anomaly maps are those
of the same config in-process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedad.runner import TIMING_KEYS

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("ray"),  # beside the tests that check no simulation is left
    pytest.mark.skipif(
        __import__("importlib").util.find_spec("flwr") is None,
        reason="flwr (the flower extra) is not installed: pip install 'fedad[flower]'",
    ),
]

ROOT = Path(__file__).resolve().parents[3]

CONFIG = """
seed = 0
rounds = 2

[data]
name = "textures"
size = 64

[partition]
scheme = "dirichlet"
alpha = 0.1
clients = 3

[engine]
progress = false

[[methods]]
name = "feddymem"

[[methods]]
name = "fedavg"
label = "fedavg-patchcore"
detector = "patchcore"
"""


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two metrics documents differ (floats within 1e-6, wall times ignored)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{path}: keys {sorted(set(a) ^ set(b))}"]
        return [
            d for k in a if k not in TIMING_KEYS for d in differences(a[k], b[k], f"{path}.{k}")
        ]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: lengths {len(a)} != {len(b)}"]
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in differences(x, y, f"{path}[{i}]")
        ]
    if isinstance(a, float) and isinstance(b, float | int):
        return [] if abs(a - b) <= 1e-6 else [f"{path}: {a} != {b}"]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def test_same_results_in_process_and_in_flower_simulation(tmp_path: Path) -> None:
    """Equal at equal torch threads per client: Ray gives each ClientApp worker one CPU
    (``OMP_NUM_THREADS=1``), and oneDNN's convolutions sum in a thread-dependent order, so
    both runs get one thread (with 2 in-process the AUROC differed in the 5th decimal)."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    runs: dict[str, Path] = {}
    for engine in ("inprocess", "flower-simulation"):
        out = tmp_path / engine
        p = subprocess.run(
            [sys.executable, "-m", "fedad.cli", "run", str(cfg), "--out", str(out), "-q",
             "--set", f'engine.name="{engine}"'],
            capture_output=True, text=True, timeout=900, cwd=ROOT,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )  # fmt: skip
        assert p.returncode == 0, (engine, p.stderr[-3000:])
        runs[engine] = out
    ref, sim = (json.loads((runs[e] / "metrics.json").read_text()) for e in runs)
    assert sim["experiment"]["engine"] == "flower-simulation"
    assert set(ref["methods"]) == {"feddymem", "fedavg-patchcore"}
    for label, m in ref["methods"].items():
        assert m["events"] == [] and m["missing_nodes"] == [], label
        assert m["pixel_auroc"] is not None and m["bytes_up"] > 0, label
        assert differences(m, sim["methods"][label], label) == []
    for name in ("scores.npz", "maps.npz"):
        with np.load(runs["inprocess"] / name) as a, np.load(runs["flower-simulation"] / name) as b:
            assert sorted(a.files) == sorted(b.files) and a.files
            for k in a.files:
                np.testing.assert_array_equal(a[k], b[k], err_msg=f"{name}: {k}")
