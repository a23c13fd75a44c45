"""SecAgg+ on Flower, fast: the real protocol (keys, Shamir shares, masks) on the fake grid.

Every test here runs Flower's ``SecAggPlusWorkflow`` and ``secaggplus_mod`` for real, with
the nodes in memory (:class:`~tests.fl.flower.fake_flower.FakeFlowerGrid`), and compares with the
in-process engine, which runs the same arithmetic without masks: the unmasked aggregates
must be identical, bit for bit, also when a node drops out mid-protocol and its masks have
to be rebuilt from the other nodes' shares.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fedad.config import parse_config
from fedad.core.errors import RunError
from fedad.core.messages import Message

pytest.importorskip("flwr", reason="flwr (the flower extra) is not installed")

from fedad.federation import build_federation
from fedad.fl.flower.server import serve
from fedad.fl.flower.spec import RunSpec
from fedad.resolve import build_algorithms
from fedad.runner import run_method
from tests.fl.flower.fake_flower import FakeFlowerGrid, as_server_app

CFG: dict[str, Any] = {
    "seed": 5,
    "rounds": 2,
    "data": {
        "name": "digits",
        "normal": [0, 1, 2],
        "anomaly": [7, 8],
        "max_train_per_client": 40,
        "max_test": 60,
    },
    "partition": {"scheme": "dirichlet", "alpha": 1.0, "clients": 4},
    "privacy": {"secagg": True},
    "methods": [{"name": "fedavg", "params": {"batch_size": 16}}],
}


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    as_server_app(monkeypatch)


def _both(raw: dict[str, Any], method: str = "fedavg", **fake: Any) -> tuple[Any, Any]:
    cfg = parse_config(raw)
    fed = build_federation(cfg)
    alg = build_algorithms(cfg, fed)[method]
    ref = run_method(cfg, alg, fed)
    spec = RunSpec.build(cfg, alg)
    fake_grid = FakeFlowerGrid(spec, partitions=len(fed.clients), **fake)
    out = serve(fake_grid, spec, alg, poll_interval=0.0)
    return ref, out


def _comparable(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k not in ("seconds", "secagg_bytes")} for r in history]


def _assert_same(ref: Any, out: Any) -> None:
    assert _comparable(out.history) == _comparable(ref.history)
    assert (out.bytes_up, out.bytes_down) == (ref.bytes_up, ref.bytes_down)
    for k, a in ref.result.arrays.items():
        np.testing.assert_array_equal(out.result.arrays[k], a, err_msg=k)
    for cid, m in ref.evaluations.items():
        np.testing.assert_array_equal(out.evaluations[cid].arrays["score"], m.arrays["score"])


@pytest.mark.parametrize("detector", ["autoencoder", "deepsvdd"])
def test_real_secagg_equals_the_inprocess_arithmetic(detector: str) -> None:
    method = {"name": "fedavg", "detector": detector, "params": {"batch_size": 16}}
    raw = {**CFG, "methods": [method]}
    ref, out = _both(raw)
    _assert_same(ref, out)
    assert out.events == ref.events == []
    # the key agreement costs bytes of its own, measured on the wire, in every secure phase
    assert all(r["secagg_bytes"] > 0 for r in out.history)
    assert all("secagg_bytes" not in r for r in ref.history)


def test_secagg_uploads_masked_int64_vectors() -> None:
    plain_raw = {**CFG, "privacy": {"secagg": False}}
    cfg = parse_config(plain_raw)
    fed = build_federation(cfg)
    plain = run_method(cfg, build_algorithms(cfg, fed)["fedavg"], fed)
    ref, _ = _both(CFG)
    # float32 model entries become int64 masked entries (plus one weight factor per reply)
    n_params = sum(a.size for a in plain.result.arrays.values())
    replies = sum(r["clients_replied"] for r in plain.history)
    assert ref.bytes_up - plain.bytes_up == replies * (4 * n_params + 8)
    assert ref.bytes_down == plain.bytes_down


def test_node_failing_mid_protocol_has_its_masks_rebuilt(monkeypatch: pytest.MonkeyPatch) -> None:
    """Node 2 has sent its keys and shares, then fails while training: the others' shares
    rebuild its pairwise masks and the sum of the rest comes out exactly."""
    from fedad.components import federated

    real = federated.GlobalModel.client_train

    def flaky(self: Any, state: Any, data: Any, msg: Message) -> Message:
        if data.client_id == 2 and msg.get("round") == 2:
            raise RuntimeError("disk full")
        return real(self, state, data, msg)

    monkeypatch.setattr(federated.GlobalModel, "client_train", flaky)
    ref, out = _both(CFG)
    _assert_same(ref, out)
    assert [r["clients_replied"] for r in out.history] == [4, 3]
    assert out.missing_nodes == [2]
    assert any("node 2 failed in 'train' (SecAgg+ collect_masked_vectors)" in e for e in out.events)
    assert any("disk full" in e for e in ref.events)


def test_malformed_reply_is_refused_by_its_own_client(monkeypatch: pytest.MonkeyPatch) -> None:
    from fedad.components import federated

    real = federated.GlobalModel.client_train

    def poisoned(self: Any, state: Any, data: Any, msg: Message) -> Message:
        reply = real(self, state, data, msg)
        if data.client_id != 1:
            return reply
        arrays = {k: np.full_like(v, np.nan) for k, v in reply.arrays.items()}
        return Message(reply.kind, arrays, reply.scalars)

    monkeypatch.setattr(federated.GlobalModel, "client_train", poisoned)
    ref, out = _both(CFG)
    _assert_same(ref, out)
    assert out.events == ref.events
    assert any("rejected reply of node 1" in e and "NaN" in e for e in out.events)
    assert all(r["clients_rejected"] == 1 for r in out.history)


def test_dead_node_drops_out_at_setup_and_the_rounds_go_on() -> None:
    raw = {**CFG, "engine": {"timeout": 0.3}}
    cfg = parse_config(raw)
    fed = build_federation(cfg)
    alg = build_algorithms(cfg, fed)["fedavg"]
    spec = RunSpec.build(cfg, alg)
    out = serve(FakeFlowerGrid(spec, partitions=4, dead=[3]), spec, alg, poll_interval=0.01)
    assert out.missing_nodes == [3]
    assert [r["clients_replied"] for r in out.history] == [3, 3]
    assert "node 3: no reply to 'train' (SecAgg+ setup) within 0.3 s" in out.events
    assert all(np.all(np.isfinite(a)) for a in out.result.arrays.values())


def test_too_few_nodes_for_the_threshold_halt_the_phase_not_the_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two of four nodes dead, threshold 3 of 4 shares: each round's phase halts, the rounds
    go on with the model unchanged, and a run whose model was never trained ends in a
    one-line error (no success reported for an untrained model)."""
    raw = {
        **CFG,
        "engine": {"timeout": 0.3},
        "privacy": {"secagg": True, "secagg_threshold": 0.75},
    }
    cfg = parse_config(raw)
    fed = build_federation(cfg)
    alg = build_algorithms(cfg, fed)["fedavg"]
    spec = RunSpec.build(cfg, alg)
    with pytest.raises(RunError, match="no client answered in any round"):
        serve(FakeFlowerGrid(spec, partitions=4, dead=[0, 3]), spec, alg, poll_interval=0.01)
    for r in (1, 2):
        assert f"round {r}: secure aggregation halted" in caplog.text
        assert f"round {r}: no valid replies; the global model is unchanged" in caplog.text


def test_seeded_rounding_leaves_numpys_global_stream_alone() -> None:
    np.random.seed(123)
    expected = np.random.rand(3)
    np.random.seed(123)
    _both(CFG)
    np.testing.assert_array_equal(np.random.rand(3), expected)


@pytest.mark.parametrize("n", [2, 3, 4, 7, 10, 31, 100])
@pytest.mark.parametrize(
    ("shares", "threshold"), [("auto", 0.5), (1.0, 0.5), (0.3, 0.5), (0.5, 0.9), (5, 3)]
)
def test_protocol_sizes_are_flowers(n: int, shares: float, threshold: float) -> None:
    """Both engines size the protocol alike: the in-process rule equals Flower's setup."""
    from flwr.app import Context, RecordDict
    from flwr.server.compat.legacy_context import LegacyContext
    from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
    from flwr.server.workflow.secure_aggregation.secaggplus_workflow import WorkflowState

    from fedad.core.secagg import SecAggSettings
    from fedad.fl.flower.secagg import PhaseStrategy, SecAggPlus, encode_fitins

    fitins = {i: encode_fitins(Message("train"), {}, [], 1.0) for i in range(n)}
    ctx = LegacyContext(Context(0, 0, {}, RecordDict(), {}), strategy=PhaseStrategy(fitins))
    from flwr.app import ArrayRecord, ConfigRecord

    ctx.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord({"current_round": 1})
    ctx.state.array_records[MAIN_PARAMS_RECORD] = ArrayRecord()

    class Silent:
        def send_and_receive(self, messages: Any, timeout: Any = None) -> list[Any]:
            return []

    settings = SecAggSettings(8.0, shares, threshold)
    state = WorkflowState()
    workflow = SecAggPlus(settings.flower_shares(n), threshold)
    workflow.setup_stage(Silent(), ctx, state)  # type: ignore[arg-type]
    expected = settings.protocol_sizes(n)
    assert (state.num_shares, state.threshold) == expected
