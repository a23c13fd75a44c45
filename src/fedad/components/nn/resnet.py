"""FADngs's encoder: a small ResNet ``f`` and a projection head ``h``, :math:`z(x) = h(f(x))`
(also the ``contrastive`` detector's network).

Every function cites [FADngs eq. N] or [FADngs Sec. X] (Dong et al., IEEE TNNLS 2024). The
paper uses a ResNet-34 [FADngs Sec. IV]; this is the same family at a size fit for 28x28 and
32x32 images: a 3x3 stem, three stages of basic residual blocks (stride 2 at the first block
of stages 2 and 3, channels ``width``, ``2 width``, ``4 width``) and global average pooling.

Normalisation in the backbone: group normalisation, never batch normalisation (the projection
head has SimCLR's batch norm, see :class:`ProjectionHead`). FedAvg averages parameters
([FADngs eq. 10] initialises SED's student that way); batch-norm running statistics are
per-client estimates of *local* activation moments, and across non-IID clients their average
describes no client's data, while each client trains with its own batch statistics: the
averaged model would be evaluated under statistics it was never trained with. Group norm
normalises each sample on its own and has no running statistics, so the averaged model
behaves the same on every client.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn


def _groups(channels: int) -> int:
    """Largest of 8, 4, 2, 1 that divides ``channels``."""
    return next(g for g in (8, 4, 2, 1) if channels % g == 0)


class BasicBlock(nn.Module):
    """A basic residual block: :math:`\\mathrm{ReLU}(F(x) + S(x))` with
    :math:`F` = conv3x3(stride) - GN - ReLU - conv3x3 - GN and :math:`S` the identity, or a
    1x1 convolution with group norm when the stride or the channel count changes.

    Shapes:
        - input: :math:`(N, C_{in}, H, W)`
        - output: :math:`(N, C_{out}, \\lceil H/s \\rceil, \\lceil W/s \\rceil)`, :math:`s`
          the stride
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, padding=1, bias=False)
        self.norm1 = nn.GroupNorm(_groups(out_channels), out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, padding=1, bias=False)
        self.norm2 = nn.GroupNorm(_groups(out_channels), out_channels)
        self.shortcut: nn.Module
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride, bias=False),
                nn.GroupNorm(_groups(out_channels), out_channels),
            )
        else:
            self.shortcut = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        result: torch.Tensor = F.relu(out + self.shortcut(x))
        return result


class ResNet(nn.Module):
    """The feature extractor :math:`f` [FADngs Sec. III-A]: stem conv3x3 - GN - ReLU, three
    stages of ``blocks[i]`` basic blocks with ``width``, ``2 width``, ``4 width`` channels
    (stride 2 at the entry of stages 2 and 3), then global average pooling.

    Works for any image of side >= 8 (28x28 and 32x32 in practice), grey (``in_channels=1``)
    or RGB (``in_channels=3``). ``stem_stride = 2`` strides the stem (every later map is
    half as wide and high, about a quarter of the arithmetic; the weights are the same
    tensors, so only the forward pass differs).

    Shapes:
        - input: :math:`(N, C, H, W)`, :math:`C` = ``in_channels``
        - output: :math:`(N, 4 \\cdot \\mathrm{width})` (``feature_dim``)
    """

    def __init__(
        self,
        in_channels: int = 3,
        width: int = 16,
        blocks: tuple[int, int, int] = (2, 2, 2),
        stem_stride: int = 1,
    ) -> None:
        super().__init__()
        if width < 1 or any(b < 1 for b in blocks):
            raise ValueError(f"width and blocks must be positive, got {width}, {blocks}")
        if stem_stride not in (1, 2):
            raise ValueError(f"stem_stride must be 1 or 2, got {stem_stride}")
        self.feature_dim = 4 * width
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, stem_stride, padding=1, bias=False),
            nn.GroupNorm(_groups(width), width),
            nn.ReLU(),
        )
        stages: list[nn.Module] = []
        c_in = width
        for i, (n_blocks, stride) in enumerate(zip(blocks, (1, 2, 2), strict=True)):
            c_out = width * 2**i
            layer: list[nn.Module] = [BasicBlock(c_in, c_out, stride)]
            layer += [BasicBlock(c_out, c_out, 1) for _ in range(n_blocks - 1)]
            stages.append(nn.Sequential(*layer))
            c_in = c_out
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.pool(self.stages(self.stem(x))).flatten(1)
        return out


HeadNorm = Literal["batch", "none"]
"""Normalisation in the projection head's hidden layer: SimCLR's batch norm, or none."""


class ProjectionHead(nn.Module):
    """The projection layer :math:`h` after the features [FADngs Sec. III-A]: a 2-layer MLP,
    linear - BN - ReLU - linear as in SimCLR (Chen et al. 2020, its code's head) with
    ``norm = "batch"``, linear - ReLU - linear with ``norm = "none"``.

    Why the batch norm (``"batch"``, FADngs's default; the older head had none). Group norm in the
    backbone centres no feature across samples: after the last ReLU and the average pooling
    every image shares one large common vector (on Fashion-MNIST at initialisation: mean
    feature norm 9.6 against a per-dimension spread of 0.055), so every :math:`z` points the
    same way (mean pairwise cosine 0.99) and every cosine loss starts at its collapsed value
    :math:`\\log(N - 1)`, where its gradients are tiny. The batch norm of the hidden layer
    subtracts that common vector (per batch in training, by its running mean in
    evaluation) and scales the differences up, so the contrastive losses leave their
    collapsed value in the first steps (docs/methods/fadngs.md, "An encoder that learns").

    In a federation the running mean and variance are part of the model's state and are
    averaged with it (FedAvg): the model is one global model, scored with one global
    density set on every client, so it needs one set of statistics; FedBN's local
    statistics would make it a different function on each client, with densities that
    no longer describe the other clients' representations.

    Shapes:
        - input: :math:`(N, F)`, :math:`N \\geq 2` in training with ``norm = "batch"``
        - output: :math:`(N, D)`, :math:`D` = ``proj_dim``
    """

    def __init__(
        self,
        in_dim: int,
        proj_dim: int = 128,
        hidden_dim: int | None = None,
        norm: HeadNorm = "none",
    ) -> None:
        super().__init__()
        hidden = in_dim if hidden_dim is None else hidden_dim
        layers: list[nn.Module] = [nn.Linear(in_dim, hidden)]
        if norm == "batch":
            layers.append(nn.BatchNorm1d(hidden))
        elif norm != "none":
            raise ValueError(f"unknown head norm {norm!r}")
        self.net = nn.Sequential(*layers, nn.ReLU(), nn.Linear(hidden, proj_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out


class Encoder(nn.Module):
    """:math:`f` and :math:`h` together. ``forward`` returns the features :math:`f(x)`;
    :meth:`project` returns :math:`z(x) = h(f(x))` [FADngs Sec. III-A] and
    :meth:`normalized_projections` :math:`z(x) / \\lVert z(x) \\rVert_2`, the vectors whose dot
    products are the cosine similarities of [FADngs eq. 7, 11, 12].

    Shapes:
        - input: :math:`(N, C, H, W)`, :math:`H, W \\geq 8`
        - ``forward``: :math:`(N, 4 \\cdot \\mathrm{width})`
        - ``project`` / ``normalized_projections``: :math:`(N, D)`, :math:`D` = ``proj_dim``
    """

    def __init__(
        self,
        in_channels: int = 3,
        width: int = 16,
        proj_dim: int = 128,
        blocks: tuple[int, int, int] = (2, 2, 2),
        head_norm: HeadNorm = "none",
        stem_stride: int = 1,
    ) -> None:
        super().__init__()
        self.backbone = ResNet(in_channels, width, blocks, stem_stride)
        self.feature_dim = self.backbone.feature_dim
        self.proj_dim = proj_dim
        self.head = ProjectionHead(self.feature_dim, proj_dim, norm=head_norm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The features :math:`f(x)`."""
        out: torch.Tensor = self.backbone(x)
        return out

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """:math:`z(x) = h(f(x))` [FADngs Sec. III-A], not normalised."""
        out: torch.Tensor = self.head(self.backbone(x))
        return out

    def normalized_projections(self, x: torch.Tensor) -> torch.Tensor:
        """:math:`z(x) / \\lVert z(x) \\rVert_2`, row-wise."""
        return F.normalize(self.project(x), dim=1)
