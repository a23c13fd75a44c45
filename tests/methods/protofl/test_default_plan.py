"""The registered screen behind ``protofl``'s image defaults is reproducible from its committed
plan: the suite files (benchmarks/suites/protofl-default-{screen,eval}.toml) hold the
registered rows, seeds and data halves, the rule (benchmarks/protofl_decide.py) gives the
committed decision on the committed results, and the defaults in code are that decision."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from fedad.bench.results import write_results
from fedad.bench.suites import Suite, load_target
from fedad.core.algorithm import Setup, build_algorithm
from fedad.methods.protofl.federated import ProtoFL

BENCH = Path(__file__).resolve().parents[3] / "benchmarks"
SCREEN = BENCH / "suites" / "protofl-default-screen.toml"
EVAL = BENCH / "suites" / "protofl-default-eval.toml"
REGISTERED = [
    "ref",
    "fedavg-deepsvdd",
    "none-gauss-64",
    "none-gauss-96",
    "none-flow-96",
    "paper-gauss-96",
    "contrast-gauss-96",
]


@pytest.fixture(scope="module")
def rule() -> ModuleType:
    sys.path.insert(0, str(BENCH))
    try:
        import protofl_decide
    finally:
        sys.path.remove(str(BENCH))
    return protofl_decide


def _rows(suite: Suite, federation: str) -> dict[str, dict[str, Any]]:
    fed = next(f for f in suite.federations if f.name == federation)
    return {m["label"]: m for m in fed.raw["methods"]}


def test_the_suites_are_the_registered_experiment(rule: ModuleType) -> None:
    screen, ev = load_target(str(SCREEN), []), load_target(str(EVAL), [])
    assert screen.seeds == (100, 101, 102) and ev.seeds == (0, 1, 2, 3, 4)
    assert set(ev.seeds).isdisjoint(screen.seeds)
    assert [f.name for f in screen.federations] == list(rule.FEDERATIONS)
    for suite, part in ((screen, "dev"), (ev, "eval")):
        for fed in suite.federations:
            assert fed.raw["data"]["part"] == part
            assert fed.raw["data"]["normal"] == list(range(10))
            assert fed.raw["partition"] == {"scheme": "one-vs-rest", "clients": 10}
            assert fed.raw["rounds"] == 8
    fashion, digits = (f.raw["data"] for f in screen.federations)
    assert (fashion["name"], fashion["max_train_per_client"], fashion["max_test"]) == (
        "fashion_mnist",
        400,
        1000,
    )
    assert digits["name"] == "digits" and "max_train_per_client" not in digits
    (evaluation,) = ev.federations
    assert evaluation.raw["data"]["max_train_per_client"] == 600
    assert evaluation.raw["data"]["max_test"] == 2000

    rows = _rows(screen, "fashion")
    assert list(rows) == REGISTERED == list(rule.ROWS)
    params = {label: m.get("params", {}) for label, m in rows.items()}
    assert params["ref"] == {} and rows["ref"]["detector"] == "pretrained"
    assert params[rule.CANDIDATE]["distill"] == "sample" and params[rule.CANDIDATE]["contrast"] > 0
    assert params["paper-gauss-96"]["phase1"] == "federated"
    assert all(params[r]["phase1"] == "none" for r in rule.HEADS)
    # digits: the same rows, the trained methods' with local_epochs = 5
    for label, m in _rows(screen, "digits").items():
        extra = {"local_epochs": 5} if m["name"] in ("protofl", "fedavg") else {}
        assert m.get("params", {}) == {**params[label], **extra}

    eval_rows = _rows(ev, "fashion")
    assert list(eval_rows) == ["protofl", "local-pretrained", "fedavg-deepsvdd"]
    assert eval_rows["protofl"] == {"name": "protofl", "label": "protofl"}  # no params


def _row(auroc: float, seconds: float) -> dict[str, float]:
    return {"auroc": auroc, "seconds": seconds}


def test_the_rule_as_registered(rule: ModuleType) -> None:
    base = {"ref": _row(0.92, 100), "none-gauss-64": _row(0.935, 50),
            "none-gauss-96": _row(0.945, 110), "none-flow-96": _row(0.90, 110),
            "paper-gauss-96": _row(0.90, 200), "contrast-gauss-96": _row(0.951, 140)}  # fmt: skip
    digits = {**base, "contrast-gauss-96": _row(0.951, 40)}
    got = rule.decide(base, digits)
    assert got["phase1"] == "contrast" and got["head_and_side"] == "none-gauss-96"
    slow = {**base, "contrast-gauss-96": _row(0.951, 151)}
    assert rule.decide(slow, digits)["phase1"] == "none"  # adds, but over 1.5x
    close = {**base, "none-gauss-96": _row(0.9365, 110)}
    assert rule.decide(close, close)["head_and_side"] == "none-gauss-64"  # within 0.002: cheaper
    dear = {**base, "none-gauss-96": _row(0.945, 121)}
    assert rule.decide(dear, dear)["head_and_side"] == "none-gauss-64"  # over 1.2x
    low = {**base, "none-gauss-64": _row(0.925, 50), "none-gauss-96": _row(0.925, 110)}
    assert not rule.decide(low, low)["bar_met"]


def test_the_rule_reads_a_benchmark(rule: ModuleType, tmp_path: Path) -> None:
    """``summaries`` averages each row over the seeds of a ``fedad bench`` results.csv."""
    rows = [
        {"federation": fed, "method": "m", "label": label, "seed": seed,
         "auroc": 0.9 + 0.01 * seed + (0.001 * i if fed == "digits" else 0.0),
         "seconds": 10.0 * (i + 1) + seed, "kind": "one-vs-rest"}
        for fed in rule.FEDERATIONS for i, label in enumerate(REGISTERED) for seed in (0, 2)
    ]  # fmt: skip
    write_results(tmp_path, rows, {})
    got = rule.summaries(tmp_path / "results.csv")
    assert got["fashion"]["ref"] == pytest.approx({"auroc": 0.91, "seconds": 11.0})
    assert got["digits"]["none-gauss-64"] == pytest.approx({"auroc": 0.912, "seconds": 31.0})
    write_results(tmp_path, [r for r in rows if r["label"] != "ref"], {})
    with pytest.raises(SystemExit, match="no row 'ref'"):
        rule.summaries(tmp_path / "results.csv")


def test_the_committed_results_give_the_committed_defaults(rule: ModuleType) -> None:
    results = {}
    for name in rule.FEDERATIONS:
        path = BENCH / "results" / f"protofl_default_screen-{name}.json"
        if not path.exists():
            pytest.skip("the screen's results are not committed")
        results[name] = json.loads(path.read_text())["methods"]
    got = rule.decide(results["fashion"], results["digits"])
    setup = Setup("image", (1, 28, 28), rounds=1, seed=0, contamination=0.1, num_clients=2)
    algo = build_algorithm("protofl", {}, setup)
    assert isinstance(algo, ProtoFL)
    chosen = _rows(load_target(str(SCREEN), []), "fashion")[got["head_and_side"]]["params"]
    assert got["phase1"] == "none" and algo.phase1 == "none"
    assert algo.trunk == chosen["trunk"]
    assert algo.make_detector().head == chosen["head"]
    assert algo.params.trunk_size == chosen["trunk_size"]
