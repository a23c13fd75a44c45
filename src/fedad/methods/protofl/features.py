"""Frozen off-the-shelf features as the trunk's input: the ``trunk = "pretrained"`` variant.

Not the paper's method (which trains a ResNet from scratch for 900 rounds): an improvement
beside it, for users whose bar is the frozen pretrained detector (``local`` +
``pretrained``). Each client runs the same frozen backbone the server uses for the
prototypes [ProtoFL eq. 6] (EfficientNet-Lite0 by default) on its own images at ``size``
pixels; the trainable trunk :math:`f_\\theta` is then the tabular model (three linear layers,
group norm) on those features, trained and averaged exactly as the CNN would be. Because the
backbone is frozen, the augmented views' features are computed once per client
(:func:`view_features`) and phase 1 draws its two views per sample from them
(:func:`pick_two`).
"""

from __future__ import annotations

import numpy as np
import torch

from fedad.methods.protofl.augment import image_augmenter
from fedad.seeding import torch_seeded


def embed(backbone: str, x: np.ndarray, size: int, device: str | torch.device) -> np.ndarray:
    """``(N, D)`` float32 features of images ``x`` ``(N, C, H, W)`` in [0, 1]."""
    from fedad.resources import get_resource

    net = get_resource(backbone, device)
    return net.embed(np.ascontiguousarray(x, dtype=np.float32), size=size)


def view_features(
    backbone: str,
    x: np.ndarray,
    views: int,
    size: int,
    rng: np.random.Generator,
    flip: bool,
    device: str | torch.device,
    crop: float = 0.6,
) -> np.ndarray:
    """``(views, N, D)``: the features of ``views`` independently augmented copies of ``x``
    (the image augmentations of :mod:`.augment`, seeded from ``rng``)."""
    xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    aug = image_augmenter(int(xt.shape[2]), int(xt.shape[3]), flip, crop)
    out = []
    for _ in range(views):
        with torch_seeded(int(rng.integers(0, 2**62))):
            view = aug(xt).clamp(0.0, 1.0).numpy()
        out.append(embed(backbone, view, size, device))
    return np.stack(out)


def pick_two(
    views: torch.Tensor, idx: torch.Tensor, rng: np.random.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Two different cached views of each sample in ``idx``: ``views`` is ``(V, N, D)``,
    ``V >= 2``; returns two ``(len(idx), D)`` tensors (the pair of [ProtoFL eq. 4])."""
    v = views.shape[0]
    first = rng.integers(0, v, size=len(idx))
    second = (first + rng.integers(1, v, size=len(idx))) % v  # never equal to first
    i = idx.numpy()
    return views[first, i], views[second, i]
