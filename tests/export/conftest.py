"""Finished runs to export, written once per session: the hostile tests' small image run
(digits 8x8: a global autoencoder, personal Deep SVDDs, ONLAD in float64) and a small
table run (three sites, a text column, empty cells imputed: a global autoencoder and
personal one-class SVMs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedad.config import parse_config
from fedad.runner import run_experiment
from tests.hostile.conftest import SMALL_RUN

pytest.importorskip("onnxruntime")


def write_table(path: Path, rows: int = 150, seed: int = 0) -> Path:
    """A CSV with three sites, three numeric columns (a few empty cells), a text column
    (a few empty cells and spaces around some values) and a label."""
    rng = np.random.default_rng(seed)
    lines = ["site,age,pressure,dose,device,label"]
    for i in range(rows):
        site = ["north", "centre", "south"][i % 3]
        anomaly = i % 10 == 0
        shift = 3.0 if anomaly else 0.0
        age, pressure, dose = rng.normal(shift, 1.0, 3) + np.array([50.0, 120.0, 1.0])
        cells = [f"{age:.3f}", f"{pressure:.3f}", "" if i % 17 == 5 else f"{dose:.4f}"]
        device = ["acme", " zeta ", "omni"][int(rng.integers(3))] if i % 13 != 4 else ""
        lines.append(",".join([site, *cells, device, "bad" if anomaly else "ok"]))
    path.write_text("\n".join(lines) + "\n")
    return path


def table_config(path: Path) -> dict[str, object]:
    return {
        "seed": 0,
        "rounds": 1,
        "data": {"name": "table", "path": str(path), "label_column": "label",
                 "normal": ["ok"], "anomaly": ["bad"], "client_column": "site",
                 "missing": "impute-mean"},
        "partition": {"scheme": "natural"},
        "engine": {"progress": False},
        "methods": [
            {"name": "fedavg", "label": "fedavg-ae"},
            {"name": "local", "detector": "ocsvm", "label": "local-ocsvm"},
        ],
    }  # fmt: skip


@pytest.fixture(scope="session")
def image_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("export-image") / "run"
    run_experiment(parse_config(SMALL_RUN), out)
    return out


@pytest.fixture(scope="session")
def table_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("export-table")
    table = write_table(root / "records.csv")
    out = root / "run"
    run_experiment(parse_config(table_config(table)), out)
    return out
