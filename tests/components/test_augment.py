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
