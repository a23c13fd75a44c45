"""``phase1 = "none"``: no prototype and no model on the wire, each client's head fit once on
the shipped trunk, the frozen trunk run once per sample; Flower's in-memory grid gives the
in-process replies."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fedad.core.algorithm import Setup, build_algorithm
from fedad.core.messages import Message
from fedad.core.types import Federation, dense
from fedad.fl.drive import RunOutcome
from fedad.fl.engine import run_inprocess
from fedad.methods.protofl import detector as detector_module
from fedad.methods.protofl.federated import ProtoFL
from tests.conftest import failures, make_federation

FAST: dict[str, Any] = {"trunk": "efficientnet", "trunk_size": 32, "phase1": "none",
                        "head": "gaussian"}  # fmt: skip


def _run(fed: Federation, rounds: int = 2, **params: Any) -> tuple[ProtoFL, RunOutcome]:
    setup = Setup(fed.kind, fed.feature_shape, rounds=rounds, seed=3, contamination=0.1,
                  num_clients=len(fed.clients))  # fmt: skip
    algo = build_algorithm("protofl", {**FAST, **params}, setup)
    assert isinstance(algo, ProtoFL)
    return algo, run_inprocess(algo, fed, rounds=rounds, seed=3)


def test_no_prototype_no_model_and_the_head_on_the_shipped_trunk(
    delivered: list[tuple[int, Message]],
) -> None:
    fed = make_federation("image", clients=3)
    algo, out = _run(fed)
    assert failures(out.events) == []
    assert {m.kind for _, m in delivered} == {"head", "evaluate"}
    assert all(not m.arrays for _, m in delivered)  # nothing but round numbers goes out
    assert algo.requirements(algo.params.model_dump()).public is None
    assert algo.requirements(algo.params.model_dump()).update_phases == ()
    assert [r["round"] for r in out.history if r["round"] >= 1] == [1, 2]
    for cid, m in out.evaluations.items():
        c = fed.clients[cid]
        own = algo.make_detector().build()  # the shipped EfficientNet-Lite0 weights
        assert own.fit_head(dense(c.x_train), np.random.default_rng(0)) == 0.0
        np.testing.assert_allclose(m.arrays["score"], own.score(dense(c.x_test)), rtol=1e-9)
        want = np.quantile(own.score(dense(c.x_train)), 0.9)
        assert m.scalars["threshold"] == pytest.approx(want, rel=1e-9)


def test_the_frozen_trunk_runs_once_per_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    """Round 1 fits the head (the training samples once, no augmented views), round 2 finds
    it kept, the evaluation scores the test samples once; the threshold's training scores
    and the report's embeddings come from what was kept."""
    from fedad.methods.protofl import features

    seen: list[int] = []
    real = features.prefix_maps

    def count(x: np.ndarray, *args: Any, **kwargs: Any) -> np.ndarray:
        seen.append(len(x))
        return real(x, *args, **kwargs)

    monkeypatch.setattr(features, "prefix_maps", count)
    monkeypatch.setattr(detector_module, "prefix_maps", count)
    fed = make_federation("image", clients=2)
    _, out = _run(fed)
    assert failures(out.events) == []
    want = sorted([c.n_train for c in fed.clients] + [len(c.y_test) for c in fed.clients])
    assert sorted(seen) == want
    assert all("embedding" in m.arrays for m in out.evaluations.values())


def test_phase1_none_with_new_clients_is_a_config_error() -> None:
    from fedad.core.errors import ConfigError

    setup = Setup("image", (1, 8, 8), rounds=1, seed=0, contamination=0.1, num_clients=3)
    with pytest.raises(ConfigError, match="new_clients"):
        build_algorithm("protofl", {"phase1": "none", "new_clients": 1}, setup)


def test_phase1_none_on_flower_in_memory_grid(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flower's in-memory grid with the real ClientApp gives the in-process replies."""
    pytest.importorskip("flwr")
    from fedad.config import parse_config
    from fedad.fl.flower import app as flower_app
    from fedad.fl.flower.server import serve
    from fedad.fl.flower.spec import RunSpec
    from tests.fl.flower.fake_flower import FakeFlowerGrid, as_server_app

    as_server_app(monkeypatch)
    fed = make_federation("image", clients=3)
    algo, ref = _run(fed, rounds=1)
    cfg = parse_config({"seed": 3, "rounds": 1, "partition": {"clients": 3},
                        "data": {"name": "digits", "normal": [0], "anomaly": [1]},
                        "methods": [{"name": "protofl", "params": FAST}]})  # fmt: skip
    monkeypatch.setattr(flower_app, "_FEDERATIONS", {flower_app.data_key(cfg): fed.clients})
    spec = RunSpec.build(cfg, algo)
    out = serve(
        FakeFlowerGrid(spec, partitions=3, sim_spec=True), spec, algo, poll_interval=0.0,
        server_data=fed.server_normal,
    )  # fmt: skip
    assert out.events == ref.events and failures(out.events) == []
    for cid, m in ref.evaluations.items():
        for k, a in m.arrays.items():
            np.testing.assert_array_equal(out.evaluations[cid].arrays[k], a, err_msg=k)
