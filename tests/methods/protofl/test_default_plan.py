"""The registered screen behind ``protofl``'s image defaults (benchmarks/protofl_default.py)
is reproducible from its committed plan: each suite's config parses to the registered rows,
seeds and data halves, the rule gives the committed decision on the committed results, and
the defaults in code are that decision."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from fedad.config import parse_config
from fedad.fl.algorithm import Setup, build_algorithm
from fedad.methods.protofl.federated import ProtoFL

BENCH = Path(__file__).resolve().parents[3] / "benchmarks"


@pytest.fixture(scope="module")
def plan() -> ModuleType:
    sys.path.insert(0, str(BENCH))
    try:
        import protofl_default
    finally:
        sys.path.remove(str(BENCH))
    return protofl_default


def test_each_suite_is_the_registered_experiment(plan: ModuleType) -> None:
    for suite, seeds in plan.SEEDS.items():
        cfg = parse_config(tomllib.loads(plan.config_text(suite)))
        assert cfg.seeds == seeds
        assert cfg.data.part == ("eval" if suite == "eval" else "dev")
        assert cfg.partition.scheme == "one-vs-rest" and cfg.partition.clients == 10
        assert cfg.rounds == 8
        rows = plan.EVAL if suite == "eval" else plan.SCREEN
        assert [m.label for m in cfg.methods] == [r[0] for r in rows]
    assert set(plan.SEEDS["eval"]).isdisjoint(plan.SEEDS["screen-fashion"])
    screen = {r[0]: r[2] for r in plan.SCREEN}
    assert screen[plan.CANDIDATE]["distill"] == "sample" and screen[plan.CANDIDATE]["contrast"] > 0
    assert screen["paper-gauss-96"]["phase1"] == "federated"
    assert all(screen[r]["phase1"] == "none" for r in plan.HEADS)
    assert plan.EVAL[0] == ("protofl", "protofl", {}, None)  # the defaults, no params


def _row(auroc: float, seconds: float) -> dict[str, Any]:
    return {"auroc": auroc, "seconds": seconds}


def test_the_rule_as_registered(plan: ModuleType) -> None:
    base = {"ref": _row(0.92, 100), "none-gauss-64": _row(0.935, 50),
            "none-gauss-96": _row(0.945, 110), "none-flow-96": _row(0.90, 110),
            "paper-gauss-96": _row(0.90, 200), "contrast-gauss-96": _row(0.951, 140)}  # fmt: skip
    digits = {**base, "contrast-gauss-96": _row(0.951, 40)}
    got = plan.decide(base, digits)
    assert got["phase1"] == "contrast" and got["head_and_side"] == "none-gauss-96"
    slow = {**base, "contrast-gauss-96": _row(0.951, 151)}
    assert plan.decide(slow, digits)["phase1"] == "none"  # adds, but over 1.5x
    close = {**base, "none-gauss-96": _row(0.9365, 110)}
    assert plan.decide(close, close)["head_and_side"] == "none-gauss-64"  # within 0.002: cheaper
    dear = {**base, "none-gauss-96": _row(0.945, 121)}
    assert plan.decide(dear, dear)["head_and_side"] == "none-gauss-64"  # over 1.2x
    low = {**base, "none-gauss-64": _row(0.925, 50), "none-gauss-96": _row(0.925, 110)}
    assert not plan.decide(low, low)["bar_met"]


def test_the_committed_results_give_the_committed_defaults(plan: ModuleType) -> None:
    results = {}
    for name in ("fashion", "digits"):
        path = BENCH / "results" / f"protofl_default_screen-{name}.json"
        if not path.exists():
            pytest.skip("the screen's results are not committed")
        results[name] = json.loads(path.read_text())["methods"]
    got = plan.decide(results["fashion"], results["digits"])
    setup = Setup("image", (1, 28, 28), rounds=1, seed=0, contamination=0.1, num_clients=2)
    algo = build_algorithm("protofl", {}, setup)
    assert isinstance(algo, ProtoFL)
    chosen = {r[0]: r[2] for r in plan.SCREEN}[got["head_and_side"]]
    assert got["phase1"] == "none" and algo.phase1 == "none"
    assert algo.trunk == chosen["trunk"]
    assert algo.make_detector().head == chosen["head"]
    assert algo.params.trunk_size == chosen["trunk_size"]
