"""Two augmented views per sample, batched and seeded ([ProtoFL eq. 4], Sec. 5.2).

Images: kornia's random resized crop (back to the input size), horizontal flip (optional:
it changes the meaning of digits), brightness/contrast jitter (works on grey and RGB; no
hue or saturation, which grey images lack) and a light Gaussian blur. The paper lists crop,
horizontal flip, Gaussian blur and colour jitter without strengths; ours are mild because
the images are small (8x8 digits to 32x32).

Vectors (ours: the paper does not describe the Keystroke augmentation): Gaussian noise of
``noise`` times each feature's batch standard deviation, and each feature masked to zero
with probability 0.1.

Seeding: kornia draws from torch's global CPU generator; :func:`two_views` runs under
``torch.random.fork_rng`` seeded from the caller's numpy generator, so equal generators
give equal views on every device and nothing outside is disturbed.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from fedad.seeding import torch_seeded


def image_augmenter(height: int, width: int, flip: bool = True) -> nn.Module:
    """The kornia pipeline for one view of ``(N, C, height, width)`` images in [0, 1]."""
    import kornia.augmentation as K

    ops: list[nn.Module] = [K.RandomResizedCrop((height, width), scale=(0.6, 1.0))]
    if flip:
        ops.append(K.RandomHorizontalFlip())
    ops.append(K.ColorJiggle(brightness=0.2, contrast=0.2, p=0.8))
    if min(height, width) >= 16:
        ops.append(K.RandomGaussianBlur((3, 3), (0.1, 1.0), p=0.3))
    return nn.Sequential(*ops)


def _vector_view(x: torch.Tensor, noise: float) -> torch.Tensor:
    sd = x.std(dim=0, keepdim=True) if len(x) > 1 else torch.ones_like(x[:1])
    keep = (torch.rand_like(x) >= 0.1).to(x.dtype)
    return (x + noise * sd * torch.randn_like(x)) * keep


def two_views(
    x: torch.Tensor,
    rng: np.random.Generator,
    flip: bool = True,
    noise: float = 0.1,
    augmenter: nn.Module | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Two independently augmented views :math:`x_i, \\hat x_i` of each sample of ``x``.

    ``x`` is ``(N, C, H, W)`` (images, kept in [0, 1]) or ``(N, F)`` (vectors). The random
    draws come from ``rng`` only.
    """
    with torch_seeded(int(rng.integers(0, 2**62))):
        if x.dim() == 4:
            aug = augmenter or image_augmenter(x.shape[2], x.shape[3], flip)
            a = aug(x.cpu()).to(x.device).clamp(0.0, 1.0)
            b = aug(x.cpu()).to(x.device).clamp(0.0, 1.0)
            return a.contiguous(), b.contiguous()
        xc = x.cpu()
        return _vector_view(xc, noise).to(x.device), _vector_view(xc, noise).to(x.device)
