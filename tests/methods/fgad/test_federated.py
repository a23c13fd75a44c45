"""FGAD's protocol: only the student head travels, the rest stays on the client."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch_geometric")

from fedad.core.algorithm import Setup, build_algorithm
from fedad.core.messages import Message
from fedad.core.types import Federation
from fedad.fl.drive import RunOutcome
from fedad.fl.engine import run_inprocess
from fedad.methods.fgad.federated import FGAD
from tests.conftest import make_federation, mixed_width_graph_federation

FAST = {"hidden": 4, "layers": 2, "gen_hidden": 4, "gen_layers": 1, "pretrain_epochs": 1}


def _run(fed: Federation, rounds: int = 2, seed: int = 3, **params: Any) -> tuple[FGAD, RunOutcome]:
    setup = Setup(
        fed.kind, fed.feature_shape, rounds=rounds, seed=seed, contamination=0.1,
        num_clients=len(fed.clients),
    )  # fmt: skip
    algo = build_algorithm("fgad", {**FAST, **params}, setup)
    assert isinstance(algo, FGAD)
    return algo, run_inprocess(algo, fed, rounds=rounds, seed=seed)


def test_only_the_student_head_goes_up_and_its_bytes_are_its_size(
    delivered: list[tuple[int, Message, Message | None]],
) -> None:
    fed = make_federation("graph", clients=3)
    algo, out = _run(fed)
    assert out.events == []
    head = algo.shared_arrays(algo.make_detector().build(1))
    assert head and all(k.startswith("student.") for k in head)
    size = sum(v.nbytes for v in head.values())
    train = [(m, r) for _, m, r in delivered if m.kind == "train"]
    assert len(train) == 6
    for msg, reply in train:
        assert reply is not None and set(reply.arrays) == set(head)
        assert sum(v.nbytes for v in reply.arrays.values()) == size
        assert set(msg.arrays) == set(head)
    # the backbone, teacher and generator stay in each client's state, and differ
    own = [out.client_states[c]["own/backbone.convs.1.nn.0.weight"] for c in range(3)]
    assert not np.array_equal(own[0], own[1])
    assert "own/generator.gin_mu.convs.0.nn.0.weight" in out.client_states[0]
    # every client scores with the one global head
    heads = [m.arrays["detector/student.0.weight"] for m in out.evaluations.values()]
    assert all(np.array_equal(h, heads[0]) for h in heads)
    np.testing.assert_allclose(heads[0], out.result.arrays["student.0.weight"])


def test_upload_bytes_are_the_head_only_in_the_accounting() -> None:
    fed = make_federation("graph", clients=2)
    algo, head_run = _run(fed, rounds=1)
    algo_all, all_run = _run(fed, rounds=1, collaboration="all")
    head = sum(v.nbytes for v in algo.shared_arrays(algo.make_detector().build(1)).values())
    every = algo_all.shared_arrays(algo_all.make_detector().build(1))
    assert any(k.startswith("backbone.") for k in every)
    assert not any(k.startswith("backbone.convs.0.nn.0.") for k in every)  # width-dependent
    for run, size in ((head_run, head), (all_run, sum(v.nbytes for v in every.values()))):
        up = run.history[0]["bytes_up"]
        assert 2 * size <= up < 2 * size + 2048  # the arrays, plus scalars and framing


def test_no_collaboration_sends_no_arrays(
    delivered: list[tuple[int, Message, Message | None]],
) -> None:
    fed = make_federation("graph", clients=2)
    _, out = _run(fed, collaboration="none")
    assert out.events == []
    for _, msg, reply in delivered:
        if msg.kind == "train":
            assert msg.arrays == {} and reply is not None and reply.arrays == {}


def test_without_distillation_the_teacher_head_travels() -> None:
    fed = make_federation("graph", clients=2)
    _, out = _run(fed, distill=False)
    assert set(out.result.arrays) and all(k.startswith("teacher.") for k in out.result.arrays)
    assert out.history[-1]["loss_kd"] == 0.0
    assert 0.0 <= out.history[-1]["student_flags_generated"] <= 1.0


VGAE_SAMPLED = {
    "gen_output": "linear", "decoder_bias": True, "reconstruction": "balanced",
    "fake_graphs": "sampled",
}  # fmt: skip


def test_without_distillation_the_averaged_teacher_head_scores(
    delivered: list[tuple[int, Message, Message | None]],
) -> None:
    """FGAD_v3 with the generator options: the teacher head goes up, the server's head is the
    example-weighted mean of the replies, and that head (not the untrained student) scores."""
    from fedad.core.detector import detector_from_config
    from fedad.core.messages import unprefixed
    from fedad.evaluation.metrics import auroc

    fed = make_federation("graph", clients=2)
    algo, out = _run(fed, rounds=2, distill=False, **VGAE_SAMPLED)
    assert out.events == []
    assert algo.make_detector().params.head == "teacher"
    last = [(m, r) for _, m, r in delivered if m.kind == "train" and m.get("round") == 2]
    assert len(last) == 2
    n = np.array([r.scalars["num_examples"] for _, r in last if r is not None], dtype=float)
    assert n[0] != n[1]  # unequal clients: the weighting is visible
    for key, value in out.result.arrays.items():
        assert key.startswith("teacher.")
        ups = np.stack([r.arrays[key] for _, r in last if r is not None])
        np.testing.assert_allclose(value, np.tensordot(n / n.sum(), ups, 1), rtol=1e-5, atol=1e-6)
    config = algo.detector_config()
    assert config["params"]["head"] == "teacher"
    for cid, m in out.evaluations.items():
        score = m.arrays["score"]
        np.testing.assert_array_equal(score, m.arrays["teacher_score"])
        own = unprefixed(m.arrays, "detector")
        for key, value in out.result.arrays.items():
            np.testing.assert_array_equal(own[key], value)  # every client: the global teacher
        det = detector_from_config(config, own)
        x_test = fed.clients[cid].x_test
        np.testing.assert_allclose(det.score(x_test), score)  # type: ignore[arg-type]
        as_student = {**config, "params": {**config["params"], "head": "student"}}
        student = detector_from_config(as_student, own)
        assert not np.allclose(student.score(x_test), score)  # type: ignore[arg-type]
    mean_auc = np.mean(
        [auroc(m.arrays["label"], m.arrays["score"]) for m in out.evaluations.values()]
    )
    assert algo.extra_metrics(out.evaluations)["teacher_auroc"] == pytest.approx(mean_auc)


def test_scores_teacher_metric_and_determinism() -> None:
    fed = make_federation("graph", clients=2)
    _, a = _run(fed)
    _, b = _run(fed)
    for cid in a.evaluations:
        sa, sb = a.evaluations[cid].arrays["score"], b.evaluations[cid].arrays["score"]
        np.testing.assert_array_equal(sa, sb)
        assert np.all((sa >= 0) & (sa <= 1))
        assert len(a.evaluations[cid].arrays["teacher_score"]) == len(sa)


def test_distilling_on_generated_graphs_too_teaches_the_student_to_flag_them() -> None:
    fed = make_federation("graph", clients=2)
    _, normal = _run(fed, rounds=3, pretrain_epochs=3)
    _, every = _run(fed, rounds=3, pretrain_epochs=3, distill_on="all")
    flagged = [o.history[-1]["student_flags_generated"] for o in (normal, every)]
    assert flagged[1] > flagged[0]


@pytest.mark.parametrize("widths", ["equal", "mixed"])
def test_two_rounds_on_flowers_grid_equal_in_process(
    monkeypatch: pytest.MonkeyPatch, widths: str
) -> None:
    """Each node keeps its networks between rounds on Flower's grid too: the same evaluate
    replies as in-process after two rounds, also when the clients' node features differ in
    width (each node builds its networks for its own width; only the head is shared)."""
    pytest.importorskip("flwr")
    from fedad.config import parse_config
    from fedad.fl.flower import app as flower_app
    from fedad.fl.flower.server import serve
    from fedad.fl.flower.spec import RunSpec
    from tests.fl.flower.fake_flower import FakeFlowerGrid, as_server_app

    as_server_app(monkeypatch)
    fed = (
        make_federation("graph", clients=3) if widths == "equal" else mixed_width_graph_federation()
    )
    algo, ref = _run(fed, rounds=2)
    cfg = parse_config({"seed": 3, "rounds": 2, "partition": {"clients": 3},
                        "data": {"name": "digits", "normal": [0], "anomaly": [1]},
                        "methods": [{"name": "fgad", "params": FAST}]})  # fmt: skip
    monkeypatch.setattr(flower_app, "_FEDERATIONS", {flower_app.data_key(cfg): fed.clients})
    spec = RunSpec.build(cfg, algo)
    out = serve(
        FakeFlowerGrid(spec, partitions=3, sim_spec=True), spec, algo, poll_interval=0.0,
        server_data=fed.server_normal,
    )  # fmt: skip
    assert out.events == ref.events == []
    for cid, m in ref.evaluations.items():
        got = out.evaluations[cid]
        for k, a in m.arrays.items():
            np.testing.assert_array_equal(got.arrays[k], a, err_msg=f"{k} of client {cid}")
