"""The generic baselines' detectors: autoencoder, Deep SVDD, one-class SVM.

The torch networks are exported as they are (:class:`~fedad.methods.baselines.model.
AutoEncoder` and :class:`~fedad.methods.baselines.model.DeepSVDDNet` compute their own
score); the one-class SVM's decision function is written out (RBF kernel against the support
vectors) in float64, the formula :func:`fedad.methods.baselines.ocsvm.rbf_ocsvm_score`
evaluates.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

from fedad.detector import BaseDetector
from fedad.export.detectors.graphs import WHY as GRAPHS
from fedad.export.registry import Core, NotExportable, register_exporter
from fedad.methods.baselines.detectors import AutoEncoderDetector, DeepSVDDDetector, TorchDetector
from fedad.methods.baselines.ocsvm import OCSVMDetector


def _network(det: TorchDetector) -> nn.Module:
    """A CPU copy of the detector's network in eval mode (the detector is left alone)."""
    if det.kind == "graph":
        raise NotExportable(f"the '{det.registry_name}' detector on graphs cannot be exported "
                            f"to ONNX: {GRAPHS}")  # fmt: skip
    det._ensure_built()
    return copy.deepcopy(det.model_).cpu().eval()


class NetScore(nn.Module):
    """``net.score(x)``: the network's own per-sample score."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net.score(x)  # type: ignore[operator]
        return out


class AutoEncoderMaps(nn.Module):
    """The image autoencoder's score and per-pixel maps, the squared error averaged over
    channels (:meth:`~fedad.methods.baselines.detectors.AutoEncoderDetector.score_maps`)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        recon = self.net(x)
        score = (recon - x).pow(2).flatten(1).mean(1)
        maps = (x - recon).pow(2).mean(dim=1)
        return score, maps


@register_exporter("autoencoder")
def autoencoder(det: BaseDetector, shape: tuple[int, ...]) -> Core:
    assert isinstance(det, AutoEncoderDetector)
    net = _network(det)
    if det.kind == "image":
        return Core(AutoEncoderMaps(net), shape, maps=True)
    return Core(NetScore(net), shape)


@register_exporter("deepsvdd")
def deepsvdd(det: BaseDetector, shape: tuple[int, ...]) -> Core:
    assert isinstance(det, DeepSVDDDetector)
    return Core(NetScore(_network(det)), shape)


class RBFOneClassSVM(nn.Module):
    """Minus the RBF one-class SVM's decision function in float64:
    :math:`-(\\sum_i \\alpha_i e^{-\\gamma \\max(0, \\lVert z\\rVert^2 + \\lVert s_i\\rVert^2 -
    2 z \\cdot s_i)} + \\text{intercept})` of the flattened inputs ``z``."""

    sv_t: torch.Tensor
    sv_sq: torch.Tensor
    coef: torch.Tensor

    def __init__(self, sv: np.ndarray, coef: np.ndarray, intercept: float, gamma: float) -> None:
        super().__init__()
        self.register_buffer("sv_t", torch.from_numpy(np.array(sv, np.float64).T.copy()))
        self.register_buffer("sv_sq", torch.from_numpy((np.asarray(sv, np.float64) ** 2).sum(1)))
        self.register_buffer("coef", torch.from_numpy(np.array(coef, np.float64)))
        self.intercept = float(intercept)
        self.gamma = float(gamma)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = x.double().flatten(1)
        sq = (z**2).sum(1, keepdim=True) + self.sv_sq[None, :] - 2.0 * (z @ self.sv_t)
        k = torch.exp(-self.gamma * torch.clamp(sq, min=0.0))
        return -(k @ self.coef + self.intercept)


@register_exporter("ocsvm")
def ocsvm(det: BaseDetector, shape: tuple[int, ...]) -> Core:
    assert isinstance(det, OCSVMDetector)
    if not det.fitted:
        raise NotExportable("the 'ocsvm' detector is not fitted: there is nothing to export")
    return Core(RBFOneClassSVM(det.sv_, det.coef_, det.intercept_, det.gamma_), shape, "float64")
