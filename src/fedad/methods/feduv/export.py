"""FedUV's detector: minus the cosine between the network's output and the client's own
secret code (:func:`fedad.methods.feduv.model.feduv_score`), float32 as fedad computes it."""

from __future__ import annotations

import copy

import torch
from torch import nn

from fedad.core.detector import BaseDetector
from fedad.export.registry import Core, NotExportable, register_exporter
from fedad.methods.feduv.detector import FedUVDetector
from fedad.methods.feduv.model import feduv_score


class FedUVScore(nn.Module):
    code: torch.Tensor

    def __init__(self, net: nn.Module, code: torch.Tensor) -> None:
        super().__init__()
        self.net = net
        self.register_buffer("code", code.detach().clone().cpu())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return feduv_score(self.net(x), self.code)


@register_exporter("feduv")
def feduv(det: BaseDetector, shape: tuple[int, ...]) -> Core:
    assert isinstance(det, FedUVDetector)
    if not hasattr(det, "code_"):
        raise NotExportable("the 'feduv' detector has no code to export")
    det._ensure_built()
    net = copy.deepcopy(det.model_).cpu().eval()
    return Core(FedUVScore(net, det.code_), shape, scale=1.0)  # minus a cosine
