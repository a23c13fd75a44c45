"""One contract test over every registered method: fit, score, one round, save/load, seed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedad.core.algorithm import Algorithm, Setup, build_algorithm, registry
from fedad.core.types import Federation
from fedad.fl.drive import RunOutcome
from fedad.fl.engine import run_inprocess
from fedad.rundir.checkpoints import save_checkpoint
from fedad.rundir.load import load_run
from fedad.runner import summarize
from tests.conftest import failures, make_federation

FIXTURES = {"vector": ("vector", False), "image": ("image", False),
            "image+mask": ("image", True), "graph": ("graph", False)}  # fmt: skip
"""Fixture per case kind: (data kind, pixel masks). Every image method also runs on images
with masks (the ground truth a localising method's maps are scored against)."""

CASES = [
    (name, det, case)
    for name, cls in registry().items()
    for det in (cls.detectors or (None,))
    for kind in cls.kinds_for(det)
    for case in ((kind, "image+mask") if kind == "image" else (kind,))
    if not (str(det).startswith("pyod-") and case == "image+mask")  # they draw no maps
]
FLOWER_CASES = [
    (name, det, case)
    for name, det, case in CASES
    # the PyOD references travel as every local/centralized detector does: tables suffice
    if not (str(det).startswith("pyod-") and case != "vector")
]


def fixture(case: str) -> Federation:
    kind, masks = FIXTURES[case]
    return make_federation(kind, masks=masks)


def _run(name: str, det: str | None, fed: Federation) -> tuple[Algorithm, RunOutcome]:
    setup = Setup(fed.kind, fed.feature_shape, rounds=1, seed=3, contamination=0.1, num_clients=3)
    algo = build_algorithm(name, {}, setup, det)
    return algo, run_inprocess(algo, fed, rounds=1, seed=3)


def test_every_declared_kind_has_a_fixture() -> None:
    declared = {k for cls in registry().values() for k in cls.kinds}
    assert declared <= set(FIXTURES)


@pytest.mark.parametrize(("name", "det", "case"), CASES)
def test_method_contract(name: str, det: str | None, case: str, tmp_path: Path) -> None:
    fed = fixture(case)
    algo, out = _run(name, det, fed)

    # one round ran, every client evaluated, nothing failed or was rejected
    assert failures(out.events) == []
    assert sorted(out.evaluations) == [0, 1, 2]
    assert [r["round"] for r in out.history if r["round"] >= 1] == [1]
    metrics, arrays = summarize("m", algo, out)
    score = arrays["m/score"]
    assert score.shape == fed.y_test.shape and np.all(np.isfinite(score))
    assert 0.0 <= metrics["auroc"] <= 1.0

    # thresholds come from training data: a contamination share of training scores is above
    for cid, m in out.evaluations.items():
        client = fed.clients[cid]
        det_k = algo.client_detector(out.client_states[cid], client, _eval_msg(out))
        train = det_k.score(client.x_train)
        above = float(np.mean(train > m.scalars["threshold"]))
        if "threshold" not in out.result.scalars:
            # linear-interpolated quantile (PyOD's convention): at most c + 1/n above
            assert above <= 0.1 + 1 / len(train) + 1e-9

    # save and load: the loaded detectors give the same scores and predictions
    save_checkpoint(tmp_path, "m", algo, out)
    (tmp_path / "metrics.json").write_text(json.dumps({"methods": {"m": metrics}}))
    run = load_run(tmp_path)
    for cid, m in out.evaluations.items():
        d = run.detector("m", cid)
        x = fed.clients[cid].x_test
        np.testing.assert_allclose(d.score(x), m.arrays["score"], rtol=1e-6, atol=1e-9)
        np.testing.assert_array_equal(d.predict(x), m.arrays["pred"])

    # same seed, same results
    _, again = _run(name, det, fed)
    for cid in out.evaluations:
        np.testing.assert_array_equal(
            out.evaluations[cid].arrays["score"], again.evaluations[cid].arrays["score"]
        )


def _eval_msg(out: RunOutcome):  # type: ignore[no-untyped-def]
    from fedad.core.messages import Message

    return Message("evaluate", out.result.arrays, out.result.scalars)


def test_every_method_runs_without_params() -> None:
    for name, cls in registry().items():
        for kind in cls.kinds:
            fed = fixture(kind)
            setup = Setup(kind, fed.feature_shape, rounds=1, seed=0, contamination=0.05,
                          num_clients=3)  # fmt: skip
            assert build_algorithm(name, {}, setup).params is not None


@pytest.mark.parametrize(("name", "det", "case"), FLOWER_CASES)
def test_method_contract_on_flower_grid(
    name: str, det: str | None, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same method and fixture on Flower's in-memory grid (the real ClientApp, messages
    through Flower's serialisation; as a simulation, so personalised detectors come back
    like in-process): the same evaluate replies as in-process."""
    pytest.importorskip("flwr")
    from fedad.config import parse_config
    from fedad.fl.flower import app as flower_app
    from fedad.fl.flower.server import serve
    from fedad.fl.flower.spec import RunSpec
    from tests.fl.flower.fake_flower import FakeFlowerGrid, as_server_app

    as_server_app(monkeypatch)
    fed = fixture(case)
    algo, ref = _run(name, det, fed)
    method: dict[str, str] = {"name": name} | ({"detector": det} if det else {})
    cfg = parse_config({"seed": 3, "rounds": 1, "partition": {"clients": 3},
                        "data": {"name": "digits", "normal": [0], "anomaly": [1]},
                        "methods": [method]})  # fmt: skip
    # the nodes find the fixture's clients where they cache the run's federation
    monkeypatch.setattr(flower_app, "_FEDERATIONS", {flower_app.data_key(cfg): fed.clients})
    spec = RunSpec.build(cfg, algo)
    out = serve(
        FakeFlowerGrid(spec, partitions=3, sim_spec=True), spec, algo, poll_interval=0.0,
        server_data=fed.server_normal,
    )  # fmt: skip
    assert out.events == ref.events and failures(out.events) == []
    assert sorted(out.evaluations) == [0, 1, 2]
    for cid, m in ref.evaluations.items():
        got = out.evaluations[cid]
        assert set(got.arrays) == set(m.arrays)
        for k, a in m.arrays.items():
            np.testing.assert_array_equal(got.arrays[k], a, err_msg=f"{k} of client {cid}")
        assert got.scalars["threshold"] == m.scalars["threshold"]
