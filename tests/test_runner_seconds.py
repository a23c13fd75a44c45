"""metrics.json's ``seconds``: a method's whole cost, not its server program alone.

A method's ``seconds`` is the wall time from its start to its metrics: training, the
evaluation phase (where a personalised method's clients fit their heads) and the metrics;
``train_seconds`` keeps the server program's share.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fedad.fl.drive as engine
from fedad.config import parse_config
from fedad.core.types import Dataset
from fedad.data.registry import register_dataset, unregister_dataset
from fedad.runner import TIMING_KEYS, run_experiment

PAUSE = 0.4
"""Seconds the patched evaluation phase sleeps: far above the noise of a tiny run."""


def _vectors() -> Dataset:
    rng = np.random.default_rng(0)
    x = rng.normal(0.0, 1.0, (60, 4)).astype(np.float32)
    x[40:] += 4.0
    y = np.r_[np.zeros(40), np.ones(20)].astype(np.int64)
    return Dataset("toy_seconds", x, y, "vector", ("good", "bad"))


@pytest.fixture
def toy() -> Iterator[None]:
    register_dataset("toy_seconds", lambda path=None, size=None: _vectors(), kind="vector")
    yield
    unregister_dataset("toy_seconds")


def _raw() -> dict[str, Any]:
    return {
        "seed": 0,
        "rounds": 1,
        "data": {"name": "toy_seconds", "normal": [0], "anomaly": [1]},
        "partition": {"scheme": "iid", "clients": 2},
        "engine": {"progress": False},
        "methods": [
            {
                "name": "fedavg",
                "label": "ae",
                "detector": "autoencoder",
                "params": {"local_epochs": 1},
            }
        ],
    }


def test_seconds_count_the_evaluation_phase(
    toy: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = engine.evaluate_all

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(PAUSE)
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "evaluate_all", slow)
    run_experiment(parse_config(_raw()), tmp_path / "run")
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())["methods"]["ae"]
    assert m["seconds"] >= m["train_seconds"] + PAUSE
    assert "train_seconds" in TIMING_KEYS  # left out where identical runs are compared
