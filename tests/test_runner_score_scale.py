"""metrics.json's ``score_scale``: a method that normalises its clients' scores before they
are pooled says how; a method with raw scores writes no such key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedad.config import parse_config
from fedad.methods.baselines.federated import FedAvg
from fedad.runner import run_experiment
from tests.test_runner_seconds import _raw, toy  # noqa: F401  (the fixture)


def test_score_scale_is_written_only_by_methods_that_normalise(
    toy: None,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_experiment(parse_config(_raw()), tmp_path / "raw")
    raw = json.loads((tmp_path / "raw" / "metrics.json").read_text())["methods"]["ae"]
    assert "score_scale" not in raw
    monkeypatch.setattr(FedAvg, "score_scale", lambda self: "over each client's training")
    run_experiment(parse_config(_raw()), tmp_path / "scaled")
    m = json.loads((tmp_path / "scaled" / "metrics.json").read_text())["methods"]["ae"]
    assert m["score_scale"] == "over each client's training"
