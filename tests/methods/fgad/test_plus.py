"""``fgad-plus``: the student distils on generated graphs too, only its head travels, its
options were chosen without test labels, and it runs the same everywhere."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("torch_geometric")

from fedad.core.algorithm import Algorithm, Setup, build_algorithm
from fedad.core.messages import Message
from fedad.core.types import Federation, GraphSet
from fedad.fl.drive import RunOutcome
from fedad.fl.engine import run_inprocess
from fedad.methods.fgad import train as fgad_train
from fedad.methods.fgad.detector import FGADDetector
from fedad.methods.fgad.federated import FGAD, FGADParams, FGADPlus, FGADPlusParams
from tests.conftest import make_federation, mixed_width_graph_federation

FAST = {"hidden": 4, "layers": 2, "gen_hidden": 4, "gen_layers": 1, "pretrain_epochs": 1}


def _run(
    name: str, fed: Federation, rounds: int = 2, seed: int = 3, **params: Any
) -> tuple[Algorithm, RunOutcome]:
    setup = Setup(fed.kind, fed.feature_shape, rounds=rounds, seed=seed, contamination=0.1,
                  num_clients=len(fed.clients))  # fmt: skip
    algo = build_algorithm(name, {**FAST, **params}, setup)
    return algo, run_inprocess(algo, fed, rounds=rounds, seed=seed)


def _social(per_class: int = 6) -> GraphSet:
    from fedad.data.graph_domains import make_domain

    ds = make_domain("graphs_social", per_class=per_class)
    x = ds.x[np.flatnonzero(ds.y == 0)]
    assert isinstance(x, GraphSet)
    return x


def test_defaults_are_the_chosen_options_and_fgad_keeps_the_papers() -> None:
    plus, paper = FGADPlusParams(), FGADParams()
    assert (plus.distill_on, plus.fake_graphs, plus.fake_features) == ("all", "sampled", "auto")
    assert (plus.gen_output, plus.decoder_bias, plus.reconstruction) == (
        "linear", True, "balanced",
    )  # fmt: skip
    assert (plus.collaboration, plus.distill, plus.student_ad) == ("head", True, 1.0)
    assert (plus.lr, plus.tau, plus.keep_optimizer) == (paper.lr, paper.tau, False)
    assert FGAD.ParamsModel is FGADParams and FGADPlus.ParamsModel is FGADPlusParams
    assert (paper.distill_on, paper.fake_graphs, paper.gen_output) == ("normal", "soft", "gin")
    assert paper.fake_features == "real" and paper.student_ad == 0.0


@pytest.mark.parametrize("name", ["fgad", "fgad-plus"])
def test_the_students_distillation_batches_hold_generated_graphs_only_under_plus(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every distillation call (eq. 12) is matched with the teacher's logits of the same
    batch (eq. 9's call just before it): under ``fgad-plus`` its targets are the teacher's
    logits of the real graphs *and* of the generated ones; under ``fgad``, of the real ones."""
    calls: list[tuple[str, tuple[torch.Tensor, ...]]] = []
    det_loss, kd_loss = fgad_train.detection_loss, fgad_train.distillation_loss

    def spy_det(real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
        calls.append(("ad", (real.detach().clone(), fake.detach().clone())))
        return det_loss(real, fake)

    def spy_kd(teacher: torch.Tensor, student: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
        calls.append(("kd", (teacher.detach().clone(), student.detach().clone())))
        return kd_loss(teacher, student, tau)

    monkeypatch.setattr(fgad_train, "detection_loss", spy_det)
    monkeypatch.setattr(fgad_train, "distillation_loss", spy_kd)
    _run(name, make_graph_fed(), rounds=1)
    kd = [i for i, (kind, _) in enumerate(calls) if kind == "kd"]
    assert kd  # the student was distilled
    for i in kd:
        teacher = calls[i][1][0]
        real, fake = calls[max(j for j in range(i) if calls[j][0] == "ad")][1]
        if name == "fgad-plus":
            assert len(fake) > 0 and torch.equal(teacher, torch.cat([real, fake]))
        else:
            assert torch.equal(teacher, real)


def make_graph_fed() -> Federation:
    return make_federation("graph", clients=2)


def test_the_upload_is_the_student_head_and_no_more_than_fgads(
    delivered: list[tuple[int, Message, Message | None]],
) -> None:
    fed = make_graph_fed()
    algo, plus = _run("fgad-plus", fed)
    assert isinstance(algo, FGADPlus)
    head = algo.shared_arrays(algo.make_detector().build(1))
    assert head and all(k.startswith("student.") for k in head)
    replies = [r for _, m, r in delivered if m.kind == "train"]
    assert len(replies) == 4
    for r in replies:
        assert r is not None and set(r.arrays) == set(head)
        assert all(k.startswith("student.") for k in r.arrays)
    _, paper = _run("fgad", fed)
    for a, b in zip(plus.history, paper.history, strict=True):
        assert a["bytes_up"] == b["bytes_up"] > 0  # the same head, the same scalars


def test_validation_reads_no_test_graph_and_no_test_label() -> None:
    """The choice's numbers come from a federation whose test sets are held-out training
    graphs (labelled 0): they do not change when every test label and test graph of the
    federation is replaced, and the engine never sees a test graph."""
    from fedad.methods.fgad import select

    fed = make_graph_fed()
    seen: list[Federation] = []
    import fedad.fl.engine as engine

    real_run = engine.run_inprocess

    def spy(algo: Algorithm, f: Federation, **kw: Any) -> RunOutcome:
        seen.append(f)
        return real_run(algo, f, **kw)

    cands = [("a", "fgad-plus", FAST), ("b", "fgad-plus", {**FAST, "tau": 2.0})]
    rows, _ = select.validate(fed, cands, rounds=1, seed=0, run_inprocess=spy, fraction=0.25)
    assert len(seen) == 2
    test_graphs = {_key(c.x_test, i) for c in fed.clients for i in range(len(c.x_test))}
    for f in seen:
        for c, orig in zip(f.clients, fed.clients, strict=True):
            assert not np.any(c.y_test)
            got = {_key(c.x_test, i) for i in range(len(c.x_test))}
            train = {_key(orig.x_train, i) for i in range(len(orig.x_train))}
            assert got <= train and not got & test_graphs
    # every test label flipped and every test graph replaced: the same numbers
    flipped = replace(fed, clients=[
        replace(c, y_test=1 - c.y_test, x_test=c.x_train[np.zeros(len(c.y_test), dtype=int)])
        for c in fed.clients
    ])  # fmt: skip
    again, _ = select.validate(flipped, cands, rounds=1, seed=0, run_inprocess=spy, fraction=0.25)
    assert again == rows
    assert select.choose({"a": [0.6], "b": [0.7]}, {"a": True, "b": True}) == "b"
    assert select.choose({"a": [0.6], "b": [0.7]}, {"a": True, "b": False}) == "a"
    with pytest.raises(ValueError, match="admissible"):
        select.choose({"a": [0.6]}, {"a": False})


def _key(g: GraphSet, i: int) -> bytes:
    x, e = g.graph(i)
    return np.asarray(x, np.float32).tobytes() + np.asarray(e, np.int64).tobytes()


def test_validation_split_holds_out_a_share_and_keeps_the_rest() -> None:
    from fedad.methods.fgad.select import split_validation, validation_federation

    g = make_graph_fed().clients[0].x_train
    assert isinstance(g, GraphSet)
    tr, va = split_validation(g, 0.25, np.random.default_rng(0))
    assert len(va) == round(0.25 * len(g)) and not set(tr) & set(va)
    assert sorted([*tr, *va]) == list(range(len(g)))
    with pytest.raises(ValueError, match="fraction"):
        split_validation(g, 1.0, np.random.default_rng(0))
    fed = make_graph_fed()
    vfed, held = validation_federation(fed, 0.25, seed=1)
    for c, orig in zip(vfed.clients, fed.clients, strict=True):
        assert len(c.x_train) + len(held[c.client_id]) == len(orig.x_train)
        assert len(c.x_test) == len(held[c.client_id]) and not np.any(c.y_test)


def test_degree_features_are_found_and_generated_graphs_get_their_own() -> None:
    from fedad.methods.fgad.select import generated_graphs
    from fedad.methods.fgad.train import degree_cap, degree_features

    social = _social()
    assert degree_cap(social) == 9
    assert degree_cap(make_graph_fed().clients[0].x_train) is None  # N(0, 1) features
    adj = torch.tensor([[[0, 1, 1], [1, 0, 0], [1, 0, 0]]], dtype=torch.float32)
    mask = torch.tensor([[True, True, True]])
    feats = degree_features(adj, mask, cap=1)
    assert torch.equal(feats[0], torch.tensor([[0.0, 1.0], [0.0, 1.0], [0.0, 1.0]]))
    for mode, consistent in (("auto", True), ("real", False)):
        det = FGADDetector(
            in_dim=10,
            hidden=4,
            layers=2,
            gen_hidden=4,
            gen_layers=1,
            gen_output="linear",
            decoder_bias=True,
            reconstruction="balanced",
            fake_graphs="sampled",
            fake_features=mode,
        )  # type: ignore[arg-type]
        det.build(10)
        det.train_epochs(social, 1, distill=False, rng=np.random.default_rng(0))
        fakes = generated_graphs(det, social, np.random.default_rng(1))
        assert np.array_equal(np.diff(fakes.node_ptr), np.diff(social.node_ptr))
        for i in range(len(fakes)):
            _, e = fakes.graph(i)
            pairs = set(map(tuple, e.T.tolist()))
            assert all((b, a) in pairs and a != b for a, b in pairs)  # symmetric, no loops
        assert (degree_cap(fakes) == 9) is consistent


def test_adam_state_round_trips_and_a_bad_one_is_refused() -> None:
    det = FGADDetector(in_dim=3, hidden=4, layers=2, gen_hidden=4, gen_layers=1)
    det.build(3)
    g = make_graph_fed().clients[0].x_train
    assert isinstance(g, GraphSet)
    opt = det.optimizer()
    det.train_epochs(g, 1, distill=True, rng=np.random.default_rng(0), opt=opt)
    arrays = det.optimizer_arrays(opt)
    assert arrays and all(np.all(np.isfinite(v)) for v in arrays.values())
    again = det.optimizer_arrays(det.load_optimizer(arrays))
    assert arrays.keys() == again.keys()
    for k, v in arrays.items():
        np.testing.assert_array_equal(v, again[k])
    assert det.load_optimizer({}).state_dict()["state"] == {}
    bad = {**arrays, "0/exp_avg": np.zeros((1, 1), np.float32)}
    with pytest.raises(ValueError, match="shape"):
        det.load_optimizer(bad)
    with pytest.raises(ValueError, match="finite"):
        det.load_optimizer({**arrays, "0/exp_avg_sq": np.full_like(arrays["0/exp_avg_sq"], -1)})
    with pytest.raises(ValueError, match="lacks"):
        det.load_optimizer({k: v for k, v in arrays.items() if k != "1/step"})


def test_same_seed_same_scores_another_seed_other_scores() -> None:
    fed = make_graph_fed()
    _, a = _run("fgad-plus", fed)
    _, b = _run("fgad-plus", fed)
    _, c = _run("fgad-plus", fed, seed=4)
    for cid in a.evaluations:
        sa = a.evaluations[cid].arrays["score"]
        np.testing.assert_array_equal(sa, b.evaluations[cid].arrays["score"])
        assert not np.array_equal(sa, c.evaluations[cid].arrays["score"])
        assert np.all(np.isfinite(sa))


@pytest.mark.parametrize("widths", ["equal", "mixed"])
def test_flowers_grid_equals_in_process(monkeypatch: pytest.MonkeyPatch, widths: str) -> None:
    """Every node keeps its networks (and whatever else ``fgad-plus`` keeps between rounds)
    on Flower's grid: the same evaluate replies as in-process after two rounds."""
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
    algo, ref = _run("fgad-plus", fed, rounds=2)
    cfg = parse_config({"seed": 3, "rounds": 2, "partition": {"clients": 3},
                        "data": {"name": "digits", "normal": [0], "anomaly": [1]},
                        "methods": [{"name": "fgad-plus", "params": FAST}]})  # fmt: skip
    monkeypatch.setattr(flower_app, "_FEDERATIONS", {flower_app.data_key(cfg): fed.clients})
    spec = RunSpec.build(cfg, algo)
    out = serve(
        FakeFlowerGrid(spec, partitions=3, sim_spec=True), spec, algo, poll_interval=0.0,
        server_data=fed.server_normal,
    )  # fmt: skip
    assert out.events == ref.events == []
    for cid, m in ref.evaluations.items():
        got = out.evaluations[cid]
        for k, v in m.arrays.items():
            np.testing.assert_array_equal(got.arrays[k], v, err_msg=f"{k} of client {cid}")
