"""FADngs's encoder: shapes for grey 28x28 and RGB 32x32, no batch norm."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fedad.methods.fadngs.model import Encoder


@pytest.mark.parametrize(("shape", "width"), [((2, 1, 28, 28), 8), ((2, 3, 32, 32), 4)])
def test_output_shapes(shape: tuple[int, int, int, int], width: int) -> None:
    torch.manual_seed(0)
    enc = Encoder(in_channels=shape[1], width=width, proj_dim=16, blocks=(1, 1, 1))
    x = torch.randn(shape)
    feats = enc(x)
    assert feats.shape == (2, 4 * width) == (2, enc.feature_dim)
    z = enc.project(x)
    zn = enc.normalized_projections(x)
    assert z.shape == zn.shape == (2, 16)
    torch.testing.assert_close(zn.norm(dim=1), torch.ones(2))
    torch.testing.assert_close(zn, z / z.norm(dim=1, keepdim=True))


def test_small_images_and_default_depth() -> None:
    enc = Encoder(in_channels=3, width=4, proj_dim=8)
    assert enc.normalized_projections(torch.randn(3, 3, 8, 8)).shape == (3, 8)


def test_no_batch_norm_only_group_norm() -> None:
    enc = Encoder(in_channels=3, width=8)
    mods = list(enc.modules())
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in mods)
    assert any(isinstance(m, nn.GroupNorm) for m in mods)
    assert not any(name.endswith("running_mean") for name, _ in enc.named_buffers())
