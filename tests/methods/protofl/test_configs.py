"""The shipped ProtoFL config parses and every method in it builds for its data."""

from __future__ import annotations

from pathlib import Path

from fedad.config import parse_config, read_toml
from fedad.core.algorithm import Setup, build_algorithm
from fedad.methods.protofl.federated import ProtoFL

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


def test_fashion_one_vs_rest_config_builds() -> None:
    cfg = parse_config(read_toml(CONFIGS / "protofl_fashion_ovr.toml"))
    assert cfg.partition.scheme == "one-vs-rest" and cfg.rounds == 8
    setup = Setup("image", (1, 28, 28), rounds=cfg.rounds, seed=0, contamination=0.05,
                  num_clients=cfg.partition.clients)  # fmt: skip
    algos = [build_algorithm(m.name, m.params, setup, m.detector) for m in cfg.methods]
    protofl = [a for a in algos if isinstance(a, ProtoFL)]
    assert (protofl[0].trunk, protofl[0].phase1) == ("efficientnet", "none")  # the defaults
    assert protofl[0].make_detector().head == "gaussian"
    assert (protofl[1].trunk, protofl[1].phase1) == ("cnn", "federated")  # the paper's form
    assert protofl[1].make_detector().head == "flow"
    assert protofl[1].make_detector().augmentation() == (False, 0.7)  # no flips for grey
