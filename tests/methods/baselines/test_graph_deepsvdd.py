"""The generic baselines with Deep SVDD on graphs (FGAD's Self-train, FedAvg+DeepSVDD and
FedProx+DeepSVDD): a bias-free GIN, and in ``fedavg``/``fedprox`` a per-client input layer
when the sources' node-feature widths differ."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from fedad.components.detectors.neural import DeepSVDDDetector
from fedad.components.nn.model import GRAPH_HIDDEN, GRAPH_INPUT_LAYER, GRAPH_LAYERS
from fedad.config import parse_config
from fedad.core.algorithm import Algorithm, Setup, build_algorithm
from fedad.core.detector import detector_from_config
from fedad.core.errors import ConfigError, FedadError
from fedad.core.messages import unprefixed
from fedad.core.types import Dataset, Federation, GraphSet
from fedad.data.registry import register_dataset, unregister_dataset
from fedad.evaluation.metrics import auroc
from fedad.fl.drive import RunOutcome
from fedad.fl.engine import run_inprocess
from fedad.rundir.checkpoints import save_checkpoint
from fedad.rundir.load import load_run
from fedad.runner import summarize
from tests.conftest import make_federation
from tests.data.datahelpers import synth_graphs

pytest.importorskip("torch_geometric")

METHODS = ("local", "fedavg", "fedprox")


def _without_ids(width: int, seed: int) -> Dataset:
    """:func:`synth_graphs` with the identity column replaced by an ordinary feature."""
    ds = synth_graphs(0, width=width, seed=seed)
    assert isinstance(ds.x, GraphSet)
    pairs = []
    for i in range(len(ds.x)):
        x, e = ds.x.graph(i)
        x = x.copy()
        x[0, 0] = x[0, 1]
        pairs.append((x, e))
    return dataclasses.replace(ds, x=GraphSet.from_graphs(pairs))


@pytest.fixture(scope="module")
def mixed() -> Iterator[Federation]:
    """Four clients by source: two with node-feature width 3, two with width 5."""
    from fedad.federation import build_federation

    register_dataset("bl_graph_w3", lambda path=None, size=None: _without_ids(3, 3), "",
                     "graph", overwrite=True)  # fmt: skip
    register_dataset("bl_graph_w5", lambda path=None, size=None: _without_ids(5, 4), "",
                     "graph", overwrite=True)  # fmt: skip
    raw = {
        "seed": 0,
        "data": {"name": "bl_graph_w3", "normal": [0], "anomaly": [3, 4],
                 "sources": ["bl_graph_w5"]},
        "partition": {"scheme": "by-source", "clients": 4},
        "methods": [{"name": "fedavg", "detector": "deepsvdd"}],
    }  # fmt: skip
    yield build_federation(parse_config(raw))
    unregister_dataset("bl_graph_w3")
    unregister_dataset("bl_graph_w5")


def _width(fed: Federation, cid: int) -> int:
    x = fed.clients[cid].x_train
    assert isinstance(x, GraphSet)
    return int(x.shape[1])


def _run(
    name: str, fed: Federation, rounds: int = 2, seed: int = 0, **params: object
) -> tuple[Algorithm, RunOutcome]:
    setup = Setup("graph", fed.feature_shape, rounds=rounds, seed=seed, contamination=0.1,
                  num_clients=len(fed.clients))  # fmt: skip
    algo = build_algorithm(name, dict(params), setup, "deepsvdd")
    return algo, run_inprocess(algo, fed, rounds=rounds, seed=seed)


def _pooled_auroc(out: RunOutcome) -> float:
    ids = sorted(out.evaluations)
    s = np.concatenate([out.evaluations[c].arrays["score"] for c in ids])
    y = np.concatenate([out.evaluations[c].arrays["label"] for c in ids])
    return float(auroc(y, s))


# --------------------------------------------------------------------------- the detector


def test_graph_network_is_a_bias_free_gin_with_the_readout_as_embedding() -> None:
    det = DeepSVDDDetector(kind="graph", input_shape=[3]).build()
    names = [n for n, _ in det.model_.named_parameters()]
    assert names and not any("bias" in n for n in names)
    assert det.model_.state_dict()[GRAPH_INPUT_LAYER].shape == (GRAPH_HIDDEN, 3)
    assert det.model_.center.shape == (GRAPH_LAYERS * GRAPH_HIDDEN,)  # no projection
    assert det.width_keys() == (GRAPH_INPUT_LAYER,)
    projected = DeepSVDDDetector(kind="graph", input_shape=[3], latent_dim=16).build()
    assert projected.model_.center.shape == (16,)
    assert not any("bias" in n for n, _ in projected.model_.named_parameters())


def test_fit_follows_the_graphs_width_and_scores_one_number_per_graph() -> None:
    fed = make_federation("graph")
    c = fed.clients[0]
    det = DeepSVDDDetector(kind="graph", input_shape=[1], epochs=20, lr=3e-3, seed=0)
    det.fit(c.x_train)
    assert det.params.input_shape == [3]
    s = det.score(c.x_test)
    assert s.shape == (len(c.y_test),) and np.all(np.isfinite(s)) and np.all(s >= 0)
    assert auroc(c.y_test, s) > 0.9  # rings against cliques with shifted features
    assert np.mean(det.score(c.x_train) > det.threshold_) <= 0.1 + 1e-9
    # the score is the squared distance to the fixed centre
    x = c.x_test
    assert isinstance(x, GraphSet)
    z = det.model_.embed(x.batch()).detach().numpy()
    np.testing.assert_allclose(s, ((z - det.model_.center.numpy()) ** 2).sum(1), rtol=1e-5)


def test_other_widths_and_dense_rows_are_refused() -> None:
    fed = make_federation("graph")
    det = DeepSVDDDetector(kind="graph", input_shape=[3], epochs=1).fit(fed.clients[0].x_train)
    wide = GraphSet.from_graphs([(np.ones((4, 5)), np.zeros((2, 0)))])
    with pytest.raises(ValueError, match="5 node features; this detector takes 3"):
        det.score(wide)
    with pytest.raises(TypeError, match="GraphSet"):
        det.score(np.zeros((2, 3), np.float32))


def test_a_saved_detector_loads_for_the_width_of_its_arrays() -> None:
    fed = make_federation("graph")
    det = DeepSVDDDetector(kind="graph", input_shape=[3], epochs=2, seed=1)
    det.fit(fed.clients[0].x_train)
    x = fed.clients[0].x_test
    # the configuration may name another width (one config serves every client of a run)
    config = DeepSVDDDetector(kind="graph", input_shape=[5], seed=1).to_config()
    loaded = detector_from_config(json.loads(json.dumps(config)), det.get_arrays())
    np.testing.assert_allclose(loaded.score(x), det.score(x), rtol=1e-6)
    assert loaded.threshold_ == det.threshold_
    bad = {**config, "params": {**config["params"], "input_shape": [3, 3]}}
    with pytest.raises(FedadError, match="node-feature width"):
        detector_from_config(bad, det.get_arrays())
    arrays = {k: v for k, v in det.get_arrays().items() if k != GRAPH_INPUT_LAYER}
    with pytest.raises(FedadError, match="do not fit"):
        detector_from_config(config, arrays)


# --------------------------------------------------------------------------- the methods


@pytest.mark.parametrize("name", METHODS)
def test_baselines_run_on_a_graph_federation(name: str) -> None:
    fed = make_federation("graph", clients=3)
    algo, out = _run(name, fed)
    assert algo.detector == "deepsvdd" and algo.personalized
    assert out.events == [] and sorted(out.evaluations) == [0, 1, 2]
    for cid, m in out.evaluations.items():
        assert m.arrays["score"].shape == fed.clients[cid].y_test.shape
        assert np.all(np.isfinite(m.arrays["score"]))
    assert _pooled_auroc(out) > 0.9


def test_deepsvdd_is_the_default_detector_on_graphs() -> None:
    setup = Setup("graph", (3,), rounds=1, seed=0, contamination=0.05, num_clients=3)
    assert build_algorithm("fedavg", {}, setup).detector == "deepsvdd"
    vec = Setup("vector", (6,), rounds=1, seed=0, contamination=0.05, num_clients=3)
    assert build_algorithm("fedavg", {}, vec).detector == "autoencoder"


@pytest.mark.parametrize(
    ("name", "det", "match"),
    [
        ("fedavg", "autoencoder", "detector 'autoencoder' of method 'fedavg' needs vector or "
         "image data, not graph data"),
        ("local", "ocsvm", "needs vector or image data, not graph data"),
        ("centralized", "deepsvdd", "method 'centralized' does not handle graph data"),
    ],
)  # fmt: skip
def test_what_does_not_take_graphs_is_a_one_line_error(name: str, det: str, match: str) -> None:
    setup = Setup("graph", (3,), rounds=1, seed=0, contamination=0.05, num_clients=3)
    with pytest.raises(ConfigError, match=match) as err:
        build_algorithm(name, {}, setup, det)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", METHODS)
def test_baselines_run_when_widths_differ(name: str, mixed: Federation) -> None:
    assert sorted({_width(mixed, c) for c in range(4)}) == [3, 5]
    _, out = _run(name, mixed)
    assert out.events == [] and sorted(out.evaluations) == [0, 1, 2, 3]
    for cid, m in out.evaluations.items():
        assert m.arrays["score"].shape == mixed.clients[cid].y_test.shape
        own = unprefixed(m.arrays, "detector")
        assert own[GRAPH_INPUT_LAYER].shape == (GRAPH_HIDDEN, _width(mixed, cid))
    assert _pooled_auroc(out) > 0.8


@pytest.mark.parametrize("name", ["fedavg", "fedprox"])
def test_only_the_input_layer_stays_on_the_client(name: str, mixed: Federation) -> None:
    algo, out = _run(name, mixed)
    every = set(DeepSVDDDetector(kind="graph", input_shape=[3]).build().model_arrays())
    # what the server averaged and sent: everything but the input layer
    assert set(out.result.arrays) == every - {GRAPH_INPUT_LAYER}
    train = [r for r in out.history if r["round"] >= 1]
    assert all(r["clients_replied"] == 4 for r in train)
    # a client's reply to a train message is the same set of tensors
    client = mixed.clients[3]
    state = dict(out.client_states[3])
    from fedad.core.messages import Message

    reply = algo.handlers()["train"](state, client, Message("train", out.result.arrays, {}))
    assert set(reply.arrays) == every - {GRAPH_INPUT_LAYER}
    assert unprefixed(state, "own")[GRAPH_INPUT_LAYER].shape == (GRAPH_HIDDEN, 5)
    # every client's detector: the global rest and its own input layer
    layers = []
    for cid, m in out.evaluations.items():
        own = unprefixed(m.arrays, "detector")
        for k, v in out.result.arrays.items():
            np.testing.assert_array_equal(own[k], v, err_msg=f"{k} of client {cid}")
        layers.append(own[GRAPH_INPUT_LAYER])
    # clients of one width start from the same seeded input layer and then train apart
    assert layers[0].shape == layers[2].shape and not np.array_equal(layers[0], layers[2])


@pytest.mark.parametrize("name", METHODS)
def test_graph_baselines_are_deterministic(name: str, mixed: Federation) -> None:
    _, a = _run(name, mixed, seed=5)
    _, b = _run(name, mixed, seed=5)
    for cid in a.evaluations:
        np.testing.assert_array_equal(
            a.evaluations[cid].arrays["score"], b.evaluations[cid].arrays["score"]
        )


@pytest.mark.parametrize("name", METHODS)
def test_saved_graph_detectors_round_trip(name: str, mixed: Federation, tmp_path: Path) -> None:
    algo, out = _run(name, mixed, rounds=1)
    metrics, _ = summarize("m", algo, out)
    save_checkpoint(tmp_path, "m", algo, out)
    (tmp_path / "metrics.json").write_text(json.dumps({"methods": {"m": metrics}}))
    run = load_run(tmp_path)
    for cid, m in out.evaluations.items():
        d = run.detector("m", cid)
        x = mixed.clients[cid].x_test
        np.testing.assert_allclose(d.score(x), m.arrays["score"], rtol=1e-6, atol=1e-9)
        np.testing.assert_array_equal(d.predict(x), m.arrays["pred"])


def test_mixed_widths_on_flower_equal_inprocess(
    mixed: Federation, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The same run on Flower's in-memory grid (as a simulation, so the personalised
    detectors come back): the same evaluate replies, the clients' input layers included."""
    pytest.importorskip("flwr")
    from fedad.federation import build_federation
    from fedad.fl.flower.server import serve
    from fedad.fl.flower.spec import RunSpec
    from fedad.resolve import build_algorithms
    from fedad.runner import run_method
    from tests.fl.flower.fake_flower import FakeFlowerGrid, as_server_app

    monkeypatch.setenv("FEDAD_FLOWER_CACHE", str(tmp_path / "cache"))
    as_server_app(monkeypatch)
    raw = {
        "seed": 1,
        "rounds": 2,
        "data": {"name": "bl_graph_w3", "normal": [0], "anomaly": [3, 4],
                 "sources": ["bl_graph_w5"]},
        "partition": {"scheme": "by-source", "clients": 4},
        "engine": {"progress": False},
        "methods": [{"name": "fedprox", "detector": "deepsvdd"}],
    }  # fmt: skip
    cfg = parse_config(raw)
    fed = build_federation(cfg)
    alg = build_algorithms(cfg, fed)["fedprox"]
    ref = run_method(cfg, alg, fed)
    spec = RunSpec.build(cfg, alg)
    grid = FakeFlowerGrid(spec, partitions=len(fed.clients), sim_spec=True)
    out = serve(grid, spec, alg, poll_interval=0.0)
    assert out.events == ref.events == []
    assert sorted(out.evaluations) == sorted(ref.evaluations) == [0, 1, 2, 3]
    for cid, m in ref.evaluations.items():
        assert "detector/" + GRAPH_INPUT_LAYER in m.arrays
        assert set(out.evaluations[cid].arrays) == set(m.arrays)
        for k, a in m.arrays.items():
            np.testing.assert_array_equal(out.evaluations[cid].arrays[k], a, err_msg=k)
