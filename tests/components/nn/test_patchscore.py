"""Patch scoring against a memory bank: distances, maps, image scores."""

from __future__ import annotations

import torch

from fedad.components.nn.patchscore import (
    anomaly_maps,
    image_scores,
    knn_distances,
    nearest_distances,
)


def test_knn_distances_against_brute_force() -> None:
    g = torch.Generator().manual_seed(0)
    p, b = torch.randn(50, 6, generator=g), torch.randn(20, 6, generator=g)
    d = knn_distances(p, b, 3)
    full = ((p[:, None] - b[None]) ** 2).sum(-1).sqrt().sort(dim=1).values[:, :3]
    assert torch.allclose(d, full, atol=1e-5)
    assert knn_distances(p, b[:2], 3).shape == (50, 2)  # k capped at the bank size
    assert torch.allclose(nearest_distances(b, b), torch.zeros(20), atol=1e-3)


def test_maps_peak_where_the_patch_is_far_from_the_bank() -> None:
    feats = torch.zeros(1, 4, 8, 8)
    feats[0, :, 5, 2] = 3.0  # one odd patch
    bank = torch.zeros(1, 4)
    maps = anomaly_maps(feats, bank, (32, 32), sigma=1.0)
    assert maps.shape == (1, 32, 32)
    r, c = divmod(int(maps[0].argmax()), 32)
    assert 20 <= r < 24 and 8 <= c < 12  # the patch's cell at 4x upsampling
    assert torch.isclose(image_scores(maps)[0], maps.max())
    raw = anomaly_maps(feats, bank, (8, 8), sigma=0.0)
    assert torch.isclose(raw[0, 5, 2], torch.tensor(6.0))  # ||(3,3,3,3)|| without smoothing
