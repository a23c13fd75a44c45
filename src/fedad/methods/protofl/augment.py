"""Two augmented views per sample, batched and seeded ([ProtoFL eq. 4], Sec. 5.2).

Images: kornia's random resized crop (back to the input size), horizontal flip,
brightness/contrast jitter (works on grey and RGB; no hue or saturation, which grey images
lack) and a light Gaussian blur. The paper lists crop, horizontal flip, Gaussian blur and
colour jitter without strengths.

Label-safe by data kind (:func:`augmentation`, params ``flip`` and ``crop``, both ``"auto"``
by default): an augmentation must keep the sample normal. A horizontal flip changes the
meaning of digits and letters (a flipped 2 or an 'R' is no longer one), so ``"auto"`` flips
only RGB images of at least 32 px (photographs, where a mirror image is the same scene) and
never single-channel images (digits, characters, scans; Fashion-MNIST loses nothing that
matters by this). The crop keeps at least ``crop`` of the image's area; ``"auto"`` keeps
more of small images, where a few pixels are a large share of the content: 0.85 below
16 px (8x8 digits), 0.7 below 48 px (28x28, 32x32), 0.5 from 48 px on. These rules were
set from what the augmentations do, not from any AUROC.

Vectors (ours: the paper does not describe the Keystroke augmentation): Gaussian noise of
``noise`` times each feature's batch standard deviation, and each feature masked to zero
with probability 0.1.

Seeding: kornia draws from torch's global CPU generator; :func:`two_views` runs under
``torch.random.fork_rng`` seeded from the caller's numpy generator (:func:`cpu_seeded`), so
equal generators give equal views on every device and nothing outside is disturbed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

import numpy as np
import torch
from torch import nn

Auto = Literal["auto"]


def auto_flip(shape: tuple[int, ...] | list[int]) -> bool:
    """Whether a horizontal flip keeps the label of images of ``shape`` ``(C, H, W)``:
    RGB images of at least 32 px only (never digits, characters or other grey images)."""
    return len(shape) == 3 and shape[0] == 3 and min(shape[1], shape[2]) >= 32


def auto_crop(shape: tuple[int, ...] | list[int]) -> float:
    """The smallest share of the image's area a random crop keeps, by image side."""
    side = min(shape[-2:]) if len(shape) == 3 else 0
    return 0.85 if side < 16 else 0.7 if side < 48 else 0.5


def augmentation(
    shape: tuple[int, ...] | list[int], flip: bool | Auto = "auto", crop: float | Auto = "auto"
) -> tuple[bool, float]:
    """``(flip, crop)`` for images of ``shape``: the params as set, ``"auto"`` resolved."""
    return (
        auto_flip(shape) if flip == "auto" else bool(flip),
        auto_crop(shape) if crop == "auto" else float(crop),
    )


def image_augmenter(height: int, width: int, flip: bool = True, crop: float = 0.6) -> nn.Module:
    """The kornia pipeline for one view of ``(N, C, height, width)`` images in [0, 1]:
    a random crop keeping at least ``crop`` of the area, ``flip``, jitter, blur."""
    import kornia.augmentation as K

    ops: list[nn.Module] = [K.RandomResizedCrop((height, width), scale=(crop, 1.0))]
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


@contextmanager
def cpu_seeded(seed: int) -> Iterator[None]:
    """Torch's CPU generator at ``seed`` inside the block, restored after: the draws of
    :func:`fedad.core.rng.torch_seeded`, which also seeds every accelerator's generator
    (``torch.manual_seed``: on a machine without one, torch records a stack trace for each
    accelerator module on every call, about 9 ms, most of a table's phase-1 step). The
    augmentations draw on the CPU only."""
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        yield


def two_views(
    x: torch.Tensor,
    rng: np.random.Generator,
    flip: bool = True,
    noise: float = 0.1,
    augmenter: nn.Module | None = None,
    crop: float = 0.6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Two independently augmented views :math:`x_i, \\hat x_i` of each sample of ``x``.

    ``x`` is ``(N, C, H, W)`` (images, kept in [0, 1]) or ``(N, F)`` (vectors). The random
    draws come from ``rng`` only.
    """
    with cpu_seeded(int(rng.integers(0, 2**62))):
        if x.dim() == 4:
            aug = augmenter or image_augmenter(x.shape[2], x.shape[3], flip, crop)
            a = aug(x.cpu()).to(x.device).clamp(0.0, 1.0)
            b = aug(x.cpu()).to(x.device).clamp(0.0, 1.0)
            return a.contiguous(), b.contiguous()
        xc = x.cpu()
        return _vector_view(xc, noise).to(x.device), _vector_view(xc, noise).to(x.device)
