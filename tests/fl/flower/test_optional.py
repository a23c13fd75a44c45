"""The Flower engines without their extras: one-line errors, never a traceback.

These tests do not need ``flwr``; they simulate its absence, so they also run (and matter
most) where the ``flower`` extra is not installed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedad.config import parse_config
from fedad.core.errors import ConfigError
from fedad.federation import build_federation
from fedad.fl.flower import spec
from fedad.resolve import build_algorithms
from fedad.runner import run_method

CFG = {
    "rounds": 1,
    "data": {"name": "digits", "normal": [0, 1], "anomaly": [7], "max_train_per_client": 20},
    "partition": {"clients": 2},
    "methods": [{"name": "fedavg"}],
}


@pytest.mark.parametrize("engine", ["flower-simulation", "flower-deployment"])
def test_without_flwr_a_one_line_config_error(
    engine: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(spec, "flwr_available", lambda: False)
    cfg = parse_config({**CFG, "engine": {"name": engine}})
    fed = build_federation(cfg)
    alg = build_algorithms(cfg, fed)["fedavg"]
    with pytest.raises(ConfigError, match=r"needs Flower .*flower extra"):
        run_method(cfg, alg, fed)

    from fedad.cli.app import app

    path = tmp_path / "c.toml"
    path.write_text(
        'rounds = 1\n[data]\nname = "digits"\nnormal = [0]\nanomaly = [1]\n'
        f'[engine]\nname = "{engine}"\n[[methods]]\nname = "fedavg"\n'
    )
    res = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "o"), "-q"])
    assert res.exit_code == 2
    assert "flower extra" in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) <= 2  # one line (wrapped at most once)


def test_without_ray_simulation_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from fedad.fl.flower import sim as flower_sim

    real = flower_sim.importlib.util.find_spec
    monkeypatch.setattr(
        flower_sim.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "ray" else real(name, *a),
    )
    with pytest.raises(ConfigError, match="needs Ray"):
        flower_sim.require_ray()


def test_flower_commands_without_flwr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spec, "flwr_available", lambda: False)
    from fedad.cli.app import app

    res = CliRunner().invoke(app, ["flower", "superlink", "--insecure"])
    assert res.exit_code == 2 and "flower extra" in res.output


def test_secagg_without_flwr_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "flwr" else real(name, *a)
    )
    cfg = parse_config({**CFG, "privacy": {"secagg": True}})
    fed = build_federation(cfg)
    alg = build_algorithms(cfg, fed)["fedavg"]
    with pytest.raises(ConfigError, match=r"privacy.secagg = true needs Flower .*flower extra"):
        run_method(cfg, alg, fed)
