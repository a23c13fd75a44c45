"""CRAD's two families of transforms [FADngs Sec. III-C, eq. 9], batched and seeded.

* Normal transforms :math:`\\mathcal{T}_+` (the paper: crop, grayscale, colour jitter; the
  issue: crop, flip, blur or noise, a jitter that suits grey images): kornia's random
  resized crop back to the input size (scale ``crop_min``-1, 0.5 by default), horizontal
  flip, brightness/contrast jitter of strength ``jitter`` (0.4 by default; plus saturation
  and hue on RGB images only: grey images have neither; 0: no jitter), and a light
  Gaussian blur on images of at least 16 px, Gaussian noise on smaller ones. These
  defaults are the ``contrastive`` detector's; FADngs passes its own (``crop_min = 1``,
  ``jitter = 0``: docs/methods/fadngs.md, "Views that keep a garment's size and shade").
* Shifting transforms :math:`\\mathcal{T}_-`: rotations by 90, 180 and 270 degrees. Applied
  to a normal-transformed view, as CSI does (Tack et al. 2020): a rotated sample then
  differs from a positive by the rotation alone, not also by the absence of augmentation.
* CSI's shifted instances (:func:`shifted_views`): every rotation of every normal view, for
  CSI's own loss (the ``contrastive`` detector, FADngs's Table IV row ``loss = "csi"``).

Seeding: kornia draws from torch's global CPU generator; every function here runs under
``torch.random.fork_rng`` seeded from the caller's numpy generator, so equal generators give
equal views and nothing outside is disturbed.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from fedad.core.rng import torch_seeded

ROTATIONS = (1, 2, 3)
"""Quarter turns of the shifting transforms: 90, 180 and 270 degrees."""


def normal_transform(
    channels: int, height: int, width: int, crop_min: float = 0.5, jitter: float = 0.4
) -> nn.Module:
    """The kornia pipeline :math:`\\mathcal{T}_+` for ``(N, channels, height, width)`` images
    in [0, 1]; the random resized crop keeps ``crop_min`` to all of the image's area, and
    with probability 0.8 brightness and contrast (and on RGB saturation, and hue by a
    quarter as much) are scaled by up to ``1 +- jitter`` (0: never)."""
    import kornia.augmentation as K

    if not 0.0 < crop_min <= 1.0:
        raise ValueError(f"crop_min must be in (0, 1], got {crop_min}")
    if not 0.0 <= jitter <= 1.0:
        raise ValueError(f"jitter must be in [0, 1], got {jitter}")
    ops: list[nn.Module] = [
        K.RandomResizedCrop((height, width), scale=(crop_min, 1.0)),
        K.RandomHorizontalFlip(),
    ]
    if jitter > 0 and channels == 3:
        ops.append(K.ColorJiggle(jitter, jitter, jitter, jitter / 4, p=0.8))
    elif jitter > 0:
        ops.append(K.ColorJiggle(brightness=jitter, contrast=jitter, p=0.8))
    if min(height, width) >= 16:
        ops.append(K.RandomGaussianBlur((3, 3), (0.1, 2.0), p=0.5))
    else:
        ops.append(K.RandomGaussianNoise(std=0.03, p=0.5))
    return nn.Sequential(*ops)


def rotations(x: torch.Tensor) -> torch.Tensor:
    """:math:`\\mathcal{T}_-(x)`: ``x`` turned by 90, 180 and 270 degrees.

    Shapes:
        - x: :math:`(B, C, H, W)`, square images (``H = W``)
        - output: :math:`(B, 3, C, H, W)`
    """
    if x.dim() != 4 or x.shape[2] != x.shape[3]:
        raise ValueError(f"rotations need square images (B, C, H, H), got {tuple(x.shape)}")
    return torch.stack([torch.rot90(x, k, dims=(2, 3)) for k in ROTATIONS], dim=1)


def crad_views(
    x: torch.Tensor,
    n_plus: int,
    rng: np.random.Generator,
    transform: nn.Module | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The views CRAD contrasts [FADngs eq. 9]: ``n_plus`` normal-transformed views of every
    sample and the three rotations of its first view.

    Shapes:
        - x: :math:`(B, C, H, W)` in [0, 1]
        - output: ``plus`` :math:`(B, P, C, H, W)`, ``minus`` :math:`(B, 3, C, H, W)`
    """
    if n_plus < 1:
        raise ValueError(f"need at least one normal view, got {n_plus}")
    aug = transform or normal_transform(x.shape[1], x.shape[2], x.shape[3])
    b = x.shape[0]
    with torch_seeded(int(rng.integers(0, 2**62))):
        # one call over every view (kornia draws each sample's parameters independently):
        # a third less time than one call per view
        views = aug(x.cpu().repeat(n_plus, 1, 1, 1)).clamp(0.0, 1.0)
    plus = views.view(n_plus, b, *x.shape[1:]).transpose(0, 1).contiguous().to(x.device)
    return plus, rotations(plus[:, 0])


def shifted_views(
    x: torch.Tensor, n_views: int, rng: np.random.Generator, transform: nn.Module | None = None
) -> torch.Tensor:
    """CSI's views of a batch: ``n_views`` normal-transform views :math:`T_+` of every sample
    (:func:`crad_views`), each turned by 0, 90, 180 and 270 degrees, in
    :func:`~fedad.components.losses.shifted_instance_mask`'s order: rotation-major, then
    sample, then view (row ``(s B + i) V + v``: rotation ``s`` of view ``v`` of sample ``i``).

    Shapes:
        - x: :math:`(B, C, H, H)` in [0, 1]
        - output: :math:`(4 B V, C, H, H)`
    """
    plus, _ = crad_views(x, n_views, rng, transform)  # (B, V, C, H, H)
    turns = [torch.rot90(plus, k, dims=(3, 4)) for k in (0, *ROTATIONS)]
    return torch.stack(turns).flatten(0, 2)
