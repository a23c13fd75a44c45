"""The ``contrastive`` detector (CSI's loss, rotation-shifted instances) and its federated use."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

import fedad
from fedad.components.detectors import contrastive
from fedad.components.detectors.contrastive import ContrastiveDetector, max_similarity
from fedad.config import parse_config
from fedad.core.algorithm import Setup, build_algorithm
from fedad.core.detector import detector_from_config
from fedad.core.errors import ConfigError, FedadError
from fedad.core.messages import Message
from fedad.core.types import dense
from fedad.evaluation.metrics import auroc
from fedad.fl.engine import run_inprocess
from fedad.runner import run_experiment
from tests.conftest import failures, make_federation


def digits(label: int) -> np.ndarray:
    """scikit-learn's 8x8 digits of one class, (N, 1, 8, 8) in [0, 1]."""
    d = load_digits()
    return np.asarray(d.images[d.target == label] / 16.0, dtype=np.float32)[:, None]


def detector(seed: int = 0, **kw: object) -> ContrastiveDetector:
    args: dict[str, object] = {"input_shape": (1, 8, 8), "epochs": 2, "batch_size": 32}
    return ContrastiveDetector(seed=seed, **(args | kw))  # type: ignore[arg-type]


def test_loss_decreases() -> None:
    x = digits(0)[:64]
    det = detector(lr=3e-3).build()
    rng = np.random.default_rng(0)
    losses = [det.train_epochs(x, 1, rng) for _ in range(6)]
    assert np.all(np.isfinite(losses))
    assert np.mean(losses[-2:]) < np.mean(losses[:2]) - 0.02, losses


def test_loss_is_csi_contrastive_loss_of_the_shifted_views() -> None:
    """One batch by hand: two T+ views of every sample, each turned by 0, 90, 180 and 270
    degrees (rotation-major, then sample, then view), contrasted with
    shifted_instance_mask's pairs."""
    from fedad.components import augment, losses

    x = torch.from_numpy(digits(0)[:5])
    det = detector().build()
    det.aug_rng_ = np.random.default_rng(7)
    got = det.loss(x)
    plus, _ = augment.crad_views(x, 2, np.random.default_rng(7), det._transform)
    views = augment.shifted_views(x, 2, np.random.default_rng(7), det._transform)
    assert views.shape == (4 * 5 * 2, 1, 8, 8)
    for s in range(4):
        for i in range(5):
            for v in range(2):
                want_view = torch.rot90(plus[i, v], s, dims=(1, 2))
                torch.testing.assert_close(views[(s * 5 + i) * 2 + v], want_view)
    pos, neg = losses.shifted_instance_mask(5, 2, 4)
    want = losses.contrastive_loss(det.encoder.project(views), pos, neg, 0.5)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def anchors_only_pairs(batch: int, n_plus: int, n_minus: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The pairs before 2026-11-25: ``n_plus`` T+ views per sample (sample-major), then
    ``n_minus`` rotations per sample; only T+ views are anchors, their positives the other
    T+ views of the same sample, every other view a negative."""
    plus = torch.arange(batch).repeat_interleave(n_plus)
    sample = torch.cat([plus, torch.arange(batch).repeat_interleave(n_minus)])
    is_plus = torch.arange(len(sample)) < batch * n_plus
    not_self = ~torch.eye(len(sample), dtype=torch.bool)
    anchors = is_plus[:, None]
    pos = anchors & is_plus[None, :] & (sample[:, None] == sample[None, :]) & not_self
    return pos, anchors & not_self & ~pos


def test_the_loss_penalises_rotated_views_collapsed_to_one_point() -> None:
    """The defect fixed on 2026-11-25: with rotations as negatives only
    (:func:`anchors_only_pairs`), the loss is the same whether the rotated views spread out
    or all sit at one point far from the upright ones, so nothing kept them apart and
    training collapsed them; with CSI's shifted instances a collapse costs."""
    from fedad.components import losses

    b, v, s = 4, 2, 4
    eye = torch.eye(b * s + 1)
    inst = torch.arange(b * s).repeat_interleave(v)  # instance of each view, (s B + i)
    spread = eye[inst]  # every instance its own direction, both views equal
    collapsed = spread.clone()
    collapsed[b * v :] = eye[b * s]  # every rotated view at one point
    pos, neg = losses.shifted_instance_mask(b, v, s)
    new_spread = losses.contrastive_loss(spread, pos, neg, 0.5)
    new_collapsed = losses.contrastive_loss(collapsed, pos, neg, 0.5)
    assert float(new_collapsed) > float(new_spread) + 0.5
    # the old pairs: T+ views sample-major, then the three rotations of each first view
    upright = eye[torch.arange(b).repeat_interleave(v)]
    old_pos, old_neg = anchors_only_pairs(b, v, s - 1)
    old_spread = losses.contrastive_loss(
        torch.cat([upright, eye[b : b * s]]), old_pos, old_neg, 0.5
    )
    old_collapsed = losses.contrastive_loss(
        torch.cat([upright, eye[b * s].expand(b * (s - 1), -1)]), old_pos, old_neg, 0.5
    )
    torch.testing.assert_close(old_collapsed, old_spread)


def test_rotated_and_inverted_images_score_above_normal_ones() -> None:
    x = digits(0)
    train, held = x[:100], x[100:140]
    det = detector(epochs=3, lr=3e-3).fit(train)
    normal = det.score(held)
    for odd in (np.rot90(held, 1, axes=(2, 3)).copy(), 1.0 - held):
        s = det.score(odd)
        labels = np.r_[np.zeros(len(normal)), np.ones(len(s))]
        a = auroc(labels, np.r_[normal, s])
        assert a is not None and a > 0.9
    # scores are minus a cosine; training scores are leave-one-out, not all -1
    train_scores = det.score(train)
    assert np.all((train_scores >= -1 - 1e-9) & (train_scores <= 1 + 1e-9))
    assert np.mean(train_scores > det.threshold_) <= det.contamination + 1 / len(train)
    assert not np.allclose(train_scores, -1.0, atol=1e-6)


def test_equal_seeds_give_equal_detectors() -> None:
    x = digits(0)[:48]
    a, b, c = detector(0).fit(x), detector(0).fit(x), detector(1).fit(x)
    for k, v in a.get_arrays().items():
        np.testing.assert_array_equal(v, b.get_arrays()[k], err_msg=k)
    np.testing.assert_array_equal(a.score(x), b.score(x))
    assert not np.array_equal(a.score(x), c.score(x))


def test_arrays_round_trip_and_the_bank_is_not_model_state() -> None:
    x, q = digits(0)[:40], digits(3)[:10]
    det = detector().fit(x)
    arrays = det.get_arrays()
    assert arrays["bank_"].shape == (40, 128) and arrays["bank_"].dtype == np.float32
    assert "bank_" not in det.model_arrays() and "threshold_" not in det.model_arrays()
    again = detector_from_config(det.to_config(), arrays)
    assert isinstance(again, ContrastiveDetector)
    np.testing.assert_array_equal(again.score(q), det.score(q))
    assert again.threshold_ == det.threshold_
    # the network alone has no bank: it cannot score until it is given one
    bare = detector().set_arrays(det.model_arrays())
    with pytest.raises(RuntimeError, match="bank_"):
        bare.score(q)
    np.testing.assert_array_equal(bare.set_bank(x).score(q), det.score(q))
    # training changes the weights, so the bank computed with the old ones is dropped
    det.train_epochs(x, 1, np.random.default_rng(0))
    assert "bank_" not in det.get_arrays()


def test_crafted_arrays_and_params_are_refused() -> None:
    det = detector().fit(digits(0)[:20])
    arrays = det.get_arrays()
    for bad in (np.ones((3, 5), np.float32), np.full((3, 128), np.nan, np.float32)):
        with pytest.raises(FedadError, match="do not fit"):
            detector_from_config(det.to_config(), {**arrays, "bank_": bad})
    config = det.to_config()
    for params in ({"input_shape": [1, 8, 6]}, {"kind": "vector"}, {"width": 0}):
        crafted = {"class": "contrastive", "params": {**config["params"], **params}}
        with pytest.raises(FedadError, match="invalid"):
            detector_from_config(crafted, arrays)


def test_max_similarity_in_chunks_is_the_dense_leave_one_out_max(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(0)
    bank = rng.normal(size=(23, 4))
    bank /= np.linalg.norm(bank, axis=1, keepdims=True)
    q = np.concatenate([bank[:5], -bank[5:9], rng.normal(size=(6, 4))])
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    sims = q @ bank.T
    sims[np.arange(5), np.arange(5)] = -np.inf  # the first five queries are bank entries
    want = sims.max(axis=1)
    exclude = np.r_[np.arange(5), np.full(10, -1)].astype(np.int64)
    monkeypatch.setattr(contrastive, "QUERY_CHUNK", 4)
    monkeypatch.setattr(contrastive, "BANK_CHUNK", 5)
    np.testing.assert_allclose(max_similarity(q, bank, exclude), want, atol=1e-12)
    monkeypatch.setattr(contrastive, "BANK_CHUNK", 1)
    np.testing.assert_allclose(max_similarity(q, bank, exclude), want, atol=1e-12)
    # without exclusions a query equal to a bank entry keeps its own match
    assert np.allclose(max_similarity(q[:5], bank), 1.0)
    assert max_similarity(bank[:1], bank[:1])[0] == pytest.approx(1.0)


def test_fedavg_clients_keep_the_global_network_and_their_own_bank() -> None:
    fed = make_federation("image", clients=3)
    setup = Setup(fed.kind, fed.feature_shape, rounds=1, seed=0, contamination=0.1,
                  num_clients=3)  # fmt: skip
    algo = build_algorithm("fedavg", {}, setup, "contrastive")
    assert algo.personalized  # one detector per client: saved per client
    assert not build_algorithm("fedavg", {}, setup, "autoencoder").personalized
    assert not build_algorithm("centralized", {}, setup, "contrastive").personalized
    out = run_inprocess(algo, fed, rounds=1, seed=0)
    assert failures(out.events) == []
    assert "bank_" not in out.result.arrays  # the server never holds a bank
    msg = Message("evaluate", out.result.arrays, out.result.scalars)
    dets = [algo.client_detector(out.client_states[k], fed.clients[k], msg) for k in range(3)]
    for k, d in enumerate(dets):
        assert isinstance(d, ContrastiveDetector)
        assert d.bank_.shape[0] == fed.clients[k].n_train
        np.testing.assert_array_equal(
            d.bank_, d.embed(dense(fed.clients[k].x_train)).astype(np.float32)
        )
        for name, v in d.model_arrays().items():
            np.testing.assert_array_equal(v, out.result.arrays[name])
        saved = out.evaluations[k].arrays
        np.testing.assert_array_equal(saved["detector/bank_"], d.bank_)


def test_centralized_bank_is_the_pooled_training_data() -> None:
    fed = make_federation("image", clients=2)
    setup = Setup(fed.kind, fed.feature_shape, rounds=1, seed=0, contamination=0.1,
                  num_clients=2)  # fmt: skip
    out = run_inprocess(build_algorithm("centralized", {}, setup, "contrastive"), fed, 1, 0)
    assert out.result.arrays["bank_"].shape[0] == sum(c.n_train for c in fed.clients)


RUN = """
seed = 2
rounds = 2
[data]
name = "digits"
normal = [0]
anomaly = [7]
max_test = 60
[partition]
clients = 2
[engine]
progress = false
[[methods]]
name = "fedavg"
detector = "contrastive"
[methods.params]
batch_size = 32
latent_dim = 32
"""


def test_fedavg_contrastive_run_saves_and_loads_every_clients_detector(tmp_path: Path) -> None:
    data = run_experiment(parse_config(tomllib.loads(RUN)), tmp_path / "run")
    m = data["methods"]["fedavg"]
    assert failures(m["events"]) == [] and m["personalized"] is True
    assert m["detector"] == "contrastive"
    assert 0.0 <= m["auroc"] <= 1.0
    assert {p.name for p in (tmp_path / "run/checkpoints/fedavg").iterdir()} == {
        "detector.json", "client_0.npz", "client_1.npz"
    }  # fmt: skip
    run = fedad.load(str(tmp_path / "run"))
    x = digits(7)[:10]
    d0, d1 = run.detector("fedavg", 0), run.detector("fedavg", client=1)
    assert isinstance(d0, ContrastiveDetector) and isinstance(d1, ContrastiveDetector)
    for name, v in d0.model_arrays().items():  # one global network ...
        np.testing.assert_array_equal(v, d1.model_arrays()[name])
    assert d0.bank_.shape[1] == 32
    assert not np.array_equal(d0.bank_, d1.bank_)  # ... and each client's own bank
    assert np.all(np.isfinite(d0.score(x))) and d0.predict(x).shape == (10,)


@pytest.mark.parametrize("method", ["local", "fedavg", "fedprox", "centralized"])
def test_vector_data_are_refused_in_one_line(method: str) -> None:
    setup = Setup("vector", (6,), rounds=1, seed=0, contamination=0.1, num_clients=3)
    with pytest.raises(ConfigError, match="contrastive") as err:
        build_algorithm(method, {}, setup, "contrastive")
    assert "\n" not in str(err.value.args[0])


def test_non_square_images_are_refused() -> None:
    setup = Setup("image", (1, 8, 6), rounds=1, seed=0, contamination=0.1, num_clients=3)
    with pytest.raises(ConfigError, match="square"):
        build_algorithm("fedavg", {}, setup, "contrastive")


def test_a_test_image_close_to_a_training_image_keeps_its_match() -> None:
    """Only the same image is left out: a near-duplicate scores as the most normal."""
    train = digits(3)[:12]
    det = detector(epochs=1).fit(train)
    near = np.clip(train[:4] + np.float32(1e-4), 0, 1)  # other bytes, nearly the same image
    s_near = det.score(near)
    assert np.all(s_near <= det.score(train[:4]) + 1e-6)
    assert np.all(s_near < -0.99)
    keys = contrastive.image_keys(train)
    assert len(set(keys.tolist())) == len({t.tobytes() for t in train})
    assert keys.dtype == np.int64
    # saved and loaded, the keys come back and training scores stay leave-one-out
    again = detector(epochs=1).build().set_arrays(det.get_arrays())
    np.testing.assert_allclose(again.score(train), det.score(train), atol=1e-6)
