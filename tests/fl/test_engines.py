"""The engine protocol (:mod:`fedad.fl.engines`): one interface for every engine, picked by
name, the Flower engine imported only when named."""

from __future__ import annotations

import numpy as np
import pytest

from fedad.config import parse_config
from fedad.core.errors import ConfigError
from fedad.federation import build_federation
from fedad.fl.engine import run_inprocess
from fedad.fl.engines import ENGINES, Engine, InProcessEngine, RunSettings, engine_for
from fedad.resolve import build_algorithms
from tests.fresh import run_fresh

CFG = {
    "seed": 3,
    "rounds": 2,
    "data": {"name": "digits", "normal": [0, 1], "anomaly": [7], "max_test": 60},
    "partition": {"scheme": "iid", "clients": 3},
    "methods": [{"name": "fedavg", "detector": "autoencoder"}],
}


def test_every_engine_name_gives_an_engine() -> None:
    assert isinstance(engine_for("inprocess"), InProcessEngine)
    for name in ENGINES:
        engine = engine_for(name)
        assert isinstance(engine, Engine), name
    with pytest.raises(ConfigError, match="no engine"):
        engine_for("carrier-pigeon")


def test_the_in_process_engine_through_the_protocol_is_run_inprocess() -> None:
    cfg = parse_config(CFG)
    fed = build_federation(cfg)
    rows: list[dict[str, object]] = []
    via = engine_for("inprocess").run(
        build_algorithms(cfg, fed)["fedavg"], fed, RunSettings(cfg), rows.append
    )
    direct = run_inprocess(
        build_algorithms(cfg, fed)["fedavg"], fed, rounds=cfg.rounds, seed=cfg.seed
    )
    assert len(rows) == cfg.rounds
    assert via.bytes_up == direct.bytes_up and via.bytes_down == direct.bytes_down
    for k, v in direct.result.arrays.items():
        np.testing.assert_array_equal(via.result.arrays[k], v)
    for cid, msg in direct.evaluations.items():
        np.testing.assert_array_equal(via.evaluations[cid].arrays["score"], msg.arrays["score"])


def test_naming_the_in_process_engine_imports_no_flower_code() -> None:
    code = (
        "import sys\n"
        "from fedad.fl.engines import engine_for\n"
        "engine_for('inprocess')\n"
        "assert not [m for m in sys.modules if m.startswith(('flwr', 'fedad.fl.flower'))]\n"
    )
    run_fresh(code, timeout=300)
