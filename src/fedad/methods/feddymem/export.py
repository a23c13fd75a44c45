"""FedDyMem's detector: frozen fused features (averaged over each position's
``neighbourhood`` when that is above 1), the client's projection and memory generator, the
global memory bank's anomaly maps [FedDyMem Sec. IV, Fig. 9]; the score is each map's
maximum. With ``score_norm = "train"`` maps and scores are ``(map - loc) / scale`` in
float32, as fedad computes them."""

from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedad.core.detector import BaseDetector
from fedad.export.detectors.images import PatchMaps, StageFeatures
from fedad.export.registry import Core, NotExportable, register_exporter
from fedad.methods.feddymem.detector import FedDyMemDetector


class NeighbourhoodMean(nn.Module):
    """:func:`fedad.methods.feddymem.detector.neighbourhood_mean`: features averaged over
    each position's ``side`` x ``side`` neighbours inside the map."""

    def __init__(self, features: nn.Module, side: int) -> None:
        super().__init__()
        self.features = features
        self.side = int(side)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.features(x)
        return F.avg_pool2d(f, self.side, stride=1, padding=self.side // 2, count_include_pad=False)


class FedDyMemScore(nn.Module):
    """Features, the memory network, the maps (normalised when calibrated), the score."""

    def __init__(
        self, features: nn.Module, net: nn.Module, maps: PatchMaps, norm: tuple[float, float]
    ) -> None:
        super().__init__()
        self.features = features
        self.net = net
        self.maps = maps
        self.loc, self.scale = (float(np.float32(v)) for v in norm)
        self.normalise = norm != (0.0, 1.0)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        maps = self.maps(self.net(self.features(x)))
        if self.normalise:
            maps = (maps - self.loc) / self.scale
        return maps.flatten(1).amax(dim=1).double(), maps


@register_exporter("feddymem")
def feddymem(det: BaseDetector, shape: tuple[int, ...]) -> Core:
    assert isinstance(det, FedDyMemDetector)
    if not hasattr(det, "bank_"):
        raise NotExportable("the 'feddymem' detector has no memory bank to export")
    if len(shape) != 3:
        raise NotExportable(f"the 'feddymem' detector takes images, not data of shape {shape}")
    ext = det.extractor()
    features: nn.Module = StageFeatures(ext.net(), ext.stages, shape, ext.size)
    if det.params.neighbourhood > 1:
        features = NeighbourhoodMean(features, det.params.neighbourhood)
    maps = PatchMaps(
        det.bank_, ext.side * ext.side, (int(shape[1]), int(shape[2])), det.params.sigma
    )
    det._ensure_built()
    net = copy.deepcopy(det.net_).cpu().eval()
    norm, scale = (0.0, 1.0), 0.0
    if det.params.score_norm == "train" and hasattr(det, "score_scale_"):
        norm = (det.score_loc_, det.score_scale_)
        scale = abs(det.score_loc_) / det.score_scale_  # raw maps' size, in normalised units
    module = FedDyMemScore(features, net, maps, norm)
    return Core(module, shape, "float64", maps=True, scale=scale)
