"""FADngs's encoder: shapes for grey 28x28 and RGB 32x32, group norm in the backbone, SimCLR's
batch norm in the head."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fedad.components.losses import mean_pairwise_cosine
from fedad.components.nn.resnet import Encoder


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


def test_group_norm_in_the_backbone_batch_norm_only_in_the_head() -> None:
    enc = Encoder(in_channels=3, width=8, head_norm="batch")
    backbone = list(enc.backbone.modules())
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in backbone)
    assert any(isinstance(m, nn.GroupNorm) for m in backbone)
    assert [type(m) for m in enc.head.net] == [nn.Linear, nn.BatchNorm1d, nn.ReLU, nn.Linear]
    plain = Encoder(in_channels=3, width=8, head_norm="none")
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in plain.modules())
    assert not any(name.endswith("running_mean") for name, _ in plain.named_buffers())


def test_the_head_norm_spreads_the_directions_that_group_norm_leaves_collapsed() -> None:
    """The audit's finding: after the group-norm backbone every image shares one
    large common vector, so every z points the same way; the head's batch norm removes it."""
    x = torch.rand(64, 1, 28, 28)
    cos = {}
    for norm in ("none", "batch"):
        torch.manual_seed(0)
        enc = Encoder(1, width=16, proj_dim=32, blocks=(1, 1, 1), head_norm=norm).train()
        with torch.no_grad():
            cos[norm] = mean_pairwise_cosine(enc.project(x))
    assert cos["none"] > 0.95
    assert cos["batch"] < 0.5


def test_unknown_head_norm_is_refused() -> None:
    with pytest.raises(ValueError, match="head norm"):
        Encoder(1, width=4, head_norm="layer")  # type: ignore[arg-type]


def test_stem_stride_halves_every_map_with_the_same_weights() -> None:
    torch.manual_seed(0)
    one = Encoder(in_channels=1, width=8, proj_dim=8, blocks=(1, 1, 1), stem_stride=1)
    two = Encoder(in_channels=1, width=8, proj_dim=8, blocks=(1, 1, 1), stem_stride=2)
    two.load_state_dict(one.state_dict())  # same tensors: only the forward pass differs
    x = torch.randn(2, 1, 28, 28)
    seen: dict[int, tuple[int, ...]] = {}
    for enc in (one, two):
        enc.backbone.stages.register_forward_hook(
            lambda m, i, o, s=enc.backbone.stem[0].stride[0]: seen.__setitem__(s, o.shape)
        )
        assert enc(x).shape == (2, 32)
    assert seen[1][-2:] == (7, 7) and seen[2][-2:] == (4, 4)
    assert not torch.allclose(one(x), two(x))
    with pytest.raises(ValueError, match="stem_stride"):
        Encoder(in_channels=1, stem_stride=3)
