"""What every pretrained resource is: a frozen image backbone and how to feed it.

A resource is a :class:`Backbone`: an ``nn.Module`` whose :meth:`~Backbone.features` maps
prepared images to global-pooled features ``(N, D)`` (and :meth:`~Backbone.stage_maps` to
the feature maps of intermediate stages, where the network has them), together with the
:class:`InputSpec` its weights were trained with (input size, channels, per-channel mean and
standard deviation). :meth:`Backbone.prepare` turns fedad images (``float32`` ``(N, C, H, W)`` in
[0, 1], grey or RGB) into what the network expects; :meth:`Backbone.embed` does both in
batches and returns numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Backbone", "InputSpec", "check_stages"]


@dataclass(frozen=True)
class InputSpec:
    """How inputs must be prepared for a resource.

    ``size``: the side the weights were trained at (square inputs); other sizes work for
    fully convolutional backbones but change the features. ``channels``: input channels
    (grey images are replicated to this many). ``mean``/``std``: per-channel normalisation
    applied to pixels in [0, 1], ``(x - mean) / std``.
    """

    size: int
    channels: int
    mean: tuple[float, ...]
    std: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.mean) != self.channels or len(self.std) != self.channels:
            raise ValueError("mean and std need one value per input channel")
        if any(s <= 0 for s in self.std):
            raise ValueError("std must be positive")


class Backbone(nn.Module):
    """A frozen pretrained image network (subclasses define the layers and ``features``)."""

    input_spec: InputSpec
    feature_dim: int

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Global-pooled features ``(N, feature_dim)`` of prepared images ``(N, C, H, W)``."""
        raise NotImplementedError

    def stage_maps(self, x: torch.Tensor, stages: tuple[int, ...]) -> list[torch.Tensor]:
        """The feature maps at the end of ``stages`` (1-based, increasing) of prepared images,
        one ``(N, C_l, H_l, W_l)`` tensor per stage: the multi-level features that patch-level
        detectors fuse. Backbones without stages raise ``NotImplementedError``."""
        raise NotImplementedError(f"{type(self).__name__} has no stage feature maps")

    def prepare(self, images: torch.Tensor, size: int | None = None) -> torch.Tensor:
        """Images in [0, 1] ``(N, 1 or C, H, W)`` -> resized, channel-matched, normalised.

        Pixels are clipped to [0, 1] (so that no input, however extreme, gives non-finite
        features); grey images are replicated to ``input_spec.channels``; images are resized
        to ``size x size`` (default ``input_spec.size``) bilinearly, with antialiasing when
        shrinking.
        """
        spec = self.input_spec
        if images.ndim != 4:
            raise ValueError(f"expected images (N, C, H, W), got shape {tuple(images.shape)}")
        images = images.clamp(0.0, 1.0)
        c = int(images.shape[1])
        if c == 1 and spec.channels != 1:
            images = images.expand(-1, spec.channels, -1, -1)
        elif c != spec.channels:
            raise ValueError(f"images have {c} channels; this resource takes 1 or {spec.channels}")
        side = spec.size if size is None else int(size)
        h, w = int(images.shape[2]), int(images.shape[3])
        if (h, w) != (side, side):
            images = F.interpolate(
                images,
                size=(side, side),
                mode="bilinear",
                align_corners=False,
                antialias=side < max(h, w),
            )
        mean = torch.tensor(spec.mean, dtype=images.dtype, device=images.device)
        std = torch.tensor(spec.std, dtype=images.dtype, device=images.device)
        return (images - mean.view(1, -1, 1, 1)) / std.view(1, -1, 1, 1)

    @torch.inference_mode()
    def embed(
        self, images: np.ndarray, size: int | None = None, batch_size: int = 64
    ) -> np.ndarray:
        """``float32`` features ``(N, feature_dim)`` of fedad images, computed in batches."""
        if images.ndim != 4:
            raise ValueError(f"expected images (N, C, H, W), got shape {images.shape}")
        device = next(self.parameters()).device
        out = np.empty((images.shape[0], self.feature_dim), dtype=np.float32)
        for start in range(0, images.shape[0], batch_size):
            chunk = torch.as_tensor(
                np.ascontiguousarray(images[start : start + batch_size], dtype=np.float32)
            ).to(device)
            prepared = self.prepare(chunk, size).contiguous(memory_format=torch.channels_last)
            feats = self.features(prepared)
            out[start : start + batch_size] = feats.float().cpu().numpy()
        return out


def check_stages(stages: tuple[int, ...], count: int) -> None:
    """``stages`` must be strictly increasing 1-based stage numbers up to ``count``."""
    if (
        not stages
        or any(not 1 <= s <= count for s in stages)
        or list(stages) != sorted(set(stages))
    ):
        raise ValueError(f"stages must be increasing numbers in 1..{count}, got {list(stages)}")
