"""The shipped FGAD configs parse, build a federation and every method in them builds."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch_geometric")

from fedad.config import parse_config, read_toml
from fedad.data.federation import build_federation
from fedad.fl.algorithm import Setup, build_algorithm

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


@pytest.mark.parametrize("name", ["fgad_single.toml", "fgad_multi.toml"])
def test_config_builds(name: str) -> None:
    cfg = parse_config(read_toml(CONFIGS / name))
    fed = build_federation(cfg)
    assert fed.kind == "graph" and len(fed.clients) == 4
    setup = Setup("graph", fed.feature_shape, rounds=cfg.rounds, seed=0, contamination=0.05,
                  num_clients=len(fed.clients))  # fmt: skip
    names = [m.name for m in cfg.methods]
    assert names[0] == "fgad" and {"gcfl", "fedstar", "fedavg", "local"} <= set(names)
    for m in cfg.methods:
        build_algorithm(m.name, m.params, setup, m.detector)
