"""ProtoFL's protocol: private prototypes, new clients, determinism, heads, roles."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fedad.core.algorithm import Setup, build_algorithm
from fedad.core.messages import Message
from fedad.core.types import Federation
from fedad.fl.drive import RunOutcome
from fedad.fl.engine import run_inprocess
from fedad.fl.server_inputs import public_set
from fedad.methods.protofl.detector import ProtoFLDetector
from fedad.methods.protofl.federated import ProtoFL, farthest_point
from tests.conftest import make_federation

FAST = {
    "trunk": "cnn",
    "phase1": "federated",
    "flow_epochs": 2,
    "public_n": 16,
    "proto_size": 32,
    "width": 8,
    "rep_dim": 8,
}  # the paper's form (the image defaults are the frozen pretrained trunk)


def _run(
    fed: Federation, rounds: int = 2, seed: int = 3, **params: Any
) -> tuple[ProtoFL, RunOutcome]:
    setup = Setup(
        fed.kind, fed.feature_shape, rounds=rounds, seed=seed, contamination=0.1,
        num_clients=len(fed.clients),
    )  # fmt: skip
    algo = build_algorithm("protofl", {**FAST, **params}, setup)
    assert isinstance(algo, ProtoFL)
    return algo, run_inprocess(algo, fed, rounds=rounds, seed=seed)


def test_each_prototype_reaches_only_its_own_client(
    delivered: list[tuple[int, Message]],
) -> None:
    fed = make_federation("image", clients=4)
    algo, out = _run(fed)
    assert out.events == []
    public = public_set(algo)
    assert public is not None
    want = algo.prototypes(public, 4)
    got: dict[int, list[np.ndarray]] = {}
    for nid, msg in delivered:
        if "prototype" in msg.arrays:
            got.setdefault(nid, []).append(msg.arrays["prototype"])
    assert sorted(got) == [0, 1, 2, 3]
    for nid, protos in got.items():
        assert len(protos) == 1  # sent once (everyone acknowledged)
        np.testing.assert_array_equal(protos[0], want[nid])
        # no other client's prototype anywhere in what this client received
        others = [want[j] for j in range(4) if j != nid]
        for m in (m for n, m in delivered if n == nid):
            for arr in m.arrays.values():
                assert not any(arr.shape == o.shape and np.array_equal(arr, o) for o in others)
    # distinct prototypes, one per client
    assert len({w.tobytes() for w in want}) == 4
    for cid in range(4):
        np.testing.assert_array_equal(out.client_states[cid]["prototype"], want[cid])


def test_new_clients_never_receive_a_phase_1_message(
    delivered: list[tuple[int, Message]],
) -> None:
    fed = make_federation("image", clients=4)
    algo, out = _run(fed, rounds=2, new_clients=2)
    assert out.events == []
    kinds: dict[int, set[str]] = {}
    for nid, msg in delivered:
        kinds.setdefault(nid, set()).add(msg.kind)
    assert kinds[0] == kinds[1] == {"prototype", "train", "evaluate"}
    assert kinds[2] == kinds[3] == {"evaluate"}
    assert "prototype" not in out.client_states[2]
    # the new clients still have their own head on the global trunk
    assert sorted(out.evaluations) == [0, 1, 2, 3]
    extra = algo.extra_metrics(out.evaluations)
    assert [r["role"] for r in extra["roles"]] == ["joined", "joined", "new", "new"]
    assert extra["auroc_joined"] is not None and extra["auroc_new"] is not None
    assert out.history[0]["clients_new"] == 2


def test_same_seed_same_scores_other_seed_other_scores() -> None:
    fed = make_federation("image")
    _, a = _run(fed, rounds=1)
    _, b = _run(fed, rounds=1)
    _, c = _run(fed, rounds=1, seed=4)
    for cid in a.evaluations:
        np.testing.assert_array_equal(
            a.evaluations[cid].arrays["score"], b.evaluations[cid].arrays["score"]
        )
    assert not np.array_equal(a.evaluations[0].arrays["score"], c.evaluations[0].arrays["score"])


@pytest.mark.parametrize("head", ["flow", "kde", "gaussian", "ocsvm"])
def test_heads_save_and_load(head: str) -> None:
    fed = make_federation("vector")
    algo, out = _run(fed, rounds=1, head=head)
    assert out.events == []
    for cid, m in out.evaluations.items():
        arrays = {
            k[len("detector/") :]: v for k, v in m.arrays.items() if k.startswith("detector/")
        }
        det = ProtoFLDetector(**algo.make_detector().get_params()).set_arrays(arrays)
        np.testing.assert_allclose(det.score(fed.clients[cid].x_test), m.arrays["score"], rtol=1e-6)


def test_too_many_new_clients_is_a_config_error() -> None:
    from fedad.core.errors import ConfigError

    setup = Setup("image", (1, 8, 8), rounds=1, seed=0, contamination=0.1, num_clients=3)
    with pytest.raises(ConfigError, match="new_clients"):
        build_algorithm("protofl", {"new_clients": 3}, setup)


def test_farthest_point_picks_distinct_dissimilar_rows() -> None:
    feats = np.array([[1.0, 0.0], [0.99, 0.1], [0.0, 1.0], [-1.0, 0.0]])
    idx = farthest_point(feats, 3, np.random.default_rng(0))
    assert len(set(idx)) == 3
    assert {2, 3} <= set(idx) or {0, 3} <= set(idx)
    with pytest.raises(ValueError):
        farthest_point(feats, 5, np.random.default_rng(0))


def test_local_phase1_sends_no_model_and_keeps_each_encoder_home(
    delivered: list[tuple[int, Message]],
) -> None:
    fed = make_federation("image", clients=3)
    _, out = _run(fed, rounds=2, phase1="local")
    assert out.events == []
    for _, msg in delivered:
        if msg.kind == "train":
            assert set(msg.arrays) <= {"prototype"}  # no global weights go out
        if msg.kind == "evaluate":
            assert msg.arrays == {}
    assert out.result.arrays == {}
    owns = [
        {k: v for k, v in out.client_states[c].items() if k.startswith("own/")} for c in range(3)
    ]
    assert all(owns)
    key = next(k for k in owns[0] if k.startswith("own/trunk.") and owns[0][k].ndim > 1)
    assert not np.array_equal(owns[0][key], owns[1][key])  # each trained its own
    # each client's saved detector carries its own trunk
    for cid, m in out.evaluations.items():
        saved = m.arrays["detector/" + key[len("own/") :]]
        np.testing.assert_array_equal(saved, owns[cid][key])
    # only scalars come back: far fewer bytes up than the federated run
    _, fed_out = _run(fed, rounds=2)
    assert out.bytes_up * 10 < fed_out.bytes_up


def test_local_phase1_with_new_clients_is_a_config_error() -> None:
    from fedad.core.errors import ConfigError

    setup = Setup("image", (1, 8, 8), rounds=1, seed=0, contamination=0.1, num_clients=3)
    with pytest.raises(ConfigError, match="phase1"):
        build_algorithm("protofl", {"new_clients": 1, "phase1": "local"}, setup)
