"""Multi-layer perceptrons for vector data."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class MLP(nn.Sequential):
    """``Linear -> act`` blocks ending in a plain ``Linear`` (no activation on the output)."""

    def __init__(self, dims: Sequence[int], bias: bool = True, act: type[nn.Module] = nn.ReLU):
        layers: list[nn.Module] = []
        for i in range(len(dims) - 1):
            layers.append(nn.Linear(dims[i], dims[i + 1], bias=bias))
            if i < len(dims) - 2:
                layers.append(act())
        super().__init__(*layers)


def default_latent(dim: int) -> int:
    """Bottleneck size for ``dim`` input features: a third of them, between 2 and 32."""
    return max(2, min(32, dim // 3))


def flatten(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(x.shape[0], -1)
