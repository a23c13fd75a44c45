"""Flower adapter, fast: RecordDict round trip, run spec, the grid adapter on a fake Flower grid.

The fake grid serialises every message the way Flower does on the wire (deflate/inflate of the
object tree) and runs the real :class:`~fedad.fl.flower.app.FedadClientApp` per node with its
own ``Context``, so the whole adapter (handshake, routing by phase name, client state in
``context.state``, byte counting, timeouts, errors) is exercised without processes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedad.config import parse_config
from fedad.core.messages import Message

flwr = pytest.importorskip("flwr", reason="flwr (the flower extra) is not installed")

from flwr.app import Message as FlowerMessage  # noqa: E402
from flwr.app import RecordDict  # noqa: E402

from fedad.federation import build_federation  # noqa: E402
from fedad.fl.flower.codec import (  # noqa: E402
    STATE_KEY,
    from_recorddict,
    recorddict_meta,
    route,
    state_from_record,
    to_recorddict,
)
from fedad.fl.flower.results import ResultsDir  # noqa: E402
from fedad.fl.flower.server import serve  # noqa: E402
from fedad.fl.flower.spec import FlowerRunError, RunSpec  # noqa: E402
from fedad.resolve import build_algorithms  # noqa: E402
from fedad.runner import run_method  # noqa: E402
from tests.fl.flower.fake_flower import FakeFlowerGrid, as_server_app, wire  # noqa: E402

CFG = {
    "seed": 3,
    "rounds": 2,
    "data": {
        "name": "digits",
        "normal": [0, 1, 2],
        "anomaly": [7, 8],
        "max_train_per_client": 40,
        "max_test": 60,
    },
    "partition": {"scheme": "iid", "clients": 3, "contamination": 0.05},
    "methods": [{"name": "fedavg", "detector": "autoencoder", "params": {"batch_size": 16}}],
}


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    as_server_app(monkeypatch)


# ------------------------------------------------------------------------- conversion


ARRAYS = {
    "f32": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4),
    "f64": np.array([np.pi, -0.0, np.inf, np.nan, 1e-300]),
    "i64": np.array([-(2**63), 2**63 - 1, 0], dtype=np.int64),
    "i32": np.arange(5, dtype=np.int32),
    "u8": np.arange(7, dtype=np.uint8),
    "bool": np.array([True, False, True]),
    "scalar0d": np.array(2.5, dtype=np.float32),
    "empty": np.zeros((0, 3), dtype=np.float64),
    "fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
    "strided": np.arange(10.0)[::3],
    "big-endian": np.arange(3, dtype=">f4"),
    "detector/w": np.ones((2, 2), np.float16),
}
SCALARS: dict[str, Any] = {
    "round": 3,
    "neg": -(2**62),
    "loss": 0.1 + 0.2,
    "nan": float("nan"),
    "flag": True,
    "off": False,
    "name": "héllo wörld ✓",
    "empty": "",
    "tiny": 5e-324,
}


@pytest.mark.parametrize("through_wire", [False, True])
def test_recorddict_round_trip_is_lossless(through_wire: bool) -> None:
    m = Message("train", ARRAYS, SCALARS)
    rd = to_recorddict(m, meta={"partition-id": 2, "seconds": 0.5})
    if through_wire:
        rd = wire(rd)
    back = from_recorddict(rd)
    assert back.kind == "train"
    assert list(back.arrays) == list(m.arrays)
    for k, a in m.arrays.items():
        b = back.arrays[k]
        assert b.dtype == a.dtype and b.shape == a.shape, k
        np.testing.assert_array_equal(b, a)
    assert list(back.scalars) == list(m.scalars)
    for k, v in m.scalars.items():
        w = back.scalars[k]
        assert type(w) is type(v), k
        assert w == v or (v != v and w != w), k  # NaN equals itself here
    assert back.nbytes == m.nbytes
    assert recorddict_meta(rd) == {"partition-id": 2, "seconds": 0.5}


def test_empty_message_round_trips() -> None:
    back = from_recorddict(wire(to_recorddict(Message("evaluate"))))
    assert back.kind == "evaluate" and not back.arrays and not back.scalars


def test_unsendable_values_raise() -> None:
    with pytest.raises(TypeError, match="64-bit"):
        to_recorddict(Message("x", {}, {"n": 2**70}))
    with pytest.raises(TypeError, match="object"):
        to_recorddict(Message("x", {"o": np.array([None, 1], dtype=object)}))
    with pytest.raises(ValueError, match="not a fedad message"):
        from_recorddict(RecordDict())


def test_routes_follow_flower_categories() -> None:
    assert route("train") == "train"
    assert route("evaluate") == "evaluate"
    assert route("center") == "query.center"
    assert route("stats-1").startswith("query.fedad_x")
    assert route("stats-1").split(".")[1].isidentifier()


# ------------------------------------------------------------------------- run spec


def _setup() -> tuple[Any, Any, Any]:
    cfg = parse_config(CFG)
    fed = build_federation(cfg)
    alg = build_algorithms(cfg, fed)["fedavg"]
    return cfg, fed, alg


def test_run_spec_round_trips_through_run_config() -> None:
    cfg, _, alg = _setup()
    spec = RunSpec.build(cfg, alg, results_dir="/r")
    rc = spec.to_run_config()
    assert all(isinstance(v, str | float) for v in rc.values())
    again = RunSpec.from_run_config(rc)
    assert again == spec
    assert again.config() == cfg
    rebuilt = again.build_algorithm()
    assert type(rebuilt) is type(alg) and rebuilt.params == alg.params
    assert rebuilt.setup == alg.setup and rebuilt.detector == alg.detector
    assert spec.num_partitions == 3


# ------------------------------------------------------------------------- fake grid


def _inprocess(cfg: Any, fed: Any, alg: Any) -> Any:
    return run_method(cfg, alg, fed)


def _comparable(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in history]


@pytest.mark.parametrize("sim_spec", [False, True])
def test_fake_flower_grid_equals_inprocess(sim_spec: bool) -> None:
    cfg, fed, alg = _setup()
    ref = _inprocess(cfg, fed, alg)
    spec = RunSpec.build(cfg, alg)
    fake = FakeFlowerGrid(spec, sim_spec=sim_spec)
    out = serve(fake, spec, alg, poll_interval=0.0)
    assert out.bytes_up == ref.bytes_up and out.bytes_down == ref.bytes_down
    assert _comparable(out.history) == _comparable(ref.history)
    assert out.events == ref.events == [] and out.missing_nodes == []
    assert sorted(out.evaluations) == [0, 1, 2]
    for cid, m in ref.evaluations.items():
        got = out.evaluations[cid]
        assert got.scalars == m.scalars
        for k in m.arrays:
            np.testing.assert_array_equal(got.arrays[k], m.arrays[k])
    for k, a in ref.result.arrays.items():
        np.testing.assert_array_equal(out.result.arrays[k], a)
    # handlers were reached by phase name: the handshake, two train rounds, evaluation
    kinds = [t for _, t in fake.delivered]
    assert kinds == ["query.fedad_hello"] * 3 + ["train"] * 6 + ["evaluate"] * 3


def test_server_data_learning_curves_and_state_as_inprocess() -> None:
    """ONLAD: server-side data, client state across rounds, ``eval_every`` evaluations."""
    from fedad.resolve import with_server_data

    raw = {**CFG, "engine": {"eval_every": 1}, "methods": [{"name": "onlad-selective"}]}
    cfg = with_server_data(parse_config(raw))
    fed = build_federation(cfg)
    assert fed.server_normal is not None
    alg = build_algorithms(cfg, fed)["onlad-selective"]
    ref = _inprocess(cfg, fed, alg)
    spec = RunSpec.build(cfg, alg)
    from fedad.fl.flower.app import server_normal_of

    server = server_normal_of(spec)  # what the deployment ServerApp derives from the config
    assert isinstance(server, np.ndarray)
    np.testing.assert_array_equal(server, fed.server_normal)
    assert server_normal_of(RunSpec.build(parse_config(CFG), alg)) is None
    out = serve(FakeFlowerGrid(spec), spec, alg, poll_interval=0.0, server_data=server)
    assert _comparable(out.history) == _comparable(ref.history)
    assert any("eval_auroc" in r for r in out.history)
    assert (out.bytes_up, out.bytes_down, out.events) == (ref.bytes_up, ref.bytes_down, ref.events)
    for cid, m in ref.evaluations.items():
        for k in m.arrays:
            np.testing.assert_array_equal(out.evaluations[cid].arrays[k], m.arrays[k])


@pytest.mark.parametrize(
    "extra",
    [
        {"attack": {"kind": "sign-flip", "clients": 1}},
        {"attack": {"kind": "gaussian-data", "clients": 1, "fraction": 0.5}},
        {"engine": {"dropout": 0.3}},
    ],
)
def test_attacks_and_dropout_as_inprocess(extra: dict[str, Any]) -> None:
    cfg = parse_config({**CFG, **extra})
    fed = build_federation(cfg)
    alg = build_algorithms(cfg, fed)["fedavg"]
    ref = _inprocess(cfg, fed, alg)
    spec = RunSpec.build(cfg, alg)
    out = serve(FakeFlowerGrid(spec), spec, alg, poll_interval=0.0)
    assert _comparable(out.history) == _comparable(ref.history)
    assert (out.bytes_up, out.bytes_down, out.events) == (ref.bytes_up, ref.bytes_down, ref.events)
    for k, a in ref.result.arrays.items():
        np.testing.assert_array_equal(out.result.arrays[k], a)


def test_client_state_lives_in_context_state() -> None:
    cfg = parse_config({**CFG, "methods": [{"name": "local", "params": {"batch_size": 16}}]})
    fed = build_federation(cfg)
    alg = build_algorithms(cfg, fed)["local"]
    ref = _inprocess(cfg, fed, alg)
    spec = RunSpec.build(cfg, alg)
    fake = FakeFlowerGrid(spec)
    out = serve(fake, spec, alg, poll_interval=0.0)
    for n, ctx in fake.contexts.items():
        state = state_from_record(ctx.state[STATE_KEY])
        cid = fake.nodes[n]
        assert state.keys() == ref.client_states[cid].keys()
        for k, a in ref.client_states[cid].items():
            np.testing.assert_array_equal(state[k], a)
        np.testing.assert_array_equal(
            out.evaluations[cid].arrays["score"], ref.evaluations[cid].arrays["score"]
        )


@pytest.mark.parametrize("hello", [True, False])
def test_dead_node_is_missing_and_the_round_goes_on(hello: bool) -> None:
    cfg, _, alg = _setup()
    spec = RunSpec.build(cfg, alg)
    spec = RunSpec(**{**spec.__dict__, "timeout": 0.2})
    fake = FakeFlowerGrid(spec, dead=[1], hello_from_dead=hello)
    rows: list[dict[str, Any]] = []
    out = serve(fake, spec, alg, on_round=rows.append, poll_interval=0.01)
    assert out.missing_nodes == [1]
    assert sorted(out.evaluations) == [0, 2]  # a dead node's evaluation is absent
    assert [r["clients_replied"] for r in rows] == [2, 2]
    assert [r["clients_missing"] for r in rows] == [1, 1]
    assert any("no reply" in e and "[1]" in e for e in out.events)
    if hello:  # it died after the handshake: its replies time out
        assert "node 1: no reply to 'train' within 0.2 s" in out.events
    else:  # it never answered: no node holds client 1
        assert "no node holds client(s) [1]" in out.events


def test_too_few_replies_stop_the_run() -> None:
    raw = {**CFG, "engine": {"min_clients": 3, "timeout": 0.2}}
    cfg = parse_config(raw)
    fed = build_federation(cfg)
    alg = build_algorithms(cfg, fed)["fedavg"]
    spec = RunSpec.build(cfg, alg)
    with pytest.raises(FlowerRunError, match=r"only 2 of 3 nodes answered 'train'.*min_clients"):
        serve(FakeFlowerGrid(spec, dead=[2]), spec, alg, poll_interval=0.01)


def test_failing_handler_is_a_failed_node(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, _, alg = _setup()
    spec = RunSpec.build(cfg, alg)
    fake = FakeFlowerGrid(spec)
    from fedad.components import federated

    real = federated.GlobalModel.client_train

    def flaky(self: Any, state: Any, data: Any, msg: Message) -> Message:
        if data.client_id == 2:
            raise RuntimeError("disk full")
        return real(self, state, data, msg)

    monkeypatch.setattr(federated.GlobalModel, "client_train", flaky)
    out = serve(fake, spec, alg, poll_interval=0.0)
    assert out.missing_nodes == [2]
    assert "node 2 failed in 'train': RuntimeError('disk full')" in out.events


def test_malformed_reply_is_rejected_as_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, fed, alg = _setup()
    from fedad.components import federated

    real = federated.GlobalModel.client_train

    def poisoned(self: Any, state: Any, data: Any, msg: Message) -> Message:
        reply = real(self, state, data, msg)
        if data.client_id != 1:
            return reply
        arrays = {k: np.full_like(v, np.nan) for k, v in reply.arrays.items()}
        return Message(reply.kind, arrays, reply.scalars)

    monkeypatch.setattr(federated.GlobalModel, "client_train", poisoned)
    ref = _inprocess(cfg, fed, alg)
    spec = RunSpec.build(cfg, alg)
    out = serve(FakeFlowerGrid(spec), spec, alg, poll_interval=0.0)
    assert any("rejected reply of node 1" in e and "NaN" in e for e in out.events)
    assert out.events == ref.events
    assert _comparable(out.history) == _comparable(ref.history)
    assert out.bytes_up == ref.bytes_up


def test_random_reply_order_changes_nothing() -> None:
    cfg, _, alg = _setup()
    spec = RunSpec.build(cfg, alg)
    rng = np.random.default_rng(0)

    def shuffle(m: list[FlowerMessage]) -> list[FlowerMessage]:
        return [m[i] for i in rng.permutation(len(m))]

    a = serve(FakeFlowerGrid(spec, order=shuffle), spec, alg, poll_interval=0.0)
    b = serve(FakeFlowerGrid(spec, order=lambda m: m), spec, alg, poll_interval=0.0)
    for k in a.result.arrays:
        np.testing.assert_array_equal(a.result.arrays[k], b.result.arrays[k])


# ------------------------------------------------------------------------- results hand-over


def test_results_dir_round_trip(tmp_path: Path) -> None:
    cfg, fed, alg = _setup()
    ref = _inprocess(cfg, fed, alg)
    ref.events.append("round 2: something")
    ref.missing_nodes.append(1)
    rd = ResultsDir(tmp_path)
    for row in ref.history:
        rd.append_round(row)
    assert rd.read_rounds() == ref.history
    assert rd.read_rounds(1) == ref.history[1:]
    rd.write(ref)
    back = rd.read()
    for f in ("history", "events", "bytes_up", "bytes_down", "seconds", "missing_nodes"):
        assert getattr(back, f) == getattr(ref, f), f
    assert back.result.scalars == ref.result.scalars
    for cid, m in ref.evaluations.items():
        assert back.evaluations[cid].scalars == m.scalars
        for k, a in m.arrays.items():
            np.testing.assert_array_equal(back.evaluations[cid].arrays[k], a)
            assert back.evaluations[cid].arrays[k].dtype == a.dtype
    rd.write_error(FlowerRunError("only 1 of 3 nodes answered"))
    assert rd.read_error() == "only 1 of 3 nodes answered"


def test_node_data_cache_key_covers_everything_but_engine_and_methods() -> None:
    from fedad.fl.flower.app import data_key

    base = parse_config(CFG)
    same = parse_config({**CFG, "engine": {"timeout": 5.0}, "methods": [{"name": "local"}]})
    assert data_key(base) == data_key(same)
    for change in (
        {"seed": 4},
        {"partition": {**CFG["partition"], "clients": 4}},
        {"attack": {"kind": "gaussian-data", "clients": 1}},
        {"data": {**CFG["data"], "max_test": 50}},
    ):
        assert data_key(parse_config({**CFG, **change})) != data_key(base), change


@pytest.mark.parametrize("kind", ["image+mask", "graph"])
def test_node_cache_keeps_graphs_and_masks(kind: str, tmp_path: Path) -> None:
    from fedad.core.types import GraphSet
    from fedad.fl.flower.app import _load_client, _save_client
    from tests.conftest import make_federation

    fed = make_federation(kind.split("+")[0], masks=kind.endswith("mask"))
    c = fed.clients[1]
    _save_client(tmp_path / "c.npz", c)
    with np.load(tmp_path / "c.npz", allow_pickle=False) as z:
        assert not any(z[k].dtype == object for k in z.files)
    got = _load_client(tmp_path / "c.npz")
    assert got.client_id == 1 and got.source == c.source
    if isinstance(c.x_train, GraphSet):
        assert got.x_train == c.x_train and got.x_test == c.x_test
        assert got.mask_test is None
    else:
        np.testing.assert_array_equal(got.x_test, c.x_test)
        assert got.mask_test is not None and c.mask_test is not None
        np.testing.assert_array_equal(got.mask_test, c.mask_test)
        assert got.mask_test.dtype == np.uint8
    np.testing.assert_array_equal(got.y_test, c.y_test)


def test_a_damaged_node_cache_file_is_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fedad.fl.flower import app as flower_app

    cfg = parse_config(CFG)
    key = flower_app.data_key(cfg)
    (tmp_path / f"{key}-1.npz").write_bytes(b"PK\x03\x04 not a zip at all")
    monkeypatch.setenv(flower_app.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(flower_app, "_FEDERATIONS", {})
    got = flower_app.client_data(cfg, 1)
    np.testing.assert_array_equal(got.y_test, build_federation(cfg).clients[1].y_test)
    with np.load(tmp_path / f"{key}-1.npz", allow_pickle=False) as z:
        assert "train/x" in z.files  # rewritten
