"""Frozen multi-level patch features: the input of the patch-level detectors.

PatchCore (Roth et al., 2022) and FedDyMem take the feature maps of a few intermediate
stages of a frozen ImageNet network, bring them to the resolution of the first stage taken
and concatenate them along channels [FedDyMem eq. 8]:

.. math::
    \\tilde{F} = \\operatorname{concat}\\big(\\{f_{up}(F^{l}, (H_0, W_0))\\}_{l}\\big),

with :math:`f_{up}` bilinear interpolation. Each position of :math:`\\tilde F` is one patch
feature. The backbone is a named resource (``efficientnet-lite0``, stages 3 and 5 by
default: 40 channels at stride 8 and 112 at stride 16, the counterpart of Wide-ResNet-50's
``layer2`` and ``layer3`` that the papers use) or ``wide_resnet50_2`` with torchvision
weights from a user path.

Shapes: images ``(N, C, H, W)`` in [0, 1] -> features ``(N, sum(C_l), size/s_0, size/s_0)``
where ``s_0`` is the first stage's stride.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from fedad.core.errors import ConfigError
from fedad.resources.base import Backbone

__all__ = [
    "BACKBONES",
    "MultiLevelFeatures",
    "check_backbone",
    "fuse_levels",
    "grid_side",
    "stage_channels",
]

BACKBONES: tuple[str, ...] = ("efficientnet-lite0", "wide_resnet50_2")

_WRN_CACHE: dict[tuple[str, str], Backbone] = {}
_LOCK = threading.Lock()


def check_backbone(method: str, backbone: str, path: str | None) -> None:
    """One-line :class:`ConfigError` when a method's params name ``wide_resnet50_2`` without
    its weights file, or a ``backbone_path`` for another backbone. Whether the file loads is
    checked where the features are computed (on the clients), with a one-line error too."""
    if backbone == "wide_resnet50_2" and path is None:
        raise ConfigError(
            f"backbone 'wide_resnet50_2' of method '{method}' needs its torchvision weights file",
            "set params.backbone_path to the wide_resnet50_2 .pth file",
        )
    if backbone != "wide_resnet50_2" and path is not None:
        raise ConfigError(
            f"parameter 'backbone_path' of method '{method}' applies to backbone "
            f"'wide_resnet50_2' only (the backbone is '{backbone}')",
            'remove it or set backbone = "wide_resnet50_2"',
        )


def stage_channels(backbone: str) -> tuple[int, ...]:
    """Output channels of the backbone's stages (1-based positions)."""
    if backbone == "efficientnet-lite0":
        from fedad.resources.efficientnet_lite0 import STAGE_CHANNELS
    elif backbone == "wide_resnet50_2":
        from fedad.resources.wide_resnet import STAGE_CHANNELS
    else:
        raise ConfigError(
            f"unknown patch-feature backbone '{backbone}'", f"use one of {', '.join(BACKBONES)}"
        )
    return STAGE_CHANNELS


def grid_side(backbone: str, stage: int, size: int) -> int:
    """Side of the feature map of ``stage`` for square inputs of side ``size`` (the fused
    features' grid when ``stage`` is the first stage taken), without running the network."""
    stage_channels(backbone)  # a known name
    if backbone == "efficientnet-lite0":
        from fedad.resources.efficientnet_lite0 import STAGES

        side = -(-size // 2)  # TensorFlow SAME padding: ceil(size / stride)
        for s in STAGES[:stage]:
            side = -(-side // s[2])
        return side
    side = (size + 2 * 3 - 7) // 2 + 1  # 7x7 stride-2 stem
    side = (side + 2 - 3) // 2 + 1  # 3x3 stride-2 max pool
    for _ in range(1, stage):  # layer2.. halve with a 3x3 stride-2 convolution
        side = (side + 2 - 3) // 2 + 1
    return side


def fuse_levels(maps: list[torch.Tensor]) -> torch.Tensor:
    """[FedDyMem eq. 8]: every map upsampled bilinearly to the first map's size, concatenated.

    Shapes: ``[(N, C_l, H_l, W_l)]`` -> ``(N, sum C_l, H_0, W_0)``.
    """
    h, w = int(maps[0].shape[2]), int(maps[0].shape[3])
    up = [
        m
        if m.shape[2:] == (h, w)
        else F.interpolate(m, (h, w), mode="bilinear", align_corners=False)
        for m in maps
    ]
    return torch.cat(up, dim=1)


def _backbone(name: str, path: str | None, device: torch.device) -> Backbone:
    if name == "efficientnet-lite0":
        from fedad.resources import get_resource

        return get_resource(name, device)
    if path is None:
        raise ConfigError(
            "backbone 'wide_resnet50_2' needs its torchvision weights file",
            "set params.backbone_path to the wide_resnet50_2 .pth file",
        )
    key = (str(Path(path).expanduser().resolve()), str(device))
    with _LOCK:
        net = _WRN_CACHE.get(key)
        if net is None:
            from fedad.resources.wide_resnet import load_wide_resnet50_2

            net = load_wide_resnet50_2(path).to(device).eval().requires_grad_(False)
            _WRN_CACHE[key] = net
    return net


class MultiLevelFeatures:
    """A frozen extractor of fused patch features (see the module docstring).

    ``size`` is the side images are resized to before the backbone (the paper: 224).
    """

    def __init__(
        self,
        backbone: str = "efficientnet-lite0",
        stages: tuple[int, ...] = (3, 5),
        size: int = 224,
        path: str | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        chans = stage_channels(backbone)
        if (
            not stages
            or list(stages) != sorted(set(stages))
            or not all(1 <= s <= len(chans) for s in stages)
        ):
            raise ConfigError(
                f"stages {list(stages)} are not increasing stage numbers of {backbone}",
                f"use numbers in 1..{len(chans)}, e.g. [3, 5]",
            )
        self.backbone, self.stages, self.size, self.path = backbone, tuple(stages), size, path
        self.device = torch.device(device)
        self.channels = int(sum(chans[s - 1] for s in stages))
        self.side = grid_side(backbone, self.stages[0], size)
        """Side of the square patch grid the features come on."""

    def net(self) -> Backbone:
        return _backbone(self.backbone, self.path, self.device)

    @torch.inference_mode()
    def __call__(self, images: np.ndarray, batch_size: int = 32) -> np.ndarray:
        """``float32`` fused features ``(N, channels, h, w)`` of images in [0, 1]."""
        if images.ndim != 4:
            raise ValueError(f"expected images (N, C, H, W), got shape {images.shape}")
        net = self.net()
        if images.shape[0] == 0:  # the grid of an empty batch: run one blank image
            return self(np.zeros((1, *images.shape[1:]), np.float32))[:0]
        out: list[np.ndarray] = []
        for start in range(0, images.shape[0], batch_size):
            chunk = torch.as_tensor(
                np.ascontiguousarray(images[start : start + batch_size], dtype=np.float32)
            ).to(self.device)
            x = net.prepare(chunk, self.size).contiguous(memory_format=torch.channels_last)
            fused = fuse_levels(net.stage_maps(x, self.stages))
            out.append(fused.float().contiguous().cpu().numpy())
        return np.concatenate(out)
