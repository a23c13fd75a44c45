"""FedStar: only the structure encoder travels; the feature encoder and centre stay home."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch_geometric")

from fedad.core.algorithm import Setup, build_algorithm
from fedad.core.messages import Message
from fedad.core.types import Federation, GraphSet
from fedad.fl.drive import RunOutcome
from fedad.fl.engine import run_inprocess
from fedad.methods.fedstar.detector import FedStarDetector
from fedad.methods.fedstar.federated import FedStar
from fedad.methods.fedstar.model import structure_features
from tests.conftest import make_federation, mixed_width_graph_federation

FAST = {"hidden": 8, "layers": 2}


def _run(
    fed: Federation, rounds: int = 2, seed: int = 0, **params: Any
) -> tuple[FedStar, RunOutcome]:
    setup = Setup("graph", fed.feature_shape, rounds=rounds, seed=seed, contamination=0.1,
                  num_clients=len(fed.clients))  # fmt: skip
    algo = build_algorithm("fedstar", {**FAST, **params}, setup)
    assert isinstance(algo, FedStar)
    return algo, run_inprocess(algo, fed, rounds=rounds, seed=seed)


def test_structure_features_are_rw_return_probabilities_and_one_hot_degree() -> None:
    import torch
    from torch_geometric.transforms import AddRandomWalkPE

    # a triangle with a pendant node, then a 4-ring
    tri = np.array([[0, 1, 1, 2, 2, 0, 2, 3], [1, 0, 2, 1, 0, 2, 3, 2]])
    ring = np.array([[0, 1, 1, 2, 2, 3, 3, 0], [1, 0, 2, 1, 3, 2, 0, 3]])
    gs = GraphSet.from_graphs([(np.zeros((4, 2)), tri), (np.ones((4, 2)), ring)])
    b = gs.batch()
    s = structure_features(b.edge_index, b.batch, 2, n_rw=5, n_dg=3)
    assert s.shape == (8, 8)
    ref = torch.cat([AddRandomWalkPE(5, "pe")(d).pe for d in gs.to_pyg()])
    torch.testing.assert_close(s[:, :5], ref)
    # degrees 2, 2, 3 (clipped to 2), 1; every ring node 2
    assert s[:, 5:].argmax(1).tolist() == [2, 2, 2, 1, 2, 2, 2, 2]


def test_only_the_structure_encoder_travels(
    delivered: list[tuple[int, Message, Message | None]],
) -> None:
    fed = make_federation("graph", clients=3)
    algo, out = _run(fed)
    assert out.events == []
    struct = algo.make_detector().build(1).shared_arrays()
    assert struct and all(k.startswith("struct.") for k in struct)
    size = sum(v.nbytes for v in struct.values())
    train = [(m, r) for _, m, r in delivered if m.kind == "train"]
    assert len(train) == 6
    for msg, reply in train:
        assert reply is not None and set(msg.arrays) == set(reply.arrays) == set(struct)
        assert sum(v.nbytes for v in reply.arrays.values()) == size
    assert 3 * size <= out.history[1]["bytes_up"] < 3 * size + 2048
    # the feature encoders and centres stay on the clients, and differ
    st = out.client_states
    assert not np.array_equal(st[0]["own/feat.convs.1.nn.0.weight"],
                              st[1]["own/feat.convs.1.nn.0.weight"])  # fmt: skip
    assert not np.array_equal(st[0]["own/center"], st[1]["own/center"])
    # every client scores with the one global structure encoder
    key = "struct.convs.1.nn.0.weight"
    for m in out.evaluations.values():
        np.testing.assert_array_equal(m.arrays[f"detector/{key}"], out.result.arrays[key])


def test_clients_of_different_widths_share_the_structure_encoder() -> None:
    fed = mixed_width_graph_federation()
    _, out = _run(fed)
    assert out.events == []
    h = FAST["hidden"] * FAST["layers"]
    widths = [out.client_states[c]["own/feat.convs.0.nn.0.weight"].shape[1] - h for c in range(3)]
    assert widths == [3, 3, 5]
    for cid, m in out.evaluations.items():
        assert m.arrays["score"].shape == fed.clients[cid].y_test.shape
        det = FedStarDetector(**FAST).set_arrays(
            {k.removeprefix("detector/"): v for k, v in m.arrays.items()
             if k.startswith("detector/")}
        )  # fmt: skip
        assert det.params.width == widths[cid]
        np.testing.assert_allclose(det.score(fed.clients[cid].x_test), m.arrays["score"],
                                   rtol=1e-6)  # fmt: skip


def test_scores_determinism_and_separation() -> None:
    fed = make_federation("graph", clients=2)
    _, a = _run(fed, rounds=3)
    _, b = _run(fed, rounds=3)
    for cid, m in a.evaluations.items():
        s = m.arrays["score"]
        assert np.all(np.isfinite(s)) and np.all(s >= 0)
        np.testing.assert_array_equal(s, b.evaluations[cid].arrays["score"])
        y = m.arrays["label"]
        assert s[y == 1].mean() > s[y == 0].mean()  # cliques far from rings


def test_stand_alone_fit_scores_one_number_per_graph() -> None:
    c = make_federation("graph").clients[0]
    det = FedStarDetector(epochs=3, **FAST).fit(c.x_train)  # type: ignore[arg-type]
    s = det.score(c.x_test)  # type: ignore[arg-type]
    assert s.shape == c.y_test.shape
    assert np.mean(det.score(c.x_train) > det.threshold_) <= 0.1  # type: ignore[arg-type]
    assert not any("bias" in n for n, _ in det.model_.named_parameters())
