"""The shipped FedDyMem config parses, builds its federation and every method in it."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("skimage")

from fedad.config import parse_config, read_toml
from fedad.core.algorithm import Setup, build_algorithm
from fedad.federation import build_federation

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


def test_textures_config_builds() -> None:
    cfg = parse_config(read_toml(CONFIGS / "feddymem_textures.toml"))
    fed = build_federation(cfg)
    assert fed.kind == "image" and len(fed.clients) == 5 and fed.has_masks
    for c in fed.clients:
        assert (c.y_test == 1).any() and (c.y_test == 0).any()
    setup = Setup("image", fed.feature_shape, rounds=cfg.rounds, seed=0, contamination=0.05,
                  num_clients=len(fed.clients))  # fmt: skip
    assert cfg.methods[0].name == "feddymem"
    for m in cfg.methods:
        build_algorithm(m.name, m.params, setup, m.detector)
