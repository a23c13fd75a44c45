"""Every head is fit on what it will score; label-safe augmentations by data kind."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from fedad.core.algorithm import Setup, build_algorithm
from fedad.methods.protofl import detector as det_mod
from fedad.methods.protofl import train
from fedad.methods.protofl.augment import augmentation, image_augmenter
from fedad.methods.protofl.detector import ProtoFLDetector
from fedad.methods.protofl.federated import ProtoFL
from fedad.methods.protofl.heads import ledoit_wolf

SMALL: dict[str, Any] = {
    "rep_dim": 4, "width": 4, "flow_layers": 2, "flow_hidden": 8, "flow_epochs": 3,
}  # fmt: skip


def _images(n: int = 24, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, 1, 8, 8)).astype(np.float32)


def _capture_flow_inputs(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    real = train.train_flow

    def spy(flow: torch.nn.Module, h: torch.Tensor, h_hat: torch.Tensor | None,
            *args: Any) -> float:  # fmt: skip
        seen["h"], seen["h_hat"] = h.clone(), h_hat
        return real(flow, h, h_hat, *args)

    monkeypatch.setattr(det_mod, "train_flow", spy)  # the name the detector calls
    return seen


def test_flow_is_fit_on_the_clean_representations_it_scores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = _capture_flow_inputs(monkeypatch)
    x = _images()
    det = ProtoFLDetector(input_shape=[1, 8, 8], epochs=0, flow_val=0.0, **SMALL).fit(x)
    clean = det.represent(x)  # what score() sees of the training samples
    np.testing.assert_allclose(det.shift_, clean.mean(0), rtol=1e-5, atol=1e-6)
    want = (clean - det.shift_) / det.scale_
    assert seen["h_hat"] is None
    np.testing.assert_allclose(seen["h"].double().numpy(), want, rtol=1e-4, atol=1e-5)


def test_views_mode_fits_the_flow_on_augmented_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _capture_flow_inputs(monkeypatch)
    x = _images()
    det = ProtoFLDetector(
        input_shape=[1, 8, 8], epochs=0, flow_val=0.0, head_data="views", **SMALL
    ).fit(x)
    assert seen["h_hat"] is not None
    assert len(seen["h"]) == det.params.flow_views * len(x)
    clean = (det.represent(x) - det.shift_) / det.scale_
    assert not np.allclose(seen["h"][: len(x)].double().numpy(), clean, atol=1e-3)


@pytest.mark.parametrize("head", ["kde", "ocsvm"])
def test_other_heads_standardise_on_clean_training_representations(head: str) -> None:
    x = _images()
    det = ProtoFLDetector(input_shape=[1, 8, 8], epochs=0, head=head, **SMALL).fit(x)
    clean = det.represent(x)
    np.testing.assert_allclose(det.shift_, clean.mean(0), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(det.scale_, clean.std(0), rtol=1e-6)
    if head == "kde":
        np.testing.assert_allclose(det.train_, (clean - det.shift_) / det.scale_)


def test_flip_is_off_for_digits_by_default_and_on_for_rgb_photos() -> None:
    digits = Setup("image", (1, 8, 8), rounds=1, seed=0, contamination=0.1, num_clients=2)
    algo = build_algorithm("protofl", {}, digits)
    assert isinstance(algo, ProtoFL)
    assert algo.make_detector().augmentation() == (False, 0.85)
    assert augmentation((1, 28, 28)) == (False, 0.7)  # grey: Fashion-MNIST, MNIST
    assert augmentation((3, 32, 32)) == (True, 0.7)  # RGB photographs
    assert augmentation((3, 16, 16))[0] is False  # too small to tell
    # the param overrides either way
    on = build_algorithm("protofl", {"flip": True, "crop": 0.5}, digits)
    assert isinstance(on, ProtoFL)
    assert on.make_detector().augmentation() == (True, 0.5)
    flip, crop = augmentation((1, 8, 8))
    kinds = {type(m).__name__ for m in image_augmenter(8, 8, flip, crop).children()}
    assert "RandomHorizontalFlip" not in kinds
    flipping = image_augmenter(8, 8, True).children()
    assert "RandomHorizontalFlip" in {type(m).__name__ for m in flipping}


def test_the_client_trains_with_the_resolved_augmentation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fedad.methods.protofl import federated
    from tests.conftest import make_federation

    calls: list[tuple[bool, float]] = []
    real = train.train_encoder

    def spy(*args: Any) -> dict[str, float]:
        calls.append((args[10], args[14]))  # flip, crop
        return real(*args)

    monkeypatch.setattr(federated, "train_encoder", spy)
    fed = make_federation("image", clients=2)
    setup = Setup(fed.kind, fed.feature_shape, rounds=1, seed=0, contamination=0.1,
                  num_clients=2)  # fmt: skip
    params = {**SMALL, "public_n": 8, "proto_size": 32, "trunk": "cnn"}
    algo = build_algorithm("protofl", params, setup)
    from fedad.fl.engine import run_inprocess

    run_inprocess(algo, fed, rounds=1, seed=0)
    assert calls and all(c == augmentation(fed.feature_shape) for c in calls)
    assert fed.feature_shape[0] == 1 and not calls[0][0]


@pytest.mark.parametrize(("n", "p"), [(50, 200), (300, 20)])
def test_gaussian_head_is_scikit_learns_ledoit_wolf(n: int, p: int) -> None:
    from sklearn.covariance import LedoitWolf

    z = np.random.default_rng(n).normal(size=(n, p)) @ np.diag(np.linspace(0.5, 3.0, p))
    mean, precision = ledoit_wolf(z)
    lw = LedoitWolf().fit(z)
    np.testing.assert_allclose(mean, lw.location_)
    np.testing.assert_allclose(precision, lw.precision_, rtol=1e-8, atol=1e-10)


def test_gaussian_head_is_ledoit_wolf_in_the_trunks_own_coordinates() -> None:
    """Centred, not scaled: the squared Mahalanobis distance under scikit-learn's
    Ledoit-Wolf fit of the raw clean representations (shrinkage towards a multiple of the
    identity in the trunk's coordinates). After per-feature standardisation the score
    would differ (the shrinkage target would be the diagonal of the variances)."""
    from sklearn.covariance import LedoitWolf

    x = _images(40)
    det = ProtoFLDetector(input_shape=[1, 8, 8], epochs=0, head="gaussian", **SMALL).fit(x)
    clean = det.represent(x)
    np.testing.assert_allclose(det.shift_, clean.mean(0), rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(det.scale_, np.ones(det.h_dim))
    test = det.represent(_images(16, seed=1))
    want = LedoitWolf().fit(clean).mahalanobis(test)
    np.testing.assert_allclose(det.score(_images(16, seed=1)), want, rtol=1e-6)
    sd = clean.std(0)
    standardised = LedoitWolf().fit(clean / sd).mahalanobis(test / sd)
    assert not np.allclose(standardised, want, rtol=1e-3)


def test_normalize_l2_gives_the_heads_unit_length_representations() -> None:
    x = _images(40)
    det = ProtoFLDetector(input_shape=[1, 8, 8], epochs=0, head="gaussian", normalize="l2",
                          **SMALL).fit(x)  # fmt: skip
    h = det.represent(x)
    np.testing.assert_allclose(np.linalg.norm(h, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(det.shift_, h.mean(0), rtol=1e-6, atol=1e-9)
    raw = ProtoFLDetector(input_shape=[1, 8, 8], epochs=0, head="gaussian", **SMALL).fit(x)
    assert not raw.l2 and det.l2
    assert not np.allclose(np.linalg.norm(raw.represent(x), axis=1), 1.0, rtol=1e-3)
    assert not np.allclose(raw.score(x), det.score(x), rtol=1e-3)


def test_normalize_auto_is_l2_for_the_efficientnet_trunk_only() -> None:
    images = Setup("image", (1, 28, 28), rounds=1, seed=0, contamination=0.1, num_clients=2)
    for trunk, l2 in (("cnn", False), ("pretrained", False), ("efficientnet", True)):
        algo = build_algorithm("protofl", {"trunk": trunk}, images)
        assert isinstance(algo, ProtoFL)
        assert algo.make_detector().l2 is l2, trunk
    forced = build_algorithm("protofl", {"trunk": "efficientnet", "normalize": "none"}, images)
    assert isinstance(forced, ProtoFL) and forced.make_detector().l2 is False


def test_a_checkpoint_without_normalize_reads_as_none() -> None:
    """Saved before the key existed: its head was fit on unnormalised h, also with the
    efficientnet trunk (where "auto" now means l2)."""
    from fedad.core.detector import detector_from_config
    from fedad.methods.protofl.detector_params import ProtoFLDetectorParams

    saved = {"kind": "image", "input_shape": [1, 28, 28], "trunk_input": "efficientnet"}
    assert ProtoFLDetectorParams.model_validate(saved).normalize == "none"
    assert ProtoFLDetectorParams.model_validate({**saved, "normalize": "auto"}).normalize == "auto"
    x = _images(40)
    det = ProtoFLDetector(input_shape=[1, 8, 8], epochs=0, head="gaussian", **SMALL).fit(x)
    config = det.to_config()
    del config["params"]["normalize"]
    back = detector_from_config(config, det.get_arrays())
    assert isinstance(back, ProtoFLDetector) and back.params.normalize == "none"
    np.testing.assert_allclose(back.score(x), det.score(x), rtol=1e-6)
