"""GCFL: clients split into clusters by their updates, FedAvg within each cluster."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch_geometric")

from fedad.core.algorithm import Setup, build_algorithm
from fedad.core.messages import Message, unprefixed
from fedad.core.types import ClientData, Federation, GraphSet, concat
from fedad.fl.drive import RunOutcome
from fedad.fl.engine import run_inprocess
from fedad.methods.gcfl.cluster import bipartition, cosine_distances, dtw, update_norms
from fedad.methods.gcfl.federated import GCFL, REL_EPS1, REL_EPS2, cluster_arrays, split_thresholds
from tests.conftest import make_federation


def two_families(per: int = 2, n: int = 30, seed: int = 0) -> Federation:
    """``per`` clients of sparse rings, then ``per`` clients of dense random graphs (the
    other family is each one's anomaly)."""
    rng = np.random.default_rng(seed)

    def ring(m: int) -> GraphSet:
        out = []
        for _ in range(m):
            k = int(rng.integers(5, 9))
            e = np.stack([np.arange(k), (np.arange(k) + 1) % k])
            out.append((rng.normal(0, 1, (k, 3)), np.concatenate([e, e[::-1]], 1)))
        return GraphSet.from_graphs(out)

    def dense(m: int) -> GraphSet:
        out = []
        for _ in range(m):
            k = int(rng.integers(8, 12))
            a, b = np.nonzero(np.triu(rng.random((k, k)) < 0.6, 1))
            e = np.concatenate([np.stack([a, b]), np.stack([b, a])], 1)
            out.append((rng.normal(0, 1, (k, 3)), e))
        return GraphSet.from_graphs(out)

    cs = []
    for c in range(2 * per):
        own, other = (ring, dense) if c < per else (dense, ring)
        cs.append(ClientData(
            client_id=c, x_train=own(n), y_train=np.zeros(n, np.int64),
            c_train=np.zeros(n, np.int64), x_test=concat([own(6), other(3)]),
            y_test=np.r_[np.zeros(6), np.ones(3)].astype(np.int64),
        ))  # fmt: skip
    return Federation(name="two-families", kind="graph", feature_shape=(3,), clients=cs,
                      normal_classes=[0], anomaly_classes=[1], server_normal=None)  # fmt: skip


def _run(fed: Federation, rounds: int = 2, seed: int = 0, **params: Any) -> tuple[GCFL, RunOutcome]:
    setup = Setup("graph", fed.feature_shape, rounds=rounds, seed=seed, contamination=0.1,
                  num_clients=len(fed.clients))  # fmt: skip
    algo = build_algorithm("gcfl", dict(params), setup)
    assert isinstance(algo, GCFL)
    return algo, run_inprocess(algo, fed, rounds=rounds, seed=seed)


# ------------------------------------------------------------------------------ pure parts


def test_update_norms_dtw_cosine_and_bipartition() -> None:
    a, b = np.array([1.0, 0.0]), np.array([-1.0, 0.0])
    assert update_norms([a, b]) == (0.0, 1.0)
    assert dtw([1, 2, 3], [1, 2, 2, 3]) == 0.0  # a warped copy
    assert dtw([0, 0], [1, 1]) == 2.0
    d = cosine_distances([a, a * 2, b, b * 3])
    np.testing.assert_allclose(d[0], [0, 0, 2, 2], atol=1e-12)
    assert bipartition(d) == ([0, 1], [2, 3])
    assert bipartition(np.zeros((3, 3)))[1] == [2]  # no structure: still two groups


# ---------------------------------------------------------------------------- the protocol


def test_clients_of_two_graph_families_are_split_into_their_families() -> None:
    """The GCFL criterion holds on two families with the default parameters; one split, the
    clusters are the families, and clients of different clusters get different models."""
    fed = two_families(per=3)
    _, out = _run(fed, rounds=4)
    assert out.events == []
    assert [r["clusters"] for r in out.history if r["round"] >= 1] == [1, 1, 2, 2]
    assert out.history[3]["mean_update_norm"] < 0.1 < 0.12 < out.history[3]["max_update_norm"]
    np.testing.assert_array_equal(out.result.arrays["membership"], [0, 0, 0, 1, 1, 1])
    key = "phi.gin.convs.1.nn.0.weight"
    m0, m1 = (unprefixed(out.result.arrays, f"cluster{c}")[key] for c in (0, 1))
    assert not np.array_equal(m0, m1)
    got = {c: cluster_arrays(dict(out.result.arrays), c)[key] for c in range(6)}
    assert all(np.array_equal(got[c], m0 if c < 3 else m1) for c in range(6))


def test_the_cosine_and_dtw_variants_group_the_families() -> None:
    fed = two_families(per=2)
    _, cos = _run(fed, rounds=4)
    np.testing.assert_array_equal(cos.result.arrays["membership"], [0, 0, 1, 1])
    # GCFL+ needs norm sequences that differ: several Adam steps per round
    _, seq = _run(fed, rounds=6, variant="gcfl+", batch_size=8, seq_length=3,
                  eps1=1.0, eps2=0.0)  # fmt: skip
    np.testing.assert_array_equal(seq.result.arrays["membership"], [0, 0, 1, 1])
    # split once 3 norms are recorded (round 3, after the 2 warm-up rounds)
    assert [r["clusters"] for r in seq.history if r["round"] >= 1][:3] == [1, 1, 2]


def test_split_thresholds_absolute_or_relative_to_the_median_norm() -> None:
    assert split_thresholds([1.0, 2.0, 9.0], 0.3, 0.5) == (0.3, 0.5)
    e1, e2 = split_thresholds([1.0, 2.0, 9.0], None, None)
    assert (e1, e2) == pytest.approx((REL_EPS1 * 2.0, REL_EPS2 * 2.0))
    # one Adam step of the default GIN: the absolute thresholds measured for it
    e1, e2 = split_thresholds([0.143] * 4, None, None)
    assert (e1, e2) == pytest.approx((0.1, 0.12), abs=2e-3)


def test_several_steps_per_round_still_split_the_families() -> None:
    """Updates of several Adam steps are longer than one step's: absolute thresholds made
    for one step never split, the relative default does, into the families."""
    fed = two_families(per=3)
    _, rel = _run(fed, rounds=4, batch_size=4)
    _, ab = _run(fed, rounds=4, batch_size=4, eps1=0.1, eps2=0.12)
    assert rel.history[-1]["mean_update_norm"] > 0.1  # longer than one step's updates
    np.testing.assert_array_equal(rel.result.arrays["membership"], [0, 0, 0, 1, 1, 1])
    assert ab.history[-1]["clusters"] == 1


def test_one_family_stays_one_cluster() -> None:
    _, out = _run(make_federation("graph", clients=4), rounds=4)
    assert out.events == []
    assert out.history[-1]["clusters"] == 1
    np.testing.assert_array_equal(out.result.arrays["membership"], [0, 0, 0, 0])


def test_what_travels_is_the_cluster_model_without_the_input_layer(
    delivered: list[tuple[int, Message, Message | None]],
) -> None:
    fed = two_families(per=2)
    algo, out = _run(fed, rounds=4)
    det = algo.make_detector().build()
    shared = set(det.shared_arrays())  # type: ignore[union-attr]
    assert "phi.gin.convs.0.nn.0.weight" not in shared
    train = [(n, m, r) for n, m, r in delivered if m.kind == "train"]
    assert len(train) == 16
    for _, msg, reply in train:
        assert reply is not None and set(msg.arrays) == set(reply.arrays) == shared
    # round 4 (after the split in round 3): clients 0, 1 and 2, 3 receive different models
    last = {n: m.arrays["phi.gin.convs.1.nn.0.weight"] for n, m, _ in train[-4:]}
    assert np.array_equal(last[0], last[1]) and np.array_equal(last[2], last[3])
    assert not np.array_equal(last[0], last[2])
    # each client keeps its own input layer
    own = [out.client_states[c]["own/phi.gin.convs.0.nn.0.weight"] for c in range(4)]
    assert not np.array_equal(own[0], own[1])


def test_scores_shape_and_determinism() -> None:
    fed = two_families(per=2)
    _, a = _run(fed, rounds=3)
    _, b = _run(fed, rounds=3)
    for cid, m in a.evaluations.items():
        s = m.arrays["score"]
        assert s.shape == fed.clients[cid].y_test.shape and np.all(np.isfinite(s))
        np.testing.assert_array_equal(s, b.evaluations[cid].arrays["score"])


def test_bad_params_are_one_line_errors() -> None:
    from fedad.core.errors import ConfigError

    fed = make_federation("graph")
    setup = Setup("graph", fed.feature_shape, rounds=1, seed=0, contamination=0.1,
                  num_clients=3)  # fmt: skip
    with pytest.raises(ConfigError, match="variant"):
        build_algorithm("gcfl", {"variant": "kmeans"}, setup)
    with pytest.raises(ConfigError, match="eps1"):
        build_algorithm("gcfl", {"eps1": 0}, setup)
