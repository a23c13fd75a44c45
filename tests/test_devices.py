"""[engine] device: resolution, one-line errors for devices that are not there, recorded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from fedad.cli.app import app
from fedad.components.detectors.neural import AutoEncoderDetector
from fedad.config import dump_toml, parse_config
from fedad.core.errors import ConfigError
from fedad.devices import resolve_device

runner = CliRunner()
SMALL = {
    "rounds": 1,
    "data": {"name": "digits", "normal": [0, 1], "anomaly": [7], "max_test": 40},
    "partition": {"scheme": "iid", "clients": 2},
    "engine": {"progress": False},
    "methods": [{"name": "fedavg"}],
}


def test_auto_is_cuda_when_present_else_cpu() -> None:
    want = "cuda:0" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto") == want
    assert resolve_device("cpu") == "cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("spec", ["cuda", "cuda:1"])
def test_missing_cuda_is_a_one_line_error(spec: str) -> None:
    with pytest.raises(ConfigError, match=rf"engine.device = '{spec}' but this machine has"):
        resolve_device(spec)


def test_unknown_device_refused_by_the_config() -> None:
    with pytest.raises(ConfigError, match=r"engine\.device"):
        parse_config({**SMALL, "engine": {"device": "gpu"}})


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cli_exits_2_before_training(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(dump_toml({**SMALL, "engine": {"device": "cuda:0", "progress": False}}))
    out = tmp_path / "run"
    res = runner.invoke(app, ["run", str(cfg), "--out", str(out)])
    assert res.exit_code == 2
    assert "engine.device = 'cuda:0' but this machine has" in res.output
    assert "Traceback" not in res.output and not out.exists()


def test_device_recorded_and_explicit_cpu_equals_auto_on_cpu(tmp_path: Path) -> None:
    from fedad.runner import run_experiment

    a = run_experiment(parse_config(SMALL), tmp_path / "a")
    cpu = {**SMALL, "engine": {"device": "cpu", "progress": False}}
    b = run_experiment(parse_config(cpu), tmp_path / "b")
    assert a["experiment"]["device"] == resolve_device("auto")
    assert b["experiment"]["device"] == "cpu"
    if a["experiment"]["device"] == "cpu":
        assert a["methods"]["fedavg"]["auroc"] == b["methods"]["fedavg"]["auroc"]
    assert json.loads((tmp_path / "b" / "metrics.json").read_text())["experiment"]["device"]


def test_device_is_not_saved_with_the_detector() -> None:
    det = AutoEncoderDetector(kind="vector", input_shape=[4], epochs=1, device="cpu")
    assert "device" not in det.get_params()
    x = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    det.fit(x)
    assert np.isfinite(det.score(x)).all()
