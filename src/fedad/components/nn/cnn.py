"""Small convolutional encoders and decoders for images of any size (N, C, H, W)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class ConvEncoder(nn.Module):
    """Two stride-2 3x3 convolutions (16, 32 channels) and a linear map to ``latent`` units.

    ``bias=False`` gives the bias-free network Deep SVDD requires (Ruff et al., 2018, Sec. 3.1:
    bias terms let the network map everything to the centre).
    """

    def __init__(
        self, in_shape: tuple[int, int, int], latent: int, bias: bool = True, width: int = 16
    ) -> None:
        super().__init__()
        c, h, w = in_shape
        self.conv = nn.Sequential(
            nn.Conv2d(c, width, 3, stride=2, padding=1, bias=bias),
            nn.LeakyReLU(0.1),
            nn.Conv2d(width, 2 * width, 3, stride=2, padding=1, bias=bias),
            nn.LeakyReLU(0.1),
        )
        self.grid = (math.ceil(math.ceil(h / 2) / 2), math.ceil(math.ceil(w / 2) / 2))
        self.fc = nn.Linear(2 * width * self.grid[0] * self.grid[1], latent, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc(self.conv(x).flatten(1))
        return out


class ConvDecoder(nn.Module):
    """Mirror of :class:`ConvEncoder`: linear, two transposed convolutions, sigmoid output."""

    def __init__(self, latent: int, out_shape: tuple[int, int, int], width: int = 16) -> None:
        super().__init__()
        c, h, w = out_shape
        self.out_hw = (h, w)
        self.grid = (math.ceil(math.ceil(h / 2) / 2), math.ceil(math.ceil(w / 2) / 2))
        self.width = width
        self.fc = nn.Linear(latent, 2 * width * self.grid[0] * self.grid[1])
        self.deconv = nn.Sequential(
            nn.LeakyReLU(0.1),
            nn.ConvTranspose2d(2 * width, width, 4, stride=2, padding=1),
            nn.LeakyReLU(0.1),
            nn.ConvTranspose2d(width, c, 4, stride=2, padding=1),
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        g = self.fc(z).view(z.shape[0], 2 * self.width, *self.grid)
        out = self.deconv(g)
        if tuple(out.shape[-2:]) != self.out_hw:
            out = F.interpolate(out, size=self.out_hw, mode="bilinear", align_corners=False)
        return torch.sigmoid(out)
