"""ONLAD's OS-ELM autoencoder: a few float64 matrix products [ONLAD eq. 1].

:math:`z = (x - \\text{shift}) / \\text{scale}` (when a scaling is set), :math:`H =
\\sigma(z\\alpha + b)` with the sigmoid written as fedad writes it, :math:`0.5(1 + \\tanh(u /
2))`, and the score :math:`\\lVert z - H\\beta \\rVert^2 / n`, all in float64 as fedad computes
them."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from fedad.core.detector import BaseDetector
from fedad.export.registry import Core, register_exporter
from fedad.methods.onlad.detector import OSELMAutoEncoder


def _buffer(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(a, dtype=np.float64, copy=True))


class OSELMScore(nn.Module):
    """The OS-ELM autoencoder's reconstruction error, float64."""

    alpha: torch.Tensor
    bias: torch.Tensor
    beta: torch.Tensor
    shift: torch.Tensor
    scale: torch.Tensor

    def __init__(self, det: OSELMAutoEncoder) -> None:
        super().__init__()
        self.register_buffer("alpha", _buffer(det.alpha_))
        self.register_buffer("bias", _buffer(det.bias_))
        self.register_buffer("beta", _buffer(det.beta_))
        self.scaled = hasattr(det, "shift_")
        if self.scaled:
            self.register_buffer("shift", _buffer(det.shift_))
            self.register_buffer("scale", _buffer(det.scale_))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = x.double().flatten(1)
        if self.scaled:
            z = (z - self.shift) / self.scale
        h = 0.5 * (1.0 + torch.tanh(0.5 * (z @ self.alpha + self.bias)))
        return ((z - h @ self.beta) ** 2).mean(dim=1)


@register_exporter("oselm-autoencoder")
def oselm(det: BaseDetector, shape: tuple[int, ...]) -> Core:
    assert isinstance(det, OSELMAutoEncoder)
    return Core(OSELMScore(det), shape, "float64")
