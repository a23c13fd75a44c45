"""The shipped FADngs configs parse and every method in them builds with its params."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedad.config import parse_config, read_toml
from fedad.core.algorithm import Setup, build_algorithm

CONFIGS = sorted((Path(__file__).resolve().parents[3] / "configs").glob("fadngs_*.toml"))


def test_there_are_three() -> None:
    names = {p.name for p in CONFIGS}
    assert {"fadngs_fmnist.toml", "fadngs_fmnist_digits.toml", "fadngs_fmnist_gpu.toml"} <= names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_config_builds(path: Path) -> None:
    cfg = parse_config(read_toml(path))
    assert cfg.data.name == "fashion_mnist" and cfg.partition.scheme == "dominant"
    setup = Setup("image", (1, 28, 28), rounds=cfg.rounds, seed=0, contamination=0.01,
                  num_clients=cfg.partition.clients)  # fmt: skip
    names = [m.name for m in cfg.methods]
    assert "fadngs" in names and "fadngs-nosed" in names
    for m in cfg.methods:
        build_algorithm(m.name, m.params, setup, m.detector)
