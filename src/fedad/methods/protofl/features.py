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

from collections.abc import Iterator

import numpy as np
import torch

from fedad.methods.protofl.augment import cpu_seeded, image_augmenter
from fedad.resources import get_resource
from fedad.resources.efficientnet_lite0 import STAGES


def embed(backbone: str, x: np.ndarray, size: int, device: str | torch.device) -> np.ndarray:
    """``(N, D)`` float32 features of images ``x`` ``(N, C, H, W)`` in [0, 1]."""
    net = get_resource(backbone, device)
    return net.embed(np.ascontiguousarray(x, dtype=np.float32), size=size)


def augmented_views(
    x: np.ndarray, views: int, rng: np.random.Generator, flip: bool, crop: float
) -> Iterator[np.ndarray]:
    """``views`` independently augmented copies of images ``x`` ``(N, C, H, W)`` in [0, 1]
    (the image augmentations of :mod:`.augment`, each seeded from ``rng`` in turn)."""
    xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    aug = image_augmenter(int(xt.shape[2]), int(xt.shape[3]), flip, crop)
    for _ in range(views):
        with cpu_seeded(int(rng.integers(0, 2**62))):
            view = aug(xt).clamp(0.0, 1.0).numpy()
        yield view  # outside the seeded block, as before: the caller's work is not seeded


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
    return np.stack(
        [embed(backbone, v, size, device) for v in augmented_views(x, views, rng, flip, crop)]
    )


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


TAIL_STAGES = 7
"""EfficientNet-Lite0's MBConv stages (:data:`fedad.resources.efficientnet_lite0.STAGES`)."""


def tail_start(tune_stages: int) -> int:
    """The first stage (1-based) of the trainable tail when the last ``tune_stages`` stages
    of EfficientNet-Lite0 are trained (stage ``TAIL_STAGES + 1`` means the head conv only)."""
    return TAIL_STAGES + 1 - tune_stages


def prefix_shape(tune_stages: int, size: int) -> tuple[int, int, int]:
    """``(C, H, W)`` of the frozen prefix's output for ``size`` px inputs."""
    stage = tail_start(tune_stages) - 1
    side = -(-size // 2)  # the stem's stride (TensorFlow's SAME padding: ceil)
    for _r, _k, stride, _e, _ci, _co in STAGES[:stage]:
        side = -(-side // stride)
    channels = STAGES[stage - 1][5] if stage >= 1 else 32
    return (channels, side, side)


@torch.inference_mode()
def prefix_maps(
    x: np.ndarray, tune_stages: int, size: int, device: str | torch.device, batch: int = 64
) -> np.ndarray:
    """``(N, C, H, W)`` float32 outputs of EfficientNet-Lite0's frozen stages (the stem and
    the stages before the trainable tail) for images ``x`` ``(N, C, H, W)`` in [0, 1]; in
    batches of 64 in channels-last layout, as the backbone embeds images for the
    ``pretrained`` detector (its depthwise convolutions are faster so on the CPU)."""
    net = get_resource("efficientnet-lite0", device)
    stage = tail_start(tune_stages) - 1
    shape = prefix_shape(tune_stages, size)
    out = np.empty((len(x), *shape), dtype=np.float32)
    dev = next(net.parameters()).device
    for i in range(0, len(x), batch):
        xt = torch.from_numpy(np.ascontiguousarray(x[i : i + batch], dtype=np.float32))
        prepared = net.prepare(xt.to(dev), size).contiguous(memory_format=torch.channels_last)
        if stage >= 1:
            maps = net.stage_maps(prepared, (stage,))[0]
        else:  # the stem only
            maps = torch.nn.functional.relu6(net.bn0(net.conv_stem(prepared)))  # type: ignore[operator]
        out[i : i + batch] = maps.float().cpu().numpy()
    return out


def view_prefix_maps(
    x: np.ndarray,
    views: int,
    tune_stages: int,
    size: int,
    rng: np.random.Generator,
    flip: bool,
    crop: float,
    device: str | torch.device,
) -> np.ndarray:
    """``(views, N, C, H, W)``: :func:`prefix_maps` of ``views`` augmented copies of ``x``."""
    return np.stack(
        [
            prefix_maps(v, tune_stages, size, device)
            for v in augmented_views(x, views, rng, flip, crop)
        ]
    )
