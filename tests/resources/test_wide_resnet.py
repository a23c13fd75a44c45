"""Wide-ResNet-50-2 from a user's torchvision-format weights file (untrusted input)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch

from fedad.core.errors import ConfigError
from fedad.resources.wide_resnet import WideResNet50, load_wide_resnet50_2


@pytest.fixture(scope="module")
def state() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return WideResNet50().state_dict()


def test_torchvision_names_and_shapes(state: dict[str, torch.Tensor]) -> None:
    # a few of torchvision's wide_resnet50_2 keys and shapes
    assert state["conv1.weight"].shape == (64, 3, 7, 7)
    assert state["layer1.0.conv1.weight"].shape == (128, 64, 1, 1)
    assert state["layer2.0.downsample.0.weight"].shape == (512, 256, 1, 1)
    assert state["layer3.5.conv2.weight"].shape == (512, 512, 3, 3)
    assert state["layer4.2.bn3.running_var"].shape == (2048,)
    params = sum(
        v.numel() for k, v in state.items() if "running" not in k and "num_batches" not in k
    )
    assert params == 68_883_240 - (2048 * 1000 + 1000)  # torchvision's count without fc


def test_loads_a_state_dict_with_fc_and_gives_stage_maps(
    state: dict[str, torch.Tensor], tmp_path: Path
) -> None:
    path = tmp_path / "wrn.pth"
    torch.save({**state, "fc.weight": torch.zeros(1000, 2048), "fc.bias": torch.zeros(1000)}, path)
    net = load_wide_resnet50_2(path)
    maps = net.stage_maps(torch.randn(1, 3, 64, 64), (2, 3))
    assert [tuple(m.shape[1:]) for m in maps] == [(512, 8, 8), (1024, 4, 4)]


def test_bad_files_are_one_line_errors(state: dict[str, torch.Tensor], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a file"):
        load_wide_resnet50_2(tmp_path / "absent.pth")
    junk = tmp_path / "junk.pth"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError, match="cannot read"):
        load_wide_resnet50_2(junk)
    crafted = tmp_path / "crafted.pth"
    crafted.write_bytes(pickle.dumps(print))  # would call code if unpickled freely
    with pytest.raises(ConfigError, match="cannot read"):
        load_wide_resnet50_2(crafted)
    short = tmp_path / "short.pth"
    torch.save({k: v for k, v in state.items() if not k.startswith("layer4")}, short)
    with pytest.raises(ConfigError, match="missing layer4"):
        load_wide_resnet50_2(short)
