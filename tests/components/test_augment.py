"""CRAD's transforms: shapes, exact rotations, seeding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedad.components.augment import crad_views, rotations


@pytest.mark.parametrize("shape", [(4, 1, 28, 28), (3, 3, 32, 32), (2, 1, 8, 8)])
def test_views_have_the_documented_shapes_and_stay_in_range(shape: tuple[int, ...]) -> None:
    x = torch.rand(shape, generator=torch.Generator().manual_seed(0))
    plus, minus = crad_views(x, 2, np.random.default_rng(0))
    assert plus.shape == (shape[0], 2, *shape[1:])
    assert minus.shape == (shape[0], 3, *shape[1:])
    assert float(plus.min()) >= 0.0 and float(plus.max()) <= 1.0
    assert not torch.equal(plus[:, 0], plus[:, 1])  # two independent draws


def test_minus_views_are_the_first_view_turned_by_quarter_turns() -> None:
    x = torch.rand(2, 1, 16, 16, generator=torch.Generator().manual_seed(1))
    plus, minus = crad_views(x, 1, np.random.default_rng(3))
    for r, k in enumerate((1, 2, 3)):
        assert torch.equal(minus[:, r], torch.rot90(plus[:, 0], k, dims=(2, 3)))
    # turning the 90-degree view three more quarter turns gives the view back
    assert torch.equal(torch.rot90(minus[:, 0], 3, dims=(2, 3)), plus[:, 0])


def test_equal_generators_equal_views_and_global_state_untouched() -> None:
    x = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a = crad_views(x, 2, np.random.default_rng(7))
    assert torch.equal(torch.random.get_rng_state(), before)
    b = crad_views(x, 2, np.random.default_rng(7))
    c = crad_views(x, 2, np.random.default_rng(8))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_rotations_refuse_non_square_images() -> None:
    with pytest.raises(ValueError, match="square"):
        rotations(torch.zeros(1, 1, 8, 6))


def test_every_view_is_of_its_own_sample() -> None:
    """Views are made in one batched call: row i of every view is still sample i's."""
    import kornia.augmentation as K

    x = torch.arange(5, dtype=torch.float32).view(5, 1, 1, 1).expand(5, 1, 8, 8) / 10
    x = x + torch.linspace(0, 0.05, 8).view(1, 1, 1, 8)  # flips move pixels, not means
    plus, _ = crad_views(x, 3, np.random.default_rng(0), K.RandomHorizontalFlip())
    means = plus.mean(dim=(2, 3, 4))  # (B, V)
    torch.testing.assert_close(means, x.mean(dim=(1, 2, 3))[:, None].expand(5, 3))
    flipped = [not torch.equal(plus[i, v], x[i]) for i in range(5) for v in range(3)]
    assert any(flipped) and not all(flipped)  # independent draws per view and sample


@pytest.mark.parametrize("crop_min", [0.0, -0.1, 1.5])
def test_crop_min_outside_its_range_is_refused(crop_min: float) -> None:
    from fedad.components.augment import normal_transform

    with pytest.raises(ValueError, match="crop_min"):
        normal_transform(1, 16, 16, crop_min=crop_min)


def test_crop_min_one_keeps_every_pixel_of_a_flat_image() -> None:
    """At ``crop_min = 1`` a view is the whole image (up to aspect-ratio jitter), so a
    constant image with a bright border keeps its border; at 0.5 some crops lose it."""
    from fedad.components.augment import normal_transform

    torch.manual_seed(0)  # kornia draws from torch's global generator
    x = torch.zeros(64, 1, 16, 16)
    x[:, :, 0, :] = 1.0  # a bright top row
    full = normal_transform(1, 16, 16, crop_min=1.0)[0](x)  # the crop alone
    half = normal_transform(1, 16, 16, crop_min=0.5)[0](x)
    top_full = full[:, :, :2, :].amax(dim=(1, 2, 3))
    top_half = half[:, :, :4, :].amax(dim=(1, 2, 3))
    assert float(top_full.min()) > 0.0  # every full-area view still shows the row
    assert float(top_half.min()) == 0.0  # a half-area crop can miss it


@pytest.mark.parametrize("jitter", [-0.1, 1.5])
def test_jitter_outside_its_range_is_refused(jitter: float) -> None:
    from fedad.components.augment import normal_transform

    with pytest.raises(ValueError, match="jitter"):
        normal_transform(1, 16, 16, jitter=jitter)


@pytest.mark.parametrize("channels", [1, 3])
def test_jitter_zero_keeps_an_images_brightness(channels: int) -> None:
    """Without jitter and crops a view of a flat grey image is that image (flip and blur
    keep a constant); the default jitter changes the brightness of most views."""
    from fedad.components.augment import normal_transform

    torch.manual_seed(0)
    x = torch.full((32, channels, 16, 16), 0.5)
    still = normal_transform(channels, 16, 16, crop_min=1.0, jitter=0.0)(x)
    moved = normal_transform(channels, 16, 16, crop_min=1.0)(x)
    torch.testing.assert_close(still, x)
    changed = (moved.mean(dim=(1, 2, 3)) - 0.5).abs() > 1e-3
    assert 0.5 < float(changed.float().mean()) < 1.0  # p = 0.8 per view


def test_default_jitter_is_the_earlier_fixed_pipeline() -> None:
    """``jitter = 0.4`` is the pipeline of before the param (same ops, same strengths), so
    the ``contrastive`` detector, which uses these defaults, draws the same views as
    before; ``jitter = 0`` drops the jitter."""
    import kornia.augmentation as K
    from torch import nn

    from fedad.components.augment import normal_transform

    for channels, jiggle in ((1, K.ColorJiggle(brightness=0.4, contrast=0.4, p=0.8)),
                             (3, K.ColorJiggle(0.4, 0.4, 0.4, 0.1, p=0.8))):  # fmt: skip
        before = nn.Sequential(
            K.RandomResizedCrop((16, 16), scale=(0.5, 1.0)),
            K.RandomHorizontalFlip(),
            jiggle,
            K.RandomGaussianBlur((3, 3), (0.1, 2.0), p=0.5),
        )
        x = torch.rand(8, channels, 16, 16, generator=torch.Generator().manual_seed(1))
        torch.manual_seed(0)
        want = before(x)
        torch.manual_seed(0)
        torch.testing.assert_close(normal_transform(channels, 16, 16)(x), want)
        gone = [type(op).__name__ for op in normal_transform(channels, 16, 16, jitter=0.0)]
        assert gone == ["RandomResizedCrop", "RandomHorizontalFlip", "RandomGaussianBlur"]
